"""Batches of graphs through the real ``memforensics plan``: pooling over a batch vector copied
from the host makes one row a graph, and a dense batch pads to the largest graph, as on a GPU,
however many nodes the batch holds."""

from __future__ import annotations

from pathlib import Path

import pytest
from planned import plan, script

pytestmark = [pytest.mark.integration, pytest.mark.torch]

POOL = """
import torch
torch.manual_seed(0)
sizes = torch.randint(150_000, 200_000, (16,))  # 16 graphs, over 2**21 nodes: too many to keep
batch = torch.repeat_interleave(torch.arange(16), sizes)
edge_index = torch.cat([torch.randint(0, int(n), (2, int(n))) + int(sizes[:i].sum())
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
    """``int(batch.max()) + 1`` of a batch vector too large to keep (over 16 MiB) reads the
    host's largest graph index, so a pool makes as many rows as the batch has graphs, and the
    edge index's largest node reads as the host's, as on a GPU; once the device writes the batch
    vector, its largest value no longer reads as the host's."""
    script(tmp_path, POOL)
    done = plan(tmp_path, "train.py")
    assert done.returncode == 0, done.stderr
    assert "pooled (16, 32) True 0" in done.stdout
    assert "written 15" not in done.stdout


DENSE = """
import torch
sizes = torch.randint(600, 1000, (16,))
batch = torch.repeat_interleave(torch.arange(16), sizes).to("cuda")  # 100 KiB of indices
x = torch.randn(batch.numel(), 32, device="cuda")
# torch_geometric.utils.to_dense_batch: count each graph's nodes, pad to the largest
counted = torch.zeros(16, dtype=torch.long, device="cuda")
num_nodes = counted.scatter_add_(0, batch, batch.new_ones(batch.numel()))
largest = int(num_nodes.max())
dense = x.new_zeros(16, largest, 32)
print("dense", num_nodes.tolist() == sizes.tolist(), largest == int(sizes.max()))
"""


def test_a_dense_batch_pads_each_graph_to_the_largest_as_on_the_gpu(tmp_path: Path) -> None:
    """A batch vector copied from the host keeps its values, and a large tensor of ones its
    one value, so counting each graph's nodes by scatter_add gives the host's sizes and a
    dense batch is padded to the largest graph, as on a GPU."""
    script(tmp_path, DENSE)
    done = plan(tmp_path, "train.py")
    assert done.returncode == 0, done.stderr
    assert "dense True True" in done.stdout


MASK = """
import torch
sizes = torch.randint(600, 1000, (16,))
nodes = int(sizes.sum())
batch = torch.repeat_interleave(torch.arange(16), sizes).to("cuda")  # 100 KiB of indices
# a dense batch's mask, as torch_geometric.utils.to_dense_batch makes it
counts = torch.zeros(16, dtype=torch.long, device="cuda").index_add_(
    0, batch, batch.new_ones(nodes))
offsets = counts.new_empty(17)  # an exclusive cumulative sum, written in two parts
offsets[:1].zero_()
torch.cumsum(counts, 0, out=offsets[1:])
largest = int(counts.max())
position = torch.arange(nodes, device="cuda") - offsets[batch]  # each node's place in its graph
slot = torch.where(position < largest, position + batch * largest, 16 * largest)
mask = torch.zeros(16 * largest + 1, dtype=torch.bool, device="cuda")
mask[slot] = True
mask = mask[: 16 * largest].view(16, largest)
print("mask", int(mask.sum()) == nodes, mask.sum(1).tolist() == sizes.tolist())
"""


def test_a_dense_batch_mask_holds_one_flag_a_node(tmp_path: Path) -> None:
    """A dense batch's mask, set at each node's place (an ``arange`` over more nodes than 64 KiB
    of indices, less its graph's offset from a cumulative sum written in parts, plus its graph's
    first slot), holds one flag a node, each graph's row its node count, as on a GPU."""
    script(tmp_path, MASK)
    done = plan(tmp_path, "train.py")
    assert done.returncode == 0, done.stderr
    assert "mask True True" in done.stdout
