"""Noise primitives. Every value computed from private rows reaches its noise through one of
these functions, which (1) charge the ledger *before* drawing noise, and (2) pass the exact value
and its declared sensitivity to any active :func:`record_noise_inputs` recorder, so that the
neighbour tests (run on D and D' with the same seed) can check |value(D) − value(D')| ≤ sensitivity.
Under :func:`replay_noise_outputs` each primitive still draws its noise but releases the output
recorded on D instead, so that D' follows D's transcript: adaptive steps (structure selection,
every DP-SGD step after the first) are then checked given the same past outputs, which is what
adaptive composition needs.

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
_REPLAYS: list = []


@dataclass
class NoiseCall:
    step: str
    mechanism: str
    value: np.ndarray
    sensitivity: float
    norm: str  # "L1", "L2" or "Linf" (exponential mechanism scores)
    output: object = None  # what was released (None until released, or for primitives that release later)
    logits: np.ndarray | None = None  # exponential mechanism: log-probabilities up to a constant, ε·q/(2Δ)


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


class ReplayStopped(Exception):
    """Raised inside a fit run under :func:`replay_noise_outputs` with ``stop_at`` when the noise
    call number ``stop_at`` has been recorded (its value is known; nothing after it runs)."""


class _Replay:
    def __init__(self, outputs, stop_at, stop_when):
        self.outputs = list(outputs)
        self.stop_at = stop_at
        self.stop_when = stop_when
        self.calls = 0


@contextlib.contextmanager
def replay_noise_outputs(outputs=(), stop_at: int | None = None, stop_when=None):
    """Within the block, noise call i (counted from 0) releases ``outputs[i]`` instead of its own
    noisy value when ``i < len(outputs)`` and ``outputs[i]`` is not None; the noise is still drawn, so
    the random streams stay in step. With ``stop_at``, call number ``stop_at`` is recorded and then
    :class:`ReplayStopped` is raised (and swallowed on leaving the block); ``stop_when(step, mechanism)``
    does the same for the first call for which it returns True.

    Used by the grey-box neighbour tests: ``with record_noise_inputs() as rec,
    replay_noise_outputs([c.output for c in base.calls]): gen.fit(d2, schema, seed=s)``."""
    rp = _Replay(outputs, stop_at, stop_when)
    _REPLAYS.append(rp)
    try:
        yield rp
    except ReplayStopped:
        pass
    finally:
        _REPLAYS.remove(rp)


def _observe(step, mechanism, value, sensitivity, norm, logits=None):
    """Report a value about to be handed to noise; returns a token for :func:`_release`."""
    call = None
    if _RECORDERS:
        v = value.detach().cpu().numpy() if hasattr(value, "detach") else np.asarray(value)
        call = NoiseCall(step, mechanism, np.array(v, dtype=float, copy=True), float(sensitivity), norm,
                         logits=None if logits is None else np.array(logits, dtype=float, copy=True))
        for r in _RECORDERS:
            r.calls.append(call)
    index = None
    if _REPLAYS:
        rp = _REPLAYS[-1]
        index = rp.calls
        rp.calls += 1
        if (rp.stop_at is not None and index >= rp.stop_at) or (rp.stop_when is not None
                                                                 and rp.stop_when(step, mechanism)):
            raise ReplayStopped(step)
    return call, index


def _release(token, output):
    """Record the released ``output`` of the call behind ``token``; under replay return the
    recorded output of that call instead (same type, shape and dtype as ``output``)."""
    call, index = token
    if index is not None:
        rp = _REPLAYS[-1]
        if index < len(rp.outputs) and rp.outputs[index] is not None:
            forced = rp.outputs[index]
            if hasattr(output, "detach"):
                import torch

                output = torch.as_tensor(np.asarray(forced), dtype=output.dtype).reshape(output.shape)
            elif isinstance(output, (int, np.integer)):
                output = int(forced)
            else:
                forced = np.asarray(forced)
                if forced.shape != np.shape(output):
                    raise AssertionError(f"replay diverged at {call.step if call else index}: shape "
                                         f"{np.shape(output)} vs recorded {forced.shape}")
                output = forced.astype(np.asarray(output).dtype)
    if call is not None:
        o = output.detach().cpu().numpy() if hasattr(output, "detach") else output
        call.output = o if isinstance(o, int) else np.array(o, copy=True)
    return output


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
    token = _observe(step, "discrete Laplace", counts, sensitivity, "L1")
    return _release(token, counts.astype(np.int64) + source.discrete_laplace(sensitivity / epsilon, counts.shape))


def _charge_gaussian(mechanism, value, sensitivity, ledger, step, relation, rho, epsilon, delta, note):
    """σ of a Gaussian mechanism given ρ (σ = Δ₂/√(2ρ)) or (ε, δ) (analytic calibration); charges the
    ledger and reports the value to the recorder. Returns (σ, checked sensitivity, token for
    :func:`_release`)."""
    sensitivity = _check_sensitivity(sensitivity)
    if rho is not None:
        sigma = zcdp_gaussian_sigma(rho, sensitivity)
        ledger.spend(step, mechanism, rho=rho, sensitivity=sensitivity, relation=relation, norm="L2", note=note)
    else:
        sigma = gaussian_sigma(epsilon, delta, sensitivity)
        ledger.spend(step, mechanism, epsilon=epsilon, delta=delta, sensitivity=sensitivity, relation=relation,
                     norm="L2", note=note)
    token = _observe(step, mechanism, value, sensitivity, "L2")
    return sigma, sensitivity, token


def gaussian_counts(counts, *, sensitivity: float, ledger: PrivacyLedger, source: NoiseSource, step: str,
                    relation: str, rho: float | None = None, epsilon: float | None = None,
                    delta: float | None = None, note: str = "") -> tuple[np.ndarray, float]:
    """counts + discrete Gaussian noise; returns (noisy counts, σ). Give ``rho`` (zCDP, σ = Δ₂/√(2ρ))
    or ``epsilon`` and ``delta`` (analytic Gaussian calibration)."""
    counts = np.asarray(counts)
    if not np.issubdtype(counts.dtype, np.integer):
        raise TypeError("gaussian_counts needs integer counts; use gaussian_values for real values")
    sigma, sensitivity, token = _charge_gaussian("discrete Gaussian", counts, sensitivity, ledger, step, relation,
                                                 rho, epsilon, delta, note)
    return _release(token, counts.astype(np.int64) + source.discrete_gaussian(sigma, counts.shape)), sigma


# --------------------------------------------------------------------- real values (float noise)
def laplace_values(values, *, epsilon: float, sensitivity: float, ledger: PrivacyLedger, source: NoiseSource,
                   step: str, relation: str, note: str = ""):
    """values + Laplace(Δ₁/ε) float noise (numpy array or torch tensor)."""
    sensitivity = _check_sensitivity(sensitivity)
    ledger.spend(step, "Laplace (float)", epsilon=epsilon, sensitivity=sensitivity, relation=relation,
                 norm="L1", note=note)
    token = _observe(step, "Laplace (float)", values, sensitivity, "L1")
    scale = sensitivity / epsilon
    if hasattr(values, "detach"):
        import torch

        u = torch.rand(values.shape, generator=source.torch_generator(), dtype=values.dtype) - 0.5
        return _release(token, values - scale * torch.sign(u) * torch.log1p(-2 * u.abs()))
    values = np.asarray(values, dtype=float)
    return _release(token, values + source.laplace(scale, values.shape))


def gaussian_values(values, *, sensitivity: float, ledger: PrivacyLedger, source: NoiseSource, step: str,
                    relation: str, rho: float | None = None, epsilon: float | None = None,
                    delta: float | None = None, note: str = ""):
    """values + N(0, σ²) float noise; returns (noisy, σ). ``rho`` or (``epsilon``, ``delta``)."""
    sigma, sensitivity, token = _charge_gaussian("Gaussian (float)", values, sensitivity, ledger, step, relation,
                                                 rho, epsilon, delta, note)
    if hasattr(values, "detach"):
        import torch

        return _release(token, values + sigma * torch.randn(values.shape, generator=source.torch_generator(),
                                                            dtype=values.dtype)), sigma
    values = np.asarray(values, dtype=float)
    return _release(token, values + source.gaussian(sigma, values.shape)), sigma


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
    logits = epsilon * q / (2.0 * sensitivity)
    token = _observe(step, "exponential mechanism", q, sensitivity, "Linf", logits=logits)
    if q.size == 1:
        return _release(token, 0)
    if source.exact_os_entropy and rho is None:
        return _release(token, _opendp_noisy_max(q, scale=2.0 * sensitivity / epsilon))
    return _release(token, int(np.argmax(logits + source.gumbel(q.size))))


def _opendp_noisy_max(q: np.ndarray, scale: float) -> int:
    """Report-noisy-max with exponential noise (OpenDP; ε = 2Δ/scale under max-divergence)."""
    import opendp.prelude as dp

    dp.enable_features("contrib")
    meas = dp.m.make_noisy_max(dp.vector_domain(dp.atom_domain(T=float, nan=False)), dp.linf_distance(T=float),
                               dp.max_divergence(), scale=float(scale))
    return int(meas([float(x) for x in q]))
