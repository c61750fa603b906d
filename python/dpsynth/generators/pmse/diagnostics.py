"""Mixing diagnostics of the pMSE mechanism's Metropolis chains (``sampler="metropolis-approximate"``).

One R̂/ESS implementation serves the whole engine: the rank-normalised split-R̂ (the larger of the
bulk and folded versions) and the bulk effective sample size of Vehtari et al. (2021), computed by
arviz-stats in :mod:`dpsynth.graphical.posterior` and re-exported here.

Until this package was split, the pMSE chains reported the classic split-R̂ of Gelman et al. (BDA3
§11.4) on the raw draws. The rank-normalised version agrees with it on well-mixed, roughly normal
chains; it is larger where one chain's tails or scale differ (the folded version), and it is NaN for
a single chain (``n_releases=1``), where the classic one split that chain in two.

The diagnostics are functions of the whole chains, so the generator keeps them only with
``keep_diagnostics=True`` (and then flags its ledger).
"""
from __future__ import annotations

import numpy as np

from ...graphical.posterior import ess_bulk, split_rhat

MIN_DRAWS = 4  # fewer draws per chain than this: R̂ and ESS are reported as NaN


def mixing(draws: np.ndarray) -> dict:
    """R̂ and bulk ESS per parameter of ``draws`` (chains × draws × dim): {"rhat", "ess_bulk"}.

    NaN where a chain has fewer than :data:`MIN_DRAWS` draws or a parameter never moved."""
    draws = np.asarray(draws, dtype=float)
    if draws.shape[1] < MIN_DRAWS:
        nan = np.full(draws.shape[2], np.nan)
        return {"rhat": nan, "ess_bulk": nan.copy()}
    with np.errstate(divide="ignore", invalid="ignore"):  # a parameter that never moved: 0/0, reported as NaN
        return {"rhat": np.atleast_1d(split_rhat(draws)), "ess_bulk": np.atleast_1d(ess_bulk(draws))}


__all__ = ["mixing", "split_rhat", "ess_bulk", "MIN_DRAWS"]
