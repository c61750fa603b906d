"""Every benchmark script in ``bench/`` starts: it imports and parses its arguments (``--help``).
A script whose module-level imports or argument parser break (bench/napsu_missing.py lost its
``import _common`` in 2503e44 and stopped with a NameError before doing anything) fails here rather
than in the middle of a study."""
from __future__ import annotations

import os
import pathlib
import subprocess
import sys

import pytest

BENCH = pathlib.Path(__file__).resolve().parents[2] / "bench"
SCRIPTS = sorted(p for p in BENCH.glob("*.py") if not p.name.startswith("_"))


def test_there_are_bench_scripts():
    assert len(SCRIPTS) >= 10, SCRIPTS


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_bench_script_parses_its_arguments(script):
    env = {**os.environ, "PYTHONPATH": str(BENCH.parent / "python")}
    out = subprocess.run([sys.executable, str(script), "--help"], capture_output=True, text=True, timeout=300,
                         cwd=BENCH.parent, env=env)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "usage" in out.stdout.lower()
