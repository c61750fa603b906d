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

Modules: :mod:`~dpsynth.report.builders` (the two reports), :mod:`~dpsynth.report.sections` (the
sections they share), :mod:`~dpsynth.report.plots` (the plots) and :mod:`~dpsynth.report.html` (the
page template).
"""
from __future__ import annotations

from .builders import analyst_report, holder_report
from .plots import coefficient_plot, marginal_plots, missingness_plot, variance_plot
from .sections import RHAT_OK, congeniality_box

__all__ = ["analyst_report", "holder_report", "coefficient_plot", "variance_plot", "missingness_plot",
           "marginal_plots", "congeniality_box", "RHAT_OK"]
