"""ResultCache: keyed by the files' identity, the question and the code; typed results checked
before use; bounded; never an error; an unsafe folder, a symlink or a FIFO never trusted."""

from __future__ import annotations

import errno
import json
import os
import shutil
import stat
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from memforensics.analysis.schema import document, from_json
from memforensics.cli._cache import (
    MAX_BYTES_ENV,
    SCHEMA,
    CacheCleared,
    CacheInfo,
    ResultCache,
    code_hash,
    default_max_bytes,
    file_key,
)
from memforensics.cli._main import main


@dataclass(frozen=True)
class Figure:
    """A small typed result."""

    name: str
    bytes: int
    steps: tuple[int, ...] = ()


def _dump(tmp_path: Path, name: str = "d.pickle", data: bytes = b"snapshot") -> Path:
    path = tmp_path / name
    path.write_bytes(data)
    return path


def test_an_answer_comes_back_for_the_same_file_and_question(tmp_path: Path) -> None:
    """What was stored is returned for the same file and question, and only for them."""
    path = _dump(tmp_path)
    cache = ResultCache(tmp_path / "cache", max_bytes=1 << 20, code="c1")
    cache.keep([path], "summary []", Figure("a", 5, (1, 2)))
    assert cache.lookup(Figure, [path], "summary []") == Figure("a", 5, (1, 2))
    assert cache.lookup(Figure, [path], "replay []") is None
    other = _dump(tmp_path, "e.pickle", b"another one")
    assert cache.lookup(Figure, [other], "summary []") is None


def test_info_and_clear_read_back_from_their_json(tmp_path: Path) -> None:
    """cache info's and cache clear's answers come back equal from their printed JSON."""
    cache = ResultCache(tmp_path / "cache", max_bytes=1 << 20, code="c1")
    cache.keep([_dump(tmp_path)], "summary []", Figure("a", 5))
    info = cache.info()
    assert info.entries == 1
    printed = json.loads(json.dumps(document(info, SCHEMA)))
    assert list(printed)[:2] == ["schema", "folder"]
    assert from_json(CacheInfo, printed) == info
    cleared = cache.clear()
    assert cleared == CacheCleared(tmp_path / "cache", 1)
    assert from_json(CacheCleared, json.loads(json.dumps(document(cleared, SCHEMA)))) == cleared


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
    cache = ResultCache(tmp_path / "cache", max_bytes=10**9, code="c1")
    for n in range(3):
        cache.keep([path], f"q{n}", Figure("x" * 1000, n))
    entries = sorted((tmp_path / "cache").glob("*.entry"))
    for number, entry in enumerate(entries):
        os.utime(entry, ns=(number * 10**9, number * 10**9))
    oldest = min(entries, key=lambda e: e.stat().st_mtime_ns)
    size = oldest.stat().st_size
    cache.max_bytes = 3 * size  # room for three: the fourth write evicts the least recent
    cache.keep([path], "q3", Figure("x" * 1000, 3))
    left = list((tmp_path / "cache").glob("*.entry"))
    assert len(left) == 3
    assert oldest not in left
    assert sum(e.stat().st_size for e in left) <= cache.max_bytes


def test_a_full_disk_turns_the_cache_off_with_one_warning(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """ENOSPC while writing: no exception, one warning, and the cache stops trying."""
    path = _dump(tmp_path)
    cache = ResultCache(tmp_path / "cache", max_bytes=1 << 20, code="c1")

    def full(*args: object, **kwargs: object) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr("tempfile.mkstemp", full)
    cache.keep([path], "q", Figure("a", 1))
    cache.keep([path], "q2", Figure("a", 1))
    assert cache.warning is not None
    assert "No space left on device" in cache.warning
    assert not cache.enabled
    assert cache.lookup(Figure, [path], "q") is None


def test_a_missing_dump_is_not_cached(tmp_path: Path) -> None:
    """A file that cannot be read has no key: nothing is stored or served for it."""
    cache = ResultCache(tmp_path / "cache", max_bytes=1 << 20, code="c1")
    cache.keep([tmp_path / "gone.pickle"], "q", Figure("a", 1))
    assert cache.lookup(Figure, [tmp_path / "gone.pickle"], "q") is None
    assert not list((tmp_path / "cache").glob("*.entry"))


def test_the_cap_comes_from_the_environment_else_the_disk(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """MEMFORENSICS_CACHE_MAX_BYTES sets the cap; without it, at most 2 GiB."""
    monkeypatch.setenv(MAX_BYTES_ENV, "12345")
    assert default_max_bytes(tmp_path / "nowhere") == 12345
    monkeypatch.delenv(MAX_BYTES_ENV)
    assert 0 < default_max_bytes(tmp_path / "nowhere") <= 2 * 1024**3


def test_a_result_of_another_shape_is_a_miss_and_is_computed_again(tmp_path: Path) -> None:
    """An entry that does not read back as the asked type is not served: compute() runs and
    its result replaces the entry."""
    path = _dump(tmp_path)
    cache = ResultCache(tmp_path / "cache", max_bytes=1 << 20, code="c1")
    cache.keep([path], "q", {"name": "a", "bytes": "many"})
    assert cache.result(Figure, [path], "q", lambda: Figure("a", 7)) == Figure("a", 7)
    assert cache.lookup(Figure, [path], "q") == Figure("a", 7)


def test_a_changed_source_file_changes_the_code_hash_and_misses(tmp_path: Path) -> None:
    """The code key is a hash of the package's files: changing one byte of a source file (or
    adding package data) gives a new key, and an entry kept under the old key is not served."""
    package = tmp_path / "pkg"
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text("x = 1\n")
    (package / "sub" / "mod.py").write_text("def f():\n    return 1\n")
    (package / "__pycache__").mkdir()
    (package / "__pycache__" / "mod.cpython-312.pyc").write_bytes(b"stale")
    before = code_hash(package)
    (package / "__pycache__" / "mod.cpython-312.pyc").write_bytes(b"other")
    assert code_hash(package) == before  # compiled bytecode is not the code
    (package / "sub" / "mod.py").write_text("def f():\n    return 2\n")
    after = code_hash(package)
    assert after != before
    (package / "page.js").write_text("1")
    assert code_hash(package) != after
    path = _dump(tmp_path)
    folder = tmp_path / "cache"
    ResultCache(folder, code=before).keep([path], "q", Figure("old", 1))
    assert ResultCache(folder, code=before).lookup(Figure, [path], "q") == Figure("old", 1)
    assert ResultCache(folder, code=after).lookup(Figure, [path], "q") is None


def test_the_installed_code_key_covers_the_package_sources() -> None:
    """code_key() hashes the installed memforensics package (a copy of it hashes the same)."""
    import memforensics
    from memforensics.cli._cache import code_key

    package = Path(memforensics.__file__).resolve().parent
    assert code_key() == code_hash(package)


@pytest.mark.parametrize("mode", [0o777, 0o770, 0o1777])
def test_a_folder_others_can_write_is_not_used(tmp_path: Path, mode: int) -> None:
    """A cache folder group or others can write (sticky or not) is refused with one warning,
    and nothing is read or written there."""
    path = _dump(tmp_path)
    folder = tmp_path / "cache"
    folder.mkdir()
    folder.chmod(mode)
    cache = ResultCache(folder, code="c1")
    assert cache.result(Figure, [path], "q", lambda: Figure("a", 1)) == Figure("a", 1)
    assert cache.warning is not None
    assert "another user could plant answers" in cache.warning
    assert not cache.enabled
    assert list(folder.iterdir()) == []


@pytest.mark.skipif(os.geteuid() != 0, reason="chown to another user needs root")
def test_a_folder_another_user_owns_is_not_used(tmp_path: Path) -> None:
    """A cache folder owned by another uid (even mode 0700) is refused with a warning."""
    path = _dump(tmp_path)
    folder = tmp_path / "cache"
    folder.mkdir(mode=0o700)
    os.chown(folder, 65534, 65534)
    cache = ResultCache(folder, code="c1")
    cache.keep([path], "q", Figure("a", 1))
    assert cache.warning is not None
    assert "owned by uid 65534" in cache.warning
    assert list(folder.iterdir()) == []


def _planted(tmp_path: Path) -> tuple[ResultCache, Path, Path, bytes]:
    """A cache, a dump, the entry kept for question "q" about it, and that entry's bytes."""
    path = _dump(tmp_path)
    folder = tmp_path / "cache"
    cache = ResultCache(folder, code="c1")
    cache.keep([path], "q", Figure("kept", 1))
    (entry,) = folder.glob("*.entry")
    return cache, path, entry, entry.read_bytes()


def test_a_symlink_at_an_entry_name_is_not_followed(tmp_path: Path) -> None:
    """A symlink to a sound entry is not served, and the write replaces the link, not its
    target."""
    cache, path, entry, sound = _planted(tmp_path)
    target = tmp_path / "elsewhere.entry"
    target.write_bytes(sound)
    entry.unlink()
    entry.symlink_to(target)
    fresh = ResultCache(cache.folder, code="c1")
    assert fresh.result(Figure, [path], "q", lambda: Figure("new", 2)) == Figure("new", 2)
    assert target.read_bytes() == sound
    assert stat.S_ISREG(entry.lstat().st_mode)


def test_a_fifo_at_an_entry_name_is_not_waited_on(tmp_path: Path) -> None:
    """A FIFO where an entry belongs is a miss at once (no reader blocks on it), and is
    replaced by a regular entry."""
    cache, path, entry, _ = _planted(tmp_path)
    entry.unlink()
    os.mkfifo(entry)
    fresh = ResultCache(cache.folder, code="c1")
    assert fresh.result(Figure, [path], "q", lambda: Figure("new", 2)) == Figure("new", 2)
    assert stat.S_ISREG(entry.lstat().st_mode)


@pytest.mark.skipif(os.geteuid() != 0, reason="chown to another user needs root")
def test_an_entry_another_user_owns_is_not_served(tmp_path: Path) -> None:
    """A sound entry planted by another uid is not served."""
    cache, path, entry, _ = _planted(tmp_path)
    os.chown(entry, 65534, 65534)
    fresh = ResultCache(cache.folder, code="c1")
    assert fresh.lookup(Figure, [path], "q") is None


def test_two_copies_of_the_same_files_hash_alike(tmp_path: Path) -> None:
    """Two copies of the same package files hash alike (the key is content, not location)."""
    one, two = tmp_path / "one", tmp_path / "two"
    one.mkdir()
    (one / "a.py").write_text("x = 1\n")
    shutil.copytree(one, two)
    assert code_hash(one) == code_hash(two)


def _read_only(folder: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Make ``folder`` refuse removals: a read-only remount where this machine allows it,
    else an EROFS from ``unlink`` itself, the call that meets it."""
    if os.geteuid() == 0 and shutil.which("mount"):
        bind = ["mount", "--bind", str(folder), str(folder)]
        if subprocess.run(bind, capture_output=True, check=False).returncode == 0:
            remount = ["mount", "-o", "remount,bind,ro", str(folder)]
            if subprocess.run(remount, capture_output=True, check=False).returncode == 0:
                _UNMOUNT.append(folder)
                return
            subprocess.run(["umount", "-l", str(folder)], check=False)
    real = Path.unlink

    def unlink(self: Path, missing_ok: bool = False) -> None:
        if self.parent == folder:
            raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(self))
        real(self, missing_ok=missing_ok)

    monkeypatch.setattr(Path, "unlink", unlink)


_UNMOUNT: list[Path] = []


@pytest.fixture
def unmount() -> Iterator[None]:
    """Take back the read-only mounts a test made."""
    yield
    while _UNMOUNT:
        subprocess.run(["umount", "-l", str(_UNMOUNT.pop())], check=False)


@pytest.mark.usefixtures("unmount")
def test_clear_that_removes_nothing_exits_1_and_says_why(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """cache clear on a read-only cache: both entries stay, exit 1, and stderr says why."""
    folder = tmp_path / "cache"
    cache = ResultCache(folder, max_bytes=1 << 20, code="c1")
    cache.keep([_dump(tmp_path)], "summary []", Figure("a", 5))
    cache.keep([_dump(tmp_path, "e.pickle", b"other")], "summary []", Figure("b", 6))
    _read_only(folder, monkeypatch)
    code = main(["cache", "clear", "--cache-dir", str(folder)])
    captured = capsys.readouterr()
    assert code == 1
    assert "2 entries could not be removed" in captured.err
    assert "Read-only file system" in captured.err
    assert cache.info().entries == 2
