"""Where a planned call puts its outputs is that call's own, thread by thread: a thread pool
loading a checkpoint (Hugging Face's ``from_pretrained``) moves one tensor to the CPU while
another thread moves one to the device."""

from __future__ import annotations

import threading

import pytest

pytestmark = pytest.mark.torch


def test_where_a_call_places_its_outputs_is_not_seen_by_another_thread() -> None:
    """While one thread runs a call that places its outputs, another thread's calls still see
    no placing of their own, and see their own when they set one."""
    from memforensics.plan.emulate import Ghosts

    ghosts = Ghosts()
    inside, release = threading.Event(), threading.Event()
    seen: list[bool | None] = []

    def hold() -> None:
        seen.append(ghosts.placing)
        inside.set()
        release.wait(timeout=60)

    worker = threading.Thread(target=ghosts.placed, args=(True, hold))
    worker.start()
    assert inside.wait(timeout=60)
    assert ghosts.placing is None
    assert ghosts.placed(False, lambda: ghosts.placing) is False
    release.set()
    worker.join(timeout=60)
    assert seen == [True]
    assert ghosts.placing is None
