"""The pMSE mechanism (Snoke & Slavković, PSD 2018): synthesiser parameters drawn by the
exponential mechanism, with the propensity-score mean squared error (pMSE) as quality function.

Model and quality (the paper's §3, Algorithm 2)
-----------------------------------------------
- Synthesiser g(θ), ``model="sequential-linear"``: the columns in order; a numeric column is a Gaussian
  linear regression on the columns before it, x_j = β_j0 + Σ_k β_jk f_k + σ_j z; a categorical column
  is a multinomial logit on them (level 0 the reference). Predictors f_k: numeric values as they are,
  categorical columns as dummies of their levels 1..K−1. The paper's simulation model,
  X1 ~ N(θ1, θ2), X2 ~ N(θ3 + θ4·X1, θ5), is the special case of two numeric columns; variances are
  parameters (``theta_`` reports variances; :meth:`PMSEMechanism.parameters` also gives sd).
- Quality u(X, θ) = mean over ``n_synth`` synthetic sets X^s ~ g(θ) of pMSE(X, X^s), where
  pMSE = (1/N) Σ_i (p̂_i − c)², N = 2n, c = ½, with p̂ the in-sample propensity of a classification
  tree on the stacked rows (paper eq. 3, Algorithm 1). The synthetic sets are made from *common
  random numbers*: normal and uniform draws taken once, before any private row is read, and turned
  into X^s(θ) deterministically. So û(X, θ) is a fixed function of θ and the target density is an
  exact exponential mechanism for that quality function (the paper's "approximation" argument).
- Target density (paper eq. 2): f(θ) ∝ π(θ) exp(−ε_r û(X, θ) / (2Δu)), ε_r = ε / ``n_releases``,
  π a flat but proper public prior (:class:`Prior`): N(0, ``prior_var``) on every intercept and slope
  (``prior_var`` = 100 000 as in the paper, sd ≈ 316; intercepts are those of the centred model, the
  mean of x_j at the centre of its numeric predictors), a half-normal with variance ``prior_var`` on
  each variance (``prior_on="var"``, the paper's positive-truncated N(0, 100 000)) or on each sd
  (``prior_on="sd"``), N(0, ``logit_prior_sd``² = 100) on each logit coefficient. Nothing in the
  prior, the starts or the proposals is read from the data, so numeric columns need no bounds
  (``needs_bounds = False``). Columns far outside ±1000 need a larger ``prior_var``.

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

*Sampling* (``sampler=``). The exponential mechanism over a continuous θ cannot be sampled exactly
in general, so the default, ``sampler="exact"``, releases from exponential mechanisms over *finite*
public candidate sets instead, sampled exactly by :func:`dpsynth.privacy.exponential_mechanism`
(McSherry & Talwar 2007): ``n_candidates`` states drawn uniformly from a box set by the prior's scale
(the base measure is that public candidate distribution), then ``n_stages − 1`` "zoom" stages around
the previous stage's release, the ε_r of a release split over the stages (adaptive composition);
see :mod:`dpsynth.generators.pmse_exact`. The guarantee is exact for that mechanism; no chain.
On the paper's case a KS/χ² test of the released indices against the exact softmax over the same
candidates passes (tests), where the old default chain, used as if it were an exact draw, failed a
KS test against exact sampling (p = 0.016).

``sampler="metropolis-approximate"`` is the paper's variant: a finite Metropolis chain on the
continuous density (:func:`pmse_chains`), whose output is only close to it. The guarantee is for the
exact density and the chain's error is not accounted, so the ledger is flagged (ε reported as ∞).
Its settings are public: each chain starts at a prior draw (drawn before the data are read), the
initial proposal scale is the prior's (:meth:`Prior.proposal_scale`), the burn-in search sharpness is
the constant ``SEARCH_SHARPNESS`` and the iteration counts depend only on the number of parameters.
The burn-in adapts the proposal to the chain's own history (Haario et al. 2001), so the proposal
used afterwards does depend on the data: one more reason why this option is not a guarantee. One
independent chain per release; the chains run on asinh(coefficients) and log σ; the burn-in search
uses the mean of the single-feature pMSEs. At small ε_r the exact density can put much of its mass
on the prior's plateau (û ≈ ¼); a chain that has found the mode rarely leaves it, so there the chain
is less noisy than the exact mechanism. Chain diagnostics are kept only with ``keep_diagnostics=True``.

Releases and datasets: release i (i = 1..``n_releases``) costs ε/``n_releases`` in the ledger and
gives θ_i; synthetic dataset j of ``sample(m=...)`` is drawn from g(θ_{j mod n_releases}) (dataset j
uses draw j; with m > n_releases the draws are re-used, post-processing at no extra cost but no new
information, with a warning).

Grey-box audit: with the exact sampler the primitive reports û at every candidate of every stage to
:func:`dpsynth.privacy.record_noise_inputs`; with the chain, û at each chain's (public) start only.

Scope: complete rows only (a missing value gives a ValueError); the generated numeric values are
clipped to the schema's bounds where the schema has them and rounded for integer columns.

Example
-------
>>> import numpy as np, pandas as pd, dpsynth
>>> rng = np.random.default_rng(0)
>>> x1 = rng.normal(2, np.sqrt(10), 500)
>>> df = pd.DataFrame({"x1": x1, "x2": rng.normal(-2.5 + 0.5 * x1, np.sqrt(3))})
>>> schema = dpsynth.Schema.from_dict({"x1": {"type": "numeric"}, "x2": {"type": "numeric"}})
>>> gen = PMSEMechanism(epsilon=1.0, n_releases=2, n_candidates=200, n_stages=2)
>>> gen = gen.fit(df, schema, seed=1)
>>> res = gen.sample(m=2, seed=2)
>>> [d.shape for d in res.datasets], round(res.ledger.total_epsilon(), 6)
([(500, 2), (500, 2)], 1.0)
"""
from __future__ import annotations

import functools
import math
import numbers
import warnings
from dataclasses import dataclass

import numpy as np
import pandas as pd

from ..privacy import observe_noise_input
from ..progress import progress
from . import pmse_exact
from .base import Generator

TREES = ("stump", "paper")
FEATURES = ("pairs", "columns")
MODELS = ("sequential-linear",)
SAMPLERS = ("exact", "metropolis-approximate")
SEARCH_SHARPNESS = 5000.0  # metropolis-approximate: final k of the burn-in search, per unit of pMSE (public)


# ====================================================================== the synthesiser g(θ)
@dataclass(frozen=True)
class _Col:
    name: str
    kind: str  # "numeric" | "categorical"
    levels: int = 0  # categorical: K
    integer: bool = False
    lower: float | None = None
    upper: float | None = None


class SequentialModel:
    """Sequential Gaussian linear regressions (numeric) and multinomial logits (categorical).

    The MCMC state θ is a flat vector: per numeric column [β_0, β_1.., log σ], per categorical column
    the (K−1) × q logit coefficients (row l: level l+1 against level 0). ``q`` = 1 + number of predictor
    dimensions of the columns before it (numeric: 1; categorical: K−1 dummies).
    """

    def __init__(self, columns: list[_Col]):
        self.columns = list(columns)
        self.blocks = []  # (column index, start, stop, q)
        names, q, start = [], 1, 0
        self.pred_names = []
        for j, col in enumerate(self.columns):
            preds = ["(intercept)"] + list(self.pred_names)
            if col.kind == "numeric":
                size = q + 1
                names += [f"{col.name}: {p}" for p in preds] + [f"{col.name}: log sd"]
                self.pred_names.append(col.name)
                width = 1
            else:
                size = (col.levels - 1) * q
                names += [f"{col.name}[{lev}]: {p}" for lev in range(1, col.levels) for p in preds]
                self.pred_names += [f"{col.name}[{lev}]" for lev in range(1, col.levels)]
                width = col.levels - 1
            self.blocks.append((j, start, start + size, q))
            start += size
            q += width
        self.names = names
        self.dim = start
        self.numeric = [j for j, c in enumerate(self.columns) if c.kind == "numeric"]
        self.categorical = [j for j, c in enumerate(self.columns) if c.kind == "categorical"]

    # ------------------------------------------------------------------ parameter kinds
    def kinds(self) -> np.ndarray:
        """Per parameter: 0 regression coefficient, 1 log sd, 2 logit coefficient."""
        out = np.zeros(self.dim, dtype=int)
        for j, a, b, _ in self.blocks:
            if self.columns[j].kind == "numeric":
                out[b - 1] = 1
            else:
                out[a:b] = 2
        return out

    # ------------------------------------------------------------------ simulation
    def simulate(self, theta: np.ndarray, z: np.ndarray, u: np.ndarray):
        """Synthetic sets for each row of ``theta`` (C × dim) from the standard normals ``z``
        (m × n × p_num) and uniforms ``u`` (m × n × p_cat): numeric values (C × m × p_num × n) and
        categorical codes (C × m × p_cat × n), one contiguous row per column.

        The state is *centred*: a numeric predictor enters as (x_k − c_k), c_k the first state
        coordinate of column k (see :meth:`raw`), which decouples intercepts from slopes."""
        theta = np.atleast_2d(theta)
        C = theta.shape[0]
        m, n = z.shape[0], z.shape[1]
        num = np.empty((C, m, len(self.numeric), n))
        cat = np.empty((C, m, len(self.categorical), n), dtype=np.int64)
        design = []  # centred predictor arrays (C, m, n)
        inum = icat = 0
        for j, a, b, q in self.blocks:
            col = self.columns[j]
            if col.kind == "numeric":
                coef = theta[:, a:b - 1]
                x = np.exp(theta[:, b - 1])[:, None, None] * z[None, :, :, inum]
                for k, f in enumerate(design, start=1):
                    x += coef[:, k, None, None] * f
                num[:, :, inum] = x + coef[:, 0, None, None]
                design.append(x * np.exp(-theta[:, b - 1])[:, None, None])  # (x_j − c_j)/σ_j
                inum += 1
            else:
                K = col.levels
                coef = theta[:, a:b].reshape(C, K - 1, q)
                eta = np.zeros((C, m, n, K))
                eta[..., 1:] = coef[:, None, None, :, 0]
                for k, f in enumerate(design, start=1):
                    eta[..., 1:] += coef[:, None, None, :, k] * f[..., None]
                eta -= eta.max(axis=-1, keepdims=True)
                p = np.exp(eta)
                cum = np.cumsum(p, axis=-1)
                code = (u[None, :, :, icat, None] * cum[..., -1:] > cum).sum(axis=-1)
                code = np.minimum(code, K - 1)
                cat[:, :, icat] = code
                for lev in range(1, K):
                    design.append((code == lev).astype(float))
                icat += 1
        return num, cat

    def raw(self, theta: np.ndarray) -> np.ndarray:
        """Model parameters → raw regression coefficients (log σ unchanged).

        The model is *centred and standardised*: a numeric predictor x_k enters as (x_k − c_k)/σ_k,
        c_k its column's intercept parameter and σ_k its residual sd, so a slope b̃ is per σ_k of the
        predictor and an intercept c_j is the mean of x_j at the centre of its numeric predictors.
        Then the raw slope is b̃/σ_k and the raw intercept β_j0 = c_j − Σ_k (b̃_k/σ_k) c_k. This keeps
        a column's conditional law fixed while its predictors move or rescale, which the sampler
        needs (otherwise shrinking σ_1 is a trap: x2 = … + b·(x1 − c1) stops depending on b)."""
        return self._convert(np.atleast_2d(theta), to_raw=True)

    def centred(self, raw: np.ndarray) -> np.ndarray:
        """Inverse of :meth:`raw`."""
        return self._convert(np.atleast_2d(raw), to_raw=False)

    def _convert(self, theta: np.ndarray, to_raw: bool) -> np.ndarray:
        out = theta.copy()
        C = len(theta)
        centres, scales = [], []  # per predictor dimension: c_k and σ_k (0 and 1 for dummies)
        for j, a, b, q in self.blocks:
            col = self.columns[j]
            cvec = np.array(centres).T if centres else np.zeros((C, 0))
            svec = np.array(scales).T if scales else np.zeros((C, 0))
            if col.kind == "numeric":
                coef = theta[:, a:b - 1][:, None, :]
            else:
                coef = theta[:, a:b].reshape(C, col.levels - 1, q)
            new = coef.copy()
            if to_raw:
                new[:, :, 1:] = coef[:, :, 1:] / svec[:, None, :]
                new[:, :, 0] = coef[:, :, 0] - (new[:, :, 1:] * cvec[:, None, :]).sum(axis=2)
            else:
                new[:, :, 1:] = coef[:, :, 1:] * svec[:, None, :]
                new[:, :, 0] = coef[:, :, 0] + (coef[:, :, 1:] * cvec[:, None, :]).sum(axis=2)
            if col.kind == "numeric":
                out[:, a:b - 1] = new[:, 0, :]
                centres.append(out[:, a] if not to_raw else theta[:, a])
                scales.append(np.exp(theta[:, b - 1]))
            else:
                out[:, a:b] = new.reshape(C, -1)
                centres += [np.zeros(C)] * (col.levels - 1)
                scales += [np.ones(C)] * (col.levels - 1)
        return out

    # ------------------------------------------------------------------ reporting
    def natural(self, theta: np.ndarray) -> dict:
        """Named parameters of one θ: regression coefficients, variances (and sd), logit coefficients."""
        out = {}
        for name, value, kind in zip(self.names, self.raw(theta)[0], self.kinds()):
            if kind == 1:
                col = name[: -len(": log sd")]
                out[f"{col}: var"] = float(np.exp(2 * value))
                out[f"{col}: sd"] = float(np.exp(value))
            else:
                out[name] = float(value)
        return out


class Prior:
    """Flat but proper public prior, and the MCMC state it is sampled in.

    Prior (on the model's centred, standardised parameters, see :meth:`SequentialModel.raw`):
    N(0, ``prior_var``) on each intercept c_j and each slope (per predictor sd); a half-normal with variance ``prior_var`` on each variance σ_j²
    (``prior_on="var"``, the paper's truncated N(0, 100 000)) or on each σ_j (``prior_on="sd"``);
    N(0, ``logit_prior_sd``²) on each logit coefficient.

    MCMC state: asinh(coefficient) and log σ. The asinh scale is linear near 0 and logarithmic far
    out, so one random-walk step can cross the prior's range (±1000) or resolve a posterior of width
    0.01 near the truth; the Jacobian (cosh, and dσ²/d log σ) is part of :meth:`logpdf`, so the target
    density of θ is unchanged.
    """

    def __init__(self, model: SequentialModel, prior_var: float, logit_prior_sd: float, prior_on: str):
        self.model = model
        self.kinds = model.kinds()
        self.prior_var = float(prior_var)
        self.logit_var = float(logit_prior_sd) ** 2
        self.prior_on = prior_on
        self.coef = self.kinds != 1

    def theta(self, state: np.ndarray) -> np.ndarray:
        """State → centred parameters θ (coefficients sinh(state), log σ as is)."""
        th = np.array(state, dtype=float, copy=True)
        th[:, self.coef] = np.sinh(th[:, self.coef])
        return th

    def state(self, theta: np.ndarray) -> np.ndarray:
        st = np.array(theta, dtype=float, copy=True)
        st[:, self.coef] = np.arcsinh(st[:, self.coef])
        return st

    def logpdf(self, state: np.ndarray) -> np.ndarray:
        """Log prior density (up to a constant) of states (C × dim), Jacobians included."""
        k = self.kinds
        th = self.theta(state)
        out = -0.5 * (th[:, k == 0] ** 2).sum(axis=1) / self.prior_var
        out -= 0.5 * (th[:, k == 2] ** 2).sum(axis=1) / self.logit_var
        out += np.log(np.cosh(state[:, self.coef])).sum(axis=1)  # d sinh(s)/ds
        eta = state[:, k == 1]
        if self.prior_on == "var":  # half-normal on σ², state log σ: |dσ²/dη| = 2σ²
            out += (-0.5 * np.exp(4 * eta) / self.prior_var + 2 * eta).sum(axis=1)
        else:  # half-normal on σ
            out += (-0.5 * np.exp(2 * eta) / self.prior_var + eta).sum(axis=1)
        return out

    def search_logpdf(self, state: np.ndarray) -> np.ndarray:
        """N(0, 3²) on each state coordinate (|θ| up to a few hundred, σ within e^±6): keeps the
        burn-in search from drifting out on the plateau. Not a prior: burn-in only."""
        return -(state ** 2).sum(axis=1) / 18.0

    def sample(self, rng: np.random.Generator, size: int) -> np.ndarray:
        """States drawn from the prior (the chains' dispersed, data-independent starts)."""
        k = self.kinds
        th = np.empty((size, len(k)))
        sd = math.sqrt(self.prior_var)
        th[:, k == 0] = rng.normal(0, sd, (size, int((k == 0).sum())))
        th[:, k == 2] = rng.normal(0, math.sqrt(self.logit_var), (size, int((k == 2).sum())))
        half = np.abs(rng.normal(0, sd, (size, int((k == 1).sum())))) + 1e-12
        th[:, k == 1] = 0.5 * np.log(half) if self.prior_on == "var" else np.log(half)
        return self.state(th)

    def proposal_scale(self) -> np.ndarray:
        """Initial random-walk step per state coordinate (adapted during burn-in)."""
        return np.where(self.coef, 1.0, 0.5)

    def in_range(self, state: np.ndarray) -> np.ndarray:
        """States whose simulation is numerically safe (|asinh θ| < 30, |log σ| < 30)."""
        return np.all(np.abs(state) < 30, axis=1)


# ====================================================================== the quality function
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
        from ..metrics.cart import RpartLikeTree

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


# ====================================================================== MCMC
def split_rhat(traces: np.ndarray) -> np.ndarray:
    """Split-R̂ (Gelman et al., BDA3 §11.4) per parameter from traces (chains × draws × dim)."""
    C, T, d = traces.shape
    h = T // 2
    if h < 2:
        return np.full(d, np.nan)
    x = np.concatenate([traces[:, :h], traces[:, h:2 * h]], axis=0)
    W = x.var(axis=1, ddof=1).mean(axis=0)
    B = h * x.mean(axis=1).var(axis=0, ddof=1)
    var = (h - 1) / h * W + B / h
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.sqrt(var / W)


def pmse_chains(search_terms, logpost, x0: np.ndarray, scale0: np.ndarray, n_search: int, n_adapt: int,
                n_sample: int, rng: np.random.Generator, keep_traces: bool = False, blocks: list | None = None,
                search_scale: float = 1.0):
    """Independent Metropolis chains (one per row of ``x0``), run in lock step; chains share nothing.

    1. ``n_search`` iterations of annealed component-wise adaptive Metropolis on the *search*
       density base(x) − k_t·v(x) (``search_terms(x)`` returns base and v): one coordinate per
       iteration, its step adapted by Robbins–Monro towards acceptance 0.44 (Haario et al. 2005),
       alternating with moves of one ``block`` (a model column's coordinates) at once; k_t grows
       geometrically from ``search_scale``/1000 to ``search_scale`` over the first 70 % of the
       search, so the chains first roam the base density and are then drawn into the deepest funnel.
    2. ``n_adapt`` iterations of adaptive Metropolis on ``logpost`` (the target): a full-covariance
       proposal from the second half of the chain's own history (Haario et al. 2001), step size
       adapted towards acceptance 0.234.
    3. ``n_sample`` iterations with the proposal frozen (a plain Metropolis chain with the target
       as stationary law); the last state is the chain's draw.

    Phases 1–2 are burn-in: any moves are allowed there, since only the target's stationary law
    matters for the release. ``logpost(x)`` and ``search_terms(x)`` return (values, û) per chain.
    Returns (last states, diagnostics dict).
    """
    C, d = x0.shape
    x = x0.copy()
    logs = np.tile(np.log(scale0), (C, 1))
    blocks = [np.asarray(b) for b in (blocks or [np.arange(d)])]
    log_f = np.zeros((C, len(blocks)))  # block-move step factors
    search_trace = [] if keep_traces else None
    base, su = search_terms(x) if n_search else (None, np.full(C, np.nan))
    warm = max(1, int(0.7 * n_search))
    for t in progress(range(n_search), "pMSE mechanism: MCMC burn-in search"):
        k_t = search_scale * 1e-3 ** max(0.0, 1.0 - t / warm)
        prop = x.copy()
        if t % 2 == 0:  # one coordinate
            k = (t // 2) % d
            prop[:, k] += np.exp(logs[:, k]) * rng.standard_normal(C)
        else:  # all coordinates of one model column (e.g. intercept, slope and sd moving together)
            b = (t // 2) % len(blocks)
            idx = blocks[b]
            prop[:, idx] += np.exp(logs[:, idx] + log_f[:, b:b + 1]) * rng.standard_normal((C, len(idx)))
        base_prop, su_prop = search_terms(prop)
        log_alpha = _log_alpha(base_prop - k_t * su_prop, base - k_t * su)
        acc = np.log(rng.random(C)) < log_alpha
        x = np.where(acc[:, None], prop, x)
        base = np.where(acc, base_prop, base)
        su = np.where(acc, su_prop, su)
        if keep_traces:
            search_trace.append(np.c_[x, su])
        gain = min(1.0, 3.0 / math.sqrt(t // (2 * d) + 1))
        if t % 2 == 0:
            logs[:, k] += gain * (np.exp(log_alpha) - 0.44)
        else:
            log_f[:, b] += gain * (np.exp(log_alpha) - 0.3)

    lp, u = logpost(x)
    n_main = n_adapt + n_sample
    hist = np.empty((C, n_main + 1, d))
    hist[:, 0] = x
    u_trace = np.empty((C, n_main + 1))
    u_trace[:, 0] = u
    chol = np.zeros((C, d, d))
    chol[:, np.arange(d), np.arange(d)] = np.exp(logs)
    log_lam = np.zeros(C)
    floor = np.diag((1e-4 * scale0) ** 2)
    accepted = np.zeros(C)
    for t in progress(range(1, n_main + 1), "pMSE mechanism: MCMC"):
        prop = x + np.exp(log_lam)[:, None] * np.einsum("cij,cj->ci", chol, rng.standard_normal((C, d)))
        lp_prop, u_prop = logpost(prop)
        log_alpha = _log_alpha(lp_prop, lp)
        acc = np.log(rng.random(C)) < log_alpha
        x = np.where(acc[:, None], prop, x)
        lp = np.where(acc, lp_prop, lp)
        u = np.where(acc, u_prop, u)
        hist[:, t] = x
        u_trace[:, t] = u
        if t <= n_adapt:
            log_lam += min(1.0, 5.0 / math.sqrt(t)) * (np.exp(log_alpha) - 0.234)
            if t >= 40 and t % 20 == 0:
                window = hist[:, t // 2: t + 1]
                for c in range(C):
                    cov = np.cov(window[c], rowvar=False).reshape(d, d) * (2.38 ** 2 / d) + floor
                    try:
                        chol[c] = np.linalg.cholesky(cov)
                        log_lam[c] = 0.0
                    except np.linalg.LinAlgError:
                        pass
        else:
            accepted += acc
    diag = {"acceptance": accepted / max(n_sample, 1),
            "rhat": split_rhat(hist[:, n_adapt + 1:]) if n_sample >= 4 else np.full(d, np.nan),
            "final_u": u, "search_u": su}
    if keep_traces:
        diag["search_trace"] = np.array(search_trace).transpose(1, 0, 2) if search_trace else None
        diag["state_trace"] = hist
        diag["u_trace"] = u_trace
    return x, diag


def _log_alpha(lp_prop, lp):
    out = np.minimum(0.0, lp_prop - lp)
    return np.where(np.isfinite(out), out, -np.inf)


# ====================================================================== the generator
class PMSEMechanism(Generator):
    """The pMSE mechanism (see the module docstring for the model, the proof and the options).

    Parameters
    ----------
    epsilon : total budget; each of the ``n_releases`` parameter draws costs ε/n_releases.
    model : "sequential-linear" (the only model).
    tree : "stump" (default; the optimal two-leaf partition over a data-independent family, provable
        Δu = 1/(2n)) or "paper" (rpart-like greedy CART, maxdepth 5, cp 0.01: the paper's
        implementation, heuristic).
    n_releases : number of parameter draws θ_1..θ_l.
    sampler : "exact" (default; exponential mechanisms over finite public candidate sets, sampled
        exactly, :mod:`dpsynth.generators.pmse_exact`) or "metropolis-approximate" (the paper's
        MCMC; flags the ledger: no guarantee for a finite chain).
    n_candidates : exact sampler: public stage-1 candidates (default 2000, shared by the releases;
        each later stage draws n_candidates // 4). Cost ≈ (n_candidates + n_releases·(n_stages − 1)·
        n_candidates/4) evaluations of û, ≈ 1 ms each at n = 5000.
    n_stages : exact sampler: stages per release (default 4; 1 = a single finite-candidate mechanism).
    features : "pairs" (default) or "columns": the partition family of the stump.
    n_synth : synthetic sets per θ in û (the paper used 25; the common random numbers make a few enough).
    n_search, n_adapt, n_sample : metropolis-approximate only: burn-in search, burn-in adaptation,
        then with the proposal frozen (the last state is released); see :func:`pmse_chains`.
        Defaults 100·d, 100·d and 60·d for d parameters (500, 500, 300 for the paper's model).
    prior_var, logit_prior_sd, prior_on : the public prior (see the module docstring).
    delta_u : None (1/(2n) for the stump, 1/n for "paper"), "paper" (1/n), or a number.
    cart : options for the "paper" tree (maxdepth, cp, minsplit, minbucket).
    order : column order of the sequential model (default: the schema's).
    keep_diagnostics : keep diagnostics in ``diagnostics_`` (MCMC traces, or the candidates' û; data-
        dependent, so this flags the ledger as not private).
    """

    method = "pmse"
    relation = "replace-one"
    needs_bounds = False
    encodes_rows = False

    def __init__(self, epsilon: float, delta: float | None = None, *, model: str = "sequential-linear",
                 tree: str = "stump", n_releases: int = 10, features: str = "pairs", n_synth: int = 1,
                 sampler: str = "exact", n_candidates: int | None = None, n_stages: int | None = None,
                 n_search: int | None = None, n_adapt: int | None = None, n_sample: int | None = None,
                 prior_var: float = 1e5,
                 logit_prior_sd: float = 10.0, prior_on: str = "var", delta_u=None, cart: dict | None = None,
                 order: list | None = None, keep_diagnostics: bool = False):
        super().__init__(epsilon, delta)
        if model not in MODELS:
            raise ValueError(f"model must be one of {list(MODELS)}, got {model!r}")
        if tree not in TREES:
            raise ValueError(f"tree must be 'stump' (provable) or 'paper' (heuristic greedy CART), got {tree!r}")
        if features not in FEATURES:
            raise ValueError(f"features must be one of {list(FEATURES)}, got {features!r}")
        if prior_on not in ("var", "sd"):
            raise ValueError(f"prior_on must be 'var' or 'sd', got {prior_on!r}")
        if sampler not in SAMPLERS:
            raise ValueError(f"sampler must be 'exact' (default) or 'metropolis-approximate', got {sampler!r}")
        mcmc = {k: v for k, v in (("n_search", n_search), ("n_adapt", n_adapt), ("n_sample", n_sample)) if v is not None}
        grid = {k: v for k, v in (("n_candidates", n_candidates), ("n_stages", n_stages)) if v is not None}
        if sampler == "exact" and mcmc:
            raise ValueError(f"{sorted(mcmc)} set the MCMC chain: pass sampler='metropolis-approximate' too, or "
                             "use n_candidates / n_stages for the exact sampler")
        if sampler != "exact" and grid:
            raise ValueError(f"{sorted(grid)} set the exact sampler: drop them or use sampler='exact'")
        self.model, self.tree, self.features, self.prior_on = model, tree, features, prior_on
        self.sampler = sampler
        self.n_candidates = _positive_int(2000 if n_candidates is None else n_candidates, "n_candidates")
        self.n_stages = _positive_int(4 if n_stages is None else n_stages, "n_stages")
        self.n_releases = _positive_int(n_releases, "n_releases")
        self.n_synth = _positive_int(n_synth, "n_synth")
        self.n_search = None if n_search is None else _count(n_search, "n_search")
        self.n_adapt = None if n_adapt is None else _count(n_adapt, "n_adapt")
        self.n_sample = None if n_sample is None else _positive_int(n_sample, "n_sample")
        for name, v in (("prior_var", prior_var), ("logit_prior_sd", logit_prior_sd)):
            if isinstance(v, bool) or not isinstance(v, numbers.Real) or not math.isfinite(v) or v <= 0:
                raise ValueError(f"{name} must be a positive number, got {v!r}")
        self.prior_var, self.logit_prior_sd = float(prior_var), float(logit_prior_sd)
        if delta_u is not None and delta_u != "paper":
            if isinstance(delta_u, bool) or not isinstance(delta_u, numbers.Real) or not delta_u > 0:
                raise ValueError(f"delta_u must be None, 'paper' or a positive number, got {delta_u!r}")
        self.delta_u = delta_u
        self.cart = {"maxdepth": 5, "cp": 0.01, "minsplit": 2, "minbucket": 1, **(cart or {})}
        self.order = None if order is None else [str(c) for c in order]
        self.keep_diagnostics = bool(keep_diagnostics)

    # ------------------------------------------------------------------ fitting
    def sensitivity(self, n: int) -> float:
        """Δu used in the density: 1/(2n) (proved, stump), 1/n (the paper's), or the given number."""
        if isinstance(self.delta_u, numbers.Real):
            if self.tree == "stump" and self.delta_u < 1.0 / (2 * n):
                raise ValueError(f"delta_u = {self.delta_u:g} is below the proved sensitivity 1/(2n) = {1 / (2 * n):g}; "
                                 "leave delta_u=None")
            return float(self.delta_u)
        if self.delta_u == "paper" or self.tree == "paper":
            return 1.0 / n
        return 1.0 / (2 * n)

    def _layout(self, data: pd.DataFrame) -> list[_Col]:
        names = list(self.schema_.names)
        if self.order is not None:
            if sorted(self.order) != sorted(names):
                raise ValueError(f"order must list each schema column once; got {self.order}, schema has {names}")
            names = self.order
        cols = []
        for name in names:
            c = self.schema_[name]
            if c.is_categorical:
                if len(c.categories) < 2:
                    raise ValueError(f"categorical column {name!r} has one category; drop it (it is constant)")
                cols.append(_Col(name, "categorical", len(c.categories)))
            else:
                cols.append(_Col(name, "numeric", 0, bool(c.integer), c.lower, c.upper))
        return cols

    def _fit(self, codes, data, source):
        layout = self._layout(data)
        if data[[c.name for c in layout]].isna().to_numpy().any():
            raise ValueError("the pMSE mechanism needs complete rows: drop or impute the missing values first "
                             "(e.g. df.dropna()), or use a method that models missingness (privbayes-e, kamino-i)")
        model = SequentialModel(layout)
        num_names = [layout[j].name for j in model.numeric]
        cat_names = [layout[j].name for j in model.categorical]
        n = len(data)  # public under replace-one
        real_num = data[num_names].apply(pd.to_numeric).to_numpy(dtype=float) if num_names else np.zeros((n, 0))
        real_cat = (self.schema_.subset(cat_names).encode(data[cat_names]) if cat_names
                    else np.zeros((n, 0), dtype=np.int64))
        if not np.all(np.isfinite(real_num)):
            raise ValueError("numeric columns must be finite (no inf)")

        d = model.dim  # chain lengths scale with the number of parameters (public)
        n_search = 100 * d if self.n_search is None else self.n_search
        n_adapt = 100 * d if self.n_adapt is None else self.n_adapt
        n_sample = 60 * d if self.n_sample is None else self.n_sample
        rng = source.numpy  # public randomness: candidates or starts first (they do not depend on n), then CRN
        prior = Prior(model, self.prior_var, self.logit_prior_sd, self.prior_on)
        exact = self.sampler == "exact"
        starts = (pmse_exact.draw_candidates(prior, rng, self.n_candidates) if exact
                  else prior.sample(rng, self.n_releases))
        z = rng.standard_normal((self.n_synth, n, len(num_names)))
        u = rng.random((self.n_synth, n, len(cat_names)))
        # the first column, if numeric, is c + σ z: its synthetic order is the order of z
        orders = {0: np.argsort(z[:, :, 0], axis=1)} if layout[0].kind == "numeric" else None

        stump = StumpPMSE(model, real_num, real_cat, self.features)
        quality = stump if self.tree == "stump" else CartPMSE(model, real_num, real_cat, **self.cart)
        du = self.sensitivity(n)
        eps_r = self.epsilon / self.n_releases
        scale = eps_r / (2.0 * du)

        def u_hat(states):
            num, cat = model.simulate(prior.theta(states), z, u)
            return quality(num, cat, orders=orders).mean(axis=1)

        proved = self.tree == "stump" and self.delta_u is None
        if self.tree == "stump":
            what = ("best two-leaf partition over a data-independent family; Δu = 1/(2n) proved (replace-one)"
                    if proved else f"best two-leaf partition; Δu = {du:.3g} as given")
        else:
            what = ("HEURISTIC: greedy rpart-like CART (maxdepth {maxdepth}, cp {cp}) can exceed the paper's "
                    "Δu = 1/n (paper's Table 1)".format(**self.cart))
        self.diagnostics_ = None
        if exact:
            shares, spreads = pmse_exact.stage_plan(self.n_stages)
            self.sampler_settings_ = {"sampler": "exact", "n_candidates": self.n_candidates,
                                      "n_stages": self.n_stages, "stage_shares": shares.tolist(),
                                      "stage_spreads": [None] + spreads[1:].tolist(),
                                      "box": [x.tolist() for x in pmse_exact.candidate_box(prior)]}
            note = (f"u = mean pMSE over {self.n_synth} synthetic set(s), {what}; exact: exponential mechanism over "
                    "finite public candidates (McSherry & Talwar 2007), base measure = the public candidate "
                    "distribution")
            out = pmse_exact.exact_releases(u_hat, prior, starts, rng, source, self.ledger, epsilon_r=eps_r,
                                            sensitivity=du, n_releases=self.n_releases, n_stages=self.n_stages,
                                            relation=self.relation, note=note, progress=progress)
            states = out["states"]
            self.candidates_, self.release_index_ = prior.theta(starts), out["index"]
            if self.keep_diagnostics:
                self.diagnostics_ = {"candidate_u": out["candidate_u"], "stage_u": out["stage_u"]}
                self.ledger.flag("candidate scores kept (keep_diagnostics=True): û at every candidate is a function "
                                 "of the data and is not covered by the guarantee")
        else:
            states = self._metropolis(model, prior, stump, u_hat, z, u, orders, starts, scale, du, eps_r, what,
                                      (n_search, n_adapt, n_sample), rng)
        if self.tree == "paper":
            self.ledger.flag("pMSE mechanism with tree='paper' (greedy CART): the sensitivity bound is heuristic, "
                             "so the ε above is not a guarantee")
        self.model_ = model
        self.theta_ = prior.theta(states)
        self.n_ = n
        self.sensitivity_ = du

    def _metropolis(self, model, prior, stump, u_hat, z, u, orders, starts, scale, du, eps_r, what, iters, rng):
        """sampler="metropolis-approximate": one chain per release (see :func:`pmse_chains`); flags the ledger."""
        n_search, n_adapt, n_sample = iters

        def terms(states, q, base):
            ok = prior.in_range(states)
            val = np.full(len(states), 0.25)
            if ok.any():
                val[ok] = q(states[ok])
            return np.where(ok, base(states), -np.inf), val

        def density(states):
            base, val = terms(states, u_hat, prior.logpdf)
            return base - scale * val, val

        def u_search(states):
            num, cat = model.simulate(prior.theta(states), z, u)
            return stump.feature_pmse(num, cat, orders=orders).mean(axis=(1, 2))

        self.sampler_settings_ = {"sampler": "metropolis-approximate", "n_search": n_search, "n_adapt": n_adapt,
                                  "n_sample": n_sample, "proposal_scale": prior.proposal_scale().tolist(),
                                  "search_sharpness": SEARCH_SHARPNESS, "starts": starts.tolist()}
        mech = "exponential mechanism (MCMC, approximate)"
        note = (f"u = mean pMSE over {self.n_synth} synthetic set(s), {what}; approximate (MCMC): guarantee is for "
                f"the exact density, chain error not accounted ({n_search} search + {n_adapt} adaptive + "
                f"{n_sample} fixed Metropolis iterations from a prior draw)")
        start_u = u_hat(starts)
        for i in range(self.n_releases):
            step = f"release {i + 1}/{self.n_releases}: θ ~ exp(−ε u/(2Δu)) (pMSE mechanism)"
            self.ledger.spend(step, mech, epsilon=eps_r, sensitivity=du, relation=self.relation, norm="Linf",
                              note=note)
            observe_noise_input(step, mech, start_u[i:i + 1], du, "Linf")
        self.ledger.flag("pMSE mechanism with sampler='metropolis-approximate': a finite MCMC chain is not an exact "
                         "draw from the exponential mechanism, so the ε above is not a guarantee")
        # Search density (burn-in only): the mean pMSE over the features (it improves as soon as any
        # feature does, where the target waits for the worst one), annealed up to SEARCH_SHARPNESS per
        # unit of pMSE, with a N(0, 3²) on the state instead of the prior, whose asinh/log Jacobian
        # pulls the state outwards, where the prior's mass is.
        states, diag = pmse_chains(lambda s: terms(s, u_search, prior.search_logpdf), density, starts,
                                   prior.proposal_scale(), n_search, n_adapt, n_sample, rng,
                                   keep_traces=self.keep_diagnostics,
                                   blocks=[np.arange(a, b) for _, a, b, _ in model.blocks],
                                   search_scale=SEARCH_SHARPNESS)
        if self.keep_diagnostics:
            diag["start_u"] = start_u
            diag["param_names"] = list(model.names)
            self.diagnostics_ = diag
            self.ledger.flag("MCMC diagnostics kept (keep_diagnostics=True): chain traces and acceptance rates are "
                             "functions of the whole chains and are not covered by the guarantee")
        return states

    # ------------------------------------------------------------------ results
    def parameters(self) -> pd.DataFrame:
        """The released parameter draws, one row per release, variances and sds named explicitly."""
        if not getattr(self, "fitted_", False):
            raise ValueError("PMSEMechanism is not fitted; call .fit(df, schema) first")
        return pd.DataFrame([self.model_.natural(t) for t in self.theta_])

    def sample(self, n: int | None = None, m: int = 1, seed: int | None = None):
        if getattr(self, "fitted_", False) and isinstance(m, numbers.Integral) and m > self.n_releases:
            warnings.warn(f"m = {m} datasets from {self.n_releases} released parameter draws: datasets "
                          f"{self.n_releases + 1}..{m} re-use draws (no extra privacy cost, no new information); "
                          "fit with n_releases = m for independent draws", stacklevel=2)
        return super().sample(n=n, m=m, seed=seed)

    def _sample_frame(self, n: int, rng: np.random.Generator, index: int) -> pd.DataFrame:
        theta = self.theta_[index % self.n_releases]
        model = self.model_
        z = rng.standard_normal((1, n, len(model.numeric)))
        u = rng.random((1, n, len(model.categorical)))
        num, cat = model.simulate(theta[None, :], z, u)
        data = {}
        for k, j in enumerate(model.numeric):
            col = model.columns[j]
            x = num[0, 0, k].copy()
            if col.integer:
                x = np.round(x)
            if col.lower is not None:
                x = np.clip(x, col.lower, col.upper)
            data[col.name] = x
        for k, j in enumerate(model.categorical):
            col = model.columns[j]
            spec = self.schema_[col.name]
            data[col.name] = pd.Categorical.from_codes(cat[0, 0, k], categories=list(spec.categories),
                                                       ordered=spec.ordered)
        return pd.DataFrame(data)[self.schema_.names]


def _count(value, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 0:
        raise ValueError(f"{name} must be a non-negative integer, got {value!r}")
    return int(value)


def _positive_int(value, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")
    return int(value)


__all__ = ["PMSEMechanism", "SequentialModel", "StumpPMSE", "CartPMSE", "Prior", "pmse_chains", "split_rhat"]
