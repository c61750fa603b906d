"""Pareto-smoothed importance sampling of draws whose sampler targeted an approximation (NAPSU-MQ's
chains target the frozen-V surrogate; :func:`psis_weights` reweights them to the exact posterior).
Moved here from :mod:`dpsynth.graphical.posterior`, which re-exports it.
"""
from __future__ import annotations

import math

import numpy as np

#: fewer draws than this leave too few in the tail to fit its Pareto shape
PSIS_MIN_DRAWS = 100
#: ratios that all lie within this factor of one another are bounded weights: the self-normalised
#: estimate keeps at least 4r/(1+r)² (0.96 at r = 1.5) of the draws' effective size, and k̂, a
#: scale-free fit of the tail's shape, only measures rounding there (a NAPSU-MQ fit whose surrogate
#: is exact but for its soft cap: ratios within 1.19 of each other, efficiency 1.00, k̂ 1.6)
PSIS_BOUNDED_RATIO = 1.5


def psis_weights(log_ratio, r_eff: float = 1.0) -> tuple[np.ndarray, float, float]:
    """Pareto-smoothed importance sampling (Vehtari, Simpson, Gelman, Yao & Gabry 2024, via
    arviz-stats) of draws whose log density ratio target/proposal is ``log_ratio`` (flat).
    Returns (normalised weights, k̂, efficiency): k̂ ≤ 0.7 means the reweighted estimates are
    reliable (with fewer than ``PSIS_MIN_DRAWS`` draws k̂ = ∞: raw weights, not to be trusted; with
    every ratio within ``PSIS_BOUNDED_RATIO`` of the others k̂ = −∞: raw, bounded weights);
    efficiency = (1/Σw²)/n is the share of the draws' effective size that survives.

    >>> w, k, eff = psis_weights(np.zeros(1000))
    >>> round(float(w.sum()), 6), round(eff, 6)
    (1.0, 1.0)
    """
    from arviz_stats.base import array_stats

    lr = np.asarray(log_ratio, dtype=float).ravel()
    if not np.isfinite(lr).any():
        raise ValueError("every importance ratio is zero or undefined")
    lr = np.where(np.isfinite(lr), lr, -np.inf)
    finite = np.isfinite(lr)
    lw = np.full(lr.shape, -np.inf)
    if np.ptp(lr[finite]) < 1e-12:  # equal weights: nothing to smooth
        lw[finite], khat = 0.0, -np.inf
    elif np.ptp(lr[finite]) <= math.log(PSIS_BOUNDED_RATIO):  # bounded weights: raw, no tail to fit
        lw[finite], khat = lr[finite], -np.inf
    elif finite.sum() < PSIS_MIN_DRAWS:  # too few draws to fit a Pareto tail: raw weights, no trust
        lw[finite], khat = lr[finite], np.inf
    else:
        # arviz-stats' psislw takes the *negated* log ratios (its LOO convention: log-likelihoods)
        smoothed, khat = array_stats.psislw(lr[finite].max() - lr[finite], r_eff=r_eff)
        lw[finite] = np.asarray(smoothed, dtype=float)
    w = np.exp(lw - lw.max())
    w /= w.sum()
    return w, float(khat), float(1.0 / np.sum(w ** 2) / w.size)
