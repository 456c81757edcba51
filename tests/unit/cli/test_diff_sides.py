"""What diff reads of a dump (its sides, a pure function of the dump) is kept by the CLI's
cache: a later diff with that dump on either side reads only what the cache does not hold,
and prints what an uncached run prints."""

from __future__ import annotations

from pathlib import Path

import pytest

from memforensics.cli._cache import ResultCache
from memforensics.cli._main import main
from memforensics.cli.commands import diff as diff_command
from memforensics.testing import (
    context_pair,
    exhausted,
    fragmented,
    growth_pair,
    several_devices,
    write_dump,
)


def _printed(capsys: pytest.CaptureFixture[str], argv: list[str]) -> tuple[int, str, str]:
    status = main(argv)
    out = capsys.readouterr()
    return status, out.out, out.err


def _counting(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Record the name of each dump diff reads from now on."""
    read: list[str] = []
    real = diff_command.load_dump

    def load(path: Path, **kwargs: object) -> object:
        read.append(Path(path).name)
        return real(path, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(diff_command, "load_dump", load)
    return read


def _dumps(tmp_path: Path) -> dict[str, Path]:
    before, after = growth_pair()
    multi = several_devices()
    short, long = context_pair()
    return {
        "s": short.write(tmp_path / "s.pickle"),
        "l": long.write(tmp_path / "l.pickle"),
        "a": before.write(tmp_path / "a.pickle"),
        "b": after.write(tmp_path / "b.pickle"),
        "c": exhausted().write(tmp_path / "c.pickle"),
        "f": fragmented().write(tmp_path / "f.pickle"),
        "m": write_dump(tmp_path / "m.pickle", multi.snapshot, sidecar=multi.sidecar),
    }


@pytest.mark.parametrize(
    ("first", "later", "read"),
    [
        (["a", "b"], ["b", "a", "--json"], []),  # both sides kept, the other way round
        (["a", "b"], ["a", "c"], ["c.pickle"]),  # a new partner: only it is read
        (["a", "b"], ["a", "b", "--top", "1"], []),  # another question, the same views
        (["c", "m"], ["c", "m", "--device", "0"], []),  # the first kept device 0's sides
        (["a", "b", "--device", "0"], ["a", "b"], ["a.pickle", "b.pickle"]),  # whole: not kept
        (["c", "m", "--device", "0"], ["m", "c", "--device", "0", "--json"], []),
        (["s", "l"], ["l", "s", "--json"], []),  # the peaks are kept with the sides
        (["s", "l"], ["s", "l"], []),
    ],
)
def test_a_later_diff_reads_only_the_views_the_cache_lacks(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    first: list[str],
    later: list[str],
    read: list[str],
) -> None:
    """After a first diff, a later one reads exactly the dumps whose views were not kept, and
    prints what --no-cache prints."""
    dumps = _dumps(tmp_path)

    def argv(words: list[str]) -> list[str]:
        return ["diff", *(str(dumps[w]) if w in dumps else w for w in words), "-q"]

    cache = ["--cache-dir", str(tmp_path / "cache")]
    expected = _printed(capsys, [*argv(later), "--no-cache"])
    assert _printed(capsys, [*argv(first), *cache])[0] == 0
    seen = _counting(monkeypatch)
    assert _printed(capsys, [*argv(later), *cache]) == expected
    assert seen == read


def test_kept_views_of_the_wrong_shape_are_worked_out_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """An entry with a sound checksum but a foreign shape (rows of two numbers) is not
    trusted: the dump is read again and the answer is the uncached one."""
    dumps = _dumps(tmp_path)
    folder = tmp_path / "cache"
    ResultCache(folder).keep(
        [dumps["a"]], "diff side null", {"name": "a", "device": 0, "live": [[1, 2]]}
    )
    argv = ["diff", str(dumps["a"]), str(dumps["b"]), "-q"]
    expected = _printed(capsys, [*argv, "--no-cache"])
    seen = _counting(monkeypatch)
    assert _printed(capsys, [*argv, "--cache-dir", str(folder)]) == expected
    assert seen == ["a.pickle", "b.pickle"]
