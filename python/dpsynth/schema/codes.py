"""Encoding and decoding against the public schema: category codes, binned numerics (:data:`MISSING` for
a missing cell), values drawn back from codes, and the output dtypes of synthetic columns
(:func:`output_dtype`, :func:`cast_to_schema`)."""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from .column import MISSING, Column

if TYPE_CHECKING:
    from .table import Schema


def category_lookup(col: Column) -> dict:
    table = {c: i for i, c in enumerate(col.categories)}
    # strings from CSV files and numbers from JSON should meet: '1' matches 1
    for i, c in enumerate(col.categories):
        table.setdefault(str(c), i)
    return table


def category_codes(s: pd.Series, col: Column) -> np.ndarray:
    table = category_lookup(col)
    if isinstance(s.dtype, pd.CategoricalDtype):
        cat_codes = np.array([table.get(c, table.get(str(c), -2)) for c in s.cat.categories], dtype=np.int64)
        raw = s.cat.codes.to_numpy()
        codes = np.where(raw < 0, MISSING, cat_codes[np.maximum(raw, 0)] if len(cat_codes) else MISSING)
        return codes.astype(np.int64)
    na = s.isna().to_numpy()
    vals = s.to_numpy(dtype=object)
    if pd.api.types.infer_dtype(vals, skipna=True) == "string":  # text (CSV, SQL): one hash lookup per cell
        text = {k: v for k, v in table.items() if isinstance(k, str)}
        mapped = pd.Series(vals).map(text).to_numpy(dtype=float, na_value=np.nan)
        return np.where(na, MISSING, np.where(np.isnan(mapped), -2, mapped)).astype(np.int64)
    codes = np.full(len(s), MISSING, dtype=np.int64)
    for i in np.flatnonzero(~na):
        v = vals[i]
        if isinstance(v, (float, np.floating)) and float(v).is_integer():
            v = int(v)
        codes[i] = table.get(v, table.get(str(v), -2))
    return codes


def encode_column(s: pd.Series, col: Column) -> np.ndarray:
    if col.is_categorical:
        return category_codes(s, col)
    x = pd.to_numeric(s, errors="coerce").to_numpy(dtype=float, na_value=np.nan)
    edges = col.edges()
    out = np.full(len(x), MISSING, dtype=np.int64)
    ok = ~np.isnan(x)
    xc = np.clip(x[ok], edges[0], edges[-1])
    out[ok] = np.clip(np.searchsorted(edges, xc, side="right") - 1, 0, len(edges) - 2)
    return out


def decode_column(codes: np.ndarray, col: Column, rng: np.random.Generator, values=None) -> pd.Series:
    miss = codes < 0
    if col.is_categorical:
        return pd.Series(pd.Categorical.from_codes(np.where(miss, -1, codes), categories=list(col.categories),
                                                   ordered=col.ordered))
    if values is not None:
        x = values.astype(float).copy()
    else:
        edges = col.edges()
        c = np.clip(codes, 0, len(edges) - 2)
        lo, hi = edges[c], edges[c + 1]
        u = rng.random(len(codes))
        if col.integer:  # uniform over the whole numbers inside [lo, hi)
            a = np.ceil(lo)
            b = np.maximum(np.ceil(hi) - 1, a)
            x = a + np.floor(u * (b - a + 1))
        else:
            x = lo + u * (hi - lo)
    if col.integer:
        x = np.floor(x)
    if col.has_bounds:
        x = np.clip(x, col.lower, col.upper)
    x[miss] = np.nan
    return pd.Series(x)


def output_dtype(col: Column):
    """The dtype of a synthetic column, from the public schema only (never from the private data):
    ``category`` with the schema's categories in schema order for a categorical column, except
    nullable ``Int64`` when every category is a whole number (codes such as 0/1 stay numbers, as
    analysts' formulas expect); nullable ``Int64`` for an integer numeric column, ``float64`` (NaN
    for missing) for a real one.

    >>> output_dtype(Column("age", "numeric", lower=0, upper=99, integer=True))
    Int64Dtype()
    >>> str(output_dtype(Column("sex", "categorical", categories=("F", "M"))))
    'category'
    """
    if col.is_categorical:
        if integer_categories(col):
            return pd.Int64Dtype()
        return pd.CategoricalDtype(list(col.categories), ordered=col.ordered)
    return pd.Int64Dtype() if col.integer else np.dtype("float64")


def integer_categories(col: Column) -> bool:
    return all(isinstance(c, (int, np.integer)) and not isinstance(c, (bool, np.bool_)) for c in col.categories)


def cast_to_schema(df: pd.DataFrame, schema: Schema) -> pd.DataFrame:
    """A copy of ``df`` whose schema columns have :func:`output_dtype`: the same dtypes whatever the
    private data were (whether any cell was missing, how the caller stored the column), so neither
    the synthetic data nor a saved generator reveal them. Other columns are left as they are.

    >>> from dpsynth.schema import Schema
    >>> s = Schema.from_dict({"g": {"type": "categorical", "categories": ["b", "a"]},
    ...                       "x": {"type": "numeric", "lower": 0, "upper": 9, "integer": True}})
    >>> cast_to_schema(pd.DataFrame({"g": ["a", None], "x": [1.0, 2.0]}), s).dtypes.astype(str).tolist()
    ['category', 'Int64']
    """
    out = {}
    for name in df.columns:
        s = df[name]
        if name not in schema.columns:
            out[name] = s
            continue
        col = schema[name]
        if col.is_categorical:
            codes = category_codes(s, col)
            if integer_categories(col):
                values = np.asarray(col.categories, dtype=np.int64)[np.maximum(codes, 0)]
                out[name] = pd.Series(pd.arrays.IntegerArray(values, codes < 0), index=s.index)
            else:
                out[name] = pd.Series(pd.Categorical.from_codes(codes, dtype=output_dtype(col)), index=s.index)
        else:
            x = pd.to_numeric(s).to_numpy(dtype=float, na_value=np.nan)
            if col.integer:  # whole numbers (decoded ones are already), built as Int64 directly:
                # pandas' astype checks every value's cast (11 ms a column of 32,561 rows)
                missing = np.isnan(x)
                whole = np.where(missing, 0.0, np.floor(x)).astype(np.int64)
                out[name] = pd.Series(pd.arrays.IntegerArray(whole, missing), index=s.index)
            else:
                out[name] = pd.Series(x, index=s.index).astype(output_dtype(col))
    return pd.DataFrame(out, index=df.index)
