"""Privacy audits a user can run: grey-box neighbour checks and a distinguishing audit.

Grey-box (Re:cord-play pattern, dp-privacy.md §4.3 B): every value handed to a noise primitive is
recorded with its declared sensitivity (:func:`dpsynth.privacy.record_noise_inputs`). We fit the
generator on D and on neighbours D' with the same seed and check (1) the same sequence of noise
calls with the same shapes (no data-dependent control flow or domains) and (2) that each recorded
value moves by at most its declared sensitivity, in its norm.

Black-box (§4.3 C): :func:`distinguishing_audit` runs a generator many times on D (40 identical
rows) and on D' (one row replaced by, or added as, a unique row), counts the unique row in each output, picks a
threshold on one half of the runs and bounds the false-positive and false-negative rates on the
other half with Clopper–Pearson. ε_lo = max(log((1−δ−FNR⁺)/FPR⁺), log((1−δ−FPR⁺)/FNR⁺)) is a
statistically valid lower bound on the true ε (Jagielski et al. 2020; Nasr et al. 2021): if it
exceeds the ledger's claim for that pair (ε for a replaced row under replace-one, 2ε under
add/remove: group privacy), the generator leaks more than it says. Passing proves nothing.

Leaks that bypass the noise (:func:`leak_audit`): with D's noise transcript replayed on D', every
released value is D's, so everything the generator outputs (row counts, dtypes, categories, the saved
file, diagnostics, the ledger, the synthetic rows for the same sampling seed) must be identical;
any difference is information about D' that no ledgered mechanism released.

Example
-------
>>> import dpsynth
>>> from dpsynth.audit import distinguishing_audit
>>> res = distinguishing_audit("independent", epsilon=1.0, runs=50)
>>> res["eps_lo"] <= res["claim_epsilon"]
True
"""
from __future__ import annotations

import contextlib
import math
from typing import Callable

import numpy as np
import pandas as pd
from scipy import stats

from .privacy import distance, record_noise_inputs, replay_noise_outputs
from .schema import Schema

# Neighbour kinds as changes of the private table: adding or removing a row is one add/remove step,
# changing a row (a value set to NA, a row replaced) is a removal plus an addition, so two. Under
# replace-one, n is public: adding or removing a row is not a neighbour (no guarantee; the grey-box
# check then looks at control flow only) and changing a row is one step.
_CHANGE = {"remove": "remove", "add all-NA": "add", "add": "add", "value to NA": "replace", "replace": "replace"}
_STEPS = {"add-remove": {"add": 1, "remove": 1, "replace": 2},
          "replace-one": {"add": None, "remove": None, "replace": 1}}


def neighbour_steps(relation: str, kind: str) -> int | None:
    """How many neighbour steps of ``relation`` separate D from D' of ``kind`` (None: D and D' are
    not neighbours under ``relation``, e.g. a removed row under replace-one, where n is public).

    >>> neighbour_steps("add-remove", "replace"), neighbour_steps("replace-one", "replace")
    (2, 1)
    """
    if relation not in _STEPS:
        raise ValueError(f"unknown neighbouring relation {relation!r}; expected one of {sorted(_STEPS)}")
    if kind not in _CHANGE:
        raise ValueError(f"unknown neighbour kind {kind!r}; expected one of {sorted(_CHANGE)}")
    return _STEPS[relation][_CHANGE[kind]]


def group_claim(epsilon: float, delta: float, steps: int | None) -> tuple[float, float]:
    """(ε, δ) that an (ε, δ)-DP guarantee gives to datasets ``steps`` neighbour steps apart (group
    privacy: k·ε and δ·Σ_{i<k} e^{iε}); (∞, 1) when they are not neighbours (``steps`` None).

    >>> group_claim(1.0, 0.0, 2)
    (2.0, 0.0)
    """
    if steps is None:
        return math.inf, 1.0
    return steps * epsilon, delta * sum(math.exp(i * epsilon) for i in range(steps))


def unique_row(schema: Schema) -> dict:
    """A row unlike typical data: the last category of each categorical, the upper bound (or 0)
    of each numeric column."""
    row = {}
    for name, col in schema.columns.items():
        if col.is_categorical:
            row[name] = col.categories[-1]
        else:
            row[name] = col.upper if col.upper is not None else 0.0
    return row


def neighbours(df: pd.DataFrame, schema: Schema, row: int = 0, na_column: str | None = None) -> dict[str, pd.DataFrame]:
    """The neighbouring datasets the audits use: remove row ``row``; add an all-NA row; set one
    observed cell of ``row`` to NA (in ``na_column``, default the row's first observed cell); replace
    ``row`` by :func:`unique_row`. A cell set to NA in an integer column makes it float, as pandas
    does when it reads such a column with a missing value."""
    out = {"remove": df.drop(index=df.index[row]).reset_index(drop=True)}
    out["add all-NA"] = df.reset_index(drop=True).reindex(range(len(df) + 1))
    d = df.copy()
    if na_column is None:
        observed = [c for c in df.columns if pd.notna(df.iloc[row][c])]
        if not observed:
            raise ValueError(f"row {row} has no observed cell to set to NA")
        na_column = observed[0]
    elif pd.isna(df.iloc[row][na_column]):
        raise ValueError(f"the cell of row {row} in {na_column!r} is already missing")
    d.loc[d.index[row], na_column] = None
    out["value to NA"] = d
    d = df.copy()
    for c, v in unique_row(schema).items():
        d.loc[d.index[row], c] = v
    out["replace"] = d
    return out


def _fit_recorded(make_generator: Callable, df: pd.DataFrame, schema: Schema, seed: int, outputs=None):
    """Fit ``make_generator()`` on ``df`` recording its noise calls; with ``outputs`` the calls
    release those values (replay). Returns (generator, recorder)."""
    gen = make_generator()
    with record_noise_inputs() as rec, (replay_noise_outputs(outputs) if outputs is not None
                                        else contextlib.nullcontext()):
        gen.fit(df, schema, seed=seed)
    return gen, rec


def _same_noise_calls(kind: str, base, rec) -> None:
    """AssertionError when the noise calls of D and D' differ (data-dependent control flow)."""
    if base.steps() != rec.steps() or [c.value.shape for c in base.calls] != [c.value.shape for c in rec.calls]:
        raise AssertionError(f"neighbour {kind!r}: the noise calls differ between D and D' "
                             f"(data-dependent control flow): {base.steps()[:5]}… vs {rec.steps()[:5]}…")


def neighbour_check(make_generator: Callable, df: pd.DataFrame, schema: Schema, seed: int = 0,
                    row: int = 0, kinds=None, replay: bool = True) -> pd.DataFrame:
    """Fit ``make_generator()`` on D and each neighbour with the same seed; one row per noise call
    and neighbour: step, norm, distance, sensitivity, bound, ok. Raises AssertionError when the
    sequence of noise calls differs (data-dependent control flow).

    ``replay=True`` (default): the run on D' releases D's recorded outputs at every noise call
    (:func:`~dpsynth.privacy.replay_noise_outputs`), so each later step is computed on D' given
    the same transcript as on D: adaptive composition (structure after selection, every DP-SGD step
    after the first) is checked step by step, not only up to the first step that diverges.
    ``row``: the row removed / set to NA / replaced (use -1 for generators that draw per-row
    randomness by position, such as Poisson batches: removing the last row keeps the others' draws)."""
    gen, base = _fit_recorded(make_generator, df, schema, seed)
    outputs = [c.output for c in base.calls]
    rows = []
    for kind, d2 in neighbours(df, schema, row).items():
        if kinds is not None and kind not in kinds:
            continue
        mult = neighbour_steps(gen.relation, kind)
        _, rec = _fit_recorded(make_generator, d2, schema, seed, outputs if replay else None)
        _same_noise_calls(kind, base, rec)
        for a, b in zip(base.calls, rec.calls):
            dist = distance(a.value, b.value, a.norm)
            bound = None if mult is None else mult * a.sensitivity
            rows.append({"neighbour": kind, "step": a.step, "mechanism": a.mechanism, "norm": a.norm,
                         "distance": dist, "sensitivity": a.sensitivity, "bound": bound,
                         "ok": True if bound is None else dist <= bound * (1 + 1e-9) + 1e-12})
    return pd.DataFrame(rows)


def assert_neighbour_safe(make_generator: Callable, df: pd.DataFrame, schema: Schema, **kw) -> pd.DataFrame:
    """:func:`neighbour_check`, raising AssertionError that lists every violation."""
    report = neighbour_check(make_generator, df, schema, **kw)
    bad = report[~report["ok"]]
    if len(bad):
        raise AssertionError("recorded values moved more than their declared sensitivity:\n" + bad.to_string())
    return report


# ---------------------------------------------------------------------- distinguishing audit
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
    from .generators import make_generator

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

# ---------------------------------------------------------------------- exact selection audit
def _selection_block(make_generator, df, schema, seed):
    """Fit with recording, stopped at the first noise call after the first block of
    exponential-mechanism calls (what follows the selection is not needed). Returns the recorder,
    the generator (its ledger holds the spends so far) and the indices of the selection calls."""
    seen = []

    def after_selection(step, mechanism):
        if mechanism == "exponential mechanism":
            seen.append(step)
            return False
        return bool(seen)

    gen = make_generator()
    with record_noise_inputs() as rec, replay_noise_outputs(stop_when=after_selection):
        gen.fit(df, schema, seed=seed)
    sel = [i for i, c in enumerate(rec.calls) if c.mechanism == "exponential mechanism"]
    if not sel:
        raise ValueError("the generator made no exponential-mechanism call")
    if sel != list(range(sel[0], sel[0] + len(sel))):
        raise ValueError("the selection calls are not consecutive; this audit enumerates one block of them")
    return rec, gen, sel


def _enumerate_selection(make_generator, df, schema, seed, before, steps, max_leaves):
    """{tuple of choices: probability} of the selection calls named ``steps`` (they follow the
    noise calls that release ``before``), by following every candidate of each call."""
    first = len(before)
    leaves: dict = {}

    def visit(choices: tuple, prob: float):
        if len(choices) == len(steps):
            leaves[choices] = leaves.get(choices, 0.0) + prob
            return
        if len(leaves) > max_leaves:
            raise ValueError(f"more than {max_leaves} selection outcomes; use a smaller table")
        with record_noise_inputs() as rec, replay_noise_outputs(before + list(choices), stop_at=first + len(choices)):
            make_generator().fit(df, schema, seed=seed)
        call = rec.calls[-1]
        if call.step != steps[len(choices)] or call.logits is None:
            raise AssertionError(f"selection control flow changed: {call.step!r} where {steps[len(choices)]!r} "
                                 "was expected")
        logits = call.logits - call.logits.max()
        p = np.exp(logits) / np.exp(logits).sum()
        for j, pj in enumerate(p):
            if pj > 0:
                visit(choices + (j,), prob * float(pj))

    visit((), 1.0)
    return leaves


def selection_distribution(make_generator: Callable, df: pd.DataFrame, schema: Schema, seed: int = 0,
                           outputs_before=None, max_leaves: int = 20_000) -> tuple[dict, list[str]]:
    """The exact distribution of the outputs of a generator's selection steps (its consecutive
    exponential-mechanism calls, e.g. PrivBayes's network rounds or MST's edges) on ``df``.

    The generator is run with ``seed``; the noise calls before the first selection release
    ``outputs_before`` (default: this run's own outputs), so the distribution is conditional on the
    same earlier transcript, as adaptive composition requires. The outcome tree is enumerated: at each
    selection call the run is stopped (:func:`~dpsynth.privacy.replay_noise_outputs` with ``stop_at``),
    the recorded logits ε·q/(2Δ) give the probabilities of each candidate, and each candidate is
    followed. Returns ({tuple of choices: probability}, the selection steps' names)."""
    base, _, sel = _selection_block(make_generator, df, schema, seed)
    before = [c.output for c in base.calls[:sel[0]]] if outputs_before is None else list(outputs_before)
    steps = [base.calls[i].step for i in sel]
    return _enumerate_selection(make_generator, df, schema, seed, before, steps, max_leaves), steps


def selection_audit(make_generator: Callable, d: pd.DataFrame, d2: pd.DataFrame, schema: Schema,
                    seed: int = 0, max_leaves: int = 20_000) -> dict:
    """Exact privacy loss of the selection steps between neighbours D and D' (a hockey-stick test).

    Both distributions are enumerated as in :func:`selection_distribution`, given D's earlier
    transcript and D's selection steps (D' must make the same calls). Reports
    the largest privacy loss max_o |log P_D(o)/P_D'(o)|, the claimed pure ε of the selection (Σ ε_t
    over its ledger spends; a zCDP spend ρ counts as the exponential mechanism's √(8ρ)), and the
    hockey-stick divergences H_{e^ε}(P_D‖P_D') and H_{e^ε}(P_D'‖P_D) at that ε, which must be 0 for an
    ε-DP selection. ``passed``: loss ≤ claim (up to rounding)."""
    base, gen, sel = _selection_block(make_generator, d, schema, seed)
    before = [c.output for c in base.calls[:sel[0]]]
    steps = [base.calls[i].step for i in sel]
    p = _enumerate_selection(make_generator, d, schema, seed, before, steps, max_leaves)
    q = _enumerate_selection(make_generator, d2, schema, seed, before, steps, max_leaves)
    if set(p) != set(q):
        raise AssertionError("the selection's outcomes differ between D and D'")
    claimed = 0.0
    for s in gen.ledger.spends:
        if s.step in steps:
            claimed += s.epsilon if s.rho is None else math.sqrt(8.0 * s.rho)
    keys = list(p)
    pv, qv = np.array([p[k] for k in keys]), np.array([q[k] for k in keys])
    loss = float(np.max(np.abs(np.log(pv) - np.log(qv))))
    e = math.exp(claimed)
    hockey = max(float(np.clip(pv - e * qv, 0, None).sum()), float(np.clip(qv - e * pv, 0, None).sum()))
    return {"outcomes": len(keys), "loss": loss, "eps_claimed": claimed, "hockey_stick": hockey,
            "passed": loss <= claimed * (1 + 1e-9) + 1e-12 and hockey <= 1e-12, "steps": steps}


# ---------------------------------------------------------------------- leak audit (channels without noise)
# small settings that keep each fit well under a second while running every code path
SMALL_OPTIONS = {
    "napsu-mq": dict(delta=1e-6, queries="mst", inference="laplace"),
    "pmse": dict(n_releases=2, n_candidates=40, n_stages=2),
    "mst": dict(delta=1e-6, iters=50),
    "aim": dict(delta=1e-6, rounds=8, round_iters=5, final_iters=20),
    "aim-e": dict(delta=1e-6, rounds=8, round_iters=5, final_iters=20),
    "dp-misgan": dict(delta=1e-6, epochs=1, batch_size=64, hidden=8, critic_hidden=8, nz=4),
    "kamino": dict(delta=1e-6, epochs=1, batch_size=64, hidden=8),
    "dpautogan": dict(delta=1e-6, ae_epochs=1, gan_epochs=1, batch_size=64, hidden=8, latent=4, nz=4),
    "dpctgan": dict(delta=1e-6, epochs=1, batch_size=64, hidden=8, nz=4),
    "kamino-i": dict(delta=1e-6, epochs=1, batch_size=64, hidden=8),
    "complete-rows": dict(generator="independent"),
    "impute-random": dict(generator="privbayes-e"),
    "impute-dp-mean": dict(generator="independent"),
}
# the pMSE mechanism takes complete rows only (it refuses NA): its data and neighbours keep rows complete
COMPLETE_ONLY = {"pmse"}
# the missing-data wrappers are audited around a replace-one generator too, whose n is public inside them
_WRAPPED_REPLACE_ONE = {"complete-rows": "privbayes", "impute-dp-mean": "privbayes-e"}
# path components naming wall-clock times: timing is not protected (PRIVACY.md), so not compared
_TIMING = ("seconds",)
# items of :func:`released` that are values computed from the noisy releases (not structure)
_VALUE_ITEMS = {"synthetic values", "saved file values", "diagnostics values"}


def leak_configurations(methods=None) -> dict[str, tuple[str, float, dict]]:
    """{label: (method, epsilon, options)} the leak audit runs: every registered method (or
    ``methods``) at ε = 1 with :data:`SMALL_OPTIONS`, and each missing-data wrapper also around a
    replace-one generator (label ``"complete-rows[privbayes]"``), at ε = 100 so that a noisy count
    spent from a small share of ε stays positive on the 12-row table (what is compared does not
    depend on ε)."""
    from .generators import available_methods

    out = {}
    for m in (available_methods() if methods is None else methods):
        out[m] = (m, 1.0, dict(SMALL_OPTIONS.get(m, {})))
        if m in _WRAPPED_REPLACE_ONE:
            inner = _WRAPPED_REPLACE_ONE[m]
            out[f"{m}[{inner}]"] = (m, 100.0, {**SMALL_OPTIONS.get(m, {}), "generator": inner})
    return out


def leak_audit_data(n: int = 12, complete: bool = False) -> tuple[pd.DataFrame, Schema]:
    """A tiny table for the leak audit: a categorical column with one missing cell (category dtype),
    one of plain strings (object dtype) and a complete integer column (int64): setting one of its
    cells to NA changes its dtype, as it does in data read from a file. ``complete``: drop rows with
    a missing cell (for generators that refuse them). Every column is declared as possibly missing
    (the neighbours add an all-NA row), which is what NAPSU-MQ's default reads, never the rows."""
    may_miss = {} if complete else {"missing": True}
    schema = Schema.from_dict({
        "sex": {"type": "categorical", "categories": ["F", "M"], **may_miss},
        "grp": {"type": "categorical", "categories": ["a", "b", "c"], **may_miss},
        "age": {"type": "numeric", "lower": 0, "upper": 100, "bins": 4, "integer": True, **may_miss},
    })
    rng = np.random.default_rng(0)
    sex = pd.Categorical(rng.choice(["F", "M"], n), categories=["F", "M"])
    sex[1] = np.nan
    df = pd.DataFrame({"sex": sex, "grp": rng.choice(["a", "b", "c"], n).astype(object),
                       "age": rng.integers(0, 100, n).astype(np.int64)})
    return (df.dropna().reset_index(drop=True) if complete else df), schema


def _digest(data: bytes) -> str:
    import hashlib

    return hashlib.sha1(data).hexdigest()[:16]


def _describe(obj, path: str, out: dict, seen: set, depth: int = 0) -> None:
    """Flatten ``obj`` into ``out[path] = (structure, value digest)``: the structure is the type,
    shape, dtype or column names of what is stored, the digest its value (None for timings)."""
    import re

    timing = any(t in path.rsplit(".", 1)[-1] for t in _TIMING)

    def put(structure, value):
        out[path] = (structure, None if timing else value)

    if obj is None or isinstance(obj, (bool, int, float, complex, str, bytes, np.generic)):
        return put(type(obj).__name__, repr(obj))
    if isinstance(obj, (np.dtype, pd.api.extensions.ExtensionDtype)):
        return put("dtype", str(obj))
    if hasattr(obj, "detach") and hasattr(obj, "cpu"):  # torch tensor
        obj = obj.detach().cpu().numpy()
    if isinstance(obj, np.ndarray):
        value = repr(obj.tolist()) if obj.dtype == object else np.ascontiguousarray(obj).tobytes()
        return put(f"ndarray{obj.shape} {obj.dtype}", _digest(value if isinstance(value, bytes) else value.encode()))
    if isinstance(obj, (pd.DataFrame, pd.Series)):
        frame = obj.to_frame() if isinstance(obj, pd.Series) else obj
        layout = [(str(c), str(t)) for c, t in frame.dtypes.items()]
        return put(f"{type(obj).__name__}{obj.shape} {layout}",
                   _digest(pd.util.hash_pandas_object(frame.astype(object), index=True).to_numpy().tobytes()))
    if isinstance(obj, np.random.Generator):
        return put("numpy Generator", _digest(repr(obj.bit_generator.state).encode()))
    if isinstance(obj, (set, frozenset)):
        return put(f"{type(obj).__name__} len {len(obj)}", repr(sorted(map(repr, obj))))
    if callable(obj) and not hasattr(obj, "state_dict"):  # functions, classes, methods
        return put(type(obj).__name__, getattr(obj, "__qualname__", type(obj).__qualname__))
    if id(obj) in seen or depth > 12:
        return put(f"{type(obj).__name__} (seen)", None)
    seen.add(id(obj))
    if hasattr(obj, "state_dict"):  # torch module: its parameters and buffers
        obj = dict(obj.state_dict())
    if isinstance(obj, list) and obj and all(isinstance(e, list) and len(e) == 2 and isinstance(e[0], str)
                                             for e in obj):
        obj = dict(obj)  # a dict saved as [key, value] pairs (JSON): the keys name the paths (and timings)
    if isinstance(obj, dict):
        put(f"dict keys {sorted(map(str, obj))}", None)
        for k, v in obj.items():
            _describe(v, f"{path}.{k}", out, seen, depth + 1)
    elif isinstance(obj, (list, tuple)):
        put(f"{type(obj).__name__} len {len(obj)}", None)
        for i, v in enumerate(obj):
            _describe(v, f"{path}[{i}]", out, seen, depth + 1)
    elif hasattr(obj, "__dict__"):
        put(f"{type(obj).__qualname__} fields {sorted(vars(obj))}", None)
        for k, v in vars(obj).items():
            _describe(v, f"{path}.{k}", out, seen, depth + 1)
    else:
        put(type(obj).__qualname__, re.sub(r" at 0x[0-9a-fA-F]+", "", repr(obj)))


def _saved_file(gen, folder) -> dict:
    """What a fitted generator holds and :meth:`Generator.save` stores, flattened by
    :func:`_describe`: its state (every attribute, as saving stores the whole object), the files
    written, and inside them the keys of JSON and the entries of (npz) archives. A refused save
    (a class the file format does not take) is recorded as such; the state is still described."""
    from pathlib import Path

    folder = Path(folder)
    out: dict = {}
    _describe(vars(gen), "state", out, set())
    try:
        gen.save(folder / "generator")
    except (TypeError, ValueError) as err:
        out["save"] = ("refused", f"{type(err).__name__}: {err}")
        return out
    files = sorted(p for p in folder.rglob("*") if p.is_file())
    _describe([str(p.relative_to(folder)) for p in files], "files", out, set())
    for p in files:
        _describe(_file_content(p), f"file {p.relative_to(folder)}", out, set())
    return out


def _file_content(path):
    """A saved file as data: an npz archive's entries (UTF-8 JSON entries parsed), another zip's
    member names, a JSON file's content, or None for other binary files (pickle)."""
    import json
    import zipfile

    def parsed(raw: bytes):
        try:
            return json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, ValueError):
            return None

    if zipfile.is_zipfile(path):
        try:
            with np.load(path, allow_pickle=False) as arrays:
                entries = {k: arrays[k] for k in arrays.files}
        except ValueError:
            with zipfile.ZipFile(path) as z:
                return sorted(z.namelist())
        return {k: (parsed(a.tobytes()) if a.dtype == np.uint8 and parsed(a.tobytes()) is not None else a)
                for k, a in entries.items()}
    return parsed(path.read_bytes())


def _frame_values(frame: pd.DataFrame) -> str:
    """Digest of a frame's values with numbers as float64 and labels as text (dtypes are compared
    on their own)."""
    norm = pd.DataFrame({c: (pd.to_numeric(frame[c], errors="coerce").astype(float)
                             if pd.api.types.is_numeric_dtype(frame[c]) else frame[c].astype(object).astype(str))
                         for c in frame.columns})
    return _digest(pd.util.hash_pandas_object(norm, index=True).to_numpy().tobytes())


def released(gen, rec=None, m: int = 2, sample_seed: int = 1) -> dict:
    """Everything a fitted generator releases besides its noise primitives' outputs, by item: the
    noise calls made (``rec``), the ledger, the default n, the m synthetic datasets of default size
    drawn with ``sample_seed`` (rows, column order, dtypes, categories, values), the diagnostics
    (timings left out) and the saved file (:func:`_saved_file`)."""
    import tempfile

    res = gen.sample(m=m, seed=sample_seed)
    frames = res.datasets
    ledger = gen.ledger.to_frame()
    diag = {k: v for k, v in res.diagnostics.items() if not any(t in k for t in _TIMING)}
    with tempfile.TemporaryDirectory() as folder:
        saved = _saved_file(gen, folder)
    return {
        "noise calls": None if rec is None else [(c.step, c.mechanism, c.value.shape) for c in rec.calls],
        "ledger": repr(ledger.to_dict("records")),
        "relation": gen.relation,
        "default n": gen.default_n(),
        "rows": [len(f) for f in frames],
        "columns": [list(map(str, f.columns)) for f in frames],
        "dtypes": [{str(c): str(t) for c, t in f.dtypes.items()} for f in frames],
        "categories": [{str(c): list(f[c].cat.categories) for c in f.columns
                        if isinstance(f[c].dtype, pd.CategoricalDtype)} for f in frames],
        "synthetic values": [_frame_values(f) for f in frames],
        "diagnostics keys": sorted(res.diagnostics),
        "diagnostics values": diag,
        "saved file structure": {k: s for k, (s, _) in saved.items()},
        "saved file values": {k: v for k, (_, v) in saved.items()},
    }


def _difference(item: str, a, b) -> str:
    """A short text of what differs between two released items."""
    if isinstance(a, dict) and isinstance(b, dict):
        keys = sorted(set(a) | set(b), key=str)
        diff = [k for k in keys if a.get(k, "<absent>") != b.get(k, "<absent>")]
        shown = "; ".join(f"{k}: {_short(a.get(k, '<absent>'))} vs {_short(b.get(k, '<absent>'))}" for k in diff[:3])
        return shown + (f"; … ({len(diff)} entries differ)" if len(diff) > 3 else "")
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b) and all(isinstance(x, dict) for x in a):
        return _difference(item, a[0], b[0]) if a[0] != b[0] else _difference(item, a[-1], b[-1])
    return f"{_short(a)} vs {_short(b)}"


def _short(v, width: int = 60) -> str:
    text = str(v)
    return text if len(text) <= width else text[:width - 1] + "…"


def leak_audit(method, epsilon: float = 1.0, delta: float | None = None, data=None, seed: int = 0,
               sample_seed: int = 1, m: int = 2, kinds=None, label: str | None = None, **options) -> pd.DataFrame:
    """Leaks that bypass the noise: fit ``method`` (a registry name, or a callable returning an
    unfitted generator) on D and on its neighbours D' (:func:`neighbours` of the last row: a value
    set to NA in ``age``, a row removed, an all-NA row added, a row replaced) with the same seed, the
    run on D' replaying D's noise transcript (:func:`~dpsynth.privacy.replay_noise_outputs`). Every
    released value is then D's, so everything :func:`released` lists must be identical: any
    difference is information about the private data that no ledgered mechanism released.

    ``data``: (df, schema), default :func:`leak_audit_data` (complete rows for the pMSE mechanism).
    Returns one row per neighbour and item: generator, neighbour, item, identical, leak, difference.
    ``leak`` is False for differences between datasets that are not neighbours under the
    generator's relation (a row added or removed under replace-one, where n is public), and for
    values (synthetic rows, stored numbers, diagnostics) when a noise call releases outside the
    replay hook (its output differs by noise; the structure must still be identical).

    >>> rep = leak_audit("independent", epsilon=1.0)
    >>> sorted(set(rep["neighbour"]))
    ['add all-NA', 'remove', 'replace', 'value to NA']
    >>> leaks = rep[rep["leak"]]  # empty when nothing is released outside the ledger
    """
    from .generators import make_generator

    name = label or (method if isinstance(method, str) else getattr(method, "__name__", "custom"))
    opts = dict(options)
    delta = opts.pop("delta", delta)
    if callable(method):
        make = method
    else:
        make_generator(method, epsilon, delta, **opts)  # a bad name or option fails here, before any fit
        def make():
            return make_generator(method, epsilon, delta, **opts)
    if data is None:
        data = leak_audit_data(complete=isinstance(method, str) and method in COMPLETE_ONLY)
    df, schema = data
    if kinds is None and isinstance(method, str) and method in COMPLETE_ONLY:
        kinds = {"remove", "replace"}
    gen, base = _fit_recorded(make, df, schema, seed)
    ref = released(gen, base, m, sample_seed)
    outputs = [c.output for c in base.calls]
    # a mechanism that draws its release without the replay hook (the pMSE mechanism's MCMC) releases
    # D''s own draw: values computed from it may differ by noise; their structure may not
    unreplayed = [c.step for c in base.calls if c.output is None]
    na_column = "age" if "age" in df.columns and df["age"].iloc[-1:].notna().all() else None
    rows = []
    for kind, d2 in neighbours(df, schema, row=-1, na_column=na_column).items():
        if kinds is not None and kind not in kinds:
            continue
        neighbour = neighbour_steps(gen.relation, kind) is not None
        try:
            gen2, rec = _fit_recorded(make, d2, schema, seed, outputs)
            _same_noise_calls(kind, base, rec)
        except AssertionError as err:  # the replay diverged: data-dependent control flow
            rows.append({"generator": name, "neighbour": kind, "item": "noise calls", "identical": False,
                         "leak": neighbour, "difference": str(err)})
            continue
        other = released(gen2, rec, m, sample_seed)
        for item, value in ref.items():
            same = value == other[item]
            diff = "" if same else _difference(item, value, other[item])
            comparable = not (unreplayed and item in _VALUE_ITEMS)
            if not same and not comparable:
                diff = (f"not comparable: {len(unreplayed)} noise call(s) release outside the replay hook "
                        f"({unreplayed[0]!r}); {diff}")
            elif not same and not neighbour:
                diff = f"not neighbours under {gen.relation} (n is public); {diff}"
            rows.append({"generator": name, "neighbour": kind, "item": item, "identical": same,
                         "leak": neighbour and comparable and not same, "difference": diff})
    return pd.DataFrame(rows, columns=["generator", "neighbour", "item", "identical", "leak", "difference"])


def leak_audit_all(methods=None, errors: str = "raise", **kw) -> pd.DataFrame:
    """:func:`leak_audit` of every configuration of :func:`leak_configurations` (every registered
    generator at small settings, and the missing-data wrappers around a replace-one generator too).
    ``errors="report"``: a configuration that fails to run on D gives one row (item "fit",
    ``leak`` False, the error as difference) instead of raising."""
    if errors not in ("raise", "report"):
        raise ValueError(f"errors must be 'raise' or 'report', got {errors!r}")
    frames = []
    for label, (method, epsilon, opts) in leak_configurations(methods).items():
        try:
            frames.append(leak_audit(method, epsilon, label=label, **kw, **opts))
        except Exception as err:  # noqa: BLE001 - reported per configuration, the others still run
            if errors == "raise":
                raise
            frames.append(pd.DataFrame([{"generator": label, "neighbour": "", "item": "fit", "identical": False,
                                         "leak": False, "difference": f"error: {type(err).__name__}: {err}"}]))
    return pd.concat(frames, ignore_index=True)
