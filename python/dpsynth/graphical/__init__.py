"""Graphical models in torch: discrete domains, log-space factors, junction trees, the
maximum-entropy (log-linear) family of a set of marginal queries, and posterior tools for its
parameters (Laplace approximation, HMC, elliptical slice sampling, R̂ / ESS).

Shared by NAPSU-MQ (posterior over the max-ent parameters) and any generator that needs exact
inference or sampling on a low tree-width Markov network.

>>> from dpsynth.graphical import Domain, MaxEntModel
>>> MaxEntModel(Domain(["a", "b"], [3, 2]), [("a", "b")]).D
5
"""
from .chunks import reused_memory
from .domain import Domain
from .factor import Factor
from .junction_tree import JunctionTree, greedy_elimination_order
from .maxent import MaxEntModel, canonical_cells, maximal_cliques
from .posterior import ConvergenceError, elliptical_slice, ess_bulk, hmc, laplace_approximation, split_rhat

__all__ = ["Domain", "Factor", "JunctionTree", "greedy_elimination_order", "MaxEntModel", "canonical_cells",
           "maximal_cliques", "ConvergenceError", "elliptical_slice", "ess_bulk", "hmc", "laplace_approximation",
           "split_rhat", "reused_memory"]
