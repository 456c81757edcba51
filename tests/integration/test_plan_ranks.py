"""Indices that ``topk`` and ``sort`` make on the device, read on the host where their values are
unknown, through the real ``memforensics plan``: each row's are distinct, as a GPU's are, so a
beam search that ranks its candidates on the host (Whisper's ``BeamSearchDecoder``) keeps as
many beams as it asks for."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from planned import plan, script

pytestmark = [pytest.mark.integration, pytest.mark.torch]

BEAMS, LIMIT = 4, 6

HOST_BEAMS = f"""
import json
import torch
vocab, beams = 6000, {BEAMS}
head = torch.nn.Linear(16, vocab).cuda()  # outputs too large to keep (3 rows: 72,000 B): unknown
tokens = torch.zeros(beams, 1, dtype=torch.long, device="cuda")
kept_each = []
for step in range({LIMIT}):
    logprobs = head(torch.randn(tokens.shape[0], 16, device="cuda")).log_softmax(-1)
    scores = {{}}
    for b in range(tokens.shape[0]):
        prefix = tokens[b].tolist()
        for logprob, token in zip(*logprobs[b].topk(beams + 1)):
            scores[tuple(prefix + [token.item()])] = logprob.item()
    kept = sorted(scores, key=scores.get, reverse=True)[:beams]
    kept_each.append(len(kept))
    tokens = torch.tensor(kept, device="cuda")
out = head(torch.randn(3, 16, device="cuda"))
print(json.dumps({{
    "kept": kept_each,
    "shape": list(tokens.shape),
    "orders": out[:, :7].argsort(-1).tolist(),
    "columns": out[:5, :3].topk(2, dim=0).indices.t().tolist(),
    "top": out.argmax(-1).tolist(),
}}))
"""


def test_host_reads_of_topk_and_sort_indices_are_distinct_in_each_row(tmp_path: Path) -> None:
    """A beam search that reads each beam's top ``k + 1`` tokens on the host keeps ``k``
    distinct sequences at every step, as on a GPU, where identical reads would collapse it to
    one beam; an ``argsort`` row reads as a permutation, a ``topk`` along the first dimension
    as distinct rows in each column, and an ``argmax`` still reads 0."""
    script(tmp_path, HOST_BEAMS)
    done = plan(tmp_path, "train.py")
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout.splitlines()[0])
    assert found["kept"] == [BEAMS] * LIMIT
    assert found["shape"] == [BEAMS, LIMIT + 1]
    assert all(sorted(row) == list(range(7)) for row in found["orders"])
    assert all(len(set(column)) == 2 for column in found["columns"])
    assert found["top"] == [0, 0, 0]
