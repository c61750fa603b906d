"""The two reports: :func:`analyst_report` (releasable) and :func:`holder_report` (private, NOT for
release), assembled from :mod:`~dpsynth.report.sections` and :mod:`~dpsynth.report.plots` in the
:mod:`~dpsynth.report.html` page and written atomically."""
from __future__ import annotations

import html
from pathlib import Path

import numpy as np
import pandas as pd

from ..files import atomic_write_text
from .html import html_page, html_table
from .plots import coefficient_plot, marginal_plots, missingness_plot, variance_plot
from .sections import congeniality_box, diagnostics_section, ledger_section, pooled_fit, settings_table


def analyst_report(result, formula: str, family: str = "gaussian", rule: str = "synthetic",
                   path: str | Path = "report.html", title: str | None = None, transform=None) -> Path:
    """Write the releasable analyst report; returns its path. Uses only ``result`` (synthetic data,
    ledger, generator settings). ``transform`` (optional) derives the model's columns from each
    dataset before fitting (e.g. a numeric age from age buckets)."""
    pooled = pooled_fit(result, formula, family, rule, transform)
    table = pooled.to_frame()
    shown = [c for c in ("term", "estimate", "std.error", "df", "conf.low", "conf.high", "fmi", "p.value")
             if c in table]
    sections = [
        ("Privacy ledger", ledger_section(result)),
        ("Pooled estimates", f"<p>Model <code>{html.escape(formula)}</code>, family {html.escape(family)}, "
                             f"pooled over m = {result.m} synthetic datasets with the <b>{html.escape(rule)}</b> "
                             "combining rule.</p>" + congeniality_box(pooled) + html_table(table[shown]) +
                             ("<p class='muted'>fmi (fraction of missing information) is defined for the "
                              "multiple-imputation rule; like mice for reiter2003, it is left empty under the "
                              "synthetic-data rules.</p>" if rule != "mi" else "")),
        ("Coefficient plot", coefficient_plot(table, title=formula)),
        ("Between and within variance", variance_plot(table) + html_table(table[["term", "ubar", "b", "t", "riv",
                                                                               "fmi"]])),
        ("Generator settings", html_table(settings_table(result))),
    ]
    diagnostics = diagnostics_section(result)
    if diagnostics is not None:
        sections.append(("Posterior diagnostics", diagnostics))
    page = html_page(title or f"dpsynth analyst report: {result.method}",
                 "Releasable: computed from the synthetic datasets and the privacy ledger only.", "release", sections)
    path = Path(path)
    atomic_write_text(path, page)
    return path


def holder_report(real: pd.DataFrame, result, schema, formula: str | None = None, family: str = "gaussian",
                  rule: str = "synthetic", path: str | Path = "holder-report.html", target: str | None = None,
                  positive=None, transform=None) -> Path:
    """Write the data holder's private report (NOT for release); returns its path. ``transform`` as in
    :func:`analyst_report`, applied to the real data too before the real fit."""
    from ..inference import compare_fit

    sections = [("Privacy ledger", ledger_section(result))]
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
    sections.append(("Utility against the real data", html_table(pd.DataFrame(util, columns=["metric", "value"]))))
    if formula:
        pooled = pooled_fit(result, formula, family, rule, transform)
        cmp = compare_fit(pooled, real if transform is None else transform(real))
        frame = cmp.to_frame()
        sections.append(("Real fit beside the pooled fit", congeniality_box(pooled) +
                         f"<p>Mean |standardised difference| {cmp.mean_abs_std_diff:.3f} real-data SEs; mean "
                         f"CI overlap {cmp.mean_ci_overlap:.3f} (Karr et al. 2006; 1 is perfect).</p>" + html_table(frame)))
        real_tab = frame.rename(columns={"estimate.obs": "estimate", "conf.low.obs": "conf.low",
                                         "conf.high.obs": "conf.high"})[["term", "estimate", "conf.low", "conf.high"]]
        sections.append(("Coefficients: synthetic vs real", coefficient_plot(pooled.to_frame(), real_tab,
                                                                             title=formula)))
    sections.append(("Missingness of the real data", missingness_plot(real)))
    sections.append(("Marginals: real vs synthetic (dataset 1)", marginal_plots(real, result.datasets[0], schema)))
    page = html_page(f"dpsynth data holder report: {result.method}",
                 "PRIVATE - NOT FOR RELEASE. This report is computed from the real data; keep it inside the "
                 "building. Release only the analyst report and the synthetic datasets.", "private", sections)
    path = Path(path)
    atomic_write_text(path, page)
    return path
