"""Inference from multiply imputed or synthetic datasets.

* `pool` — combining rules ("synthetic", "mi", "reiter2003", "two-stage", "two-stage-synthetic")
  for numbers the analyst computed; `wald_test` — the multivariate D1 test (rules.py);
* `fit_pooled` — one statsmodels fit per dataset, pooled into a `PooledResult` with mice's
  columns and a statsmodels-style summary (fit.py); `pool_fits` — the same pooling policy for fits
  made elsewhere (dpsynthr sends R's lm/glm estimates and covariances here), and `wald_per_dataset`,
  the joint test on the per-dataset pieces such a pool keeps. Their parts: formula.py (family and
  outcome coding), dataset_fit.py (one dataset's fit), screen.py (the degenerate-fit screen),
  caveats.py (the warnings about the data's origin), result.py (`PooledResult`);
* `compare_fit` — the pooled fit beside the real-data fit: standardised differences and CI
  overlap (compare.py; `compare_estimates` for a real-data fit made elsewhere).

>>> import dpsynth
>>> tab = dpsynth.pool([1.0, 1.2, 0.9, 1.1, 1.05], [0.04, 0.05, 0.045, 0.05, 0.048], rule="reiter2003")
>>> round(float(tab.loc[0, "t"]), 4)
0.0491
"""
from .compare import CompareFit, ci_overlap, compare_fit
from .fit import DegenerateFitWarning, NotNoiseAwareWarning, PooledResult, fit_pooled, pool_fits, wald_per_dataset
from .rules import RULES, barnard_rubin, pool, wald_test

D1 = wald_test

__all__ = ["RULES", "pool", "wald_test", "D1", "barnard_rubin", "fit_pooled", "pool_fits", "wald_per_dataset", "PooledResult", "NotNoiseAwareWarning",
           "DegenerateFitWarning", "compare_fit", "CompareFit", "ci_overlap"]
