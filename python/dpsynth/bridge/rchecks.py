"""The checks of the Python tables against R (Python → R through rpy2 3.5.x): R data frames built
column by column from :func:`~dpsynth.bridge.columns.split_column`, ``glm`` on each data set pooled by
``mice::pool``, ``mice::pool.scalar`` and ``mice::D1``, with R term names translated to patsy's."""
from __future__ import annotations

import numpy as np
import pandas as pd

from .columns import split_column

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
