"""Noise calibration and conversions between privacy notions.

- :func:`gaussian_sigma`: the analytic Gaussian mechanism (Balle & Wang 2018, Thm 8).
- :func:`cdp_delta`, :func:`cdp_eps`, :func:`cdp_rho`: ρ-zCDP ↔ (ε, δ) with the tight conversion of
  Canonne, Kamath & Steinke (2020, Prop. 12 / Cor. 13), as private-pgm's ``cdp2adp``.
- :func:`sgm_epsilon`: RDP accounting of the Poisson-subsampled Gaussian mechanism (opacus).

Example
-------
>>> round(gaussian_sigma(1.0, 1e-5), 4)
3.7306
>>> round(cdp_rho(1.0, 1e-9), 6)
0.014973
"""
from __future__ import annotations

import math

from .validation import check_delta, check_epsilon


def _analytic_delta(epsilon: float, s: float) -> float:
    """δ(ε, s) = Φ(s/2 − ε/s) − e^ε Φ(−s/2 − ε/s) for s = Δ/σ (Balle & Wang 2018, Thm 8)."""
    a = s / 2.0 - epsilon / s
    b = -s / 2.0 - epsilon / s
    from scipy import special  # imported on first use: keeps `import dpsynth` light

    return float(special.ndtr(a) - math.exp(epsilon + special.log_ndtr(b)))


def gaussian_sigma(epsilon: float, delta: float, sensitivity: float = 1.0) -> float:
    """Smallest σ such that adding N(0, σ²) to a query of L2 sensitivity ``sensitivity`` is
    (ε, δ)-DP, by the analytic Gaussian mechanism (Balle & Wang 2018, Thm 8; solved by Brent).

    >>> round(gaussian_sigma(1.0, 1e-5, 1.0), 4)
    3.7306
    """
    epsilon = check_epsilon(epsilon)
    delta = check_delta(delta, allow_zero=False)
    if not (isinstance(sensitivity, (int, float)) and math.isfinite(sensitivity) and sensitivity > 0):
        raise ValueError(f"sensitivity must be a positive finite number, got {sensitivity!r}")
    f = lambda s: _analytic_delta(epsilon, s) - delta  # δ(ε, s) increases with s = Δ/σ
    hi = 1.0
    while f(hi) < 0:
        hi *= 2.0
        if hi > 1e6:
            raise ValueError("could not calibrate the Gaussian mechanism; check epsilon and delta")
    lo = hi / 2.0
    while f(lo) > 0 and lo > 1e-12:
        lo /= 2.0
    from scipy import optimize

    s = optimize.brentq(f, lo, hi, xtol=1e-14, rtol=1e-14, maxiter=500)
    return sensitivity / s


def gaussian_epsilon(sigma: float, delta: float, sensitivity: float = 1.0) -> float:
    """Inverse of :func:`gaussian_sigma`: the ε of N(0, σ²) noise at δ."""
    delta = check_delta(delta, allow_zero=False)
    s = sensitivity / sigma
    f = lambda e: _analytic_delta(e, s) - delta  # decreasing in ε
    if f(0.0) <= 0:
        return 0.0
    hi = 1.0
    while f(hi) > 0:
        hi *= 2.0
    from scipy import optimize

    return optimize.brentq(f, 0.0, hi, xtol=1e-12)


# ------------------------------------------------------------------ zCDP (CKS 2020)
def cdp_delta(rho: float, epsilon: float) -> float:
    """δ such that ρ-zCDP implies (ε, δ)-DP (Canonne, Kamath & Steinke 2020, Cor. 13):
    δ = min_{α>1} exp((α−1)(αρ−ε) + α log(1−1/α)) / (α−1), α found by bisection on the derivative."""
    if rho < 0 or epsilon < 0:
        raise ValueError("rho and epsilon must be non-negative")
    if rho == 0:
        return 0.0
    amin, amax = _bisect(lambda a: (2 * a - 1) * rho - epsilon + math.log1p(-1.0 / a) < 0,
                         1.01, (epsilon + 1) / (2 * rho) + 2)
    alpha = (amin + amax) / 2
    delta = math.exp((alpha - 1) * (alpha * rho - epsilon) + alpha * math.log1p(-1 / alpha)) / (alpha - 1.0)
    return min(delta, 1.0)


def _bisect(ok, lo: float, hi: float) -> tuple[float, float]:
    """Shrink [lo, hi] around the boundary of a monotone predicate (``ok(lo)`` true, ``ok(hi)`` false),
    until the interval cannot be halved in floating point."""
    while True:
        mid = (lo + hi) / 2
        if mid in (lo, hi):
            return lo, hi
        if ok(mid):
            lo = mid
        else:
            hi = mid


def cdp_eps(rho: float, delta: float) -> float:
    """Smallest ε with ρ-zCDP ⇒ (ε, δ)-DP (bisection on :func:`cdp_delta`)."""
    delta = check_delta(delta, allow_zero=False)
    if rho < 0:
        raise ValueError("rho must be non-negative")
    if rho == 0:
        return 0.0
    upper = rho + 2 * math.sqrt(rho * math.log(1 / delta))  # the standard bound is an upper bound
    return _bisect(lambda e: cdp_delta(rho, e) > delta, 0.0, upper)[1]


def cdp_rho(epsilon: float, delta: float) -> float:
    """Largest ρ with ρ-zCDP ⇒ (ε, δ)-DP (bisection on :func:`cdp_delta`).

    >>> round(cdp_rho(1.0, 1e-9), 6)
    0.014973
    """
    epsilon = check_epsilon(epsilon)
    delta = check_delta(delta, allow_zero=False)
    return _bisect(lambda r: cdp_delta(r, epsilon) <= delta, 0.0, epsilon + 1)[0]


# ------------------------------------------------------------------ RDP (opacus)
def sgm_epsilon(noise_multiplier: float, sample_rate: float, steps: int, delta: float) -> float:
    """ε of ``steps`` Poisson-subsampled Gaussian mechanisms (noise multiplier σ, rate q) at δ,
    by opacus's RDP accountant (Mironov et al. 2019; Balle et al. 2020 conversion).

    >>> round(sgm_epsilon(1.5, 0.04, 2250, 1e-5), 3)
    7.329
    """
    from opacus.accountants import RDPAccountant

    if not (0 < sample_rate <= 1):
        raise ValueError(f"sample_rate must be in (0, 1], got {sample_rate}")
    if noise_multiplier <= 0:
        raise ValueError("noise_multiplier must be positive")
    steps = int(steps)
    if steps < 1:
        raise ValueError("steps must be at least 1")
    delta = check_delta(delta, allow_zero=False)
    acc = RDPAccountant()
    acc.history = [(float(noise_multiplier), float(sample_rate), steps)]
    return float(acc.get_epsilon(delta=delta))


def sgm_noise_multiplier(epsilon: float, delta: float, sample_rate: float, steps: int) -> float:
    """Smallest σ whose ``steps`` Poisson-subsampled Gaussian steps at rate q are (ε, δ)-DP (RDP)."""
    from opacus.accountants.utils import get_noise_multiplier

    epsilon = check_epsilon(epsilon)
    delta = check_delta(delta, allow_zero=False)
    return float(get_noise_multiplier(target_epsilon=epsilon, target_delta=delta, sample_rate=sample_rate,
                                      steps=int(steps), accountant="rdp", epsilon_tolerance=0.005))


def zcdp_gaussian_rho(sigma: float, sensitivity: float = 1.0) -> float:
    """ρ of N(0, σ²) noise on an L2-sensitivity-Δ query: Δ²/(2σ²) (Bun & Steinke 2016, Prop. 1.6)."""
    return float(sensitivity) ** 2 / (2.0 * float(sigma) ** 2)


def zcdp_gaussian_sigma(rho: float, sensitivity: float = 1.0) -> float:
    """σ for a ρ-zCDP Gaussian mechanism: Δ/√(2ρ)."""
    if rho <= 0:
        raise ValueError("rho must be positive")
    return float(sensitivity) / math.sqrt(2.0 * rho)


__all__ = ["gaussian_sigma", "gaussian_epsilon", "cdp_delta", "cdp_eps", "cdp_rho", "sgm_epsilon",
           "sgm_noise_multiplier", "zcdp_gaussian_rho", "zcdp_gaussian_sigma"]

