"""The pMSE mechanism's generator (Snoke & Slavković, PSD 2018): synthesiser parameters θ drawn by
the exponential mechanism with the pMSE as quality function, then data drawn from g(θ).

Target density (paper eq. 2): f(θ) ∝ π(θ) exp(−ε_r û(X, θ) / (2Δu)), ε_r = ε / ``n_releases``, with
g(θ) and the public prior π in :mod:`.model`, the quality û and the proof of Δu in :mod:`.quality`.

Privacy: replace-one (the paper's; n is public and is the synthetic size); Δu = 1/(2n) proved for the
stump (``delta_u="paper"`` uses the paper's 1/n); each release is an exponential mechanism at ε_r and
the ``n_releases`` releases compose to ε (conditionally on the public random numbers, which are
independent of the data).

*Sampling* (``sampler=``). The exponential mechanism over a continuous θ cannot be sampled exactly
in general, so the default, ``sampler="exact"``, releases from exponential mechanisms over *finite*
public candidate sets instead, sampled exactly by :func:`dpsynth.privacy.exponential_mechanism`
(McSherry & Talwar 2007): ``n_candidates`` states drawn uniformly from a box set by the prior's scale
(the base measure is that public candidate distribution), then ``n_stages − 1`` "zoom" stages around
the previous stage's release, the ε_r of a release split over the stages (adaptive composition);
see :mod:`dpsynth.generators.pmse.exact`. The guarantee is exact for that mechanism; no chain.
On the paper's case a KS/χ² test of the released indices against the exact softmax over the same
candidates passes (tests), where the old default chain, used as if it were an exact draw, failed a
KS test against exact sampling (p = 0.016).

``sampler="metropolis-approximate"`` is the paper's variant: a finite Metropolis chain on the
continuous density (:mod:`.chain`), whose output is only close to it; the ledger is flagged (ε
reported as ∞). Chain diagnostics (:mod:`.diagnostics`) are kept only with ``keep_diagnostics=True``.

Releases and datasets: release i (i = 1..``n_releases``) costs ε/``n_releases`` in the ledger and
gives θ_i; synthetic dataset j of ``sample(m=...)`` is drawn from g(θ_{j mod n_releases}) (dataset j
uses draw j; with m > n_releases the draws are re-used, post-processing at no extra cost but no new
information, with a warning).

Grey-box audit: with the exact sampler the primitive reports û at every candidate of every stage to
:func:`dpsynth.privacy.record_noise_inputs`; with the chain, û at each chain's (public) start only.

Scope: complete rows only (a missing value gives a ValueError); the generated numeric values are
clipped to the schema's bounds where the schema has them and rounded for integer columns.
"""
from __future__ import annotations

import numbers
import warnings

import numpy as np
import pandas as pd

from ...validation import check_bool, check_count, check_int, check_positive_float
from ...progress import progress
from ..base import Generator
from .exact import candidate_box, draw_candidates, exact_releases, stage_plan
from .chain import SEARCH_SHARPNESS, metropolis_releases
from .model import ModelColumn, Prior, SequentialModel
from .quality import CartPMSE, StumpPMSE

TREES = ("stump", "paper")
FEATURES = ("pairs", "columns")
MODELS = ("sequential-linear",)
SAMPLERS = ("exact", "metropolis-approximate")
CART_DEFAULTS = {"maxdepth": 5, "cp": 0.01, "minsplit": 2, "minbucket": 1}  # tree="paper": rpart's, maxdepth 5


class PMSEMechanism(Generator):
    """The pMSE mechanism (see :mod:`dpsynth.generators.pmse` and its modules for the model, the proof and
    the options).

    Parameters
    ----------
    epsilon : total budget; each of the ``n_releases`` parameter draws costs ε/n_releases.
    model : "sequential-linear" (the only model).
    tree : "stump" (default; the optimal two-leaf partition over a data-independent family, provable
        Δu = 1/(2n)) or "paper" (rpart-like greedy CART, maxdepth 5, cp 0.01: the paper's
        implementation, heuristic).
    n_releases : number of parameter draws θ_1..θ_l.
    sampler : "exact" (default; exponential mechanisms over finite public candidate sets, sampled
        exactly, :mod:`dpsynth.generators.pmse.exact`) or "metropolis-approximate" (the paper's
        MCMC; flags the ledger: no guarantee for a finite chain).
    n_candidates : exact sampler: public stage-1 candidates (default 2000, shared by the releases;
        each later stage draws n_candidates // 4). Cost ≈ (n_candidates + n_releases·(n_stages − 1)·
        n_candidates/4) evaluations of û, ≈ 1 ms each at n = 5000.
    n_stages : exact sampler: stages per release (default 4; 1 = a single finite-candidate mechanism).
    features : "pairs" (default) or "columns": the partition family of the stump.
    n_synth : synthetic sets per θ in û (the paper used 25; the common random numbers make a few enough).
    n_search, n_adapt, n_sample : metropolis-approximate only: burn-in search, burn-in adaptation,
        then with the proposal frozen (the last state is released); see :func:`.chain.pmse_chains`.
        Defaults 100·d, 100·d and 60·d for d parameters (500, 500, 300 for the paper's model).
    prior_var, logit_prior_sd, prior_on : the public prior (see :mod:`.model`).
    delta_u : None (1/(2n) for the stump, 1/n for "paper"), "paper" (1/n), or a number.
    cart : options for the "paper" tree (maxdepth, cp, minsplit, minbucket).
    order : column order of the sequential model (default: the schema's).
    keep_diagnostics : keep diagnostics in ``diagnostics_`` (MCMC traces, or the candidates' û; data-
        dependent, so this flags the ledger as not private).
    """

    method = "pmse"
    relation = "replace-one"
    needs_bounds = False
    encodes_rows = False
    derived_options = ("n_candidates", "n_stages", "cart")  # in use: <name>_, set in fit (_resolve_options)

    def __init__(self, epsilon: float, delta: float | None = None, *, model: str = "sequential-linear",
                 tree: str = "stump", n_releases: int = 10, features: str = "pairs", n_synth: int = 1,
                 sampler: str = "exact", n_candidates: int | None = None, n_stages: int | None = None,
                 n_search: int | None = None, n_adapt: int | None = None, n_sample: int | None = None,
                 prior_var: float = 1e5,
                 logit_prior_sd: float = 10.0, prior_on: str = "var", delta_u=None, cart: dict | None = None,
                 order: list | None = None, keep_diagnostics: bool = False):
        super().__init__(epsilon, delta)
        if model not in MODELS:
            raise ValueError(f"model must be one of {list(MODELS)}, got {model!r}")
        if tree not in TREES:
            raise ValueError(f"tree must be 'stump' (provable) or 'paper' (heuristic greedy CART), got {tree!r}")
        if features not in FEATURES:
            raise ValueError(f"features must be one of {list(FEATURES)}, got {features!r}")
        if prior_on not in ("var", "sd"):
            raise ValueError(f"prior_on must be 'var' or 'sd', got {prior_on!r}")
        if sampler not in SAMPLERS:
            raise ValueError(f"sampler must be 'exact' (default) or 'metropolis-approximate', got {sampler!r}")
        mcmc = {k: v for k, v in (("n_search", n_search), ("n_adapt", n_adapt), ("n_sample", n_sample)) if v is not None}
        grid = {k: v for k, v in (("n_candidates", n_candidates), ("n_stages", n_stages)) if v is not None}
        if sampler == "exact" and mcmc:
            raise ValueError(f"{sorted(mcmc)} set the MCMC chain: pass sampler='metropolis-approximate' too, or "
                             "use n_candidates / n_stages for the exact sampler")
        if sampler != "exact" and grid:
            raise ValueError(f"{sorted(grid)} set the exact sampler: drop them or use sampler='exact'")
        if cart is not None and (not isinstance(cart, dict) or not set(cart) <= set(CART_DEFAULTS)):
            raise ValueError(f"cart must be None or a dict with keys among {sorted(CART_DEFAULTS)}, got {cart!r}")
        if delta_u is not None and delta_u != "paper":
            if isinstance(delta_u, bool) or not isinstance(delta_u, numbers.Real) or not delta_u > 0:
                raise ValueError(f"delta_u must be None, 'paper' or a positive number, got {delta_u!r}")
        # stored as passed (get_params, sklearn.base.clone); the defaults left at None are filled in fit
        self._set_params(locals(), {
            "n_releases": check_count, "n_synth": check_count,
            "n_candidates": _optional(1), "n_stages": _optional(1), "n_search": _optional(0),
            "n_adapt": _optional(0), "n_sample": _optional(1),
            "prior_var": check_positive_float, "logit_prior_sd": check_positive_float,
            "keep_diagnostics": check_bool})

    def _resolve_options(self):
        """The settings ``fit`` uses: the exact sampler's defaults for None (2000 candidates, 4
        stages) and the "paper" tree's options over :data:`CART_DEFAULTS`."""
        self.n_candidates_ = 2000 if self.n_candidates is None else self.n_candidates
        self.n_stages_ = 4 if self.n_stages is None else self.n_stages
        self.cart_ = {**CART_DEFAULTS, **(self.cart or {})}

    # ------------------------------------------------------------------ fitting
    def sensitivity(self, n: int) -> float:
        """Δu used in the density: 1/(2n) (proved, stump), 1/n (the paper's), or the given number."""
        if isinstance(self.delta_u, numbers.Real):
            if self.tree == "stump" and self.delta_u < 1.0 / (2 * n):
                raise ValueError(f"delta_u = {self.delta_u:g} is below the proved sensitivity 1/(2n) = {1 / (2 * n):g}; "
                                 "leave delta_u=None")
            return float(self.delta_u)
        if self.delta_u == "paper" or self.tree == "paper":
            return 1.0 / n
        return 1.0 / (2 * n)

    def _layout(self, data: pd.DataFrame) -> list[ModelColumn]:
        names = list(self.schema_.names)
        if self.order is not None:
            order = [str(c) for c in self.order]
            if sorted(order) != sorted(names):
                raise ValueError(f"order must list each schema column once; got {order}, schema has {names}")
            names = order
        cols = []
        for name in names:
            c = self.schema_[name]
            if c.is_categorical:
                if len(c.categories) < 2:
                    raise ValueError(f"categorical column {name!r} has one category; drop it (it is constant)")
                cols.append(ModelColumn(name, "categorical", len(c.categories)))
            else:
                cols.append(ModelColumn(name, "numeric", 0, bool(c.integer), c.lower, c.upper))
        return cols

    def _fit(self, codes, data, source):
        self._resolve_options()
        layout = self._layout(data)
        if data[[c.name for c in layout]].isna().to_numpy().any():
            raise ValueError("the pMSE mechanism needs complete rows: drop or impute the missing values first "
                             "(e.g. df.dropna()), or use a method that models missingness (privbayes-e, kamino-i)")
        model = SequentialModel(layout)
        num_names = [layout[j].name for j in model.numeric]
        cat_names = [layout[j].name for j in model.categorical]
        n = len(data)  # public under replace-one
        real_num = data[num_names].apply(pd.to_numeric).to_numpy(dtype=float) if num_names else np.zeros((n, 0))
        real_cat = (self.schema_.subset(cat_names).encode(data[cat_names]) if cat_names
                    else np.zeros((n, 0), dtype=np.int64))
        if not np.all(np.isfinite(real_num)):
            raise ValueError("numeric columns must be finite (no inf)")

        rng = source.numpy  # public randomness: candidates or starts first (they do not depend on n), then CRN
        prior = Prior(model, self.prior_var, self.logit_prior_sd, self.prior_on)
        starts = (draw_candidates(prior, rng, self.n_candidates_) if self.sampler == "exact"
                  else prior.sample(rng, self.n_releases))
        z = rng.standard_normal((self.n_synth, n, len(num_names)))
        u = rng.random((self.n_synth, n, len(cat_names)))
        # the first column, if numeric, is c + σ z: its synthetic order is the order of z
        orders = {0: np.argsort(z[:, :, 0], axis=1)} if layout[0].kind == "numeric" else None

        stump = StumpPMSE(model, real_num, real_cat, self.features)
        quality = stump if self.tree == "stump" else CartPMSE(model, real_num, real_cat, **self.cart_)
        du = self.sensitivity(n)

        def u_hat(states):
            num, cat = model.simulate(prior.theta(states), z, u)
            return quality(num, cat, orders=orders).mean(axis=1)

        def u_search(states):  # the chain's burn-in search: mean pMSE over the stump's features
            num, cat = model.simulate(prior.theta(states), z, u)
            return stump.feature_pmse(num, cat, orders=orders).mean(axis=(1, 2))

        self.diagnostics_ = None
        if self.sampler == "exact":
            states = self._release_exact(u_hat, prior, starts, rng, source, du)
        else:
            states = self._release_metropolis(u_hat, u_search, model, prior, starts, rng, du)
        if self.tree == "paper":
            self.ledger.flag("pMSE mechanism with tree='paper' (greedy CART): the sensitivity bound is heuristic, "
                             "so the ε above is not a guarantee")
        self.model_ = model
        self.theta_ = prior.theta(states)
        self.n_ = n
        self.sensitivity_ = du

    def _quality_note(self, du: float) -> str:
        """What the ledger's notes say about û and Δu."""
        if self.tree == "stump":
            what = ("best two-leaf partition over a data-independent family; Δu = 1/(2n) proved (replace-one)"
                    if self.delta_u is None else f"best two-leaf partition; Δu = {du:.3g} as given")
        else:
            what = ("HEURISTIC: greedy rpart-like CART (maxdepth {maxdepth}, cp {cp}) can exceed the paper's "
                    "Δu = 1/n (paper's Table 1)".format(**self.cart_))
        return f"u = mean pMSE over {self.n_synth} synthetic set(s), {what}"

    def _release_exact(self, u_hat, prior, starts, rng, source, du):
        """sampler="exact": exponential mechanisms over finite public candidates (:mod:`.exact`)."""
        shares, spreads = stage_plan(self.n_stages_)
        self.sampler_settings_ = {"sampler": "exact", "n_candidates": self.n_candidates_,
                                  "n_stages": self.n_stages_, "stage_shares": shares.tolist(),
                                  "stage_spreads": [None] + spreads[1:].tolist(),
                                  "box": [x.tolist() for x in candidate_box(prior)]}
        note = (f"{self._quality_note(du)}; exact: exponential mechanism over finite public candidates (McSherry & "
                "Talwar 2007), base measure = the public candidate distribution")
        out = exact_releases(u_hat, prior, starts, rng, source, self.ledger, epsilon_r=self.epsilon / self.n_releases,
                             sensitivity=du, n_releases=self.n_releases, n_stages=self.n_stages_,
                             relation=self.relation, note=note, progress=progress)
        self.candidates_, self.release_index_ = prior.theta(starts), out["index"]
        if self.keep_diagnostics:
            self.diagnostics_ = {"candidate_u": out["candidate_u"], "stage_u": out["stage_u"]}
            self.ledger.flag("candidate scores kept (keep_diagnostics=True): û at every candidate is a function "
                             "of the data and is not covered by the guarantee")
        return out["states"]

    def _release_metropolis(self, u_hat, u_search, model, prior, starts, rng, du):
        """sampler="metropolis-approximate": one chain per release (:mod:`.chain`); flags the ledger."""
        d = model.dim  # chain lengths scale with the number of parameters (public)
        iters = (100 * d if self.n_search is None else self.n_search,
                 100 * d if self.n_adapt is None else self.n_adapt,
                 60 * d if self.n_sample is None else self.n_sample)
        n_search, n_adapt, n_sample = iters
        self.sampler_settings_ = {"sampler": "metropolis-approximate", "n_search": n_search, "n_adapt": n_adapt,
                                  "n_sample": n_sample, "proposal_scale": prior.proposal_scale().tolist(),
                                  "search_sharpness": SEARCH_SHARPNESS, "starts": starts.tolist()}
        note = (f"{self._quality_note(du)}; approximate (MCMC): guarantee is for the exact density, chain error not "
                f"accounted ({n_search} search + {n_adapt} adaptive + {n_sample} fixed Metropolis iterations from a "
                "prior draw)")
        states, diag = metropolis_releases(u_hat, u_search, prior, starts, rng, self.ledger,
                                           epsilon_r=self.epsilon / self.n_releases, sensitivity=du,
                                           n_releases=self.n_releases, iters=iters,
                                           blocks=[np.arange(a, b) for _, a, b, _ in model.blocks],
                                           relation=self.relation, note=note, keep_traces=self.keep_diagnostics)
        if self.keep_diagnostics:
            diag["param_names"] = list(model.names)
            self.diagnostics_ = diag
            self.ledger.flag("MCMC diagnostics kept (keep_diagnostics=True): chain traces and acceptance rates are "
                             "functions of the whole chains and are not covered by the guarantee")
        return states

    # ------------------------------------------------------------------ results
    def parameters(self) -> pd.DataFrame:
        """The released parameter draws, one row per release, variances and sds named explicitly."""
        if not getattr(self, "fitted_", False):
            raise ValueError("PMSEMechanism is not fitted; call .fit(df, schema) first")
        return pd.DataFrame([self.model_.natural(t) for t in self.theta_])

    def sample(self, n: int | None = None, m: int = 1, seed: int | None = None):
        if getattr(self, "fitted_", False) and isinstance(m, numbers.Integral) and m > self.n_releases:
            warnings.warn(f"m = {m} datasets from {self.n_releases} released parameter draws: datasets "
                          f"{self.n_releases + 1}..{m} re-use draws (no extra privacy cost, no new information); "
                          "fit with n_releases = m for independent draws", stacklevel=2)
        return super().sample(n=n, m=m, seed=seed)

    def _sample_frame(self, n: int, rng: np.random.Generator, index: int) -> pd.DataFrame:
        theta = self.theta_[index % self.n_releases]
        model = self.model_
        z = rng.standard_normal((1, n, len(model.numeric)))
        u = rng.random((1, n, len(model.categorical)))
        num, cat = model.simulate(theta[None, :], z, u)
        data = {}
        for k, j in enumerate(model.numeric):
            col = model.columns[j]
            x = num[0, 0, k].copy()
            if col.integer:
                x = np.round(x)
            if col.lower is not None:
                x = np.clip(x, col.lower, col.upper)
            data[col.name] = x
        for k, j in enumerate(model.categorical):
            col = model.columns[j]
            spec = self.schema_[col.name]
            data[col.name] = pd.Categorical.from_codes(cat[0, 0, k], categories=list(spec.categories),
                                                       ordered=spec.ordered)
        return pd.DataFrame(data)[self.schema_.names]


def _optional(minimum: int):
    """The check of a count that may be left at None (its default is filled in ``fit``)."""
    return lambda value, name: check_int(value, name, minimum=minimum, allow_none=True)


__all__ = ["PMSEMechanism", "TREES", "FEATURES", "MODELS", "SAMPLERS"]
