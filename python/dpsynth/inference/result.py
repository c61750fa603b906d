"""`PooledResult`: the pooled coefficients of one model fitted to m datasets, read like statsmodels.

The table in mice's columns (`to_frame`), a statsmodels ``Summary`` naming the rule (`summary`),
the notes a reader needs (`notes`), the joint covariance and D1 test over the datasets valid for
every estimable term (`cov_params`, `wald_test`), and the per-dataset pieces for a test made later
(`per_dataset`). Built by `fit.fit_pooled` and `fit.pool_fits`.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from .rules import NESTED_RULES, RULES, SYNTHETIC_LIKE, d1_from_moments, select_terms

SMALL_DF = 3.0  # the synthetic rules' screen: df below this gets a note (b barely exceeds ubar)


def _fmt(value) -> str:
    """Summary number format: 4 decimals, scientific for very large or tiny non-zero values."""
    if isinstance(value, str):
        return value
    if not np.isfinite(value):
        return str(value)
    if value != 0 and (abs(value) >= 1e6 or abs(value) < 1e-4):
        return f"{value:.3e}"
    return f"{value:.4f}"


class PooledResult:
    """Pooled coefficients of one model fitted to m datasets.

    Attributes: ``rule``, ``formula``, ``family``, ``m`` (datasets given), ``terms``, ``fits``
    (one `DatasetFit` per dataset), ``dropped`` (DataFrame: dataset, term, reason; term None = whole
    dataset), ``dfcom``, ``n_ratio`` (n_syn/n_orig of the fallback), ``conf_level``, ``outcome_note``,
    ``congeniality`` (what the formula needs that the generator's released queries do not carry;
    empty when they carry it all or the queries are unknown).
    Methods: ``to_frame()`` (mice's columns), ``summary()`` (statsmodels Summary), ``params``,
    ``bse``, ``pvalues``, ``conf_int()``, ``cov_params()``, ``wald_test(terms)``, ``per_dataset()``.
    """

    def __init__(self, *, table, rule, formula, family, fits, dropped, dfcom, n_ratio, conf_level,
                 shape, cov, complete_moments, outcome_note, congeniality=(), screened=None):
        self.rule, self.formula, self.family, self.fits, self.dropped = rule, formula, family, fits, dropped
        self.dfcom, self.n_ratio, self.conf_level, self.shape = dfcom, n_ratio, conf_level, shape
        self.outcome_note, self.congeniality = outcome_note, list(congeniality)
        self._table, self._cov, self._moments = table, cov, complete_moments
        self._screened = screened  # (estimates, valid): datasets x terms, after the screens

    # statsmodels-like accessors
    @property
    def m(self) -> int:
        return len(self.fits)

    @property
    def terms(self) -> list:
        return list(self._table["term"])

    def _column(self, name: str) -> pd.Series:
        return pd.Series(self._table[name].to_numpy(), index=self.terms, name=name)

    @property
    def params(self) -> pd.Series:
        return self._column("estimate")

    @property
    def bse(self) -> pd.Series:
        return self._column("std.error")

    @property
    def pvalues(self) -> pd.Series:
        return self._column("p.value")

    def conf_int(self) -> pd.DataFrame:
        """Intervals at ``conf_level`` (columns conf.low, conf.high), as in the table."""
        return self._table.set_index("term")[["conf.low", "conf.high"]].copy()

    def cov_params(self) -> pd.DataFrame:
        """The rule's total covariance matrix T, from the datasets in which every estimable term is
        valid (terms never estimated are left out). For the synthetic rules it can be indefinite;
        the table's per-term t applies the T ≤ 0 fallback."""
        if self._cov is None:
            raise ValueError("fewer than 2 datasets are valid for every estimable term; no joint covariance")
        joint = self._moments[0]
        return pd.DataFrame(self._cov, index=joint, columns=joint)

    def to_frame(self) -> pd.DataFrame:
        """The pooled table: term, estimate, ubar, b, t, dfcom, df, riv, lambda, fmi, std.error,
        statistic, p.value, conf.low, conf.high, rule, m, fallback (a copy)."""
        return self._table.copy()

    def wald_test(self, terms=None, null=None) -> dict:
        """D1 test that the named coefficients (default: all estimable) equal ``null`` (default 0)
        jointly, over the datasets valid for every estimable term. See `dpsynth.inference.wald_test`."""
        if self._moments is None:
            raise ValueError("fewer than 2 datasets are valid for every estimable term; no joint test")
        if self.rule in NESTED_RULES:
            raise ValueError(f"the D1 test is not available for rule {self.rule!r}")
        joint, q, covs = self._moments
        idx = select_terms(joint, terms)
        q, covs = q[:, idx], covs[:, idx][:, :, idx]
        b = np.atleast_2d(np.cov(q, rowvar=False, ddof=1))
        out = d1_from_moments(self.rule, q.shape[0], q.mean(axis=0), covs.mean(axis=0), b, null=null,
                              dfcom=None if not np.isfinite(self.dfcom) else self.dfcom, ratio=self.n_ratio)
        out["terms"] = [joint[i] for i in idx]
        return out

    def per_dataset(self) -> dict:
        """The per-dataset pieces after the screens, for a joint test made later (dpsynthr keeps them
        in its pooled object for ``dp_wald``; `wald_per_dataset` tests them): ``terms`` (the table's);
        ``qhat`` (datasets x terms; NaN where a coefficient was not estimated or was screened out);
        ``uhat`` (per dataset a terms x terms covariance matrix, NaN where not estimated; None for a
        dropped dataset); ``nobs`` (rows used per dataset).

        >>> from dpsynth.inference import pool_fits
        >>> res = pool_fits([{"a": 1.0}, {"a": 1.2}, {"a": 0.9}], [[[0.04]], [[0.05]], [[0.04]]], df_resid=[49] * 3)
        >>> res.per_dataset()["qhat"].tolist()
        [[1.0], [1.2], [0.9]]
        """
        est, valid = self._screened
        terms = self.terms
        uhat = []
        for f in self.fits:
            if f.error is not None:
                uhat.append(None)
                continue
            u = pd.DataFrame(np.nan, index=terms, columns=terms)
            u.loc[list(f.cov.index), list(f.cov.columns)] = f.cov.to_numpy()
            uhat.append(u.to_numpy())
        return {"terms": terms, "qhat": np.where(valid, est, np.nan), "uhat": uhat,
                "nobs": [f.nobs for f in self.fits]}

    def _dropped_text(self) -> str:
        if self.dropped.empty:
            return "none"
        whole = self.dropped["term"].isna().sum()
        parts = self.dropped.dropna(subset=["term"])
        return f"{whole} datasets, {len(parts)} coefs"

    def notes(self) -> list[str]:
        """The notes a reader of the pooled table needs (the summary prints them; dpsynthr prints the
        same): outcome coding, rows dropped for missing values, fallback terms, the small-df screen,
        fit warnings, uncongeniality, what was dropped before pooling."""
        tab = self._table
        noted = {}
        for f in self.fits:
            for note in f.notes:
                key = note.split(":")[0]
                noted[key] = noted.get(key, 0) + 1
        missing = sum(f.n_missing for f in self.fits)
        notes = []
        if self.outcome_note:
            notes.append(self.outcome_note)
        if missing:
            notes.append(f"{missing} row(s) with missing model variables were dropped across the datasets.")
        if tab["fallback"].any():
            notes.append("* T <= 0: the variance is (n_syn/n_orig) x ubar "
                         f"(ratio {self.n_ratio:.3g}), df from the rule's formula (Reiter 2002).")
        if self.rule in SYNTHETIC_LIKE and (tab["df"] < SMALL_DF).any():
            notes.append(f"df < {SMALL_DF:g} for some terms: b barely exceeds ubar, so the intervals are very wide; "
                         "use more datasets (m of about 100 when n_syn = n) or larger ones.")
        if noted:
            notes.append("Fit warnings: " + "; ".join(f"{k} in {v} dataset(s)" for k, v in noted.items())
                         + " (see .fits[i].notes).")
        if self.congeniality:
            notes.append("UNCONGENIAL: the generator's released tables do not carry what this model estimates "
                         "(coefficients biased towards independence): " + "; ".join(self.congeniality) + ".")
        if not self.dropped.empty:
            counts = self.dropped["reason"].str.split(" [(]", n=1, regex=True).str[0].value_counts()
            notes.append("Dropped before pooling: " + "; ".join(f"{k}: {v}" for k, v in counts.items()) + ".")
        return notes

    def summary(self):
        """A statsmodels ``Summary`` (print it, or ``.as_text()`` / ``.as_html()``), naming the rule."""
        from statsmodels.iolib.summary2 import Summary
        tab = self._table
        level = self.conf_level
        lo, hi = f"[{(1 - level) / 2:.3g}", f"{1 - (1 - level) / 2:.3g}]"
        coef = pd.DataFrame({
            "Coef.": tab["estimate"].to_numpy(), "Std.Err.": tab["std.error"].to_numpy(),
            "t": tab["statistic"].to_numpy(), "P>|t|": tab["p.value"].to_numpy(),
            lo: tab["conf.low"].to_numpy(), hi: tab["conf.high"].to_numpy(),
            "df": tab["df"].to_numpy(), "riv": tab["riv"].to_numpy(),
        }, index=[t + (" *" if fb else "") for t, fb in zip(tab["term"], tab["fallback"])])
        if self.rule == "mi":
            coef["FMI"] = tab["fmi"].to_numpy()
        if (tab["m"] != self.m).any():
            coef["m"] = [str(int(v)) for v in tab["m"]]
        nobs = [f.nobs for f in self.fits if f.error is None]
        info = {
            "Combining rule:": self.rule,
            "Model:": self.family.label,
            "Dependent variable:": self.formula.split("~", 1)[0].strip(),
            "Datasets (m):": (str(self.m) if self.shape is None
                              else f"{self.m} ({self.shape[0]} imputations × {self.shape[1]})"),
            "Rows per dataset:": f"{np.mean(nobs):.0f}" if nobs else "-",
            "dfcom:": f"{self.dfcom:.0f}" if np.isfinite(self.dfcom) else "inf",
            "Dropped:": self._dropped_text(),
        }
        if self.rule in SYNTHETIC_LIKE or tab["fallback"].any():
            info["Fallback terms:"] = str(int(tab["fallback"].sum()))
        s = Summary()
        s.add_title(f"Pooled {self.family.label} results, rule = {self.rule!r}")
        s.add_dict(info, ncols=2)
        s.add_df(coef.map(_fmt) if hasattr(coef, "map") else coef.applymap(_fmt))
        notes = [f"Rule: {RULES[self.rule]}.", f"Formula: {self.formula}"] + self.notes()
        for note in notes:
            s.add_text(note)
        return s

    def __repr__(self) -> str:
        return (f"<PooledResult rule={self.rule!r} family={self.family.name!r} m={self.m} "
                f"terms={len(self._table)} formula={self.formula!r}>")

