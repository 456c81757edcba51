"""A training script that installs at module level and starts workers: which of them capture?

Usage: ``worker_children.py OUT REPORTS METHOD [distributed]``. ``install()`` runs at import,
as many scripts do, so a spawn or forkserver worker that re-imports this file runs it too; every
child also calls
``install()`` itself (a DataLoader ``worker_init_fn``, a ``ProcessPoolExecutor`` task), so a fork
child meets it as well. Each child writes ``REPORTS/<role>-<pid>.json`` with what its facade
says. Pool children are started with ``METHOD``: a plain one (a worker: inert), one that passes
``rank=1`` (captures as rank 1) and, with ``distributed``, one that initialises
``torch.distributed`` first (an ``mp.spawn`` rank: captures as its distributed rank, 0).
"""

from __future__ import annotations

import json
import multiprocessing
import os
import sys
from concurrent.futures import ProcessPoolExecutor
from typing import Any

import memforensics

OUT, REPORTS, METHOD = sys.argv[1], sys.argv[2], sys.argv[3]
DISTRIBUTED = sys.argv[4:] == ["distributed"]
CONFIG: dict[str, Any] = {"device": "sim", "out_dir": OUT, "journal_every": 1}
mf = memforensics.install(**CONFIG)


def report(role: str, **extra: Any) -> bool:
    """Install as the script does (plus ``extra``), take one step, write what the facade says."""
    facade = memforensics.install(**CONFIG, **extra)
    with facade.step(0):
        pass
    status = facade.status
    found = {"pid": os.getpid(), "rank": facade.rank, "capturing": status.capturing}
    with open(os.path.join(REPORTS, f"{role}-{os.getpid()}.json"), "w") as handle:
        json.dump({**found, "inert": status.inert}, handle)
    facade.close()
    return status.capturing


def loader_worker(_worker_id: int) -> None:
    """The DataLoader's ``worker_init_fn``."""
    report("loader")


def pool_child() -> bool:
    """A plain ProcessPoolExecutor task."""
    return report("pool")


def ranked_child() -> bool:
    """A child that names its rank."""
    return report("ranked", rank=1)


def distributed_child(store: str) -> bool:
    """A child that is a rank of a process group (as ``mp.spawn`` starts them)."""
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"file://{store}", rank=0, world_size=1)
    try:
        return report("distributed")
    finally:
        dist.destroy_process_group()


def main() -> None:
    """Run a tiny DataLoader with two workers, then the pool children, one at a time."""
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    context = multiprocessing.get_context(METHOD)
    data = TensorDataset(torch.arange(8))
    loader = DataLoader(
        data,
        batch_size=2,
        num_workers=2,
        multiprocessing_context=context,
        worker_init_fn=loader_worker,
    )
    for step, _batch in enumerate(loader):
        with mf.step(step):
            pass
    tasks: list[tuple[Any, tuple[str, ...]]] = [(pool_child, ()), (ranked_child, ())]
    if DISTRIBUTED:
        tasks.append((distributed_child, (os.path.join(REPORTS, "store"),)))
    for task, args in tasks:
        with ProcessPoolExecutor(1, mp_context=context) as pool:
            pool.submit(task, *args).result()
    mf.close()


if __name__ == "__main__":
    main()
