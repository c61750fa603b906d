"""Exact audit of selection steps (consecutive exponential-mechanism calls, e.g. PrivBayes's network
rounds or MST's edges): the outcome tree is enumerated on D and D' and the privacy loss checked with a
hockey-stick test."""
from __future__ import annotations

import math
from typing import Callable

import numpy as np
import pandas as pd

from ..privacy import record_noise_inputs, replay_noise_outputs
from ..schema import Schema


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
