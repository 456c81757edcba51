"""The real console script with the result cache: same answers, never stale (a changed dump or
changed code), never trusted without a check, never from a folder another user could write,
never an error when its folder is unusable, and gone with ``cache clear``."""

from __future__ import annotations

import hashlib
import json
import os
import pickle
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from memforensics.testing import (
    GiB,
    exhausted,
    fragmented,
    growth_pair,
    write_dump,
    write_run_folder,
)
from shared_data import REAL_SNAPSHOTS, real_params, real_snapshots

pytestmark = pytest.mark.integration

REQUESTED = GiB(1)


def _cli(*args: str | Path) -> subprocess.CompletedProcess[str]:
    script = shutil.which("memforensics", path=str(Path(sys.executable).parent))
    command = [script] if script else [sys.executable, "-m", "memforensics"]
    return subprocess.run(
        [*command, *map(str, args)], capture_output=True, text=True, timeout=300, check=False
    )


def _entries(folder: Path) -> list[Path]:
    return sorted(folder.glob("*.entry")) if folder.is_dir() else []


def _oom_dump(path: Path, requested: int) -> Path:
    """An exhausted dump whose only record of the request is its trace's ``oom`` entry."""
    synthetic = exhausted(with_sidecar=False)
    synthetic.snapshot["device_traces"][0][-1]["size"] = requested
    return synthetic.write(path)


def _requested(proc: subprocess.CompletedProcess[str]) -> int:
    assert proc.returncode == 0, proc.stderr
    value: int = json.loads(proc.stdout)["oom"]["requested_bytes"]
    return value


@pytest.mark.parametrize(
    "command",
    [["summary", "--json"], ["summary"], ["replay", "--json"], ["replay"]],
)
def test_a_cached_answer_is_the_uncached_one(tmp_path: Path, command: list[str]) -> None:
    """The first and the second (cached) look print exactly what --no-cache prints."""
    dump = fragmented().write(tmp_path / "f.pickle")
    cache = tmp_path / "cache"
    plain = _cli(*command, dump, "--no-cache")
    first = _cli(*command, dump, "--cache-dir", cache)
    assert _entries(cache)
    second = _cli(*command, dump, "--cache-dir", cache)
    assert plain.returncode == first.returncode == second.returncode == 0, plain.stderr
    assert plain.stdout == first.stdout == second.stdout
    assert plain.stderr == first.stderr == second.stderr


@pytest.mark.parametrize("name", real_params(path.name for path in real_snapshots()))
def test_real_snapshots_answer_the_same_from_the_cache(tmp_path: Path, name: str) -> None:
    """summary, replay and diff --json on real snapshots: cached equals uncached, byte for byte."""
    path, other = REAL_SNAPSHOTS / name, REAL_SNAPSHOTS / "cuda-cnn-stacks-all.pickle"
    cache = tmp_path / "cache"
    for command in (["summary", "--json", path], ["replay", "--json", path]) + (
        (["diff", "--json", other, path],) if path != other else ()
    ):
        plain = _cli(*command, "--no-cache")
        _cli(*command, "--cache-dir", cache)
        cached = _cli(*command, "--cache-dir", cache)
        assert plain.stdout == cached.stdout, command
        assert plain.returncode == cached.returncode


def test_a_rewritten_dump_with_its_size_and_mtime_restored_is_not_served_stale(
    tmp_path: Path,
) -> None:
    """Rewriting a dump in place (same inode, size, mtime) gives the new file's answer."""
    path = _oom_dump(tmp_path / "d.pickle", REQUESTED)
    cache = tmp_path / "cache"
    assert _requested(_cli("summary", "--json", path, "--cache-dir", cache)) == REQUESTED
    info = path.stat()
    changed = _oom_dump(tmp_path / "other.pickle", REQUESTED + 4096).read_bytes()
    assert len(changed) == info.st_size  # the same size, by construction
    with path.open("r+b") as handle:
        handle.write(changed)
    os.utime(path, ns=(info.st_atime_ns, info.st_mtime_ns))
    assert path.stat().st_mtime_ns == info.st_mtime_ns
    assert path.stat().st_ino == info.st_ino
    assert _requested(_cli("summary", "--json", path, "--cache-dir", cache)) == REQUESTED + 4096


def test_touching_a_dump_rebuilds_its_entry(tmp_path: Path) -> None:
    """A new modification time is a new file to the cache: a new entry is written (one per
    result: its text and its JSON are rendered from it)."""
    path = _oom_dump(tmp_path / "d.pickle", REQUESTED)
    cache = tmp_path / "cache"
    _cli("summary", "--json", path, "--cache-dir", cache)
    assert len(_entries(cache)) == 1
    info = path.stat()
    os.utime(path, ns=(info.st_atime_ns, info.st_mtime_ns + 10**9))
    assert _requested(_cli("summary", "--json", path, "--cache-dir", cache)) == REQUESTED
    assert len(_entries(cache)) == 2


def _damage(entry: Path, how: str) -> None:
    data = entry.read_bytes()
    if how == "truncated":
        entry.write_bytes(data[: len(data) // 2])
    elif how == "flipped":
        flipped = bytearray(data)
        flipped[-10] ^= 0x01
        entry.write_bytes(bytes(flipped))
    elif how == "garbage":
        entry.write_bytes(os.urandom(len(data)))
    elif how == "pickle":  # a pickle that would run code if anything unpickled it
        entry.write_bytes(pickle.dumps(_Boom(), protocol=4))
    else:  # a well-formed entry about another file
        entry.write_bytes(data.replace(b'"key": "', b'"key": "0', 1))


class _Boom:
    def __reduce__(self) -> tuple[object, tuple[str]]:
        return (os.system, ("touch /tmp/memforensics-cache-was-unpickled",))


@pytest.mark.parametrize("how", ["truncated", "flipped", "garbage", "pickle", "foreign"])
def test_a_damaged_entry_is_ignored_and_replaced(tmp_path: Path, how: str) -> None:
    """Truncated, flipped, garbage, pickled or foreign entries: the right answer, a sound entry."""
    path = _oom_dump(tmp_path / "d.pickle", REQUESTED)
    cache = tmp_path / "cache"
    plain = _cli("summary", "--json", path, "--no-cache")
    _cli("summary", "--json", path, "--cache-dir", cache)
    entries = _entries(cache)  # the JSON and the text of one summary
    sound = [entry.read_bytes() for entry in entries]
    for entry in entries:
        _damage(entry, how)
    again = _cli("summary", "--json", path, "--cache-dir", cache)
    assert again.stdout == plain.stdout
    assert again.returncode == 0
    assert [entry.read_bytes() for entry in entries] == sound  # replaced, recomputed
    assert not Path("/tmp/memforensics-cache-was-unpickled").exists()


def test_an_unusable_cache_folder_warns_once_and_answers(tmp_path: Path) -> None:
    """A cache folder that cannot be created (a file is in its way): one warning, the answer."""
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("x")
    dumps = [fragmented().write(tmp_path / f"{n}.pickle") for n in "ab"]
    plain = _cli("summary", *dumps, "--json", "--no-cache")
    proc = _cli("summary", *dumps, "--json", "--cache-dir", blocker / "cache")
    assert proc.stdout == plain.stdout
    assert proc.returncode == 0
    assert proc.stderr.count("warning: cannot write the cache") == 1, proc.stderr


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only folders")
def test_a_read_only_cache_folder_warns_once_and_answers(tmp_path: Path) -> None:
    """A read-only cache folder: one warning, the same answer as without a cache."""
    path = fragmented().write(tmp_path / "f.pickle")
    cache = tmp_path / "cache"
    cache.mkdir()
    cache.chmod(0o555)
    try:
        proc = _cli("replay", "--json", path, "--cache-dir", cache)
    finally:
        cache.chmod(0o755)
    assert proc.stdout == _cli("replay", "--json", path, "--no-cache").stdout
    assert proc.stderr.count("warning: cannot write the cache") == 1


def test_no_cache_writes_nothing(tmp_path: Path) -> None:
    """--no-cache neither creates the cache folder nor writes the default one."""
    path = fragmented().write(tmp_path / "f.pickle")
    cache = tmp_path / "cache"
    default = Path(os.environ["XDG_CACHE_HOME"]) / "memforensics"
    for command in (
        ["summary", path],
        ["replay", path],
        ["report", path, "-o", tmp_path / "r.html"],
    ):
        assert _cli(*command, "--no-cache", "--cache-dir", cache).returncode == 0
        assert _cli(*command, "--no-cache").returncode == 0
    assert not cache.exists()
    assert not default.exists()


def test_cache_info_counts_and_clear_empties(tmp_path: Path) -> None:
    """cache info counts the entries the commands wrote; cache clear removes every one."""
    dump = fragmented().write(tmp_path / "f.pickle")
    cache = tmp_path / "cache"
    _cli("summary", dump, "--cache-dir", cache)
    _cli("replay", dump, "--cache-dir", cache)
    info = json.loads(_cli("cache", "info", "--json", "--cache-dir", cache).stdout)
    assert next(iter(info)) == "schema"
    assert info["entries"] == 2 == len(_entries(cache))  # one result each, either rendering
    assert info["bytes"] == sum(entry.stat().st_size for entry in _entries(cache))
    cleared = json.loads(_cli("cache", "clear", "--json", "--cache-dir", cache).stdout)
    assert (cleared["schema"], cleared["removed"]) == (2, 2)
    assert _entries(cache) == []


def test_the_default_cache_lives_under_xdg_cache_home(tmp_path: Path) -> None:
    """Without --cache-dir, answers go to $XDG_CACHE_HOME/memforensics."""
    dump = fragmented().write(tmp_path / "f.pickle")
    _cli("summary", dump)
    assert _entries(Path(os.environ["XDG_CACHE_HOME"]) / "memforensics")


def test_several_dumps_in_a_pool_answer_as_one_process_does(tmp_path: Path) -> None:
    """summary a b c --jobs 2 prints what --jobs 1 prints, in the order given."""
    before, after = growth_pair()
    dumps = [
        after.write(tmp_path / "a.pickle"),
        fragmented().write(tmp_path / "b.pickle"),
        before.write(tmp_path / "c.pickle"),
    ]
    serial = _cli("summary", *dumps, "--json", "--jobs", "1", "--no-cache")
    pooled = _cli("summary", *dumps, "--json", "--jobs", "2", "--no-cache")
    assert serial.returncode == pooled.returncode == 0, pooled.stderr
    assert pooled.stdout == serial.stdout
    assert [item["file"] for item in json.loads(pooled.stdout)["dumps"]] == [str(d) for d in dumps]
    text = _cli("summary", *dumps, "--jobs", "2", "--no-cache")
    assert text.stdout == _cli("summary", *dumps, "--jobs", "1", "--no-cache").stdout


def test_leaks_and_report_over_a_folder_agree_across_jobs(tmp_path: Path) -> None:
    """leaks DIR and report DIR with --jobs 2 give what --jobs 1 gives (page bar its time)."""
    write_run_folder(tmp_path / "run", world_size=3)
    run = tmp_path / "run"
    serial = _cli("leaks", run, "--json", "--jobs", "1", "--no-cache")
    pooled = _cli("leaks", run, "--json", "--jobs", "2", "--no-cache")
    assert pooled.stdout == serial.stdout
    assert pooled.returncode == serial.returncode
    pages = []
    for jobs in ("1", "2"):
        out = tmp_path / f"r{jobs}.html"
        proc = _cli("report", run, "-o", out, "--jobs", jobs, "--no-cache")
        assert proc.returncode in (0, 1), proc.stderr
        pages.append(json.dumps(_document(out.read_text())))
    assert pages[0] == pages[1]


def _document(html: str) -> object:
    """The page's embedded data without its generation time."""
    start = html.index('"generated"')
    end = html.index('"version"', start)
    return html[:start] + html[end:]


def test_a_sidecar_written_after_the_first_look_is_read(tmp_path: Path) -> None:
    """The sidecar is part of the dump's identity: one that appears later is not ignored."""
    synthetic = exhausted()
    path = tmp_path / "rank0_pid1_step12_20261130-101112-000001.pickle"
    write_dump(path, synthetic.snapshot)
    cache = tmp_path / "cache"
    first = json.loads(_cli("summary", "--json", path, "--cache-dir", cache).stdout)
    assert first["has_sidecar"] is False
    assert synthetic.sidecar is not None
    side = dict(synthetic.sidecar, snapshot_file=path.name, snapshot_bytes=path.stat().st_size)
    path.with_suffix(".json").write_text(json.dumps(side))  # the dump itself untouched
    again = _cli("summary", "--json", path, "--cache-dir", cache)
    assert json.loads(again.stdout)["has_sidecar"] is True
    assert again.stdout == _cli("summary", "--json", path, "--no-cache").stdout


def test_an_answer_kept_by_other_code_is_not_served(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """After the package's files change (its code key), the same command on the same dump
    reads the dump again instead of printing the old code's answer."""
    from memforensics.cli import _cache
    from memforensics.cli._main import main
    from memforensics.cli.commands import summary as command

    path = fragmented().write(tmp_path / "f.pickle")
    argv = ["summary", str(path), "--cache-dir", str(tmp_path / "cache"), "-q"]
    read: list[str] = []
    real = command.load_dump

    def counted(file: Path, **kwargs: object) -> object:
        read.append(Path(file).name)
        return real(file, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(command, "load_dump", counted)
    monkeypatch.setattr(_cache, "code_key", lambda: "code before the fix")
    assert main(argv) == 0
    assert main(argv) == 0
    assert read == ["f.pickle"]  # the second look was served
    monkeypatch.setattr(_cache, "code_key", lambda: "code after the fix")
    assert main(argv) == 0
    assert read == ["f.pickle", "f.pickle"]
    capsys.readouterr()


@pytest.mark.parametrize("unsafe", ["mode 777", "group-writable", "another owner"])
def test_an_unsafe_cache_folder_is_refused_with_one_warning(tmp_path: Path, unsafe: str) -> None:
    """A cache folder others can write, or another user owns: one warning, the uncached
    answer, and nothing written there."""
    if unsafe == "another owner" and os.geteuid() != 0:
        pytest.skip("chown to another user needs root")
    path = fragmented().write(tmp_path / "f.pickle")
    cache = tmp_path / "cache"
    cache.mkdir(mode=0o700)
    if unsafe == "mode 777":
        cache.chmod(0o777)
    elif unsafe == "group-writable":
        cache.chmod(0o770)
    else:
        os.chown(cache, 65534, 65534)
    plain = _cli("summary", "--json", path, "--no-cache")
    for _ in range(2):
        proc = _cli("summary", "--json", path, "--cache-dir", cache)
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout == plain.stdout
        assert proc.stderr.count("warning: not using the cache") == 1, proc.stderr
    assert _entries(cache) == []


def _tampered(entry: Path) -> bytes:
    """A sound entry (checksum right) saying something the command never computed."""
    head, _, payload = entry.read_bytes().partition(b"\n")
    body = json.loads(payload)
    body["result"]["summary"]["device_reason"] = "tampered"
    new = json.dumps(body).encode()
    magic = head.decode().rsplit(" ", 1)[0]
    return f"{magic} {hashlib.blake2b(new).hexdigest()}\n".encode() + new


def test_a_symlink_at_an_entry_name_is_not_followed(tmp_path: Path) -> None:
    """An entry name that is a symlink to a sound, planted entry is not followed: the command
    prints its own answer and the link's target is untouched (the same bytes in a regular file
    of the user's would be served, which is what makes this a test)."""
    path = fragmented().write(tmp_path / "f.pickle")
    cache = tmp_path / "cache"
    _cli("summary", "--json", path, "--cache-dir", cache)
    plain = _cli("summary", "--json", path, "--no-cache")
    planted = {entry: _tampered(entry) for entry in _entries(cache)}
    for entry, data in planted.items():
        entry.write_bytes(data)
    served = _cli("summary", "--json", path, "--cache-dir", cache)
    assert "tampered" in served.stdout  # a regular entry is served, as designed
    for entry, data in planted.items():
        target = tmp_path / f"elsewhere-{entry.name}"
        target.write_bytes(data)
        entry.unlink()
        entry.symlink_to(target)
    proc = _cli("summary", "--json", path, "--cache-dir", cache)
    assert proc.stdout == plain.stdout
    for entry, data in planted.items():
        assert (tmp_path / f"elsewhere-{entry.name}").read_bytes() == data
        assert not entry.is_symlink()


def test_a_fifo_at_an_entry_name_is_not_waited_on(tmp_path: Path) -> None:
    """A FIFO where an entry belongs: the command answers at once (no hang) and writes a
    regular entry in its place."""
    path = fragmented().write(tmp_path / "f.pickle")
    cache = tmp_path / "cache"
    _cli("summary", path, "--cache-dir", cache)
    entries = _entries(cache)
    for entry in entries:
        entry.unlink()
        os.mkfifo(entry)
    proc = _cli("summary", path, "--cache-dir", cache)  # _cli's timeout fails a hang
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == _cli("summary", path, "--no-cache").stdout
    assert all(entry.is_file() for entry in entries)


@pytest.mark.parametrize("command", [["summary", "--json"], ["summary"], ["replay", "--json"]])
def test_a_second_path_to_the_same_dump_gets_its_own_name(
    tmp_path: Path, command: list[str]
) -> None:
    """A hard link to a dump already answered prints its own file name, not the first
    path's: the answer is the one --no-cache prints for that path."""
    path = fragmented().write(tmp_path / "f.pickle")
    link = tmp_path / "linked.pickle"
    os.link(path, link)
    cache = tmp_path / "cache"
    assert _cli(*command, path, "--cache-dir", cache).returncode == 0
    proc = _cli(*command, link, "--cache-dir", cache)
    assert proc.stdout == _cli(*command, link, "--no-cache").stdout
    assert "linked.pickle" in proc.stdout
    assert "f.pickle" not in proc.stdout


def test_diff_through_a_second_path_names_the_path_given(tmp_path: Path) -> None:
    """diff's kept sides are per file, yet a hard link to a compared dump is named as given."""
    before, after = growth_pair()
    a, b = before.write(tmp_path / "a.pickle"), after.write(tmp_path / "b.pickle")
    link = tmp_path / "other-name.pickle"
    os.link(a, link)
    cache = tmp_path / "cache"
    assert _cli("diff", "--json", a, b, "--cache-dir", cache).returncode == 0
    proc = _cli("diff", "--json", link, b, "--cache-dir", cache)
    assert proc.stdout == _cli("diff", "--json", link, b, "--no-cache").stdout
    assert "other-name.pickle" in proc.stdout


@pytest.mark.parametrize("command", ["summary", "replay"])
def test_a_kept_result_is_named_afresh_by_each_path(tmp_path: Path, command: str) -> None:
    """A hard link in another run folder is answered from the one kept result (no second
    entry), with its own name, rank and steps read from its path, as --no-cache answers it."""
    first = tmp_path / "steps4-7"
    second = tmp_path / "steps8-11"
    first.mkdir()
    second.mkdir()
    path = write_dump(first / "rank3_pid77.pickle", fragmented().snapshot)  # no sidecar
    link = second / "rank5_pid78.pickle"
    os.link(path, link)
    cache = tmp_path / "cache"
    assert _cli(command, "--json", path, "--cache-dir", cache).returncode == 0
    assert len(_entries(cache)) == 1
    served = _cli(command, "--json", link, "--cache-dir", cache)
    assert len(_entries(cache)) == 1  # the link was answered from the kept result
    assert served.stdout == _cli(command, "--json", link, "--no-cache").stdout
    answer = json.loads(served.stdout)
    assert answer["file"] == str(link)
    if command == "summary":
        assert (answer["rank"], answer["steps"]) == (5, [8, 11])
    entry = _entries(cache)[0].read_text()
    assert "rank3_pid77" not in entry  # no name is kept
    assert "steps4-7" not in entry
