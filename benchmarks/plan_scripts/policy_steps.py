"""A small policy trained with PPO's loss: the shape of a reinforcement-learning update loop.

An actor and a critic of two 64-unit hidden layers, Adam, a batch of 64 observations a step,
clipped ratios, an entropy bonus and gradient clipping, as stable-baselines3's and cleanrl's
PPO compute them: some two hundred and fifty tiny operators a step, where a plan's cost is the
cost of each operator, not of its size. ``--device cpu`` runs the same loop on the CPU, the
reference a plan of it is compared with.

    memforensics plan benchmarks/plan_scripts/policy_steps.py [--steps N]
    python benchmarks/plan_scripts/policy_steps.py --device cpu [--steps N]
"""

from __future__ import annotations

import argparse

import torch
from torch import nn


def _mlp(inputs: int, outputs: int) -> nn.Sequential:
    return nn.Sequential(
        nn.Linear(inputs, 64), nn.Tanh(), nn.Linear(64, 64), nn.Tanh(), nn.Linear(64, outputs)
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--steps", type=int, default=500)
    args = parser.parse_args()
    torch.manual_seed(0)
    device = torch.device(args.device)
    actor, critic = _mlp(8, 4).to(device), _mlp(8, 1).to(device)
    parameters = [*actor.parameters(), *critic.parameters()]
    optimizer = torch.optim.Adam(parameters, lr=3e-4, eps=1e-5)
    for _ in range(args.steps):
        observations = torch.randn(64, 8, device=device)
        actions = torch.randint(0, 4, (64,), device=device)
        advantages = torch.randn(64, device=device)
        returns = torch.randn(64, device=device)
        old_log_probs = torch.randn(64, device=device)
        policy = torch.distributions.Categorical(logits=actor(observations))
        ratio = (policy.log_prob(actions) - old_log_probs).exp()
        advantages = (advantages - advantages.mean()) / (advantages.std() + 1e-8)
        clipped = torch.clamp(ratio, 0.8, 1.2)
        policy_loss = torch.max(-advantages * ratio, -advantages * clipped).mean()
        value_loss = 0.5 * ((critic(observations).view(-1) - returns) ** 2).mean()
        loss = policy_loss - 0.01 * policy.entropy().mean() + 0.5 * value_loss
        optimizer.zero_grad()
        loss.backward()
        nn.utils.clip_grad_norm_(parameters, 0.5)
        optimizer.step()
    print(f"{loss.item():.6f}")


if __name__ == "__main__":
    main()
