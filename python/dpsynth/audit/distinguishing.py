"""The black-box distinguishing audit (dp-privacy.md §4.3 C): the generator runs many times on D and on
D', the unique row is counted in each output, and the best threshold test's error rates, bounded by
Clopper–Pearson, give ε_lo, a statistically valid lower bound on the ε the generator really has
(Jagielski et al. 2020; Nasr et al. 2021)."""
from __future__ import annotations

import math

import numpy as np
import pandas as pd
from scipy import stats

from ..schema import Schema
from .neighbours import group_claim, neighbour_steps

# the distinguishing audit's pairs, as neighbour kinds
_PAIRS = {"replace": "replace", "add": "add"}


def audit_datasets(n: int = 40, pair: str = "replace") -> tuple[pd.DataFrame, pd.DataFrame, Schema, dict]:
    """Worst-case pair: D = n identical rows; D' = D with one row replaced by a unique row
    (``pair="replace"``) or with the unique row added (``pair="add"``, n + 1 rows). A small public
    domain (two categorical columns of three levels and one bounded numeric) keeps the unique row's
    cell visible to the statistic."""
    if pair not in _PAIRS:
        raise ValueError(f"pair must be one of {list(_PAIRS)}, got {pair!r}")
    schema = Schema.from_dict({
        "a": {"type": "categorical", "categories": ["a0", "a1", "a2"]},
        "b": {"type": "categorical", "categories": ["b0", "b1", "b2"]},
        "x": {"type": "numeric", "lower": 0, "upper": 10, "bins": 2},
    })
    common = {"a": "a0", "b": "b0", "x": 1.0}
    target = {"a": "a2", "b": "b2", "x": 9.0}
    cat = {c: pd.CategoricalDtype(schema[c].categories) for c in ("a", "b")}
    d = pd.DataFrame([common] * n).astype(cat)
    kept = n - 1 if pair == "replace" else n
    d2 = pd.DataFrame([common] * kept + [target]).astype(cat)
    return d, d2, schema, target


def _count_target(frame: pd.DataFrame, target: dict, schema: Schema) -> int:
    hit = np.ones(len(frame), dtype=bool)
    for c, v in target.items():
        if schema[c].is_categorical:
            hit &= (frame[c].astype(object) == v).to_numpy()
        else:
            edges = schema[c].edges()
            b = np.clip(np.searchsorted(edges, v, side="right") - 1, 0, len(edges) - 2)
            x = pd.to_numeric(frame[c]).to_numpy(dtype=float)
            hit &= (x >= edges[b]) & (x < edges[b + 1] if b < len(edges) - 2 else x <= edges[-1])
    return int(hit.sum())


def clopper_pearson_upper(k: int, n: int, alpha: float) -> float:
    """One-sided upper (1−alpha) bound on a binomial proportion."""
    return 1.0 if k >= n else float(stats.beta.ppf(1 - alpha, k + 1, n - k))


def epsilon_lower_bound(fp: int, n_neg: int, fn: int, n_pos: int, delta: float = 0.0,
                        alpha: float = 0.05) -> float:
    """ε_lo from error counts with Clopper–Pearson bounds at alpha/2 each."""
    fpr = clopper_pearson_upper(fp, n_neg, alpha / 2)
    fnr = clopper_pearson_upper(fn, n_pos, alpha / 2)
    cands = [0.0]
    if fpr > 0 and 1 - delta - fnr > 0:
        cands.append(math.log((1 - delta - fnr) / fpr))
    if fnr > 0 and 1 - delta - fpr > 0:
        cands.append(math.log((1 - delta - fpr) / fnr))
    return max(cands)


def distinguishing_audit(method, epsilon: float, delta: float | None = None, runs: int = 300,
                         n_rows: int = 40, n_synth: int = 1000, alpha: float = 0.05, seed: int | None = None,
                         pair: str = "replace", **options) -> dict:
    """Run ``method`` (a registry name, or a callable returning an unfitted generator) ``runs`` times
    on each of D and D' (see :func:`audit_datasets`; ``pair`` "replace" or "add"); statistic = number
    of synthetic rows equal to the unique row among ``n_synth`` synthetic rows (drawing many rows from
    the released model is post-processing and makes a support leak visible).

    The ceiling is what the ledger's (ε, δ) gives this pair under the generator's declared relation
    (:func:`neighbour_steps`, :func:`group_claim`): a replaced row is one step under replace-one but
    two under add/remove (2ε, δ(1 + e^ε)); an added row is one step under add/remove and no
    neighbour at all under replace-one (ceiling ∞). Returns ``eps_lo`` (computed at the ceiling's δ)
    beside ``eps_claimed`` (the ledger's total ε), ``relation``, ``claim_epsilon``, ``claim_delta``
    and ``passed`` = eps_lo ≤ claim_epsilon.

    >>> res = distinguishing_audit("independent", epsilon=1.0, runs=50, seed=0)
    >>> res["relation"], res["claim_epsilon"]
    ('add-remove', 2.0)
    """
    from ..generators import make_generator

    def run_once(data, s):
        gen = method() if callable(method) else make_generator(method, epsilon, delta, **options)
        gen.fit(data, schema, seed=s)
        return gen.sample(n=n_synth, m=1, seed=None if s is None else s + 1)

    d, d2, schema, target = audit_datasets(n_rows, pair)
    rng = np.random.default_rng(seed)
    scores = {"D": [], "D'": []}
    claimed, claimed_delta, relations = 0.0, 0.0, set()
    for side, data in (("D", d), ("D'", d2)):
        for _ in range(runs):
            s = None if seed is None else int(rng.integers(0, 2**31 - 1))
            res = run_once(data, s)
            claimed = max(claimed, res.ledger.total_epsilon())
            claimed_delta = max(claimed_delta, res.ledger.total_delta())
            relations.add(res.generator.relation)
            scores[side].append(_count_target(res.datasets[0], target, schema))
    if len(relations) != 1:
        raise AssertionError(f"the generator declared different relations across runs: {sorted(relations)}")
    relation = relations.pop()
    claim_eps, claim_delta = group_claim(claimed, claimed_delta, neighbour_steps(relation, _PAIRS[pair]))
    neg, pos = np.array(scores["D"]), np.array(scores["D'"])
    half = runs // 2
    # threshold chosen on the first half only, evaluated on the second
    cands = np.unique(np.r_[neg[:half], pos[:half]]) + 0.5
    best, tau = -1.0, cands[0] if len(cands) else 0.5
    for t in cands:
        fp, fn = int((neg[:half] >= t).sum()), int((pos[:half] < t).sum())
        e = epsilon_lower_bound(fp, half, fn, half, claim_delta, alpha)
        if e > best:
            best, tau = e, t
    fp, fn = int((neg[half:] >= tau).sum()), int((pos[half:] < tau).sum())
    n_eval = runs - half
    eps_lo = epsilon_lower_bound(fp, n_eval, fn, n_eval, claim_delta, alpha)
    return {"method": method if isinstance(method, str) else getattr(method, "__name__", "custom"),
            "pair": pair, "relation": relation, "eps_claimed": claimed, "claim_epsilon": claim_eps,
            "claim_delta": claim_delta, "eps_lo": eps_lo, "threshold": float(tau),
            "false_positives": fp, "false_negatives": fn, "runs_per_side": runs, "evaluated_per_side": n_eval,
            "alpha": alpha, "passed": eps_lo <= claim_eps + 1e-9,
            "max_power": math.log(n_eval / max(1e-12, -math.log(alpha / 2)))}


def audit_report(res: dict) -> list[str]:
    """The printout of a `distinguishing_audit` result (dpsynthr's ``print(dp_audit(...))``).

    >>> res = {"method": "independent", "runs_per_side": 20, "evaluated_per_side": 10, "eps_claimed": 1.0,
    ...        "relation": "add-remove", "claim_epsilon": 2.0, "eps_lo": 0.0, "alpha": 0.05,
    ...        "false_positives": 0, "false_negatives": 10, "passed": True, "max_power": 1.27}
    >>> print("\\n".join(audit_report(res)))  # doctest: +NORMALIZE_WHITESPACE
    Distinguishing audit of 'independent' (20 runs per side, 10 evaluated)
      claimed epsilon (ledger):       1
      ceiling for this pair:          2  (add-remove neighbours)
      empirical lower bound eps_lo:   0  (Clopper-Pearson, alpha = 0.05)
      false positives / negatives:    0 / 10
      result: passed (eps_lo <= ceiling)
      (this audit cannot detect epsilon above about 1.27)
    """
    ceiling = res.get("claim_epsilon", res["eps_claimed"])
    return [f"Distinguishing audit of '{res['method']}' ({int(res['runs_per_side'])} runs per side, "
            f"{int(res['evaluated_per_side'])} evaluated)",
            f"  claimed epsilon (ledger):       {res['eps_claimed']:.4g}",
            f"  ceiling for this pair:          {ceiling:.4g}  ({res.get('relation', '?')} neighbours)",
            f"  empirical lower bound eps_lo:   {res['eps_lo']:.4g}  (Clopper-Pearson, alpha = {res['alpha']:g})",
            f"  false positives / negatives:    {int(res['false_positives'])} / {int(res['false_negatives'])}",
            "  result: " + ("passed (eps_lo <= ceiling)" if res["passed"] else "FAILED (eps_lo > ceiling)"),
            f"  (this audit cannot detect epsilon above about {res['max_power']:.3g})"]
