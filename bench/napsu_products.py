"""The expanded-V surrogate's dense products by layout and batch rows: which way round MKL is faster.

Each value and gradient of NAPSU-MQ's expanded-V surrogate (:class:`dpsynth.graphical.expanded_v.ExpandedV`)
multiplies the chains' rows by two fixed symmetric matrices five times, in float32
(:class:`dpsynth.graphical.expanded_v.FixedMatrix`). At the bundled Adult's 15 columns the matrices
are 1,027² and the sampler's process split (:mod:`dpsynth.graphical.split_chains`) hands each
process 8 of the 16 chains. This script times, on one torch thread, a product of ``rows`` rows by a
``--dim``² float32 matrix in the three ways torch can be asked for it:

- ``transposed``: (Mᵀxᵀ)ᵀ with Mᵀ stored contiguous (FixedMatrix's layout for 16 rows and more);
- ``linear``: ``torch.nn.functional.linear(x, Mᵀ)`` = x @ M from the same stored Mᵀ (FixedMatrix's
  layout below :data:`dpsynth.graphical.expanded_v.LINEAR_BELOW_ROWS` rows);
- ``x_at_m``: x @ M with M stored contiguous;

and ``fixed_matrix``, what :class:`FixedMatrix` does now (with its float64 conversions). Figures are
the median over ``--blocks`` blocks of ``--repeats`` products, in ms; ``alone`` in this process,
and ``two_at_once`` as two copies started together (the two halves of a process split share the
machine's cache).

Usage: python bench/napsu_products.py [--dim 1027] [--rows 1 2 4 8 12 16 24 32] [--blocks 7] [--repeats 200]
Prints progress on stderr and one JSON object on the last line of stdout.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time

import _common


def timings(dim: int, rows_list, blocks: int, repeats: int) -> dict:
    """{rows: {layout: ms}} in this process, one torch thread."""
    import torch

    from dpsynth.graphical.expanded_v import FixedMatrix

    torch.set_num_threads(1)
    gen = torch.Generator().manual_seed(0)
    m = torch.randn(dim, dim, dtype=torch.float64, generator=gen)
    m = 0.5 * (m + m.T)
    m32, mt32 = m.float().contiguous(), m.T.contiguous().float()
    fixed = FixedMatrix(m.float())
    out = {}
    for rows in rows_list:
        x64 = torch.randn(rows, dim, dtype=torch.float64, generator=gen)
        x = x64.float()
        ways = {"transposed": lambda: (mt32 @ x.T).T, "linear": lambda: torch.nn.functional.linear(x, mt32),
                "x_at_m": lambda: x @ m32, "fixed_matrix": lambda: fixed(x64)}
        row = {}
        for name, fn in ways.items():
            for _ in range(10):
                fn()
            per = []
            for _ in range(blocks):
                t0 = time.perf_counter()
                for _ in range(repeats):
                    fn()
                per.append(1e3 * (time.perf_counter() - t0) / repeats)
            row[name] = round(sorted(per)[len(per) // 2], 3)
        out[str(rows)] = row
    return out


def main(argv=None):
    ap = _common.parser(__doc__)
    ap.add_argument("--dim", type=int, default=1027)
    ap.add_argument("--rows", type=int, nargs="*", default=[1, 2, 4, 8, 12, 16, 24, 32])
    ap.add_argument("--blocks", type=int, default=7)
    ap.add_argument("--repeats", type=int, default=200)
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        print(json.dumps(timings(args.dim, args.rows, args.blocks, args.repeats)))
        return
    alone = timings(args.dim, args.rows, args.blocks, args.repeats)
    _common.log(f"alone: {alone}")
    cmd = [sys.executable, __file__, "--worker", "--dim", str(args.dim), "--blocks", str(args.blocks),
           "--repeats", str(args.repeats), "--rows", *map(str, args.rows)]
    procs = [subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True) for _ in range(2)]
    both = [json.loads(p.communicate()[0].strip().splitlines()[-1]) for p in procs]
    if any(p.returncode for p in procs):
        raise RuntimeError("a worker failed")
    _common.log(f"two at once: {both}")
    _common.emit({"machine": _common.machine(), "note": _common.CONTENTION, "dim": args.dim, "unit": "ms per product",
                  "alone": alone, "two_at_once": both})


if __name__ == "__main__":
    main()
