"""A tiny training loop with a slow leak, run by ``memforensics demo``.

The demo copies this file into its output folder as ``demo_train.py`` and runs it from there, so
the frames in the dumps point at a script the user can open, exactly like their own code would.
On CUDA / NPU it trains a real model under a per-process memory cap so it fails in seconds; on
the ``sim`` device it drives the simulated caching allocator the same way, with a sim model and
Adam. Either way it tracks its model and optimizer (``mf.track``), so the dumps label their
parameters, gradients and optimizer state as known, not guessed.
"""

from __future__ import annotations

import os
import sys
from typing import Any

import memforensics

MiB = 1 << 20
RESULT: dict[str, Any] = {}


def leak_until_oom_sim(mf: memforensics.MemoryForensics) -> int:
    """Simulated training: a tracked model and Adam, activations, and a metrics list that never
    shrinks."""
    from memforensics.backends.sim import SimAdam, SimModule, SimOutOfMemoryError, get_device

    device = get_device()
    shapes = {"embed.weight": 4, "layers.0.weight": 3, "layers.1.weight": 3, "head.weight": 4}
    model = SimModule(device, {name: mib * MiB for name, mib in shapes.items()})
    optimizer = SimAdam(model.parameters(), device)
    mf.track(model=model, optimizer=optimizer)  # their kinds are known, not guessed
    history = []  # the leak: per-step "metrics" kept on the device
    # Gradients are zeroed in place (torch's ``zero_grad(set_to_none=False)``), which on the sim
    # device changes nothing: their blocks stay from the first backward on.
    step = 0
    try:
        while step < 10_000:
            with mf.step(step):
                activations = forward(device)
                backward(device, activations)
                model.backward()
                optimizer.step()
                history.append(keep_metrics(device, step))
            step += 1
    except SimOutOfMemoryError as exc:
        RESULT["error"] = str(exc).splitlines()[0]
    return step


def forward(device: Any) -> list[Any]:
    """Activations of a few layers, of varied sizes (they fragment the cache)."""
    return [device.empty((3 + layer % 3) * MiB + layer * 4096) for layer in range(6)]


def backward(device: Any, activations: list[Any]) -> None:
    """Gradients are allocated while activations are released, layer by layer."""
    for activation in reversed(activations):
        gradient = device.empty(activation.nbytes // 2)
        activation.free()
        gradient.free()


def keep_metrics(device: Any, step: int) -> Any:
    """The bug: a per-step tensor kept alive in a Python list."""
    return device.empty(5 * MiB + (step % 4) * 512 * 1024)


def leak_until_oom_torch(mf: memforensics.MemoryForensics, device_name: str, cap: int) -> int:
    """Real training on CUDA or NPU under a per-process memory cap, leaking activations."""
    import torch

    if device_name == "npu":
        import torch_npu

        accel: Any = torch_npu.npu
    else:
        accel = torch.cuda
    dev = torch.device(device_name, accel.current_device())
    total = accel.mem_get_info()[1]
    accel.set_per_process_memory_fraction(min(cap / total, 1.0))
    model = torch.nn.Sequential(
        torch.nn.Linear(2048, 4096), torch.nn.ReLU(), torch.nn.Linear(4096, 2048)
    ).to(dev)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    mf.track(model=model, optimizer=optimizer)  # their kinds are known, not guessed
    kept = []  # the leak: activations kept for "debugging", never released
    step = 0
    try:
        while step < 10_000:
            with mf.step(step):
                batch = torch.randn(2048, 2048, device=dev)
                out = model(batch)
                loss = out.float().pow(2).mean()
                loss.backward()
                optimizer.step()
                optimizer.zero_grad(set_to_none=True)
                kept.append(out.detach().clone())
            step += 1
    except torch.OutOfMemoryError as exc:
        RESULT["error"] = str(exc).splitlines()[0]
    except RuntimeError as exc:  # torch_npu raises plain RuntimeErrors on OOM
        if "out of memory" not in str(exc).lower():
            raise
        RESULT["error"] = str(exc).splitlines()[0]
    del kept
    accel.empty_cache()
    return step


def main() -> None:
    """Run the leaky loop with forensics installed (steps=2) and record what happened."""
    device = os.environ.get("MEMFORENSICS_DEMO_DEVICE", "sim")
    out_dir = os.environ.get("MEMFORENSICS_DEMO_OUT", "memforensics-demo")
    if device == "sim":
        from memforensics.backends.sim import reset_device

        reset_device(total_bytes=256 * MiB)  # a fresh device first: install() observes it
    mf = memforensics.install(steps=2, device=device, out_dir=out_dir, max_oom_snapshots=1)
    if device == "sim":
        steps = leak_until_oom_sim(mf)
    else:
        steps = leak_until_oom_torch(mf, device, cap=2 << 30)
    mf.close()
    RESULT.update(steps=steps, dumps=[str(path) for path in mf.dumps], rank=mf.rank)


if __name__ == "__main__":
    main()
    sys.stdout.flush()
