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

Modules: :mod:`~dpsynth.bridge.columns` (the column descriptions, both directions),
:mod:`~dpsynth.bridge.calls` (dpsynthr's calls: JSON results, warnings as R conditions),
:mod:`~dpsynth.bridge.dpsynthr` (the engine halves of dpsynthr's functions) and
:mod:`~dpsynth.bridge.rchecks` (the rpy2 checks against R and mice). dpsynthr calls the functions
by name on this module (``reticulate::import("dpsynth.bridge")``), so each is re-exported here.
"""
from __future__ import annotations

from .calls import call_for_r, call_quietly, caught_warnings, for_r, r_vec, to_r_json
from .columns import make_column, make_frame, plain, r_kind, split_column, split_frame
from .dpsynthr import (coef_plot, compare_for_r, pool_fits_for_r, pool_for_r, pooled_display, schema_from_r,
                       synthesis_for_r, synthesis_notes)
from .rchecks import available, mice_D1, mice_pool, patsy_term, pool_scalar, r_data_frame

__all__ = ["available", "r_data_frame", "patsy_term", "mice_pool", "mice_D1", "pool_scalar", "r_kind",
           "make_column", "make_frame", "split_column", "split_frame", "plain", "caught_warnings",
           "call_quietly", "r_vec", "for_r", "to_r_json", "call_for_r", "pooled_display", "pool_for_r",
           "pool_fits_for_r", "compare_for_r", "coef_plot", "synthesis_notes", "synthesis_for_r",
           "schema_from_r"]
