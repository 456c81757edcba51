"""Worker processes on the planned device: a ``multiprocessing`` process the script starts with
device tensors among what it hands the process (Hogwild training: ``model.share_memory()``,
then ``torch.multiprocessing.Process(target=train, args=(rank, model, ...))`` per worker).

On a GPU the worker is a fresh interpreter (``spawn`` or ``forkserver``: CUDA cannot be used in
a forked child) that receives its arguments pickled by ``torch.multiprocessing``'s reductions:
a CUDA tensor arrives by IPC as a new tensor over the same device memory
(``torch/multiprocessing/reductions.py``, ``reduce_tensor``), allocating nothing, and a CPU
tensor's storage moves to shared memory, so both processes see one storage. What the worker
then allocates (activations, gradients, optimizer state) goes through its own caching
allocator with its own CUDA context, and goes back to the device when the process ends.

Planned, the worker runs in the plan's own process when it is started, to its end: its
arguments are handed over as the pickling would (every tensor a new one over the same storage,
everything else a copy, ``multiprocessing``'s own objects such as queues and locks as they
are), on an allocator of its own (:meth:`PlannedDevice.begin_worker`), and its memory is held
on the device until it is joined, as the workers of a GPU run hold theirs at once.
"""

from __future__ import annotations

import io
import itertools
import multiprocessing
import os
import pickle
import sys
import traceback
from collections.abc import Callable
from multiprocessing import process as mp_process
from typing import Any

import torch

from memforensics.plan import standins
from memforensics.plan.device import PlannedDevice
from memforensics.plan.emulate import StorageMode

PLANNED = (
    "the script's worker processes that get device tensors (multiprocessing's Process, started "
    "with spawn or forkserver) ran in the plan one after another, each on its own caching "
    "allocator and CUDA context, their memory held on the device until joined, as if they "
    "peaked at once; the figures above are the script's own process's"
)
"""Said once where a worker process is planned."""

_LOADER = "torch.utils.data._utils.worker"
"""DataLoader's worker processes: they load host data and run outside the plan."""

_OWN = (
    "_config",
    "_parent_pid",
    "_parent_name",
    "_popen",
    "_closed",
    "_identity",
    "_name",
    "_target",
    "_args",
    "_kwargs",
)


class _Ended:
    """The ``Popen`` of a worker process that ran to its end in the plan: its exit code."""

    def __init__(self, returncode: int) -> None:
        self.returncode = returncode
        self.pid = os.getpid()
        self.sentinel = -1

    def poll(self, flag: int = 0) -> int:
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        return self.returncode

    def terminate(self) -> None:
        """Nothing left to end."""

    def kill(self) -> None:
        """Nothing left to end."""

    def close(self) -> None:
        """Nothing left to release."""


def handed_over(value: Any, held: Callable[[torch.Tensor], bool]) -> tuple[Any, bool]:
    """``value`` as a spawned process receives it, and whether it holds a device tensor: each
    tensor a new one over the same storage (with its ``requires_grad``; a parameter stays a
    parameter), ``multiprocessing``'s objects the same, everything else a copy. A value that
    cannot be pickled raises pickle's error, as ``Process.start`` does on a GPU."""
    kept: list[Any] = []
    index: dict[int, int] = {}
    device = False

    class Sending(pickle.Pickler):
        def persistent_id(self, obj: Any) -> tuple[str, int] | None:
            nonlocal device
            if isinstance(obj, torch.Tensor):
                device = device or held(obj)
                kind = "tensor"
            elif type(obj).__module__.startswith("multiprocessing"):
                kind = "same"
            else:
                return None
            if id(obj) not in index:
                index[id(obj)] = len(kept)
                kept.append(obj)
            return kind, index[id(obj)]

    made: dict[int, Any] = {}

    class Receiving(pickle.Unpickler):
        def persistent_load(self, pid: Any) -> Any:
            kind, at = pid
            if kind == "same":
                return kept[at]
            if at not in made:
                made[at] = _over_same_storage(kept[at])
            return made[at]

    buffer = io.BytesIO()
    Sending(buffer, protocol=pickle.HIGHEST_PROTOCOL).dump(value)
    buffer.seek(0)
    return Receiving(buffer).load(), device


def _over_same_storage(tensor: torch.Tensor) -> torch.Tensor:
    """A new tensor over ``tensor``'s storage, as ``reduce_tensor`` rebuilds one."""
    data = tensor.detach()
    if isinstance(tensor, torch.nn.Parameter):
        return torch.nn.Parameter(data, requires_grad=tensor.requires_grad)
    return data.requires_grad_(tensor.requires_grad) if tensor.is_leaf else data


def _start_method(process: Any) -> str:
    method = getattr(process, "_start_method", None)
    return str(method or multiprocessing.get_start_method())


def _exit_code(code: object) -> int:
    """``SystemExit``'s code as ``BaseProcess._bootstrap`` makes it the exit code."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    sys.stderr.write(str(code) + "\n")
    return 1


class Workers:
    """``BaseProcess.start`` and ``join`` for worker processes on the planned device."""

    def __init__(
        self,
        device: PlannedDevice,
        storage: StorageMode,
        say: Callable[[str, str], None],
    ) -> None:
        self.device = device
        self.storage = storage
        self.held = standins.on_device(storage.address)
        self.say = say
        self.start_original: Callable[[Any], None] = mp_process.BaseProcess.start
        self.join_original: Callable[..., None] = mp_process.BaseProcess.join

    def start(self, process: Any) -> None:
        """Run ``process`` here to its end where it is a worker on the device, else start it."""
        target = getattr(process, "_target", None)
        if _start_method(process) == "fork" or getattr(target, "__module__", "") == _LOADER:
            self.start_original(process)
            return
        public = {k: v for k, v in vars(process).items() if k not in _OWN}
        sent = (process._args, process._kwargs, public)
        (args, kwargs, state), device = handed_over(sent, self.held)
        if not device:
            self.start_original(process)
            return
        self.say("workers", PLANNED)
        kept = (process._args, process._kwargs, public)
        process._args, process._kwargs = args, kwargs
        vars(process).update(state)
        try:
            code = self._run(process)
        finally:
            process._args, process._kwargs = kept[0], kept[1]
            vars(process).update(kept[2])
        process._popen = _Ended(code)
        process._memforensics_worker = True
        mp_process._children.add(process)  # type: ignore[attr-defined]  # not in the stub

    def _run(self, process: Any) -> int:
        """``process.run()`` on its own allocator, its exception printed as
        ``BaseProcess._bootstrap`` prints it (a predicted OOM kept with its figures): the
        exit code."""
        device = self.device
        stream = device.stream
        device.begin_worker(process.name)
        counter = mp_process._process_counter  # type: ignore[attr-defined]  # not in the stub
        mp_process._process_counter = itertools.count(1)  # type: ignore[attr-defined]
        oom: str | None = None
        code = 0
        try:
            with self.storage.own_workspaces():
                process.run()
        except SystemExit as exc:
            code = _exit_code(exc.code)
        except Exception as exc:  # noqa: BLE001 - the process ends with it, as on a GPU
            if isinstance(exc, torch.cuda.OutOfMemoryError):
                oom = str(exc)
            sys.stderr.write(f"Process {process.name}:\n")
            traceback.print_exc()
            code = 1
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            device.end_worker(oom)
            device.stream = stream
            mp_process._process_counter = counter  # type: ignore[attr-defined]
        return code

    def join(self, process: Any, timeout: float | None = None) -> None:
        """``join``: a planned worker's memory is the device's again once joined."""
        self.join_original(process, timeout)
        if getattr(process, "_memforensics_worker", False):
            self.device.joined(process.name)
