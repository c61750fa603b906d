"""A batched value and gradient computed half here, half in a forked helper process: the sampler's
chains on two cores without torch's intra-op threads.

:func:`dpsynth.graphical.posterior.hmc` advances all chains as one batch; each leapfrog step is one
batched value and gradient of the surrogate, whose cost is mostly fixed overhead (products with
dense D × D matrices and a few hundred small operations), so half the chains cost nearly as much as
all of them. Two processes of 8 chains each take 7.8–7.9 ms a step side by side against 9.8 ms for
one process of 16 (the bundled Adult at 15 columns, Intel Xeon; ``bench/napsu_threads.py``), while
two torch threads, 7.8 ms alone, take 27–28 ms whenever another job runs (idle OpenMP workers spin).
Processes only share the cores the scheduler gives them, so they slow down no more than the work
they do. On an AMD EPYC the split gains only with 8-row products multiplied as x @ M
(:data:`dpsynth.graphical.expanded_v.LINEAR_BELOW_ROWS`): 8.9–11.5 ms a step side by side, against
12.6–15.8 with MKL's other layout and 12.6–13.6 for one process of 16.

:class:`SplitDensity` forks the helper when it is made (the helper inherits the density as it is;
a new density needs a new :class:`SplitDensity`), sends it the second half of each batch over a
socket pair and computes the first half itself. The sampler hands it whole leapfrog trajectories
(:class:`dpsynth.graphical.leapfrog.LeapfrogPaths`: one message each way per draw, not per step), so
each process also makes its own chains' momentum updates, velocity products and coordinate maps.
The helper runs one torch thread and never returns to the caller's code: it exits when the socket
closes. Values are each row's own, but a
batch of 8 rows may round a float32 product differently from one of 16, so a run split this way
is the same sampler, not the same draws. Needs ``os.fork`` (Linux, macOS).

>>> import torch
>>> class Gauss:
...     def value_and_grad(self, x):
...         return -0.5 * (x ** 2).sum(-1), -x
>>> x = torch.arange(12.0, dtype=torch.float64).reshape(4, 3)
>>> with SplitDensity(Gauss()) as split:
...     f, g = split.value_and_grad(x)
>>> bool(torch.equal(f, -0.5 * (x ** 2).sum(-1))), bool(torch.equal(g, -x))
(True, True)
"""
from __future__ import annotations

import functools
import os
import select
import socket
import struct
import threading
import time
import traceback
import warnings
import weakref

import numpy as np
import torch

DTYPE = torch.float64
_HEADER = struct.Struct("<qq")  # (status or rows, columns)
_LIVE: "weakref.WeakSet[SplitDensity]" = weakref.WeakSet()  # helpers this process talks to
#: seconds the caller waits for the helper's half of one batch before giving up (a batch takes
#: milliseconds; a helper that does not answer has hung or died)
HELPER_TIMEOUT = 600.0
#: seconds each side polls its socket before a blocking read: a process that blocks sleeps, and on
#: these virtual machines waking it costs more than the message (a round trip of 16 × 2,055 values
#: between two otherwise idle processes: 0.33 ms blocking, 0.18 ms polling; 0.24 / 0.08 ms for one
#: value). A leapfrog step's two messages arrive well within it; between runs (checks, maps) the
#: helper polls this long once and then sleeps as before
SPIN_SECONDS = 0.002


def _send(sock: socket.socket, status: int, cols: int, payload: bytes = b"") -> None:
    sock.sendall(_HEADER.pack(status, cols) + struct.pack("<q", len(payload)) + payload)


def _recv_exact(sock: socket.socket, size: int) -> bytearray:
    """``size`` bytes from ``sock``, in a writable buffer (numpy and torch read it without a copy)."""
    buf = bytearray(size)
    view, got = memoryview(buf), 0
    while got < size:
        n = sock.recv_into(view[got:], size - got)
        if n == 0:
            raise EOFError("the helper process closed its socket")
        got += n
    return buf


def _wait_readable(sock: socket.socket, spin: float) -> None:
    """Poll ``sock`` without blocking for up to ``spin`` seconds, until it has data to read (then
    return at once) or the time is up (then the caller's blocking read waits as before)."""
    if spin <= 0:
        return
    deadline = time.perf_counter() + spin
    poller = select.poll()
    poller.register(sock, select.POLLIN)
    while not poller.poll(0):
        if time.perf_counter() > deadline:
            return


def _recv(sock: socket.socket, spin: float = 0.0) -> tuple[int, int, bytearray]:
    _wait_readable(sock, spin)
    status, cols = _HEADER.unpack(_recv_exact(sock, _HEADER.size))
    (size,) = struct.unpack("<q", _recv_exact(sock, 8))
    return status, cols, _recv_exact(sock, size)


def _serve(sock: socket.socket, density) -> None:
    """The helper's loop: rows in, (values, gradients) out, until the socket closes."""
    torch.set_num_threads(1)
    sock.settimeout(None)
    while True:
        try:
            rows, cols, data = _recv(sock, SPIN_SECONDS)
        except EOFError:
            return
        try:
            x = torch.from_numpy(np.frombuffer(data, dtype=np.float64).reshape(rows, cols))
            with torch.no_grad():
                f, g = density.value_and_grad(x)
            out = np.concatenate([f.to(DTYPE).numpy().ravel(), g.to(DTYPE).numpy().ravel()])
            _send(sock, 0, g.shape[-1], out.tobytes())  # the second value's width need not be x's
        except Exception:  # the caller raises it
            _send(sock, 1, 0, traceback.format_exc().encode())


class SplitDensity:
    """``value_and_grad(x)`` of ``density`` for a batch x (B, dim): rows ``B // 2`` on are sent to a
    forked helper process, the rest are computed here, both at once (module docstring). Any
    row-wise pair (values (B,), rows (B, k)) splits the same way: the second value's width k may
    differ from x's (the sampler's leapfrog trajectories hand back positions, momenta and gradients,
    :class:`dpsynth.graphical.leapfrog.LeapfrogPaths`). Close it (or use it as a context
    manager) to end the helper."""

    def __init__(self, density):
        if not hasattr(os, "fork"):
            raise RuntimeError("splitting the chains over two processes needs os.fork (Linux or macOS)")
        self.density = density
        self._sock, child = socket.socketpair()
        self._sock.settimeout(HELPER_TIMEOUT)
        with warnings.catch_warnings():  # Python ≥ 3.12 warns of fork in a process with threads
            warnings.simplefilter("ignore", DeprecationWarning)
            self._pid = os.fork()
        if self._pid == 0:  # the helper: serve, then leave without running the caller's code
            code = 0
            try:
                for other in list(_LIVE):  # other helpers' sockets: theirs to close, not ours to hold
                    other._sock.close()
                self._sock.close()
                _serve(child, density)
            except BaseException:
                code = 1
            finally:
                os._exit(code)
        child.close()
        self._thread = threading.get_ident()  # who forked it: :func:`closes_own_helpers`
        _LIVE.add(self)

    def value_and_grad(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x = x.detach().to(DTYPE)
        rows, cols = x.shape
        half = rows // 2
        if half == 0:
            return self.density.value_and_grad(x)
        try:
            _send(self._sock, rows - half, cols, x[half:].contiguous().numpy().tobytes())
            f_here, g_here = self.density.value_and_grad(x[:half])
            status, out_cols, data = _recv(self._sock, SPIN_SECONDS)
        except (OSError, EOFError) as e:  # socket.timeout is an OSError
            raise RuntimeError(f"the helper process computing half of the chains' gradients failed ({e!r}); "
                               "run hmc(split_chains=False) to compute them in one process (NAPSU-MQ: set "
                               "dpsynth.generators.napsu_sampling.CHAIN_PROCESSES = 1)") from e
        if status != 0:
            raise RuntimeError("the helper process failed:\n" + data.decode())
        out = torch.from_numpy(np.frombuffer(data, dtype=np.float64))
        n = rows - half
        f_there, g_there = out[:n], out[n:].reshape(n, out_cols)
        return torch.cat([f_here.to(DTYPE), f_there]), torch.cat([g_here.to(DTYPE), g_there])

    def close(self) -> None:
        if self._pid:
            self._sock.close()
            os.waitpid(self._pid, 0)
            self._pid = 0

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass


def closes_own_helpers(fn):
    """``fn`` with every helper that it forked (in the calling thread) closed when it returns or
    raises. A sampler stopped by an error or by the user (KeyboardInterrupt) would otherwise leave
    its helper waiting on the socket for as long as the traceback keeps the sampler's frame alive
    (an interactive session keeps the last one), holding its share of the memory.

    >>> class Gauss:
    ...     def value_and_grad(self, x):
    ...         return -0.5 * (x ** 2).sum(-1), -x
    >>> made = []
    >>> @closes_own_helpers
    ... def run():
    ...     made.append(SplitDensity(Gauss()))
    ...     raise KeyboardInterrupt
    >>> try:
    ...     run()
    ... except KeyboardInterrupt:
    ...     made[0]._pid == 0
    True
    """
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        before = weakref.WeakSet(_LIVE)
        try:
            return fn(*args, **kwargs)
        finally:
            me = threading.get_ident()
            for helper in list(_LIVE):
                if helper not in before and getattr(helper, "_thread", None) == me:
                    helper.close()
    return wrapper


def split_density(density) -> SplitDensity | None:
    """A :class:`SplitDensity` of ``density``, or None where it has no ``value_and_grad`` or no helper
    can be forked (then with a warning): the caller computes the whole batch itself."""
    if not hasattr(density, "value_and_grad") or not hasattr(os, "fork"):
        return None
    try:
        return SplitDensity(density)
    except OSError as e:
        warnings.warn(f"could not fork a helper for half of the chains ({e}); running them in one process")
        return None
