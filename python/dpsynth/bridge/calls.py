"""dpsynthr's calls into the engine: results as JSON that R reads back as plain R values (its ``py_r()`` /
``py_call()``), and the call's Python warnings as data that R raises as R warnings of the engine's class."""
from __future__ import annotations

import numpy as np
import pandas as pd

from .columns import plain, split_frame


def caught_warnings(fn, *args, **kwds):
    """``(fn(*args, **kwds), [each distinct warning the call raised, in order])``; nothing is printed."""
    import warnings

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        value = fn(*args, **kwds)
    seen, out = set(), []
    for w in caught:
        if (w.category, str(w.message)) not in seen:
            seen.add((w.category, str(w.message)))
            out.append(w)
    return value, out


def call_quietly(fn, *args, **kwds):
    """``(fn(*args, **kwds), [[warning class name, message], ...])``: the call's Python warnings as
    data (not printed), so that dpsynthr can raise them as R warnings."""
    out, caught = caught_warnings(fn, *args, **kwds)
    return out, [[w.category.__name__, str(w.message)] for w in caught]


# ----------------------------------------------------------------------------------------------
# dpsynthr's calls: results as JSON that R reads back as plain R values (its py_r() / py_call())
# ----------------------------------------------------------------------------------------------

# R condition classes of the engine's warnings (others: "dpsynth_<snake_case>_warning")
_R_WARNING_CLASSES = {"UncongenialAnalysisWarning": "dpsynth_uncongenial_warning"}


class _RVector(list):
    """A list that R receives as an atomic vector."""


class _RNamedVector(dict):
    """A dict that R receives as a named atomic vector."""


def r_vec(values):
    """``values`` (a list, or a dict: a named vector) marked for `for_r` as an R atomic vector (R
    unlists it); it still reads as a list (dict) in Python."""
    return _RNamedVector(values) if isinstance(values, dict) else _RVector(values)


def for_r(obj):
    """``obj`` as JSON-ready values that dpsynthr reads back as plain R values: `plain` values, with
    non-finite floats as ``{"$num": "NaN" | "Inf" | "-Inf"}`` (JSON has none; R reads NaN as NA),
    DataFrames as ``{"$frame": split_frame(df)}`` (NA cells 0 under their mask) and `r_vec` lists as
    vectors, so that lists stay lists and None stays None (reticulate's own conversion simplifies both).

    >>> for_r({"a": (1.5, float("nan")), "b": None, "c": np.int64(2)})
    {'a': [1.5, {'$num': 'NaN'}], 'b': None, 'c': 2}
    """
    if isinstance(obj, (_RVector, _RNamedVector)):
        return {"$vec": for_r(dict(obj) if isinstance(obj, dict) else list(obj))}
    if isinstance(obj, pd.DataFrame):
        parts = split_frame(obj)
        for col in parts["columns"]:
            if col["kind"] in ("double", "Date", "POSIXct"):
                col["values"] = [0.0 if na else v for v, na in zip(col["values"], col["mask"])]
        return {"$frame": for_r(parts)}
    if isinstance(obj, dict):
        return {str(k): for_r(v) for k, v in obj.items()}
    if isinstance(obj, (pd.Series, np.ndarray)):
        obj = obj.tolist()
    if isinstance(obj, (list, tuple)):
        return [for_r(v) for v in obj]
    obj = plain(obj)
    if isinstance(obj, float) and not np.isfinite(obj):
        return {"$num": "NaN" if np.isnan(obj) else ("Inf" if obj > 0 else "-Inf")}
    return obj


def to_r_json(obj) -> str:
    """`for_r` as a JSON string (what dpsynthr's ``py_r()`` parses)."""
    import json

    return json.dumps(for_r(obj), allow_nan=False)


def _r_warning(w, caller) -> dict:
    """One caught warning for R: its condition class, its message in R's words and its data."""
    import re

    name = w.category.__name__
    cls = _R_WARNING_CLASSES.get(name) or "dpsynth_" + re.sub(
        r"(?<!^)(?=[A-Z])", "_", name.removesuffix("Warning") or "Engine").lower() + "_warning"
    msg = str(w.message)
    if caller:
        msg = re.sub(r"^fit_pooled:", f"{caller}:", msg)
    msg = msg.replace("dataset(s)", "data set(s)").replace("see .dropped", "see $dropped")
    return {"class": cls, "message": msg, "data": dict(getattr(w.message, "__dict__", {}))}


def call_for_r(fn, *args, r_caller=None, **kwds) -> str:
    """dpsynthr's one way to call the engine: ``fn(*args, **kwds)`` with its Python warnings caught,
    returned as JSON (`to_r_json`) of ``{"value": result, "warnings": [{"class", "message", "data"},
    ...]}``; R raises each warning as a condition of that class (e.g. ``dpsynth_uncongenial_warning``,
    ``dpsynth_degenerate_fit_warning``) with the warning's attributes as fields, worded for R
    (``r_caller`` replaces a leading "fit_pooled:"; "data set(s)", "$dropped").

    >>> import json, warnings
    >>> out = json.loads(call_for_r(lambda: warnings.warn("fit_pooled: 1 dataset(s) dropped") or 1, r_caller="dp_glm"))
    >>> out["value"], out["warnings"][0]["class"], out["warnings"][0]["message"]
    (1, 'dpsynth_user_warning', 'dp_glm: 1 data set(s) dropped')
    """
    value, caught = caught_warnings(fn, *args, **kwds)
    return to_r_json({"value": value, "warnings": [_r_warning(w, r_caller) for w in caught]})
