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
raise them as R warnings).

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


def make_column(spec, n):
    """Build one pandas column from a spec sent by R (a dict)."""
    kind = spec["kind"]
    mask = _arr(spec["mask"], bool) if "mask" in spec else np.zeros(n, bool)
    if kind == "factor":
        cats = pd.Index([str(c) for c in spec["levels"]], dtype=object)
        return pd.Categorical.from_codes(_arr(spec["codes"], np.int64), categories=cats,
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
