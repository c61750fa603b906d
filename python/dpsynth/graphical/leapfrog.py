"""Whole leapfrog trajectories of a batch of HMC chains in one call, so that a sampler whose chains
are split over two processes exchanges one message per draw, not one per leapfrog step.

:func:`dpsynth.graphical.posterior.hmc` moves every chain the same number of leapfrog steps n per
draw (Neal 2011, eqs. 5.18–5.20, with velocity M·p for the metric M):

    p ← p − ½ε∇U(z);  n times: z ← z + ε·M·p, then p ← p − ε∇U(z) (the last time ½ε),

each row on its own. Until 2026-12-06 the sampler's process made each step's momentum update for
all 16 chains and handed each half-batch drift and gradient to its helper process
(:class:`dpsynth.graphical.split_chains.SplitDensity`): two messages and a wait per step, and the
momentum updates, packing and energies done for 16 rows while the helper idled. The bundled Adult
at 15 columns, AMD EPYC, 2 cores (``bench/napsu_step.py``): 4.67 ms per 8-row gradient alone,
5.64 ms for 16 rows split, 6.7 ms per gradient in the sampler. :class:`LeapfrogPaths` makes each
process run its own rows' whole trajectory; the arithmetic is the same per row (element-wise
updates, the drift and gradient of :class:`dpsynth.graphical.posterior.DriftThenGradient`), so the
draws are the same as before, bit for bit.

Example
-------
>>> import torch
>>> class Gauss:  # U(z) = ½|z|², metric I
...     dim = 2
...     def drift_and_grad(self, z, p, eps):
...         z = z if p is None else z + eps * p
...         return z, -0.5 * (z ** 2).sum(-1), -z
>>> paths = LeapfrogPaths(Gauss())
>>> z, p = torch.tensor([[1.0, 0.0]], dtype=torch.float64), torch.tensor([[0.0, 1.0]], dtype=torch.float64)
>>> z1, p1, u1, g1 = paths.run(z, p, z.clone(), 0.1, 3)
>>> round(float(u1 + 0.5 * (p1 ** 2).sum(-1)), 4)  # energy ½|z|² + ½|p|² = 1 kept to O(ε²)
1.0
>>> _, out = paths.value_and_grad(LeapfrogPaths.pack(z, p, z.clone(), 0.1, 3))
>>> bool(torch.equal(out, torch.cat([z1, p1, g1], dim=-1)))
True
"""
from __future__ import annotations

import math

import torch

DTYPE = torch.float64


class LeapfrogPaths:
    """n leapfrog steps of each row from (z, p, ∇U(z)) with step ε (a number or (B, 1)), given
    ``step.drift_and_grad(z, p, ε)`` = (z + ε·M·p, log density there, its gradient) (p None: z
    unchanged) and ``step.dim``. :meth:`value_and_grad` is the same on packed rows (:meth:`pack`),
    the row-wise protocol :class:`dpsynth.graphical.split_chains.SplitDensity` splits."""

    def __init__(self, step):
        self.step, self.dim = step, step.dim

    @staticmethod
    def pack(z: torch.Tensor, p: torch.Tensor, grad_u: torch.Tensor, eps, n_steps: int) -> torch.Tensor:
        """Rows (z, p, ∇U(z), ε, n), (B, 3·dim + 2); ``eps`` a number or (B, 1)."""
        rows = z.shape[0]
        eps = torch.as_tensor(eps, dtype=DTYPE).expand(rows, 1)
        return torch.cat([z, p, grad_u, eps, torch.full((rows, 1), float(n_steps), dtype=DTYPE)], dim=-1)

    def run(self, z: torch.Tensor, p: torch.Tensor, grad_u: torch.Tensor, eps, n_steps: int) -> tuple:
        """(z, p, U = −log density (+∞ where not finite), ∇U) after ``n_steps`` leapfrog steps;
        ``n_steps`` 0: U and ∇U at z itself (p and ``grad_u`` are not read)."""
        if n_steps == 0:
            z, lp, g = self.step.drift_and_grad(z, None, 0.0)
            grad_u = -g
        else:
            p = p - 0.5 * eps * grad_u
            for s in range(n_steps):
                z, lp, g = self.step.drift_and_grad(z, p, eps)
                grad_u = -g
                p = p - (eps if s < n_steps - 1 else 0.5 * eps) * grad_u
        u = -lp
        u[~torch.isfinite(u)] = math.inf
        return z, p, u, grad_u

    def value_and_grad(self, packed: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(U at the end (B,), [z, p, ∇U] at the end (B, 3·dim)) of :meth:`run` on rows of :meth:`pack`."""
        d = self.dim
        z, p, u, g = self.run(packed[:, :d], packed[:, d:2 * d], packed[:, 2 * d:3 * d], packed[:, 3 * d:3 * d + 1],
                              int(packed[0, 3 * d + 1]) if packed.shape[0] else 0)
        return u, torch.cat([z, p, g], dim=-1)
