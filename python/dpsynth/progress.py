"""Progress bars for long steps (fitting rounds, sampling m datasets, MCMC), off by default.

The command line turns them on (``--quiet`` keeps them off); from Python call
``dpsynth.progress.enable()``. Bars go to stderr through tqdm.

>>> from dpsynth.progress import progress
>>> sum(progress(range(3), "counting"))
3
"""
from __future__ import annotations

import sys

_ENABLED = False


def enable(on: bool = True) -> None:
    global _ENABLED
    _ENABLED = bool(on)


def progress(iterable, desc: str = "", total: int | None = None):
    """``iterable`` wrapped in a tqdm bar when progress bars are enabled, else unchanged."""
    if not _ENABLED:
        return iterable
    from tqdm.auto import tqdm

    return tqdm(iterable, desc=desc, total=total, leave=False)


def note(message: str) -> None:
    """One line on stderr when progress bars are enabled (a long step's milestones, e.g. each
    convergence check of NAPSU-MQ's sampler), else nothing.

    >>> note("not shown: progress is off")
    """
    if _ENABLED:
        print(message, file=sys.stderr, flush=True)
