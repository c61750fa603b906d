"""Elliptical slice sampling (Murray, Adams & MacKay 2010) around a Gaussian approximation: NAPSU-MQ's
``inference="slice"``, started from its Laplace approximation
(:func:`dpsynth.graphical.posterior.laplace_approximation`).

Example
-------
>>> import torch
>>> lp = lambda x: -0.5 * ((x - 1.0) ** 2).sum(-1)
>>> res = elliptical_slice(lp, torch.ones(2, dtype=torch.float64), torch.eye(2, dtype=torch.float64), chains=4)
>>> tuple(res.draws.shape)
(4, 5, 2)
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Callable

import numpy as np
import torch

from .factor import DTYPE
from .mixing import ChainSummary


@dataclass
class SliceResult(ChainSummary):
    draws: torch.Tensor          # (chains, kept draws, dim) in the original coordinates
    evaluations: int             # log-density evaluations (chain × proposal)
    seconds: float


def elliptical_slice(log_prob: Callable, mean: torch.Tensor, chol: torch.Tensor, *, chains: int = 20,
                     warmup: int = 20, draws: int = 5, thin: int = 2, rng: np.random.Generator | None = None,
                     init: torch.Tensor | None = None, batch: int = 64) -> SliceResult:
    """Elliptical slice sampling (Murray, Adams & MacKay 2010) of exp(log_prob) written as
    N(x; mean, LLᵀ) · L(x), L = exp(log_prob)/N(x; mean, LLᵀ): exact MCMC whose proposals are
    ellipses of the Gaussian approximation (e.g. the Laplace approximation), so it needs no
    gradients and no step size; where the approximation is good, almost every first proposal is
    accepted, and where it overshoots (a density that falls off a cliff) the bracket shrinks.
    ``chains`` chains advance together (one batched log-density call per shrinking round, in
    chunks of ``batch``); after ``warmup`` iterations every ``thin``-th state is kept (``draws``
    per chain). Chains start at ``init`` (chains × dim) or at the mean."""
    t0 = time.perf_counter()
    rng = rng if rng is not None else np.random.default_rng(0)
    mean = torch.as_tensor(mean, dtype=DTYPE)
    chol = torch.as_tensor(chol, dtype=DTYPE)
    dim = mean.numel()

    def log_lik(f):  # log L at x = mean + f (the Gaussian's own log-density added back)
        z = torch.linalg.solve_triangular(chol, f.T, upper=False).T
        with torch.no_grad():
            lp = torch.cat([log_prob(mean + f[i:i + batch]) for i in range(0, f.shape[0], batch)])
        out = lp + 0.5 * (z ** 2).sum(-1)
        out[~torch.isfinite(out)] = -math.inf
        return out

    f = torch.zeros((chains, dim), dtype=DTYPE) if init is None else torch.as_tensor(init, dtype=DTYPE) - mean
    cur = log_lik(f)
    evals = chains
    kept = []
    for it in range(warmup + draws * thin):
        nu = torch.as_tensor(rng.standard_normal((chains, dim)), dtype=DTYPE) @ chol.T
        log_y = cur + torch.as_tensor(np.log(rng.random(chains)), dtype=DTYPE)
        angle = torch.as_tensor(rng.uniform(0, 2 * math.pi, chains), dtype=DTYPE)
        lo, hi = angle - 2 * math.pi, angle.clone()
        todo = torch.ones(chains, dtype=torch.bool)
        for _ in range(60):  # the bracket shrinks geometrically; 60 rounds ≈ machine precision
            idx = torch.nonzero(todo).squeeze(-1)
            prop = f[idx] * torch.cos(angle[idx])[:, None] + nu[idx] * torch.sin(angle[idx])[:, None]
            ll = log_lik(prop)
            evals += int(idx.numel())
            ok = ll > log_y[idx]
            acc = idx[ok]
            f[acc], cur[acc] = prop[ok], ll[ok]
            todo[acc] = False
            rej = idx[~ok]
            if rej.numel() == 0:
                break
            neg = angle[rej] < 0
            lo[rej] = torch.where(neg, angle[rej], lo[rej])
            hi[rej] = torch.where(neg, hi[rej], angle[rej])
            angle[rej] = lo[rej] + (hi[rej] - lo[rej]) * torch.as_tensor(rng.random(rej.numel()), dtype=DTYPE)
        if it >= warmup and (it - warmup) % thin == thin - 1:
            kept.append((mean + f).clone())
    return SliceResult(torch.stack(kept, dim=1), evals, time.perf_counter() - t0)
