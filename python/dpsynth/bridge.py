"""The one R ↔ pandas converter, used both ways: by dpsynthr (R → Python through reticulate) and by
the checks of the Python tables against R's glm + mice::pool (Python → R through rpy2 3.5.x).

Neither reticulate's (1.28) nor rpy2's automatic pandas conversion is used: they lose NA in integer
and logical columns and mishandle categoricals. A column travels as plain lists (codes or values)
plus an explicit NA mask, described by `split_column` and rebuilt by `make_column`:
Categorical ↔ factor (levels and order kept, unused levels kept, NA → NA), bool/boolean (or an
object column holding only bools) ↔ logical, integer (incl. nullable Int64) ↔ integer (double if it
does not fit), float ↔ double (NaN ↔ NA), strings/objects ↔ character, datetime ↔ Date (POSIXct
when a time of day is present). Only plain Python lists cross the boundary: reticulate 1.28 cannot
exchange arrays with numpy >= 2 (`plain` turns numpy results into Python values for it).

For dpsynthr (reticulate): `make_frame(names, specs, n)`, `split_frame(df)`, `plain(obj)`,
`call_quietly(fn, *args, **kwds)` (a call whose Python warnings come back as data, so that R can
raise them as R warnings); `call_for_r(fn, ...)` and `to_r_json(obj)` (results as JSON that R reads
back as plain values: lists stay lists, None stays NULL, NaN survives, DataFrames become
data.frames; warnings with their R condition class); and the R functions' engine halves:
`pool_for_r`, `pool_fits_for_r`, `pooled_display` (dp_pool, dp_glm, print), `synthesis_for_r`
(dp_synthesize), `schema_from_r` (a schema list from R).

For the rpy2 checks:

* `available()` → (ok, reason): can R and mice be used here?
* `r_data_frame(df)`: the R data.frame (an rpy2 object);
* `mice_pool(datasets, formula, family, rule, dfcom)`: ``glm`` on each dataset, ``mice::pool`` and
  ``summary(type = "all", conf.int = TRUE)`` → a DataFrame in `dpsynth.pool`'s columns, with term
  names translated to patsy's (`patsy_term`), so tables can be compared term by term;
* `pool_scalar(Q, U, n, k, rule)`: ``mice::pool.scalar``;
* `mice_D1(datasets, formula, family, dfcom)`: ``mice::D1`` (all coefficients = 0).

R formulas and patsy formulas coincide for main effects and interactions of plain column names
(``y ~ x + g + x:g``); patsy-only syntax such as ``C(g)`` or ``Q("a-b")`` is not translated.

Example
-------
>>> from dpsynth import bridge
>>> ok, why = bridge.available()
>>> if ok:
...     out = bridge.pool_scalar([1.0, 1.2, 0.9], [0.04, 0.05, 0.045], n=100, k=2)
"""
from __future__ import annotations

import numpy as np
import pandas as pd

_RULES = {"mi": "rubin1987", "rubin1987": "rubin1987", "reiter2003": "reiter2003"}
_FAMILIES = ("gaussian", "binomial", "poisson")
_STATE: dict = {}


def available() -> tuple[bool, str]:
    """Whether rpy2 can start R with mice loaded, and if not, why."""
    if "ok" in _STATE:
        return _STATE["ok"], _STATE["why"]
    why = _r_runs()
    if why:  # checked in a subprocess first: a broken R aborts the process that embeds it
        _STATE.update(ok=False, why=why)
        return False, why
    try:
        import rpy2
        version = tuple(int(x) for x in rpy2.__version__.split(".")[:2])
        if version < (3, 5):
            raise ImportError(f"rpy2 {rpy2.__version__} is older than 3.5")
        import rpy2.robjects as ro
        ok = bool(ro.r('isTRUE(suppressMessages(requireNamespace("mice", quietly = TRUE)))')[0])
        why = "" if ok else "the R package mice is not installed"
    except Exception as err:  # ImportError, R not found, R start-up failure
        ok, why = False, f"R via rpy2 is not available: {type(err).__name__}: {err}"
    _STATE.update(ok=ok, why=why)
    return ok, why


def _r_runs() -> str:
    """'' if R starts in a subprocess and has mice, else the reason."""
    import os
    import shutil
    import subprocess
    home = os.environ.get("R_HOME")
    rscript = os.path.join(home, "bin", "Rscript") if home else shutil.which("Rscript")
    if not rscript or not os.path.exists(rscript):
        return "R is not installed (no Rscript found" + (f" under R_HOME={home}" if home else " on PATH") + ")"
    try:
        out = subprocess.run([rscript, "--vanilla", "-e", "cat(requireNamespace('mice', quietly = TRUE))"],
                             capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired) as err:
        return f"R could not be started: {err}"
    if out.returncode != 0:
        return f"R could not be started: {out.stderr.strip()[-300:]}"
    if "TRUE" not in out.stdout:
        return "the R package mice is not installed"
    return ""


def _require():
    ok, why = available()
    if not ok:
        raise RuntimeError(why + " (install R, the mice package, and rpy2 >= 3.5, < 3.6 for R 4.2)")
    import rpy2.robjects as ro
    return ro


def _r_column(series: pd.Series):
    """One R vector from `split_column`'s description (the same pieces dpsynthr receives)."""
    ro = _require()
    try:
        spec = split_column(series)
    except TypeError as err:
        raise TypeError(f"column {series.name!r} has dtype {series.dtype}, which the bridge cannot send to R; "
                        "use category, bool, integer, float or string") from err
    kind = spec["kind"]
    if kind == "factor":
        values = ro.IntVector([int(c) + 1 if c >= 0 else ro.NA_Integer for c in spec["codes"]])
        make = ro.r("function(codes, levels, ordered) factor(levels[codes], levels = levels, ordered = ordered)")
        return make(values, ro.StrVector(spec["levels"]), ro.BoolVector([spec["ordered"]]))
    pairs = list(zip(spec["values"], spec["mask"]))
    if kind == "logical":
        return ro.BoolVector([ro.NA_Logical if na else bool(v) for v, na in pairs])
    if kind == "integer":
        return ro.IntVector([ro.NA_Integer if na else int(v) for v, na in pairs])
    if kind == "character":
        return ro.StrVector([ro.NA_Character if na else str(v) for v, na in pairs])
    vec = ro.FloatVector([ro.NA_Real if na else float(v) for v, na in pairs])
    if kind == "Date":
        return ro.r("function(x) structure(x, class = 'Date')")(vec)
    if kind == "POSIXct":
        return ro.r("function(x) structure(x, class = c('POSIXct', 'POSIXt'), tzone = 'UTC')")(vec)
    return vec


def r_data_frame(df: pd.DataFrame):
    """An R data.frame built column by column (see the module docstring for the type map)."""
    ro = _require()
    if not isinstance(df, pd.DataFrame):
        raise TypeError(f"expected a pandas DataFrame; got {type(df).__name__}")
    cols = ro.ListVector.from_length(df.shape[1])
    for j, name in enumerate(df.columns):
        cols[j] = _r_column(df[name])
    cols.names = ro.StrVector([str(c) for c in df.columns])
    build = ro.r("function(cols, n) structure(cols, class = 'data.frame', row.names = .set_row_names(n))")
    return build(cols, ro.IntVector([len(df)]))


def patsy_term(r_name: str, factors=()) -> str:
    """Translate an R coefficient name to patsy's: "(Intercept)" → "Intercept", "gb" → "g[T.b]"
    for a factor g (given in ``factors``); interactions are translated part by part."""
    if r_name == "(Intercept)":
        return "Intercept"
    parts = []
    for part in r_name.split(":"):
        for f in sorted(factors, key=len, reverse=True):
            if part.startswith(f) and len(part) > len(f):
                part = f"{f}[T.{part[len(f):]}]"
                break
        parts.append(part)
    return ":".join(parts)


def _fits(datasets, formula, family):
    ro = _require()
    if family not in _FAMILIES:
        raise ValueError(f"family must be one of {_FAMILIES} for the R bridge; got {family!r}")
    frames = list(getattr(datasets, "datasets", datasets))
    if len(frames) < 2:
        raise ValueError("give at least 2 datasets")
    ro.r("suppressMessages(library(mice))")
    rlist = ro.ListVector.from_length(len(frames))
    for i, f in enumerate(frames):
        rlist[i] = r_data_frame(f)
    fit = ro.r("""function(frames, formula, family) {
        # do.call puts the data and family into each call, so that mice::D1 can refit the model
        fits <- lapply(frames, function(d) do.call("glm", list(
            formula = as.formula(formula), family = as.name(family), data = d,
            control = glm.control(epsilon = 1e-12, maxit = 100))))
        mice::as.mira(fits)
    }""")
    factors = [c for c in frames[0].columns
               if isinstance(frames[0][c].dtype, pd.CategoricalDtype) or frames[0][c].dtype == object]
    return fit(rlist, formula, family), factors


def _to_frame(rdf) -> pd.DataFrame:
    ro = _require()
    names = list(ro.r("names")(rdf))
    out = {}
    for name in names:
        col = rdf.rx2(name)
        if name == "term" or isinstance(col, ro.vectors.FactorVector):
            out[name] = [str(v) for v in ro.r("as.character")(col)]
        else:
            out[name] = np.asarray(list(col), dtype=float)
    return pd.DataFrame(out)


def mice_pool(datasets, formula: str, family: str = "gaussian", rule: str = "mi", dfcom=None,
              conf_level: float = 0.95) -> pd.DataFrame:
    """``glm(formula, family)`` on each dataset in R, pooled by ``mice::pool(rule = ...)``.

    Returns the columns ``term, estimate, ubar, b, t, dfcom, df, riv, lambda, fmi, std.error,
    statistic, p.value, conf.low, conf.high, m`` with patsy-style term names. ``rule``: "mi"
    (= "rubin1987") or "reiter2003"; GLMs converge to epsilon = 1e-12 in R.
    """
    ro = _require()
    if rule not in _RULES:
        raise ValueError(f"mice implements the rules {sorted(_RULES)}; got {rule!r}")
    mira, factors = _fits(datasets, formula, family)
    run = ro.r("""function(mira, rule, dfcom, level) {
        p <- mice::pool(mira, dfcom = dfcom, rule = rule)
        s <- summary(p, type = "all", conf.int = TRUE, conf.level = level)
        s <- as.data.frame(s)
        s$term <- as.character(s$term)
        pct <- grep("%", names(s))  # mice 3.15 names the interval "2.5 %", "97.5 %"
        if (length(pct) == 2) names(s)[pct] <- c("conf.low", "conf.high")
        s
    }""")
    rdf = run(mira, _RULES[rule], ro.NULL if dfcom is None else ro.FloatVector([float(dfcom)]),
              ro.FloatVector([conf_level]))
    out = _to_frame(rdf)
    out["term"] = [patsy_term(t, factors) for t in out["term"]]
    cols = ["term", "estimate", "ubar", "b", "t", "dfcom", "df", "riv", "lambda", "fmi", "std.error",
            "statistic", "p.value", "conf.low", "conf.high", "m"]
    return out[cols]


def mice_D1(datasets, formula: str, family: str = "gaussian", dfcom=None) -> dict:
    """``mice::D1`` for all coefficients = 0: F value, df1, df2, p-value, riv."""
    ro = _require()
    mira, _ = _fits(datasets, formula, family)
    run = ro.r("""function(mira, dfcom) {
        r <- mice::D1(mira, dfcom = dfcom)$result
        c(r[1, "F.value"], r[1, "df1"], r[1, "df2"], r[1, "P(>F)"], r[1, "RIV"])
    }""")
    vals = [float(v) for v in run(mira, ro.NULL if dfcom is None else ro.FloatVector([float(dfcom)]))]
    return dict(zip(["statistic", "df1", "df2", "p.value", "riv"], vals))


def pool_scalar(Q, U, n=np.inf, k=1, rule: str = "rubin1987") -> dict:
    """``mice::pool.scalar(Q, U, n, k, rule)``: qbar, ubar, b, t, df, r (riv), fmi, m."""
    ro = _require()
    ro.r("suppressMessages(library(mice))")
    run = ro.r("""function(Q, U, n, k, rule) {
        p <- mice::pool.scalar(Q, U, n = n, k = k, rule = rule)
        c(qbar = p$qbar, ubar = p$ubar, b = p$b, t = p$t, df = p$df, r = p$r, fmi = p$fmi, m = p$m)
    }""")
    res = run(ro.FloatVector([float(q) for q in Q]), ro.FloatVector([float(u) for u in U]),
              ro.FloatVector([float(n)]), ro.FloatVector([float(k)]), _RULES.get(rule, rule))
    names = ["qbar", "ubar", "b", "t", "df", "r", "fmi", "m"]
    return {name: float(v) for name, v in zip(names, res)}


# ----------------------------------------------------------------------------------------------
# The column descriptions (both directions) and dpsynthr's reticulate helpers
# ----------------------------------------------------------------------------------------------

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


def call_quietly(fn, *args, **kwds):
    """``(fn(*args, **kwds), [[warning class name, message], ...])``: the call's Python warnings as
    data (not printed), so that dpsynthr can raise them as R warnings."""
    import warnings

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = fn(*args, **kwds)
    seen, msgs = set(), []
    for w in caught:
        key = (w.category.__name__, str(w.message))
        if key not in seen:
            seen.add(key)
            msgs.append(list(key))
    return out, msgs


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
    import warnings

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        value = fn(*args, **kwds)
    seen, out = set(), []
    for w in caught:
        if (w.category, str(w.message)) not in seen:
            seen.add((w.category, str(w.message)))
            out.append(_r_warning(w, r_caller))
    return to_r_json({"value": value, "warnings": out})


# what a pooled table infers, for the printout
_TARGETS = {"synthetic": "population quantities from fully synthetic data (synthesis and DP noise included)",
            "mi": "population quantities from multiply imputed data",
            "reiter2003": "population quantities from partially synthetic data"}
_SHOWN = ["term", "estimate", "std.error", "statistic", "df", "p.value", "conf.low", "conf.high", "riv", "fmi", "m"]


def pooled_display(table: pd.DataFrame, rule: str, m: int, conf_level: float = 0.95, *, model=None, method=None,
                   epsilon=None, notes=None) -> dict:
    """What ``print(<dpsynth_pooled>)`` shows around the table (R prints the table itself): ``header``
    lines (m, the rule and its description, the model, the synthesis and its ε, what is inferred),
    the ``columns`` shown, and ``footer`` lines: the fmi remark and the engine's ``notes``
    (`PooledResult.notes`; for pooled numbers, None: the fallback note where it was used).

    >>> from dpsynth import pool
    >>> tab = pool([1.0, 1.2, 0.9], [0.04, 0.05, 0.04], rule="mi")
    >>> d = pooled_display(tab, "mi", 3, model="lm(y ~ x)")
    >>> d["header"][0], d["header"][2]
    ('Class: dpsynth_pooled    m = 3    rule = mi', 'Model: lm(y ~ x), fitted to each synthetic data set')
    """
    from .inference.rules import RULES, check_rule

    rule = check_rule(rule)
    header = [f"Class: dpsynth_pooled    m = {int(m)}    rule = {rule}", f"  ({RULES[rule]})"]
    if model:
        header.append(f"Model: {model}, fitted to each synthetic data set")
    if method:
        spent = f", epsilon spent = {float(epsilon):.7g} (dp_ledger())" if epsilon is not None else ""
        header.append(f"Synthesis: {method}{spent}")
    header.append(f"Inference: {_TARGETS.get(rule, 'population quantities')}; t reference with df per term, "
                  f"{100 * float(conf_level):.7g}% intervals")
    columns = [c for c in _SHOWN if c in table.columns and (c != "fmi" or rule == "mi")]
    footer = [] if rule == "mi" else ["fmi (fraction of missing information) is defined for rule 'mi' only."]
    if notes is None and "fallback" in table.columns and table["fallback"].astype(bool).any():
        notes = ["* t = (1 + 1/m) b - ubar was not positive: fallback variance (Reiter 2002) used."]
    return {"header": r_vec(header), "columns": r_vec(columns), "footer": r_vec(footer + list(notes or [])),
            "rule_description": RULES[rule]}


# the pooled table's columns in dpsynthr's order (summary(<dpsynth_pooled>)); further columns follow
_R_COLUMNS = ["term", "estimate", "std.error", "statistic", "df", "p.value", "conf.low", "conf.high", "ubar", "b",
              "t", "riv", "lambda", "fmi", "rule", "m", "dfcom", "fallback"]


def _r_table(table: pd.DataFrame) -> pd.DataFrame:
    first = [c for c in _R_COLUMNS if c in table.columns]
    return table[first + [c for c in table.columns if c not in first]]


def pool_for_r(estimates, variances, rule="synthetic", **kwds) -> dict:
    """dpsynthr's ``dp_pool`` on numbers: `dpsynth.pool`'s ``table`` (columns in R's order), the
    canonical ``rule`` and its ``m``, and the printout (`pooled_display`)."""
    from .inference.rules import check_rule, pool

    table = _r_table(pool(estimates, variances, rule=rule, **kwds))
    rule = check_rule(rule)
    m = int(table["m"].max())
    return {"table": table, "rule": rule, "m": m,
            "display": pooled_display(table, rule, m, kwds.get("conf_level", 0.95))}


def pool_fits_for_r(fits, *, formula="", columns=None, queries=None, epsilon=None, **kwds) -> dict:
    """dpsynthr's ``dp_glm``/``dp_lm``/``dp_pool(<mira>)`` on R's lm/glm fits.

    ``fits``: one record per dataset, ``{"coef": {term: estimate, NaN where aliased}, "vcov": the
    covariance matrix of the non-aliased terms, "nobs", "df_resid", "n_missing", "notes": the
    fit's warnings}``, or ``{"error": why the fit is unusable}``. First the congeniality check of
    ``formula`` (the R formula's text) against the release's ``queries`` (an
    `UncongenialAnalysisWarning` naming the R call that fixes it), then `inference.pool_fits`
    (``kwds``; its ``family`` is the model's label). Returns ``table`` (columns in R's order),
    ``rule``, ``m``, ``dfcom``, ``dropped`` (datasets numbered from 1, as in R), ``congeniality``,
    the per-dataset pieces of `PooledResult.per_dataset` (``terms``, ``qhat``, ``uhat``, ``nobs``:
    NaN for a failed fit) and the printout (`pooled_display` with the engine's notes, the synthesis'
    ``method`` and ``epsilon``).

    >>> fits = [{"coef": {"a": q}, "vcov": [[0.04]], "nobs": 50, "df_resid": 49} for q in (1.0, 1.2, 0.9)]
    >>> out = pool_fits_for_r(fits + [{"error": "the GLM did not converge"}], family="lm(y ~ 1)")
    >>> out["m"], out["qhat"].shape, out["dropped"]["dataset"].tolist(), out["display"]["header"][2]
    (4, (4, 1), [4], 'Model: lm(y ~ 1), fitted to each synthetic data set')
    """
    from .analyses import warn_uncongenial
    from .inference import pool_fits

    congeniality = []
    if queries is not None:
        remedy = f'dp_synthesize(..., method = "napsu-mq", analyses = list({formula}))'
        congeniality = warn_uncongenial(formula, list(columns or []), [tuple(q) for q in queries], remedy, stacklevel=1)
    fits = [dict(f or {}) for f in fits]
    res = pool_fits([f.get("coef") for f in fits], [f.get("vcov") for f in fits],
                    nobs=[f.get("nobs", 0) for f in fits], df_resid=[f.get("df_resid", np.nan) for f in fits],
                    n_missing=[f.get("n_missing", 0) for f in fits], errors=[f.get("error") for f in fits],
                    notes=[f.get("notes") or [] for f in fits], formula=formula, congeniality=congeniality, **kwds)
    table, dropped, pieces = _r_table(res.to_frame()), res.dropped.copy(), res.per_dataset()
    dropped["dataset"] = dropped["dataset"].astype(int) + 1
    pieces["nobs"] = [n if f.error is None else np.nan for n, f in zip(pieces["nobs"], res.fits)]
    pieces.update(terms=r_vec(pieces["terms"]), nobs=r_vec(pieces["nobs"]))
    return {"table": table, "rule": res.rule, "m": res.m, "dfcom": res.dfcom, "dropped": dropped,
            "congeniality": r_vec(congeniality), **pieces,
            "display": pooled_display(table, res.rule, res.m, res.conf_level, model=res.family.label,
                                      method=kwds.get("method"), epsilon=epsilon, notes=res.notes())}


def compare_for_r(pooled_table, terms, estimates, std_errors, *, m, rule, model, n_used, n_dropped, **kwds) -> dict:
    """dpsynthr's ``dp_compare``: `inference.compare.compare_estimates` on R's real-data fit (``kwds``:
    ``conf_level``, ``family``, ``df_resid``), with the lines its printout puts around the table
    (``header``, ``footer``: m, rule, model, rows used, the mean overlap and difference).

    >>> syn = pd.DataFrame({"term": ["x"], "estimate": [1.0], "std.error": [0.1], "conf.low": [0.8],
    ...                     "conf.high": [1.2]})
    >>> compare_for_r(syn, ["x"], [1.0], [0.1], m=5, rule="synthetic", model="lm(y ~ x)", n_used=100,
    ...               n_dropped=0, df_resid=98)["footer"][2]
    'Mean confidence interval overlap: 0.996'
    """
    from .inference.compare import compare_estimates

    out = compare_estimates(pooled_table, terms, estimates, std_errors, **kwds)

    def num(v):
        return f"{round(v, 3):g}" if np.isfinite(v) else "NA"

    out["header"] = r_vec(["Call used to fit models to the synthetic data:", f"  {model}",
                     f"Pooled over m = {m} synthetic data sets (rule {rule}); real data: {n_used} rows used, "
                     f"{n_dropped} dropped (missing values)", "",
                     "Differences between results based on synthetic and observed data:"])
    out["footer"] = r_vec(["", f"Measures for {m} synthetic data sets and {len(out['table'])} coefficients",
                     f"Mean confidence interval overlap: {num(out['mean_ci_overlap'])}",
                     f"Mean absolute std. coef diff: {num(out['mean_abs_std_diff'])}",
                     "(real-data estimates are not differentially private: do not release this comparison)"])
    return out


def coef_plot(table: pd.DataFrame, compare=None, intercept: bool = False) -> dict:
    """The layout of dpsynthr's coefficient plot (``plot(<dpsynth_pooled>)``; R draws it): the terms
    with an estimate (the intercept only if asked), top to bottom, their interval ends ``lo``, ``hi``
    clipped to the axis and where they were clipped (``clip_lo``, ``clip_hi``: drawn as arrows), the
    real-data columns of a `compare_table` in the same order (``obs``), and the axis range ``xlim``.
    The axis covers the estimates and the real-data intervals, and the pooled intervals unless they
    are far wider than the rest (tiny df can give intervals of 1e50).

    >>> tab = pd.DataFrame({"term": ["(Intercept)", "x", "w", "z"], "estimate": [1.0, 0.5, 0.2, 0.1],
    ...                     "conf.low": [0.8, 0.3, 0.0, -1e50], "conf.high": [1.2, 0.7, 0.4, 1e50]})
    >>> out = coef_plot(tab)
    >>> out["terms"], out["clip_lo"], [round(v, 6) for v in out["xlim"]]
    (['x', 'w', 'z'], [False, False, True], [-0.7, 1.3])
    """
    tab = table[(intercept | (table["term"] != "(Intercept)")) & table["estimate"].notna()].reset_index(drop=True)
    obs = None
    if compare is not None and len(tab):
        obs = compare.set_index("term").reindex(tab["term"])[["estimate.obs", "conf.low.obs", "conf.high.obs"]]
        obs = obs.reset_index()
    core = pd.concat([tab["estimate"]] + ([obs[c] for c in obs.columns[1:]] if obs is not None else []))
    core = core[np.isfinite(core.astype(float))]
    widths = tab["conf.high"] - tab["conf.low"]
    if obs is not None:
        widths = pd.concat([widths, obs["conf.high.obs"] - obs["conf.low.obs"]])
    widths = widths[np.isfinite(widths.astype(float))]
    if not len(core):
        return {"terms": r_vec([]), "obs": obs}
    reach = max(2 * float(core.max() - core.min()), float(widths.quantile(0.25)) if len(widths) else 0.0, 1e-8)
    lim = (float(core.min()) - reach, float(core.max()) + reach)
    lo = tab["conf.low"].clip(lower=lim[0]).fillna(tab["estimate"])
    hi = tab["conf.high"].clip(upper=lim[1]).fillna(tab["estimate"])
    span = pd.concat([core, lo, hi])
    out = {"terms": tab["term"], "estimate": tab["estimate"], "lo": lo, "hi": hi, "clip_lo": tab["conf.low"] < lo,
           "clip_hi": tab["conf.high"] > hi, "xlim": [float(span.min()), float(span.max())]}
    return {**{k: r_vec(v.tolist() if hasattr(v, "tolist") else v) for k, v in out.items()}, "obs": obs}


def synthesis_notes(diagnostics=None, missing_assumption=None, missing_share=None) -> list[str]:
    """The lines ``print(<dpsynth_synds>)`` adds about how the data sets were made: the missing-data
    assumption with the released shares missing, and whether the posterior sampler mixed (the largest
    split R-hat of the released cells' probabilities against ``dpsynth.report.RHAT_OK``).

    >>> synthesis_notes({"rhat_max_cells": 1.2, "mixed": False}, "MAR", {"a": 0.2})[1]
    "Posterior sampler: largest split R-hat of the cells' probabilities 1.2 -- the sampler did NOT mix: intervals may be off (see dp_diagnostics())"
    """
    from .report import RHAT_OK

    notes = []
    if missing_assumption is not None:
        share = ", ".join(f"{k} {100 * float(v):.1f}%" for k, v in (missing_share or {}).items())
        notes.append(f"Missing values filled in; assumption: {missing_assumption}."
                     + (f" Released share missing: {share}." if share else ""))
    diag = diagnostics or {}
    rhat = diag.get("rhat_max_cells")
    if isinstance(rhat, (int, float)) and np.isfinite(rhat):
        bad = diag.get("mixed") is False or rhat > RHAT_OK
        notes.append(f"Posterior sampler: largest split R-hat of the cells' probabilities {rhat:.3g}"
                     + (" -- the sampler did NOT mix: intervals may be off" if bad else "") + " (see dp_diagnostics())")
    return notes


def synthesis_for_r(res) -> dict:
    """What dpsynthr keeps of a `SynthResult` besides its datasets: the ledger (``ledger``,
    ``total_epsilon``, ``total_delta``), ``diagnostics``, ``queries``, ``noise_aware``,
    ``analyses``, ``n_private``, ``missing_assumption``, ``missing_share``, and the printout's
    ``notes`` (`synthesis_notes`)."""
    ledger = res.ledger
    return {"ledger": ledger.to_frame(), "total_epsilon": ledger.total_epsilon(), "total_delta": ledger.total_delta(),
            "diagnostics": {k: r_vec(v) if isinstance(v, (list, tuple)) else (np.nan if v is None else v)
                            for k, v in (res.diagnostics or {}).items()},
            "queries": None if res.queries is None else [r_vec(q) for q in res.queries],
            "noise_aware": getattr(res.generator, "noise_aware", None), "analyses": r_vec(list(res.analyses)),
            "n_private": res.n_private, "missing_assumption": res.missing_assumption,
            "missing_share": None if res.missing_share is None else r_vec(res.missing_share),
            "notes": r_vec(synthesis_notes(res.diagnostics, res.missing_assumption, res.missing_share))}


def schema_from_r(text: str):
    """A `Schema` from dpsynthr's JSON text (a schema list, or one with ``columns``). R has no
    scalars, so a one-element ``categories`` arrives unboxed: it is boxed here.

    >>> schema_from_r('{"g": {"type": "categorical", "categories": "a"}}')["g"].categories
    ('a',)
    """
    import json

    from .schema import Schema

    spec = json.loads(text)
    if not isinstance(spec, dict):
        raise TypeError('`schema` must be a list (from dp_schema(), or as attr(dp_dataset(...), "dp_schema")) or '
                        "a path to a schema JSON file")
    cols = spec["columns"] if isinstance(spec.get("columns"), dict) else spec
    for col in cols.values():
        if isinstance(col, dict) and "categories" in col and not isinstance(col["categories"], list):
            col["categories"] = [col["categories"]]
    return Schema.from_dict(spec)
