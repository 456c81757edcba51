"""Which code the plan takes as torch's own: torch's files, not a library beside them whose
name begins with ``torch`` (torchmetrics, torchvision)."""

from __future__ import annotations

import os

import pytest

torch = pytest.importorskip("torch")  # collected, then deselected, where torch is absent

from memforensics.plan.values import by_torch  # noqa: E402

pytestmark = pytest.mark.torch


def _asked_from(filename: str) -> bool:
    """``by_torch()`` asked from code whose frame names ``filename``."""
    code = compile("answer = by_torch()", filename, "exec")
    names: dict[str, object] = {"by_torch": by_torch}
    exec(code, names)
    return bool(names["answer"])


@pytest.mark.parametrize(
    ("folder", "torch_s"),
    [("torch", True), ("torchmetrics", False), ("torchvision", False), ("torch_geometric", False)],
)
def test_only_torch_s_own_folder_is_torch_s_code(folder: str, torch_s: bool) -> None:
    """A frame in torch's folder is torch's; one in a sibling folder whose name begins with
    ``torch`` (torchmetrics' accuracy, read as torch's, read 0 every epoch) is not."""
    installed = os.path.dirname(os.path.dirname(torch.__file__))
    assert _asked_from(os.path.join(installed, folder, "functional.py")) is torch_s
