import torch

from deepspeed.ops.op_builder import FusedAdamBuilder


class FusedAdam(torch.optim.Optimizer):
    def __init__(
        self,
        params,
        lr=1e-3,
        bias_correction=True,
        betas=(0.9, 0.999),
        eps=1e-8,
        adam_w_mode=True,
        weight_decay=0.0,
        amsgrad=False,
        set_grad_none=True,
    ):
        defaults = dict(
            lr=lr, bias_correction=bias_correction, betas=betas, eps=eps, weight_decay=weight_decay
        )
        super().__init__(params, defaults)
        self.adam_w_mode = 1 if adam_w_mode else 0
        fused_adam_cuda = FusedAdamBuilder().load()
        self._dummy_overflow_buf = torch.cuda.IntTensor([0])
        self.multi_tensor_adam = fused_adam_cuda.multi_tensor_adam

    def step(self, closure=None):
        for group in self.param_groups:
            beta1, beta2 = group["betas"]
            g_32, p_32, m_32, v_32 = [], [], [], []
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]
                if len(state) == 0:
                    state["step"] = 0
                    state["exp_avg"] = torch.zeros_like(p.data)
                    state["exp_avg_sq"] = torch.zeros_like(p.data)
                g_32.append(p.grad.data)
                p_32.append(p.data)
                m_32.append(state["exp_avg"])
                v_32.append(state["exp_avg_sq"])
            if g_32:
                state["step"] += 1
                self.multi_tensor_adam(
                    2048 * 32,
                    self._dummy_overflow_buf,
                    [g_32, p_32, m_32, v_32],
                    group["lr"],
                    beta1,
                    beta2,
                    group["eps"],
                    state["step"],
                    self.adam_w_mode,
                    1 if group["bias_correction"] else 0,
                    group["weight_decay"],
                )
