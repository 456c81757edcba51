"""memforensics' own log lines: key=value pairs for machines, a sentence on a terminal."""

from __future__ import annotations

import pytest

from memforensics.capture import log


def _logged(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tty: bool) -> str:
    monkeypatch.setattr(log, "_on_terminal", lambda: tty)
    log.reset_logging()
    log.safe_log(
        "error", "out_of_memory", device="sim", allocation_bytes=20 << 20,
        device_free_bytes=12 << 20, rank=0, step=25, stack=None,
    )  # fmt: skip
    log.reset_logging()
    return capsys.readouterr().err


def test_a_terminal_reads_a_sentence(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """On a terminal an event is one sentence with sizes as sizes, no timestamp, no key=value."""
    line = _logged(capsys, monkeypatch, tty=True)
    assert line == (
        "memforensics error: out of memory (device sim, allocation 20.00 MiB, "
        "device free 12.00 MiB, rank 0, step 25)\n"
    )


def test_a_pipe_or_file_gets_key_value_pairs(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where stderr is a pipe or a file, an event stays the key=value line log shippers parse."""
    line = _logged(capsys, monkeypatch, tty=False)
    assert line.startswith("timestamp=")
    assert "level='error' logger='memforensics' event='out_of_memory'" in line
    assert "allocation_bytes=20971520" in line


def test_a_reason_leads_the_sentence(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A warning's reason follows its name, before the remaining fields."""
    monkeypatch.setattr(log, "_on_terminal", lambda: True)
    log.reset_logging()
    log.warn_once("k", "device_unavailable", reason="no CUDA or NPU device found", device="auto")
    log.reset_logging()
    assert capsys.readouterr().err == (
        "memforensics warning: device unavailable: no CUDA or NPU device found (device auto)\n"
    )
