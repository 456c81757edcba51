"""One rank of a distributed job on the planned device: ``torch.distributed`` on torch's own fake
process group, and NCCL's buffers outside PyTorch as an allowance.

The rank and the world come from torchrun's environment (``RANK``, ``WORLD_SIZE``,
``LOCAL_RANK``, ``LOCAL_WORLD_SIZE``), which ``plan --nproc-per-node`` sets for the script as
torchrun would. ``init_process_group`` is answered by initialising the fake group
(``torch.testing._internal.distributed.fake_pg``, backend ``"fake"``: collectives complete at
once and return the tensors they were given, of the right shapes, without moving data) with that
rank and world size, whatever backend and rendezvous the script asks for. What a collective
allocates on the device is allocated by PyTorch's own Python (FSDP's all-gather output, DDP's
buckets), so it reaches the allocator model as any storage does, on the stream current then.
"""

from __future__ import annotations

import inspect
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import timedelta
from functools import partial
from typing import TYPE_CHECKING, Any

from memforensics._units import format_bytes
from memforensics.plan.device import OutOfScope
from memforensics.plan.patches import LibraryReplacement

if TYPE_CHECKING:
    from memforensics.plan.values import Notes

NCCL_BUFFSIZE = 4 << 20
"""NCCL's documented default ``NCCL_BUFFSIZE``: 4,194,304 B per connection's buffer."""
NCCL_CHANNELS = 32
"""Channels assumed per communicator: NCCL's documented default ``NCCL_MAX_NCHANNELS`` (the
number NCCL picks depends on the topology; ``NCCL_MIN_NCHANNELS``/``NCCL_MAX_NCHANNELS`` set it)."""
RING_PEERS = 2
"""A ring channel connects each rank to two peers: it receives from one and sends to the other."""
NCCL_TIMEOUT = timedelta(minutes=10)
"""``ProcessGroupNCCL``'s default timeout (``kProcessGroupNCCLDefaultTimeout``), which a CUDA
build exports as ``torch.distributed.constants.default_pg_nccl_timeout``."""


@dataclass(frozen=True, slots=True)
class World:
    """Where the planned rank sits: its global and local rank, the world's and the node's
    size."""

    rank: int
    world_size: int
    local_rank: int
    local_world_size: int

    @classmethod
    def of(cls, nproc_per_node: int, nnodes: int, rank: int) -> World:
        """Rank ``rank`` of ``nnodes`` nodes of ``nproc_per_node`` processes (ValueError for a
        rank outside the world)."""
        if nproc_per_node < 1 or nnodes < 1:
            raise ValueError("--nproc-per-node and --nnodes must be at least 1")
        size = nproc_per_node * nnodes
        if not 0 <= rank < size:
            raise ValueError(f"--rank {rank} is outside a world of {size} ranks (0 to {size - 1})")
        return cls(rank, size, rank % nproc_per_node, nproc_per_node)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> World:
        """The world torchrun's variables describe; one rank of one when they are unset."""
        env = os.environ if environ is None else environ

        def number(name: str, default: int) -> int:
            text = env.get(name, "").strip()
            try:
                return int(text) if text else default
            except ValueError:
                return default

        size = max(number("WORLD_SIZE", 1), 1)
        rank = min(max(number("RANK", 0), 0), size - 1)
        local_size = max(number("LOCAL_WORLD_SIZE", size), 1)
        local = min(max(number("LOCAL_RANK", rank % local_size), 0), local_size - 1)
        return cls(rank, size, local, local_size)

    def env(self) -> dict[str, str]:
        """The variables torchrun sets for this rank."""
        return {
            "RANK": str(self.rank),
            "WORLD_SIZE": str(self.world_size),
            "LOCAL_RANK": str(self.local_rank),
            "LOCAL_WORLD_SIZE": str(self.local_world_size),
            "GROUP_RANK": str(self.rank // self.local_world_size),
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": "29500",
            "TORCHELASTIC_RUN_ID": "memforensics-plan",
        }


def nccl_bytes(group_size: int, environ: Mapping[str, str] | None = None) -> int:
    """NCCL's own device buffers for one communicator of ``group_size`` ranks, outside
    PyTorch's allocator: ``NCCL_BUFFSIZE`` x channels x ring peers (none for a group of one,
    which NCCL does not connect)."""
    if group_size < 2:
        return 0
    env = os.environ if environ is None else environ

    def number(name: str, default: int) -> int:
        try:
            return max(int(env.get(name, "")), 1)
        except ValueError:
            return default

    buffsize = number("NCCL_BUFFSIZE", NCCL_BUFFSIZE)
    channels = number("NCCL_MIN_NCHANNELS", number("NCCL_MAX_NCHANNELS", NCCL_CHANNELS))
    peers = min(group_size - 1, RING_PEERS)
    return buffsize * channels * peers


def fake_init(original: Callable[..., None], communicators: Communicators) -> Callable[..., None]:
    """``init_process_group`` answered by the fake group with the planned rank and world size
    (from torchrun's variables), whatever backend, rendezvous and world the script names (the
    backend it names is the one ``get_backend()`` answers, :func:`counted_groups`); a
    ``device_id`` binds the groups to the device, so NCCL forms their communicators as they
    are made (:class:`Communicators`)."""

    def init_process_group(
        backend: Any = None,
        init_method: Any = None,
        timeout: Any = None,
        world_size: int = -1,
        rank: int = -1,
        store: Any = None,
        group_name: str = "",
        pg_options: Any = None,
        device_id: Any = None,
        **kwargs: Any,
    ) -> None:
        from torch.testing._internal.distributed.fake_pg import FakeStore

        world = World.from_env()
        communicators.bound = device_id is not None
        communicators.default = _default_backend(backend, device_id)
        options: dict[str, Any] = {"group_name": group_name} if group_name else {}
        if timeout is not None:
            options["timeout"] = timeout
        original(
            backend=FAKE,
            store=FakeStore(),
            rank=world.rank,
            world_size=world.world_size,
            **options,
        )

    return init_process_group


def counted_groups(
    original: Callable[..., Any], communicators: Communicators
) -> Callable[..., Any]:
    """``_new_process_group_helper``: every group is made on the fake backend, whatever backend
    the script names for it (``new_group(ranks, backend="gloo")``, Megatron's CPU groups beside
    its NCCL ones; ``"nccl"``, which the CPU build lacks), as the default group is
    (:func:`fake_init`). Each group of two or more ranks this rank belongs to that talks
    through NCCL (the default group's backend, or one naming ``nccl``) is an NCCL communicator
    on a GPU (:class:`Communicators`); a Gloo or MPI group has none there. Every rank calls it
    for every new group (a device mesh's for each of its dimensions' slices); for a group
    without this rank, torch makes no communicator and answers
    ``GroupMember.NON_GROUP_MEMBER`` (its group rank is then ``None``).

    Torch's map of groups records the backend the script named, so ``dist.get_backend(group)``
    answers it as on a GPU (``"nccl"``, ``"gloo"``; ``"undefined"`` for a default group named
    by neither backend nor device), and what a script or library decides by it (Lightning's
    ``barrier(device_ids=...)`` for NCCL, its ``no_grad`` for Gloo; a sharded tensor's
    preferred device) is decided as there; a subgroup named by no backend takes the default
    group's, as torch resolves it."""
    from torch.distributed import Backend
    from torch.distributed.distributed_c10d import GroupMember, _world

    named = inspect.signature(original).parameters
    at = list(named).index("backend")

    def new_group(*args: Any, **kwargs: Any) -> Any:
        bound = list(args)
        if len(bound) > at:
            asked = bound[at]
            bound[at] = FAKE
        else:
            asked = kwargs.get("backend")
            kwargs["backend"] = FAKE
        if str(asked) == FAKE:
            asked = communicators.default
        size = bound[0] if bound else kwargs["group_size"]
        made = original(*bound, **kwargs)
        group = made[0] if isinstance(made, tuple) else made
        if group is not GroupMember.NON_GROUP_MEMBER:
            _world.pg_map[group] = (Backend(str(asked)), _world.pg_map[group][1])
            if _through_nccl(asked):
                communicators.made(group.group_name, int(size))
        return made

    return new_group


class Communicators:
    """The planned rank's NCCL communicators, whose buffers ``outside`` takes off the device
    when NCCL forms them. ``ProcessGroupNCCL`` forms a group's communicator at the group's
    first collective (its lazy initialisation), so a group the script makes and never uses
    (Megatron-core makes a dozen, most idle in a given run) holds nothing; where
    ``init_process_group`` was given a ``device_id``, the groups are bound to the device and
    each communicator is formed as its group is made (eager initialisation, and
    ``ncclCommSplit`` for the groups after the first)."""

    def __init__(self, outside: Callable[[int], None]) -> None:
        self.outside = outside
        self.bound = False
        """Whether the default group was bound to a device (``device_id``)."""
        self.default = UNDEFINED
        """The backend the script named for the default group, as torch resolves it."""
        self._waiting: dict[str, int] = {}
        """Groups made without their communicator yet, by name: their sizes."""
        self._where: dict[Any, tuple[int, str, bool] | None] = {}
        """Each collective operator's group argument: position, name, and whether it is the
        group itself (``c10d``) or its name (``_c10d_functional``); None for other operators."""

    def made(self, name: str, size: int) -> None:
        """Group ``name`` of ``size`` ranks, this rank among them, was made."""
        if self.bound:
            self.outside(nccl_bytes(size))
        else:
            self._waiting[name] = size

    def ran(self, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        """Operator ``func`` ran: where it is a collective on a group whose communicator is not
        formed yet, NCCL forms it now."""
        if not self._waiting:
            return
        if func in self._where:
            where = self._where[func]
        else:
            where = self._where[func] = _group_argument(func)
        if where is None:
            return
        at, name, whole = where
        value = args[at] if at < len(args) else kwargs.get(name)
        if whole:
            from torch.distributed import ProcessGroup

            value = ProcessGroup.unbox(value).group_name
        size = self._waiting.pop(str(value), None)
        if size is not None:
            self.outside(nccl_bytes(size))


COLLECTIVES = ("c10d", "_c10d_functional")
"""Namespaces of the operators a collective runs as: the process group's own (``c10d::allreduce_``,
which ``dist.all_reduce`` dispatches) and the functional collectives' (DTensor's)."""


def _group_argument(func: Any) -> tuple[int, str, bool] | None:
    """Where ``func`` takes its process group, if it is a collective (:data:`COLLECTIVES`)."""
    schema = getattr(func, "_schema", None)
    if schema is None or schema.name.split("::")[0] not in COLLECTIVES:
        return None
    for at, argument in enumerate(schema.arguments):
        if str(argument.type).endswith("ProcessGroup"):
            return at, argument.name, True
        if argument.name == "group_name":
            return at, argument.name, False
    return None


FAKE = "fake"
"""torch's fake process group's backend, on which the plan makes every group."""

UNDEFINED = "undefined"
"""The backend torch records for a default group named by neither backend nor device: each
device's default backend (NCCL for CUDA) forms lazily."""


def _default_backend(backend: Any, device_id: Any) -> str:
    """The backend ``init_process_group`` records on a GPU for what the script named: its own,
    else its ``device_id``'s type's default (``"nccl"`` for CUDA), else ``"undefined"``."""
    if backend:
        return str(backend)
    if device_id is not None:
        kind = device_id if isinstance(device_id, int) else getattr(device_id, "type", "cuda")
        return "nccl" if isinstance(kind, int) or kind == "cuda" else UNDEFINED
    return UNDEFINED


def _through_nccl(backend: Any) -> bool:
    """Whether a group made with ``backend`` talks through NCCL on a GPU: any naming ``nccl``
    for a device (``"nccl"``, ``"cpu:gloo,cuda:nccl"``) and the default backend of a CUDA
    device (``"undefined"``) do; Gloo, MPI and UCC groups do not."""
    name = str(backend).lower()
    return name in {FAKE, UNDEFINED} or "nccl" in name


RETURN_THEIR_INPUT = (
    "_c10d_functional::wait_tensor",
    "_c10d_functional::_wrap_tensor_autograd",
)
"""Functional collectives' operators whose device kernel hands back the tensor it was given:
``wait_tensor`` waits for the collective that writes it and returns it, and
``_wrap_tensor_autograd`` returns it wrapped in an ``AsyncCollectiveTensor``. Their ``meta``
kernels return ``empty_like`` of it, a new tensor a GPU never allocates (a gathered DTensor's
buffer would be counted two more times)."""


def returned_input(tensor: Any, *args: Any, **kwargs: Any) -> Any:
    """One of :data:`RETURN_THEIR_INPUT` on a stand-in: the tensor it was given, as an alias
    of its storage, which the allocator model already holds."""
    import torch

    return torch.ops.aten.alias(tensor)


COALESCED = (
    "c10d::allreduce_coalesced_",
    "c10d::allgather_coalesced_",
    "c10d::allgather_into_tensor_coalesced_",
    "c10d::reduce_scatter_tensor_coalesced_",
)
"""The process group's coalesced collectives, which ``_coalescing_manager`` runs for a batch of
all-reduces, all-gathers or reduce-scatters (Megatron-core's gradient buckets, its distributed
optimizer's parameter gather): torch registers no ``meta`` kernel for them, as it does for the
others (``torch.distributed._meta_registrations``)."""


def coalesced_work(*args: Any, **kwargs: Any) -> Any:
    """One of :data:`COALESCED` on stand-ins: done, as the fake group does every collective,
    into the outputs the caller gave (NCCL writes them in place and allocates nothing through
    the caching allocator); a completed work handle, as the other collectives' ``meta``
    kernels answer."""
    from torch._C._distributed_c10d import FakeWork

    return FakeWork().boxed()


RECEIVED_OBJECT = (
    "rank {rank} receives a Python object from {source} ({name}): on a GPU its value is that "
    "rank's, whose process a plan of one rank does not run"
)
"""Said, as the plan stops, where a rank receives a picklable object from another."""
FROM_ONE_SOURCE = "; plan rank {source} (--rank {source}), which sends it"
"""Added where one rank sends the objects every other receives (a broadcast, a scatter)."""
FROM_A_PEER = (
    " (point-to-point exchanges of objects, such as torch.distributed.pipelining's stages' "
    "shape inference, are out of scope)"
)
"""Added for ``recv_object_list``, whose peer may receive from this rank in turn."""
OBJECTS_RECEIVED = ("broadcast_object_list", "scatter_object_list", "recv_object_list")
"""Object collectives whose receiving ranks unpickle bytes another rank sent; its own objects
are what ``all_gather_object`` and ``gather_object`` give back on the fake group."""


def received_objects(original: Callable[..., Any], name: str) -> Callable[..., Any]:
    """One of :data:`OBJECTS_RECEIVED`: run on the rank that sends the objects (and on a rank
    outside the group, which torch returns from at once); a receiving rank stops with
    :data:`RECEIVED_OBJECT` (:class:`OutOfScope`), since the fake group moves no bytes: the
    sizes it would unpickle are whatever its buffer held."""

    def collective(*args: Any, **kwargs: Any) -> Any:
        from torch.distributed import distributed_c10d as c10d

        given = inspect.signature(original).bind_partial(*args, **kwargs).arguments
        group = given.get("group") or c10d._get_default_group()
        src, group_src = given.get("src"), given.get("group_src")
        peer = name == "recv_object_list"
        if c10d._rank_not_in_group(group) or (src is None and group_src is None and not peer):
            return original(*args, **kwargs)  # torch's own answer, or its error
        rank = c10d.get_rank()
        if src is None and group_src is None:
            said = RECEIVED_OBJECT.format(rank=rank, source="any rank", name=name)
            raise OutOfScope(said + FROM_A_PEER)
        source = c10d._canonicalize_group_rank(group, src, group_src, return_global=True)
        if source == rank and not peer:
            return original(*args, **kwargs)
        said = RECEIVED_OBJECT.format(rank=rank, source=f"rank {source}", name=name)
        if peer:
            raise OutOfScope(said + FROM_A_PEER)
        raise OutOfScope(said + FROM_ONE_SOURCE.format(source=source))

    return collective


OBJECTS_GATHERED = ("all_gather_object", "gather_object")
"""Object collectives that give a rank every rank's object, the others' being this rank's own
on the fake group."""
GATHERED_OWN = (
    "all_gather_object and gather_object give this rank's Python object in every rank's place: "
    "the plan runs one rank, so code that compares the ranks' objects (a sharded checkpoint's "
    "validation) sees this rank's each time"
)


def gathered_objects(original: Callable[..., Any], notes: Notes) -> Callable[..., Any]:
    """One of :data:`OBJECTS_GATHERED`, as the fake group runs it, with :data:`GATHERED_OWN`
    said once where a group of two ranks or more gathers."""

    def collective(*args: Any, **kwargs: Any) -> Any:
        from torch.distributed import distributed_c10d as c10d

        out = original(*args, **kwargs)
        group = inspect.signature(original).bind_partial(*args, **kwargs).arguments.get("group")
        group = group or c10d._get_default_group()
        if not c10d._rank_not_in_group(group) and c10d.get_world_size(group) > 1:
            notes.once("gathered objects", GATHERED_OWN)
        return out

    return collective


ZERO = "torch.distributed.optim.zero_redundancy_optimizer"
"""ZeroRedundancyOptimizer's module, imported only where the script imports it."""


def zero_object(original: Callable[..., Any]) -> Callable[..., Any]:
    """ZeroRedundancyOptimizer's ``_broadcast_object(obj, src_rank, group, device)``, the object
    broadcast ``consolidate_state_dict`` builds from two tensor broadcasts (the pickle's length,
    then its bytes, both on the device): run on the rank that sends; a rank that receives stops
    with :data:`RECEIVED_OBJECT`, as for the object collectives, since the fake group moves no
    bytes (a receiver would read a length of zero and unpickle nothing)."""

    def broadcast_object(obj: Any, src_rank: int, *args: Any, **kwargs: Any) -> Any:
        from torch.distributed import distributed_c10d as c10d

        rank = c10d.get_rank()
        if src_rank == rank:
            return original(obj, src_rank, *args, **kwargs)
        name = "ZeroRedundancyOptimizer's state broadcast"
        raise OutOfScope(RECEIVED_OBJECT.format(rank=rank, source=f"rank {src_rank}", name=name))

    return broadcast_object


DEVICE_MESH = "torch.distributed.device_mesh"
"""Where ``_get_device_handle`` is defined, which FSDP2's modules and DTensor's bind by name."""
FSDP2 = "torch.distributed.fsdp._fully_shard._fsdp_param_group"
FSDP1_INIT = "torch.distributed.fsdp._init_utils"
FSDP1_COMMON = "torch.distributed.fsdp._common_utils"
DTENSOR_RANDOM = "torch.distributed.tensor._random"


def rows(holds: Callable[[Any], bool]) -> list[LibraryReplacement]:
    """torch.distributed's own libraries replaced where the script imports them: ZeRO,
    pipelining, FSDP and DTensor (FSDP's modules alone are more than a second of imports, which
    a script that never shards should not pay). ``_get_device_handle`` is replaced where it is
    defined, in ``device_mesh``, which torch imports: FSDP2's and DTensor's modules bind the
    stand-in as the script imports them, and torch's own again after. ``holds``: whether a
    ``meta`` tensor is the script's own, not a stand-in."""
    from memforensics.plan import pipelining

    materialised = "a stand-in is on the planned device; only the script's own meta is "
    return [
        LibraryReplacement(
            ZERO,
            "_broadcast_object",
            zero_object,
            "a rank that receives another's Python object stops: the plan runs one rank",
        ),
        LibraryReplacement(
            pipelining.SCHEDULES,
            "_PipelineSchedule._warmup_p2p",
            pipelining.own_vote,
            "the plan runs one rank, whose peers' votes it cannot receive: the other ranks' "
            "stages vote as this rank's do",
        ),
        LibraryReplacement(
            DEVICE_MESH,
            "_get_device_handle",
            device_handle,
            "a stand-in's device type (meta) is CUDA's",
        ),
        LibraryReplacement(
            FSDP2,
            "FSDPParamGroup._validate_no_meta_params",
            partial(fsdp_materialised, holds),
            materialised + "refused",
        ),
        LibraryReplacement(
            FSDP1_INIT,
            "_need_to_materialize_module",
            partial(fsdp1_materialised, holds),
            materialised + "materialised",
        ),
        LibraryReplacement(
            FSDP1_INIT,
            "_get_compute_device",
            partial(fsdp1_compute_device, holds),
            "a stand-in parameter is on the device FSDP1's device_id names",
        ),
        LibraryReplacement(
            FSDP1_COMMON,
            "_FSDPDeviceHandle.from_device",
            fsdp1_handle,
            "FSDP1's device handle for a stand-in's device is torch.cuda's, as for CUDA's",
        ),
        LibraryReplacement(
            DTENSOR_RANDOM,
            "OffsetBasedRNGTracker._get_device_state",
            rng_state_on_host,
            "DTensor's random ops copy CUDA's generator state inside its dispatch, where the "
            "device mode is off: the state stays on the host, with the tracker's own values",
        ),
    ]


def same_params(*args: Any, **kwargs: Any) -> None:
    """``_verify_params_across_processes``: every rank runs the same program, and the fake group
    gathers no shapes to compare."""
    return None


def moved_inputs(original: Callable[..., Any]) -> Callable[..., Any]:
    """DDP's move of its inputs to its device: a stand-in is already there (its device reads
    ``meta``, DDP's reads ``meta:0``), a CPU tensor is copied onto the planned device. The copy
    runs on the current stream (DDP's side stream for it is not modelled)."""

    def recursive_to(inputs: Any, target_device: Any, use_side_stream: bool) -> Any:
        import torch

        if getattr(target_device, "type", None) == "meta":
            target_device = torch.device("cuda", target_device.index or 0)
            use_side_stream = False
        return original(inputs, target_device, use_side_stream)

    return recursive_to


SPAWNED = (
    "torch.multiprocessing's processes are the ranks of one node: the planned rank's process "
    "(its LOCAL_RANK) runs in the plan's own process, the others are not run"
)
"""Said once where a script starts its ranks with ``torch.multiprocessing.spawn``."""
WORLD_DIFFERS = (
    "the script starts {nprocs} processes where the planned node has {local}: plan it with "
    "--nproc-per-node {nprocs} for the world its processes make"
)
"""Said once where a script spawns more or fewer processes than the planned node has GPUs."""


class _Joined:
    """What ``start_processes(join=False)`` hands back, its one process already ended."""

    def __init__(self) -> None:
        self.processes: list[Any] = []

    def join(self, timeout: float | None = None, grace_period: float | None = None) -> bool:
        """Every process ended (the planned one ran to its end when it was started)."""
        return True

    def pids(self) -> list[int]:
        """The planned process's id: this process's."""
        return [os.getpid()]


def spawned(say: Callable[[str, str], None]) -> Callable[..., Any]:
    """``torch.multiprocessing.start_processes`` (and ``spawn``, which calls it): its
    ``nprocs`` processes, each ``fn(i, *args)``, are the ranks of a node, each with its own
    GPU. On CUDA each is a fresh interpreter the plan does not reach; planned, the planned
    rank's own process runs here, ``fn(LOCAL_RANK, *args)``, on the planned device, and its
    exception is the script's, as ``spawn`` re-raises it. ``say`` keeps a note once."""

    def start_processes(
        fn: Callable[..., Any],
        args: tuple[Any, ...] = (),
        nprocs: int = 1,
        join: bool = True,
        daemon: bool = False,
        start_method: str = "spawn",
    ) -> Any:
        world = World.from_env()
        if nprocs != world.local_world_size:
            say("spawn world", WORLD_DIFFERS.format(nprocs=nprocs, local=world.local_world_size))
        if not 0 <= world.local_rank < nprocs:
            raise ValueError(
                f"the planned local rank {world.local_rank} is not among the {nprocs} "
                "processes the script starts"
            )
        say("spawn", SPAWNED)
        fn(world.local_rank, *args)
        return None if join else _Joined()

    return start_processes


def close() -> None:
    """The fake group the script left initialised, destroyed: a later plan in this process
    starts without one."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


def _done(value: Any) -> Any:
    import torch

    future: Any = torch.futures.Future()
    future.set_result(value)
    return future


WATCHDOG_PERIOD_MS = 100
"""How often ProcessGroupNCCL's watchdog thread looks for finished collectives
(``kWatchdogThreadSleepMillis``); it drops the tensors a finished collective kept alive."""
LATE_BUCKETS = (
    "DDP rebuilds its gradient buckets at the second iteration's forward; the plan keeps the "
    "first ones, as if they were freed at once. On NCCL the first buckets ({size}) stay "
    "allocated until the process group's watchdog thread, looking every {period} ms, sees their "
    "all-reduce finished: a step that starts sooner can peak up to {size} higher than planned"
)
"""What the plan says once about DDP's first buckets; an H200 held them into the next step in
4 of 6 runs that began it at once, and in none of 2 that began 0.5 s later."""


def ddp_init(original: Callable[..., None], say: Callable[[str, str], None]) -> Callable[..., None]:
    """DDP built as usual, with the reduction of each gradient bucket done by a hook of the
    plan's: the fake group's futures carry no tensors, which DDP's own reduction needs. The
    hook all-reduces the bucket in place (no allocation, as with NCCL) and divides it by the
    world size, as DDP's does; a hook the script registers runs inside it, for what it
    allocates. The bytes of the buckets reduced are kept, for what ``say`` is told when DDP
    would rebuild them."""

    import torch.distributed as dist

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        self._memforensics_hook = None
        group = self.process_group
        reduced: dict[int, int] = {}

        def reduce_bucket(state: object, bucket: Any) -> Any:

            buffer = bucket.buffer()
            reduced[bucket.index()] = buffer.numel() * buffer.element_size()
            script = self._memforensics_hook
            if script is not None:
                script[0](script[1], bucket)  # its own allocations; its futures carry nothing
            else:
                dist.all_reduce(buffer, group=group)
                buffer.div_(dist.get_world_size(group))
            return _done(buffer)

        if getattr(self, "reducer", None) is not None:
            dist._register_comm_hook(self.reducer, None, reduce_bucket)  # type: ignore[attr-defined,unused-ignore]
            rebuilds = bool(self.static_graph or not self.find_unused_parameters)
            self.reducer = _FirstBuckets(self.reducer, reduced if rebuilds else None, say)

    return __init__


class _FirstBuckets:
    """DDP's reducer, keeping the buckets it was built with: the rebuild after the first
    iteration broadcasts rank 0's order of ready gradients and reads it back, values the fake
    group does not carry. Where DDP would rebuild (``static_graph``, or no unused parameters
    to find) after buckets were reduced, ``say`` is told that NCCL frees the first ones late."""

    def __init__(
        self, reducer: Any, reduced: dict[int, int] | None, say: Callable[[str, str], None]
    ) -> None:
        self._reducer = reducer
        self._reduced = reduced
        self._say = say

    def __getattr__(self, name: str) -> Any:
        return getattr(self._reducer, name)

    def _rebuild_buckets(self) -> bool:
        if self._reduced:
            size = format_bytes(sum(self._reduced.values()))
            self._say("ddp rebuild", LATE_BUCKETS.format(size=size, period=WATCHDOG_PERIOD_MS))
            self._reduced = None
        return False


def ddp_register(original: Callable[..., None]) -> Callable[..., None]:
    """``DistributedDataParallel.register_comm_hook``: the script's hook is kept and run by the
    plan's (DDP takes one hook per model)."""

    def register_comm_hook(self: Any, state: object, hook: Callable[..., Any]) -> None:
        self._memforensics_hook = (hook, state)

    return register_comm_hook


def fsdp_materialised(
    holds: Callable[[Any], bool], original: Callable[[Any], None]
) -> Callable[[Any], None]:
    """FSDP2's check that no parameter is left on ``meta``: a stand-in is on the planned
    device (its ``.device`` reads ``meta``); only the script's own ``meta`` parameters fail it,
    with FSDP's message."""

    def validate(self: Any) -> None:
        for fsdp_param in self.fsdp_params:
            sharded = fsdp_param.sharded_param
            if holds(getattr(sharded, "_local_tensor", sharded)):
                original(self)
                return

    return validate


def standins_backend(original: Callable[..., Any]) -> Callable[..., Any]:
    """``ProcessGroup._get_backend``: the group's backend for a stand-in's device (its type
    reads ``meta``) is the one for the CUDA device it stands for, as ``batch_isend_irecv``
    (pipelining's stages) asks it for its tensors' device on a GPU."""

    def get_backend(self: Any, device: Any) -> Any:
        import torch

        if getattr(device, "type", None) == "meta":
            device = torch.device("cuda")
        return original(self, device)

    return get_backend


def fsdp1_materialised(
    holds: Callable[[Any], bool], original: Callable[..., tuple[bool, bool]]
) -> Callable[..., tuple[bool, bool]]:
    """FSDP1's question whether a module needs materialising from ``meta``: a stand-in is on
    the planned device already (its ``.device`` reads ``meta``); only the script's own ``meta``
    parameters and buffers are materialised, as FSDP does."""

    def need(module: Any, *args: Any, **kwargs: Any) -> tuple[bool, bool]:
        on_meta, deferred_init = original(module, *args, **kwargs)
        if on_meta:
            states = [*module.parameters(), *module.buffers()]
            on_meta = any(t.is_meta and holds(t) for t in states)
        return on_meta, deferred_init

    return need


def fsdp1_compute_device(
    holds: Callable[[Any], bool], original: Callable[..., Any]
) -> Callable[..., Any]:
    """FSDP1's compute device, checked against the ``device_id`` the script names: a stand-in
    parameter is on the device that id names (its ``.device`` reads ``meta`` to torch's own
    code), so the id is taken as the stand-in's device, the compute device FSDP1 takes
    without one. The script's own ``meta`` parameters are FSDP's to refuse."""

    def get_compute_device(
        module: Any, ignored_params: Any, device_from_device_id: Any, *args: Any, **kwargs: Any
    ) -> Any:
        from torch.distributed.fsdp._init_utils import _get_orig_params

        param = next(_get_orig_params(module, ignored_params), None)
        named = getattr(device_from_device_id, "type", None) == "cuda"
        if named and param is not None and param.is_meta and not holds(param):
            device_from_device_id = param.device
        return original(module, ignored_params, device_from_device_id, *args, **kwargs)

    return get_compute_device


def fsdp1_handle(original: Callable[[Any], Any]) -> Any:
    """``_FSDPDeviceHandle.from_device``: FSDP1's device handle for a stand-in's device (its
    type reads ``meta``) is ``torch.cuda``, as for the device it stands for."""

    def from_device(cls: Any, device: Any) -> Any:
        import torch

        if getattr(device, "type", None) == "meta":
            return torch.cuda
        return original(device)

    return classmethod(from_device)


def device_handle(original: Callable[..., Any]) -> Callable[..., Any]:
    """``torch.distributed.device_mesh._get_device_handle``: the module for a stand-in's device
    type (``meta``) is ``torch.cuda``, as for the device it stands for. FSDP2 asks it of its
    all-gather output before waiting on the all-gather's event."""

    def _get_device_handle(device_type: str = "cuda") -> Any:
        return original("cuda" if device_type == "meta" else device_type)

    return _get_device_handle


def rng_state_on_host(original: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """DTensor's random-op tracker's copy of CUDA's generator state, kept on the host.

    On a GPU it copies ``torch.cuda.get_rng_state()`` (16 bytes) to its CUDA device, inside
    DTensor's ``__torch_dispatch__``, where torch turns torch-function modes off: the plan's
    device mode never sees that ``.to("cuda:N")``, so the CPU build's missing CUDA kernels
    would fail the script's first random initialiser of a sharded parameter. The state's
    values are the tracker's own (seed and offset); only its 512-byte block is not counted,
    as no allocation inside a DTensor's operator is (its outputs are).
    """

    def get_device_state(self: Any) -> Any:
        if getattr(self._device, "type", None) != "cuda":
            return original(self)
        return self._device_handle.get_rng_state()

    return get_device_state


def fake_uniform_unguarded(original: Callable[..., Any]) -> Callable[..., Any]:
    """``FakeTensorMode.__torch_dispatch__`` with ``uniform_`` on a fake CUDA tensor written
    through the dispatcher.

    DTensor's sharding propagation runs each operator on fake tensors of the mesh's device
    type (``torch.empty_strided(..., device="cuda")`` under a ``FakeTensorMode``), and the fake
    mode runs ``uniform_`` (``nn.Linear.reset_parameters``, ``trunc_normal_``: a sharded
    model built on ``meta`` and initialised after ``to_empty``) by torch's Python
    decomposition, which writes its draw with ``self.copy_``. That Python binding takes a
    device guard for ``self``'s device, which a CPU build has none of for CUDA ("PyTorch is
    not linked with support for cuda devices"; torch's own fake mode fails so on a CPU-only
    machine). The same decomposition with its copy dispatched as ``aten.copy_`` takes no
    guard and gives the fake mode the same tensor.
    """
    import torch
    from torch._decomp.decompositions import uniform

    fill = torch.ops.aten.uniform_.default
    into = torch.ops.aten.copy_.default

    def __torch_dispatch__(
        self: Any, func: Any, types: Any, args: Any = (), kwargs: Any = None
    ) -> Any:
        if func is fill and args[0].device.type == "cuda":
            params = dict(zip(("from", "to", "generator"), args[1:], strict=False))
            params.update(kwargs or {})
            draw = (params.get("from", 0.0), params.get("to", 1.0), params.get("generator"))
            with self:
                return into(args[0], uniform(args[0], *draw))
        return original(self, func, types, args, kwargs)

    return __torch_dispatch__
