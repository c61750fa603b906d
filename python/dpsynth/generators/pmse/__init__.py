"""The pMSE mechanism (Snoke & Slavković, PSD 2018): synthesiser parameters drawn by the exponential
mechanism, with the propensity-score mean squared error (pMSE) as quality function.

One concern per module:

- :mod:`.model` — the synthesiser g(θ) (sequential linear regressions and multinomial logits, the
  paper's §3) and the flat but proper public prior π with the chain's state coordinates.
- :mod:`.quality` — the quality û(X, θ): the pMSE of the best two-leaf partition over a
  data-independent family (``tree="stump"``, provable Δu = 1/(2n), proof in its docstring) or of the
  paper's greedy CART (``tree="paper"``, heuristic).
- :mod:`.exact` — the default sampler: exponential mechanisms over finite public candidate sets,
  sampled exactly (McSherry & Talwar 2007).
- :mod:`.chain` — ``sampler="metropolis-approximate"``: the paper's Metropolis chains (approximate).
- :mod:`.diagnostics` — the chains' R̂ and bulk ESS, the engine's one implementation
  (:mod:`dpsynth.graphical.posterior`, Vehtari et al. 2021).
- :mod:`.mechanism` — :class:`PMSEMechanism`, the generator: options, ledger, releases, sampling.
- :mod:`.paper` — the paper's simulation setting and published tables (examples, tests, bench).

Example
-------
>>> import numpy as np
>>> from dpsynth.generators.pmse.paper import UNBOUNDED, paper_data
>>> df = paper_data(500, np.random.default_rng(0))
>>> gen = PMSEMechanism(epsilon=1.0, n_releases=2, n_candidates=200, n_stages=2)
>>> gen = gen.fit(df, UNBOUNDED, seed=1)
>>> res = gen.sample(m=2, seed=2)
>>> [d.shape for d in res.datasets], round(res.ledger.total_epsilon(), 6)
([(500, 2), (500, 2)], 1.0)
"""
from __future__ import annotations

from .chain import SEARCH_SHARPNESS, pmse_chains
from .diagnostics import ess_bulk, split_rhat
from .mechanism import FEATURES, MODELS, SAMPLERS, TREES, PMSEMechanism
from .model import ModelColumn, Prior, SequentialModel
from .quality import CartPMSE, StumpPMSE

__all__ = ["PMSEMechanism", "SequentialModel", "ModelColumn", "StumpPMSE", "CartPMSE", "Prior", "pmse_chains",
           "split_rhat", "ess_bulk", "SEARCH_SHARPNESS", "TREES", "FEATURES", "MODELS", "SAMPLERS"]
