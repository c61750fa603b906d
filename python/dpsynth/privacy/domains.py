"""Paid metadata: numeric bounds and category lists learned from the private rows under DP.

When the user has no public bounds for a numeric column, or no public category list for a text
column, :meth:`dpsynth.Schema.from_dataframe` can spend a declared ε (and δ for categories) to learn
them. Both mechanisms here are OpenDP's, and both charge a :class:`PrivacyLedger` and report the
exact value handed to the noise (:func:`observe_noise_input`) like every other mechanism:

* **bounds** — two private quantiles per column (the ``lower_q`` and ``upper_q`` quantiles, 1% and
  99% by default) over a public, data-independent candidate grid (:func:`default_candidates`, or
  the caller's). The scores are OpenDP's ``make_quantile_score_candidates`` (Smith 2011; L∞
  sensitivity from its privacy map) and the selection is the ledger's exponential mechanism (OpenDP's
  ``make_noisy_max`` without a seed). Values outside the learned bounds are clipped by the generators,
  as for public bounds.
* **categories** — a stability (thresholded) histogram, OpenDP's ``make_laplace_threshold``
  (Rogers 2023): counts of the distinct values plus Laplace noise, and only values whose noisy count
  reaches the threshold are released. A value seen in D but not in a neighbour D' is released with
  probability at most δ, so unseen-in-neighbour categories cannot leak beyond δ. (ε, δ)-DP.

Neighbouring relation: every mechanism is calibrated to a symmetric distance of 2 (one row replaced),
so its ε holds under replace-one and, a fortiori, under add-remove (distance 1). Each spend keeps the
sensitivity for both relations (``sensitivity``) so that the release's ledger can record it under the
generator's relation (:func:`charge_spends`). The budget is split evenly over the mechanisms.

Example
-------
>>> import pandas as pd
>>> from dpsynth.privacy import PrivacyLedger, NoiseSource
>>> led = PrivacyLedger(1.0)
>>> lo, hi = private_bounds(pd.Series(range(100), dtype=float), epsilon=1.0, ledger=led,
...                         source=NoiseSource(1), step="bounds of x")
>>> lo < hi, led.total_epsilon()
(True, 1.0)
"""
from __future__ import annotations

import math

import numpy as np
import pandas as pd

from .ledger import PrivacyLedger
from .mechanisms import exponential_mechanism, observe_noise_input, release_noise_output
from .rng import NoiseSource
from .validation import check_delta, check_epsilon

RELATION = "replace-one"  # calibrated to symmetric distance 2: also holds under add-remove
_D_IN = {"add-remove": 1, "replace-one": 2}
_MANTISSAS = (1.0, 1.2, 1.5, 2.0, 2.5, 3.0, 4.0, 5.0, 6.0, 8.0)


def default_candidates(low_exp: int = -2, high_exp: int = 6) -> np.ndarray:
    """The public candidate grid for private bounds: 0 and ±{1, 1.2, 1.5, 2, 2.5, 3, 4, 5, 6, 8}×10^k
    for k = ``low_exp``..``high_exp`` (0.01 to 8,000,000). Fixed before any data are seen; pass your
    own (``candidates=``) when the column lives on another scale or a finer grid is public."""
    pos = np.array([m * 10.0 ** k for k in range(low_exp, high_exp + 1) for m in _MANTISSAS])
    return np.unique(np.concatenate([-pos, [0.0], pos]))


def _quantile_transform(candidates, alpha):
    import opendp.prelude as dp

    dp.enable_features("contrib")
    dom = dp.vector_domain(dp.atom_domain(T=float, nan=False))
    return dp.t.make_quantile_score_candidates(dom, dp.symmetric_distance(), [float(c) for c in candidates],
                                               float(alpha))


def quantile_scores(values, candidates, alpha: float) -> tuple[np.ndarray, dict]:
    """OpenDP's quantile scores of ``candidates`` (lower = closer to the ``alpha`` quantile) on the
    observed values, and their L∞ sensitivity per relation (from OpenDP's privacy map)."""
    t = _quantile_transform(candidates, alpha)
    v = pd.to_numeric(pd.Series(values), errors="coerce").dropna().to_numpy(dtype=float)
    scores = np.asarray(t([float(x) for x in v]), dtype=float)
    return scores, {rel: float(t.map(d)) for rel, d in _D_IN.items()}


def private_quantile(values, candidates, alpha: float, *, epsilon: float, ledger: PrivacyLedger,
                     source: NoiseSource, step: str) -> float:
    """One candidate near the ``alpha`` quantile of ``values`` (NaN ignored), ε-DP (replace-one)."""
    scores, sens = quantile_scores(values, candidates, alpha)
    note = (f"OpenDP quantile score (alpha={alpha:g}) over {len(candidates)} public candidates; "
            f"L-inf sensitivity {sens['add-remove']:g} add-remove / {sens['replace-one']:g} replace-one")
    pick = exponential_mechanism(-scores, epsilon=epsilon, sensitivity=sens[RELATION], ledger=ledger,
                                 source=source, step=step, relation=RELATION, note=note)
    return float(np.asarray(candidates, dtype=float)[pick])


def private_bounds(values, *, epsilon: float, ledger: PrivacyLedger, source: NoiseSource, step: str,
                   candidates=None, lower_q: float = 0.01, upper_q: float = 0.99) -> tuple[float, float]:
    """(lower, upper) from two private quantiles, ε/2 each. Post-processing makes lower < upper
    (the next candidate up when both picks coincide or cross)."""
    epsilon = check_epsilon(epsilon)
    cands = default_candidates() if candidates is None else np.unique(np.asarray(candidates, dtype=float))
    if cands.size < 2 or not np.all(np.isfinite(cands)):
        raise ValueError("candidates must hold at least 2 finite numbers (a public grid of possible bounds)")
    if not 0 <= lower_q < upper_q <= 1:
        raise ValueError(f"need 0 <= lower_q < upper_q <= 1; got {lower_q}, {upper_q}")
    lo = private_quantile(values, cands, lower_q, epsilon=epsilon / 2, ledger=ledger, source=source,
                          step=f"{step}: lower ({lower_q:g} quantile)")
    hi = private_quantile(values, cands, upper_q, epsilon=epsilon / 2, ledger=ledger, source=source,
                          step=f"{step}: upper ({upper_q:g} quantile)")
    if hi <= lo:  # post-processing of released values only
        above = cands[cands > lo]
        hi = float(above[0]) if above.size else lo + 1.0
    return lo, hi


def value_counts(values) -> dict:
    """The exact counts handed to the thresholded histogram: {str(value): count}, missing ignored."""
    s = pd.Series(values, dtype=object).dropna()
    counts = s.map(str).value_counts()
    return {str(k): int(v) for k, v in counts.items()}


def threshold_for(scale: float, delta: float, d_in=(2, 2, 1)) -> int:
    """Smallest integer threshold at which OpenDP's privacy map of ``make_laplace_threshold`` gives
    δ ≤ ``delta`` for the distance ``d_in`` (l0, l1, l∞)."""
    lo, hi = 1, max(2, int(math.ceil(2 + scale * math.log(1 / delta))) * 2)
    while _threshold_meas(scale, hi).map(d_in)[1] > delta:
        hi *= 2
    while lo < hi:
        mid = (lo + hi) // 2
        if _threshold_meas(scale, mid).map(d_in)[1] <= delta:
            hi = mid
        else:
            lo = mid + 1
    return lo


def _threshold_meas(scale: float, threshold: int):
    import opendp.prelude as dp

    dp.enable_features("contrib")
    dom = dp.map_domain(dp.atom_domain(T=str), dp.atom_domain(T=int))
    return dp.m.make_laplace_threshold(dom, dp.l01inf_distance(dp.absolute_distance(T=int)),
                                       scale=float(scale), threshold=int(threshold))


def private_categories(values, *, epsilon: float, delta: float, ledger: PrivacyLedger, source: NoiseSource,
                       step: str) -> list[str]:
    """The values whose noisy count passes the threshold, sorted; (ε, δ)-DP (replace-one: one row
    replaced changes two counts by 1, l0 = l1 = 2, l∞ = 1). Without a seed the release is OpenDP's
    ``make_laplace_threshold``; with one, the same discrete Laplace noise and threshold from the
    seeded source (reproducible, not private: see :class:`NoiseSource`)."""
    epsilon, delta = check_epsilon(epsilon), check_delta(delta, allow_zero=False)
    scale = 2.0 / epsilon  # l1 sensitivity 2 under replace-one
    threshold = threshold_for(scale, delta)
    meas = _threshold_meas(scale, threshold)
    eps_map, delta_map = meas.map((2, 2, 1))
    if eps_map > epsilon * (1 + 1e-9) or delta_map > delta * (1 + 1e-9):
        raise AssertionError(f"OpenDP's map gives ({eps_map}, {delta_map}), above the ({epsilon}, {delta}) charged")
    counts = value_counts(values)
    ledger.spend(step, "thresholded Laplace histogram (OpenDP make_laplace_threshold)", epsilon=epsilon,
                 delta=delta, sensitivity=2.0, relation=RELATION, norm="L1",
                 note=f"scale {scale:g}, threshold {threshold}; L1 sensitivity 1 add-remove / 2 replace-one")
    keys = sorted(counts)
    token = observe_noise_input(step, "thresholded Laplace histogram", np.array([counts[k] for k in keys], float),
                                2.0, "L1")
    if source.exact_os_entropy:
        released = meas(counts) if counts else {}
    else:
        noisy = np.array([counts[k] for k in keys], dtype=np.int64) + source.discrete_laplace(scale, len(keys))
        released = {k: int(v) for k, v in zip(keys, noisy) if v >= threshold}
    kept = sorted(str(k) for k in released)
    return release_noise_output(token, np.array(kept, dtype=object)).tolist() if kept else []


def sensitivity_for(spend_note: str, relation: str, recorded: float) -> float:
    """The sensitivity of a domain spend under ``relation`` (parsed from the note the spend carries)."""
    import re

    m = re.search(r"sensitivity ([0-9.eE+-]+) add-remove / ([0-9.eE+-]+) replace-one", spend_note or "")
    if not m:
        return recorded
    return float(m.group(1) if relation == "add-remove" else m.group(2))


def charge_spends(ledger: PrivacyLedger, spends, relation: str) -> None:
    """Record a schema's domain spends (``Schema.privacy['spends']``, dicts) in a release's ledger,
    under the release's neighbouring ``relation``: every spend is calibrated to replace-one, so its
    (ε, δ) also holds under add-remove; the sensitivity is the one for ``relation``."""
    for s in spends:
        ledger.spend(f"schema: {s['step']}", s["mechanism"], epsilon=s["epsilon"], delta=s.get("delta", 0.0),
                     sensitivity=sensitivity_for(s.get("note", ""), relation, s["sensitivity"]),
                     relation=relation, norm=s.get("norm", "L1"), note=s.get("note", ""))
