"""The frozen-V surrogate of NAPSU-MQ's reduced form
(:meth:`dpsynth.graphical.noise_aware.NoiseAwareLikelihood._frozen_v`, which states the
approximation) with its gradient written out by hand, for the sampler.

Forward, per row x = (θ, v) (the same operations as the closure it stands beside, so the same
values): n = n₀e^{s·v}; μ_D and μ_P (every released cell) from one level pass; r = ŝ − n(μ_D, 1);
z = r·L⁻ᵀ; the tables' own blocks following θ, F(μ_P, n) (:meth:`NoiseAwareLikelihood._follow`),
capped as C·tanh(F/C); f = −½|z|² − log|L| + C·tanh(F/C) + log prior.

Backward: r̄ = −z·L⁻¹ (the same rounded matrix, transposed); μ̄_D = −n·r̄_D, n̄ = −r̄·(μ_D, 1);
with g = 1 − tanh²(F/C), per cell (d = nμ + σ², w = √n·μ/d, ρ = ŷ − nμ, and the tables' sums a, b,
c = 1 − Σw²d, a₀, b₀ of :meth:`_follow`), ∂F/∂ρ = −ρ/d + ρ/d₀ − (b/c)w + (b₀/c₀)w₀,
∂F/∂d = ½ρ²/d² − κw² − ½/d and ∂F/∂w = −(b/c)ρ − 2κwd with κ = ½b²/c² − ½/c, then
∂w/∂μ = √n σ²/d², ∂w/∂n = μ(σ² − nμ)/(2√n d²); the level pass backward
(:func:`dpsynth.graphical.level_pass.level_backward`) takes (μ̄_D, μ̄_P) to the tree cells' log-potentials,
θ̄ = Liftᵀ(those), v̄ = n̄·n·s; the prior's gradient is added.

Why by hand: a complete-data fit's sampler gradient is this density's; autograd's per-node overhead,
not arithmetic, was most of it on small models (the paper's toy problem, 8 parameters, 48 chains:
value_and_grad through autograd took ~60 % of a fit, py-spy).
"""
from __future__ import annotations

import torch

from .expanded_v import FixedMatrix
from .level_pass import level_backward, level_forward


class FrozenV:
    """f(x) of the module docstring, (…, D + 1) → (…,): ``lik`` (a reduced-form
    :class:`dpsynth.graphical.noise_aware.NoiseAwareLikelihood`, one count group), ``l_inv_t`` the
    :class:`FixedMatrix` of L⁻ᵀ (rounded as its products use it), ``cells`` its (ŷ, σ², table
    indicators, count group) per released cell, ``log_det`` = log|L|, ``ref`` the
    tables' blocks frozen at x_ref (:meth:`NoiseAwareLikelihood._frozen_tables`), ``cap`` C, and
    ``density`` the same f as a closure under autograd (values off the sampler's path: fits,
    Hessians, tests)."""

    def __init__(self, lik, cells: tuple, l_inv_t: FixedMatrix, log_det: float, ref: tuple, cap: float, density):
        self.lik, self.cells, self.l_inv_t, self.log_det = lik, cells, l_inv_t, log_det
        self.ref, self.cap, self.density = ref, cap, density
        self.l_inv = FixedMatrix(l_inv_t.t)  # x @ (L⁻ᵀ)ᵀ with the rounded matrix: the exact adjoint
        lift, collect, levels = lik.model.pass_maps(("collect", "tables"))
        self.lift, self.collect, self.levels = lift, collect, levels

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return self.density(x)

    def value_and_grad(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(f (…,), ∂f/∂x (…, D + 1)) by the forward and backward of the module docstring."""
        flat_x = x.detach().reshape(-1, x.shape[-1])
        with torch.no_grad():
            f, grad = self._value_and_grad(flat_x)
        return f.reshape(x.shape[:-1]), grad.reshape(x.shape)

    def _value_and_grad(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        lik, d = self.lik, self.lik.D
        n = lik.counts(x)                                                    # (B, 1)
        flat = lik.model.lifted_potentials(x[:, :d])
        _, belief, saved = level_forward(self.levels, flat)
        out = self.collect.mm(belief).T                                      # (B, D + P)
        mu_d, mu_p = out[:, :d], out[:, d:]
        m = torch.cat([mu_d, torch.ones_like(mu_d[:, :1])], dim=-1)
        z = self.l_inv_t(lik.y - n * m)
        follow, g_mu_p, g_n_follow = self._follow_and_grad(mu_p, n)
        t = torch.tanh(follow / self.cap)
        prior, g_prior = lik.log_prior_and_grad(x)
        f = -0.5 * (z * z).sum(-1) - self.log_det + self.cap * t + prior
        # backward
        g_r = -self.l_inv(z)
        g_follow = (1.0 - t * t).unsqueeze(-1)
        g_out = torch.cat([-n * g_r[:, :d], g_follow * g_mu_p], dim=-1)
        g_n = -(g_r * m).sum(-1, keepdim=True) + g_follow * g_n_follow
        g_flat = level_backward(self.levels, saved, None, self.collect.T.mm(g_out.T.contiguous()))
        grad = torch.cat([self.lift.T.mm(g_flat).T, g_n * n * lik.scale], dim=-1)
        return f, grad + g_prior

    def _follow_and_grad(self, mu_p: torch.Tensor, n: torch.Tensor):
        """(:meth:`NoiseAwareLikelihood._follow` (B,), its gradients in μ_P (B, P) and in n (B, 1))."""
        _, sigma2, one_hot, group = self.cells
        d0, w0, c0, _ = self.ref
        follow, (nv, root, d, w, r, b, c, b0) = follow_terms(self.cells, self.ref, mu_p, n)
        # the tables' coefficients ∂F/∂b, ∂F/∂b₀ and κ = ∂F/∂c, back on their cells
        coef_b, coef_b0, kappa = (torch.stack([-b / c, b0 / c0, 0.5 * b * b / (c * c) - 0.5 / c], dim=-2)
                                  @ one_hot.T).unbind(-2)
        g_rho = -r / d + r / d0 + coef_b * w + coef_b0 * w0
        g_d = 0.5 * r * r / (d * d) - kappa * w * w - 0.5 / d
        g_w = coef_b * r - 2.0 * kappa * w * d
        g_mu = -nv * g_rho + nv * g_d + g_w * root * sigma2 / (d * d)
        g_nv = -mu_p * g_rho + mu_p * g_d + g_w * mu_p * (sigma2 - nv * mu_p) / (2.0 * root * d * d)
        g_n = torch.zeros_like(n).index_add_(-1, group, g_nv)
        return follow, g_mu, g_n


def follow_terms(cells: tuple, ref: tuple, mu_p: torch.Tensor, n: torch.Tensor) -> tuple:
    """F of :meth:`NoiseAwareLikelihood._follow` (the tables' own blocks of V following θ, less the
    same frozen at ``ref``) from ``cells`` = (ŷ, σ², table indicators, count group) per released
    cell, and the per-cell and per-table terms its gradient needs (n per cell, √n, d, w, ρ, b, c, b₀);
    plain torch operations, so autograd can record them."""
    y, sigma2, one_hot, group = cells
    d0, w0, c0, const = ref
    nv = n[..., group]
    root = torch.sqrt(nv)
    d = nv * mu_p + sigma2
    w = root * mu_p / d
    r = y - nv * mu_p
    a, b, c, a0, b0 = (torch.stack(torch.broadcast_tensors(r * r / d, r * w, w * w * d, r * r / d0, r * w0),
                                   dim=-2) @ one_hot).unbind(-2)
    c = 1.0 - c
    follow = (0.5 * (a0 - a + b0 * b0 / c0 - b * b / c - torch.log(c))).sum(-1) - 0.5 * torch.log(d).sum(-1) + const
    return follow, (nv, root, d, w, r, b, c, b0)
