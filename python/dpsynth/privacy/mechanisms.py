"""Noise primitives. Every value computed from private rows reaches its noise through one of
these functions, which (1) charge the ledger *before* drawing noise, and (2) pass the exact value
and its declared sensitivity to any active :func:`record_noise_inputs` recorder, so that the
neighbour tests (run on D and D' with the same seed) can check |value(D) − value(D')| ≤ sensitivity.

- :func:`laplace_counts`: discrete Laplace on integer counts, ε = Δ₁/scale (Ghosh et al. 2009).
- :func:`gaussian_counts`: discrete Gaussian on integer counts, ρ = Δ₂²/(2σ²) (CKS 2020), or (ε, δ)
  by the analytic calibration.
- :func:`laplace_values`, :func:`gaussian_values`: float noise for real-valued statistics (numpy or
  torch); not floating-point safe, documented in PRIVACY.md.
- :func:`exponential_mechanism`: select an index with probability ∝ exp(ε q / (2Δ)) (McSherry &
  Talwar 2007) by the Gumbel-max trick, or by OpenDP's report-noisy-max with exponential noise
  (permute-and-flip, at least as accurate) when no seed is given.

Example
-------
>>> from dpsynth.privacy import PrivacyLedger, NoiseSource
>>> led = PrivacyLedger(epsilon=1.0)
>>> noisy = laplace_counts([10, 5], epsilon=1.0, sensitivity=1, ledger=led, source=NoiseSource(0),
...                        step="hist", relation="add-remove")
>>> len(noisy), led.total_epsilon()
(2, 1.0)
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass

import numpy as np

from .calibration import gaussian_sigma, zcdp_gaussian_sigma
from .ledger import PrivacyLedger
from .rng import NoiseSource

# --------------------------------------------------------------------- grey-box recording
_RECORDERS: list = []


@dataclass
class NoiseCall:
    step: str
    mechanism: str
    value: np.ndarray
    sensitivity: float
    norm: str  # "L1", "L2" or "Linf" (exponential mechanism scores)


class NoiseRecorder:
    """Collects every :class:`NoiseCall` made while active (see :func:`record_noise_inputs`)."""

    def __init__(self):
        self.calls: list[NoiseCall] = []

    def steps(self) -> list[str]:
        return [c.step for c in self.calls]


@contextlib.contextmanager
def record_noise_inputs():
    """Context manager recording each value handed to a noise primitive with its declared
    sensitivity: ``with record_noise_inputs() as rec: gen.fit(df, schema)``."""
    rec = NoiseRecorder()
    _RECORDERS.append(rec)
    try:
        yield rec
    finally:
        _RECORDERS.remove(rec)


def _observe(step, mechanism, value, sensitivity, norm):
    if _RECORDERS:
        v = value.detach().cpu().numpy() if hasattr(value, "detach") else np.asarray(value)
        call = NoiseCall(step, mechanism, np.array(v, dtype=float, copy=True), float(sensitivity), norm)
        for r in _RECORDERS:
            r.calls.append(call)


def distance(a: np.ndarray, b: np.ndarray, norm: str) -> float:
    """Distance between two recorded values in the norm of their declared sensitivity."""
    d = np.ravel(np.asarray(a, dtype=float) - np.asarray(b, dtype=float))
    if norm == "L1":
        return float(np.abs(d).sum())
    if norm == "L2":
        return float(np.sqrt((d**2).sum()))
    if norm == "Linf":
        return float(np.abs(d).max(initial=0.0))
    raise ValueError(f"unknown norm {norm!r}")


def _check_sensitivity(sensitivity) -> float:
    s = float(sensitivity)
    if not np.isfinite(s) or s <= 0:
        raise ValueError(f"sensitivity must be a positive finite number, got {sensitivity!r}")
    return s


# --------------------------------------------------------------------- counts (exact, integer)
def laplace_counts(counts, *, epsilon: float, sensitivity: float, ledger: PrivacyLedger, source: NoiseSource,
                   step: str, relation: str, note: str = "", attributes=None) -> np.ndarray:
    """counts + discrete Laplace(Δ₁/ε) noise; ε-DP when the L1 sensitivity of ``counts`` is Δ₁."""
    counts = np.asarray(counts)
    if not np.issubdtype(counts.dtype, np.integer):
        raise TypeError("laplace_counts needs integer counts; use laplace_values for real values")
    sensitivity = _check_sensitivity(sensitivity)
    ledger.spend(step, "discrete Laplace", epsilon=epsilon, sensitivity=sensitivity, relation=relation,
                 norm="L1", note=note, attributes=attributes)
    _observe(step, "discrete Laplace", counts, sensitivity, "L1")
    return counts.astype(np.int64) + source.discrete_laplace(sensitivity / epsilon, counts.shape)


def _charge_gaussian(mechanism, value, sensitivity, ledger, step, relation, rho, epsilon, delta, note):
    """σ of a Gaussian mechanism given ρ (σ = Δ₂/√(2ρ)) or (ε, δ) (analytic calibration); charges the
    ledger and reports the value to the recorder. Returns (σ, checked sensitivity)."""
    sensitivity = _check_sensitivity(sensitivity)
    if rho is not None:
        sigma = zcdp_gaussian_sigma(rho, sensitivity)
        ledger.spend(step, mechanism, rho=rho, sensitivity=sensitivity, relation=relation, norm="L2", note=note)
    else:
        sigma = gaussian_sigma(epsilon, delta, sensitivity)
        ledger.spend(step, mechanism, epsilon=epsilon, delta=delta, sensitivity=sensitivity, relation=relation,
                     norm="L2", note=note)
    _observe(step, mechanism, value, sensitivity, "L2")
    return sigma, sensitivity


def gaussian_counts(counts, *, sensitivity: float, ledger: PrivacyLedger, source: NoiseSource, step: str,
                    relation: str, rho: float | None = None, epsilon: float | None = None,
                    delta: float | None = None, note: str = "") -> tuple[np.ndarray, float]:
    """counts + discrete Gaussian noise; returns (noisy counts, σ). Give ``rho`` (zCDP, σ = Δ₂/√(2ρ))
    or ``epsilon`` and ``delta`` (analytic Gaussian calibration)."""
    counts = np.asarray(counts)
    if not np.issubdtype(counts.dtype, np.integer):
        raise TypeError("gaussian_counts needs integer counts; use gaussian_values for real values")
    sigma, sensitivity = _charge_gaussian("discrete Gaussian", counts, sensitivity, ledger, step, relation, rho,
                                          epsilon, delta, note)
    return counts.astype(np.int64) + source.discrete_gaussian(sigma, counts.shape), sigma


# --------------------------------------------------------------------- real values (float noise)
def laplace_values(values, *, epsilon: float, sensitivity: float, ledger: PrivacyLedger, source: NoiseSource,
                   step: str, relation: str, note: str = ""):
    """values + Laplace(Δ₁/ε) float noise (numpy array or torch tensor)."""
    sensitivity = _check_sensitivity(sensitivity)
    ledger.spend(step, "Laplace (float)", epsilon=epsilon, sensitivity=sensitivity, relation=relation,
                 norm="L1", note=note)
    _observe(step, "Laplace (float)", values, sensitivity, "L1")
    scale = sensitivity / epsilon
    if hasattr(values, "detach"):
        import torch

        u = torch.rand(values.shape, generator=source.torch_generator(), dtype=values.dtype) - 0.5
        return values - scale * torch.sign(u) * torch.log1p(-2 * u.abs())
    values = np.asarray(values, dtype=float)
    return values + source.laplace(scale, values.shape)


def gaussian_values(values, *, sensitivity: float, ledger: PrivacyLedger, source: NoiseSource, step: str,
                    relation: str, rho: float | None = None, epsilon: float | None = None,
                    delta: float | None = None, note: str = ""):
    """values + N(0, σ²) float noise; returns (noisy, σ). ``rho`` or (``epsilon``, ``delta``)."""
    sigma, sensitivity = _charge_gaussian("Gaussian (float)", values, sensitivity, ledger, step, relation, rho,
                                          epsilon, delta, note)
    if hasattr(values, "detach"):
        import torch

        return values + sigma * torch.randn(values.shape, generator=source.torch_generator(),
                                            dtype=values.dtype), sigma
    values = np.asarray(values, dtype=float)
    return values + source.gaussian(sigma, values.shape), sigma


# --------------------------------------------------------------------- selection
def exponential_mechanism(scores, *, epsilon: float | None = None, sensitivity: float, ledger: PrivacyLedger,
                          source: NoiseSource, step: str, relation: str, rho: float | None = None,
                          note: str = "", attributes=None) -> int:
    """Index chosen with probability ∝ exp(ε·q/(2Δ)); ε-DP when each score has sensitivity Δ
    (L∞ over candidates). With ``rho`` instead of ε, the bounded-range analysis gives ε = √(8ρ)
    (Cesar & Rogers 2021), and the spend is recorded as ρ-zCDP."""
    q = np.asarray(scores, dtype=float)
    if q.ndim != 1 or q.size == 0:
        raise ValueError("scores must be a non-empty 1-d array")
    if not np.all(np.isfinite(q)):
        raise ValueError("scores must be finite")
    sensitivity = _check_sensitivity(sensitivity)
    if rho is not None:
        ledger.spend(step, "exponential mechanism", rho=rho, sensitivity=sensitivity, relation=relation,
                     norm="Linf", note=note, attributes=attributes)
        epsilon = float(np.sqrt(8.0 * rho))
    else:
        ledger.spend(step, "exponential mechanism", epsilon=epsilon, sensitivity=sensitivity, relation=relation,
                     norm="Linf", note=note, attributes=attributes)
    _observe(step, "exponential mechanism", q, sensitivity, "Linf")
    if q.size == 1:
        return 0
    if source.exact_os_entropy and rho is None:
        return _opendp_noisy_max(q, scale=2.0 * sensitivity / epsilon)
    return int(np.argmax(epsilon * q / (2.0 * sensitivity) + source.gumbel(q.size)))


def _opendp_noisy_max(q: np.ndarray, scale: float) -> int:
    """Report-noisy-max with exponential noise (OpenDP; ε = 2Δ/scale under max-divergence)."""
    import opendp.prelude as dp

    dp.enable_features("contrib")
    meas = dp.m.make_noisy_max(dp.vector_domain(dp.atom_domain(T=float, nan=False)), dp.linf_distance(T=float),
                               dp.max_divergence(), scale=float(scale))
    return int(meas([float(x) for x in q]))
