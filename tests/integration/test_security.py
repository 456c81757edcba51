"""Security: planted links and FIFOs, permissions, hostile pickles, loader fuzzing, env config."""

from __future__ import annotations

import contextlib
import copyreg
import json
import os
import pickle
import socket
import stat
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from evidence import check_evidence, temp_files
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import memforensics
import memforensics.capture.atomic
from memforensics import ConfigError, SnapshotLoadError
from memforensics.analysis import load_dump
from memforensics.backends.sim import SimOutOfMemoryError, reset_device
from memforensics.capture.config import FIELDS, build_config, env_var
from memforensics.testing import exhausted, fragmented
from shared_data import real_snapshots

MiB = 1 << 20

# -- planted links, FIFOs and folders ------------------------------------------------------------


def _window_targets(out: Path) -> tuple[Path, Path]:
    stem = f"rank0_pid{os.getpid()}"
    return out / "step0" / f"{stem}.pickle", out / "step0" / f"{stem}.json"


def _one_window(out: Path, **config: Any) -> memforensics.MemoryForensics:
    """Install, run one step that closes window step0, return the facade (window written)."""
    device = reset_device(total_bytes=32 * MiB)
    mf = memforensics.install(device="sim", out_dir=str(out), steps=1, max_windows=1, **config)
    with mf.step(0):
        device.empty(MiB).free()
    mf.close()
    return mf


def test_symlinks_planted_at_final_names_are_never_followed(tmp_path: Path) -> None:
    """Symlinks planted at a window's snapshot and sidecar names are replaced, victims untouched."""
    out = tmp_path / "out"
    snapshot, sidecar = _window_targets(out)
    snapshot.parent.mkdir(parents=True)
    victims = [tmp_path / "victim.pickle", tmp_path / "victim.json"]
    for victim, final in zip(victims, (snapshot, sidecar), strict=True):
        victim.write_bytes(b"precious\n")
        final.symlink_to(victim)
    mf = _one_window(out)
    assert mf.dumps == [snapshot]
    for victim, final in zip(victims, (snapshot, sidecar), strict=True):
        assert victim.read_bytes() == b"precious\n"
        assert not final.is_symlink()
        assert final.is_file()
    assert check_evidence(out) == 1


def test_fifo_planted_at_final_name_is_never_opened(tmp_path: Path) -> None:
    """A FIFO at the final name would block a writer that opened it: the rename replaces it."""
    out = tmp_path / "out"
    snapshot, _ = _window_targets(out)
    snapshot.parent.mkdir(parents=True)
    os.mkfifo(snapshot)
    done: list[memforensics.MemoryForensics] = []
    worker = threading.Thread(target=lambda: done.append(_one_window(out)), daemon=True)
    worker.start()
    worker.join(30)
    assert not worker.is_alive(), "the writer opened the FIFO"
    assert stat.S_ISREG(snapshot.stat().st_mode)
    assert check_evidence(out) == 1


def test_folder_planted_at_final_name_fails_the_dump_only(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A folder in the way of the final name: a warning, no temp file left, folder untouched."""
    out = tmp_path / "out"
    snapshot, _ = _window_targets(out)
    snapshot.mkdir(parents=True)
    (snapshot / "keep").write_text("x")
    mf = _one_window(out)
    assert mf.dumps == []
    assert "event='dump_failed'" in capsys.readouterr().err
    assert (snapshot / "keep").read_text() == "x"
    assert temp_files(out) == []


@pytest.mark.parametrize("plant", ["symlink", "fifo", "file"])
def test_anything_planted_at_the_temp_name_is_refused(
    tmp_path: Path, plant: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With the random temp name forced, a planted link/FIFO/file there makes O_EXCL refuse."""
    out = tmp_path / "out"
    snapshot, _ = _window_targets(out)
    snapshot.parent.mkdir(parents=True)
    host = socket.gethostname().replace("-", "_") or "host"
    temp = snapshot.parent / f".{snapshot.name}.tmp-{host}-{os.getpid()}-deadbeef"
    victim = tmp_path / "victim"
    victim.write_bytes(b"precious\n")
    if plant == "symlink":
        temp.symlink_to(victim)
    elif plant == "fifo":
        os.mkfifo(temp)
    else:
        temp.write_bytes(b"attacker\n")
    monkeypatch.setattr(memforensics.capture.atomic.secrets, "token_hex", lambda _: "deadbeef")
    done: list[memforensics.MemoryForensics] = []
    worker = threading.Thread(target=lambda: done.append(_one_window(out)), daemon=True)
    worker.start()
    worker.join(30)
    assert not worker.is_alive(), "the writer opened what was planted"
    assert done[0].dumps == []
    assert victim.read_bytes() == b"precious\n"
    assert not snapshot.exists()
    assert os.path.lexists(temp)  # refused, not replaced or removed


@pytest.mark.parametrize(
    ("umask", "file_mode", "dir_mode"), [(0o077, 0o600, 0o700), (0, 0o644, 0o755)]
)
def test_files_honour_the_umask_and_are_never_world_writable(
    tmp_path: Path, umask: int, file_mode: int, dir_mode: int
) -> None:
    """Dumps, sidecars, the journal and their folders follow the umask; none is world-writable."""
    out = tmp_path / "out"
    old = os.umask(umask)
    try:
        device = reset_device(total_bytes=32 * MiB)
        mf = memforensics.install(device="sim", out_dir=str(out), steps=1, max_windows=1)
        with mf.step(0), contextlib.suppress(SimOutOfMemoryError):
            device.empty(1 << 30)
        mf.close()
    finally:
        os.umask(old)
    files = [p for p in out.rglob("*") if p.is_file()]
    assert len(files) == 5  # oom and window: snapshot and sidecar each; the journal
    for path in files:
        assert stat.S_IMODE(path.stat().st_mode) == file_mode, path
    for folder in (p for p in out.rglob("*") if p.is_dir()):
        assert stat.S_IMODE(folder.stat().st_mode) == dir_mode, folder


# -- hostile pickles -----------------------------------------------------------------------------

_AUDIT: dict[str, Any] = {"armed": False, "events": []}
_WATCHED = frozenset(
    {
        "os.system",
        "exec",
        "compile",
        "subprocess.Popen",
        "os.posix_spawn",
        "os.fork",
        "builtins.input",
        "pickle.find_class",
    }
)
_WATCHED_PREFIXES = ("os.exec", "os.spawn", "ctypes.")


def _audit(event: str, _: tuple[Any, ...]) -> None:
    if _AUDIT["armed"] and (event in _WATCHED or event.startswith(_WATCHED_PREFIXES)):
        _AUDIT["events"].append(event)


@pytest.fixture(scope="module")
def audit() -> dict[str, Any]:
    """A process audit hook that records any code execution while ``armed``."""
    if not _AUDIT.get("installed"):
        sys.addaudithook(_audit)  # audit hooks cannot be removed; it only records when armed
        _AUDIT["installed"] = True
    return _AUDIT


@contextlib.contextmanager
def _armed(audit: dict[str, Any]) -> Iterator[None]:
    audit["events"].clear()
    audit["armed"] = True
    try:
        yield
    finally:
        audit["armed"] = False


def _text(value: str) -> bytes:
    data = value.encode()
    return b"\x8c" + bytes([len(data)]) + data


def _global4(module: str, name: str) -> bytes:
    return _text(module) + _text(name) + b"\x93"


def _hostile(marker: Path) -> dict[str, bytes]:
    """Hand-written pickles that would run code: each touches ``marker`` if it ever runs."""
    cmd = f"touch {marker}"
    code = f"open({str(marker)!r}, 'w').close()"
    p4 = b"\x80\x04"
    snap = b"}(\x8c\x08segments]("  # {"segments": [ <payload> ]}
    end = b"ea\x8c\x0edevice_traces](]eu."
    return {
        "global_reduce_os_system": f"cos\nsystem\n(S'{cmd}'\ntR.".encode(),
        "global_reduce_posix_system": f"cposix\nsystem\n(S'{cmd}'\ntR.".encode(),
        "stack_global_builtins_eval": p4 + _global4("builtins", "eval") + _text(code) + b"\x85R.",
        "stack_global_builtins_exec": p4 + _global4("builtins", "exec") + _text(code) + b"\x85R.",
        "py2_builtin_eval": f'c__builtin__\neval\n(S"{code}"\ntR.'.encode(),
        "inst_os_system": f"(S'{cmd}'\nios\nsystem\n.".encode(),
        "obj_os_system": f"(cos\nsystem\nS'{cmd}'\no.".encode(),
        "subprocess_popen": p4
        + _global4("subprocess", "Popen")
        + b"]("
        + _text("sh")
        + _text("-c")
        + _text(cmd)
        + b"e\x85R.",
        "nested_in_snapshot": p4 + snap + _global4("os", "system") + _text(cmd) + b"\x85R" + end,
        "newobj_class_instance": pickle.dumps(_SetStateBomb(marker), protocol=4),
        "reduce_class_instance": pickle.dumps(_ReduceBomb(marker), protocol=2),
        "getattr_chain": p4
        + _global4("builtins", "getattr")
        + _global4("os", "path")
        + _text("exists")
        + b"\x86R"
        + _text(str(marker))
        + b"\x85R.",
        "extension_code": b"\x80\x02\x82\xf0" + f"(S'{cmd}'\ntR.".encode(),
        "persistent_id": b"Pos.system\n.",
        "binpersid": p4 + _text("os.system") + b"Q.",
        "build_setstate_on_dict": p4 + b"}" + b"}" + _text("x") + b"Kxs" + b"b.",
        "out_of_band_buffer": b"\x80\x05\x97.",
    }


class _SetStateBomb:
    """Unpickled through NEWOBJ + BUILD: ``__setstate__`` would touch the marker."""

    def __init__(self, marker: Path) -> None:
        self.marker = str(marker)

    def __setstate__(self, state: dict[str, str]) -> None:
        Path(state["marker"]).touch()


class _ReduceBomb:
    """Unpickled through REDUCE to ``os.system``."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Callable[[str], int], tuple[str]]:
        return (os.system, (f"touch {self.marker}",))


@pytest.fixture
def _extension_240() -> Iterator[None]:
    copyreg.add_extension("os", "system", 240)
    yield
    copyreg.remove_extension("os", "system", 240)


@pytest.mark.usefixtures("_extension_240")
@pytest.mark.parametrize("name", sorted(_hostile(Path("m"))))
def test_safe_loader_refuses_every_non_plain_object(
    tmp_path: Path, name: str, audit: dict[str, Any]
) -> None:
    """Hostile pickles (GLOBAL/REDUCE, INST, OBJ, classes, extensions, persistent ids) never run."""
    marker = tmp_path / "pwned"
    path = tmp_path / f"{name}.pickle"
    path.write_bytes(_hostile(marker)[name])
    with _armed(audit), pytest.raises(SnapshotLoadError) as info:
        load_dump(path)
    assert audit["events"] == []
    assert not marker.exists()
    assert str(path) in str(info.value)
    assert "\n" not in str(info.value)


def test_in_band_buffers_load_as_inert_bytes(tmp_path: Path) -> None:
    """Protocol-5 in-band buffers (BYTEARRAY8 + READONLY_BUFFER) load as read-only bytes-like data.

    They are the one non-container type the C unpickler can build without find_class; they hold
    bytes and run nothing, so the loader treats them as plain data (docs/guarantees.md says so)
    rather than paying a full walk of every loaded object on each load.
    """
    bytearray8 = b"\x96" + (3).to_bytes(8, "little") + b"abc"
    body = _text("segments") + b"]" + _text("device_traces") + b"]" + _text("x") + bytearray8
    path = tmp_path / "view.pickle"
    path.write_bytes(b"\x80\x05}(" + body + b"\x98u.")
    value = load_dump(path).snapshot["x"]
    assert bytes(value) == b"abc"
    assert memoryview(value).readonly


@pytest.mark.integration
def test_cli_refuses_a_hostile_snapshot_without_running_it(tmp_path: Path) -> None:
    """memforensics summary on a pickle reducing to os.system: exit 2, one line, nothing ran."""
    marker = tmp_path / "pwned"
    path = tmp_path / "evil.pickle"
    path.write_bytes(_hostile(marker)["nested_in_snapshot"])
    proc = subprocess.run(
        [sys.executable, "-m", "memforensics", "summary", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 2
    assert len(proc.stderr.strip().splitlines()) == 1
    assert not marker.exists()


# -- fuzzing the safe loader ------------------------------------------------------------------

_PLAIN = (dict, list, tuple, set, frozenset, str, bytes, bytearray, int, float, bool, type(None))
_SPLICES = [
    b"cos\nsystem\n",
    b"\x93",
    b"R",
    b"\x81",
    b"\x92",
    b"b",
    b"i",
    b"o",
    b"\x82\xf0",
    b"P1\n",
    b"Q",
    b"\x97",
    b"c__main__\n_SetStateBomb\n",
    _global4("builtins", "eval"),
]


def _sim_seed() -> bytes:
    device = reset_device(total_bytes=32 * MiB)
    device.record_memory_history("all", max_entries=10_000)
    kept = [device.empty(n * MiB) for n in (1, 2, 3)]
    kept[1].free()
    with contextlib.suppress(SimOutOfMemoryError):
        device.empty(1 << 30)
    snapshot = device.snapshot()
    device.record_memory_history(None, max_entries=1)
    return pickle.dumps(snapshot, protocol=4)


def _seeds() -> list[bytes]:
    seeds = [
        _sim_seed(),
        pickle.dumps(fragmented().snapshot, protocol=4),
        pickle.dumps(exhausted().snapshot, protocol=4),
    ]
    seeds += [path.read_bytes() for path in real_snapshots()]  # none where they are absent
    return seeds


_mutation = st.tuples(
    st.sampled_from(["flip", "set", "insert", "delete", "truncate", "splice", "duplicate"]),
    st.integers(0, 2**32),
    st.integers(0, 255),
    st.integers(1, 64),
    st.integers(0, len(_SPLICES) - 1),
)


def _mutate(data: bytes, mutations: list[tuple[str, int, int, int, int]]) -> bytes:
    buf = bytearray(data)
    for kind, where, value, length, splice in mutations:
        at = where % (len(buf) + 1)
        if kind == "flip" and at < len(buf):
            buf[at] ^= 1 << (value % 8)
        elif kind == "set" and at < len(buf):
            buf[at] = value
        elif kind == "insert":
            buf[at:at] = bytes([value]) * length
        elif kind == "delete":
            del buf[at : at + length]
        elif kind == "truncate":
            del buf[at:]
        elif kind == "splice":
            buf[at:at] = _SPLICES[splice]
        elif kind == "duplicate":
            buf[at:at] = buf[at : at + length * 16]
    return bytes(buf)


def _assert_plain(value: object) -> None:
    stack, seen = [value], set()
    while stack:
        item = stack.pop()
        assert type(item) in _PLAIN, type(item)
        if id(item) in seen:
            continue
        seen.add(id(item))
        if isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list | tuple | set | frozenset):
            stack.extend(item)


def _fuzz(tmp_path: Path, audit: dict[str, Any], examples: int) -> dict[str, int]:
    seeds = _seeds()
    path = tmp_path / "fuzz.pickle"
    marker = Path.cwd() / "pwned"  # where a spliced ``touch`` would land
    counts = {"inputs": 0, "loaded": 0, "refused": 0, "crashes": 0, "code_execution": 0}
    counts |= {f"seed{index}_inputs": 0 for index in range(len(seeds))}

    @settings(
        max_examples=examples,
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(st.sampled_from(range(len(seeds))), st.lists(_mutation, min_size=1, max_size=6))
    def one(seed: int, mutations: list[tuple[str, int, int, int, int]]) -> None:
        path.write_bytes(_mutate(seeds[seed], mutations))
        counts["inputs"] += 1
        counts[f"seed{seed}_inputs"] += 1
        with _armed(audit):
            try:
                dump = load_dump(path)
            except SnapshotLoadError as exc:
                message = str(exc)
                counts["refused"] += 1
                assert "\n" not in message
            except Exception:
                counts["crashes"] += 1
                raise
            else:
                _assert_plain(dump.snapshot)
                counts["loaded"] += 1
        counts["code_execution"] += len(audit["events"]) + marker.exists()
        assert audit["events"] == []
        assert not marker.exists()

    one()
    assert counts["crashes"] == counts["code_execution"] == 0
    return counts


def test_safe_loader_fuzzed_with_mutated_snapshots(tmp_path: Path, audit: dict[str, Any]) -> None:
    """Byte-mutated real and sim snapshots: a load or SnapshotLoadError, never code execution."""
    counts = _fuzz(tmp_path, audit, examples=300)
    assert counts["inputs"] >= 300
    print("FIGURES fuzz " + " ".join(f"{k}={v}" for k, v in counts.items()))


@pytest.mark.stress
def test_safe_loader_fuzzed_stress(tmp_path: Path, audit: dict[str, Any]) -> None:
    """Stress: 20,000 mutated snapshots through the safe loader: zero crashes, zero code run."""
    counts = _fuzz(tmp_path, audit, examples=20_000)
    print("FIGURES fuzz " + " ".join(f"{k}={v}" for k, v in counts.items()))


# -- configuration from the environment ---------------------------------------------------------

_BAD_ENV = [
    ({"MEMFORENSICS_STEPS": "four"}, "steps"),
    ({"MEMFORENSICS_STEPS": "0"}, "steps"),
    ({"MEMFORENSICS_DEVICE": "gpu"}, "device"),
    ({"MEMFORENSICS_RANKS": "[0, -1]"}, "ranks"),
    ({"MEMFORENSICS_WINDOW_RANKS": "0,x"}, "window_ranks"),
    ({"MEMFORENSICS_OOM": "maybe"}, "oom"),
    ({"MEMFORENSICS_STEPS": "4", "MEMFORENSICS_EVERY": "2"}, "every"),
    ({"MEMFORENSICS_RANKS": "[" * 100_000}, "ranks"),
    ({"MEMFORENSICS_OUT_DIR": "{blocked}"}, "out_dir"),
]
_CHILD = """
import json, memforensics
try:
    memforensics.install()
except memforensics.ConfigError as exc:
    print(json.dumps({"field": exc.field, "message": str(exc)}))
else:
    print(json.dumps(None))
"""


@pytest.mark.integration
@pytest.mark.parametrize(("env", "field"), _BAD_ENV, ids=[f for _, f in _BAD_ENV])
def test_bad_environment_value_fails_install_naming_the_variable(
    tmp_path: Path, env: dict[str, str], field: str
) -> None:
    """A bad MEMFORENSICS_* value makes install() raise ConfigError naming that variable."""
    blocked = tmp_path / "file"
    blocked.write_text("x")
    env = {k: v.replace("{blocked}", str(blocked)) for k, v in env.items()}
    clean = {k: v for k, v in os.environ.items() if not k.startswith("MEMFORENSICS_")}
    proc = subprocess.run(
        [sys.executable, "-c", _CHILD],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=tmp_path,
        env={**clean, **env, "MEMFORENSICS_DEVICE": env.get("MEMFORENSICS_DEVICE", "none")},
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    error = json.loads(proc.stdout)
    assert error is not None, "install() accepted a bad value"
    assert error["field"] == field
    assert env_var(field) in error["message"]
    assert "\n" not in error["message"]


_env_values = st.one_of(
    st.text(max_size=12),
    st.sampled_from(["", "none", "all", "[1,2]", "[", "0,1", "-1", "true", "1e3", "sim", "state"]),
    st.integers(-5, 10**20).map(str),
)


@settings(max_examples=300, deadline=None, database=None)
@given(st.dictionaries(st.sampled_from(FIELDS), _env_values, max_size=4))
def test_environment_is_validated_like_keywords(values: dict[str, str]) -> None:
    """Any MEMFORENSICS_* text gives a valid config or a ConfigError naming one of the variables."""
    environ = {env_var(field): text for field, text in values.items()}
    try:
        config = build_config({}, environ)
    except ConfigError as exc:
        field, message = exc.field, str(exc)
        assert field in values
        assert env_var(field) in message
        return
    for field, text in values.items():
        value = getattr(config, field)
        assert value is not None or text.strip().lower() in {"", "none", "null"}
