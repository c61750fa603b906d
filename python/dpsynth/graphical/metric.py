"""The dense mass matrix of HMC (:func:`dpsynth.graphical.posterior.hmc`) estimated from pooled
draws: the draws' correlation matrix shrunk towards a target and rescaled by their variances; and
the precision the leapfrog applies it in (:func:`velocity_metric`).

Why a target other than the identity: NAPSU-MQ's posterior has near-deterministic linear ties
between parameters (sums pinned by the released totals). A warm-up window of a few hundred draws
estimates them poorly, and Ledoit–Wolf shrinkage towards the identity washes them out, so the metric
overstates the variance along them and the step size shrinks to fit. Shrinking towards the
correlations of the Laplace covariance F⁻¹ keeps them (Adult-10 with 20 % MCAR: condition numbers of
the metric-whitened posterior covariance 466 / 672 → 13.7 / 21.8 from 1,392 draws;
:data:`dpsynth.generators.napsu_sampling.METRIC_TARGET`).

Two coordinates tied almost exactly, 50 draws in 20 dimensions: towards the identity the tie's
correlation (0.999 in the draws) is shrunk to 0.13; towards a target that holds it, it stays.

>>> import numpy as np
>>> rng = np.random.default_rng(0)
>>> x = rng.standard_normal((50, 20)); x[:, 1] = x[:, 0] + 0.05 * x[:, 1]
>>> laplace = np.eye(20); laplace[0, 1] = laplace[1, 0] = 0.998
>>> [round(float(c[0, 1] / np.sqrt(c[0, 0] * c[1, 1])), 2) for c in (shrunk_covariance(x), shrunk_covariance(x, laplace))]
[0.13, 1.0]
"""
from __future__ import annotations

import numpy as np
import torch

from .half_matrix import HALF_MIN_DIM, HalfMatrix


def shrunk_covariance(x: np.ndarray, target: np.ndarray | None = None) -> np.ndarray:
    """Covariance of pooled draws ``x`` (n, dim) for the mass matrix, shrunk on the correlation
    scale and rescaled by the sample variances, so that a few hundred draws give a
    well-conditioned dense estimate. ``target`` None: Ledoit–Wolf shrinkage (scikit-learn) towards
    the identity (its unused precision matrix, a pseudo-inverse by ``eigh``, not computed: 12 of the
    15 s a call took at dim 2,752). ``target`` a covariance: shrinkage towards its correlation
    matrix with the intensity of :func:`shrinkage_towards`; a target that already holds the
    posterior's strong linear dependences (the Laplace covariance F⁻¹) keeps them where the identity
    would wash them out (:data:`dpsynth.generators.napsu_sampling.METRIC_TARGET`)."""
    sd = x.std(axis=0, ddof=1)
    sd = np.where(sd > 0, sd, 1e-3)
    z = (x - x.mean(0)) / sd
    if target is None:
        from sklearn.covariance import LedoitWolf

        corr = LedoitWolf(assume_centered=False, store_precision=False).fit(z).covariance_
    else:
        corr = shrinkage_towards(z, target)[0]
    cov = corr * np.outer(sd, sd)
    return 0.5 * (cov + cov.T) + 1e-10 * np.eye(x.shape[1])


#: the least shrinkage towards a target (:func:`shrinkage_towards`): S alone is singular with fewer
#: draws than dimensions
LAMBDA_MIN = 1e-3


def shrinkage_towards(z: np.ndarray, target: np.ndarray) -> tuple[np.ndarray, float]:
    """(C, λ): C = (1 − λ)S + λT (positive definite for λ > 0) for centred, standardised
    draws ``z`` (n, dim) with S = zᵀz/n and T the correlation matrix of ``target``. λ = Σ_{i≠j}
    Var̂(s_ij) / Σ_{i≠j} (s_ij − t_ij)², clipped to [:data:`LAMBDA_MIN`, 1]: the Ledoit–Wolf intensity for a fixed
    target (Schäfer & Strimmer 2005, target "D" generalised to any fixed T), with Var̂(s_ij) =
    Σ_k (z_ki z_kj − s_ij)² / n², summed over i ≠ j without forming the n × dim² products."""
    n = z.shape[0]
    s = z.T @ z / n
    d = np.sqrt(np.diag(target))
    t = target / np.outer(d, d)
    row2 = (z * z).sum(axis=1)
    var_sum = ((row2 ** 2).sum() - (z ** 4).sum() - n * ((s ** 2).sum() - (np.diag(s) ** 2).sum())) / n ** 2
    gap = ((s - t) ** 2).sum() - ((np.diag(s) - 1.0) ** 2).sum()
    lam = float(np.clip(var_sum / gap, LAMBDA_MIN, 1.0)) if gap > 0 else 1.0
    # the convex combination as it is (S's own diagonal put back would lower it by λ/n, enough to
    # make C indefinite where T's smallest eigenvalue is below 1/n: F⁻¹'s correlations reach 1e-3)
    return (1.0 - lam) * s + lam * t, lam


#: precision of the leapfrog's velocity product metric · p (chains × dim by dim × dim, once per
#: gradient): at 16 chains and dim 1,027 (the bundled Adult, 15 columns; one thread, alone) it took
#: 5.8 ms in float64, 1.7 ms in float32, against ~18 ms for the surrogate's value and gradient
#: (py-spy over a whole fit: 12 % of its samples on that line in float64). The metric is rounded
#: to float32 once (:func:`velocity_metric`) and the kinetic energy uses that rounded metric, so the
#: integrator is the leapfrog of one fixed metric; only the product's accumulation rounds (relative
#: 1e-7, far below the step's own error). From :data:`dpsynth.graphical.half_matrix.HALF_MIN_DIM`
#: dimensions the metric is rounded to float16 instead, the same way (:func:`velocity_metric`)
VELOCITY_DTYPE = torch.float32


def velocity_metric(metric: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | HalfMatrix, torch.Tensor]:
    """(the metric rounded to :data:`VELOCITY_DTYPE` and back to float64, the same in
    VELOCITY_DTYPE for the velocity product, the rounded metric's Cholesky factor); a metric whose
    rounding is not positive definite stays in float64 throughout. From
    :data:`dpsynth.graphical.half_matrix.HALF_MIN_DIM` dimensions the metric is rounded to float16
    instead and the product is a :class:`dpsynth.graphical.half_matrix.HalfMatrix` (where that
    rounding is not positive definite: float32 as below); :func:`velocity` applies either.

    >>> m64, low, chol = velocity_metric(torch.tensor([[1.0 + 1e-12, 0.0], [0.0, 2.0]], dtype=torch.float64))
    >>> m64.tolist(), low.dtype
    ([[1.0, 0.0], [0.0, 2.0]], torch.float32)
    >>> tied = torch.tensor([[1.0, 1.0 - 1e-9], [1.0 - 1e-9, 1.0]], dtype=torch.float64)  # singular once rounded
    >>> velocity_metric(tied)[1].dtype
    torch.float64
    """
    if metric.shape[0] >= HALF_MIN_DIM:
        half = HalfMatrix(metric)
        rounded = half.rounded
        chol, info = torch.linalg.cholesky_ex(rounded)
        if int(info) == 0:
            return rounded, half, chol
    low = metric.to(VELOCITY_DTYPE)
    chol, info = torch.linalg.cholesky_ex(low.to(torch.float64))
    if int(info) != 0:
        return metric, metric, torch.linalg.cholesky(metric)
    return low.to(torch.float64), low, chol


def velocity(p: torch.Tensor, low: torch.Tensor | HalfMatrix) -> torch.Tensor:
    """p @ M (float64) with M as :func:`velocity_metric` returned it for the product (``low``).

    >>> low = velocity_metric(torch.eye(2, dtype=torch.float64))[1]
    >>> velocity(torch.ones(1, 2, dtype=torch.float64), low).tolist()
    [[1.0, 1.0]]
    """
    if isinstance(low, HalfMatrix):
        return low(p)
    return (p.to(low.dtype) @ low).to(torch.float64)
