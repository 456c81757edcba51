"""The history switch: what the allocator records between windows, inside one, and after close."""

from __future__ import annotations

from typing import Any, cast

import pytest

from memforensics.backends._protocol import DeviceBackend, HistoryMode
from memforensics.capture.config import build_config
from memforensics.capture.window import HistorySwitch


class _Recorder:
    """A backend that only records its record_history calls, or refuses them all."""

    name = "fake"

    def __init__(self, *, refuse: bool = False) -> None:
        self.calls: list[tuple[HistoryMode, bool]] = []
        self.refuse = refuse

    def record_history(self, mode: HistoryMode, **options: Any) -> None:
        if self.refuse:
            raise RuntimeError("history refused")
        self.calls.append((mode, options["clear"]))


def _switch(backend: _Recorder, **config: Any) -> HistorySwitch:
    return HistorySwitch(cast(DeviceBackend, backend), build_config(config), rank=0)


@pytest.mark.parametrize("oom_history", ["state", "all", "off"])
def test_idle_mode_between_windows_and_all_cleared_inside(oom_history: str) -> None:
    """Outside windows the mode is oom_history ("off" records nothing); a window opens "all",
    cleared, and closing it narrows back without clearing, unless the idle mode is "all"."""
    backend = _Recorder()
    switch = _switch(backend, oom_history=oom_history)
    idle = None if oom_history == "off" else oom_history
    switch.start()
    assert switch.mode == idle
    switch.open_window()
    assert switch.mode == "all"
    switch.close_window()
    assert switch.mode == idle
    switch.stop()
    assert switch.mode is None
    expected: list[tuple[HistoryMode, bool]] = [] if idle is None else [(idle, True)]
    expected.append(("all", True))
    if idle != "all":
        expected.append((idle, False))
    if idle is not None:
        expected.append((None, False))
    assert backend.calls == expected


def test_a_refusing_backend_leaves_the_mode_and_never_raises() -> None:
    """When the backend refuses, the switch keeps its last known mode and does not raise."""
    switch = _switch(_Recorder(refuse=True), oom_history="state")
    switch.start()
    switch.open_window()
    switch.close_window()
    switch.stop()
    assert switch.mode is None
