"""Warnings under ``plan``: torch's own warnings point at the script's line, as on a real GPU,
and the plan's notes are printed even where the script silences warnings."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from planned import plan, script

pytestmark = [pytest.mark.integration, pytest.mark.torch]


def test_a_warning_torch_raises_in_an_operator_names_the_scripts_line(tmp_path: Path) -> None:
    """A C++ warning raised inside an emulated operator is placed at the script's line that
    called it, not at the plan's own code that ran the operator."""
    script(
        tmp_path,
        """\
        import torch
        x = torch.randn(3, 3, device="cuda")
        y = torch.nn.functional.softmax(x)
        z = torch.tensor(y)
        """,
    )
    done = plan(tmp_path, "train.py")
    assert done.returncode == 0, done.stderr
    assert f"{tmp_path / 'train.py'}:3: UserWarning: Implicit dimension choice" in done.stderr
    assert f"{tmp_path / 'train.py'}:4: UserWarning: To copy construct" in done.stderr
    assert "memforensics" not in done.stderr.split("UserWarning")[0]


def test_the_plans_notes_are_kept_when_the_script_ignores_warnings(tmp_path: Path) -> None:
    """A script that calls ``warnings.filterwarnings("ignore")`` still gets the plan's note on
    made-up values, in the text and in ``--json``."""
    script(
        tmp_path,
        """\
        import warnings
        warnings.filterwarnings("ignore")
        import torch
        x = torch.empty(4, 4, device="cuda")
        print((x @ x).sum().item())
        """,
    )
    done = plan(tmp_path, "train.py")
    assert done.returncode == 0, done.stderr
    assert "are made up in a plan" in done.stderr
    assert "train.py:5)" in done.stderr
    done = plan(tmp_path, "--json", "train.py")
    facts = json.loads(done.stdout)
    assert any("are made up in a plan" in note for note in facts["warnings"])
