"""An exact Gaussian process's hyperparameter fit: the shape of BoTorch's and GPyTorch's loops.

A 64-point RBF kernel matrix built with ``cdist`` and ``exp`` each iteration, its Cholesky
factor, a triangular solve, the negative log marginal likelihood, its backward and an Adam step
on the log lengthscale, outputscale and noise: some 120 small operators an iteration, where a
plan's cost is the cost of each operator, not of its size. ``--device cpu`` runs the same loop
on the CPU, the reference a plan of it is compared with.

    memforensics plan benchmarks/plan_scripts/gp_fit.py [--steps N]
    python benchmarks/plan_scripts/gp_fit.py --device cpu [--steps N]
"""

from __future__ import annotations

import argparse
import math

import torch


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--steps", type=int, default=200)
    args = parser.parse_args()
    torch.manual_seed(0)
    device = torch.device(args.device)
    x = torch.rand(64, 3, device=device)
    y = torch.sin(6 * x).sum(-1) + 0.1 * torch.randn(64, device=device)
    raw = torch.zeros(3, device=device, requires_grad=True)  # log lengthscale, scale, noise
    optimizer = torch.optim.Adam([raw], lr=0.05)
    loss = torch.zeros((), device=device)
    for _ in range(args.steps):
        optimizer.zero_grad()
        lengthscale, scale, noise = raw.exp().unbind()
        distance = torch.cdist(x / lengthscale, x / lengthscale)
        kernel = scale * torch.exp(-0.5 * distance**2)
        kernel = kernel + (noise + 1e-4) * torch.eye(64, device=device)
        factor = torch.linalg.cholesky(kernel)
        alpha = torch.cholesky_solve(y.unsqueeze(-1), factor)
        fit = 0.5 * (y.unsqueeze(-1) * alpha).sum()
        logdet = factor.diagonal().log().sum()
        loss = (fit + logdet + 0.5 * 64 * math.log(2 * math.pi)) / 64
        loss.backward()
        optimizer.step()
    print(f"{loss.item():.6f}")


if __name__ == "__main__":
    main()
