"""Two AdamW steps of a few ``Linear`` layers under DDP or FSDP2, measuring its own second step.

Run for real (one rank, NCCL) or under ``memforensics plan --nproc-per-node 1``, the script
writes the same figures to OUT: the peak allocated and reserved bytes of the second step (the
peak counters reset before it), so the real device and the planned one answer one question.
The second step starts half a second after the first ends: NCCL's watchdog thread, looking every
100 ms, has then dropped what the first step's all-reduces kept alive (DDP's first buckets,
which the second forward replaces), so the step is measured from a known state.

    python benchmarks/plan_scripts/distributed_step.py {ddp,fsdp2} OUT
"""

from __future__ import annotations

import json
import os
import sys
import time

import torch
import torch.distributed as dist

WIDTH = 1024
SETTLE_SECONDS = 0.5
"""Wait before the measured step: five of the NCCL watchdog's 100 ms looks."""


def build(strategy: str) -> torch.nn.Module:
    """Four Linear layers on the rank's device, wrapped by DDP or sharded by FSDP2."""
    layers = [torch.nn.Linear(WIDTH, 4 * WIDTH), torch.nn.ReLU(), torch.nn.Linear(4 * WIDTH, WIDTH)]
    layers += [torch.nn.Linear(WIDTH, 4 * WIDTH), torch.nn.Linear(4 * WIDTH, WIDTH)]
    model = torch.nn.Sequential(*layers).cuda()
    if strategy == "ddp":
        from torch.nn.parallel import DistributedDataParallel

        return DistributedDataParallel(model, device_ids=[torch.cuda.current_device()])
    from torch.distributed.fsdp import fully_shard

    for layer in model:
        if isinstance(layer, torch.nn.Linear):
            fully_shard(layer)
    fully_shard(model)
    return model


def main(strategy: str, out: str) -> None:
    """Two steps; the second one's peaks written to ``out``."""
    dist.init_process_group("nccl")
    torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    model = build(strategy)
    opt = torch.optim.AdamW(model.parameters())
    x = torch.randn(64, WIDTH, device="cuda")
    figures = {}
    for number in (1, 2):
        if number == 2:
            torch.cuda.synchronize()
            time.sleep(SETTLE_SECONDS)
            torch.cuda.reset_peak_memory_stats()
        model(x).sum().backward()
        opt.step()
        opt.zero_grad()
    torch.cuda.synchronize()
    figures["peak_allocated"] = torch.cuda.max_memory_allocated()
    figures["peak_reserved"] = torch.cuda.max_memory_reserved()
    figures["world_size"] = dist.get_world_size()
    with open(out, "w") as handle:
        json.dump(figures, handle)
    dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
