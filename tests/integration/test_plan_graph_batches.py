"""Batches of graphs through the real ``memforensics plan``: pooling over a batch vector copied
from the host makes one row a graph, as on a GPU, however many nodes the batch holds."""

from __future__ import annotations

from pathlib import Path

import pytest
from planned import plan, script

pytestmark = [pytest.mark.integration, pytest.mark.torch]

POOL = """
import torch
torch.manual_seed(0)
sizes = torch.randint(600, 1000, (16,))  # 16 graphs, over 8192 nodes: too many to keep
batch = torch.repeat_interleave(torch.arange(16), sizes)
edge_index = torch.cat([torch.randint(0, int(n), (2, 3 * int(n))) + int(sizes[:i].sum())
                        for i, n in enumerate(sizes)], dim=1)
host_nodes = int(edge_index.max()) + 1
x = torch.randn(batch.numel(), 32, device="cuda")
batch, edge_index = batch.to("cuda"), edge_index.to("cuda")
num_graphs = int(batch.max()) + 1  # torch_geometric.utils.scatter's dim_size
num_nodes = int(edge_index.max()) + 1  # torch_geometric.utils.maybe_num_nodes
pooled = torch.zeros(num_graphs, 32, device="cuda").index_add_(0, batch, x)
print("pooled", tuple(pooled.shape), num_nodes == host_nodes, int(batch.min()))
batch.add_(1)  # written on the device: the host's extremes are not its own any more
print("written", int(batch.max()))
"""


def test_pooling_over_a_large_batch_vector_makes_one_row_a_graph(tmp_path: Path) -> None:
    """``int(batch.max()) + 1`` of a batch vector too large to keep reads the host's largest
    graph index, so a pool makes as many rows as the batch has graphs, and the edge index's
    largest node reads as the host's, as on a GPU; once the device writes the batch vector, its
    largest value no longer reads as the host's."""
    script(tmp_path, POOL)
    done = plan(tmp_path, "train.py")
    assert done.returncode == 0, done.stderr
    assert "pooled (16, 32) True 0" in done.stdout
    assert "written 15" not in done.stdout
