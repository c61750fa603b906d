"""Noise primitives. Every value computed from private rows reaches its noise through one of
these functions, which (1) charge the ledger *before* drawing noise, and (2) pass the exact value
and its declared sensitivity to any active :func:`record_noise_inputs` recorder, so that the
neighbour tests (run on D and D' with the same seed) can check |value(D) − value(D')| ≤ sensitivity.
Under :func:`replay_noise_outputs` each primitive still draws its noise but releases the output
recorded on D instead, so that D' follows D's transcript: adaptive steps (structure selection,
every DP-SGD step after the first) are then checked given the same past outputs, which is what
adaptive composition needs. A mechanism implemented outside this module reports its input and
output through the same public pair, :func:`observe_noise_input` and :func:`release_noise_output`.

- :func:`laplace_counts`: discrete Laplace on integer counts, ε = Δ₁/scale (Ghosh et al. 2009).
- :func:`gaussian_counts`: discrete Gaussian on integer counts, ρ = Δ₂²/(2σ²) (CKS 2020); an (ε, δ)
  budget is converted to ρ by the CKS conversion and charged in ρ (the continuous analytic
  calibration under-states the discrete Gaussian's δ).
- :func:`laplace_values`, :func:`gaussian_values`: float noise for real-valued statistics (numpy or
  torch); not floating-point safe, documented in PRIVACY.md.
- :func:`exponential_mechanism`: select an index with probability ∝ exp(ε q / (2Δ)) (McSherry &
  Talwar 2007). Without a seed, always by OpenDP's exact report-noisy-max (``make_noisy_max``):
  exponential noise (permute-and-flip, at least as accurate) for an ε spend, Gumbel noise (the
  exponential mechanism itself) for a ρ-zCDP spend. With a seed, a numpy Gumbel-max for
  reproducibility, which is float noise and not private (see :class:`NoiseSource`).

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

from .calibration import cdp_rho, gaussian_sigma, zcdp_gaussian_sigma
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


def observe_noise_input(step: str, mechanism: str, value, sensitivity: float, norm: str, logits=None):
    """Report the exact ``value`` about to be handed to noise, with its declared ``sensitivity`` in
    ``norm`` ("L1", "L2" or "Linf"), to every active :func:`record_noise_inputs` recorder; returns a
    token for :func:`release_noise_output`. Every mechanism of this module calls it; a mechanism
    defined elsewhere (the pMSE mechanism's MCMC, the smoothed histogram, a DP-SGD step) must call it
    after charging the ledger and before drawing its noise. Under :func:`replay_noise_outputs` with
    ``stop_at``/``stop_when`` it raises :class:`ReplayStopped` once the value is recorded."""
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


def release_noise_output(token, output):
    """Record the released ``output`` of the call behind ``token`` (from :func:`observe_noise_input`)
    and return what is to be released: ``output`` itself, or under :func:`replay_noise_outputs` the
    recorded output of that call (same type, shape and dtype as ``output``)."""
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
                   step: str, relation: str, note: str = "", attributes=None,
                   min_attributes: int | None = None, attributes_fixed: bool = False) -> np.ndarray:
    """counts + discrete Laplace(Δ₁/ε) noise; ε-DP when the L1 sensitivity of ``counts`` is Δ₁.
    ``attributes``, ``min_attributes``, ``attributes_fixed``: the rows read, for MCAR amplification
    (:meth:`PrivacyLedger.spend`)."""
    counts = np.asarray(counts)
    if not np.issubdtype(counts.dtype, np.integer):
        raise TypeError("laplace_counts needs integer counts; use laplace_values for real values")
    sensitivity = _check_sensitivity(sensitivity)
    ledger.spend(step, "discrete Laplace", epsilon=epsilon, sensitivity=sensitivity, relation=relation,
                 norm="L1", note=note, attributes=attributes, min_attributes=min_attributes,
                 attributes_fixed=attributes_fixed)
    token = observe_noise_input(step, "discrete Laplace", counts, sensitivity, "L1")
    return release_noise_output(token, counts.astype(np.int64) + source.discrete_laplace(sensitivity / epsilon, counts.shape))


def _charge_gaussian(mechanism, value, sensitivity, ledger, step, relation, rho, epsilon, delta, note,
                     discrete=False):
    """σ of a Gaussian mechanism given ρ (σ = Δ₂/√(2ρ)) or (ε, δ); charges the ledger and reports the
    value to the recorder. Returns (σ, checked sensitivity, token for :func:`release_noise_output`).

    (ε, δ) for float noise: the analytic Gaussian calibration (Balle & Wang 2018, Thm 8), exact for
    the continuous Gaussian. (ε, δ) for the *discrete* Gaussian (``discrete=True``): that formula is
    not valid there (at the same σ the discrete Gaussian's δ can be twice the claim), so the spend is
    made in zCDP: ρ = the largest ρ whose CKS conversion gives (ε, δ) (:func:`cdp_rho`), σ = Δ₂/√(2ρ);
    the discrete Gaussian with that σ is ρ-zCDP (Canonne, Kamath & Steinke 2020, Thm 14 and its
    multivariate form), and the ledger records ρ."""
    sensitivity = _check_sensitivity(sensitivity)
    if rho is None and discrete:
        rho = cdp_rho(epsilon, delta)
        note = f"{note}; " if note else ""
        note += f"(ε={epsilon:g}, δ={delta:g}) → ρ={rho:.6g} by CKS 2020 (discrete Gaussian is ρ-zCDP)"
    if rho is not None:
        sigma = zcdp_gaussian_sigma(rho, sensitivity)
        ledger.spend(step, mechanism, rho=rho, sensitivity=sensitivity, relation=relation, norm="L2", note=note)
    else:
        sigma = gaussian_sigma(epsilon, delta, sensitivity)
        ledger.spend(step, mechanism, epsilon=epsilon, delta=delta, sensitivity=sensitivity, relation=relation,
                     norm="L2", note=note)
    token = observe_noise_input(step, mechanism, value, sensitivity, "L2")
    return sigma, sensitivity, token


def gaussian_counts(counts, *, sensitivity: float, ledger: PrivacyLedger, source: NoiseSource, step: str,
                    relation: str, rho: float | None = None, epsilon: float | None = None,
                    delta: float | None = None, note: str = "") -> tuple[np.ndarray, float]:
    """counts + discrete Gaussian noise; returns (noisy counts, σ). Give ``rho`` (zCDP, σ = Δ₂/√(2ρ))
    or ``epsilon`` and ``delta``, which are converted to ρ = :func:`cdp_rho` (ε, δ) and charged as a
    zCDP spend (Canonne, Kamath & Steinke 2020: the discrete Gaussian is ρ-zCDP with ρ = Δ₂²/(2σ²);
    the analytic calibration of the continuous Gaussian does not hold for it)."""
    counts = np.asarray(counts)
    if not np.issubdtype(counts.dtype, np.integer):
        raise TypeError("gaussian_counts needs integer counts; use gaussian_values for real values")
    _check_gaussian_budget(rho, epsilon, delta)
    sigma, sensitivity, token = _charge_gaussian("discrete Gaussian", counts, sensitivity, ledger, step, relation,
                                                 rho, epsilon, delta, note, discrete=True)
    return release_noise_output(token, counts.astype(np.int64) + source.discrete_gaussian(sigma, counts.shape)), sigma


def _check_gaussian_budget(rho, epsilon, delta) -> None:
    if rho is not None:
        if epsilon is not None or delta is not None:
            raise ValueError("give either rho (zCDP) or epsilon and delta, not both")
    elif epsilon is None or delta is None:
        raise ValueError("give rho (zCDP) or both epsilon and delta (e.g. delta=1e-6) for a Gaussian mechanism")


# --------------------------------------------------------------------- real values (float noise)
def laplace_values(values, *, epsilon: float, sensitivity: float, ledger: PrivacyLedger, source: NoiseSource,
                   step: str, relation: str, note: str = ""):
    """values + Laplace(Δ₁/ε) float noise (numpy array or torch tensor)."""
    sensitivity = _check_sensitivity(sensitivity)
    ledger.spend(step, "Laplace (float)", epsilon=epsilon, sensitivity=sensitivity, relation=relation,
                 norm="L1", note=note)
    token = observe_noise_input(step, "Laplace (float)", values, sensitivity, "L1")
    scale = sensitivity / epsilon
    if hasattr(values, "detach"):
        import torch

        u = torch.rand(values.shape, generator=source.torch_generator(), dtype=values.dtype) - 0.5
        return release_noise_output(token, values - scale * torch.sign(u) * torch.log1p(-2 * u.abs()))
    values = np.asarray(values, dtype=float)
    return release_noise_output(token, values + source.laplace(scale, values.shape))


def gaussian_values(values, *, sensitivity: float, ledger: PrivacyLedger, source: NoiseSource, step: str,
                    relation: str, rho: float | None = None, epsilon: float | None = None,
                    delta: float | None = None, note: str = ""):
    """values + N(0, σ²) float noise; returns (noisy, σ). ``rho`` or (``epsilon``, ``delta``), the
    latter by the analytic Gaussian calibration (Balle & Wang 2018), exact for continuous noise."""
    _check_gaussian_budget(rho, epsilon, delta)
    sigma, sensitivity, token = _charge_gaussian("Gaussian (float)", values, sensitivity, ledger, step, relation,
                                                 rho, epsilon, delta, note)
    if hasattr(values, "detach"):
        import torch

        return release_noise_output(token, values + sigma * torch.randn(values.shape, generator=source.torch_generator(),
                                                            dtype=values.dtype)), sigma
    values = np.asarray(values, dtype=float)
    return release_noise_output(token, values + source.gaussian(sigma, values.shape)), sigma


# --------------------------------------------------------------------- selection
def exponential_mechanism(scores, *, epsilon: float | None = None, sensitivity: float, ledger: PrivacyLedger,
                          source: NoiseSource, step: str, relation: str, rho: float | None = None,
                          note: str = "", attributes=None, min_attributes: int | None = None,
                          attributes_fixed: bool = False) -> int:
    """Index chosen with probability ∝ exp(ε·q/(2Δ)); ε-DP when each score has sensitivity Δ
    (L∞ over candidates). With ``rho`` instead of ε, the bounded-range analysis gives ε = √(8ρ)
    (Cesar & Rogers 2021), and the spend is recorded as ρ-zCDP."""
    q = np.asarray(scores, dtype=float)
    if q.ndim != 1 or q.size == 0:
        raise ValueError("scores must be a non-empty 1-d array")
    if not np.all(np.isfinite(q)):
        raise ValueError("scores must be finite")
    if (epsilon is None) == (rho is None):
        raise ValueError("give exactly one of epsilon (pure DP) or rho (zCDP) to the exponential mechanism")
    sensitivity = _check_sensitivity(sensitivity)
    if rho is not None:
        ledger.spend(step, "exponential mechanism", rho=rho, sensitivity=sensitivity, relation=relation,
                     norm="Linf", note=note, attributes=attributes, min_attributes=min_attributes,
                     attributes_fixed=attributes_fixed)
        epsilon = float(np.sqrt(8.0 * rho))
    else:
        ledger.spend(step, "exponential mechanism", epsilon=epsilon, sensitivity=sensitivity, relation=relation,
                     norm="Linf", note=note, attributes=attributes, min_attributes=min_attributes,
                     attributes_fixed=attributes_fixed)
    logits = epsilon * q / (2.0 * sensitivity)
    token = observe_noise_input(step, "exponential mechanism", q, sensitivity, "Linf", logits=logits)
    if q.size == 1:
        return release_noise_output(token, 0)
    if source.exact_os_entropy:
        pick = _opendp_noisy_max(q, scale=2.0 * sensitivity / epsilon, sensitivity=sensitivity, rho=rho,
                                 epsilon=None if rho is not None else epsilon)
    else:  # seeded run: reproducible numpy Gumbel-max (float, not private: see NoiseSource)
        pick = int(np.argmax(logits + source.gumbel(q.size)))
    return release_noise_output(token, pick)


def _opendp_noisy_max(q: np.ndarray, *, scale: float, sensitivity: float, rho: float | None,
                      epsilon: float | None) -> int:
    """OpenDP's report-noisy-max (``make_noisy_max``) on the scores, sampled exactly with OS entropy.

    ε-DP spends: exponential noise of scale 2Δ/ε (permute-and-flip; McKenna & Sheldon 2020), whose
    OpenDP privacy map under max-divergence is 2Δ/scale = ε. ρ-zCDP spends: Gumbel noise of the same
    scale, i.e. exactly the exponential mechanism ∝ exp(ε q/(2Δ)) with ε = √(8ρ), whose OpenDP map
    under zero-concentrated divergence is (2Δ/scale)²/8 = ρ (bounded range, Cesar & Rogers 2021).
    The map is checked against the charge before the sample is drawn."""
    import opendp.prelude as dp

    dp.enable_features("contrib")
    measure = dp.zero_concentrated_divergence() if rho is not None else dp.max_divergence()
    key = ("noisy max", rho is not None, float(scale))
    meas = _NOISY_MAX_CACHE.get(key)
    if meas is None:
        meas = dp.m.make_noisy_max(dp.vector_domain(dp.atom_domain(T=float, nan=False)), dp.linf_distance(T=float),
                                   measure, scale=float(scale))
        if len(_NOISY_MAX_CACHE) > 256:
            _NOISY_MAX_CACHE.clear()
        _NOISY_MAX_CACHE[key] = meas
    charged = rho if rho is not None else epsilon
    claimed = float(meas.map(float(sensitivity)))
    if claimed > charged * (1 + 1e-9):
        raise AssertionError(f"OpenDP's privacy map gives {claimed} for sensitivity {sensitivity}, above the "
                             f"{charged} charged")
    return int(meas([float(x) for x in q]))


_NOISY_MAX_CACHE: dict = {}
