"""Sizes printed, sizes parsed, and the memory outside PyTorch: one rule each, everywhere."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from memforensics._units import format_bytes, outside_pytorch_bytes, parse_size
from memforensics.analysis.folder.ls import external_from_sidecar
from memforensics.analysis.oom.moment import FINAL, OomMoment
from memforensics.capture.journal import KEYS, format_line
from memforensics.capture.oom import allocation_bytes_from_message

sizes = st.integers(min_value=0, max_value=1 << 50)
maybe = st.none() | sizes


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("4096", 4096),
        ("2GiB", 2 << 30),
        ("2g", 2 << 30),
        ("512MB", 512 * 1000**2),
        ("1.5 GiB", 3 << 29),
        ("20.00 MiB", 20 << 20),
        ("96 bytes", 96),
        (" 3 kib ", 3 << 10),
    ],
)
def test_parse_size_reads_what_people_and_pytorch_write(text: str, expected: int) -> None:
    """Command-line sizes and the sizes in PyTorch's error text read as the same bytes."""
    assert parse_size(text) == expected


@pytest.mark.parametrize("text", ["", "GiB", "2 parsecs", "-1GiB", "1e3"])
def test_parse_size_refuses_anything_else(text: str) -> None:
    """What is not a size is a ValueError, never a guess."""
    with pytest.raises(ValueError, match="not a size"):
        parse_size(text)


@given(sizes)
def test_printed_sizes_read_back_within_their_rounding(count: int) -> None:
    """What ``format_bytes`` prints parses back to within the half-hundredth of its unit that two
    decimals allow (at most 0.5% of the size), plus the byte parsing to a whole count may drop."""
    assert abs(parse_size(format_bytes(count)) - count) <= count * 0.005 + 1


@given(sizes, st.sampled_from(["bytes", "KiB", "MiB", "GiB"]))
def test_oom_message_sizes_use_the_same_parser(count: int, unit: str) -> None:
    """The OOM text's ``Tried to allocate`` size is read by the one parser."""
    text = f"{count} {unit}" if unit == "bytes" else f"{count / 1024:.2f} {unit}"
    message = f"CUDA out of memory. Tried to allocate {text}. GPU 0 has a total capacity of 8 GiB"
    assert allocation_bytes_from_message(message) == parse_size(text)


@given(maybe, maybe, maybe)
def test_outside_pytorch_is_never_negative(
    limit: int | None, free: int | None, held: int | None
) -> None:
    """limit - free - reserved, clamped at zero; unknown when any figure is."""
    got = outside_pytorch_bytes(limit, free, held)
    if limit is None or free is None or held is None:
        assert got is None
    else:
        assert got == max(limit - free - held, 0)


def _journal_external(limit: int, free: int, reserved: int) -> int | None:
    stats = {"device_total_bytes": limit, "device_free_bytes": free, "reserved_bytes": reserved}
    line = json.loads(format_line("oom", 3, 0, dict(stats), 1.0))
    assert list(line) == list(KEYS)
    value: int | None = line["external_bytes"]
    return value


def test_journal_line_with_reserved_past_limit_minus_free_says_zero() -> None:
    """Figures read a moment apart (reserved > limit - free) give 0 outside PyTorch, not less."""
    assert _journal_external(limit=80 << 30, free=10 << 30, reserved=75 << 30) == 0


@given(sizes, sizes, sizes)
def test_journal_oom_moment_and_ls_agree(limit: int, free: int, reserved: int) -> None:
    """The journal, an OOM's moment (summary, replay) and ``ls`` give the same figure."""
    moment = OomMoment(FINAL, None, None, None, limit, free, reserved, None, None, None, 0)
    sidecar = {
        "oom": {
            "device_total_bytes": limit,
            "device_free_bytes": free,
            "allocator": {"reserved_bytes.all.current": reserved},
        }
    }
    expected = outside_pytorch_bytes(limit, free, reserved)
    assert _journal_external(limit, free, reserved) == expected
    assert moment.external_bytes == expected
    assert external_from_sidecar(sidecar) == expected
