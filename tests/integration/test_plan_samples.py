"""Sampling with ``torch.distributions`` on the planned device, under the real ``memforensics
plan``: samplers without a ``meta`` kernel allocate their result, and a sample the plan made up
passes ``log_prob``'s support check as a GPU's sample does, while a value the script decided
outside the support is refused as torch refuses it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from planned import plan, script

pytestmark = [pytest.mark.integration, pytest.mark.torch]

MiB = 1 << 20

SAMPLES = """
import json
import torch
from torch.distributions import Beta, Binomial, Categorical, Gamma, OneHotCategorical

net = torch.nn.Linear(256, 1024).cuda()
h = net(torch.randn(1024, 256, device="cuda"))  # 4 MiB of unknown values
facts = {}
policy = Categorical(logits=h)
action = policy.sample()
facts["log_prob"] = list(policy.log_prob(action).shape)
facts["one_hot"] = list(OneHotCategorical(logits=h).log_prob(
    OneHotCategorical(logits=h).sample()).shape)
before = torch.cuda.memory_allocated()
drawn = Beta(h.exp(), h.exp()).rsample()  # Dirichlet's sampler
facts["beta"] = torch.cuda.memory_allocated() - before
(drawn.sum() + Gamma(h.exp(), 1.0).rsample().sum()).backward()  # the samplers' gradients
facts["grad"] = list(net.weight.grad.shape)
facts["binomial"] = list(Binomial(10, logits=h).sample().shape)
try:
    policy.log_prob(torch.full((1024,), 2000, device="cuda"))  # the script's own, outside
except ValueError as error:
    facts["refused"] = str(error).split(" (")[0]
print(json.dumps(facts))
"""


def test_distributions_sample_on_the_device_and_only_known_values_are_refused(
    tmp_path: Path,
) -> None:
    """Categorical and one-hot samples pass ``log_prob``'s validation; Beta's and Gamma's
    reparameterized samples and their gradients, and Binomial's samples, run (no ``meta``
    kernel) and allocate their result (a 4 MiB Beta sample holds its 4 MiB at least); a value
    the script made outside the support is still refused."""
    script(tmp_path, SAMPLES)
    done = plan(tmp_path, "train.py")
    assert done.returncode == 0, done.stderr
    facts = json.loads(next(line for line in done.stdout.splitlines() if line.startswith("{")))
    assert facts["log_prob"] == [1024]
    assert facts["one_hot"] == [1024]
    assert facts["beta"] >= 4 * MiB
    assert facts["grad"] == [1024, 256]
    assert facts["binomial"] == [1024, 1024]
    assert facts["refused"] == "Expected value argument"
