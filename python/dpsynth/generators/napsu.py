"""NAPSU-MQ: noise-aware private synthetic data from marginal queries (Räisä, Jälkö, Kaski & Honkela,
AISTATS 2023, Algorithm 1), with missing data, told which analyses it must serve.

**Model.** On the schema's discrete domain (categories; numeric columns binned by the schema's public
bins), the maximum-entropy distribution matching a set of marginal queries C_1..C_K is the
log-linear model p(x | θ) = exp(θᵀa(x) − A(θ)) with canonical (identifiable) statistics a(x)
(:class:`dpsynth.graphical.MaxEntModel`; paper eq. 4 and Supp. C).

**Which marginals** (``analyses=``, ``queries=``). An analysis is a formula (``"income ~ age + race +
sex"``) or a pair ``(response, [predictors])``. The synthetic data support it *congenially* when the
model family contains the analysis model (:func:`dpsynth.analyses.congenial_queries`): the response
with each predictor, the interactions the formula names, and the predictors' joint structure (their
joint table when it has at most 256 cells; else, under MST, a star of predictor cliques around a hub:
the predictor most associated with the response in its released (response, predictor) table and the
smaller ones that still fit ``max_cells``, each other predictor measured with the hub, :func:`star_queries`;
a tree of predictor pairs chosen privately where no star fits). Those cliques are measured with the
whole budget when they cover every column; the other columns join through MST (private-pgm's
maximum spanning tree, McKenna et al. 2021) paid from ``selection_share`` of ρ, half for the 1-way
tables that score it and half for the exponential mechanisms (:func:`dpsynth.generators.napsu_budget.split_rho`).
``queries="mst"`` without analyses selects every clique that way; ``queries="aim"`` takes the cliques
AIM selects (:func:`dpsynth.marginals.aim.aim_measure`, run on ``selection_share`` of ρ with its model
capped at ``AIM_MODEL_CELLS`` junction-tree cells; on the reduced Adult it picks about 25 pairs, so the
posterior is larger and slower than with MST's tree); a list of column tuples is measured as given
(with the analyses' cliques added).

**Release and privacy.** Neighbouring relation: add/remove one row. Each released marginal table has
L2 sensitivity 1 (a row adds 1 to at most one cell), so T tables released together have Δ₂ = √T,
and the discrete Gaussian of scale σ is ρ = T/(2σ²)-zCDP (Canonne, Kamath & Steinke 2020). All
spends are in ρ on one ledger, which converts Σρ to (ε, δ) once. (The paper uses substitution with
Δ₂ = √(2K); a substitution is a removal plus an addition, so this guarantee implies it with twice
the ε of a single step — group privacy of size 2.) n is not public: the noisy totals estimate it.

**Likelihood and posterior** (:mod:`dpsynth.graphical.noise_aware`). The CLT likelihood of the
released tables (paper eq. 6). With one count group it is evaluated by junction-tree messages
(:mod:`dpsynth.graphical.gaussian_tree`: cost grows with the cliques, not with all released cells;
``max_cells`` bounds the largest clique), and the frozen-V surrogate and the Fisher preconditioner
use its reduced (D + 1)-dimensional form; with several (available-case) the dense form.
Prior θ ~ N(0, prior_sd²) with ``prior_sd = 2.5`` (paper: 10): a log odds ratio of ±5 between
cells is already extreme, and a vaguer prior leaves the parameters of near-empty cells with long,
one-sided, prior-dominated tails that no sampler crosses quickly (see
``shared/reference/napsu-validity.md``).

- ``inference="hmc"`` (default): Hamiltonian Monte Carlo (:func:`dpsynth.graphical.posterior.hmc`) with a dense mass
  matrix adapted in warm-up from the pooled draws of all chains, shrunk towards F⁻¹'s correlations (``METRIC_TARGET``), 48
  chains (16 under ``missing="mar"``: :data:`MCMC_DEFAULTS`) started at N(mode, 0.3² F⁻¹) (F the Fisher information at
  the mode), in coordinates where a per-coordinate map refitted in warm-up undoes the skew of near-empty
  cells' parameters (:data:`MARGINAL_MAP`). The chains target a cheap *surrogate*: the likelihood with V
  frozen at the warm-up draws' centre but each table's own block, or for incomplete data rᵀV⁻¹r expanded
  about it (:meth:`NoiseAwareLikelihood.surrogate`). Up to ``IMPORTANCE_DRAWS`` draws, thinned evenly (a
  quarter, then half, while those miss the targets), are reweighted by Pareto-smoothed importance sampling
  to the exact posterior (PSIS; Vehtari et al. 2024); datasets are drawn by sampling-importance-resampling.
  Diagnostics on the released cells' probabilities: split-R̂ over every draw of the chains (``rhat_target``), bulk ESS times the importance efficiency
  (``ess_target``) and the Pareto k̂ (≤ 0.7). While they miss, the chains run on, half as long
  again each time, up to ``MAX_EXTENSIONS`` times; when they still miss, ``diagnostics_["mixed"]`` is
  False, a :class:`PosteriorNotMixedWarning` is raised at fit and at every ``sample()``, and the reports say so (``on_not_mixed="raise"`` makes
  it an error). Why not exact HMC: the exact gradient needs third derivatives of A(θ) (≈ 10× the
  surrogate's cost); why not delayed acceptance (``"hmc-da"``): on Adult its second stage kept
  47 % of proposals and chains stuck for up to 109 iterations (split R̂ 1.06 on every cell).
- ``inference="hmc-da"``: delayed acceptance (Christen & Fox 2005): trajectories follow the
  surrogate and a second accept step corrects every proposal to the exact density (exact, no
  weights, but sticky where the surrogate is poor).
- ``inference="laplace"``: draws from N(mode, H⁻¹) only; calibrated when every measured cell is
  well above the noise (the toy problem), far too wide on data with rare cells (Adult).
- ``inference="slice"``: elliptical slice sampling with the Laplace reference (the earlier
  default; it does not mix on Adult).

**Synthetic data.** ``sample(n, m)``: m posterior draws of θ (resampled from the kept draws by
their importance weights; uniformly for ``"hmc-da"`` and ``"slice"``), and n rows from p(x | θ_j) for each. Combine analyses with the rules for fully
synthetic data (``dpsynth.fit_pooled(..., rule="synthetic")``).

**Missing data** (``missing=``):

- ``"auto"`` (default): ``"mar"`` on the columns the public schema declares may be missing
  (``{"missing": true}``, :class:`dpsynth.schema.Column`) or those named in ``incomplete=``; with
  none, the complete-data model, and a column holding missing values that was not declared is an
  error that says how to declare it. The choice is made from public knowledge only, never from
  the rows, so the mechanism (and its ledger) does not reveal whether a column had missing values.
- ``"available-case"``: each table counts the rows observed on its columns
  (``count_marginal``); tables whose released totals agree within noise share one n
  (:func:`count_groups`, post-processing), so complete data get the reduced likelihood and
  incomplete data the dense one with one n per group. The synthetic
  data are complete and estimate the complete-data distribution; valid when values are missing
  completely at random (MCAR).
- ``"mar"``: each column in ``incomplete`` (public knowledge; default all) gets its missing value
  as an extra level, so the tables over it measure its response indicator R_j jointly with the
  other columns (the ledger says so). The model behind them (:class:`dpsynth.graphical.icin.IcinModel`)
  is a max-ent model of the complete values x *and* the R_j, with every interaction within a
  clique except x_j·R_j: itemwise conditionally independent nonresponse (ICIN, Sadinle & Reiter
  2017), R_j ⊥ x_j given the other columns and indicators. It holds under MCAR and under MAR
  through columns that are always observed; it is just-identified (θ has as many coordinates as
  the tables have free cells), so it fits any observed-data distribution on the cliques, and
  p(x) = Σ_r p(x, r) is identified. Synthetic rows are drawn from the fitted (x, R) and R is
  dropped: complete datasets, each from its own posterior draw, so posterior uncertainty reaches
  them and ``fit_pooled(rule="synthetic")`` applies. Validity needs every column that drives a
  column's missingness in a measured table with it (name it in ``analyses=`` or ``queries=``).
  ``result.missing_assumption`` and ``result.missing_share`` (the mean of the drawn R_j: noisy,
  from the release) go into the reports. MNAR cannot be identified from the data:
  ``mnar_shift={col: δ}`` adds δ·x_j·R_j to the model (x_j the level index): a missing value's
  odds of each step up the levels are e^δ times an observed one's, given everything else (the
  δ-adjustment of mice's NARFCS); the report then says "MNAR sensitivity analysis" instead of
  claiming validity.
- ``"level"``: a missing value is an extra level of each column in ``incomplete`` (public
  knowledge: an option, never read from the data; default every column). Every row counts in every
  table (one n). The synthetic data carry the missingness pattern, for two-stage imputation and
  pooling (``dpsynth.pool``). A column declared complete that holds missing values is an error.

Example
-------
>>> import numpy as np, pandas as pd, dpsynth
>>> rng = np.random.default_rng(0)
>>> x1, x2 = rng.integers(0, 2, 2000), rng.integers(0, 2, 2000)
>>> y = (rng.random(2000) < 1 / (1 + np.exp(-x1))).astype(int)
>>> df = pd.DataFrame({"x1": x1, "x2": x2, "y": y})
>>> schema = dpsynth.Schema.from_dict({c: {"type": "categorical", "categories": [0, 1]} for c in df})
>>> gen = NAPSUMQ(1.0, 1 / 2000**2, queries=[("x1", "x2", "y")]).fit(df, schema, seed=1)
>>> res = gen.sample(m=3, seed=2)
>>> len(res.datasets), res.datasets[0].shape[1], res.ledger.total_epsilon() <= 1.0
(3, 3, True)
"""
from __future__ import annotations

import dataclasses
import math
import time
import warnings

import numpy as np
import torch

from ..graphical import Domain, MaxEntModel, canonical_cells, maximal_cliques, reused_memory
from ..graphical.reference import largest_levels
from ..graphical.icin import IcinModel
from ..graphical.noise_aware import MODE_TOL as TIGHT_MODE_TOL, NoiseAwareLikelihood, count_groups
from .napsu_budget import RhoSplit, planned_sd, split_measurement, split_rho
from ..graphical.posterior import PosteriorNotMixedWarning, elliptical_slice, laplace_approximation
from ..privacy import cdp_rho
from ..validation import check_int, check_positive_float, check_share
from ..schema import MISSING
from .base import Generator, check_count
from .marginal_model import single_thread
from .napsu_sampling import (DIAGNOSTIC_DRAWS, IMPORTANCE_DRAWS, INIT_SCALE, MARGINAL_MAP, MAX_EXTENSIONS,  # noqa: F401
                             MCMC_DEFAULTS, MCMC_DEFAULTS_MAR, MODE_TOL, PARETO_K_MAX, PosteriorNotMixedError, PosteriorSampling, mode_tolerance)
from ..marginals.measure import Measurement, measure_marginals
from ..marginals.mst import mst_select
from ..datasets import ADULT_COLUMNS, ADULT_FORCED_QUERIES, adult_reduced  # noqa: F401 (their home is datasets)
from ..analyses import connected_components
from .napsu_queries import HUB_SHARE, as_query_list, check_queries, largest_clique, star_queries, too_large

DTYPE = torch.float64
INFERENCE = ("hmc", "hmc-da", "laplace", "slice")
MAR_ASSUMPTION = ("missing at random given the other columns (MAR; precisely, itemwise conditionally "
                  "independent nonresponse: whether a value is missing may depend on the row's other values "
                  "and on which of them are missing, not on the value itself); the completed datasets "
                  "estimate the complete-data distribution only under this assumption")
MISSING_MODES = ("auto", "available-case", "level", "mar")
#: AIM's cap on its own model's junction-tree cells while it selects (``queries="aim"``)
AIM_MODEL_CELLS = 3000
SELECTIONS = ("mst", "aim")  # private query selection: MST's tree or AIM's adaptive rounds
PRIOR_SD = 2.5
#: reference levels of θ's canonical coordinates (the ``reference`` option; ``"auto"``: by width)
REFERENCES = ("auto", "first", "largest")
REFERENCE = "auto"
#: ... from this width: the bundled Adult at 15 columns (D = 1,026), seed 6, 38,233 gradients with
#: level 0 against 19,811 with the largest levels (docs/napsu-measurements.md, "Session of
#: 2026-12-04, second"); Adult-10 (D = 300–550) keeps level 0, the coding its studies measured
REFERENCE_LARGEST_MIN_DIM = 800
#: per-table ρ of the analyses' tables relative to the other measured tables. On Adult-10 at ε = 1
#: (bench/napsu_validity.py, 20 repeats, same seeds) 1 gave pooled intervals of the named regression
#: a median 1.62× the real-data ones, 2 gave 1.49× (3: 1.43× over 12 repeats), coverage 0.99 for 1
#: and 2; the other columns' tables get less ρ in exchange (their cells are noisier)
ANALYSIS_WEIGHT = 2.0
#: rows of each synthetic dataset per released private row. The synthetic rule's
#: T = (1 + 1/m) b − ū estimates the posterior variance whatever the synthetic size; a larger
#: dataset shrinks the synthesis part of b (ū falls as 1/n_syn), so ν = (m − 1)(1 − ū/((1 + 1/m) b))²
#: grows and the t quantile falls (Raghunathan, Reiter & Rubin 2003). The fallback (n_syn/n_orig)·ū
#: needs n_orig = n̂, which the result carries (``SynthResult.n_private``). Measured on Adult-10 at
#: ε = 1 with the defaults (bench/napsu_validity.py, 20 repeats): median width ratio 1.49.
SIZE_RATIO = 4.0
class NAPSUMQ(PosteriorSampling, Generator):
    """NAPSU-MQ (see the module docstring).

    Parameters
    ----------
    epsilon, delta : the (ε, δ) budget; δ is required (e.g. 1/n²).
    analyses : formulas (``"income ~ age + race + sex"``, patsy/R syntax) or ``(response,
        [predictors])`` pairs the synthetic data must serve; their congenial cliques are always
        measured (:func:`dpsynth.analyses.congenial_queries`).
    queries : ``"mst"`` (default: cliques outside the analyses chosen by MST), ``"aim"`` (the cliques
        AIM selects, :meth:`_measure_aim`) or a list of column tuples, each a full marginal to measure
        (every column must appear in one).
    selection_share : share of ρ for selection when some column is outside the fixed cliques
        (half 1-way tables, half exponential mechanisms); default 0.2. Nothing is spent on
        selection when the analyses' cliques cover every column.
    analysis_weight : each table the analyses need gets this many times the ρ of each other
        measured table (default 2, :data:`ANALYSIS_WEIGHT`; 1: an even split); the two groups are
        two ledger entries
        (:func:`dpsynth.generators.napsu_budget.split_measurement`).
    size_ratio : rows of each synthetic dataset per released private row n̂ when ``sample(n=None)``
        (default 4, :data:`SIZE_RATIO`): larger datasets narrow the pooled intervals at no privacy
        cost; ``fit_pooled`` reads n̂ from the result for its fallback. 1 gives n̂ rows.
    inference : ``"hmc"`` (default), ``"hmc-da"``, ``"laplace"`` or ``"slice"``; see the module docstring.
    prior_sd : sd of the N(0, prior_sd²) prior on θ (default 2.5; paper: 10).
    reference : the reference level of each column in θ's canonical coordinates (each θ is a
        cell's log odds ratio against its columns' reference levels, and the prior shrinks
        towards them): ``"first"`` (level 0, the paper's "arbitrary" choice, Räisä et al. 2023,
        Supp. C), ``"largest"`` (the level with the largest released count: post-processing of
        the noisy tables; never an incomplete column's "missing";
        :func:`dpsynth.graphical.reference.largest_levels`) or ``"auto"`` (default: ``"largest"``
        for models of at least :data:`REFERENCE_LARGEST_MIN_DIM` parameters, ``"first"`` below).
        A rare reference level (the bundled Adult's education-num 1: 0.16 % of rows) puts its
        cells' noise into every coordinate of its tables, and the chains mix slowly there; the
        choice changes the coordinates and what the prior shrinks towards, not the family.
        ``diagnostics_["reference_levels"]`` says which levels a fit used.
    missing : ``"auto"`` (default: ``"mar"`` on the columns declared incomplete, see the module
        docstring), ``"mar"`` (completed datasets, valid under MAR), ``"available-case"`` (valid
        under MCAR) or ``"level"`` (missing as an extra level, kept in the output).
    incomplete : with ``missing="auto"``, ``"mar"`` or ``"level"``, the columns that may be missing
        (public knowledge; default: those the schema declares with ``"missing": true``; with
        ``"mar"``/``"level"`` and no declaration, every column).
    mnar_shift : with ``missing="mar"``, column → δ added per level index to the log-odds of the
        filled-in values (NARFCS-style sensitivity analysis; 0 = MAR, δ > 0 moves them up the levels).
    forced_queries : with ``queries="mst"``, column tuples always measured; MST selects the rest.
    mcmc_chains, mcmc_warmup, mcmc_draws, mcmc_thin : sampler settings (chains run as one batch);
        None = :data:`MCMC_DEFAULTS` for the chosen ``inference``.
    rhat_target, ess_target : mixing targets on the released cells' probabilities (1.01, 400).
    on_not_mixed : ``"warn"`` (default: warning + ``diagnostics_["mixed"] = False`` shown in every
        report) or ``"raise"``.
    max_restarts : L-BFGS restarts allowed for the Laplace mode.
    max_cells : largest junction-tree clique accepted, in cells (default 1024): the likelihood's
        cost grows with its cube (:mod:`dpsynth.generators.napsu_queries`); MST chooses only pairs
        within it, and a model whose tree would exceed it is refused with the clique named.
    selection_penalty : with ``queries="mst"``, lower each pair's score by the noise its
        measurement will add (AIM's √(2/π)·σ·cells, :func:`dpsynth.marginals.mst.noise_penalty`,
        σ planned by :func:`~dpsynth.generators.napsu_budget.planned_sd`), so that wide tables of
        nearly independent columns (Adult's native-country × fnlwgt, 672 cells) give way to small
        ones and the posterior has fewer parameters (the bundled Adult's 15 columns all modelled:
        D = 1,207 against 2,751, peak memory 3.0 against 6.8 GB; Adult-10's 20-seed MAR / MCAR
        studies: the same coverage, less time). Default True; False: private-pgm's scores.

    Example
    -------
    >>> import dpsynth
    >>> gen = NAPSUMQ(1.0, 1e-9, analyses=["income ~ age + sex"])
    >>> gen.analyses
    ['income ~ age + sex']
    """

    method = "napsu-mq"
    relation = "add-remove"
    noise_aware = True  # each dataset from its own posterior draw: fit_pooled(rule="synthetic") is valid
    counts_only = True  # selection and measurement only count marginals (dpsynth.marginals)
    needs_delta = True
    needs_bounds = True
    # options whose value in use fit stores as <name>_ (_resolve_options); reports show that value
    derived_options = ("queries", "inference", "incomplete", "forced_queries", "analyses", "mnar_shift",
                       "mcmc_chains", "mcmc_warmup", "mcmc_draws", "mcmc_thin")

    def __init__(self, epsilon: float, delta: float | None = None, queries="mst", inference: str = "hmc",
                 prior_sd: float = PRIOR_SD, reference: str = REFERENCE, missing: str = "auto", incomplete=None, forced_queries=None,
                 analyses=None, selection_share: float = 0.2, analysis_weight: float = ANALYSIS_WEIGHT,
                 size_ratio: float = SIZE_RATIO, mnar_shift=None,
                 mcmc_chains: int | None = None, mcmc_warmup: int | None = None, mcmc_draws: int | None = None,
                 mcmc_thin: int | None = None, rhat_target: float = 1.01, ess_target: float = 400.0,
                 on_not_mixed: str = "warn", max_restarts: int = 5, max_cells: int = 1024,
                 selection_penalty: bool = True):
        super().__init__(epsilon, delta)
        # checked here, stored as passed (get_params, sklearn.base.clone); _resolve_options derives in fit
        if isinstance(queries, str):
            if queries not in SELECTIONS:
                raise ValueError(f"queries must be 'mst', 'aim' or a list of column tuples, got {queries!r}")
        elif not as_query_list(queries, "queries"):
            raise ValueError("queries must list at least one column tuple, e.g. [('age', 'income')]")
        if inference not in INFERENCE and inference != "mcmc":  # "mcmc": the earlier name of "hmc"
            raise ValueError(f"inference must be one of {INFERENCE}, got {inference!r}")
        if missing not in MISSING_MODES:
            raise ValueError(f"missing must be one of {MISSING_MODES}, got {missing!r}")
        if reference not in REFERENCES:
            raise ValueError(f"reference must be one of {REFERENCES}, got {reference!r}")
        if incomplete is not None and missing not in ("auto", "level", "mar"):
            raise ValueError("incomplete= is used only with missing='auto', 'mar' or 'level'")
        if mnar_shift is not None:
            if missing not in ("auto", "mar"):
                raise ValueError("mnar_shift= is a sensitivity option of missing='mar' (or 'auto')")
            if not isinstance(mnar_shift, dict) or not all(
                    isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
                    for v in mnar_shift.values()):
                raise TypeError("mnar_shift must map column names to finite numbers, e.g. {'income': 0.5}")
        if forced_queries is not None:
            if queries not in SELECTIONS:
                raise ValueError("forced_queries is used only with queries='mst' or 'aim'; list them in queries instead")
            as_query_list(forced_queries, "forced_queries")
        if not isinstance(selection_penalty, (bool, np.bool_)):
            raise TypeError(f"selection_penalty must be True or False, got {selection_penalty!r}")
        if on_not_mixed not in ("warn", "raise"):
            raise ValueError(f"on_not_mixed must be 'warn' or 'raise', got {on_not_mixed!r}")
        self._set_params(locals(), {
            "prior_sd": check_positive_float, "analysis_weight": check_positive_float,
            "size_ratio": check_positive_float, "rhat_target": check_positive_float,
            "ess_target": check_positive_float, "selection_share": check_share,
            "max_restarts": lambda v, name: check_int(v, name, minimum=0), "max_cells": check_count,
            **{k: lambda v, name: check_int(v, name, minimum=1, allow_none=True)
               for k in ("mcmc_chains", "mcmc_warmup", "mcmc_draws", "mcmc_thin")}})

    def _resolve_options(self):
        """The settings ``fit`` uses, derived from the options as passed: query lists as column
        tuples, ``inference="mcmc"`` as ``"hmc"``, the sampler settings left at None from
        :data:`MCMC_DEFAULTS` of that inference (attributes with a trailing underscore)."""
        self.inference_ = "hmc" if self.inference == "mcmc" else self.inference
        self.queries_ = self.queries if isinstance(self.queries, str) else as_query_list(self.queries, "queries")
        self.forced_queries_ = [] if self.forced_queries is None else as_query_list(self.forced_queries,
                                                                                      "forced_queries")
        inc = self.incomplete
        self.incomplete_ = None if inc is None else [str(c) for c in ([inc] if isinstance(inc, str) else inc)]
        self.mnar_shift_ = None if self.mnar_shift is None else {str(k): float(v) for k, v in self.mnar_shift.items()}
        self.analysis_list_ = [] if self.analyses is None else (
            [self.analyses] if isinstance(self.analyses, (str, tuple)) else list(self.analyses))
        self._sampler_defaults(MCMC_DEFAULTS)

    def _sampler_defaults(self, table: dict):
        """``mcmc_*_`` from ``table`` for the options left at None (``fit`` calls it again with
        :data:`MCMC_DEFAULTS_MAR` once the missing-data mode is known)."""
        defaults = table.get(self.inference_, MCMC_DEFAULTS.get(self.inference_, MCMC_DEFAULTS["hmc"]))
        for k, default in zip(("mcmc_chains", "mcmc_warmup", "mcmc_draws", "mcmc_thin"), defaults):
            setattr(self, k + "_", default if getattr(self, k) is None else getattr(self, k))

    # ------------------------------------------------------------------ which marginals
    def _missing_mode(self) -> tuple[str, list[str] | None]:
        """(mode, incomplete columns) with ``"auto"`` resolved from public knowledge only: the
        ``incomplete=`` argument, else the schema's declared ``missing`` columns."""
        incomplete = self.incomplete_ if self.incomplete_ is not None else (self.schema_.incomplete or None)
        if self.missing != "auto":
            return self.missing, incomplete
        if not incomplete and self.mnar_shift_:
            raise ValueError("mnar_shift= shifts filled-in values, but no column is declared incomplete; "
                             "declare them in the schema ('missing': true) or pass incomplete=[...]")
        return ("mar", incomplete) if incomplete else ("available-case", None)

    def _domain(self) -> tuple[Domain, list[str]]:
        names = self.schema_.names
        sizes = list(self.schema_.domain_sizes)
        level_cols = []
        self.missing_mode_, incomplete = self._missing_mode()
        if self.missing_mode_ in ("level", "mar"):
            level_cols = list(names) if incomplete is None else list(incomplete)
            unknown = [c for c in level_cols if c not in names]
            if unknown:
                raise ValueError(f"incomplete columns {unknown} are not in the schema")
            for c in level_cols:
                sizes[names.index(c)] += 1
        return Domain(names, sizes), level_cols

    def _plan(self, domain: Domain):
        """(fixed cliques, predictor pairs to choose among, parsed analyses) from the public schema
        and the analyses: nothing here reads the data."""
        if not self.analysis_list_:
            return [], [], [], []
        from ..analyses import PredictorStar, congenial_queries, parse_analyses

        out = self.output_schema_  # a derived column stands for its source
        source = {b: out[b].derived_from for b in out.derived}
        parsed = parse_analyses(self.analysis_list_, list(domain.attrs) + list(source))
        plan = congenial_queries(parsed, {a: domain.size(source.get(a, a)) for a in (*domain.attrs, *source)})
        pos = {a: i for i, a in enumerate(domain.attrs)}

        def modelled(clique):
            return tuple(sorted(dict.fromkeys(source.get(a, a) for a in clique), key=pos.get))
        fixed = list(dict.fromkeys(modelled(c) for c in plan.fixed))
        among = [q for q in dict.fromkeys(modelled(c) for c in plan.select_among) if len(q) == 2]
        stars = [PredictorStar(source.get(a.response, a.response), tuple(dict.fromkeys(source.get(x, x) for x in
                 a.predictors))) for a in plan.stars]
        return fixed, among, parsed, stars

    def _check_queries(self, domain: Domain, fixed, among) -> list[tuple]:
        """Public checks before any release (:func:`check_queries`): known columns, every column in
        a query, the largest junction-tree clique within ``max_cells``; returns the predictor pairs
        MST may choose."""
        names = set(domain.attrs)
        explicit = [] if self.queries_ in SELECTIONS else self.queries_
        for q in explicit + self.forced_queries_:
            unknown = [c for c in q if c not in names]
            if unknown:
                raise ValueError(f"query {q} names columns {unknown} that are not in the schema")
        if explicit:
            covered = set().union(*map(set, explicit), *map(set, fixed))
            left = [c for c in domain.attrs if c not in covered]
            if left:
                raise ValueError(f"columns {left} are in no query; add a query for each (e.g. ('{left[0]}',)) or "
                                 "drop them from the data and the schema")
        return check_queries(domain, maximal_cliques([*explicit, *self.forced_queries_, *fixed]), among,
                             self.max_cells, self.queries_ if isinstance(self.queries_, str) else None)

    # ------------------------------------------------------------------ fitting
    def _fit(self, rows, data, source):
        t_start = time.perf_counter()
        self._resolve_options()
        domain, level_cols = self._domain()
        if self.missing_mode_ == "mar":
            self._sampler_defaults(MCMC_DEFAULTS_MAR)
        fixed, among, parsed, stars = self._plan(domain)
        among = self._check_queries(domain, fixed, among)
        names = list(domain.attrs)
        if self.missing_mode_ in ("level", "mar") or self.missing == "auto":
            # an input check for the data holder (no release follows an error), not a mechanism
            others = [j for j, c in enumerate(names) if c not in level_cols]
            for j, counts in zip(others, rows.tables([[j] for j in others], missing_cell=True)):
                if counts[-1] > 0:
                    raise ValueError(
                        f"column {names[j]!r} has missing values but is not declared incomplete. Declare every "
                        "column that may be missing (public knowledge): in the schema, "
                        f"{{{names[j]!r}: {{..., 'missing': True}}}} (R: dp_schema(..., missing = \"{names[j]}\")), "
                        f"or incomplete=[{names[j]!r}, ...]; NAPSU-MQ then completes them under MAR. "
                        "missing='available-case' instead assumes MCAR")
        rows = rows.with_missing_level(names.index(c) for c in level_cols)
        self.domain_, self.level_columns_ = domain, level_cols
        self.analyses_ = [a.formula for a in parsed]
        with single_thread(), reused_memory():
            measurements = self._measure(rows, domain, source, fixed, among, stars)
            self._fit_posterior(measurements, source)
        self.diagnostics_["fit_seconds"] = time.perf_counter() - t_start

    def _measure(self, rows, domain, source, fixed, among, stars=()) -> list[Measurement]:
        """Selection (if any) and measurement, all in ρ; the split is recorded in ``rho_split_``.
        Under MST, an analysis whose predictors' joint is too large gets a star of predictor cliques
        around a hub chosen from its released (response, predictor) tables (:func:`star_queries`,
        :data:`HUB_SHARE` of the selection budget; the hubs in ``predictor_hubs_``) in place of MST's
        predictor tree."""
        rho = cdp_rho(self.epsilon, self.delta)
        step = "NAPSU-MQ: marginals"
        if self.level_columns_:  # the ledger says which tables carry the response indicators R_j
            step += f" (missing as a level of {', '.join(self.level_columns_)}: tables over them measure R_j)"
        if self.queries_ == "aim":
            return self._measure_aim(rows, domain, source, fixed, rho, step)
        if self.queries_ != "mst":
            tables = maximal_cliques([*self.queries_, *fixed])
            self.rho_split_ = split_rho(rho, self.selection_share, False)
            return self._measure_tables(rows, domain, tables, fixed, source, step)
        forced = maximal_cliques([*self.forced_queries_, *fixed])
        covered = set().union(*map(set, forced)) if forced else set()
        needs = len(domain) > 1 and (bool(among) or len(covered) < len(domain) or not forced)
        split = split_rho(rho, self.selection_share, needs)
        self.rho_split_ = split
        if len(domain) == 1:
            self.selected_queries_ = [tuple(domain.attrs)]
            return measure_marginals(rows, domain, [domain.attrs], self.ledger, source, step, rho=rho)
        one_way, cliques, rho_hub, self.predictor_hubs_ = [], list(forced), 0.0, {}
        if needs and stars:
            rho_hub = HUB_SHARE * split.selection
            star, self.predictor_hubs_ = star_queries(rows, domain, self.schema_, stars, forced, self.max_cells,
                                                      rho_hub, self.ledger, source, "NAPSU-MQ selection: hub tables")
            fixed, among = [*fixed, *star], among if not star else []
            forced = cliques = maximal_cliques([*forced, *star])
            if len(connected_components(domain.attrs, forced)) == 1:  # the star joined every column: no MST
                needs, self.rho_split_ = False, RhoSplit(0.0, rho_hub, rho - rho_hub)
        if needs:
            one_way, cliques = mst_select(rows, domain, rho, self.ledger, source, forced=forced,
                                          split=(split.one_way / rho, (split.selection - rho_hub) / rho),
                                          step="NAPSU-MQ MST selection", first_among=among,
                                          max_pair_cells=self.max_cells, noise_sd=planned_sd(
                                              split, len(forced), len(domain), self.analysis_weight)
                                          if self.selection_penalty else None)
        return one_way + self._measure_tables(rows, domain, maximal_cliques(cliques), fixed, source, step)

    def _measure_tables(self, rows, domain, tables, fixed, source, step) -> list[Measurement]:
        """Measure ``tables`` with ``rho_split_.measurement``: the analyses' tables (those inside a
        clique of ``fixed``) and the others as two Gaussian mechanisms, weighted by
        ``analysis_weight`` (:func:`split_measurement`); records ``rho_split_.analyses``."""
        held = [set(f) for f in fixed]
        mine = [t for t in tables if any(set(t) <= f for f in held)]
        other = [t for t in tables if t not in mine]
        rho_a, rho_o = split_measurement(self.rho_split_.measurement, len(mine), len(other), self.analysis_weight)
        self.rho_split_ = dataclasses.replace(self.rho_split_, analyses=rho_a)
        self.selected_queries_ = tables
        out = []
        if mine:
            out += measure_marginals(rows, domain, mine, self.ledger, source,
                                     step + (" of the analyses" if other else ""), rho=rho_a)
        if other:
            out += measure_marginals(rows, domain, other, self.ledger, source,
                                     step + (" outside the analyses" if mine else ""), rho=rho_o)
        return out

    def _measure_aim(self, rows, domain, source, fixed, rho, step) -> list[Measurement]:
        """``queries="aim"``: AIM (:func:`dpsynth.marginals.aim.aim_measure`; AIM-E's available-case
        tables under ``missing="available-case"``) runs on ``selection_share``·ρ, its model capped at
        :data:`AIM_MODEL_CELLS` junction-tree cells (the fitted tree is then held to ``max_cells``
        per clique); the cliques it selected, the forced and analysis cliques and a 1-way table
        for every other column are then measured with the rest of ρ. AIM's own
        measurements serve selection only (they are paid for, not reused in the likelihood)."""
        from ..marginals.aim import aim_measure

        split = split_rho(rho, self.selection_share, True)
        self.rho_split_ = split
        res = aim_measure(rows, domain, split.one_way + split.selection, self.ledger, source,
                          partial=self.missing_mode_ == "available-case", max_model_cells=AIM_MODEL_CELLS,
                          step="NAPSU-MQ AIM selection")
        tables = maximal_cliques([*self.forced_queries_, *fixed, *res.selected, *[(a,) for a in domain.attrs]])
        return self._measure_tables(rows, domain, tables, fixed, source, step)

    def likelihood(self, measurements, **options) -> NoiseAwareLikelihood:
        """The max-ent (or ICIN) model of the released ``measurements`` and its noise-aware
        likelihood (``options`` go to :class:`NoiseAwareLikelihood`); refuses a tree whose largest
        clique exceeds ``max_cells``. Post-processing of released values only."""
        tables = [m.attrs for m in measurements]
        cliques = [m.attrs for m in measurements if not any(set(m.attrs) < set(o) for o in tables)]
        latent = self.missing_mode_ == "mar" and bool(self.level_columns_)

        choice = getattr(self, "reference", "first")  # fits saved before the option: level 0
        dim = sum(len(c) for c in canonical_cells(self.domain_, maximal_cliques(cliques)))  # D, whatever the references
        reference = None
        if choice == "largest" or (choice == "auto" and dim >= REFERENCE_LARGEST_MIN_DIM):
            reference = largest_levels(self.domain_, tables, [m.noisy for m in measurements],
                                       last_excluded=self.level_columns_ if latent else ())
        if latent:
            model = IcinModel(self.domain_, cliques, tables, incomplete=self.level_columns_, shift=self.mnar_shift_,
                              reference=reference)
        else:
            model = MaxEntModel(self.domain_, cliques, tables, reference)
        clique, cells = largest_clique(self.domain_, model.cliques)
        if cells > self.max_cells:  # AIM's selection, or several analyses joined by the tree
            raise ValueError(too_large(self.domain_, clique, cells, self.max_cells) + " (the ledger shows the "
                             "budget the selection and measurement spent)")
        groups = count_groups(measurements) if self.missing_mode_ == "available-case" else [0] * len(tables)
        return NoiseAwareLikelihood(model, [m.noisy for m in measurements], [m.sigma for m in measurements],
                                    groups, self.prior_sd, **options)

    def _fit_posterior(self, measurements, source):
        lik = self.likelihood(measurements)
        model = lik.model
        rng = source.spawn()
        by_attrs = {m.attrs: m.noisy for m in measurements}
        x0, fisher = self._mode(lik, lik.initial_point([by_attrs[c] for c in model.cliques]), mode_tolerance(self.inference_, lik.dim, TIGHT_MODE_TOL))
        self.model_, self.likelihood_, self.measurements_ = model, lik, measurements
        self.diagnostics_ = {"D": model.D, "P": model.P, "tables": len(model.tables), "cliques": len(model.cliques),
                             "junction_tree_cells": model.jt.size(), "likelihood_form": lik.form,
                             "inference": self.inference_, "rho_split": self.rho_split_.as_dict(),
                             "reference_levels": dict(model.reference)}
        self.draws_, self.laplace_, self.weights_ = None, None, None
        if self.inference_ in ("laplace", "slice"):
            precondition = torch.linalg.inv(torch.linalg.cholesky(fisher)).T  # Sᵀ F S = I
            la = laplace_approximation(lik.log_posterior, x0, max_restarts=self.max_restarts, rng=rng,
                                       precondition=precondition)
            self.laplace_, mode = la, la.mode
            self.diagnostics_.update({"laplace_restarts": la.restarts, "laplace_seconds": la.seconds})
        else:
            mode = x0
        if self.inference_ == "slice":
            res = elliptical_slice(lik.log_posterior, la.mode, la.chol_cov, chains=self.mcmc_chains_,
                                   warmup=self.mcmc_warmup_, draws=self.mcmc_draws_, thin=self.mcmc_thin_, rng=rng)
            self._keep_draws(res)
        elif self.inference_ in ("hmc", "hmc-da"):
            self._run_hmc(lik, x0, torch.linalg.inv(fisher), rng)
        at = mode if self.draws_ is None else self.draws_.reshape(-1, lik.dim)
        self.n_ = float(lik.counts(at).detach().reshape(-1, lik.G).median(dim=0).values.max())
        model.__dict__.pop("_evidence_cache", None)  # rebuilt on demand; not part of the fitted state

    def default_n(self) -> int:
        """``size_ratio`` × the released number of rows n̂ (see :data:`SIZE_RATIO`)."""
        return max(1, int(round(getattr(self, "size_ratio", 1.0) * self.n_)))

    def sample(self, n=None, m=1, seed=None):
        """m synthetic datasets of n rows (default: ``size_ratio`` × the released n̂), each from its
        own posterior draw."""
        if getattr(self, "diagnostics_", {}).get("mixed") is False:
            warnings.warn(self._not_mixed_message(), PosteriorNotMixedWarning, stacklevel=2)
        self._m_request = m
        try:
            res = super().sample(n=n, m=m, seed=seed)
        finally:
            self._batch = None
        res.queries = [tuple(q) for q in self.model_.tables]
        res.analyses = list(getattr(self, "analyses_", []))
        if self.missing_mode_ == "mar":
            shift = getattr(self, "mnar_shift_", self.mnar_shift)  # files saved before it: mnar_shift converted
            res.missing_assumption = MAR_ASSUMPTION if not shift else \
                f"MNAR sensitivity analysis: filled-in values shifted by δ = {shift} (log-odds per level)"
            res.missing_share = dict(self.missing_share_)
        return res

    def _sample_frame(self, n, rng, index):
        if index == 0 or getattr(self, "_batch", None) is None:
            m = check_count(getattr(self, "_m_request", 1), "m")
            with single_thread():
                theta = self.posterior_draws(m, rng)[:, :self.model_.D]
                self._batch = self.model_.sample(theta, n, rng)
                if isinstance(self.model_, IcinModel):
                    self._batch = self._complete(self._batch)
        codes = self._batch[index].copy()
        if not isinstance(self.model_, IcinModel):
            for c in self.level_columns_:
                j = self.domain_.attrs.index(c)
                codes[codes[:, j] == self.domain_.size(c) - 1, j] = MISSING
        return self.schema_.decode(codes, rng)

    def _complete(self, latent):
        """``missing="mar"``: rows drawn from the ICIN model are (x, R); the released share of
        missing values per incomplete column is the mean of R_j (noisy: post-processing of the
        release, averaged over the m datasets), and the datasets keep x, complete."""
        d = len(self.domain_)
        self.missing_share_ = {c: float(latent[:, :, d + k].mean()) for k, c in enumerate(self.model_.incomplete)}
        return latent[:, :, :d]
