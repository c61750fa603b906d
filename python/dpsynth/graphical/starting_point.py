"""Starting points of NAPSU-MQ's posterior search (:class:`dpsynth.graphical.noise_aware.NoiseAwareLikelihood`
inherits :class:`StartingPoint`): θ that matches the noisy clique proportions by maximum entropy
(Newton's method, or L-BFGS for large D), and for a latent-variable model (ICIN) the moment match of
its own statistics from there. Kept apart from the likelihood, which only needs where to start.

The mixin reads the likelihood's ``model``, ``D``, ``G``, ``prior_sd`` and ``n0``.
"""
from __future__ import annotations

import numpy as np
import torch

from .factor import DTYPE

#: above this many parameters the starting point is found by quasi-Newton (L-BFGS) steps whose
#: gradients cost one unclamped pass, instead of Newton / Levenberg–Marquardt steps that need the
#: clamped D × D moments (bundled 15-column Adult, D = 2,751: 130 s for those)
NEWTON_MAX_D = 1000
#: the moment match (:meth:`StartingPoint._match_moments`) stops once a step lowers its objective by
#: less than this share: it only starts the mode search. Adult-10, 20 % MCAR, seed 1: the residual
#: |q − μ_D|² reached 0.00896 after 15 steps (1.8 s) and then oscillated in its sixth digit for 35 more
#: (3.5 s) under the former 1e-12
MATCH_RTOL = 1e-5


def minimise_lbfgs(fun, x0: torch.Tensor, max_iter: int) -> torch.Tensor:
    """argmin of ``fun`` (x ↦ (value, gradient) tensors) from ``x0`` by scipy's L-BFGS-B."""
    from scipy.optimize import minimize

    def f(v):
        value, grad = fun(torch.as_tensor(v, dtype=DTYPE))
        return float(value), grad.detach().numpy().astype(float)

    res = minimize(f, x0.numpy(), jac=True, method="L-BFGS-B",
                   options={"maxiter": max_iter, "maxcor": 30, "ftol": 1e-14, "gtol": 1e-7})
    return torch.as_tensor(res.x, dtype=DTYPE)


class StartingPoint:
    """The starting-point methods of :class:`NoiseAwareLikelihood` (module docstring)."""

    def initial_point(self, noisy_cliques: list[np.ndarray], max_iter: int = 50) -> torch.Tensor:
        """Start for the mode search: θ matching the (clipped, smoothed) noisy clique proportions q
        (one table per model clique, in order) by maximum entropy — the concave problem
        max θᵀq − A(θ) − λ|θ|²/2 — solved by Newton's method; v = 0. Noisy tables can put q outside
        the marginal polytope, where the unpenalised solution runs off to infinity: λ ≥ 1e-4 keeps
        it finite. A latent-variable model (:class:`IcinModel`) starts from the fit of its
        observed-data counterpart, whose θ has the same meaning on complete rows, and then matches
        its own moments to q (:meth:`_match_moments`)."""
        model = getattr(self.model, "observed", self.model)
        q = []
        for t, cells in zip(noisy_cliques, model.canonical):
            t = np.clip(np.asarray(t, dtype=float).ravel(), 0.0, None) + 0.5
            q.append(t[cells] / t.sum())
        q = torch.as_tensor(np.concatenate(q), dtype=DTYPE)
        ridge = max(1e-4, 1.0 / (self.prior_sd ** 2 * float(self.n0.mean())))
        if self.D > NEWTON_MAX_D:
            return self._initial_point_lbfgs(model, q, ridge)
        eye = torch.eye(self.D, dtype=DTYPE)

        def objective(th):
            return float(th @ q - model.log_partition(th) - 0.5 * ridge * (th ** 2).sum())

        theta = torch.zeros(self.D, dtype=DTYPE)
        with torch.no_grad():
            f = objective(theta)
            for _ in range(max_iter):
                mu, second = model.canonical_moments(theta)
                cov = second - mu[:, None] * mu[None, :]
                grad = q - mu - ridge * theta
                step = torch.linalg.solve(cov + ridge * eye, grad)
                t = 1.0
                while t > 1e-6:
                    f_new = objective(theta + t * step)
                    if f_new >= f - 1e-12:
                        break
                    t *= 0.5
                theta, f_old, f = theta + t * step, f, f_new
                if float(grad @ step) < 1e-10 or abs(f - f_old) < 1e-12:
                    break
        if model is not self.model:
            theta = self._match_moments(q, theta, ridge)
        return torch.cat([theta, torch.zeros(self.G, dtype=DTYPE)])

    def _initial_point_lbfgs(self, model, q: torch.Tensor, ridge: float, max_iter: int = 2000) -> torch.Tensor:
        """:meth:`initial_point` for large D: the same max-ent problem, and for a latent-variable
        model the same moment matching, by L-BFGS (objectives scaled to counts, n̂ × proportions)."""
        n = float(self.n0.mean())

        def maxent(th):  # n (A(θ) − θᵀq + λ|θ|²/2) and its gradient n (μ − q + λθ)
            a, mu = model.partition_and_means(th)
            return n * (a - th @ q + 0.5 * ridge * (th ** 2).sum()), n * (mu - q + ridge * th)

        with torch.no_grad():
            theta = minimise_lbfgs(maxent, torch.zeros(self.D, dtype=DTYPE), max_iter)
        if model is not self.model:
            def moments(th):  # n (|q − μ_D(θ)|² + λ|θ|²) / 2 and its gradient by autograd
                th = th.requires_grad_(True)
                value = 0.5 * n * (((q - self.model.canonical_means(th)) ** 2).sum() + ridge * (th ** 2).sum())
                return value.detach(), torch.autograd.grad(value, th)[0]

            theta = minimise_lbfgs(moments, theta, max_iter)
        return torch.cat([theta, torch.zeros(self.G, dtype=DTYPE)])

    def _match_moments(self, q: torch.Tensor, theta: torch.Tensor, ridge: float, max_iter: int = 200) -> torch.Tensor:
        """θ minimising |q − μ_D(θ)|² + ridge·|θ|² by Levenberg–Marquardt, for a model whose
        features differ from its statistics (:class:`IcinModel`: J = ∂μ_D/∂θ = Cov(a_D, b)). Each
        step costs one clamped pass, against a clamped pass *with its gradient* for a step of
        :meth:`mode`; from the observed-data fit, 100 Fisher-scoring steps of :meth:`mode` left
        the log-posterior at −5,757 against −1,356 at the mode (Adult-10, all columns incomplete)."""
        def loss(th):  # (objective, residual q − μ_D(θ)): the accepted step's residual is reused
            r = q - self.model.canonical_means(th)
            return float((r ** 2).sum() + ridge * (th ** 2).sum()), r

        damping = 1e-3
        eye = torch.eye(self.D, dtype=DTYPE)
        with torch.no_grad():
            f, r = loss(theta)
            for _ in range(max_iter):
                jac = self.model.mean_jacobian(theta)
                grad = jac.T @ r - ridge * theta
                normal = jac.T @ jac + ridge * eye
                while damping < 1e8:
                    step = torch.linalg.solve(normal + damping * torch.diag(torch.diagonal(normal)), grad)
                    f_new, r_new = loss(theta + step)
                    if f_new < f:
                        break
                    damping *= 10
                else:
                    break
                theta, f_old, f, r = theta + step, f, f_new, r_new
                damping = max(damping / 10, 1e-9)
                if f_old - f < MATCH_RTOL * max(f, 1e-300) or float(step.abs().max()) < 1e-8:
                    break
        return theta
