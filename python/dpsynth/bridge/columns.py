"""The column descriptions, both directions: a pandas column as R-friendly pieces (:func:`split_column`,
:func:`split_frame`) and a pandas column from the pieces dpsynthr sends (:func:`make_column`,
:func:`make_frame`); :func:`plain` turns numpy results into Python values for reticulate 1.28."""
from __future__ import annotations

import numpy as np
import pandas as pd


def _arr(x, dtype):
    return np.asarray(x, dtype=dtype).reshape(-1)


_R_TYPES = {"integer": "integer", "logical": "logical", "double": "double", "character": "character"}
_R_PLAIN = ("integer", "numeric", "logical", "character")


def r_kind(spec) -> str:
    """The kind of the column dpsynthr describes by its R ``type`` (typeof), ``class`` and ``matrix``
    (has a dim): factor, Date, or the type of a plain vector; anything else cannot be sent.

    >>> r_kind({"type": "integer", "class": ["ordered", "factor"]}), r_kind({"type": "double", "class": ["numeric"]})
    ('factor', 'double')
    """
    cls, name = [str(c) for c in spec.get("class") or []], spec.get("name", "?")
    if "factor" in cls or "Date" in cls:
        return "factor" if "factor" in cls else "Date"
    if spec.get("type") not in _R_TYPES:
        raise TypeError(f"column '{name}' has type {spec.get('type')}, which dpsynthr cannot send to Python")
    if spec.get("matrix") or any(c not in _R_PLAIN for c in cls):
        raise TypeError(f"column '{name}' has class {'/'.join(cls)}, which dpsynthr cannot send to Python; "
                        "use factor, integer, logical, double, character or Date")
    return _R_TYPES[spec["type"]]


def make_column(spec, n):
    """Build one pandas column from a spec sent by R (a dict): ``kind`` (or the R ``type`` and
    ``class``, see `r_kind`), ``values`` (factor codes from 1; for a missing cell whatever reticulate
    made of R's NA) and the NA ``mask``; a factor's ``levels`` and ``ordered``."""
    kind = spec.get("kind") or r_kind(spec)
    mask = _arr(spec["mask"], bool) if "mask" in spec else np.zeros(n, bool)
    if kind == "factor":
        cats = pd.Index([str(c) for c in spec["levels"]], dtype=object)
        codes = _arr(spec["codes"], np.int64) if "codes" in spec else _arr(spec["values"], np.int64) - 1
        return pd.Categorical.from_codes(np.where(mask, -1, codes), categories=cats,
                                         ordered=bool(spec["ordered"]))
    if kind == "integer":
        return pd.arrays.IntegerArray(_arr(spec["values"], np.int64), mask)
    if kind == "logical":
        return pd.arrays.BooleanArray(_arr(spec["values"], bool), mask)
    if kind == "double":
        values = _arr(spec["values"], np.float64).copy()
        values[mask] = np.nan
        return values
    if kind == "character":
        values = _arr(spec["values"], object).copy()
        values[mask] = None
        return pd.array(values, dtype=object)
    if kind == "Date":
        days = _arr(spec["values"], np.float64).copy()
        days[mask] = np.nan
        return pd.to_datetime(days, unit="D").astype("datetime64[ns]")
    raise TypeError(f"bridge: cannot convert column kind {kind!r}")


def make_frame(names, specs, n):
    n = int(n)
    cols = {str(name): make_column(spec, n) for name, spec in zip(names, specs)}
    return pd.DataFrame(cols, index=pd.RangeIndex(n), columns=[str(c) for c in names])


def split_column(col):
    """Describe one pandas column as R-friendly pieces (a dict)."""
    dtype = col.dtype
    mask = col.isna().to_numpy(dtype=bool).tolist()
    if isinstance(dtype, pd.CategoricalDtype):
        return {"kind": "factor", "codes": col.cat.codes.to_numpy(dtype=np.int64).tolist(),
                "levels": [str(c) for c in dtype.categories],
                "ordered": bool(dtype.ordered)}
    if pd.api.types.is_bool_dtype(dtype):
        return {"kind": "logical", "values": col.fillna(False).to_numpy(dtype=bool).tolist(), "mask": mask}
    if pd.api.types.is_integer_dtype(dtype):
        values = col.fillna(0).to_numpy(dtype=np.int64)
        if values.size and np.abs(values).max() > 2**31 - 1:
            return {"kind": "double", "values": values.astype(np.float64).tolist(), "mask": mask}
        return {"kind": "integer", "values": values.tolist(), "mask": mask}
    if pd.api.types.is_float_dtype(dtype):
        return {"kind": "double", "values": col.to_numpy(dtype=np.float64, na_value=np.nan).tolist(), "mask": mask}
    if pd.api.types.is_datetime64_any_dtype(dtype):
        if getattr(dtype, "tz", None) is not None:
            col = col.dt.tz_convert("UTC").dt.tz_localize(None)
        ns = col.to_numpy(dtype="datetime64[ns]").astype(np.int64).astype(np.float64)
        ns[np.asarray(mask, dtype=bool)] = 0.0
        midnight = bool(np.all(ns % 86400e9 == 0))
        return {"kind": "Date" if midnight else "POSIXct",
                "values": (ns / (86400e9 if midnight else 1e9)).tolist(), "mask": mask}
    if pd.api.types.is_object_dtype(dtype) or pd.api.types.is_string_dtype(dtype):
        present = [v for v, m in zip(col.tolist(), mask) if not m]
        if present and all(isinstance(v, (bool, np.bool_)) for v in present):
            return {"kind": "logical", "values": [False if m else bool(v) for v, m in zip(col.tolist(), mask)],
                    "mask": mask}
        values = ["" if m else str(v) for v, m in zip(col.tolist(), mask)]
        return {"kind": "character", "values": values, "mask": mask}
    raise TypeError(f"bridge: cannot convert column {col.name!r} of dtype {dtype} to R")


def split_frame(df):
    return {"names": [str(c) for c in df.columns],
            "n": int(len(df)),
            "columns": [split_column(df.iloc[:, j]) for j in range(df.shape[1])]}


def plain(obj):
    """A result as plain Python values (dict, list, float, int, bool, str, None), so that
    reticulate 1.28 can convert it: numpy scalars and arrays (which it cannot convert with
    numpy >= 2) become Python numbers and lists, pandas Series lists, tuples lists."""
    if isinstance(obj, dict):
        return {str(k): plain(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [plain(v) for v in obj]
    if isinstance(obj, pd.Series):
        return [plain(v) for v in obj.tolist()]
    if isinstance(obj, np.ndarray):
        return [plain(v) for v in obj.tolist()]
    if isinstance(obj, np.bool_):
        return bool(obj)
    if isinstance(obj, np.integer):
        return int(obj)
    if isinstance(obj, np.floating):
        return float(obj)
    if obj is pd.NA or obj is pd.NaT:
        return None
    return obj
