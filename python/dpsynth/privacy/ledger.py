"""The privacy ledger: one row per spend, checked against the budget before the noise is drawn.

Each spend records the step, the mechanism, its cost (pure ε, approximate (ε, δ), or ρ-zCDP),
the sensitivity of the value handed to the noise, its norm and the neighbouring relation.
Totals compose by basic composition within each kind; ρ-zCDP spends are added and converted once
with the tight CKS conversion (:func:`cdp_eps`) at the δ left after approximate-DP spends.

Example
-------
>>> led = PrivacyLedger(epsilon=1.0)
>>> led.spend("histogram", "discrete Laplace", epsilon=0.5, sensitivity=1, relation="add-remove")
>>> led.total_epsilon()
0.5
"""
from __future__ import annotations

import math
import numbers
import warnings
from dataclasses import dataclass, asdict, field

import pandas as pd

from .amplification import EX_ANTE, EX_POST, mcar_amplification, mcar_amplification_ex_ante
from .calibration import cdp_eps
from .validation import RELATIONS, check_delta, check_epsilon, check_relation

_TOL = 1e-9


class BudgetExceededError(ValueError):
    """A spend would take the ledger beyond its (ε, δ) budget."""


@dataclass
class Spend:
    step: str
    mechanism: str
    epsilon: float | None
    delta: float
    rho: float | None
    sensitivity: float
    norm: str
    relation: str
    note: str = ""
    attributes: tuple | None = None  # the attributes whose observed rows the spend read (None: every row)
    min_attributes: int | None = None  # public: fewest attributes it could have been restricted to (None: 0)
    attributes_fixed: bool = False  # the attributes were fixed before the data were seen (not selected)

    @property
    def kind(self) -> str:
        if self.rho is not None:
            return "zCDP"
        return "approx" if self.delta > 0 else "pure"


@dataclass
class PrivacyLedger:
    """Budget (``epsilon``, ``delta``) and the list of spends against it."""

    epsilon: float | None = None
    delta: float = 0.0
    spends: list = field(default_factory=list)
    flags: list = field(default_factory=list)

    def __post_init__(self):
        if self.epsilon is not None:
            self.epsilon = check_epsilon(self.epsilon)
        self.delta = check_delta(0.0 if self.delta is None else self.delta)

    # ------------------------------------------------------------------ recording
    def spend(self, step: str, mechanism: str, *, epsilon: float | None = None, delta: float = 0.0,
              rho: float | None = None, sensitivity: float, relation: str, norm: str = "L1",
              note: str = "", attributes=None, min_attributes: int | None = None,
              attributes_fixed: bool = False) -> None:
        """Record a spend; raise :class:`BudgetExceededError` (and record nothing) if it would
        exceed the budget. Give ``epsilon`` (and ``delta``) or ``rho``, not both. For
        :meth:`ground_truth_epsilon`: ``attributes`` (optional) names the attributes a row must be
        observed on to be read by this spend in this run (None: every row), and ``min_attributes``
        the fewest attributes that set could have had over every selection the generator could
        make on any data: a public number (None: 0, it may read every row). ``attributes_fixed=True``
        declares that ``attributes`` itself was fixed before the data were seen (e.g. all columns)."""
        check_relation(relation)
        if attributes_fixed:
            if attributes is None:
                raise ValueError("attributes_fixed=True needs the attributes")
            min_attributes = len(set(attributes))
        if min_attributes is not None:
            if isinstance(min_attributes, bool) or not isinstance(min_attributes, numbers.Integral) \
                    or min_attributes < 0:
                raise ValueError(f"min_attributes must be a non-negative integer, got {min_attributes!r}")
            min_attributes = int(min_attributes)
            read = 0 if attributes is None else len(set(attributes))
            if min_attributes > read:
                raise ValueError(f"min_attributes = {min_attributes} exceeds the {read} attributes this spend read; "
                                 "it must be a lower bound on the size of every set the spend could read")
        if (epsilon is None) == (rho is None):
            raise ValueError("give exactly one of epsilon (pure/approximate DP) or rho (zCDP)")
        if rho is not None and (not math.isfinite(rho) or rho <= 0):
            raise ValueError(f"rho must be a positive finite number, got {rho}")
        if epsilon is not None:
            epsilon = check_epsilon(epsilon)
        delta = check_delta(delta)
        s = Spend(step, mechanism, epsilon, delta, rho, float(sensitivity), norm, relation, note,
                  None if attributes is None else tuple(attributes), min_attributes, bool(attributes_fixed))
        self._check_budget(s)  # raises before anything is recorded
        sums = self._sums(s)
        self.spends.append(s)
        self._cache = (len(self.spends), *sums)  # running totals: a spend costs O(1)
        rels = {x.relation for x in self.spends}
        if len(rels) > 1:
            warnings.warn(f"the ledger mixes neighbouring relations {sorted(rels)}; totals assume each spend's "
                          "guarantee holds for the stricter one", stacklevel=2)

    def flag(self, message: str) -> None:
        """Record a non-private step (e.g. a data-derived schema): the total ε becomes infinite."""
        self.flags.append(message)

    # ------------------------------------------------------------------ totals
    def _sums(self, extra: Spend | None = None) -> tuple[float, float, float]:
        """(Σ ε of pure/approximate spends, Σ δ of those, Σ ρ), cached by the number of spends."""
        key = len(self.spends)
        cache = getattr(self, "_cache", None)
        if cache is None or cache[0] != key:
            eps = math.fsum(s.epsilon for s in self.spends if s.rho is None)
            dlt = math.fsum(s.delta for s in self.spends if s.rho is None)
            rho = math.fsum(s.rho for s in self.spends if s.rho is not None)
            self._cache = cache = (key, eps, dlt, rho)
        _, eps, dlt, rho = cache
        if extra is not None:
            if extra.rho is None:
                eps, dlt = eps + extra.epsilon, dlt + extra.delta
            else:
                rho += extra.rho
        return eps, dlt, rho

    def _mechanism_totals(self, extra: Spend | None = None) -> tuple[float, float]:
        pure_approx, delta_approx, rho = self._sums(extra)
        if rho == 0:
            return pure_approx, delta_approx
        delta_left = self.delta - delta_approx
        if delta_left <= 0:
            raise BudgetExceededError("zCDP spends need a delta budget; construct the generator with delta > 0")
        return pure_approx + cdp_eps(rho, delta_left), self.delta

    def _check_budget(self, extra: Spend | None = None) -> None:
        eps, delta = self._mechanism_totals(extra)
        if self.epsilon is not None and eps > self.epsilon * (1 + _TOL) + _TOL:
            raise BudgetExceededError(f"this spend would bring the total to ε = {eps:.6g}, above the budget "
                                      f"ε = {self.epsilon:g}")
        if delta > self.delta * (1 + _TOL) + 1e-15:
            raise BudgetExceededError(f"this spend would bring the total to δ = {delta:.3g}, above the budget "
                                      f"δ = {self.delta:.3g}")

    def total_epsilon(self) -> float:
        """Total ε of all spends (infinite if a non-private step was flagged)."""
        if self.flags:
            return math.inf
        return float(self._mechanism_totals()[0])

    def total_delta(self) -> float:
        return float(self._mechanism_totals()[1])

    def total_rho(self) -> float:
        return float(sum(s.rho for s in self.spends if s.rho is not None))

    def ground_truth_epsilon(self, missing_rates, *, return_details: bool = False):
        """ε for the ground-truth data when the private data were produced by MCAR masking with
        per-attribute rates ``missing_rates`` ({attribute: φ} for every attribute, 0.0 for fully
        observed ones). A guarantee, fixed before the data are seen: the bound of
        :func:`~dpsynth.privacy.amplification.mcar_amplification_ex_ante` over every selection of
        attribute sets the generator could make, from each spend's public ``min_attributes`` (the
        exact bound of :func:`mcar_amplification` when every spend's attributes were fixed in advance).
        Needs pure-ε spends under one neighbouring relation. ``return_details=True`` also returns
        the details dict: ``bound`` names the bound reported (``EX_ANTE``); ``ex_post`` holds, as a
        labelled diagnostic only, the value for the sets this run selected (``EX_POST``, computed
        from the private data, not a guarantee) with the paper's Algorithm 4 figure."""
        if self.flags:
            return (math.inf, {"bound": EX_ANTE}) if return_details else math.inf
        if not self.spends:
            return (0.0, {"bound": EX_ANTE}) if return_details else 0.0
        impure = [s.step for s in self.spends if s.rho is not None or s.delta > 0]
        if impure:
            raise ValueError(f"ground_truth_epsilon needs pure ε-DP spends; {impure[:3]} are (ε, δ) or zCDP")
        rels = {s.relation for s in self.spends}
        if len(rels) > 1:
            raise ValueError(f"the ledger mixes neighbouring relations {sorted(rels)}; amplification needs one")
        relation = rels.pop()
        epsilons = [s.epsilon for s in self.spends]
        post, post_det = mcar_amplification([s.attributes or () for s in self.spends], epsilons, missing_rates,
                                            relation=relation)
        if all(s.attributes_fixed for s in self.spends):  # nothing was selected: this run's sets are the only ones
            eps, det = post, {**post_det, "bound": EX_ANTE}
        else:
            eps, det = mcar_amplification_ex_ante([s.min_attributes or 0 for s in self.spends], epsilons,
                                                  missing_rates, relation=relation)
        det["ex_post"] = {**post_det, "bound": EX_POST, "epsilon_bar": post}
        return (eps, det) if return_details else eps

    @property
    def relation(self) -> str | None:
        rels = sorted({s.relation for s in self.spends})
        return "/".join(rels) if rels else None

    # ------------------------------------------------------------------ views
    def to_frame(self) -> pd.DataFrame:
        """One row per spend: step, mechanism, epsilon, delta, rho, sensitivity, norm, relation, accounting.
        zCDP rows show their pro-rata share of the converted ε (so the column sums to the total)."""
        rho_total = self.total_rho()
        zcdp_eps = 0.0
        if rho_total > 0:
            zcdp_eps = self._mechanism_totals()[0] - sum(s.epsilon for s in self.spends if s.rho is None)
        rows = []
        for s in self.spends:
            eps = s.epsilon if s.rho is None else zcdp_eps * s.rho / rho_total
            delta = s.delta if s.rho is None else (self.delta - sum(x.delta for x in self.spends if x.rho is None)) \
                * s.rho / rho_total
            rows.append({"step": s.step, "mechanism": s.mechanism, "epsilon": eps, "delta": delta,
                         "rho": s.rho if s.rho is not None else float("nan"), "sensitivity": s.sensitivity,
                         "norm": s.norm, "relation": s.relation, "accounting": s.kind, "note": s.note})
        for f in self.flags:
            rows.append({"step": "NOT PRIVATE", "mechanism": "none", "epsilon": math.inf, "delta": 0.0,
                         "rho": float("nan"), "sensitivity": float("nan"), "norm": "", "relation": "",
                         "accounting": "none", "note": f})
        cols = ["step", "mechanism", "epsilon", "delta", "rho", "sensitivity", "norm", "relation", "accounting", "note"]
        return pd.DataFrame(rows, columns=cols)

    def to_dict(self) -> dict:
        return {"epsilon": self.epsilon, "delta": self.delta, "spends": [asdict(s) for s in self.spends],
                "flags": list(self.flags)}

    @classmethod
    def from_dict(cls, d: dict) -> "PrivacyLedger":
        led = cls(epsilon=d.get("epsilon"), delta=d.get("delta", 0.0))
        led.spends = [Spend(**s) for s in d.get("spends", [])]
        led.flags = list(d.get("flags", []))
        return led

    def __repr__(self) -> str:
        budget = f"ε={self.epsilon:g}, δ={self.delta:g}" if self.epsilon is not None else "no budget"
        try:
            tot = f"ε={self.total_epsilon():.4g}, δ={self.total_delta():.3g}"
        except BudgetExceededError:
            tot = "invalid"
        return f"<PrivacyLedger {len(self.spends)} spends, total {tot} (budget {budget})>"

    def __str__(self) -> str:
        head = repr(self)
        if not self.spends:
            return head
        df = self.to_frame()[["step", "mechanism", "epsilon", "delta", "sensitivity", "relation"]]
        return head + "\n" + df.to_string(index=False)
