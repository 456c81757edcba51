"""leaks: a known leak among steady sites is the one suspect; a steady run has none."""

from __future__ import annotations

from pathlib import Path

from labelled_workload import TrainingLoop

import memforensics
from memforensics.analysis import find_leaks
from memforensics.analysis.compare import Leaks, leaks_text
from memforensics.analysis.compare.leaks import RankWindows
from memforensics.backends.sim import SimDevice, SimTensor, reset_device

MiB = 1 << 20
GiB = 1 << 30


def _leak(device: SimDevice, kept: list[SimTensor]) -> None:
    kept.append(device.empty(MiB + 4096))  # e.g. a loss tensor appended to a list every step


def _train(tmp_path: Path, *, leak_every: int, steps: int = 10) -> Path:
    """A labelled training loop with one window per two steps; a leak every N steps (0: none)."""
    device = reset_device(4 * GiB)
    out = tmp_path / "run"
    mf = memforensics.install(device="sim", out_dir=str(out), steps=1, every=2, keep_last=None)
    train = TrainingLoop(device, tmp_path, seed=2)
    train.build_model()
    kept: list[SimTensor] = []
    for number in range(steps):
        with mf.step(number):
            train.step(number, lambda _text: None)
            if leak_every and number % leak_every == 0:
                _leak(device, kept)
    mf.close()
    return out


def test_the_leak_is_the_only_suspect(tmp_path: Path) -> None:
    """One site grows by one tensor a step: it is the only suspect, with the right growth per
    step and first step; parameters, Adam state and gradients stay below suspicion."""
    leaks = find_leaks(_train(tmp_path, leak_every=1))
    assert leaks.windows == (RankWindows(0, (0, 2, 4, 6, 8)),)
    [suspect] = leaks.suspects
    assert suspect.site.endswith(" _leak")
    assert suspect.growth_per_step == MiB + 4096
    assert suspect.first_step == 0
    assert suspect.bytes == tuple((MiB + 4096) * (step + 1) for step in (0, 2, 4, 6, 8))
    assert suspect.confidence > 0.99
    assert len(leaks.trends) > 1  # the steady sites are listed too, just not suspected
    assert "!!" in leaks_text(leaks)


def test_a_steady_run_has_no_suspect(tmp_path: Path) -> None:
    """No leak: optimizer state made once in the first step is one-off growth, not a leak."""
    leaks = find_leaks(_train(tmp_path, leak_every=0))
    assert leaks.suspects == ()
    assert all(trend.confidence < 0.5 for trend in leaks.trends)


def test_a_one_off_growth_is_discounted(tmp_path: Path) -> None:
    """A site that grew once (step 2) and then held still scores low and is not a suspect."""
    device = reset_device(4 * GiB)
    out = tmp_path / "run"
    mf = memforensics.install(device="sim", out_dir=str(out), steps=1, every=2, keep_last=None)
    kept: list[SimTensor] = []
    for number in range(10):
        with mf.step(number):
            if number == 2:
                _leak(device, kept)
    mf.close()
    [trend] = find_leaks(out).trends
    assert trend.bytes == (0, MiB + 4096, MiB + 4096, MiB + 4096, MiB + 4096)
    assert not trend.suspect
    assert trend.confidence < 0.5


def test_leaks_names_an_unknown_rank_in_words() -> None:
    """Windows whose rank no sidecar or file name gives read 'rank unknown', never 'rank ?'."""
    text = leaks_text(Leaks(root="run", windows=(RankWindows(None, (3, 7)),), trends=()))
    assert text.startswith("rank unknown (no sidecar or rank in the file name): 2 window(s)")
    assert "rank ?" not in text


def test_watch_overview_and_leaks_skip_the_same_odd_journal_lines(tmp_path: Path) -> None:
    """A journal growing 1 MiB a step with a NaN-time line and a negative-figure line: all three
    readers skip the same two lines and say so; leaks' whole-run trend ignores them."""
    from memforensics._layout import journal_folder, journal_name
    from memforensics.analysis import build_overview
    from memforensics.analysis.folder import JournalWatch, overview_text, watch_text
    from memforensics.capture.journal import format_line

    folder = journal_folder(tmp_path)
    folder.mkdir()
    lines = [
        format_line("step", step, 0, {"allocated_bytes": step * MiB}, 1_796_000_000.0 + step)
        for step in range(0, 100, 10)
    ]
    nan = format_line("oom", 25, 0, {"allocated_bytes": 1}, 1.0).replace(b":1.0,", b":NaN,")
    assert b'"time":NaN' in nan
    lines.insert(3, nan)
    lines.insert(6, format_line("step", 55, 0, {"allocated_bytes": 0}, 1_796_000_055.0))
    lines[6] = lines[6].replace(b'"allocated_bytes":0', b'"allocated_bytes":-5')
    (folder / journal_name(0, 7)).write_bytes(b"".join(lines))
    said = "2 journal line(s) skipped"

    leaks = find_leaks(tmp_path)
    [trend] = leaks.journal
    assert (trend.rank, trend.steps) == (0, (0, 90))
    assert trend.growth_per_1k_steps == 1000 * MiB
    assert leaks.journal_skipped_lines == 2
    assert said in leaks_text(leaks)
    overview = build_overview(tmp_path, workers=1)
    assert overview.problems.bad_lines == 2
    assert said in overview_text(overview)
    watch = JournalWatch(tmp_path)
    watch.poll()
    assert watch.view().skipped_lines == 2
    assert said in watch_text(watch.view())
