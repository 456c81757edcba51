"""An ODE solved in many tiny steps: the shape of torchdiffeq's adaptive Runge-Kutta loop.

A 2-dimensional state of 16 trajectories stepped by an embedded Runge-Kutta pair (Bogacki and
Shampine's, four evaluations of a cubic vector field a step), each step's error norm read back
with ``.item()`` to accept it and size the next, as an adaptive solver does: some forty tiny
operators a step, and three allocator events for each block, so a thousand steps keep a
trace of more than 100,000 events. On CUDA the script records the allocator's history and dumps
a snapshot at its end; ``--device cpu`` runs the same loop on the CPU, the reference a plan of it
is compared with.

    memforensics plan benchmarks/plan_scripts/long_trace.py [--steps N]
    python benchmarks/plan_scripts/long_trace.py --device cpu [--steps N]
"""

from __future__ import annotations

import argparse

import torch


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--steps", type=int, default=2000)
    args = parser.parse_args()
    device = torch.device(args.device)
    on_cuda = device.type == "cuda"
    if on_cuda:
        torch.cuda.memory._record_memory_history(max_entries=1_000_000)
    matrix = torch.tensor([[-0.1, 2.0], [-2.0, -0.1]], device=device)
    state = torch.linspace(0.5, 2.0, 32, device=device).reshape(16, 2)

    def field(y: torch.Tensor) -> torch.Tensor:
        return torch.mm(y**3, matrix)

    step, accepted = 0.01, 0
    for _ in range(args.steps):
        k1 = field(state)
        k2 = field(state + 0.5 * step * k1)
        k3 = field(state + 0.75 * step * k2)
        new = state + step * (2 / 9 * k1 + 1 / 3 * k2 + 4 / 9 * k3)
        k4 = field(new)
        error = step * (-5 / 72 * k1 + 1 / 12 * k2 + 1 / 9 * k3 - 1 / 8 * k4)
        ratio = (error.abs() / (1e-6 + 1e-3 * new.abs())).pow(2).mean().sqrt().item()
        if ratio <= 1.0:
            state, accepted = new, accepted + 1
        step *= min(5.0, max(0.2, 0.9 * max(ratio, 1e-10) ** (-1 / 3)))
    if on_cuda:
        torch.cuda.memory._dump_snapshot("long_trace.pickle")
    print(accepted, f"{state.abs().sum().item():.6f}")


if __name__ == "__main__":
    main()
