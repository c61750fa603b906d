"""Checks of what the caller passes to the schema, with messages that say what to fix: the data frame
(:func:`check_frame`), per-column arguments (:func:`name_map`, :func:`bound_number`) and the errors for
undeclared or unknown domains (worded for Python or for dpsynthr's ``dp_schema()``)."""
from __future__ import annotations

import math
from typing import Mapping

import numpy as np
import pandas as pd


def check_frame(df, allow_empty: bool = False) -> None:
    if not isinstance(df, pd.DataFrame):
        raise TypeError(f"expected a pandas DataFrame, got {type(df).__name__}; "
                        "wrap your data with pd.DataFrame(...) (generators also take a Parquet/CSV path, a DuckDB "
                        "relation or a Spark DataFrame)")
    if df.shape[0] == 0 and not allow_empty:
        raise ValueError("the data frame has no rows; pass the private table with at least one row")
    if df.shape[1] == 0:
        raise ValueError("the data frame has no columns")
    names = [str(c) for c in df.columns]
    dup = sorted({c for c in names if names.count(c) > 1})
    if dup:
        raise ValueError(f"duplicate column names {dup}; rename them so that each column name is unique")


def unknown_categories_message(name: str, listing: str) -> str:
    """The error for values outside a categorical column's public categories; ``listing`` says how
    to list them where the data live. It names no value (the check is about the domain)."""
    return (f"column {name!r} has values outside the schema's categories; list them with {listing} and add them "
            "to the schema's category list (from public documentation) or recode them")


def name_map(x, what: str, names, syntax: str = "python") -> dict:
    if x is None:
        return {}
    if not isinstance(x, Mapping):
        if syntax == "r":  # dpsynthr's dp_schema()
            example = 'c("a", "b")' if what == "levels" else "c(0, 100)"
            raise TypeError(f"`{what}` must be a named list, e.g. {what} = list(age = {example})")
        raise TypeError(f"{what} must be a dict keyed by column name, e.g. {what}={{'age': ...}}; "
                        f"got {type(x).__name__}")
    unknown = [str(k) for k in x if str(k) not in names]
    if unknown:
        raise ValueError(f"{what} names columns {unknown} that are not in the data; the columns are {names}")
    return {str(k): v for k, v in x.items()}


def bound_number(v, name):
    if isinstance(v, bool) or not isinstance(v, (int, float, np.integer, np.floating)) or not math.isfinite(v):
        raise ValueError(f"bounds for {name!r} must be finite numbers; got {v!r}")
    return v.item() if isinstance(v, np.generic) else v


def missing_domains_message(need_bounds, need_levels, syntax: str = "python") -> str:
    if syntax == "r":  # dpsynthr's dp_schema()
        return "\n".join(
            ([f"numeric columns without bounds: {', '.join(need_bounds)}; declare public bounds:",
              "  dp_schema(data, bounds = list(" + ", ".join(f"{n} = c(lo, hi)" for n in need_bounds) + "))"]
             if need_bounds else [])
            + ([f"character columns without categories: {', '.join(need_levels)}; declare them with "
                "levels = list(...) or make them factors"] if need_levels else [])
            + ["or learn them under differential privacy (charged to every release's ledger): dp_schema(data, "
               "epsilon = 0.1" + (", delta = 1e-6" if need_levels else "") + ")"])
    parts = []
    if need_bounds:
        example = ", ".join(f"{n!r}: (lo, hi)" for n in need_bounds)
        parts.append(f"numeric columns {need_bounds} have no bounds: declare public ones with "
                     f"bounds={{{example}}}")
    if need_levels:
        example = ", ".join(f"{n!r}: [...]" for n in need_levels)
        parts.append(f"text columns {need_levels} have no categories: declare them with levels={{{example}}} "
                     "(or make them pandas categoricals)")
    return ("; ".join(parts) + "; or learn them under differential privacy with epsilon= (e.g. epsilon=0.1"
            + (", delta=1e-6" if need_levels else "") + "), which is charged to every release's ledger. "
            "dpsynth never reads domains from the private rows for free.")
