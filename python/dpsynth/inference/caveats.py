"""What the analyst is warned about before trusting a pooled fit of synthetic data.

* `warn_not_noise_aware`: the "synthetic" rule on datasets drawn from ONE fitted noisy model
  (NotNoiseAwareWarning): its intervals then ignore the DP noise;
* `warn_not_mixed`: the posterior sampler behind the datasets did not mix (PosteriorNotMixedWarning);
* `check_congeniality`: the formula estimates a dependency that no released table carries
  (UncongenialAnalysisWarning, :func:`dpsynth.analyses.warn_uncongenial`).
"""
from __future__ import annotations

import warnings

from ..analyses import warn_uncongenial


class NotNoiseAwareWarning(UserWarning):
    """The synthetic datasets were not drawn from a noise-aware posterior."""


def warn_not_noise_aware(rule, noise_aware, m, method, stacklevel=2) -> None:
    """Warn (NotNoiseAwareWarning) when the "synthetic" rule meets datasets that all come from one
    fitted model (``noise_aware`` False): the rule's intervals then ignore the DP noise."""
    if rule == "synthetic" and noise_aware is False:
        warnings.warn(f"the {m} datasets of {method!r} come from ONE fitted noisy model: the 'synthetic' "
                      "rule assumes each dataset comes from its own posterior draw, so its intervals ignore "
                      "the DP noise and b may barely exceed ū (tiny df, huge intervals). Use a noise-aware "
                      "generator (method='napsu-mq') for valid intervals.", NotNoiseAwareWarning,
                      stacklevel=stacklevel + 1)


def warn_not_mixed(data, stacklevel: int = 2) -> None:
    """PosteriorNotMixedWarning when ``data`` (a SynthResult) reports that its sampler did not mix:
    the between-dataset variance b, and so the pooled intervals, may then be off."""
    diag = getattr(data, "diagnostics", None)
    if isinstance(diag, dict) and diag.get("mixed") is False:
        from ..graphical.posterior import PosteriorNotMixedWarning

        warnings.warn(f"the posterior sampler behind these {data.m} datasets did not mix (split R-hat of the cells "
                      f"{diag.get('rhat_max_cells', float('nan')):.3f}, bulk ESS {diag.get('ess_bulk_min_cells', float('nan')):.0f}): "
                      "the between-dataset variance b, and so the pooled intervals, may be off",
                      PosteriorNotMixedWarning, stacklevel=stacklevel + 1)


def check_congeniality(data, formula, columns, stacklevel: int = 3) -> list[str]:
    """Warn (UncongenialAnalysisWarning) when ``data`` is a result whose released queries miss a
    dependency the formula estimates; returns the messages (empty: congenial or nothing to check)."""
    queries = getattr(data, "queries", None)
    if queries is None:
        return []
    schema = getattr(data, "schema", None)
    names = list(schema.names) if schema is not None and hasattr(schema, "names") else list(columns)
    return warn_uncongenial(formula, names, queries, stacklevel=stacklevel)

