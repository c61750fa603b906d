"""Grey-box neighbour checks (Re:cord-play pattern, dp-privacy.md §4.3 B): the generator is fitted on D
and on neighbours D' with the same seed, recording every value handed to a noise primitive; the noise calls
must be the same, and each recorded value may move by at most its declared sensitivity, in its norm. Also
the neighbour kinds as steps of a neighbouring relation (:func:`neighbour_steps`, :func:`group_claim`)."""
from __future__ import annotations

import contextlib
import math
from typing import Callable

import pandas as pd

from ..privacy import distance, record_noise_inputs, replay_noise_outputs
from ..schema import Schema


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


def fit_recorded(make_generator: Callable, df: pd.DataFrame, schema: Schema, seed: int, outputs=None):
    """Fit ``make_generator()`` on ``df`` recording its noise calls; with ``outputs`` the calls
    release those values (replay). Returns (generator, recorder)."""
    gen = make_generator()
    with record_noise_inputs() as rec, (replay_noise_outputs(outputs) if outputs is not None
                                        else contextlib.nullcontext()):
        gen.fit(df, schema, seed=seed)
    return gen, rec


def same_noise_calls(kind: str, base, rec) -> None:
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
    gen, base = fit_recorded(make_generator, df, schema, seed)
    outputs = [c.output for c in base.calls]
    rows = []
    for kind, d2 in neighbours(df, schema, row).items():
        if kinds is not None and kind not in kinds:
            continue
        mult = neighbour_steps(gen.relation, kind)
        _, rec = fit_recorded(make_generator, d2, schema, seed, outputs if replay else None)
        same_noise_calls(kind, base, rec)
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
