"""Domains learned under differential privacy for ``Schema.from_dataframe(epsilon=...)``: OpenDP's private
quantiles for missing bounds, its thresholded histogram for missing categories (:mod:`dpsynth.privacy.domains`)."""
from __future__ import annotations

import math
import warnings


def learn_domains(df, cols, need_bounds, need_levels, epsilon, delta, seed, candidates, quantiles) -> dict:
    """Learn the missing bounds/categories under DP; fills ``cols`` in place; returns the privacy record."""
    from ..privacy import NoiseSource, PrivacyLedger, check_epsilon
    from ..privacy.domains import RELATION, private_bounds, private_categories

    epsilon = check_epsilon(epsilon)
    if need_levels and delta is None:
        raise ValueError(f"learning the categories of {need_levels} needs delta= too (the thresholded "
                         "histogram is (epsilon, delta)-DP), e.g. delta=1e-6; or declare them with levels=")
    if not need_levels and delta:
        warnings.warn("delta is only spent on learning categories; none is needed here", UserWarning, stacklevel=3)
        delta = None
    k = len(need_bounds) + len(need_levels)
    share = epsilon / k
    led = PrivacyLedger(epsilon, delta or 0.0)
    source = NoiseSource(seed)
    lo_q, hi_q = quantiles
    for name in need_bounds:
        lo, hi = private_bounds(df[name], epsilon=share, ledger=led, source=source, step=f"bounds of {name!r}",
                                candidates=candidates, lower_q=lo_q, upper_q=hi_q)
        spec = cols[name][1]
        if spec.get("integer"):
            lo, hi = math.floor(lo), math.ceil(hi)
            hi = hi if hi > lo else lo + 1
        spec.update(lower=lo, upper=hi, source=f"learned under DP (OpenDP private quantiles {lo_q:g}/{hi_q:g}, "
                                                f"epsilon={share:.6g}); values outside are clipped")
    for name in need_levels:
        cats = private_categories(df[name], epsilon=share, delta=delta / len(need_levels), ledger=led,
                                  source=source, step=f"categories of {name!r}")
        if not cats:
            raise ValueError(f"no value of column {name!r} was frequent enough to be released at epsilon={share:.3g}: "
                             f"declare its categories with levels={{{name!r}: [...]}} or give more epsilon")
        cols[name][1].update(categories=cats, source=f"learned under DP (OpenDP thresholded histogram, "
                                                     f"epsilon={share:.6g}, delta={delta / len(need_levels):.3g})")
    spends = [{"step": s.step, "mechanism": s.mechanism, "epsilon": s.epsilon, "delta": s.delta,
               "sensitivity": s.sensitivity, "norm": s.norm, "relation": s.relation, "note": s.note}
              for s in led.spends]
    return {"epsilon": led.total_epsilon(), "delta": led.total_delta(), "relation": RELATION, "spends": spends}
