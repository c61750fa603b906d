"""Privacy audits a user can run: grey-box neighbour checks and a distinguishing audit.

Grey-box (Re:cord-play pattern, dp-privacy.md §4.3 B): every value handed to a noise primitive is
recorded with its declared sensitivity (:func:`dpsynth.privacy.record_noise_inputs`). We fit the
generator on D and on neighbours D' with the same seed and check (1) the same sequence of noise
calls with the same shapes (no data-dependent control flow or domains) and (2) that each recorded
value moves by at most its declared sensitivity, in its norm.

Black-box (§4.3 C): :func:`distinguishing_audit` runs a generator many times on D (40 identical
rows) and on D' (one row replaced by a unique row), counts the unique row in each output, picks a
threshold on one half of the runs and bounds the false-positive and false-negative rates on the
other half with Clopper–Pearson. ε_lo = max(log((1−δ−FNR⁺)/FPR⁺), log((1−δ−FPR⁺)/FNR⁺)) is a
statistically valid lower bound on the true ε (Jagielski et al. 2020; Nasr et al. 2021): if it
exceeds the ledger's claim, the generator leaks more than it says. Passing proves nothing.

Example
-------
>>> import dpsynth
>>> from dpsynth.audit import distinguishing_audit
>>> res = distinguishing_audit("independent", epsilon=1.0, runs=50)
>>> res["eps_lo"] <= res["eps_claimed"]
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

# multiplier of the declared sensitivity for each neighbour kind under each relation
# (add/remove: changing a row is a removal plus an addition; replace-one: n is public, so adding or
# removing a row is not a neighbour and is checked for control flow only)
_BOUND = {
    "add-remove": {"remove": 1, "add all-NA": 1, "value to NA": 2, "replace": 2},
    "replace-one": {"remove": None, "add all-NA": None, "value to NA": 1, "replace": 1},
}


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


def neighbours(df: pd.DataFrame, schema: Schema, row: int = 0) -> dict[str, pd.DataFrame]:
    """The neighbouring datasets the grey-box check uses: remove row ``row``; add an all-NA row;
    set one observed cell of ``row`` to NA; replace ``row`` by :func:`unique_row`."""
    out = {"remove": df.drop(index=df.index[row]).reset_index(drop=True)}
    na = pd.DataFrame({c: [None] for c in df.columns}).astype(df.dtypes.to_dict())
    out["add all-NA"] = pd.concat([df, na], ignore_index=True)
    d = df.copy()
    observed = [c for c in df.columns if pd.notna(df.iloc[row][c])]
    d.loc[d.index[row], observed[0]] = None
    out["value to NA"] = d
    d = df.copy()
    for c, v in unique_row(schema).items():
        d.loc[d.index[row], c] = v
    out["replace"] = d
    return out


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
    gen = make_generator()
    relation = gen.relation
    with record_noise_inputs() as base:
        gen.fit(df, schema, seed=seed)
    outputs = [c.output for c in base.calls]
    rows = []
    for kind, d2 in neighbours(df, schema, row).items():
        if kinds is not None and kind not in kinds:
            continue
        mult = _BOUND[relation][kind]
        with record_noise_inputs() as rec, (replay_noise_outputs(outputs) if replay else contextlib.nullcontext()):
            make_generator().fit(d2, schema, seed=seed)
        if base.steps() != rec.steps() or [c.value.shape for c in base.calls] != [c.value.shape for c in rec.calls]:
            raise AssertionError(f"neighbour {kind!r}: the noise calls differ between D and D' "
                                 f"(data-dependent control flow): {base.steps()[:5]}… vs {rec.steps()[:5]}…")
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
def audit_datasets(n: int = 40) -> tuple[pd.DataFrame, pd.DataFrame, Schema, dict]:
    """Worst-case pair (replace-one): D = n identical rows, D' = D with one row replaced by a
    unique row. A small public domain (two categorical columns of three levels and one bounded
    numeric) keeps the unique row's cell visible to the statistic."""
    schema = Schema.from_dict({
        "a": {"type": "categorical", "categories": ["a0", "a1", "a2"]},
        "b": {"type": "categorical", "categories": ["b0", "b1", "b2"]},
        "x": {"type": "numeric", "lower": 0, "upper": 10, "bins": 2},
    })
    common = {"a": "a0", "b": "b0", "x": 1.0}
    target = {"a": "a2", "b": "b2", "x": 9.0}
    cat = {c: pd.CategoricalDtype(schema[c].categories) for c in ("a", "b")}
    d = pd.DataFrame([common] * n).astype(cat)
    d2 = pd.DataFrame([common] * (n - 1) + [target]).astype(cat)
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
                         **options) -> dict:
    """Run ``method`` (a registry name, or a callable returning an unfitted generator) ``runs`` times
    on each of D and D' (see :func:`audit_datasets`); statistic = number of synthetic rows equal to
    the unique row among ``n_synth`` synthetic rows (drawing many rows from the released model is
    post-processing and makes a support leak visible); returns eps_lo beside the ledger's claim
    (``passed`` = eps_lo ≤ claim)."""
    from .generators import make_generator

    def run_once(data, s):
        gen = method() if callable(method) else make_generator(method, epsilon, delta, **options)
        gen.fit(data, schema, seed=s)
        return gen.sample(n=n_synth, m=1, seed=None if s is None else s + 1)

    d, d2, schema, target = audit_datasets(n_rows)
    rng = np.random.default_rng(seed)
    scores = {"D": [], "D'": []}
    claimed = 0.0
    for side, data in (("D", d), ("D'", d2)):
        for _ in range(runs):
            s = None if seed is None else int(rng.integers(0, 2**31 - 1))
            res = run_once(data, s)
            claimed = max(claimed, res.ledger.total_epsilon())
            scores[side].append(_count_target(res.datasets[0], target, schema))
    neg, pos = np.array(scores["D"]), np.array(scores["D'"])
    half = runs // 2
    # threshold chosen on the first half only, evaluated on the second
    cands = np.unique(np.r_[neg[:half], pos[:half]]) + 0.5
    best, tau = -1.0, cands[0] if len(cands) else 0.5
    for t in cands:
        fp, fn = int((neg[:half] >= t).sum()), int((pos[:half] < t).sum())
        e = epsilon_lower_bound(fp, half, fn, half, delta or 0.0, alpha)
        if e > best:
            best, tau = e, t
    fp, fn = int((neg[half:] >= tau).sum()), int((pos[half:] < tau).sum())
    n_eval = runs - half
    eps_lo = epsilon_lower_bound(fp, n_eval, fn, n_eval, delta or 0.0, alpha)
    return {"method": method if isinstance(method, str) else getattr(method, "__name__", "custom"),
            "eps_claimed": claimed, "eps_lo": eps_lo, "threshold": float(tau),
            "false_positives": fp, "false_negatives": fn, "runs_per_side": runs, "evaluated_per_side": n_eval,
            "alpha": alpha, "passed": eps_lo <= claimed + 1e-9,
            "max_power": math.log(n_eval / max(1e-12, -math.log(alpha / 2)))}


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
