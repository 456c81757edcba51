"""``torch.save`` of planned tensors: written as the CUDA tensors they stand for.

A stand-in is a ``meta`` tensor, and torch pickles a ``meta`` tensor as its shape alone
(``_rebuild_meta_tensor_no_storage``): a checkpoint saved in a plan and loaded back in the same
run (the best model reloaded at the end, a resume) came back as the script's own ``meta``
tensors, on no device, so loading it added nothing to the device where on a GPU it holds a
second copy of the weights. Under the plan a stand-in is pickled as torch pickles a CUDA tensor:
its storage, once however many views share it, tagged ``cuda:0``, with its bytes (zeros, the
values a plan reads for unknown data), so the file is an ordinary CUDA checkpoint that
``torch.load`` restores onto the planned device, or onto the host with ``map_location="cpu"``,
as on a GPU.

Loading a host checkpoint into a planned model copies each tensor onto the planned device, as
on a GPU; torch's warning that copying into a ``meta`` parameter "is a no-op" (true of the
script's own ``meta`` modules, which keep it) is not given for a module whose tensors are all
stand-ins.

A file such a pickle is written into (by ``torch.save``, ``pickle.dump``, or the pure-Python
pickler joblib and dill build on), named by a path or opened by the script, is put back when
the run ends (:mod:`~memforensics.plan.saved_files`).
"""

from __future__ import annotations

import inspect
import warnings
from collections import OrderedDict
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch

from memforensics.plan.saved_files import opened_path, path_of

if TYPE_CHECKING:
    from memforensics.plan.emulate import Ghosts
    from memforensics.plan.saved_files import SavedFiles

_NO_OP = r"for .*: copying from a non-meta parameter in the checkpoint to a meta parameter"
"""torch's warning from ``Module._load_from_state_dict`` for a ``meta`` destination."""

SAVED_ON = torch.device("cuda", 0)
"""The location a saved stand-in's storage is tagged with: the planned device, as CUDA tags it."""


class Checkpoints:
    """The two stand-ins ``torch.save`` meets: a planned tensor pickled, and its storage
    copied to the host for its bytes. ``ghosts`` tells the script's own ``meta`` storages,
    which torch saves as it always does, from the plan's stand-ins."""

    def __init__(
        self, ghosts: Ghosts, files: SavedFiles, made_up: Callable[[torch.Tensor], bool]
    ) -> None:
        self._ghosts = ghosts
        self._files = files
        self._made_up = made_up
        self._pickled = 0

    def _stands_in(self, storage: Any) -> bool:
        return storage.device.type == "meta" and storage._cdata not in self._ghosts.keys

    def _all_stand_ins(self, module: Any) -> bool:
        """Whether every ``meta`` tensor a module holds itself is a plain stand-in."""
        for tensor in (*module._parameters.values(), *module._buffers.values()):
            if tensor is None or not tensor.is_meta:
                continue
            if not isinstance(tensor, torch.Tensor) or tensor.layout != torch.strided:
                return False
            with torch._C.DisableTorchFunctionSubclass():  # a lazy module's uninitialized
                storage = tensor.untyped_storage()  # tensor refuses the call, not its storage
            if not self._stands_in(storage):
                return False
        return True

    def loading(self, original: Callable[..., Any]) -> Callable[..., Any]:
        """``Module._load_from_state_dict``: torch's, without its "copying into a ``meta``
        parameter is a no-op" warning where the module's ``meta`` tensors are all stand-ins
        (the copy lands on the planned device)."""

        def _load_from_state_dict(module: Any, *args: Any, **kwargs: Any) -> Any:
            if not self._all_stand_ins(module):
                return original(module, *args, **kwargs)
            with warnings.catch_warnings():
                warnings.filterwarnings("ignore", message=_NO_OP, category=UserWarning)
                return original(module, *args, **kwargs)

        return _load_from_state_dict

    def pickled(self, original: Callable[..., Any]) -> Callable[..., Any]:
        """``Tensor._reduce_ex_internal`` for a stand-in: torch's own pickling of a dense
        tensor, its storage tagged with the planned CUDA device (torch's tag for a storage it
        cannot see the device of). Every other tensor is torch's."""

        def _reduce_ex_internal(tensor: torch.Tensor, proto: int) -> Any:
            if self._made_up(tensor):
                self._pickled += 1  # a host copy of made-up values: zeros as much as a stand-in
            if (
                type(tensor) is not torch.Tensor
                or tensor.layout != torch.strided
                or tensor.dtype in torch.storage._new_dtypes()
                or not self._stands_in(tensor.untyped_storage())
            ):
                return original(tensor, proto)
            self._pickled += 1
            storage = torch.storage.TypedStorage(
                wrap_storage=tensor.untyped_storage(), dtype=tensor.dtype, _internal=True
            )
            storage._fake_device = SAVED_ON  # type: ignore[attr-defined, unused-ignore]
            args: tuple[Any, ...] = (
                storage,
                tensor.storage_offset(),
                tuple(tensor.size()),
                tensor.stride(),
                tensor.requires_grad,
                OrderedDict(),
            )
            metadata = torch._utils.get_tensor_metadata(tensor)
            return (torch._utils._rebuild_tensor_v2, (*args, metadata) if metadata else args)

        return _reduce_ex_internal

    def _into(self, target: Any, save: Callable[[], Any]) -> Any:
        """``save()``, which writes a pickle into ``target``: kept to be put back when the run
        ends where it wrote a stand-in, or a host copy of one, into a file on disk, named by a
        path or opened by the script (:mod:`~memforensics.plan.saved_files`). A pickle into a
        buffer in memory is the script's alone."""
        before = self._pickled
        path = path_of(target)
        opened = path is None
        if opened:
            path = opened_path(target)
        if path is None:
            return save()
        return self._files.saving(path, save, lambda: self._pickled > before, opened=opened)

    def saved(self, original: Callable[..., Any]) -> Callable[..., Any]:
        """``torch.save``: torch's, into a file put back when the run ends where it holds a
        stand-in (:meth:`_into`)."""

        signature = inspect.signature(original)

        def save(*args: Any, **kwargs: Any) -> Any:
            target = signature.bind(*args, **kwargs).arguments.get("f")
            return self._into(target, lambda: original(*args, **kwargs))

        return save

    def dumped(self, original: Callable[..., Any]) -> Callable[..., Any]:
        """``pickle.dump(obj, file)``: the standard library's, into a file put back when the
        run ends where it holds a stand-in (:meth:`_into`): an object holding a device tensor
        (a fitted model, a library's callbacks) pickles it as zeros tagged ``cuda:0``."""

        def dump(obj: Any, file: Any, *args: Any, **kwargs: Any) -> Any:
            return self._into(file, lambda: original(obj, file, *args, **kwargs))

        return dump

    def pickler_dumped(self, original: Callable[..., Any]) -> Callable[..., Any]:
        """``pickle._Pickler.dump``, the pure-Python pickler that others subclass (joblib's
        ``dump`` to a path, dill's): the standard library's, into a file put back when the run
        ends where it holds a stand-in (:meth:`_into`). The pickler writes through its file's
        bound ``write``, which names the file."""

        def dump(pickler: Any, obj: Any) -> Any:
            file = getattr(getattr(pickler, "_file_write", None), "__self__", None)
            return self._into(file, lambda: original(pickler, obj))

        return dump

    def host_copy(self, original: Callable[..., Any]) -> Callable[..., Any]:
        """``UntypedStorage.cpu`` of a stand-in's storage (``torch.save`` copies each storage to
        the host to write it): its size in zeros, the values a plan reads for unknown data."""

        def cpu(storage: Any) -> Any:
            if not self._stands_in(storage):
                return original(storage)
            return torch.zeros(storage.nbytes(), dtype=torch.uint8).untyped_storage()

        return cpu

    def tagged(self, original: Callable[[Any], str]) -> Callable[[Any], str]:
        """``torch.serialization.location_tag`` of a stand-in's storage: the planned CUDA
        device's, as :meth:`pickled` tags it. torch's legacy format (a storage pickled on its
        own) asks it of the storage alone, where ``torch.save``'s own format reads the tag
        :meth:`pickled` set; the script's own ``meta`` storages keep theirs."""

        def location_tag(storage: Any) -> str:
            untyped = getattr(storage, "_untyped_storage", storage)
            if isinstance(untyped, torch.UntypedStorage) and self._stands_in(untyped):
                return str(SAVED_ON)
            return original(storage)

        return location_tag

    def written(self, original: Callable[..., Any]) -> Callable[..., Any]:
        """``UntypedStorage._write_file`` of a stand-in's storage (a storage pickled on its own
        writes its bytes with it: ``pickle`` or ``joblib`` of an object holding a tensor, through
        torch's legacy format): its size in zeros, as :meth:`host_copy` gives ``torch.save``."""

        def _write_file(storage: Any, *args: Any, **kwargs: Any) -> Any:
            if not self._stands_in(storage):
                return original(storage, *args, **kwargs)
            zeros = torch.zeros(storage.nbytes(), dtype=torch.uint8).untyped_storage()
            return original(zeros, *args, **kwargs)

        return _write_file
