"""Operands cuBLAS cannot read as they lie, under the real ``memforensics plan``: ATen copies
an expanded or strided operand of ``mm``, ``addmm``, ``F.linear`` and ``bmm`` into a contiguous
temporary after the product's output and frees it when the product returns; a contiguous or
transposed operand is read in place."""

from __future__ import annotations

from pathlib import Path

import pytest
from planned import printed_facts, script

pytestmark = [pytest.mark.integration, pytest.mark.torch]

ROWS, WIDTH, OUT = 512, 256, 1024
PRODUCT = f"""
import json
import torch
import torch.nn.functional as F
torch.randn(8, 8, device="cuda") @ torch.randn(8, 8, device="cuda")  # cuBLAS's workspace
w = torch.randn({WIDTH}, {OUT}, device="cuda")
bias = torch.zeros({OUT}, device="cuda")
operands = {{
    "expanded scalar": torch.ones((), device="cuda").expand({ROWS}, {WIDTH}),
    "expanded row": torch.randn({WIDTH}, device="cuda").expand({ROWS}, {WIDTH}),
    "stepped slice": torch.randn({ROWS}, 2 * {WIDTH}, device="cuda")[:, ::2],
    "contiguous": torch.randn({ROWS}, {WIDTH}, device="cuda"),
    "transposed": torch.randn({WIDTH}, {ROWS}, device="cuda").t(),
}}
products = {{
    "mm": lambda a: torch.mm(a, w),
    "addmm": lambda a: torch.addmm(bias, a, w),
    "linear": lambda a: F.linear(a, w.t()),
}}
found = {{}}
for name, a in operands.items():
    for product, call in products.items():
        torch.cuda.reset_peak_memory_stats()
        before = torch.cuda.memory_allocated()
        out = call(a)
        found[f"{{product}} {{name}}"] = torch.cuda.max_memory_allocated() - before - out.nbytes
        del out
print(json.dumps(found))
"""
COPY = ROWS * WIDTH * 4


@pytest.mark.parametrize("product", ["mm", "addmm", "linear"])
@pytest.mark.parametrize(
    ("operand", "copied"),
    [
        ("expanded scalar", COPY),
        ("expanded row", COPY),
        ("stepped slice", COPY),
        ("contiguous", 0),
        ("transposed", 0),
    ],
)
def test_a_product_copies_an_operand_cublas_cannot_read_for_its_length(
    tmp_path: Path, product: str, operand: str, copied: int
) -> None:
    """Beyond its output, a product holds at its peak a contiguous copy of an expanded or
    stepped operand (``prepare_matrix_for_cublas``), and nothing for one whose rows or columns
    are contiguous; the copy is gone once the product returns."""
    script(tmp_path, PRODUCT)
    found = printed_facts(tmp_path, "--device-capability", "9.0")
    assert found[f"{product} {operand}"] == copied


SUMMED = f"""
import json
import torch
layer = torch.nn.Linear({WIDTH}, {OUT}).cuda()
x = torch.randn({ROWS}, {WIDTH}, device="cuda", requires_grad=True)
a = torch.randn(8, 8, device="cuda", requires_grad=True)
(a @ a).sum().backward()  # cuBLAS's workspaces, the forward's and the backward's
y = layer(x)
held = torch.cuda.memory_allocated()
torch.cuda.reset_peak_memory_stats()
y.sum().backward()
print(json.dumps({{"above": torch.cuda.max_memory_allocated() - held,
                   "after": torch.cuda.memory_allocated() - held}}))
"""


def test_a_sums_gradient_reaching_a_linear_is_copied_for_each_product_of_its_backward(
    tmp_path: Path,
) -> None:
    """``linear(x).sum().backward()``: the sum's gradient reaches ``addmm``'s backward expanded,
    so each of its two products copies it whole, an output-sized block made after the
    product's output and gone with it. At the backward's peak (the weight's product) the
    backward holds, beyond what it leaves, that copy, the loss and its incoming gradient (a
    512-byte block each), less the bias's gradient, not yet made; before, the copies were
    missed and the peak was what the backward leaves."""
    script(tmp_path, SUMMED)
    found = printed_facts(tmp_path, "--device-capability", "9.0")
    copy, scalar, bias_grad = ROWS * OUT * 4, 512, OUT * 4
    assert found["above"] == int(found["after"]) + copy + 2 * scalar - bias_grad  # type: ignore[call-overload]
