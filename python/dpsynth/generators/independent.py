"""Independent marginals: the baseline every paper beats.

Each column's 1-way histogram over the public domain, with one extra cell for missing values, is
released with discrete Laplace noise; synthetic columns are drawn independently. Neighbouring
relation: add/remove one row. A row adds 1 to exactly one cell of each of the d histograms, so each
histogram has L1 sensitivity 1 and gets ε/d (basic composition). The released n is the mean of the
d noisy totals (post-processing).

Example
-------
>>> import dpsynth
>>> df, schema = dpsynth.load_dataset("adult")
>>> gen = IndependentMarginals(epsilon=1.0).fit(df, schema, seed=1)
>>> gen.sample(n=100, seed=2).datasets[0].shape
(100, 15)
"""
from __future__ import annotations

import numpy as np

from ..privacy import laplace_counts
from .base import Generator
from .options import OPTION_CHECKS


class IndependentMarginals(Generator):
    method = "independent"
    relation = "add-remove"
    counts_only = True

    def __init__(self, epsilon: float, delta: float | None = None, keep_missing: bool = False):
        super().__init__(epsilon, delta)
        self._set_params(locals(), OPTION_CHECKS)

    def _fit(self, rows, data, source):
        sizes = self.schema_.domain_sizes
        eps_col = self.epsilon / len(sizes)
        self.probs_, totals = [], []
        histograms = rows.tables([[j] for j in range(len(sizes))], missing_cell=True)
        for j, (size, counts) in enumerate(zip(sizes, histograms)):
            noisy = laplace_counts(counts, epsilon=eps_col, sensitivity=1,
                                   ledger=self.ledger, source=source, step=f"1-way histogram {self.schema_.names[j]}",
                                   relation=self.relation)
            noisy = np.clip(noisy, 0, None).astype(float)
            totals.append(noisy.sum())
            if not self.keep_missing:
                noisy[-1] = 0.0
            if noisy.sum() <= 0:  # all noise: fall back to uniform over observed levels
                noisy[:size] = 1.0
            self.probs_.append(noisy / noisy.sum())
        self.n_ = float(np.mean(totals))
        self.measured_queries_ = [(name,) for name in self.schema_.names]  # public: the released tables

    def _sample_codes(self, n, rng, index):
        cols = []
        for p in self.probs_:
            draw = rng.choice(len(p), size=n, p=p)
            cols.append(np.where(draw == len(p) - 1, -1, draw))
        return np.column_stack(cols)
