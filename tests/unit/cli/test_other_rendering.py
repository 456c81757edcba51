"""The other rendering of an answer is a second look: after a command's text, its --json (and
the other way round) comes from the cache, without reading the dumps, equal to an uncached run."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest

from memforensics.cli._main import main
from memforensics.testing import exhausted, fragmented, write_run_folder


def _printed(capsys: pytest.CaptureFixture[str], argv: list[str]) -> tuple[int, str, str]:
    status = main(argv)
    out = capsys.readouterr()
    return status, out.out, out.err


def _unreadable(monkeypatch: pytest.MonkeyPatch, command: str, name: str) -> None:
    """From now on the command cannot read a dump: an answer printed came from the cache."""
    module = importlib.import_module(f"memforensics.cli.commands.{command}")

    def refuse(*args: object, **kwargs: object) -> object:
        raise AssertionError(f"{command} read a dump")

    monkeypatch.setattr(module, name, refuse)


@pytest.mark.parametrize("first_json", [False, True])
@pytest.mark.parametrize(
    ("command", "reader"),
    [("summary", "load_dump"), ("replay", "load_dump"), ("diff", "load_dump"),
     ("leaks", "read_windows")],
)  # fmt: skip
def test_the_other_rendering_comes_from_the_cache(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    command: str,
    reader: str,
    first_json: bool,
) -> None:
    """summary, replay, diff and leaks: text then --json, or --json then text, reads the dumps
    once; the second rendering is what --no-cache prints."""
    if command == "leaks":
        write_run_folder(tmp_path / "run", world_size=2)
        files = [str(tmp_path / "run")]
    elif command == "diff":
        files = [str(fragmented().write(tmp_path / "a.pickle")),
                 str(exhausted().write(tmp_path / "b.pickle"))]  # fmt: skip
    else:
        files = [str(exhausted().write(tmp_path / "d.pickle"))]
    cache = ["--cache-dir", str(tmp_path / "cache")]
    first = [command, *files, *(["--json"] if first_json else []), "-q"]
    second = [command, *files, *([] if first_json else ["--json"]), "-q"]
    expected = _printed(capsys, [*second, "--no-cache"])
    _printed(capsys, [*first, *cache])
    _unreadable(monkeypatch, command, reader)
    assert _printed(capsys, [*second, *cache]) == expected
