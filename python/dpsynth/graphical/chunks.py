"""Independent chunks of a batch evaluated on the machine's cores.

The exact NAPSU-MQ log density of many posterior draws (:meth:`NoiseAwareLikelihood.log_posterior_many`)
and the released cells' probabilities of many draws (the sampler's diagnostics) are computed chunk
by chunk, and the chunks do not depend on each other. Their work is mostly LU factorisations,
message passing and products that torch runs without holding the GIL, so two Python threads keep
two cores busy while the sampler itself (a chain of small dependent operations) runs on one thread
(for large models, half of each batch of chains in a forked helper process:
:mod:`dpsynth.graphical.split_chains`).
Each chunk's value is the same in any thread and the results come back in order, so nothing
depends on the number of threads. Adult-10 with 20 % MCAR, seed 3, one fit alone on the 2-core
machine: 2,384 exact evaluations took 8.44 s on one thread and 4.53 s on two (same draws, same
diagnostics; fit 78.2 → 71.9 s). The released cells' R̂ and ESS
(:func:`dpsynth.graphical.mixing.rhat_and_ess`) go the same way over two blocks of cells (532 cells,
16 chains × 400 draws: 0.78 → 0.51 s, same values). Python threads over independent chunks slow
down gracefully when the other core is busy; torch's own intra-op threads do not (each parallel
region waits for its slowest thread), which is why the sinh–arcsinh map's fit no longer runs two
(:func:`dpsynth.graphical.transport.fit_marginal_map`).

>>> import torch
>>> parts = torch.arange(10.0).split(3)
>>> torch.cat(map_chunks(lambda c: 2 * c, parts)).tolist()[:4]
[0.0, 2.0, 4.0, 6.0]
"""
from __future__ import annotations

import contextlib
import ctypes
import functools
import os
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Callable, Sequence

import torch

#: threads for :func:`map_chunks` (at most the machine's cores); 1: the calling thread alone
THREADS = 2


_ALONE = threading.local()  # per thread: whether :func:`one_core` holds


def cores() -> int:
    """Threads to use: :data:`THREADS`, at most the machine's cores; 1 inside :func:`one_core`."""
    return 1 if getattr(_ALONE, "held", False) else min(THREADS, os.cpu_count() or 1)


@contextlib.contextmanager
def one_core(held: bool = True):
    """Run a block's :func:`map_chunks` (those of the calling thread) on the calling thread alone
    (``held=False``: as before, for callers that decide at run time), for work beside a thread that
    keeps the other core busy (:func:`beside`): three threads on two cores slow both. The values
    are the same (a chunk's value does not depend on its thread). The bundled Adult at 15 columns,
    seed 6 under py-spy: the next coordinate map, fitted beside each check's R̂ on two threads, kept
    the sampler waiting 1.3–2.1 s after every check (13.3 s a fit).

    >>> with one_core():
    ...     cores()
    1
    >>> with one_core(False):
    ...     cores() == min(THREADS, os.cpu_count() or 1)
    True
    """
    before = getattr(_ALONE, "held", False)
    _ALONE.held = before or held
    try:
        yield
    finally:
        _ALONE.held = before


def map_chunks(fn: Callable, chunks: Sequence) -> list:
    """``[fn(c) for c in chunks]`` without autograd (grad mode is per thread: off in each worker),
    spread over up to :data:`THREADS` threads, in order."""
    def value(c):
        with torch.no_grad():
            return fn(c)
    workers = min(cores(), len(chunks))
    if workers <= 1:
        return [value(c) for c in chunks]
    with ThreadPoolExecutor(workers) as pool:
        return list(pool.map(value, chunks))


@contextlib.contextmanager
def torch_threads(n: int):
    """Run a block with ``torch.set_num_threads(n)`` (at least 1) and restore the previous setting
    afterwards: for large element-wise work inside a fit that otherwise runs one thread (message
    passing's many small operations are faster on one)."""
    old = torch.get_num_threads()
    torch.set_num_threads(max(1, int(n)))
    try:
        yield
    finally:
        torch.set_num_threads(old)


def beside(fn: Callable, *args) -> Future:
    """``fn(*args)`` started on a thread of its own, beside the caller's work; the returned future's
    ``result()`` waits for it and returns its value (or raises its exception). For work that runs on
    one torch thread while the caller's other work leaves a core idle: a NAPSU-MQ fit's next
    coordinate map, fitted while the released cells' R̂ is checked
    (:data:`dpsynth.generators.napsu_sampling.MAP_BESIDE_CHECK`). torch's thread count is the
    process's, so the value is the one the caller's thread would have computed.

    >>> beside(sum, [1, 2, 3]).result()
    6
    """
    pool = ThreadPoolExecutor(1)
    try:
        return pool.submit(fn, *args)
    finally:
        pool.shutdown(wait=False)  # the task runs to its end; the pool takes no other


#: glibc's mallopt parameters (malloc.h) and their documented defaults (mallopt(3))
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3
_GLIBC_DEFAULT = 128 * 1024
#: what :func:`reused_memory` sets both to while a fit runs
REUSE_BYTES = 32 * 1024 * 1024


@functools.lru_cache(maxsize=1)
def _glibc():
    """The process's C library where it has glibc's ``mallopt`` and ``malloc_trim`` (Linux), else
    None; looked up once, in the symbols already loaded (no ``ldconfig`` run per fit)."""
    try:
        libc = ctypes.CDLL(None)
    except OSError:
        return None
    return libc if hasattr(libc, "mallopt") and hasattr(libc, "malloc_trim") else None


@contextlib.contextmanager
def reused_memory():
    """Run a block with glibc keeping freed memory for reuse (mallopt: no mmap below, and no trim
    of the heap's top under, :data:`REUSE_BYTES`), then return to glibc's defaults and hand the
    kept memory back (``malloc_trim``). By default glibc maps every block above its threshold
    afresh and unmaps it when freed, and trims the heaps of the worker threads, so each of a
    NAPSU-MQ fit's many few-MB tensors (an exact evaluation's clique matrices) first pays a page
    fault per 4 kB: the bundled Adult at 15 columns, 512 exact evaluations on two threads, 6,227–6,318
    page faults and 13.1 ms a point by default in one process (278–521 and 5.8–6.1 ms in another:
    it depends on what was allocated before), 23–33 and 5.7–6.0 ms inside this block. Values do not
    change. Only the thresholds that glibc accepted are set back.
    Afterwards both thresholds are glibc's documented defaults (128 kB), fixed: the dynamic mmap
    threshold glibc starts with stays off for the rest of the process (mallopt cannot restore it).
    A no-op where the C library is not glibc.

    >>> with reused_memory():
    ...     pass
    """
    libc = _glibc()
    if libc is None:
        yield
        return
    changed = [param for param in (_M_MMAP_THRESHOLD, _M_TRIM_THRESHOLD) if libc.mallopt(param, REUSE_BYTES)]
    try:
        yield
    finally:
        for param in changed:
            libc.mallopt(param, _GLIBC_DEFAULT)
        if changed:
            libc.malloc_trim(0)
