"""``--vary``'s pure parts: the script's arguments for each value, and the largest that fits."""

from __future__ import annotations

import pytest

from memforensics.plan.vary import Vary, VaryRow, largest, with_expandable


def test_a_value_given_in_the_arguments_is_replaced_in_either_spelling() -> None:
    """--NAME V and --NAME=V are replaced in place; an absent option is added at the end."""
    vary = Vary.parse("batch-size=8,16")
    assert vary.values == ("8", "16")
    assert vary.args(("--lr", "3", "--batch-size", "4"), "16") == (
        "--lr",
        "3",
        "--batch-size",
        "16",
    )
    assert vary.args(("--batch-size=4", "x"), "8") == ("--batch-size=8", "x")
    assert vary.args(("--lr", "3"), "8") == ("--lr", "3", "--batch-size", "8")


@pytest.mark.parametrize("text", ["batch-size", "=1,2", "batch-size=", "batch-size=,"])
def test_a_malformed_vary_is_refused(text: str) -> None:
    """NAME and at least one value are required."""
    with pytest.raises(ValueError, match="NAME=V1,V2"):
        Vary.parse(text)


def test_the_largest_fitting_value_is_numeric_not_the_last_given() -> None:
    """Numbers compare as numbers (16 > 8 though given first); none fitting gives None."""
    rows = [
        VaryRow("16", 1, 1, True, True),
        VaryRow("8", 1, 1, True, True),
        VaryRow("32", 1, 1, False, True),
    ]
    assert largest(rows, expandable=False) == "16"
    assert largest(rows, expandable=True) == "32"
    assert largest([VaryRow("4", None, None, None, None, "failed")], expandable=False) is None


def test_expandable_segments_replace_any_setting_of_them() -> None:
    """The other settings stay; expandable_segments is set to True once."""
    conf = with_expandable("max_split_size_mb:128,expandable_segments:False")
    assert conf == "max_split_size_mb:128,expandable_segments:True"
    assert with_expandable(None) == "expandable_segments:True"
