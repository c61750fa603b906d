"""The pMSE mechanism's quality function û(X, θ): the pMSE of a classification tree on the stacked
real and synthetic rows (Snoke & Slavković, PSD 2018, eq. 3 and Algorithm 1), and its sensitivity.

pMSE = (1/N) Σ_i (p̂_i − c)², N = 2n, c = ½, with p̂ the in-sample propensity of the tree; the
generator averages it over ``n_synth`` synthetic sets made from common random numbers, so û is a
fixed function of θ.

The tree: ``tree="stump"`` (default, provable) or ``tree="paper"`` (heuristic)
------------------------------------------------------------------------------
``"stump"``: the best two-leaf partition of the stacked rows (one leaf against the rest) over a
family of partitions fixed by the synthetic rows alone (:class:`StumpPMSE`): per numeric column,
thresholds at 1023 synthetic quantiles (a one-split tree on that column) and intervals between them
of widths 1, 2, 4, … quantile steps; per categorical column, every subset of levels (the best is a
prefix of the levels ordered by synthetic share; Breiman et al. 1984, Thm 4.5). With
``features="pairs"`` (default) also: per pair of numeric columns, the quadrants {x ≤ a, y ≤ b} (four
orientations) on 31 synthetic quantiles of each (a leaf of a depth-2 tree); per categorical level and
numeric column, thresholds within the level; per pair of categorical columns, single cells. The
search over the family is exhaustive, so the quality is the *optimal* two-leaf pMSE over it, which
is what the sensitivity bound needs (a greedy search over a data-independent family is not). Why
more than one-split trees on the columns: such a split sees only one column's marginal, so the slope
of X2 on X1 would not be identified and the exponential mechanism would wander along the ridge of
equal marginals (``features="columns"`` keeps thresholds, intervals and subsets of single columns);
and a synthetic column much wider than the data puts mass on both sides of it, which only an
interval isolates.

``"paper"``: an rpart-like greedy CART (maxdepth 5, cp 0.01, minsplit 2, minbucket 1: Snoke's
"five-cut" control) from :class:`dpsynth.metrics.cart.RpartLikeTree`. Greedy trees break the
sensitivity bound (the paper's Table 1; up to ≈ 20/n seen), so this mode is **heuristic, not DP**:
the ledger records the paper's Δu = 1/n and is flagged as not private.

Privacy (replace-one, n public)
-------------------------------
Neighbouring relation: replace one row (the paper's; n is public and is the synthetic size).

*Claim.* With the stump family, Δu = sup_θ |û(X, θ) − û(X', θ)| < 1/N = 1/(2n).

*Proof.* Fix θ and the common random numbers, hence the synthetic rows. For any partition P of the
stacked rows into leaves l (n_l rows, s_l synthetic), with c = n_s/N,
N·pMSE_P = Σ_l n_l (s_l/n_l − c)² = Σ_l s_l²/n_l − n_s²/N (empty leaves count 0).
Replacing one real row (label 0) moves it from leaf a to leaf b and changes no s_l, so
N·ΔpMSE_P = [s_a²/(n_a − 1) − s_a²/n_a] + [s_b²/(n_b + 1) − s_b²/n_b]
          = s_a²/(n_a(n_a − 1)) − s_b²/(n_b(n_b + 1)).
Leaf a held the real row, so s_a ≤ n_a − 1 and the first term is in [0, (n_a − 1)/n_a) ⊂ [0, 1);
s_b ≤ n_b puts the second in [0, n_b/(n_b + 1)) ⊂ [0, 1). Two numbers in [0, 1) differ by less
than 1: |ΔpMSE_P| < 1/N. Each partition in the family is assigned by a rule that looks at a row's own
values and at the synthetic rows only (a threshold at a synthetic order statistic, a level subset, a
cell), so the family is the same for X and X', and |max_P f_P(X) − max_P f_P(X')| ≤
max_P |f_P(X) − f_P(X')| < 1/N; the mean over the synthetic sets keeps the bound. ∎

The paper's Theorem 2 gives Δu ≤ 1/n: its proof (Appendix, eqs. 16–17) reaches the same two terms
but bounds their difference by 2 (each ≤ n/(n − 1) ≤ 2), without using s_a ≤ n_a − 1 or that two
non-negative terms are subtracted; so 1/n is correct but twice as loose. The test suite checks the
bound on random and adversarial neighbours (worst seen 0.94/(2n)), so 1/(2n) is nearly attained. We use
Δu = 1/(2n) by default; ``delta_u="paper"`` uses 1/n (the paper's density, n·ε_r·û/2). The proof
needs the *optimal* tree over a data-independent family; a greedy CART is not that (hence "paper" is
heuristic). Each release is an exponential mechanism at ε_r and the ``n_releases`` releases compose
to ε (conditionally on the public random numbers, which are independent of the data).
"""
from __future__ import annotations

import functools

import numpy as np

from .model import SequentialModel


def _gain(o_a, s_a, n_o: int, n_s):
    """Σ_l s_l²/n_l for the two leaves {A, not A}. An empty leaf has s_l = 0, so max(n_l, 1)
    in the denominator gives it 0 without a branch."""
    a = o_a + s_a
    return s_a * s_a / np.maximum(a, 1.0) + (n_s - s_a) ** 2 / np.maximum((n_o + n_s) - a, 1.0)


@functools.lru_cache(maxsize=64)
def _quantile_ranks(n_s: int, G: int) -> np.ndarray:
    """Ranks (1..n_s) of ``G`` evenly spaced synthetic order statistics (all of them if G ≥ n_s)."""
    if G >= n_s:
        return np.arange(1, n_s + 1)
    return np.unique(np.clip(np.round(np.arange(1, G + 1) * n_s / (G + 1)).astype(int), 1, n_s))


def _grid_gain(syn_sorted: np.ndarray, real_sorted: np.ndarray, n_o: int, n_s: int, G: int) -> np.ndarray:
    """Best Σ s_l²/n_l over the two-leaf partitions of one feature, for each synthetic set.

    ``syn_sorted``: (B, n_s) sorted synthetic values; ``real_sorted``: (n_o,) sorted real values.
    Cut points: G synthetic order statistics q_1 < … < q_G at evenly spaced ranks (all of them if
    n_s ≤ G), and ±∞. The family: thresholds A = {h ≤ q_i} (synthetic rows by rank: the r_i or
    r_i − 1 smallest) and intervals A = {q_i < h ≤ q_(i+w)} for widths w = 1, 2, 4, … (dyadic).
    A real row goes to A by its own value; every cut is a synthetic order statistic, so the family
    is fixed by the synthetic rows. Intervals catch a synthetic distribution that is too wide (mass on
    both sides of the data), which no threshold sees; the fine grid keeps that signal smooth when the
    synthetic spread is hundreds of times the data's. Returns (B,)."""
    B = syn_sorted.shape[0]
    rt = _quantile_ranks(n_s, G)
    o = np.searchsorted(real_sorted, syn_sorted[:, rt - 1].ravel(), side="right").reshape(B, len(rt)).astype(float)
    s = rt.astype(float)
    best = np.maximum(_gain(o, s, n_o, n_s).max(axis=1), _gain(o, s - 1.0, n_o, n_s).max(axis=1))
    o_cum = np.concatenate([np.zeros((B, 1)), o, np.full((B, 1), float(n_o))], axis=1)
    s_cum = np.r_[0.0, s, float(n_s)]
    w = 1
    while w < len(s_cum) - 1:
        best = np.maximum(best, _gain(o_cum[:, w:] - o_cum[:, :-w], s_cum[w:] - s_cum[:-w], n_o, n_s).max(axis=1))
        w *= 2
    return best


def _within_level_gain(syn_vals, syn_in, real_sorted, n_o: int, n_s: int) -> np.ndarray:
    """Best gain over {level = l and h ≤ t} and {level = l and h > t} (one categorical level l).

    ``syn_vals`` (B, n_s) values, ``syn_in`` (B, n_s) bool: synthetic row is in level l;
    ``real_sorted``: sorted values of the real rows in level l."""
    B = syn_vals.shape[0]
    s_sorted = np.sort(np.where(syn_in, syn_vals, np.inf), axis=1)
    S = syn_in.sum(axis=1).astype(float)[:, None]
    O = float(len(real_sorted))
    right = np.searchsorted(real_sorted, s_sorted.ravel(), side="right").reshape(B, n_s).astype(float)
    left = np.searchsorted(real_sorted, s_sorted.ravel(), side="left").reshape(B, n_s).astype(float)
    k = np.arange(n_s, dtype=float)[None, :]
    best = np.zeros(B)
    for o_le, s_le, valid in ((right, k + 1, k + 1 <= S), (left, k + 0 * S, k <= S)):
        for o_a, s_a in ((o_le, s_le), (O - o_le, S - s_le)):
            g = np.where(valid, _gain(o_a, s_a, n_o, n_s), 0.0)
            best = np.maximum(best, g.max(axis=1))
    return best


def _subset_gain(o_counts: np.ndarray, s_counts: np.ndarray, n_o: int, n_s: int) -> np.ndarray:
    """Best gain over all level subsets: prefixes of the levels ordered by synthetic share.
    ``o_counts`` (K,) real counts, ``s_counts`` (B, K) synthetic counts."""
    tot = o_counts[None, :] + s_counts
    share = np.where(tot > 0, s_counts / np.maximum(tot, 1), 0.0)
    order = np.argsort(share, axis=1, kind="stable")
    o_cum = np.cumsum(np.broadcast_to(o_counts, s_counts.shape)[np.arange(len(s_counts))[:, None], order], axis=1)
    s_cum = np.cumsum(np.take_along_axis(s_counts, order, axis=1), axis=1)
    return _gain(o_cum.astype(float), s_cum.astype(float), n_o, n_s).max(axis=1)


def _rank_cells(ranks: np.ndarray, n: int) -> np.ndarray:
    """For the rows of a sorted column (positions 0..n−1) and grid cut ranks r_1 < … (1-based: the
    r smallest rows are ≤ the cut), the cell of each position: the number of cuts it is above."""
    mark = np.zeros(n + 1, dtype=np.int64)
    np.add.at(mark, np.minimum(ranks, n), 1)
    return np.cumsum(mark)[:n]


def _quadrant_gain(order_x, order_y, sorted_x, sorted_y, real_x, real_y, n_o: int, n_s: int, G: int) -> np.ndarray:
    """Best gain over quadrants {x ≤ a, y ≤ b} (and the three other orientations) against the rest,
    a and b on G synthetic quantiles of each column (a data-independent family, like the leaves of
    a depth-2 tree on x then y).

    ``order_*`` (B, n_s): argsort of each synthetic column; ``sorted_*`` (B, n_s) the sorted values;
    ``real_*``: (sorted values, rank of each real row) of the real column. Synthetic rows are cut by
    rank (the r smallest are ≤ the cut), real rows by value (≤ the synthetic order statistic).
    Returns (B,)."""
    B = order_x.shape[0]
    ranks = _quantile_ranks(n_s, G)
    g = len(ranks)
    size = (g + 1) ** 2
    cells = []
    for order, srt, (real_sorted, real_rank) in ((order_x, sorted_x, real_x), (order_y, sorted_y, real_y)):
        syn_cell = np.empty((B, n_s), dtype=np.int64)
        np.put_along_axis(syn_cell, order, np.broadcast_to(_rank_cells(ranks, n_s), (B, n_s)), axis=1)
        pos = np.searchsorted(real_sorted, srt[:, ranks - 1].ravel(), side="right").reshape(B, g)
        mark = np.zeros((B, n_o + 1), dtype=np.int64)
        np.add.at(mark, (np.repeat(np.arange(B), g), pos.ravel()), 1)
        real_cell = np.cumsum(mark, axis=1)[:, :n_o][:, real_rank]
        cells.append((real_cell, syn_cell))
    off = (np.arange(B) * size)[:, None]
    counts = []
    for k in (0, 1):
        idx = cells[0][k] * (g + 1) + cells[1][k] + off
        counts.append(np.bincount(idx.ravel(), minlength=B * size).reshape(B, g + 1, g + 1).cumsum(1).cumsum(2))
    quads = []
    for M, tot in ((counts[0], n_o), (counts[1], n_s)):
        q = M[:, :g, :g]
        row, col = M[:, :g, g:], M[:, g:, :g]
        quads.append((q, row - q, col - q, tot - row - col + q))
    best = np.zeros(B)
    for o_a, s_a in zip(*quads):
        best = np.maximum(best, _gain(o_a.astype(float), s_a.astype(float), n_o, n_s).reshape(B, -1).max(axis=1))
    return best


class StumpPMSE:
    """pMSE of the best two-leaf partition over a data-independent family (the "stump" quality).

    Built once from the real rows (numeric matrix ``real_num`` n × p_num, categorical codes
    ``real_cat`` n × p_cat); called with synthetic sets it returns the pMSE of each set. Family,
    per numeric column: thresholds at ``grid[0]`` synthetic quantiles and intervals of dyadic
    widths between them; per categorical column: all level subsets. With ``features="pairs"``
    also: per pair of numeric columns, quadrants on ``grid[1]`` quantiles of each; per categorical
    level and numeric column, thresholds within the level; per pair of categorical columns, single
    cells. Every cut point is a synthetic order statistic or a level, so the family is fixed by the
    synthetic rows; the first ``n_column_features`` features are the single-column ones.
    """

    def __init__(self, model: SequentialModel, real_num: np.ndarray, real_cat: np.ndarray, features: str = "pairs",
                 grid: tuple = (1023, 31)):
        self.features = features
        self.grid = tuple(int(g) for g in grid)
        self.n_o = int(real_num.shape[0] if real_num.size else real_cat.shape[0])
        self.num_sorted = [np.sort(real_num[:, j]) for j in range(real_num.shape[1])]
        self.real_rank = []  # rank of each real row in its column (ties broken by position)
        for j in range(real_num.shape[1]):
            rank = np.empty(self.n_o, dtype=np.int64)
            rank[np.argsort(real_num[:, j], kind="stable")] = np.arange(self.n_o)
            self.real_rank.append(rank)
        self.levels = [model.columns[j].levels for j in model.categorical]
        self.cat_counts = [np.bincount(real_cat[:, c], minlength=K) for c, K in enumerate(self.levels)]
        self.n_column_features = len(self.num_sorted) + len(self.levels)
        self.within = {}
        self.cells = {}
        if features == "pairs":
            for c, K in enumerate(self.levels):
                for lev in range(K):
                    rows = real_cat[:, c] == lev
                    for j in range(real_num.shape[1]):
                        self.within[c, lev, j] = np.sort(real_num[rows, j])
            for c in range(len(self.levels)):
                for d in range(c + 1, len(self.levels)):
                    code = real_cat[:, c] * self.levels[d] + real_cat[:, d]
                    self.cells[c, d] = np.bincount(code, minlength=self.levels[c] * self.levels[d])

    def feature_gains(self, num: np.ndarray, cat: np.ndarray, orders: dict | None = None) -> np.ndarray:
        """Best Σ s_l²/n_l per feature of the family for synthetic sets ``num`` (C × m × p_num × n_s),
        ``cat`` (C × m × p_cat × n_s): array (C, m, F). ``orders`` may give the argsort (m × n_s) of a
        numeric column that is known without sorting (the first column of the sequential model is
        c + σz, ordered as its normals z)."""
        C, m, n_s = num.shape[0], num.shape[1], num.shape[3]
        n_o = self.n_o
        B = C * m
        out = []
        flat = num.reshape(B, num.shape[2], n_s)
        orders = orders or {}
        order = [np.broadcast_to(orders[j][None], (C, m, n_s)).reshape(B, n_s) if j in orders
                 else np.argsort(flat[:, j], axis=1) for j in range(flat.shape[1])]
        srt = [np.take_along_axis(flat[:, j], order[j], axis=1) for j in range(flat.shape[1])]
        for j, real_sorted in enumerate(self.num_sorted):
            out.append(_grid_gain(srt[j], real_sorted, n_o, n_s, self.grid[0]))
        cflat = cat.reshape(B, cat.shape[2], n_s)
        for c, K in enumerate(self.levels):
            s_counts = _batched_bincount(cflat[:, c], K)
            out.append(_subset_gain(self.cat_counts[c], s_counts, n_o, n_s))
        if self.features == "pairs":
            p = flat.shape[1]
            for j in range(p):
                for k in range(j + 1, p):
                    out.append(_quadrant_gain(order[j], order[k], srt[j], srt[k],
                                              (self.num_sorted[j], self.real_rank[j]),
                                              (self.num_sorted[k], self.real_rank[k]), n_o, n_s, self.grid[1]))
            for (c, lev, j), real_sorted in self.within.items():
                out.append(_within_level_gain(flat[:, j], cflat[:, c] == lev, real_sorted, n_o, n_s))
            for (c, d), o_cells in self.cells.items():
                code = cflat[:, c] * self.levels[d] + cflat[:, d]
                s_cells = _batched_bincount(code, len(o_cells)).astype(float)
                g = _gain(np.broadcast_to(o_cells.astype(float), s_cells.shape), s_cells, n_o, n_s)
                out.append(g.max(axis=1))
        return np.stack(out, axis=1).reshape(C, m, len(out))

    def feature_pmse(self, num: np.ndarray, cat: np.ndarray, orders: dict | None = None) -> np.ndarray:
        """pMSE (C, m, F) of the best partition on each feature: (gain − n_s²/N)/N."""
        n_s = num.shape[3]
        N = self.n_o + n_s
        return np.maximum(self.feature_gains(num, cat, orders) - n_s * n_s / N, 0.0) / N

    def __call__(self, num: np.ndarray, cat: np.ndarray, orders: dict | None = None) -> np.ndarray:
        """pMSE (C, m) of the best two-leaf partition of each synthetic set (best over all features)."""
        return self.feature_pmse(num, cat, orders=orders).max(axis=2)


class CartPMSE:
    """pMSE from an rpart-like greedy CART (the paper's implementation; heuristic sensitivity)."""

    def __init__(self, model: SequentialModel, real_num: np.ndarray, real_cat: np.ndarray, *, maxdepth: int = 5,
                 cp: float = 0.01, minsplit: int = 2, minbucket: int = 1):
        self.real_num, self.real_cat = real_num, real_cat
        self.tree_args = dict(cp=cp, minsplit=minsplit, minbucket=minbucket, maxdepth=maxdepth)

    def __call__(self, num: np.ndarray, cat: np.ndarray, orders: dict | None = None) -> np.ndarray:
        from ...metrics.cart import RpartLikeTree

        C, m, n_s = num.shape[0], num.shape[1], num.shape[3]
        n_o = self.real_num.shape[0]
        t = np.r_[np.zeros(n_o), np.ones(n_s)]
        c = n_s / (n_o + n_s)
        out = np.empty((C, m))
        for ci in range(C):
            for k in range(m):
                X = np.column_stack([np.r_[self.real_num, num[ci, k].T]] + self._cat_columns(cat[ci, k], t))
                p = RpartLikeTree(**self.tree_args, random_state=0).fit(X, t).predict_proba1(X)
                out[ci, k] = np.mean((p - c) ** 2)
        return out

    def _cat_columns(self, cat_k, t):
        """Categorical columns coded by their level's share of synthetic rows (Breiman ordering)."""
        cols = []
        for c in range(cat_k.shape[0]):
            codes = np.r_[self.real_cat[:, c], cat_k[c]]
            K = int(codes.max()) + 1
            share = np.bincount(codes, weights=t, minlength=K) / np.maximum(np.bincount(codes, minlength=K), 1)
            cols.append(share[codes])
        return [np.column_stack(cols)] if cols else []


def _batched_bincount(codes: np.ndarray, K: int) -> np.ndarray:
    """Row-wise bincount of a (B, n) integer array → (B, K)."""
    B = codes.shape[0]
    off = codes + K * np.arange(B)[:, None]
    return np.bincount(off.ravel(), minlength=B * K).reshape(B, K)


__all__ = ["StumpPMSE", "CartPMSE"]
