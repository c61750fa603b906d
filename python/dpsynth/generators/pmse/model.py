"""The pMSE mechanism's synthesiser g(θ) and its public prior (Snoke & Slavković, PSD 2018, §3).

- Synthesiser g(θ), ``model="sequential-linear"``: the columns in order; a numeric column is a Gaussian
  linear regression on the columns before it, x_j = β_j0 + Σ_k β_jk f_k + σ_j z; a categorical column
  is a multinomial logit on them (level 0 the reference). Predictors f_k: numeric values as they are,
  categorical columns as dummies of their levels 1..K−1. The paper's simulation model,
  X1 ~ N(θ1, θ2), X2 ~ N(θ3 + θ4·X1, θ5), is the special case of two numeric columns; variances are
  parameters (the generator's ``theta_`` reports variances; ``parameters()`` also gives sd).
- Synthetic sets are made from *common random numbers* (normal and uniform draws taken once, before
  any private row is read) turned into X^s(θ) deterministically by :meth:`SequentialModel.simulate`.
- π, a flat but proper public prior (:class:`Prior`): N(0, ``prior_var``) on every intercept and slope
  (``prior_var`` = 100 000 as in the paper, sd ≈ 316; intercepts are those of the centred model, the
  mean of x_j at the centre of its numeric predictors), a half-normal with variance ``prior_var`` on
  each variance (``prior_on="var"``, the paper's positive-truncated N(0, 100 000)) or on each sd
  (``prior_on="sd"``), N(0, ``logit_prior_sd``² = 100) on each logit coefficient. Nothing in the
  prior, the starts or the proposals is read from the data, so numeric columns need no bounds.
  Columns far outside ±1000 need a larger ``prior_var``.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class ModelColumn:
    """One column of the sequential model, read from the public schema."""

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

    def __init__(self, columns: list[ModelColumn]):
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
    N(0, ``prior_var``) on each intercept c_j and each slope (per predictor sd); a half-normal with
    variance ``prior_var`` on each variance σ_j² (``prior_on="var"``, the paper's truncated
    N(0, 100 000)) or on each σ_j (``prior_on="sd"``); N(0, ``logit_prior_sd``²) on each logit
    coefficient.

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


__all__ = ["ModelColumn", "SequentialModel", "Prior"]
