"""The paper's simulation setting and published figures (Snoke & Slavković, PSD 2018, §5–7), shared by
the examples, the tests and ``bench/pmse_tables.py``.

Data: X1 ~ N(2, 10), X2 | x1 ~ N(−2.5 + 0.5·x1, 3), with 10 and 3 read as variances (``scale="var"``,
default) or as standard deviations (``scale="sd"``); the paper uses n = 5000.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from ...schema import Schema

# Table 2 (§7), per ε: (non-DP, pMSE mechanism, DP Bayes, smoothed histogram) mean pMSE, then variance
PAPER_TABLE2 = {
    0.25: ((0.00660, 0.09281, 0.20509, 0.08206), (8.681e-07, 1.347e-03, 3.079e-03, 2.826e-05)),
    0.5: ((0.00663, 0.03610, 0.17876, 0.05398), (8.929e-07, 8.020e-05, 5.914e-03, 1.809e-05)),
    1.0: ((0.00661, 0.02107, 0.14372, 0.03278), (8.342e-07, 1.648e-05, 8.579e-03, 1.069e-05)),
    2.0: ((0.00660, 0.01459, 0.11177, 0.01892), (8.342e-07, 1.648e-05, 8.579e-03, 1.069e-05)),
    4.0: ((0.00660, 0.01161, 0.07919, 0.01129), (8.671e-07, 3.329e-06, 9.087e-03, 5.964e-06)),
}
# Table 1 (§5): % of simulations where greedy CART breaks Δu ≤ 1/n, per (maxdepth, cp)
PAPER_TABLE1 = {(1, 0.01): 0.0, (2, 0.01): 0.3, (5, 0.01): 0.6, (30, 0.01): 0.7,
                (1, 0.001): 0.0, (2, 0.001): 0.5, (5, 0.001): 2.0, (30, 0.001): 2.5}
UNBOUNDED = Schema.from_dict({"x1": {"type": "numeric"}, "x2": {"type": "numeric"}})  # the mechanism needs no bounds


def paper_data(n: int, rng: np.random.Generator, scale: str = "var") -> pd.DataFrame:
    """n rows of the paper's (x1, x2); ``scale="var"``: 10 and 3 are variances, ``"sd"``: sds."""
    s1, s2 = (np.sqrt(10), np.sqrt(3)) if scale == "var" else (10.0, 3.0)
    x1 = rng.normal(2, s1, n)
    return pd.DataFrame({"x1": x1, "x2": rng.normal(-2.5 + 0.5 * x1, s2)})


def true_moments(scale: str = "var"):
    """((mean, sd) of x1, (mean, sd) of x2) of the paper's model."""
    v1, v2 = (10.0, 3.0) if scale == "var" else (100.0, 9.0)
    return (2.0, np.sqrt(v1)), (-1.5, np.sqrt(0.25 * v1 + v2))


def bounded_schema(k: float, scale: str = "var") -> Schema:
    """Bounds at the true mean ± k true sd of each column (the paper's "k times the standard deviation"),
    for the comparators that need public bounds."""
    (m1, s1), (m2, s2) = true_moments(scale)
    return Schema.from_dict({"x1": {"type": "numeric", "lower": m1 - k * s1, "upper": m1 + k * s1},
                             "x2": {"type": "numeric", "lower": m2 - k * s2, "upper": m2 + k * s2}})


__all__ = ["PAPER_TABLE1", "PAPER_TABLE2", "UNBOUNDED", "bounded_schema", "paper_data", "true_moments"]
