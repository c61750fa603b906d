"""PrivBayes (Zhang et al., SIGMOD'14 / TODS'17) and PrivBayesE (Mohapatra et al., PVLDB'24, Alg. 2).

A Bayesian network is learnt greedily: the first attribute is drawn uniformly at random, then in
each of d − 1 rounds the exponential mechanism picks a pair (X, Π) — a new attribute and a parent
set among the attributes already placed — by a dependence score. The d conditional count tables
N[X, Π] are released with discrete Laplace noise, clipped at 0 and normalised; synthetic rows are
drawn ancestrally in network order. Numeric columns are binned by the public schema (16 bins by
default) and de-binned uniformly within the bin by the schema; categories come from the schema only.

``missing="complete-rows"`` runs everything on the rows observed on every attribute (the paper's
PrivBayes baseline); ``missing="partial"`` is PrivBayesE: every score and every table is computed
over the rows observed on *that* candidate's or table's attributes (available-case counting).

Degree. ``k=None`` (default, the C++ semantics): θ-useful parent sets. A table with m cells is
θ-useful when the mean count n/m is at least θ times the noise scale Δd/ε₂, i.e.
m ≤ τ = n·ε₂/(Δ·d·θ) (Δ = 2, see below; θ = 4 and β = ½ reproduce the C++ bound ε·n/(4dθ)). The
candidate parent sets of X are the *maximal* sets of placed attributes with |dom X|·|dom Π| ≤ τ, where
a numeric parent may enter at a coarser level of its bin hierarchy (16 → 8 → 4 → 2 bins by merging
neighbouring bins). ``k=<int>`` gives the original fixed-degree network: parent sets of size
min(k, #placed) at full resolution.

Privacy design (neighbouring relation: **replace-one**, as in the paper; n = number of rows is public)
----------------------------------------------------------------------------------------------------
With missing values, replacing one row may turn a complete row into a partial one or the all-missing
row, so the set of rows observed on an attribute set A gains, loses or changes at most one row.
* Budget: ε₁ = βε for the structure (ε₁/(d − 1) per round; the first attribute is drawn uniformly
  at random, data-independent, free), ε₂ = (1 − β)ε for the d tables (ε₂/d each). In
  complete-rows mode with θ-useful degree, 2 % of ε first buys a noisy count of complete rows.
* Scores are computed on **counts**, not on normalised frequencies, so that their sensitivity does
  not depend on the data-dependent available-case size n_M (the upstream C++ used 3/n with n = all
  rows, which under-states the sensitivity 3/n_M of the normalised score — a bug not copied):
  - R score (default): C = n_M·R = ½ Σ |N(x,π) − N(x)N(π)/n_M| = n_M·½‖P[X,Π] − P[X]P[Π]‖₁.
    Replacing a row inside the available-case set changes R by ≤ 3/n_M (Zhang et al.; write
    P'xP'π − PxPπ = (P'x − Px)P'π + Px(P'π − Pπ)), so C by ≤ 3. Adding a row (n_M → n_M + 1)
    changes N by 1 in one cell and Σ|ΔE| ≤ (3n_M + 1)/(n_M + 1) < 3 for E = N(x)N(π)/n_M, so C by
    < 2 (removal is symmetric). Sensitivity **3** for every n_M; the EM probability ∝
    exp(ε·C/6) is the C++'s exp(ε·n·R/6) with n_M in place of the full n.
  - MI (``score="MI"``): C = n_M·I(X;Π) (nats) = Σ N ln N − Σ N_x ln N_x − Σ N_π ln N_π + n ln n.
    Adding a row changes it by g(N_xπ) − g(N_x) − g(N_π) + g(n_M), g(a) = (a+1)ln(a+1) − a ln a
    increasing with g(a) < ln(a+1) + 1, so by < ln N + 1; sensitivity 2(ln(N + 1) + 1) under
    replace-one, with the public N ≥ n_M.
* Each conditional table N[X, Π] (available-case) changes in L1 by ≤ 2 under replace-one (1 under
  add/remove): discrete Laplace with scale 2d/ε₂ (the C++'s 2d/ε₂).
* θ-usefulness needs n: PrivBayesE uses the public N (the C++ semantics). The complete-rows variant
  would need the private number of complete rows n_cc: it is released as n_cc + DLap(1/ε_n) with
  ε_n = 0.02ε (sensitivity 1) and charged.
* Every spend records the attributes a row must be observed on to be read (a table: X ∪ Π; a
  structure round: the intersection of its candidates' attribute sets, leaving out candidates
  without parents, whose score is 0 on any data; complete-rows mode: all attributes), and the
  fewest attributes that set could have had on any data (public: all, fixed, in complete-rows mode;
  0 for a structure round; 1 + min(k, t) for the table at position t with fixed degree k, 1 with θ-useful
  parent sets), for ``ledger.ground_truth_epsilon(missing_rates)`` (MCAR amplification, bounded
  over every network the selection could pick; the selected sets are an ex-post diagnostic only).
* The synthetic data have N rows by default (public), and no missing values.

Example
-------
>>> import dpsynth
>>> df, schema = dpsynth.load_dataset("adult")
>>> gen = PrivBayes(epsilon=1.0, missing="partial").fit(df, schema, seed=1)
>>> gen.sample(n=100, seed=2).datasets[0].shape
(100, 15)
"""
from __future__ import annotations

import itertools
import math
from functools import partial

import numpy as np

from ..privacy import exponential_mechanism, laplace_counts
from ..validation import check_choice, check_int, check_number
from .base import Generator
from .options import checks

_COUNT_SHARE = 0.02      # complete-rows mode: share of ε for the noisy number of complete rows
_MAX_CANDIDATES = 20000  # per round; beyond it τ is halved for that round (public, data-independent)
_TABLE_SENSITIVITY = 2   # L1 sensitivity of a count table under replace-one
_R_SENSITIVITY = 3.0     # count-scale R score under replace-one (module docstring)


_CHECKS = checks(
    missing=partial(check_choice, choices=("complete-rows", "partial"),
                    meaning="'complete-rows' (PrivBayes) or 'partial' (PrivBayesE)"),
    k=partial(check_int, minimum=0, allow_none=True),  # None: θ-useful degree
    beta=partial(check_number, low=0.0, high=1.0, low_open=True, high_open=True,
                 what="in (0, 1) (the share of ε for the structure, e.g. 0.5)"),
    theta=partial(check_number, low=0.0, high=math.inf, low_open=True, high_open=True,
                  what="a positive number (usefulness, e.g. 4)"),
    score=partial(check_choice, choices=("R", "MI"), meaning="'R' (default) or 'MI'"),
)


class PrivBayes(Generator):
    """PrivBayes / PrivBayesE; see the module docstring for the privacy design."""

    relation = "replace-one"
    counts_only = True  # every score and table is a marginal count (dpsynth.marginals)

    def __init__(self, epsilon: float, delta: float | None = None, missing: str = "complete-rows",
                 k: int | None = None, beta: float = 0.5, theta: float = 4.0, score: str = "R"):
        super().__init__(epsilon, delta)
        self._set_params(locals(), _CHECKS)

    @property
    def method(self) -> str:
        return "privbayes-e" if self.missing == "partial" else "privbayes"

    # ------------------------------------------------------------------ fitting
    def _fit(self, rows, data, source):
        names = self.schema_.names
        d = len(names)
        n_public = rows.n
        self.widths_ = _level_widths(self.schema_)
        eps = self.epsilon
        n_theta = float(n_public)
        if self.missing == "complete-rows":
            rows = rows.complete()
            if self.k is None:  # θ-usefulness needs the private number of complete rows: buy it
                eps_n = _COUNT_SHARE * eps
                noisy_n = laplace_counts(np.array([rows.n]), epsilon=eps_n, sensitivity=1,
                                         ledger=self.ledger, source=source, step="number of complete rows",
                                         relation=self.relation, attributes=names, attributes_fixed=True)
                n_theta = max(float(noisy_n[0]), 1.0)
                eps -= eps_n
        eps1, eps2 = (self.beta * eps, (1.0 - self.beta) * eps) if d > 1 else (0.0, eps)  # d = 1: no structure
        self.tau_ = n_theta * eps2 / (_TABLE_SENSITIVITY * d * self.theta)
        if self.score == "R":
            score_fn, score_sens = _r_score, _R_SENSITIVITY
        else:
            score_fn, score_sens = _mi_score, 2.0 * (math.log(n_public + 1.0) + 1.0)

        # ---- structure: greedy network by the exponential mechanism (Alg. 2, lines 1-8)
        root = int(source.numpy.integers(d))  # data-independent first attribute
        network = [(root, ())]
        placed = [root]
        cache: dict = {}
        for t in range(1, d):
            todo = [x for x in range(d) if x not in placed]
            cands = self._candidates(todo, placed)
            # new candidates, grouped by parent set (counting reuses a parent set's index)
            need = sorted({c for c in cands if c not in cache}, key=lambda c: (c[1], c[0]))
            for (x, par), table in zip(need, rows.tables(par + ((x, 0),) for x, par in need)):
                cache[(x, par)] = score_fn(table.reshape(-1, self.widths_[x][0]))
            scores = np.array([cache[c] for c in cands])
            # rows this round reads: those observed on every candidate's attributes (a candidate
            # without parents scores 0 whatever the data, so it reads nothing)
            common = set.intersection(*[{x} | {a for a, _ in par} for x, par in cands if par] or [set()])
            read = names if self.missing == "complete-rows" else [names[a] for a in sorted(common)]
            pick = exponential_mechanism(scores, epsilon=eps1 / (d - 1), sensitivity=score_sens,
                                         ledger=self.ledger, source=source, step=f"structure round {t}",
                                         relation=self.relation, attributes=read,
                                         attributes_fixed=self.missing == "complete-rows",
                                         note=f"{len(cands)} candidates, {self.score} score on counts")
            x, par = cands[pick]
            network.append((x, par))
            placed.append(x)

        # ---- noisy conditional tables (Alg. 2, lines 10-13)
        self.network_, self.conditionals_ = [], []
        for t, (x, par) in enumerate(network):
            counts = rows.table(par + ((x, 0),)).reshape(-1, self.widths_[x][0])
            attrs = [names[a] for a, _ in par] + [names[x]]
            label = names[x] + (" | " + ", ".join(_level_name(names[a], l) for a, l in par) if par else "")
            noisy = laplace_counts(counts, epsilon=eps2 / d, sensitivity=_TABLE_SENSITIVITY, ledger=self.ledger,
                                   source=source, step=f"table {label}", relation=self.relation,
                                   attributes=names if self.missing == "complete-rows" else attrs,
                                   min_attributes=self._min_table_attributes(t, d),
                                   attributes_fixed=self.missing == "complete-rows")
            self.network_.append((x, par))
            self.conditionals_.append(_conditional(noisy))
        # the released tables' column sets (the network is itself a DP output)
        self.measured_queries_ = [tuple(names[a] for a, _ in par) + (names[x],) for x, par in self.network_]
        self.n_ = float(n_public)

    def _min_table_attributes(self, t: int, d: int) -> int:
        """Fewest attributes the table at network position t can have on any data (public, for the
        ex-ante MCAR amplification bound): all d in complete-rows mode (where they are fixed); X and
        min(k, t) parents with a fixed degree k; with θ-useful parent sets only X itself is certain
        (a parent set may be empty when no placed attribute fits the cell bound)."""
        if self.missing == "complete-rows":
            return d
        return 1 + (min(self.k, t) if self.k is not None else 0)

    def _candidates(self, todo, placed):
        """(X, Π) pairs for one round; Π a sorted tuple of (attribute, level)."""
        tau = self.tau_
        while True:
            out = []
            for x in todo:
                if self.k is None:
                    parents = _maximal_parent_sets(sorted(placed), self.widths_, tau / self.widths_[x][0])
                else:
                    size = min(self.k, len(placed))
                    parents = [tuple((a, 0) for a in c) for c in itertools.combinations(sorted(placed), size)]
                out.extend((x, p) for p in (parents or [()]))
            if len(out) <= _MAX_CANDIDATES or self.k is not None or tau < 2:
                return out
            tau /= 2.0

    # ------------------------------------------------------------------ sampling
    def _sample_codes(self, n, rng, index):
        """Ancestral sampling in network order, vectorised per attribute: each row's parent
        configuration selects a row of the conditional table; inverse-CDF by comparison."""
        out = np.empty((n, len(self.widths_)), dtype=np.int64)
        for (x, par), cond in zip(self.network_, self.conditionals_):
            config = np.zeros(n, dtype=np.int64)
            for a, lvl in par:
                config = config * self.widths_[a][lvl] + (out[:, a] >> lvl)
            cdf = np.cumsum(cond, axis=1)
            u = rng.random(n)
            draw = (u[:, None] >= cdf[config]).sum(axis=1)
            out[:, x] = np.minimum(draw, cond.shape[1] - 1)
        return out

    def describe_network(self) -> list[str]:
        """The learnt network, one line per attribute: 'child <- parent(level bins), ...'."""
        names = self.schema_.names
        lines = []
        for x, par in self.network_:
            ps = ", ".join(f"{names[a]}({self.widths_[a][l]} bins)" if l else names[a] for a, l in par)
            lines.append(f"{names[x]} <- {ps}" if ps else names[x])
        return lines


# ---------------------------------------------------------------------------- helpers
def _level_widths(schema) -> list[list[int]]:
    """Domain size of each attribute at each generalisation level. Numeric bins merge pairwise
    (code >> l) down to 2 levels; categorical attributes have no public hierarchy (one level)."""
    out = []
    for col in schema.columns.values():
        w = [col.size]
        if not col.is_categorical:
            while w[-1] > 2:
                w.append(((col.size - 1) >> len(w)) + 1)
        out.append(w)
    return out


def _level_name(name, level):
    return f"{name}/{2 ** level}" if level else name


def _maximal_parent_sets(placed, widths, budget) -> list[tuple]:
    """Maximal parent sets Π ⊆ placed (each member at one level) with ∏ width ≤ budget: no absent
    attribute can be added (even at its coarsest level) and no member refined one level."""
    if budget < 1:
        return []
    out = []

    def rec(i, prod, chosen):
        if i == len(placed):
            for a, lvl in chosen:
                if lvl > 0 and prod // widths[a][lvl] * widths[a][lvl - 1] <= budget:
                    return
            inside = {a for a, _ in chosen}
            for a in placed:
                if a not in inside and prod * widths[a][-1] <= budget:
                    return
            out.append(tuple(chosen))
            return
        a = placed[i]
        for lvl, w in enumerate(widths[a]):
            if prod * w <= budget:
                rec(i + 1, prod * w, chosen + [(a, lvl)])
        rec(i + 1, prod, chosen)

    rec(0, 1, [])
    return out


def _r_score(table) -> float:
    """n·R = ½ Σ |N(π,x) − N(π)N(x)/n| on counts (sensitivity 3 under replace-one)."""
    n = table.sum()
    if n == 0:
        return 0.0
    rows, cols = table.sum(axis=1), table.sum(axis=0)
    t = table[rows > 0][:, cols > 0]  # empty rows and columns add |0 − 0| = 0
    gap = np.outer(rows[rows > 0].astype(float), cols[cols > 0].astype(float))
    gap /= n
    np.subtract(t, gap, out=gap)
    return 0.5 * float(np.abs(gap, out=gap).sum())


def _mi_score(table) -> float:
    """n·I(X; Π) in nats on counts (sensitivity 2(ln(N+1)+1) under replace-one)."""
    n = table.sum()
    if n == 0:
        return 0.0
    t = table.astype(float)

    def xlogx(v):
        v = v[v > 0]
        return float((v * np.log(v)).sum())

    return xlogx(t.ravel()) - xlogx(t.sum(axis=1)) - xlogx(t.sum(axis=0)) + xlogx(np.array([float(n)]))


def _conditional(noisy) -> np.ndarray:
    """Noisy counts → P(X | π): negatives clipped to 0, rows normalised; an all-zero parent
    configuration falls back to the table's X-marginal (uniform if that is zero too)."""
    t = np.clip(noisy, 0, None).astype(float)
    marginal = t.sum(axis=0)
    marginal = marginal / marginal.sum() if marginal.sum() > 0 else np.full(t.shape[1], 1.0 / t.shape[1])
    sums = t.sum(axis=1, keepdims=True)
    return np.where(sums > 0, t / np.where(sums > 0, sums, 1.0), marginal[None, :])
