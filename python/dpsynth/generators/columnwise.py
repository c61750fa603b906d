"""Column-wise generation: Kamino and KaminoI (Ge et al. PVLDB 2021; Mohapatra et al. PVLDB 2024, Alg. 3).

Attributes are visited in a sequence S₁, …, S_d. The first attribute is drawn from a noisy histogram;
each next attribute S_j gets a small classifier P(S_j | S₁..S_{j−1}) trained with DP-SGD, and the
synthetic table is generated column by column from these models (ancestral sampling).
``impute=True`` (KaminoI, Alg. 3 line 9) fills the missing cells of S_j in the private data with
draws from that same model before the next model is trained, so incomplete rows keep contributing;
``impute=False`` (Kamino's complete-row baseline) trains everything on the complete rows only.
Denial constraints (Kamino's Ψ and its constraint-aware sampling) are not implemented.

Models: a one-hidden-layer MLP (softmax regression when ``hidden=0``) on the previous attributes,
encoded from public metadata (categoricals one-hot over the schema's categories, numerics clipped to
the public bounds and scaled to [0, 1]). Every target is categorical: a categorical column's levels,
or a numeric column's schema bins (a synthetic value is drawn uniformly inside its bin).

Privacy (add/remove one row; the privacy unit is a row). With budget (ε, δ):

1. Order (only when ``order=None``): the vector of per-column missing counts gets discrete Laplace
   noise. A row adds at most 1 to each of the d counts, so the L1 sensitivity is d; ε_order =
   ``order_share``·ε. The order is decreasing noisy missing rate (post-processing). A given ``order``
   (or ``"schema"``) costs nothing.
2. Training rows P: all rows (``impute=True``) or the complete rows (``impute=False``). Membership in
   P depends on the row alone, so neighbouring D, D' give P's that differ by at most one row.
3. First attribute: its histogram over P with one extra cell for "missing" (each row of P in exactly
   one cell, L1 sensitivity 1), discrete Laplace at ε₁ = ``first_share``·ε. The noisy total is the
   released ñ = |P| + noise; q = min(1, B/ñ) and T_col = ⌈epochs/q⌉ are post-processing of it.
4. Column models: d − 1 DP-SGD runs with the same (σ, q), T_col steps each, Poisson sampling from P,
   per-row gradients clipped to C, Gaussian noise σC per step (:mod:`dpsynth.generators.dpsgd`).
   They are composed adaptively in RDP as one history (σ, q, (d−1)·T_col) and the remaining budget
   ε − ε_order − ε₁ (with all of δ) calibrates σ; the ledger gets one spend for all column models,
   with the accountant's ε for exactly the steps and rate the loop runs.
   *Imputation is not free post-processing and does not need to be:* the imputed cells of row i are
   drawn from the released models with randomness independent of every other row, so conditionally
   on everything released so far the imputed training set of model j is a function applied row by
   row to P. Neighbouring P, P' therefore give imputed sets that differ in one row only, each later
   model is DP-SGD on that imputed set (per-row loss, clipped), and adaptive composition covers the
   chain. The imputed values themselves are never released. The first attribute's missing cells
   are imputed from its *noisy* histogram (upstream KaminoI used the exact observed marginal, which
   is not private).
Total: ε_order + ε₁ + ε_SGM ≤ ε (basic composition) and δ_SGM ≤ δ. The released row count
``n_`` is ñ.

Example
-------
>>> import dpsynth
>>> df, schema = dpsynth.load_dataset("adult")
>>> small = df.iloc[:2000][["age", "workclass", "sex", "income"]]
>>> gen = ColumnwiseSynth(1.0, 1e-6, impute=True, epochs=1).fit(small, schema.subset(small.columns), seed=1)
>>> gen.sample(n=50, seed=2).datasets[0].shape
(50, 4)
>>> gen.ledger.total_epsilon() <= 1.0
True
"""
from __future__ import annotations

import math
from functools import partial

import numpy as np

from ..marginals import count_with_missing, observed_mask
from ..privacy import laplace_counts
from ..schema import MISSING
from .base import Generator
from ..validation import check_bool, check_int
from .dpsgd import (DPSGD, MixedEncoder, SGMPlan, TorchFit, draw_rows, numeric_values, poisson_indices, step_rng,
                    values_in_bins)
from .options import checks

FIT_STEP = "column models (DP-SGD)"


def _check_order_type(order, name: str):
    """None (by decreasing DP missing rate), "schema", or a list (or tuple) of column names."""
    if order is not None and not (order == "schema" or isinstance(order, (list, tuple))):
        raise TypeError(f"{name} must be None (decreasing DP missing rate), 'schema', or a list of column names")
    return order


_CHECKS = checks(impute=partial(check_bool, meaning=" (True: KaminoI; False: Kamino, complete rows)"),
                 order=_check_order_type, hidden=partial(check_int, minimum=0))  # hidden 0: softmax regression


class ColumnwiseSynth(TorchFit, Generator):
    """Kamino-style column-wise synthesiser; ``impute=True`` is KaminoI (see module docstring).

    Parameters: ``epsilon``, ``delta`` (required); ``impute``; ``order`` (None: by decreasing DP
    missing rate, ``"schema"``: schema order, or a list of all column names); ``epochs`` (expected
    passes over the training rows per column model), ``batch_size`` (expected Poisson batch),
    ``hidden`` (MLP width, 0 = softmax regression), ``clip`` (C), ``lr`` (Adam);
    ``first_share``/``order_share`` (fractions of ε for the first histogram and the order);
    ``num_threads`` (torch threads during fit).
    """


    def __init__(self, epsilon: float, delta: float | None = None, impute: bool = True, order=None,
                 epochs: float = 10.0, batch_size: int = 1024, hidden: int = 64, clip: float = 1.0,
                 lr: float = 3e-3, first_share: float = 0.1, order_share: float = 0.05, num_threads: int = 1):
        super().__init__(epsilon, delta)
        self._set_params(locals(), _CHECKS)
        if first_share + (order_share if order is None else 0.0) >= 0.9:
            raise ValueError("first_share + order_share must leave at least 10% of epsilon for the column models")

    @property
    def method(self) -> str:
        return "kamino-i" if self.impute else "kamino"

    # ------------------------------------------------------------------ fitting
    def _fit_torch(self, codes, data, source):
        import torch

        schema = self.schema_
        names, sizes = schema.names, schema.domain_sizes
        d = len(names)
        enc = MixedEncoder(schema)
        seed = int(source.numpy.integers(0, 2**62))
        noise_gen = source.torch_generator()

        # 1. the attribute sequence
        eps_order = 0.0
        if isinstance(self.order, (list, tuple)):
            order = self._check_order(self.order, names)
        elif self.order == "schema" or d == 1:
            order = list(range(d))
        else:  # decreasing DP missing rate
            eps_order = self.order_share * self.epsilon
            missing = (codes == MISSING).sum(axis=0).astype(np.int64)
            noisy = laplace_counts(missing, epsilon=eps_order, sensitivity=d, ledger=self.ledger, source=source,
                                   step="missing counts (attribute order)", relation=self.relation,
                                   note="one row is missing in at most d columns")
            order = [int(j) for j in np.argsort(-noisy, kind="stable")]
        self.order_ = [names[j] for j in order]

        # 2.-3. training rows and the first attribute
        rows = np.ones(len(codes), dtype=bool) if self.impute else observed_mask(codes, range(d))
        train = codes[rows].copy()
        eps_first = self.first_share * self.epsilon if d > 1 else self.epsilon  # one column: all of ε
        first = order[0]
        hist = laplace_counts(count_with_missing(train, first, sizes[first]), epsilon=eps_first, sensitivity=1,
                              ledger=self.ledger, source=source, step=f"histogram {names[first]}",
                              relation=self.relation,
                              note="over all rows" if self.impute else "over complete rows")
        self.n_ = float(max(1.0, hist.sum()))  # released row count of the training rows
        p_first = np.clip(hist[:-1], 0, None).astype(float)
        if p_first.sum() <= 0:
            p_first[:] = 1.0
        self.first_probs_ = p_first / p_first.sum()

        values = {j: numeric_values(data[names[j]])[rows] for j in range(d) if not enc.blocks[j].categorical}
        if self.impute:  # imputation draws: one stream per purpose, one draw per row (used where missing), so a
            # row's draws do not depend on which other rows are missing (the neighbour tests couple D and D' so)
            miss = train[:, first] == MISSING
            drawn = step_rng(seed, 0, 1).choice(len(self.first_probs_), size=len(train), p=self.first_probs_)
            train[miss, first] = drawn[miss]
            if first in values:
                values[first][miss] = values_in_bins(schema[names[first]], train[:, first], step_rng(seed, 0, 2))[miss]

        # 4. the column models under one RDP-composed plan
        self.models_ = []
        self.plan_ = None
        if d > 1:
            q = min(1.0, self.batch_size / self.n_)
            steps_col = int(math.ceil(self.epochs / q))
            eps_models = self.epsilon - eps_order - eps_first
            plan = SGMPlan.calibrate(eps_models, self.delta, q, (d - 1) * steps_col, self.clip)
            plan.charge(self.ledger, FIT_STEP,
                        note=f"{d - 1} column models × {steps_col} steps, one RDP composition "
                             f"({'KaminoI: imputed rows' if self.impute else 'complete rows'})")
            self.plan_ = plan
            blocks = [enc.block_values(first, train[:, first], values.get(first))]
            for pos in range(1, d):
                j = order[pos]
                X = torch.from_numpy(np.concatenate(blocks, axis=1))
                y = torch.from_numpy(train[:, j])
                model = self._make_model(X.shape[1], sizes[j])
                self._train(model, X, y, plan, noise_gen, seed, pos, steps_col, f"{FIT_STEP}: {names[j]}")
                self.models_.append(model)
                if self.impute:
                    miss = np.flatnonzero(train[:, j] == MISSING)
                    if miss.size:
                        train[miss, j] = draw_rows(self._predict(model, X), step_rng(seed, pos, 1))[miss]
                        if j in values:
                            values[j][miss] = values_in_bins(schema[names[j]], train[:, j],
                                                             step_rng(seed, pos, 2))[miss]
                blocks.append(enc.block_values(j, train[:, j], values.get(j)))
            plan.finish()
        self.encoder_ = enc
        del train, values

    @staticmethod
    def _check_order(order, names):
        if sorted(map(str, order)) != sorted(names):
            raise ValueError(f"order must list every column exactly once; columns are {names}")
        return [names.index(str(c)) for c in order]

    def _make_model(self, n_in: int, n_out: int):
        from torch import nn

        if self.hidden == 0:
            return nn.Sequential(nn.Linear(n_in, n_out))
        return nn.Sequential(nn.Linear(n_in, self.hidden), nn.ReLU(), nn.Linear(self.hidden, n_out))

    def _train(self, model, X, y, plan, noise_gen, seed, pos, steps, step_name):
        """T_col DP-SGD steps of cross-entropy on Poisson batches of the training rows. A row whose
        target is missing (KaminoI, before imputation of this column) has zero loss."""
        import torch

        def row_losses(logits, target):  # target one-hot, all zeros when the cell is missing
            return -(target * torch.log_softmax(logits, dim=1)).sum(dim=1)

        opt = DPSGD({"m": model}, plan, noise_gen, expected_batch_size=plan.sample_rate * self.n_, step=step_name,
                    row_losses=row_losses, lr=self.lr)
        n, k = X.shape[0], model[-1].out_features
        for t in range(steps):
            idx = torch.from_numpy(poisson_indices(step_rng(seed, pos, 0, t), n, plan.sample_rate))
            yb = y[idx]
            target = torch.zeros(len(idx), k, dtype=X.dtype)
            obs = yb >= 0
            target[obs, yb[obs]] = 1.0
            opt.step(X[idx], target)

    @staticmethod
    def _predict(model, X):
        import torch

        with torch.no_grad():
            return torch.softmax(model(X), dim=1).numpy().astype(float)

    # ------------------------------------------------------------------ sampling
    def _sample_frame(self, n, rng, index):
        import torch

        schema, enc = self.schema_, self.encoder_
        names = schema.names
        order = [names.index(c) for c in self.order_]
        codes = np.full((n, len(names)), MISSING, dtype=np.int64)
        values = {}
        blocks = []
        for pos, j in enumerate(order):
            if pos == 0:
                codes[:, j] = rng.choice(len(self.first_probs_), size=n, p=self.first_probs_)
            else:
                X = torch.from_numpy(np.concatenate(blocks, axis=1))
                codes[:, j] = draw_rows(self._predict(self.models_[pos - 1], X), rng)
            if not enc.blocks[j].categorical:
                values[names[j]] = values_in_bins(schema[names[j]], codes[:, j], rng)
            blocks.append(enc.block_values(j, codes[:, j], values.get(names[j])))
        for name, col in schema.columns.items():
            if name in values and col.integer:
                values[name] = np.floor(values[name])
        return schema.decode(codes, rng, numeric_values=values)


__all__ = ["ColumnwiseSynth"]
