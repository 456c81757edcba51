"""``memforensics run`` driven in-process: flags, python-like execution, pass-through, clean-up."""

from __future__ import annotations

import json
import os
import sys
import textwrap
import traceback
import types
from collections.abc import Iterator
from pathlib import Path

import pytest

import memforensics.capture.facade
from memforensics.capture.config import FIELDS
from memforensics.cli import main
from memforensics.cli._flags import flag_name
from memforensics.cli._main import build_parser
from memforensics.testing import SimOutOfMemoryError, reset_device


@pytest.fixture(autouse=True)
def _fresh_sim_device() -> Iterator[None]:
    """Each test gets a fresh 1 GiB sim device, and leaves one behind."""
    reset_device()
    yield
    reset_device()


@pytest.fixture
def payload(monkeypatch: pytest.MonkeyPatch) -> types.SimpleNamespace:
    """A module the scripts import to hand values back to the test (``import mf_payload``)."""
    box = types.SimpleNamespace()
    monkeypatch.setitem(sys.modules, "mf_payload", box)
    return box


def _script(tmp_path: Path, body: str, name: str = "train.py") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(body))
    return path


def _run(*args: str | Path) -> int:
    return main(["run", *map(str, args)])


def test_every_config_field_has_a_flag() -> None:
    """Each ForensicsConfig field has a --kebab-case flag on `run`."""
    _, table = build_parser()
    options = table["run"][1]._option_string_actions
    for field in FIELDS:
        assert flag_name(field) in options


def test_flags_parse_like_env_and_only_passed_flags_override_env(
    tmp_path: Path, payload: types.SimpleNamespace, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Flags take env-variable syntax; fields without a flag still come from MEMFORENSICS_*."""
    monkeypatch.setenv("MEMFORENSICS_KEEP_LAST", "5")
    monkeypatch.setenv("MEMFORENSICS_STEPS", "7")
    script = _script(
        tmp_path,
        """
        import mf_payload, memforensics.capture.facade
        mf_payload.config = memforensics.capture.facade.current().config
        """,
    )
    code = _run(
        "--steps", "2", "--window-ranks", "0,2", "--ranks", "[0, 1, 2]", "--oom", "false",
        "--device", "sim", "--out-dir", tmp_path / "out", script,
    )  # fmt: skip
    assert code == 0
    config = payload.config
    assert config.steps == 2
    assert config.keep_last == 5
    assert config.window_ranks == (0, 2)
    assert config.ranks == (0, 1, 2)
    assert config.oom is False
    assert config.out_dir == str(tmp_path / "out")


def test_bad_flag_text_is_a_usage_error_naming_the_flag(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A flag value that does not parse exits 2 with argparse's message naming the flag."""
    script = _script(tmp_path, "raise AssertionError('must not run')\n")
    with pytest.raises(SystemExit) as excinfo:
        _run("--max-entries", "lots", script)
    assert excinfo.value.code == 2
    assert "argument --max-entries: invalid value 'lots'" in capsys.readouterr().err


def test_invalid_config_is_one_line_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A value the config rejects gives one line on stderr, exit status 2, and no script run."""
    script = _script(tmp_path, "raise AssertionError('must not run')\n")
    code = _run("--device", "gpu", "--out-dir", tmp_path, script)
    err = capsys.readouterr().err.strip()
    assert code == 2
    assert err.startswith("memforensics run: invalid config field 'device'")
    assert err.endswith("(from --device)")
    assert "\n" not in err


def test_argv_path_and_main_are_set_like_python_and_restored(
    tmp_path: Path, payload: types.SimpleNamespace
) -> None:
    """The script sees python's argv, sys.path[0] and __name__; ours are restored afterwards."""
    sub = tmp_path / "sub"
    sub.mkdir()
    script = _script(
        sub,
        """
        import sys, mf_payload
        mf_payload.argv = list(sys.argv)
        mf_payload.path0 = sys.path[0]
        mf_payload.name = __name__
        mf_payload.file = __file__
        mf_payload.main_is_script = sys.modules["__main__"].__dict__ is globals()
        """,
    )
    argv, path0 = list(sys.argv), sys.path[0]
    code = _run("--device", "sim", "--out-dir", tmp_path / "o", script, "--steps", "9", "-m", "x")
    assert code == 0
    assert payload.argv == [str(script), "--steps", "9", "-m", "x"]
    assert payload.path0 == str(sub)
    assert payload.name == "__main__"
    assert payload.file == str(script)
    assert payload.main_is_script is True
    assert sys.argv == argv
    assert sys.path[0] == path0


def test_double_dash_before_the_script_is_ours(
    tmp_path: Path, payload: types.SimpleNamespace
) -> None:
    """`run -- script.py -- x` drops the first `--` and passes the second to the script."""
    script = _script(tmp_path, "import sys, mf_payload; mf_payload.argv = sys.argv[1:]\n")
    assert _run("--device", "sim", "--out-dir", tmp_path / "o", "--", script, "--", "x") == 0
    assert payload.argv == ["--", "x"]


def _command(folder: Path, name: str, first_line: str, body: str) -> Path:
    """An executable file ``name`` in ``folder``, as pip installs a console script."""
    folder.mkdir(exist_ok=True)
    path = folder / name
    path.write_text(f"{first_line}\n{textwrap.dedent(body)}")
    path.chmod(0o755)
    return path


def test_a_console_script_on_path_runs_as_the_shell_would_run_it(
    tmp_path: Path, payload: types.SimpleNamespace, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`run mftool a b` runs the Python console script `mftool` found on PATH, as `mftool a b`."""
    body = "import sys, mf_payload; mf_payload.argv = sys.argv[1:]; mf_payload.file = __file__\n"
    tool = _command(tmp_path / "bin", "mftool", f"#!{sys.executable}", body)
    monkeypatch.setenv("PATH", f"{tool.parent}{os.pathsep}{os.environ.get('PATH', '')}")
    monkeypatch.chdir(tmp_path)
    assert _run("--device", "sim", "--out-dir", tmp_path / "o", "mftool", "a", "b") == 0
    assert payload.argv == ["a", "b"]
    assert payload.file == str(tool)


def test_a_file_in_the_working_directory_wins_over_a_command_and_a_shell_command_is_no_script(
    tmp_path: Path,
    payload: types.SimpleNamespace,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`run mftool` runs ./mftool where there is one, as python would; a shell script on PATH
    is not run as Python: it fails as `python mfsh` does."""
    here = "import mf_payload; mf_payload.which = 'here'\n"
    _command(tmp_path / "bin", "mftool", f"#!{sys.executable}", "raise SystemExit(3)\n")
    _command(tmp_path / "bin", "mfsh", "#!/bin/sh", "exit 0\n")
    _script(tmp_path, here, name="mftool")
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}")
    monkeypatch.chdir(tmp_path)
    assert _run("--device", "sim", "--out-dir", tmp_path / "o", "mftool") == 0
    assert payload.which == "here"
    assert _run("--device", "sim", "mfsh") == 2
    assert capsys.readouterr().err.splitlines()[-1] == (
        f"memforensics run: can't open file '{tmp_path / 'mfsh'}': "
        "[Errno 2] No such file or directory"
    )


def test_module_runs_as_main_with_cwd_on_path(
    tmp_path: Path, payload: types.SimpleNamespace, monkeypatch: pytest.MonkeyPatch
) -> None:
    """-m runs a module as __main__ with argv[0] its file and sys.path[0] the working directory."""
    package = tmp_path / "mfpkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    _script(
        package,
        "import sys, mf_payload\nmf_payload.seen = (list(sys.argv), sys.path[0], __name__)\n",
        name="train.py",
    )
    monkeypatch.chdir(tmp_path)
    monkeypatch.delitem(sys.modules, "mfpkg", raising=False)
    code = _run("--device", "sim", "--out-dir", tmp_path / "o", "-m", "mfpkg.train", "--lr", "3")
    assert code == 0
    argv, path0, name = payload.seen
    assert argv == [str(package / "train.py"), "--lr", "3"]
    assert path0 == str(tmp_path)
    assert name == "__main__"


@pytest.mark.parametrize(("code", "expected"), [(7, 7), (0, 0), (None, None), ("bye", "bye")])
def test_system_exit_passes_through(tmp_path: Path, code: object, expected: object) -> None:
    """The script's SystemExit leaves `run` with the same code."""
    script = _script(tmp_path, f"import sys\nsys.exit({code!r})\n")
    with pytest.raises(SystemExit) as excinfo:
        _run("--device", "sim", "--out-dir", tmp_path / "o", script)
    assert excinfo.value.code == expected


def test_exception_is_the_same_object_with_script_frames_first(
    tmp_path: Path, payload: types.SimpleNamespace
) -> None:
    """An uncaught exception leaves main() unchanged; the runner's and runpy's frames are gone."""
    payload.error = ValueError("boom")
    script = _script(
        tmp_path,
        """
        import mf_payload

        def fail():
            raise mf_payload.error

        fail()
        """,
    )
    with pytest.raises(ValueError, match="boom") as excinfo:
        _run("--device", "sim", "--out-dir", tmp_path / "o", script)
    assert excinfo.value is payload.error
    frames = traceback.extract_tb(excinfo.value.__traceback__)
    files = [frame.filename for frame in frames]
    assert not any("runpy" in name or name.endswith("_run.py") for name in files)
    assert [frame.name for frame in frames if frame.filename == str(script)] == ["<module>", "fail"]


def test_keyboard_interrupt_prints_traceback_and_exits_130(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Ctrl-C in the script prints python's traceback, then exits 130 like the console script."""
    script = _script(tmp_path, "raise KeyboardInterrupt\n")
    assert _run("--device", "sim", "--out-dir", tmp_path / "o", script) == 130
    err = capsys.readouterr().err
    assert "Traceback (most recent call last)" in err
    assert f'File "{script}", line 1, in <module>' in err
    assert err.rstrip().endswith("KeyboardInterrupt")


def test_script_install_gets_the_facade_run_installed(
    tmp_path: Path, payload: types.SimpleNamespace
) -> None:
    """Flags are exported as MEMFORENSICS_* while the script runs, so install() returns run's
    facade; the variables are gone afterwards."""
    script = _script(
        tmp_path,
        """
        import os, memforensics, memforensics.capture.facade, mf_payload
        before = memforensics.capture.facade.current()
        mf_payload.same = memforensics.install() is before
        mf_payload.env = os.environ.get("MEMFORENSICS_STEPS")
        """,
    )
    assert "MEMFORENSICS_STEPS" not in os.environ
    assert _run("--steps", "3", "--device", "sim", "--out-dir", tmp_path / "o", script) == 0
    assert payload.same is True
    assert payload.env == "3"
    assert "MEMFORENSICS_STEPS" not in os.environ


def test_oom_in_a_script_without_steps_is_dumped(tmp_path: Path) -> None:
    """A sim OOM in a script that never calls mf.step() propagates unchanged and is dumped."""
    reset_device(64 << 20)
    script = _script(
        tmp_path,
        """
        from memforensics.testing import get_device
        kept = get_device().empty(8 << 20)
        get_device().empty(128 << 20)
        """,
    )
    with pytest.raises(SimOutOfMemoryError):
        _run("--device", "sim", "--out-dir", tmp_path / "out", script)
    [dump] = (tmp_path / "out" / "oom").glob("*.pickle")
    sidecar = json.loads(dump.with_suffix(".json").read_text())
    assert sidecar["kind"] == "oom"
    assert sidecar["step"] is None
    assert memforensics.capture.facade.current() is None


def test_partial_window_is_flushed_when_the_script_fails(tmp_path: Path) -> None:
    """An exception after three of ten window steps still dumps the partial window."""
    script = _script(
        tmp_path,
        """
        import memforensics
        from memforensics.testing import get_device
        mf = memforensics.install()
        for step in range(3):
            with mf.step(step):
                get_device().empty(1 << 20)
        raise RuntimeError("stop")
        """,
    )
    with pytest.raises(RuntimeError, match="stop"):
        _run("--steps", "10", "--device", "sim", "--out-dir", tmp_path / "out", script)
    [sidecar] = (tmp_path / "out" / "steps0-2").glob("*.json")
    assert json.loads(sidecar.read_text())["partial"] is True


def test_missing_script_exits_2_and_missing_module_exits_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A missing script or module fails as python does (2 and 1), in one line, before install."""
    monkeypatch.chdir(tmp_path)
    assert _run("--device", "sim", "nope.py") == 2
    assert _run("--device", "sim", "-m", "mf_no_such_module") == 1
    err = capsys.readouterr().err.splitlines()
    assert err == [
        f"memforensics run: can't open file '{tmp_path / 'nope.py'}': "
        "[Errno 2] No such file or directory",
        "memforensics run: No module named mf_no_such_module",
    ]
    assert not (tmp_path / "memforensics").exists()


def test_package_without_main_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """-m on a package with no __main__ fails like python's -m (exit status 1)."""
    (tmp_path / "mfbare").mkdir()
    (tmp_path / "mfbare" / "__init__.py").write_text("")
    monkeypatch.chdir(tmp_path)
    monkeypatch.delitem(sys.modules, "mfbare", raising=False)
    assert _run("--device", "sim", "-m", "mfbare") == 1


def test_no_target_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    """`run` without a script or -m exits 2 with a usage message."""
    with pytest.raises(SystemExit) as excinfo:
        _run("--steps", "2")
    assert excinfo.value.code == 2
    assert "a script or -m MODULE is required" in capsys.readouterr().err


def test_the_users_script_runs_with_the_collector_on(
    tmp_path: Path, payload: types.SimpleNamespace
) -> None:
    """The reading commands hold the cyclic collector off; a script under `run` never sees that."""
    script = _script(tmp_path, "import gc, mf_payload\nmf_payload.enabled = gc.isenabled()\n")
    assert _run(script) == 0
    assert payload.enabled is True


def test_a_reading_command_gives_the_collector_back(tmp_path: Path) -> None:
    """`summary` holds the collector off while it reads, and turns it on again when done."""
    import gc

    from memforensics.testing import fragmented

    dump = tmp_path / "rank0.pickle"
    fragmented().write(dump)
    assert gc.isenabled()
    assert main(["summary", "--no-cache", "--quiet", str(dump)]) == 0
    assert gc.isenabled()
