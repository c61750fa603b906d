"""NAPSU-MQ's leapfrog step on two cores: torch threads and processes, alone and beside a second job.

The sampler of the bundled Adult at 15 columns (the model of ``bench/napsu_scale.py``, seed 1)
spends most of a fit in leapfrog steps: one velocity product with the dense metric (16 chains ×
1,027², float32) and one value and gradient of the expanded-V surrogate (five such products and
two message passes, :class:`dpsynth.graphical.expanded_v.ExpandedV`). It runs them on one torch
thread. This script measures what a step costs (ms; the median of 5 blocks of 2 trajectories of
23 steps, the threads set around each trajectory as a sampler would) under:

- ``threads_1`` / ``threads_2``: one or two torch threads for the trajectory;
- ``threads_2_passive``: two, with ``OMP_WAIT_POLICY=PASSIVE`` (idle OpenMP workers sleep at once
  instead of spinning);
- ``chains_8``: one thread, 8 chains (each of two processes would run half of the 16);

each ``alone`` (one process) and ``two_at_once`` (two copies started together: a second fit, or
the two halves of a process split). Numbers in docs/napsu-measurements.md come from this script.

Usage: python bench/napsu_threads.py [--blocks 5]
Prints progress on stderr and one JSON object on the last line of stdout.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time

import _common

STEPS = 23  # leapfrog steps per trajectory: the 15-column fits' typical number
CONFIGS = {"threads_1": (1, 16, {}), "threads_2": (2, 16, {}),
           "threads_2_passive": (2, 16, {"OMP_WAIT_POLICY": "PASSIVE"}), "chains_8": (1, 8, {})}


def worker(threads: int, chains: int, blocks: int, barrier: str, copies: int) -> float:
    """ms per leapfrog step in this process, after every copy has built its model."""
    import numpy as np
    import torch

    import dpsynth
    import napsu_scale
    from dpsynth.graphical.posterior import value_and_grad

    torch.set_num_threads(1)
    df, schema = dpsynth.load_dataset("adult")
    gen, measurements = napsu_scale.built_model(df, schema, napsu_scale.ORDER[:15], seed=1)
    lik = gen.likelihood(measurements)
    x_ref = torch.as_tensor(np.random.default_rng(0).normal(0, 0.1, lik.dim))
    x = x_ref + torch.as_tensor(np.random.default_rng(1).normal(0, 0.01, (chains, lik.dim)))
    guide = lik.surrogate(x_ref, x[:4])
    metric = torch.as_tensor(np.random.default_rng(2).normal(0, 1e-3, (lik.dim, lik.dim)), dtype=torch.float32)

    def trajectory():
        torch.set_num_threads(threads)
        xn = x
        for _ in range(STEPS):
            xn = x + 1e-9 * (xn.to(torch.float32) @ metric).to(torch.float64)
            value_and_grad(guide, xn)
        torch.set_num_threads(1)
    trajectory()
    open(os.path.join(barrier, str(os.getpid())), "w").close()
    while len(os.listdir(barrier)) < copies:
        time.sleep(0.01)
    times = []
    for _ in range(blocks):
        t0 = time.perf_counter()
        trajectory()
        trajectory()
        times.append(1e3 * (time.perf_counter() - t0) / (2 * STEPS))
    return sorted(times)[len(times) // 2]


def measure(name: str, copies: int, blocks: int) -> list[float]:
    threads, chains, env = CONFIGS[name]
    with tempfile.TemporaryDirectory() as barrier:
        args = [sys.executable, __file__, "--worker", str(threads), str(chains), str(blocks), barrier, str(copies)]
        procs = [subprocess.Popen(args, stdout=subprocess.PIPE, env={**os.environ, **env}, text=True)
                 for _ in range(copies)]
        out = [p.communicate()[0] for p in procs]
    if any(p.returncode for p in procs):
        raise RuntimeError(f"a worker of {name} failed")
    return [round(float(o.strip().splitlines()[-1]), 2) for o in out]


def main(argv=None):
    ap = _common.parser(__doc__)
    ap.add_argument("--blocks", type=int, default=5)
    args = ap.parse_args(argv)
    out = {"machine": _common.machine(), "note": _common.CONTENTION, "steps_per_trajectory": STEPS,
           "ms_per_leapfrog_step": {"alone": {}, "two_at_once": {}}}
    for copies, key in ((1, "alone"), (2, "two_at_once")):
        for name in CONFIGS:
            out["ms_per_leapfrog_step"][key][name] = measure(name, copies, args.blocks)
            _common.log(f"{key} {name}: {out['ms_per_leapfrog_step'][key][name]} ms per step")
    print(json.dumps(out))


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        t, c, b, barrier, copies = sys.argv[2:7]
        print(worker(int(t), int(c), int(b), barrier, int(copies)))
    else:
        main()
