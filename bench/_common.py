"""What the benchmarks share: their data, timed runs, figures, the machine and the last-line JSON.

Every script in ``bench/`` prints one JSON object on its last line of stdout (:func:`emit`) and its
progress on stderr (:func:`log`). The data are the bundled tables with their public schemas:
:func:`complete_truth` is the ground truth of the seed paper's protocol (a table's complete rows),
:func:`adult_8000` the 8,000-row Adult sample of the issue-17 studies. :func:`fit_sample` times one
generator's fit and sampling, :func:`tvd_figures` gives the paper-mode TVDs, :func:`within_budget`
checks a ledger against its budget and :func:`machine` says where the timings were taken.

Run as ``python bench/<name>.py``: the scripts import this module as ``_common`` (their folder is on
``sys.path``). dpsynth and numpy are imported where used, so that ``bench/scale.py``'s parent process
stays light.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time

#: the note every timing of the shared development machine carries
CONTENTION = "timings taken on a shared 2-core machine under contention"


def parser(doc: str) -> argparse.ArgumentParser:
    """An argument parser described by the first line of the script's docstring."""
    return argparse.ArgumentParser(description=doc.split("\n")[0])


def add_selection_penalty(ap: argparse.ArgumentParser) -> None:
    """``--selection-penalty`` / ``--no-selection-penalty``: NAPSU-MQ's ``selection_penalty`` set
    explicitly (MST scores less the noise each table's measurement adds, or private-pgm's scores);
    neither: the generator's default. Read back by :func:`napsu_options`."""
    ap.add_argument("--selection-penalty", action=argparse.BooleanOptionalAction, default=None,
                    help="NAPSU-MQ(selection_penalty=...): MST scores less the noise each table adds, or not")


def add_reference(ap: argparse.ArgumentParser) -> None:
    """``--reference auto|first|largest``: NAPSU-MQ's ``reference`` (θ's reference levels) set
    explicitly; absent: the generator's default. Read back by :func:`napsu_options`."""
    ap.add_argument("--reference", choices=["auto", "first", "largest"], default=None,
                    help="NAPSU-MQ(reference=...): level 0 or each column's largest released level")


def napsu_options(args) -> dict:
    """The NAPSU-MQ options :func:`add_selection_penalty` and :func:`add_reference` set (``{}``:
    the defaults)."""
    options = {} if args.selection_penalty is None else {"selection_penalty": bool(args.selection_penalty)}
    if getattr(args, "reference", None) is not None:
        options["reference"] = args.reference
    return options


def parse_list(text, cast=str) -> list:
    """A comma-separated option as a list (blanks dropped), each item through ``cast``."""
    return [cast(x.strip()) for x in str(text).split(",") if x.strip()]


def log(msg) -> None:
    """Progress on stderr (stdout's last line is the JSON)."""
    print(msg, file=sys.stderr, flush=True)


def emit(out: dict, **options) -> None:
    """The benchmark's figures as one JSON object on the last line of stdout."""
    print(json.dumps(out, **options))


def cpu_model() -> str:
    """The processor's model name (``/proc/cpuinfo``; ``platform.processor()`` elsewhere). Timings
    depend on it: the same 15-column NAPSU-MQ fit took 568.8 s on an AMD EPYC and ~240 s on an Intel
    Xeon with AVX-512, both 2-core machines of this project (docs/napsu-measurements.md)."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def machine(keys=None) -> dict:
    """Where the timings were taken: ``python`` (version), ``arch``, ``cpu`` (:func:`cpu_model`),
    ``cpus``, ``load`` (1-minute load average now); only ``keys`` if given."""
    info = {"python": platform.python_version(), "arch": platform.machine(), "cpu": cpu_model(),
            "cpus": os.cpu_count(), "load": round(os.getloadavg()[0], 2)}
    return info if keys is None else {k: info[k] for k in keys}


def complete_truth(name: str = "adult"):
    """(complete rows of a bundled table, its schema): the seed paper's ground truth."""
    import dpsynth

    df, schema = dpsynth.load_dataset(name)
    return df.dropna().reset_index(drop=True), schema


def adult_8000():
    """(8,000 complete Adult rows, ``df.dropna().sample(8000, random_state=0)``, the schema)."""
    import dpsynth

    df, schema = dpsynth.load_dataset("adult")
    return df.dropna().sample(n=8000, random_state=0).reset_index(drop=True), schema


def fit_sample(gen, data, schema, seed: int, sample_seed: int, n=None):
    """Fit ``gen`` on ``data`` and draw one dataset of ``n`` rows (default: the generator's).

    Returns (fitted generator, synthetic frame, fit seconds, fit + sample seconds)."""
    t0 = time.perf_counter()
    gen = gen.fit(data, schema, seed=seed)
    fit_s = time.perf_counter() - t0
    synth = gen.sample(n=n, seed=sample_seed).datasets[0]
    return gen, synth, fit_s, time.perf_counter() - t0


def tvd_figures(truth, synth, schema, ks=(2, 1), digits: int | None = 4) -> dict:
    """``{"tvd2": .., "tvd1": ..}``: the paper-mode k-way TVDs (``dpsynth.metrics.tvd``) of ``synth``
    against ``truth``, rounded to ``digits`` (None: unrounded)."""
    from dpsynth.metrics import tvd

    out = {}
    for k in ks:
        v = tvd(truth, synth, schema, k=k)
        out[f"tvd{k}"] = v if digits is None else round(v, digits)
    return out


def within_budget(ledger, epsilon: float, delta: float | None = None) -> bool:
    """The ledger's totals are within (ε, δ), up to a relative 1e-9 of float summation."""
    ok = ledger.total_epsilon() <= epsilon * (1 + 1e-9)
    if delta is not None:
        ok = ok and ledger.total_delta() <= delta * (1 + 1e-9)
    return bool(ok)


def group(runs, key) -> dict:
    """The runs (dicts) grouped by ``key(run)``, in order of first appearance."""
    out: dict = {}
    for r in runs:
        out.setdefault(key(r), []).append(r)
    return out


def means(runs, digits: dict) -> dict:
    """``{figure: mean over runs}``, each rounded to its number of ``digits``."""
    import numpy as np

    return {k: round(float(np.mean([r[k] for r in runs])), d) for k, d in digits.items()}
