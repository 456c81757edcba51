"""AnswerCache: keyed by the file's identity, checked before use, bounded, never an error."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from memforensics.analysis.cache import MAX_BYTES_ENV, AnswerCache, default_max_bytes, file_key


def _dump(tmp_path: Path, name: str = "d.pickle", data: bytes = b"snapshot") -> Path:
    path = tmp_path / name
    path.write_bytes(data)
    return path


def test_an_answer_comes_back_for_the_same_file_and_question(tmp_path: Path) -> None:
    """What was stored is returned for the same file and question, and only for them."""
    path = _dump(tmp_path)
    cache = AnswerCache(tmp_path / "cache", max_bytes=1 << 20)
    cache.store([path], "summary []", "the answer")
    assert cache.lookup([path], "summary []") == "the answer"
    assert cache.lookup([path], "replay []") is None
    other = _dump(tmp_path, "e.pickle", b"another one")
    assert cache.lookup([other], "summary []") is None


def test_the_key_changes_with_the_middle_of_a_small_file_and_with_its_tail(tmp_path: Path) -> None:
    """Same size and mtime: a change in the first or last 64 KiB changes the key."""
    body = bytearray(300_000)
    path = _dump(tmp_path, data=bytes(body))
    info = path.stat()
    first = file_key(path)
    for offset in (10, len(body) - 10):
        changed = bytearray(body)
        changed[offset] = 1
        with path.open("r+b") as handle:
            handle.write(bytes(changed))
        os.utime(path, ns=(info.st_atime_ns, info.st_mtime_ns))
        assert file_key(path) != first


def test_the_oldest_used_entries_go_first_when_over_the_cap(tmp_path: Path) -> None:
    """Past max_bytes, least recently used entries are evicted; a served entry counts as used."""
    path = _dump(tmp_path)
    cache = AnswerCache(tmp_path / "cache", max_bytes=10**9)
    for n in range(3):
        cache.store([path], f"q{n}", "x" * 1000)
    entries = sorted((tmp_path / "cache").glob("*.entry"))
    for number, entry in enumerate(entries):
        os.utime(entry, ns=(number * 10**9, number * 10**9))
    oldest = min(entries, key=lambda e: e.stat().st_mtime_ns)
    size = oldest.stat().st_size
    cache.max_bytes = 3 * size  # room for three: the fourth write evicts the least recent
    cache.store([path], "q3", "x" * 1000)
    left = list((tmp_path / "cache").glob("*.entry"))
    assert len(left) == 3
    assert oldest not in left
    assert sum(e.stat().st_size for e in left) <= cache.max_bytes


def test_a_full_disk_turns_the_cache_off_with_one_warning(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """ENOSPC while writing: no exception, one warning, and the cache stops trying."""
    path = _dump(tmp_path)
    cache = AnswerCache(tmp_path / "cache", max_bytes=1 << 20)

    def full(*args: object, **kwargs: object) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr("tempfile.mkstemp", full)
    cache.store([path], "q", "answer")
    cache.store([path], "q2", "answer")
    assert cache.warning is not None
    assert "No space left on device" in cache.warning
    assert not cache.enabled
    assert cache.lookup([path], "q") is None


def test_a_missing_dump_is_not_cached(tmp_path: Path) -> None:
    """A file that cannot be read has no key: nothing is stored or served for it."""
    cache = AnswerCache(tmp_path / "cache", max_bytes=1 << 20)
    cache.store([tmp_path / "gone.pickle"], "q", "answer")
    assert cache.lookup([tmp_path / "gone.pickle"], "q") is None
    assert not list((tmp_path / "cache").glob("*.entry"))


def test_the_cap_comes_from_the_environment_else_the_disk(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """MEMFORENSICS_CACHE_MAX_BYTES sets the cap; without it, at most 2 GiB."""
    monkeypatch.setenv(MAX_BYTES_ENV, "12345")
    assert default_max_bytes(tmp_path / "nowhere") == 12345
    monkeypatch.delenv(MAX_BYTES_ENV)
    assert 0 < default_max_bytes(tmp_path / "nowhere") <= 2 * 1024**3
