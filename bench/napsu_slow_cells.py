"""Which released cells set the length of a 15-column NAPSU-MQ fit: R̂ cell by cell at every check.

One fit + 20 datasets of ``bench/napsu_scale.py`` (the bundled Adult, 15 columns, real NAs, ε = 1;
``--seed``), timed as there. The fit's checks see the released cells' probabilities at every draw
(16 chains × draws × 1,391 cells); this script keeps the last of them and recomputes, at every
100 draws per chain, the split R̂ and bulk ESS of each cell (the fit's own rule: every draw,
:data:`dpsynth.generators.napsu_sampling.DIAGNOSTIC_DRAWS`):

- ``path``: per check, the largest R̂, how many cells miss the target, the median R̂ − 1, and the
  worst cell (its table, its levels, its autocorrelation time τ = chains × draws / ESS);
- ``worst_at_end``: the ten cells of highest R̂ over all draws, with the rows the posterior gives
  them on average (probability × the data's rows);
- ``--leave-out A,B``: the largest R̂ at every check without the cells of table (A, B) where a
  column is missing (an estimate on the same draws of what those cells cost; a model without them
  would move differently).

Levels are the schema's categories (or bin indices), ``missing`` for the level the model adds to an
incomplete column.

Usage: python bench/napsu_slow_cells.py [--seed 17] [--leave-out workclass,occupation]
Prints progress on stderr and one JSON object on the last line of stdout.
"""
from __future__ import annotations

import numpy as np
import torch

import _common
import napsu_scale

STEP = 100  # draws per chain between the recomputed checks (the fit's extensions under MAR)


class KeptProbs:
    """Wraps :meth:`PosteriorSampling._cell_diagnostics` to keep the cell probabilities of every draw
    that the fit's last full check saw; :meth:`restore` undoes it."""

    def __init__(self):
        from dpsynth.generators import napsu_sampling

        self.owner, self.probs = napsu_sampling.PosteriorSampling, None
        self.original = self.owner._cell_diagnostics
        kept = self

        def keep(self, draws, probs=None, lazy=False, screen=None):
            if probs is not None and screen is None:
                kept.probs = np.array(probs, dtype=np.float64)
            return kept.original(self, draws, probs, lazy, screen)
        self.owner._cell_diagnostics = keep

    def restore(self) -> None:
        self.owner._cell_diagnostics = self.original


def cell_labels(model, schema) -> list[tuple[str, dict]]:
    """(table name, {column: level}) of every released cell, in the model's order."""
    incomplete = set(schema.incomplete)
    labels = []
    for table, size in zip(model.tables, model.table_sizes):
        cols = [str(c) for c in table]
        names = [list(schema[c].categories) if schema[c].categories else list(range(schema[c].bins)) for c in cols]
        names = [n + ["missing"] if c in incomplete else n for c, n in zip(cols, names)]
        shape = [len(n) for n in names]
        if int(np.prod(shape)) != size:
            raise ValueError(f"table {cols} has {size} cells, its levels give {shape}")
        for cell in range(size):
            idx = np.unravel_index(cell, shape)
            labels.append((" x ".join(cols), {c: str(n[i]) for c, n, i in zip(cols, names, idx)}))
    return labels


def cell_diagnostics(probs: np.ndarray) -> dict[int, tuple[np.ndarray, np.ndarray]]:
    """{draws per chain: (R̂, bulk ESS) of every cell over the first that many draws}, every
    :data:`STEP` draws and at the end. A cell's R̂ does not depend on the other cells computed with it,
    so any subset of cells reads its R̂ from these arrays."""
    from dpsynth.graphical.posterior import rhat_and_ess

    draws = probs.shape[1]
    return {n: tuple(np.asarray(v) for v in rhat_and_ess(probs[:, :n]))
            for n in sorted(set(range(STEP, draws + 1, STEP)) | {draws})}


def per_check(diagnostics: dict, chains: int, labels, target: float) -> list[dict]:
    out = []
    for n, (rhat, ess) in diagnostics.items():
        worst = int(np.nanargmax(rhat))
        out.append({"draws_per_chain": n, "rhat_max": round(float(rhat[worst]), 4),
                    "cells_over_target": int(np.sum(rhat > target)),
                    "median_rhat_minus_1": round(float(np.nanmedian(rhat - 1)), 4),
                    "worst_cell": worst, "worst_table": labels[worst][0], "worst_levels": labels[worst][1],
                    "worst_tau": round(float(chains * n / ess[worst]), 1)})
    return out


def main(argv=None):
    import dpsynth

    ap = _common.parser(__doc__)
    ap.add_argument("--seed", type=int, default=17)
    ap.add_argument("--leave-out", default="", help="a table's columns, comma-separated: its cells with a missing level are left out")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    df, schema = dpsynth.load_dataset("adult")
    kept = KeptProbs()
    try:
        gen, _, seconds = napsu_scale.one_fit(df, schema, napsu_scale.ORDER, args.seed)
    finally:
        kept.restore()
    probs, target = kept.probs, gen.rhat_target
    labels = cell_labels(gen.model_, schema)
    _common.log(f"seed {args.seed}: {seconds:.1f} s, draws {probs.shape}")
    chains, draws = probs.shape[:2]
    diagnostics = cell_diagnostics(probs)
    rhat, ess = diagnostics[draws]
    mean = probs.mean(axis=(0, 1))
    worst = [{"cell": int(i), "table": labels[i][0], "levels": labels[i][1], "rhat": round(float(rhat[i]), 4),
              "tau": round(float(chains * draws / ess[i]), 1), "rows": round(float(mean[i] * len(df)), 1)}
             for i in np.argsort(-np.nan_to_num(rhat, nan=-np.inf))[:10]]
    out = {"machine": _common.machine(), "note": _common.CONTENTION, "seed": args.seed,
           "seconds_fit_plus_20": round(seconds, 1), "draws_per_chain": draws, "cells": len(labels),
           "median_tau": round(float(np.nanmedian(chains * draws / ess)), 1),
           "path": per_check(diagnostics, chains, labels, target), "worst_at_end": worst}
    if args.leave_out:
        table = " x ".join(_common.parse_list(args.leave_out))
        out_cells = [i for i, (t, lv) in enumerate(labels) if t == table and "missing" in lv.values()]
        if not out_cells:
            raise SystemExit(f"no cell of table {table!r} has a missing level (tables: {sorted({t for t, _ in labels})})")
        keep = np.setdiff1d(np.arange(len(labels)), out_cells)
        out["left_out"] = {"table": table, "cells": len(out_cells), "rhat_max_without": [
            [n, round(float(np.nanmax(r[keep])), 4)] for n, (r, _) in diagnostics.items()]}
    _common.emit(out)


if __name__ == "__main__":
    main()
