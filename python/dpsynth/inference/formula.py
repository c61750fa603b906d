"""The model side of a pooled fit: the family (OLS or a GLM) and the outcome's coding.

`resolve_family` turns "gaussian" / "binomial" / "poisson" or a statsmodels family into a
`Family`; `outcome_column` reads the outcome's name from a patsy formula's left-hand side, and
`outcome_coding` / `code_outcome` code a two-level non-numeric outcome 0/1 with the second level
= 1, as R's ``glm`` does (levels: the categories of a pandas Categorical, else the sorted distinct
values). Used by `fit.fit_pooled` and `compare.compare_fit`.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
import pandas as pd

_OUTCOME_RE = re.compile(r"""^\s*(?:Q\(\s*(['"])(?P<quoted>.+)\1\s*\)|(?P<bare>[A-Za-z_][A-Za-z0-9_.]*))\s*$""")


@dataclass(frozen=True)
class Family:
    name: str           # "gaussian", "binomial", "poisson" or the statsmodels class name
    label: str          # for summaries
    sm_family: object   # None → OLS

    @property
    def is_binomial(self) -> bool:
        import statsmodels.api as sm
        return isinstance(self.sm_family, sm.families.Binomial)


def resolve_family(family) -> Family:
    """"gaussian" (OLS), "binomial" (logit GLM), "poisson" (log GLM), or a statsmodels family."""
    import statsmodels.api as sm
    if isinstance(family, sm.families.Family):
        link = type(family.link).__name__.lower()
        return Family(type(family).__name__.lower(), f"GLM {type(family).__name__} ({link})", family)
    if not isinstance(family, str):
        raise TypeError(f"family must be 'gaussian', 'binomial', 'poisson' or a statsmodels family; "
                        f"got {type(family).__name__}")
    key = family.lower()
    if key in ("gaussian", "ols", "normal"):
        return Family("gaussian", "OLS", None)
    if key in ("binomial", "logit", "logistic"):
        return Family("binomial", "GLM Binomial (logit)", sm.families.Binomial())
    if key == "poisson":
        return Family("poisson", "GLM Poisson (log)", sm.families.Poisson())
    raise ValueError(f"unknown family {family!r}; use 'gaussian' (OLS), 'binomial', 'poisson' or a "
                     "statsmodels family instance such as sm.families.Gamma()")


def outcome_column(formula: str, columns) -> str | None:
    """The outcome's column name when the left-hand side is a plain name or Q("name")."""
    if not isinstance(formula, str) or "~" not in formula:
        raise ValueError(f"formula must be a string 'outcome ~ terms' (patsy syntax); got {formula!r}")
    match = _OUTCOME_RE.match(formula.split("~", 1)[0])
    if match is None:
        return None
    name = match.group("quoted") or match.group("bare")
    return name if name in columns else None


def outcome_coding(frames, name: str, family: Family):
    """The (level0, level1) pair for a non-numeric binomial outcome, or None when it is numeric."""
    col = frames[0][name]
    if pd.api.types.is_numeric_dtype(col) and not pd.api.types.is_bool_dtype(col):
        return None
    if isinstance(col.dtype, pd.CategoricalDtype):
        levels = list(col.dtype.categories)
    elif pd.api.types.is_bool_dtype(col):
        levels = [False, True]
    else:
        levels = sorted({v for f in frames for v in f[name].dropna().unique()}, key=str)
    if family.name in ("gaussian", "poisson") or not family.is_binomial:
        raise ValueError(f"outcome {name!r} is not numeric; family {family.name!r} needs a numeric "
                         "outcome (use family='binomial' for a two-level outcome)")
    if len(levels) != 2:
        raise ValueError(f"binomial outcome {name!r} has {len(levels)} levels {levels[:6]}; it needs "
                         "exactly 2 (recode it, e.g. df[col] == level, before fitting)")
    return levels[0], levels[1]


def code_outcome(frame: pd.DataFrame, name: str, levels) -> pd.DataFrame:
    """A copy of frame with the outcome as float 0/1 (levels[1] = 1); other values → error."""
    col = frame[name]
    values = col.astype(object)
    known = values.isna() | values.isin(list(levels))
    if not known.all():
        bad = values[~known].unique()[:3]
        raise ValueError(f"outcome {name!r} has values {list(bad)} outside its two levels {list(levels)}")
    coded = np.where(values.isna(), np.nan, (values == levels[1]).astype(float))
    out = frame.copy()
    out[name] = coded.astype(float)
    return out
