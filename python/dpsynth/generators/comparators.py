"""The pMSE mechanism's comparators (Snoke & Slavković 2018, §2.1 and §6–7), each needing public bounds.

- :class:`NoisyBayesSynth`: noisy Bayesian posterior predictive (Bowen & Liu 2016, arXiv 1602.01063):
  Laplace noise on the sufficient statistics of the sequential Gaussian linear model, then parameters
  drawn from the flat-prior posterior given the noisy statistics, then data from the model.
- :class:`SmoothHistogram`: DP smoothed histogram (Wasserman & Zhou 2010, JASA 105:375, §4.1): k
  points drawn from (1 − λ)·histogram + λ·uniform.
- :func:`functional_mechanism_regression`: linear-regression coefficients by the functional mechanism
  (Zhang et al. 2012, PVLDB 5(11)); coefficients only, no data.
- :func:`posterior_predictive_synth`: the same posterior predictive **without** noise, the paper's
  non-DP baseline (NOT PRIVATE; for benchmarks).

All three private methods need bounds fixed before seeing the data. Values outside them are
clipped (a per-row, data-independent transformation). The generators read the bounds from the
schema's ``lower``/``upper``; the function takes them as arguments. Neighbouring relation:
replace-one (n public), as in the paper's comparison.

Example
-------
>>> import numpy as np, dpsynth
>>> from dpsynth.generators.pmse.paper import paper_data
>>> df = paper_data(2000, np.random.default_rng(0))
>>> schema = dpsynth.Schema.from_dict({"x1": {"type": "numeric", "lower": -11, "upper": 15},
...                                    "x2": {"type": "numeric", "lower": -12, "upper": 7}})
>>> res = NoisyBayesSynth(1.0, n_releases=2).fit(df, schema, seed=1).sample(m=2, seed=2)
>>> res.ledger.total_epsilon(), res.datasets[0].shape
(1.0, (2000, 2))
"""
from __future__ import annotations

import math

import numpy as np
import pandas as pd

from ..privacy import NoiseSource, PrivacyLedger, laplace_values, observe_noise_input
from ..validation import check_count, check_epsilon, check_int
from .base import Generator


# ====================================================================== helpers
def _optional_count(value, name: str) -> int | None:
    """None, or an integer ≥ 1 (:func:`dpsynth.validation.check_int`)."""
    return check_int(value, name, minimum=1, allow_none=True)


def _numeric_block(data: pd.DataFrame, schema, what: str) -> tuple[list[str], np.ndarray, np.ndarray]:
    """Names, bounds (p × 2) and clipped values (n × p) of the numeric columns; rejects the rest."""
    cats = [c for c in schema.names if schema[c].is_categorical]
    if cats:
        raise ValueError(f"{what} models numeric columns only; drop the categorical columns {cats} "
                         "(schema.subset([...]) and df[[...]])")
    names = list(schema.names)
    bounds = np.array([[schema[c].lower, schema[c].upper] for c in names], dtype=float)
    x = data[names].apply(pd.to_numeric).to_numpy(dtype=float)
    if np.isnan(x).any():
        raise ValueError(f"{what} needs complete rows: drop or impute the missing values first (df.dropna())")
    return names, bounds, np.clip(x, bounds[:, 0], bounds[:, 1])


def _monomial_range(lo: np.ndarray, hi: np.ndarray, j: int, k: int) -> float:
    """max − min of x_j·x_k (or x_j when k < 0) over the box Π[lo, hi] (extremes at corners; for a
    square also at 0 when the interval contains it)."""
    if k < 0:
        return float(hi[j] - lo[j])
    if j == k:
        vals = [lo[j] ** 2, hi[j] ** 2] + ([0.0] if lo[j] < 0 < hi[j] else [])
    else:
        vals = [a * b for a in (lo[j], hi[j]) for b in (lo[k], hi[k])]
    return float(max(vals) - min(vals))


def _gram_statistics(x: np.ndarray) -> np.ndarray:
    """Sufficient statistics of the sequential linear model: Σx_j and Σx_j·x_k (j ≤ k), flattened."""
    p = x.shape[1]
    iu = np.triu_indices(p)
    return np.r_[x.sum(axis=0), (x.T @ x)[iu]]


def _gram_from_statistics(stats: np.ndarray, n: int, p: int) -> np.ndarray:
    """(p+1) × (p+1) Gram matrix of [1, x] from the statistics (n public), projected onto the
    positive-definite cone (eigenvalues floored) when noise made it indefinite."""
    G = np.empty((p + 1, p + 1))
    G[0, 0] = n
    G[0, 1:] = G[1:, 0] = stats[:p]
    M = np.zeros((p, p))
    M[np.triu_indices(p)] = stats[p:]
    M = M + np.triu(M, 1).T
    G[1:, 1:] = M
    w, V = np.linalg.eigh(G)
    floor = 1e-8 * max(float(np.abs(w).max()), 1.0)
    if w.min() < floor:
        G = (V * np.maximum(w, floor)) @ V.T
    return G


def posterior_draw(G: np.ndarray, n: int, rng: np.random.Generator) -> list[dict]:
    """One draw of the sequential linear model's parameters from the flat-prior posterior given the
    Gram matrix G of [1, x] (Bowen & Liu 2016 §3): for column j, regressed on [1, x_<j],
    σ_j² ~ RSS/χ²_{n−q}, β_j ~ N(β̂_j, σ_j²(XᵀX)⁻¹); for the first column this is
    σ² ~ (n−1)s²/χ²_{n−1}, μ ~ N(x̄, σ²/n). Returns [{"coef": β (q,), "var": σ²}, ...]."""
    p = G.shape[0] - 1
    out = []
    for j in range(p):
        q = j + 1  # intercept + j predictors
        XtX = G[:q, :q]
        Xty = G[:q, j + 1]
        beta_hat = np.linalg.solve(XtX, Xty)
        rss = max(float(G[j + 1, j + 1] - beta_hat @ Xty), 1e-12 * max(float(G[j + 1, j + 1]), 1.0))
        df = max(n - q, 1)
        var = rss / rng.chisquare(df)
        cov = var * np.linalg.inv(XtX)
        beta = rng.multivariate_normal(beta_hat, (cov + cov.T) / 2, method="eigh")
        out.append({"coef": beta, "var": var})
    return out


def _simulate_sequential(params: list[dict], n: int, rng: np.random.Generator) -> np.ndarray:
    p = len(params)
    x = np.empty((n, p))
    for j, prm in enumerate(params):
        design = np.column_stack([np.ones(n), x[:, :j]])
        x[:, j] = design @ prm["coef"] + math.sqrt(prm["var"]) * rng.standard_normal(n)
    return x


def posterior_predictive_synth(df: pd.DataFrame, columns: list[str], m: int = 1,
                               rng: np.random.Generator | None = None) -> list[pd.DataFrame]:
    """NOT PRIVATE: m datasets from the exact (noise-free) posterior predictive of the sequential
    linear model, the paper's "non-DP synthesis" baseline (fully conditional sequential models)."""
    rng = rng or np.random.default_rng()
    x = df[columns].to_numpy(dtype=float)
    n = len(x)
    G = _gram_from_statistics(_gram_statistics(x), n, len(columns))
    return [pd.DataFrame(_simulate_sequential(posterior_draw(G, n, rng), n, rng), columns=columns)
            for _ in range(m)]


# ====================================================================== noisy posterior predictive
class NoisyBayesSynth(Generator):
    """Noisy Bayesian posterior predictive (Bowen & Liu 2016) for numeric columns with public bounds.

    Per release (``n_releases`` of them, ε/n_releases each, as in the paper's comparison):
    1. clip each column to its schema bounds [l_j, u_j];
    2. statistics T = (Σx_j, Σx_j x_k for j ≤ k); n is public (replace-one);
    3. replace-one sensitivity of each statistic: Δ_t = max − min of its monomial over the box
       (Δ(Σx_j) = u_j − l_j, Δ(Σx_j²) = max x_j² − min x_j², products at the box corners);
       the budget is split equally over the k statistics: T_t/Δ_t has L1 sensitivity ≤ k jointly,
       and gets Laplace(k/ε_r) (one ledger entry, sensitivity k on the normalised vector);
    4. the noisy Gram matrix is projected onto the positive-definite cone (post-processing);
    5. θ drawn from the flat-prior posterior (:func:`posterior_draw`);
    6. data drawn from g(θ) (dataset i uses release i mod n_releases; re-use is post-processing).
    """

    method = "noisy-bayes"
    relation = "replace-one"

    def __init__(self, epsilon: float, delta: float | None = None, *, n_releases: int = 10):
        super().__init__(epsilon, delta)
        self._set_params(locals(), {"n_releases": check_count})  # as passed (a whole float as that int)

    def _fit(self, codes, data, source):
        names, bounds, x = _numeric_block(data, self.schema_, "NoisyBayesSynth")
        n, p = x.shape
        lo, hi = bounds[:, 0], bounds[:, 1]
        pairs = [(j, -1) for j in range(p)] + [(j, k) for j, k in zip(*np.triu_indices(p))]
        sens = np.array([_monomial_range(lo, hi, j, k) for j, k in pairs])
        stats = _gram_statistics(x) / sens
        eps_r = self.epsilon / self.n_releases
        rng = source.spawn()
        self.params_ = []
        for i in range(self.n_releases):
            noisy = laplace_values(stats, epsilon=eps_r, sensitivity=float(len(stats)), ledger=self.ledger,
                                   source=source, step=f"release {i + 1}/{self.n_releases}: sufficient statistics",
                                   relation=self.relation,
                                   note="(Σx_j, Σx_j x_k) each divided by its replace-one range over the bounds; "
                                        "equal budget split")
            G = _gram_from_statistics(noisy * sens, n, p)
            self.params_.append(posterior_draw(G, n, rng))
        self.names_ = names
        self.n_ = n

    def _sample_frame(self, n, rng, index):
        x = _simulate_sequential(self.params_[index % self.n_releases], n, rng)
        return pd.DataFrame(x, columns=self.names_)[self.schema_.names]


# ====================================================================== smoothed histogram
class SmoothHistogram(Generator):
    """Wasserman & Zhou (2010) DP smoothed histogram.

    Cells: equal-width bins on each numeric column's schema bounds (``bins`` per column; default
    round(n^{1/(d+2)}), W&Z's rate) times the categories of each categorical column; K cells in all.
    With p̂ the cell proportions, q = (1 − λ)p̂ + λ/K; k points are drawn iid from q (uniform inside a
    numeric cell). Replace-one moves one count; the worst case is an empty cell gaining it, where a
    point's probability ratio is 1 + (1 − λ)K/(nλ); k points are ε-DP when
    λ ≥ K / (K + n(e^{ε/k} − 1)) (the paper's eq. 1 with k = n, the default). The k points are the
    release (the fitted object keeps them, never p̂); ``sample`` returns them, and bootstrap
    resamples of them for other n or further datasets (post-processing). With k = n the smoothing is
    λ ≈ K/(K + ε): the output is nearly uniform on the box. That is the method, not a bug.
    """

    method = "smooth-histogram"
    relation = "replace-one"

    def __init__(self, epsilon: float, delta: float | None = None, *, bins: int | None = None, k: int | None = None):
        super().__init__(epsilon, delta)
        self._set_params(locals(), {"bins": _optional_count, "k": _optional_count})

    def _fit(self, codes, data, source):
        schema = self.schema_
        n, d = len(data), len(schema.names)
        bins = self.bins or max(1, int(round(n ** (1.0 / (d + 2)))))
        sizes, cells = [], []
        for name in schema.names:
            col = schema[name]
            if col.is_categorical:
                c = schema.subset([name]).encode(data[[name]])[:, 0]
                sizes.append(len(col.categories))
            else:
                x = pd.to_numeric(data[name]).to_numpy(dtype=float)
                c = np.clip(np.floor((np.clip(x, col.lower, col.upper) - col.lower) / (col.upper - col.lower) * bins),
                            0, bins - 1).astype(np.int64)
                c[np.isnan(x)] = -1
                sizes.append(bins)
            if (c < 0).any():
                raise ValueError("SmoothHistogram needs complete rows: drop or impute the missing values first")
            cells.append(c)
        cells = np.column_stack(cells)
        K = float(np.prod(np.array(sizes, dtype=float)))
        k = self.k or n
        lam = min(1.0, K / (K + n * math.expm1(self.epsilon / k)))
        step = "smoothed histogram: k points from (1 − λ)p̂ + λ/K"
        self.ledger.spend(step, "Wasserman–Zhou smoothed histogram", epsilon=self.epsilon, sensitivity=2.0,
                          relation=self.relation, norm="L1",
                          note=f"K = {K:.0f} cells, λ = {lam:.6g} ≥ K/(K + n(e^(ε/k) − 1)), k = {k} points")
        if K <= 1e6:
            flat = np.ravel_multi_index(cells.T, sizes)
            observe_noise_input(step, "Wasserman–Zhou smoothed histogram", np.bincount(flat, minlength=int(K)),
                                2.0, "L1")
        rng = source.numpy  # the sampling *is* the mechanism
        uniform = rng.random(k) < lam
        drawn = cells[rng.integers(0, n, k)]
        for j, size in enumerate(sizes):
            drawn[uniform, j] = rng.integers(0, size, int(uniform.sum()))
        self.points_ = self._decode(drawn, sizes, bins, rng)
        self.lambda_, self.K_, self.bins_ = lam, K, bins
        self.n_ = k

    def _decode(self, drawn, sizes, bins, rng) -> pd.DataFrame:
        out = {}
        for j, name in enumerate(self.schema_.names):
            col = self.schema_[name]
            if col.is_categorical:
                out[name] = pd.Categorical.from_codes(drawn[:, j], categories=list(col.categories),
                                                      ordered=col.ordered)
            else:
                width = (col.upper - col.lower) / bins
                out[name] = col.lower + (drawn[:, j] + rng.random(len(drawn))) * width
        return pd.DataFrame(out)

    def _sample_frame(self, n, rng, index):
        if index == 0 and n == len(self.points_):
            return self.points_.copy()
        return self.points_.iloc[rng.integers(0, len(self.points_), n)].reset_index(drop=True)


# ====================================================================== functional mechanism
def functional_mechanism_regression(X, y, *, epsilon: float, x_bounds, y_bounds,
                                    ledger: PrivacyLedger | None = None, seed: int | None = None,
                                    regularize: str = "trim") -> tuple[np.ndarray, PrivacyLedger]:
    """ε-DP linear-regression coefficients [intercept, slopes] by the functional mechanism (Zhang et al.
    2012, Algorithm 1 and §5).

    Every column of X and y is clipped to its bounds and rescaled to [−1, 1]; with x' = [1, x] (d'
    entries) the least-squares objective Σ(y − x'ᵀw)² has, per row, the coefficients y² (constant in w,
    dropped), −2y·x'_j (d' of them, |·| ≤ 2) and x'_j x'_l (d'², |·| ≤ 1): L1 norm ≤ d'² + 2d', so
    replace-one sensitivity Δ = 2(d'² + 2d') (= the authors' code's 2d'² + 4d'; 16 for one predictor).
    Laplace(Δ/ε) goes on every entry of M = Σx'x'ᵀ (all d'² entries, then symmetrised) and of
    α = −2Σy x'. Then w = argmin wᵀM*w + α*ᵀw: ``regularize="trim"`` drops eigenvalues of M* ≤ 1e-8
    (spectral trimming, §5.2); ``"ridge"`` first adds 5·√2·Δ/ε·I (five Laplace sds; the authors'
    code). Coefficients are mapped back to the original units. Returns (coefficients, ledger).
    """
    epsilon = check_epsilon(epsilon)
    if regularize not in ("trim", "ridge"):
        raise ValueError(f"regularize must be 'trim' or 'ridge', got {regularize!r}")
    X = np.asarray(X, dtype=float)
    if X.ndim == 1:
        X = X[:, None]
    y = np.asarray(y, dtype=float).ravel()
    if len(X) != len(y) or len(y) == 0:
        raise ValueError("X and y need the same, non-zero number of rows")
    if np.isnan(X).any() or np.isnan(y).any():
        raise ValueError("X and y must be complete (no NaN)")
    xb = np.asarray(x_bounds, dtype=float).reshape(-1, 2)
    if len(xb) != X.shape[1]:
        raise ValueError(f"x_bounds needs one (lower, upper) pair per column of X ({X.shape[1]}), got {len(xb)}")
    yb = np.asarray(y_bounds, dtype=float).ravel()
    if len(yb) != 2 or not yb[0] < yb[1] or not np.all(xb[:, 0] < xb[:, 1]):
        raise ValueError("bounds must be (lower, upper) pairs with lower < upper")
    ledger = ledger if ledger is not None else PrivacyLedger(epsilon)
    source = NoiseSource(seed)
    mx, rx = xb.mean(axis=1), (xb[:, 1] - xb[:, 0]) / 2
    my, ry = yb.mean(), (yb[1] - yb[0]) / 2
    xs = (np.clip(X, xb[:, 0], xb[:, 1]) - mx) / rx
    ys = (np.clip(y, yb[0], yb[1]) - my) / ry
    design = np.column_stack([np.ones(len(xs)), xs])
    d = design.shape[1]
    delta = 2.0 * (d * d + 2 * d)
    coefs = np.r_[(design.T @ design).ravel(), -2.0 * design.T @ ys]
    noisy = laplace_values(coefs, epsilon=epsilon, sensitivity=delta, ledger=ledger, source=source,
                           step="functional mechanism: objective coefficients", relation="replace-one",
                           note=f"least squares on data rescaled to [-1, 1]; d' = {d}, Δ = 2(d'² + 2d')")
    M = noisy[:d * d].reshape(d, d)
    M = (M + M.T) / 2
    alpha = noisy[d * d:]
    if regularize == "ridge":
        M = M + 5.0 * math.sqrt(2.0) * delta / epsilon * np.eye(d)
    w, V = np.linalg.eigh(M)
    keep = w > 1e-8
    g = -0.5 * (V[:, keep].T @ alpha) / w[keep]
    ws = V[:, keep] @ g
    slopes = ry * ws[1:] / rx
    intercept = my + ry * ws[0] - slopes @ mx
    return np.r_[intercept, slopes], ledger


__all__ = ["NoisyBayesSynth", "SmoothHistogram", "functional_mechanism_regression", "posterior_draw",
           "posterior_predictive_synth"]
