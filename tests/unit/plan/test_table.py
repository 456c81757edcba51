"""The emulation's one table: every attribute it replaces is back after a planned run, torch's
defaults too, and a torch lacking what it relies on is refused before anything changes."""

from __future__ import annotations

import importlib.machinery
import importlib.util
import sys
import textwrap
import types
import warnings
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")  # collected, then deselected, where torch is absent

from torch.overrides import _get_current_function_mode_stack  # noqa: E402

from memforensics.allocator import parse_conf  # noqa: E402
from memforensics.plan import MissingAttribute, PlannedDevice, device_spec, run_planned  # noqa: E402
from memforensics.plan.cuda import Answers  # noqa: E402
from memforensics.plan.emulate import modes  # noqa: E402
from memforensics.plan.patches import (  # noqa: E402
    LibraryReplacement,
    Replacement,
    replaced,
    replaced_where_imported,
)
from memforensics.plan.saved_files import SavedFiles  # noqa: E402
from memforensics.plan.table import table  # noqa: E402
from memforensics.plan.values import Notes  # noqa: E402

pytestmark = [pytest.mark.torch]

SPEC = device_spec(1 << 30, (9, 0), 128 << 20, parse_conf(None))


def _rows() -> list[Replacement]:
    """The table as a run would build it."""
    device = PlannedDevice(SPEC)
    notes = Notes()
    from memforensics.plan.choices import Autocast

    functions, storage = modes(device, 0, Autocast(), notes)
    answers = Answers(device, lambda path, snapshot: None, notes, storage.malloc)
    return table(device, answers, functions, storage, notes, lambda: None, SavedFiles())


def _attributes(rows: list[Replacement]) -> dict[tuple[int, str], Any]:
    """What each row's attribute is now (a class's own, as the table puts it back)."""
    found = {}
    for row in rows:
        own = vars(row.owner) if isinstance(row.owner, type) else None
        value = own.get(row.name, "absent") if own is not None else getattr(row.owner, row.name,
                                                                            "absent")  # fmt: skip
        found[(id(row.owner), row.name)] = value
    return found


def _defaults_device() -> None:
    torch.set_default_device("cuda")
    torch.zeros(3)


def _legacy_half() -> None:
    torch.set_default_tensor_type(torch.cuda.HalfTensor)
    torch.cuda.nvtx.range_push("left open")
    torch.zeros(3)


def _state() -> tuple[Any, ...]:
    zeros = torch.zeros(3)
    return (
        zeros.device.type,
        zeros.dtype,
        torch.get_default_dtype(),
        torch.get_default_device(),
        list(_get_current_function_mode_stack()),
        torch.utils._device.CURRENT_DEVICE,
    )


def test_two_planned_scripts_and_a_plain_one_leave_torch_as_it_was() -> None:
    """After two planned runs (set_default_device("cuda"); set_default_tensor_type of a CUDA
    half type) and plain code between them, every replaced attribute is torch's own again and
    ``torch.zeros(3)`` is a CPU float32 tensor with no mode left on torch's stack."""
    rows = _rows()
    before_attributes = _attributes(rows)
    before = _state()
    assert before[:2] == ("cpu", torch.float32)
    run_planned(SPEC, _defaults_device, lambda path, snapshot: None)
    assert _state() == before
    plain = torch.ones(2, 2) @ torch.ones(2, 2)  # plain code between the runs
    assert plain.device.type == "cpu"
    run_planned(SPEC, _legacy_half, lambda path, snapshot: None)
    assert _state() == before
    assert _attributes(rows) == before_attributes


def _compiled_step() -> None:
    model = torch.nn.Linear(16, 16).cuda()
    torch.compile(_doubled)(model(torch.randn(4, 16, device="cuda"))).sum().backward()


def _doubled(x: torch.Tensor) -> torch.Tensor:
    return torch.sigmoid(x) * x


def test_a_planned_run_that_compiled_leaves_dynamo_no_cache_of_it() -> None:
    """A planned run that compiles with Inductor traces the script's code on stand-ins; after
    it, that code has no entry in dynamo's cache, so a real compile of it later starts
    afresh (and the run did compile: the cache held an entry while it ran)."""
    from torch._dynamo.eval_frame import _debug_get_cache_entry_list

    seen: list[int] = []

    def run() -> None:
        _compiled_step()
        seen.append(len(_debug_get_cache_entry_list(_doubled.__code__)))

    run_planned(SPEC, run, lambda path, snapshot: None)
    assert seen == [1]
    assert _debug_get_cache_entry_list(_doubled.__code__) == []
    assert (
        torch.compile(_doubled, backend="eager")(torch.ones(3)).tolist()
        == [pytest.approx(float(torch.sigmoid(torch.tensor(1.0))))] * 3
    )


def _compiled_loss() -> None:
    model = torch.nn.Linear(16, 4).cuda()
    loss = torch.compile(_classified)(model(torch.randn(8, 16, device="cuda")))
    loss.backward()
    assert model.weight.grad is not None


def _classified(logits: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.cross_entropy(logits, logits.argmax(-1))


def test_a_planned_compile_puts_back_the_meta_kernels_it_set_aside() -> None:
    """A planned run whose compiled code differentiates ``cross_entropy`` sets aside aten's
    Python ``meta`` kernels of composite operators while AOTAutograd traces (its weight gets a
    gradient), and every one is torch's own again after the run."""
    from torch._C import DispatchKey

    from memforensics.plan import compiled

    ops = compiled.shadowed()
    assert torch.ops.aten.nll_loss.default in ops
    before = [op.py_kernels[DispatchKey.Meta] for op in ops]
    run_planned(SPEC, _compiled_loss, lambda path, snapshot: None)
    assert [op.py_kernels[DispatchKey.Meta] for op in ops] == before


def test_a_missing_attribute_the_emulation_relies_on_is_refused_before_anything_changes() -> None:
    """A needed row whose attribute the installed torch lacks raises MissingAttribute naming it,
    and no other row is applied; it is never added."""
    owner = types.SimpleNamespace(kept="torch's")
    rows = [
        Replacement(owner, "kept", "stand-in", "a row torch has"),
        Replacement(owner, "renamed", "stand-in", "a row torch renamed"),
    ]
    with pytest.raises(MissingAttribute, match=r"SimpleNamespace\.renamed"), replaced(rows):
        pass
    assert owner.kept == "torch's"
    assert not hasattr(owner, "renamed")


def test_a_public_function_torch_lacks_is_left_absent_and_an_added_binding_is_removed() -> None:
    """A public function only some torch releases have is not added where torch lacks it; a
    binding marked ``added`` is set for the run and deleted after."""
    owner = types.SimpleNamespace()
    rows = [
        Replacement(owner, "newer_function", "stand-in", "public, newer torch", needed=False),
        Replacement(owner, "cuda_binding", "stand-in", "CUDA build only", added=True),
    ]
    with replaced(rows):
        assert not hasattr(owner, "newer_function")
        assert owner.cuda_binding == "stand-in"
    assert not hasattr(owner, "cuda_binding")


def _library(folder: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """A package of its own on ``sys.path``: ``core.move`` and a module that imports it by name;
    the package's name, unique to the test."""
    name = f"library_{folder.name.replace('-', '_')}"
    package = folder / name
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "core.py").write_text(
        textwrap.dedent("""
        def move(x):
            return ('library', x)
        class Callback:
            def check(self, x):
                return ('library', x)
            @classmethod
            def made(cls, x):
                return (cls.__name__, x)
        """)
    )
    (package / "hooks.py").write_text(
        textwrap.dedent(f"""
        from {name}.core import move
        def hook(x):
            return move(x)
        """)
    )
    monkeypatch.syspath_prepend(str(folder))
    return name


def _wrapping(original: Any) -> Any:
    return lambda x: ("stand-in", original(x))


def test_a_library_function_is_replaced_where_the_script_imports_it_and_put_back_after(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A library the run does not import is left unimported; imported inside, its function is
    the stand-in in its own module and in a module that imported it by name; after, both are
    the library's own, and the import machinery is as it was."""
    name = _library(tmp_path, monkeypatch)
    finders = list(sys.meta_path)
    rows = [LibraryReplacement(f"{name}.core", "move", _wrapping, "a test's library")]
    with replaced_where_imported(rows):
        assert f"{name}.core" not in sys.modules
        hooks = __import__(f"{name}.hooks", fromlist=["hook"])
        core = sys.modules[f"{name}.core"]
        assert hooks.hook(1) == ("stand-in", ("library", 1))
        assert core.move(2) == ("stand-in", ("library", 2))
        assert core.__loader__ is core.__spec__.loader
        assert isinstance(core.__loader__, importlib.machinery.SourceFileLoader)
    assert hooks.hook(3) == ("library", 3)
    assert core.move(4) == ("library", 4)
    assert sys.meta_path == finders


def test_a_library_imported_before_the_run_is_replaced_for_it_and_a_missing_function_skipped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A library imported before the run is replaced for it and put back after; a row whose
    function the installed library lacks (another release) changes nothing and refuses nothing."""
    name = _library(tmp_path, monkeypatch)
    hooks = __import__(f"{name}.hooks", fromlist=["hook"])
    rows = [
        LibraryReplacement(f"{name}.core", "move", _wrapping, "a test's library"),
        LibraryReplacement(f"{name}.core", "renamed", _wrapping, "another release's"),
    ]
    with replaced_where_imported(rows):
        assert hooks.hook(1) == ("stand-in", ("library", 1))
        assert not hasattr(sys.modules[f"{name}.core"], "renamed")
    assert hooks.hook(2) == ("library", 2)


def test_a_library_class_s_method_is_replaced_for_its_subclasses_too_and_put_back_after(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A row naming a class's method (``Callback.check``) replaces it on the class, so an
    instance of the script's own subclass answers with the stand-in; after, the class has its
    own method again."""
    name = _library(tmp_path, monkeypatch)
    rows = [
        LibraryReplacement(
            f"{name}.core", "Callback.check", lambda f: lambda self, x: ("stand-in", f(self, x)), ""
        )
    ]
    with replaced_where_imported(rows):
        core = __import__(f"{name}.core", fromlist=["Callback"])
        own = type("Own", (core.Callback,), {})()
        assert own.check(1) == ("stand-in", ("library", 1))
    assert own.check(2) == ("library", 2)
    assert "check" in vars(core.Callback)
    assert "check" not in vars(type(own))


def test_a_library_class_method_is_given_bound_to_its_class_and_put_back_after(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A row naming a class method (``Callback.made``) gives its stand-in the method bound to
    the class, as a table's row takes it, and the stand-in answers through the class; after,
    the class holds its own class method again."""
    name = _library(tmp_path, monkeypatch)

    def stand_in(original: Any) -> Any:
        return classmethod(lambda cls, x: ("stand-in", original(x)))

    rows = [LibraryReplacement(f"{name}.core", "Callback.made", stand_in, "")]
    with replaced_where_imported(rows):
        core = __import__(f"{name}.core", fromlist=["Callback"])
        assert core.Callback.made(1) == ("stand-in", ("Callback", 1))
    assert core.Callback.made(2) == ("Callback", 2)
    assert isinstance(vars(core.Callback)["made"], classmethod)


UNINSTALLABLE = frozenset({"deepspeed"})
"""Libraries no test session installs: DeepSpeed is an sdist whose build needs torch in its own
build environment. Its rows are checked where it is installed, and the test of its fused
optimizers drives them through a fake of its 0.19 layout (``tests/integration/fakes``)."""


def _named_in_library(row: Any) -> Any:
    """What a library row names (``module``, then ``name``'s dotted parts), None where a part
    is missing."""
    import importlib

    with warnings.catch_warnings():  # torch.distributed.optim scripts at import, deprecated
        warnings.simplefilter("ignore", DeprecationWarning)
        found: Any = importlib.import_module(row.module)
    for part in row.name.split("."):
        found = getattr(found, part, None)
    return found


@pytest.mark.extras
def test_each_library_row_names_a_function_the_installed_library_has() -> None:
    """Every library row's function exists in the installed library (Accelerate, the kernels
    library transformers depends on, transformers', Lightning's, ignite's and skorch's early
    stopping, safetensors, bitsandbytes), so a release that renames it fails this test rather
    than a user's planned run."""
    libraries = ("accelerate", "kernels", "transformers", "lightning", "pytorch_lightning")
    for library in (*libraries, "ignite", "skorch", "safetensors", "bitsandbytes"):
        pytest.importorskip(library)
    from memforensics.plan.libraries import rows
    from memforensics.plan.saved_files import SavedFiles

    for row in rows(lambda tensor: False, lambda tensor: False, Notes(), SavedFiles()):
        top = row.module.split(".")[0]
        if top in UNINSTALLABLE and importlib.util.find_spec(top) is None:
            continue
        assert callable(_named_in_library(row)), row.where


def test_the_scripts_triton_is_the_plans_and_torchs_own_import_is_torchs() -> None:
    """Inside a planned run the script's ``import triton`` is the plan's stand-in, while torch's
    own modules import what the machine has (torch's Triton code generation never runs on
    stand-ins); after the run ``import triton`` is Python's own again."""
    import builtins

    from torch.utils._triton import has_triton_package

    original = builtins.__import__
    seen: list[object] = []

    def run() -> None:
        import triton

        seen.append(triton.__version__)
        seen.append(has_triton_package.__wrapped__())

    run_planned(SPEC, run, lambda path, snapshot: None)
    installed = importlib.util.find_spec("triton") is not None
    assert str(seen[0]).endswith("+memforensics.plan")
    assert seen[1] == installed
    assert builtins.__import__ is original


def test_each_compiler_row_names_a_function_the_installed_torch_has() -> None:
    """The compiler functions the plan replaces when the script imports their modules
    (``torch._dynamo``'s ``explain``, AOTInductor's) exist in the installed torch, so a
    release that renames one fails this test rather than going unanswered in a user's run."""
    from memforensics.plan.table import compiler_rows

    for row in compiler_rows():
        assert callable(_named_in_library(row)), row.where


def test_each_distributed_row_names_a_function_the_installed_torch_has() -> None:
    """torch.distributed's functions the plan replaces when the script imports their modules
    (ZeRO's, pipelining's, FSDP's, DTensor's, and ``device_mesh._get_device_handle``, which
    FSDP's modules bind) exist in the installed torch, so a release that renames one fails this
    test rather than going unanswered in a user's sharded run."""
    from memforensics.plan.distributed import rows

    for row in rows(lambda tensor: False):
        assert callable(_named_in_library(row)), row.where
