"""The engine halves of dpsynthr's functions: ``dp_pool`` and ``dp_glm`` (`pool_for_r`,
`pool_fits_for_r`), their printout (`pooled_display`), ``dp_compare`` (`compare_for_r`), the
coefficient plot's layout (`coef_plot`), ``dp_synthesize`` (`synthesis_for_r`, `synthesis_notes`) and a
schema list from R (`schema_from_r`)."""
from __future__ import annotations

import numpy as np
import pandas as pd

from .calls import r_vec

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
    from ..inference.rules import RULES, check_rule

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
    from ..inference.rules import check_rule, pool

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
    from ..analyses import warn_uncongenial
    from ..inference import pool_fits

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
    from ..inference.compare import compare_estimates

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
    from ..report import RHAT_OK

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

    from ..schema import Schema

    spec = json.loads(text)
    if not isinstance(spec, dict):
        raise TypeError('`schema` must be a list (from dp_schema(), or as attr(dp_dataset(...), "dp_schema")) or '
                        "a path to a schema JSON file")
    cols = spec["columns"] if isinstance(spec.get("columns"), dict) else spec
    for col in cols.values():
        if isinstance(col, dict) and "categories" in col and not isinstance(col["categories"], list):
            col["categories"] = [col["categories"]]
    return Schema.from_dict(spec)
