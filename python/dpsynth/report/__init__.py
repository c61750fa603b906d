"""Self-contained HTML reports with embedded plots.

- :func:`analyst_report` (releasable): the ledger, the pooled table (estimate, se, df, CI, fmi and the
  combining rule), a coefficient plot, between/within variance, the generator's settings. It is
  computed from the synthetic datasets and the ledger only.
- :func:`holder_report` (private, NOT for release): adds what only the data holder may see: utility
  against the real data (1- and 2-way TVD, pMSE/S_pMSE, classifier F1 where a target is given),
  the real-data fit beside the pooled one with CI overlap, the missingness pattern of the real data
  and marginal comparison plots.

Both are written atomically (temporary file, then rename).

Example
-------
>>> import dpsynth
>>> from dpsynth.report import analyst_report
>>> df, schema = dpsynth.load_dataset("adult")
>>> res = dpsynth.synthesize(df, schema, "independent", epsilon=1.0, m=3, seed=1)
>>> path = analyst_report(res, "income ~ age + sex", family="binomial", path="/tmp/analyst.html")
"""
from __future__ import annotations

import base64
import dataclasses
import datetime as _dt
import html
import io
from pathlib import Path

import numpy as np
import pandas as pd

from ..schema import atomic_write_text

_CSS = """
body{font-family:-apple-system,Segoe UI,Helvetica,Arial,sans-serif;max-width:1100px;margin:2em auto;color:#222;padding:0 1em}
h1{font-size:1.6em;margin-bottom:.2em} h2{font-size:1.25em;margin-top:1.6em;border-bottom:1px solid #ddd}
table{border-collapse:collapse;font-size:.85em;margin:.6em 0} td,th{border:1px solid #ccc;padding:3px 7px;text-align:right}
th{background:#f3f3f3} td:first-child,th:first-child{text-align:left}
.banner{padding:.8em 1em;border-radius:4px;margin:1em 0;font-weight:600}
.private{background:#fde2e1;border:2px solid #c0392b;color:#7b1d14}
.release{background:#e3f2e6;border:1px solid #3c8d50;color:#1d4d28}
.warn{background:#fff4d6;border:2px solid #c98a00;color:#5c3d00;font-weight:400}
.muted{color:#666;font-size:.9em} img{max-width:100%} .tw{overflow-x:auto}
"""


# ------------------------------------------------------------------------------------------ helpers
def _fig_to_img(fig, alt: str) -> str:
    import matplotlib.pyplot as plt

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110, bbox_inches="tight")
    plt.close(fig)
    data = base64.b64encode(buf.getvalue()).decode("ascii")
    return f'<img alt="{html.escape(alt)}" src="data:image/png;base64,{data}">'


def _table(df: pd.DataFrame, digits: int = 4) -> str:
    def fmt(v):
        if isinstance(v, (float, np.floating)):
            if np.isnan(v):
                return ""
            return f"{v:.{digits}g}"
        return html.escape(str(v))

    head = "".join(f"<th>{html.escape(str(c))}</th>" for c in df.columns)
    body = "".join("<tr>" + "".join(f"<td>{fmt(v)}</td>" for v in row) + "</tr>" for row in df.itertuples(index=False))
    return f"<div class='tw'><table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table></div>"


def _page(title: str, banner: str, banner_class: str, sections: list[tuple[str, str]]) -> str:
    when = _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    body = "".join(f"<h2>{html.escape(h)}</h2>\n{c}\n" for h, c in sections)
    return (f"<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
            f"<style>{_CSS}</style></head><body><h1>{html.escape(title)}</h1>"
            f"<div class='banner {banner_class}'>{banner}</div><p class='muted'>made by dpsynth on {when}</p>"
            f"{body}</body></html>\n")


def _matplotlib():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def coefficient_plot(table: pd.DataFrame, real: pd.DataFrame | None = None, title: str = "") -> str:
    """Estimates with their confidence intervals (and the real-data ones beside, if given)."""
    plt = _matplotlib()
    terms = list(table["term"])
    y = np.arange(len(terms))[::-1]
    fig, ax = plt.subplots(figsize=(7, 0.45 * len(terms) + 1.2))
    off = 0.15 if real is not None else 0.0
    ax.errorbar(table["estimate"], y + off, xerr=[table["estimate"] - table["conf.low"],
                                                   table["conf.high"] - table["estimate"]],
                fmt="o", color="#1f5fa8", capsize=3, label="pooled synthetic")
    if real is not None:
        r = real.set_index("term").reindex(terms)
        ax.errorbar(r["estimate"], y - off, xerr=[r["estimate"] - r["conf.low"], r["conf.high"] - r["estimate"]],
                    fmt="s", color="#c0392b", capsize=3, label="real data")
        ax.legend(loc="best", fontsize=8)
    ax.axvline(0, color="#999", lw=0.8, ls="--")
    # an interval far wider than the others (few df) would flatten the plot: clip the axis, say so
    width = (table["conf.high"] - table["conf.low"]).to_numpy(dtype=float)
    ref = np.nanmedian(width) if np.isfinite(width).any() else np.nan
    if np.isfinite(ref) and np.nanmax(width) > 20 * ref:
        est = table["estimate"].to_numpy(dtype=float)
        pad = 2 * ref + 0.1 * (np.nanmax(est) - np.nanmin(est))
        ax.set_xlim(np.nanmin(est) - pad, np.nanmax(est) + pad)
        ax.text(0.99, 0.01, "axis clipped: some intervals run off the plot", transform=ax.transAxes,
                ha="right", va="bottom", fontsize=7, color="#666")
    ax.set_yticks(y)
    ax.set_yticklabels(terms, fontsize=8)
    ax.set_xlabel("estimate with 95% interval")
    ax.set_title(title, fontsize=10)
    return _fig_to_img(fig, "coefficient plot")


def variance_plot(table: pd.DataFrame) -> str:
    """Within-dataset variance ū and between-dataset variance b per term (log scale)."""
    plt = _matplotlib()
    terms = list(table["term"])
    x = np.arange(len(terms))
    fig, ax = plt.subplots(figsize=(7, 3.2))
    ax.bar(x - 0.2, table["ubar"], width=0.4, label="within (ū)", color="#7fa7d6")
    ax.bar(x + 0.2, table["b"], width=0.4, label="between (b)", color="#e8a33d")
    ax.set_yscale("log")
    ax.set_xticks(x)
    ax.set_xticklabels(terms, rotation=45, ha="right", fontsize=8)
    ax.legend(fontsize=8)
    ax.set_title("within vs between variance of the estimates", fontsize=10)
    return _fig_to_img(fig, "variance plot")


def _settings_table(result) -> pd.DataFrame:
    gen = getattr(result, "generator", None)
    rows = [("method", result.method), ("m (datasets)", result.m),
            ("rows per dataset", len(result.datasets[0]) if result.datasets else 0),
            ("epsilon spent", f"{result.ledger.total_epsilon():.4g}"),
            ("delta spent", f"{result.ledger.total_delta():.3g}"),
            ("neighbouring relation", result.ledger.relation or "")]
    if gen is not None:
        for k, v in sorted(vars(gen).items()):
            if k.startswith("_") or k.endswith("_") or k in ("ledger",):
                continue
            if isinstance(v, (int, float, str, bool, tuple, list)) or v is None:
                rows.append((k, str(v)))
    return pd.DataFrame(rows, columns=["setting", "value"])


RHAT_OK = 1.01  # split-R̂ target for final results (Vehtari et al. 2021)


def _diagnostics_section(result) -> str | None:
    """The generator's posterior diagnostics, with a plain-language reading of R̂ and ESS; None if none."""
    diag = result.diagnostics
    if not diag:
        return None
    frame = pd.DataFrame({"diagnostic": list(diag), "value": [diag[k] for k in diag]})
    rhat, ess = diag.get("rhat_max_cells"), diag.get("ess_bulk_min_cells")
    note = ""
    if rhat is not None and rhat == rhat:  # not NaN
        ess_text = f", smallest bulk ESS {ess:.0f}" if ess is not None and ess == ess else ""
        if diag.get("mixed") is False or rhat > RHAT_OK:
            note = (f"<div class='banner warn'><b>The posterior sampler did not mix</b> (largest split R̂ of the "
                    f"released cells' probabilities {rhat:.3f} &gt; {RHAT_OK}{ess_text}). The spread between "
                    "the synthetic datasets may misstate the posterior, so the pooled intervals may be too "
                    "narrow or too wide. No claim of validity is made for this release; ask the data holder "
                    "for a longer run.</div>")
        else:
            note = f"<p>The sampler's chains mixed (largest split R̂ of the cells' probabilities {rhat:.3f}{ess_text}).</p>"
    return note + _missing_note(result) + _table(frame)


def _missing_note(result) -> str:
    """The identifying assumption of completed datasets and the released share missing per column."""
    assumption = getattr(result, "missing_assumption", None)
    if not assumption:
        return ""
    shares = ", ".join(f"{c}: {v:.1%}" for c, v in (getattr(result, "missing_share", None) or {}).items())
    return (f"<div class='banner'><b>Missing values were filled in.</b> Assumption: {html.escape(assumption)}."
            + (f" Released share missing per column (noisy): {html.escape(shares)}." if shares else "") + "</div>")


def _ledger_section(result) -> str:
    led = result.ledger
    frame = led.to_frame()
    cols = [c for c in ("step", "mechanism", "epsilon", "delta", "rho", "sensitivity", "relation") if c in frame]
    return (f"<p><b>Total privacy spent: ε = {led.total_epsilon():.4g}, δ = {led.total_delta():.3g}</b> "
            f"(budget ε = {led.epsilon:g}, δ = {led.delta:g}).</p>" + _table(frame[cols]))


# ------------------------------------------------------------------------------------------ reports
def _pooled(result, formula, family, rule, transform):
    from ..inference import fit_pooled

    if transform is not None:  # analysis columns derived from the released data (post-processing)
        result = dataclasses.replace(result, datasets=[transform(f) for f in result.datasets])
    return fit_pooled(result, formula, family=family, rule=rule)


def congeniality_box(pooled) -> str:
    """A warning box listing what the formula needs that the released queries do not carry ('' if none)."""
    if not getattr(pooled, "congeniality", None):
        return ""
    items = "".join(f"<li>{html.escape(m)}</li>" for m in pooled.congeniality)
    return ("<div class='banner warn'><b>Uncongenial analysis:</b> the generator's released tables do not carry "
            "these dependencies of the model, so its coefficients are biased towards independence and the "
            f"intervals do not show it.<ul>{items}</ul>Ask the data holder to generate with "
            f"<code>analyses=[{html.escape(repr(pooled.formula))}]</code>.</div>")


def analyst_report(result, formula: str, family: str = "gaussian", rule: str = "synthetic",
                   path: str | Path = "report.html", title: str | None = None, transform=None) -> Path:
    """Write the releasable analyst report; returns its path. Uses only ``result`` (synthetic data,
    ledger, generator settings). ``transform`` (optional) derives the model's columns from each
    dataset before fitting (e.g. a numeric age from age buckets)."""
    pooled = _pooled(result, formula, family, rule, transform)
    table = pooled.to_frame()
    shown = [c for c in ("term", "estimate", "std.error", "df", "conf.low", "conf.high", "fmi", "p.value")
             if c in table]
    sections = [
        ("Privacy ledger", _ledger_section(result)),
        ("Pooled estimates", f"<p>Model <code>{html.escape(formula)}</code>, family {html.escape(family)}, "
                             f"pooled over m = {result.m} synthetic datasets with the <b>{html.escape(rule)}</b> "
                             "combining rule.</p>" + congeniality_box(pooled) + _table(table[shown]) +
                             ("<p class='muted'>fmi (fraction of missing information) is defined for the "
                              "multiple-imputation rule; like mice for reiter2003, it is left empty under the "
                              "synthetic-data rules.</p>" if rule != "mi" else "")),
        ("Coefficient plot", coefficient_plot(table, title=formula)),
        ("Between and within variance", variance_plot(table) + _table(table[["term", "ubar", "b", "t", "riv",
                                                                               "fmi"]])),
        ("Generator settings", _table(_settings_table(result))),
    ]
    diagnostics = _diagnostics_section(result)
    if diagnostics is not None:
        sections.append(("Posterior diagnostics", diagnostics))
    page = _page(title or f"dpsynth analyst report: {result.method}",
                 "Releasable: computed from the synthetic datasets and the privacy ledger only.", "release", sections)
    path = Path(path)
    atomic_write_text(path, page)
    return path


def missingness_plot(real: pd.DataFrame) -> str:
    """Missing share per column and the most frequent missingness patterns."""
    plt = _matplotlib()
    rate = real.isna().mean()
    pats = real.isna().value_counts().head(8)
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.6))
    axes[0].barh(rate.index[::-1], rate.values[::-1], color="#c0392b")
    axes[0].set_xlabel("share missing")
    axes[0].tick_params(labelsize=7)
    mat = np.array([list(p) for p in pats.index], dtype=float)
    axes[1].imshow(mat, aspect="auto", cmap="Reds", vmin=0, vmax=1)
    axes[1].set_yticks(range(len(pats)))
    axes[1].set_yticklabels([f"{c} rows" for c in pats.values], fontsize=7)
    axes[1].set_xticks(range(real.shape[1]))
    axes[1].set_xticklabels(real.columns, rotation=90, fontsize=7)
    axes[1].set_title("most frequent patterns (red = missing)", fontsize=9)
    return _fig_to_img(fig, "missingness pattern")


def marginal_plots(real: pd.DataFrame, synth: pd.DataFrame, schema, columns=None) -> str:
    """Real vs synthetic distribution of each column over the schema's levels or bins."""
    plt = _matplotlib()
    columns = list(columns or schema.names)[:12]
    ncol = 3
    nrow = int(np.ceil(len(columns) / ncol))
    fig, axes = plt.subplots(nrow, ncol, figsize=(11, 2.6 * nrow))
    axes = np.atleast_1d(axes).ravel()
    codes_r = schema.encode(real[schema.names])
    codes_s = schema.encode(synth[schema.names])
    for ax, c in zip(axes, columns):
        j = schema.names.index(c)
        k = schema[c].size
        pr = np.bincount(codes_r[:, j][codes_r[:, j] >= 0], minlength=k) / max(1, (codes_r[:, j] >= 0).sum())
        ps = np.bincount(codes_s[:, j][codes_s[:, j] >= 0], minlength=k) / max(1, (codes_s[:, j] >= 0).sum())
        x = np.arange(k)
        ax.bar(x - 0.2, pr, width=0.4, color="#c0392b", label="real")
        ax.bar(x + 0.2, ps, width=0.4, color="#1f5fa8", label="synthetic")
        ax.set_title(c, fontsize=9)
        ax.tick_params(labelsize=6)
    for ax in axes[len(columns):]:
        ax.axis("off")
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    return _fig_to_img(fig, "marginal comparison")


def holder_report(real: pd.DataFrame, result, schema, formula: str | None = None, family: str = "gaussian",
                  rule: str = "synthetic", path: str | Path = "holder-report.html", target: str | None = None,
                  positive=None, transform=None) -> Path:
    """Write the data holder's private report (NOT for release); returns its path. ``transform`` as in
    :func:`analyst_report`, applied to the real data too before the real fit."""
    from ..inference import compare_fit

    sections = [("Privacy ledger", _ledger_section(result))]
    from ..metrics import f1_average, pmse, tvd

    util = []
    for k in (1, 2):
        util.append((f"{k}-way TVD, mean over the {result.m} datasets",
                     float(np.mean([tvd(real, s, schema, k=k) for s in result.datasets]))))
    pm = pmse(real, result.datasets[0], method="logit", schema=schema)
    util.append(("pMSE (logit, dataset 1)", pm.pmse))
    util.append(("S_pMSE (logit, dataset 1; about 1 is ideal)", pm.s_pmse))
    if target is not None:
        targets = {target: positive} if positive is not None else [target]
        f1 = f1_average(real, result.datasets[0], targets=targets, schema=schema,
                        classifiers=["LogisticRegression", "RandomForest"])
        util.append((f"classifier F1, train synthetic / test real (target {target})", f1.f1))
    sections.append(("Utility against the real data", _table(pd.DataFrame(util, columns=["metric", "value"]))))
    if formula:
        pooled = _pooled(result, formula, family, rule, transform)
        cmp = compare_fit(pooled, real if transform is None else transform(real))
        frame = cmp.to_frame()
        sections.append(("Real fit beside the pooled fit", congeniality_box(pooled) +
                         f"<p>Mean |standardised difference| {cmp.mean_abs_std_diff:.3f} real-data SEs; mean "
                         f"CI overlap {cmp.mean_ci_overlap:.3f} (Karr et al. 2006; 1 is perfect).</p>" + _table(frame)))
        real_tab = frame.rename(columns={"estimate.obs": "estimate", "conf.low.obs": "conf.low",
                                         "conf.high.obs": "conf.high"})[["term", "estimate", "conf.low", "conf.high"]]
        sections.append(("Coefficients: synthetic vs real", coefficient_plot(pooled.to_frame(), real_tab,
                                                                             title=formula)))
    sections.append(("Missingness of the real data", missingness_plot(real)))
    sections.append(("Marginals: real vs synthetic (dataset 1)", marginal_plots(real, result.datasets[0], schema)))
    page = _page(f"dpsynth data holder report: {result.method}",
                 "PRIVATE - NOT FOR RELEASE. This report is computed from the real data; keep it inside the "
                 "building. Release only the analyst report and the synthetic datasets.", "private", sections)
    path = Path(path)
    atomic_write_text(path, page)
    return path


__all__ = ["analyst_report", "holder_report", "coefficient_plot", "variance_plot", "missingness_plot",
           "marginal_plots"]
