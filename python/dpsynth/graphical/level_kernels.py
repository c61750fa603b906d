"""The level pass of :mod:`dpsynth.graphical.level_pass` and its hand-written backward as two
compiled loops (numba), for batches that need no autograd graph: the NAPSU-MQ sampler's
value and gradient (:class:`dpsynth.graphical.expanded_v.ExpandedV`,
:class:`dpsynth.graphical.frozen_v.FrozenV`).

The same sums as the torch pass (:func:`dpsynth.graphical.level_pass.torch_forward`, whose
docstring states them), with one rewriting: below the root a belief is
β_c = exp(b_c + log max(q_s, TINY) − u_s) with u_s = log max(Σ_{c'→s} e^{b_c' − top}, TINY) + top,
that is β_c = t_c · max(q_s, TINY) / max(σ_s, TINY) with t_c = e^{b_c − top} the tilted value the up
pass already computed and σ_s its sum onto separator cell s (where t_c is below float64's normal
range, the exponential of the sum as the torch pass takes it, so nothing underflows that did not).
One exponential per tree cell instead of two (one more per root cell for log Z), and each division
once per separator cell. The backward likewise divides once per separator cell and multiplies per
tree cell.

Why compiled loops and not torch operations: at the sampler's sizes the pass is a few dozen
passes over small arrays (the bundled Adult at 15 columns: 3,186 tree cells in three levels, 8
or 16 rows), each allocating its result; fused into one loop nest per direction the forward and
backward took 0.31 + 0.18 ms at 8 rows and 0.48 + 0.26 ms at 16 rows against torch's 0.68 + 0.35 and
0.78 + 0.46 ms (one thread, glibc keeping freed memory: :func:`dpsynth.graphical.chunks.reused_memory`;
``bench/napsu_step.py``). Neither torch.compile (the pass's CSR maps break its graph; written with
index operations it compiles in 4–9 s per process, every process) nor numpy's vectorised
functions fuse these loops; numba compiles them once per machine (``cache=True``, about 2 s).
The loops release the GIL (``nogil``): the exact evaluations' chunks of up to 32 points run on
threads (:func:`dpsynth.graphical.chunks.map_chunks`) and take the same passes.

Layout (:func:`plan_of`): the levels' cells, cliques and separator cells numbered globally in
level order; ``pairs`` (parent cell, child's separator cell) of each level, offsets per level.

Example
-------
>>> import torch
>>> from dpsynth.graphical import Domain, MaxEntModel
>>> from dpsynth.graphical.level_pass import torch_forward
>>> model = MaxEntModel(Domain(["a", "b", "c"], [2, 3, 2]), [("a", "b"), ("b", "c")])
>>> levels = model._level_plan()["levels"]
>>> flat = model.lifted_potentials(torch.randn(4, model.D, dtype=torch.float64))
>>> log_z, belief, _ = forward(levels, flat)
>>> bool(torch.allclose(belief, torch_forward(levels, flat)[1]))
True
"""
from __future__ import annotations

import math

import numba
import numpy as np
import torch

from .factor import DTYPE

#: the floor of :data:`dpsynth.graphical.level_pass.TINY` (smallest normal float64)
TINY = float(np.finfo(np.float64).tiny)


class Saved(tuple):
    """What :func:`backward` needs from :func:`forward`: (beliefs, tilted values, sums onto separator
    cells, the parents' beliefs onto them), numpy arrays."""


def plan_of(levels: list[dict]) -> tuple:
    """The levels' index arrays in the kernels' global numbering (module docstring), built once
    and kept in ``levels[0]``."""
    if "kernel_plan" in levels[0]:
        return levels[0]["kernel_plan"]
    sizes = [lv["size"] for lv in levels]
    cell_off = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    sep_off = np.concatenate([[0], np.cumsum([lv.get("sep_size", 0) if d else 0
                                              for d, lv in enumerate(levels)])]).astype(np.int64)
    clique_off = np.concatenate([[0], np.cumsum([lv["n"] for lv in levels])]).astype(np.int64)
    clique = np.concatenate([lv["clique"].numpy() + clique_off[d] for d, lv in enumerate(levels)]).astype(np.int64)
    sep = np.full(cell_off[-1], -1, dtype=np.int64)
    sep_clique = np.zeros(sep_off[-1], dtype=np.int64)
    pair_cell, pair_sep, pair_off = [np.zeros(0, np.int64)], [np.zeros(0, np.int64)], [0]
    for d, lv in enumerate(levels):
        if d > 0:
            sep[cell_off[d]:cell_off[d + 1]] = lv["sep"].numpy() + sep_off[d]
            sep_clique[sep_off[d]:sep_off[d + 1]] = lv["sep_clique"].numpy() + clique_off[d]
        if "pairs" in lv:
            cell, s, _ = lv["pairs"]
            pair_cell.append(cell.numpy() + cell_off[d])
            pair_sep.append(s.numpy() + sep_off[d + 1])
        pair_off.append(pair_off[-1] + (len(lv["pairs"][0]) if "pairs" in lv else 0))
    plan = (cell_off, sep_off, clique_off, clique, sep, sep_clique,
            np.concatenate(pair_cell).astype(np.int64), np.concatenate(pair_sep).astype(np.int64),
            np.asarray(pair_off, dtype=np.int64))
    levels[0]["kernel_plan"] = plan
    return plan


def forward(levels: list[dict], flat: torch.Tensor):
    """(log Z (B,), beliefs of every cell (cells in level order, B), :class:`Saved`) from the
    log-potentials ``flat`` (cells, B); no autograd graph."""
    x = np.ascontiguousarray(flat.detach().numpy(), dtype=np.float64)
    log_z, belief, tilted, sums, onto = _forward(x, *plan_of(levels))
    return torch.from_numpy(log_z), torch.from_numpy(belief), Saved((belief, tilted, sums, onto))


def backward(levels: list[dict], saved: Saved, grad_log_z: torch.Tensor | None,
             grad_belief: torch.Tensor) -> torch.Tensor:
    """∂L/∂flat (cells, B) from ∂L/∂log Z (B,; None: zero) and ∂L/∂beliefs (cells, B), as
    :func:`dpsynth.graphical.level_pass.torch_backward`."""
    belief = saved[0]
    g = np.ascontiguousarray(grad_belief.detach().numpy(), dtype=np.float64)
    gz = np.zeros(belief.shape[1]) if grad_log_z is None else \
        np.ascontiguousarray(torch.as_tensor(grad_log_z, dtype=DTYPE).detach().expand(belief.shape[1]).numpy())
    return torch.from_numpy(_backward(g, gz, *saved, *plan_of(levels)))


@numba.njit(cache=True, nogil=True)
def _forward(flat, cell_off, sep_off, clique_off, clique, sep, sep_clique, pair_cell, pair_sep, pair_off):
    n_cells, rows = flat.shape
    depth = len(cell_off) - 1
    below = flat.copy()
    up = np.empty((sep_off[-1], rows))
    sums = np.zeros((sep_off[-1], rows))
    onto = np.zeros((sep_off[-1], rows))
    tilted = np.zeros((n_cells, rows))
    belief = np.empty((n_cells, rows))
    top = np.empty((clique_off[-1], rows))
    for d in range(depth - 1, -1, -1):
        for k in range(pair_off[d], pair_off[d + 1]):  # b_d = ψ_d + add_up(u_{d+1})
            c, s = pair_cell[k], pair_sep[k]
            for j in range(rows):
                below[c, j] += up[s, j]
        if d == 0:
            break
        top[clique_off[d]:clique_off[d + 1]] = -np.inf
        for c in range(cell_off[d], cell_off[d + 1]):
            q = clique[c]
            for j in range(rows):
                top[q, j] = max(top[q, j], below[c, j])
        for c in range(cell_off[d], cell_off[d + 1]):
            q, s = clique[c], sep[c]
            for j in range(rows):
                t = math.exp(below[c, j] - top[q, j])
                tilted[c, j] = t
                sums[s, j] += t
        for s in range(sep_off[d], sep_off[d + 1]):
            q = sep_clique[s]
            for j in range(rows):
                up[s, j] = math.log(max(sums[s, j], TINY)) + top[q, j]
    log_z = np.empty(rows)
    shift = np.full(rows, -np.inf)
    total = np.zeros(rows)
    for c in range(cell_off[0], cell_off[1]):
        for j in range(rows):
            shift[j] = max(shift[j], below[c, j])
    for c in range(cell_off[0], cell_off[1]):
        for j in range(rows):
            t = math.exp(below[c, j] - shift[j])
            belief[c, j] = t
            total[j] += t
    for j in range(rows):
        log_z[j] = math.log(total[j]) + shift[j]
        total[j] = 1.0 / total[j]
    for c in range(cell_off[0], cell_off[1]):
        for j in range(rows):
            belief[c, j] *= total[j]
    for d in range(1, depth):
        for k in range(pair_off[d - 1], pair_off[d]):  # q_d = add_up_{d−1}ᵀ β_{d−1}
            c, s = pair_cell[k], pair_sep[k]
            for j in range(rows):
                onto[s, j] += belief[c, j]
        ratio = np.empty((sep_off[d + 1] - sep_off[d], rows))
        for s in range(sep_off[d], sep_off[d + 1]):
            for j in range(rows):
                ratio[s - sep_off[d], j] = max(onto[s, j], TINY) / max(sums[s, j], TINY)
        for c in range(cell_off[d], cell_off[d + 1]):
            q, s = clique[c], sep[c] - sep_off[d]
            for j in range(rows):
                t = tilted[c, j]
                # t below the normal range (b − top < −708): the torch pass's exponential of the
                # sum, which does not underflow with t
                belief[c, j] = t * ratio[s, j] if t >= TINY else math.exp(below[c, j] - top[q, j] + math.log(ratio[s, j]))
    return log_z, belief, tilted, sums, onto


@numba.njit(cache=True, nogil=True)
def _backward(grad_belief, grad_log_z, belief, tilted, sums, onto,
              cell_off, sep_off, clique_off, clique, sep, sep_clique, pair_cell, pair_sep, pair_off):
    n_cells, rows = belief.shape
    depth = len(cell_off) - 1
    g_bel = grad_belief.copy()
    g_below = np.empty((n_cells, rows))
    g_up = np.zeros((sep_off[-1], rows))
    for d in range(depth - 1, 0, -1):  # down pass backward: t̄ = β̄∘β; ū −= to_sep(t̄)
        for c in range(cell_off[d], cell_off[d + 1]):
            s = sep[c]
            for j in range(rows):
                t = g_bel[c, j] * belief[c, j]
                g_below[c, j] = t
                g_up[s, j] -= t
        share = np.empty((sep_off[d + 1] - sep_off[d], rows))  # −ū / q, zero where the floor holds
        for s in range(sep_off[d], sep_off[d + 1]):
            for j in range(rows):
                v = onto[s, j]
                share[s - sep_off[d], j] = -g_up[s, j] / v if v >= TINY else 0.0
        for k in range(pair_off[d - 1], pair_off[d]):
            c, s = pair_cell[k], pair_sep[k] - sep_off[d]
            for j in range(rows):
                g_bel[c, j] += share[s, j]
    for j in range(rows):  # level 0, with ∂ log Z/∂b_0 = β_0
        acc = 0.0
        for c in range(cell_off[0], cell_off[1]):
            acc += g_bel[c, j] * belief[c, j]
        scale = grad_log_z[j] - acc
        for c in range(cell_off[0], cell_off[1]):
            g_below[c, j] = (g_bel[c, j] + scale) * belief[c, j]
    for d in range(depth):  # up pass backward
        if d > 0:
            share = np.empty((sep_off[d + 1] - sep_off[d], rows))  # ū / σ, zero where the floor holds
            for s in range(sep_off[d], sep_off[d + 1]):
                for j in range(rows):
                    v = sums[s, j]
                    share[s - sep_off[d], j] = g_up[s, j] / v if v >= TINY else 0.0
            for c in range(cell_off[d], cell_off[d + 1]):
                s = sep[c] - sep_off[d]
                for j in range(rows):
                    g_below[c, j] += tilted[c, j] * share[s, j]
        for k in range(pair_off[d], pair_off[d + 1]):  # ū_{d+1} += add_upᵀ(b̄_d)
            c, s = pair_cell[k], pair_sep[k]
            for j in range(rows):
                g_up[s, j] += g_below[c, j]
    return g_below


def csr_sum(indptr: np.ndarray, indices: np.ndarray, values: np.ndarray, x: torch.Tensor) -> torch.Tensor:
    """A @ x for a matrix A in compressed sparse row form (``indptr``, ``indices``: int64;
    ``values``: float64, the count of each (row, column) pair) and x (n_in, B). The
    sparse maps' product (:meth:`dpsynth.graphical.sparse_map.SparseMap.mm`) for batches of at most
    :data:`dpsynth.graphical.level_pass.KERNEL_MAX_ROWS` rows: the bundled Adult at 15 columns
    (8,710 ones, 8 rows), 94 µs a product as a torch CSR product inside the sampler's step."""
    return torch.from_numpy(_csr_sum(indptr, indices, values, np.ascontiguousarray(x.detach().numpy(), dtype=np.float64)))


@numba.njit(cache=True, nogil=True)
def _csr_sum(indptr, indices, values, x):
    rows = x.shape[1]
    out = np.zeros((len(indptr) - 1, rows))
    for i in range(len(indptr) - 1):
        for k in range(indptr[i], indptr[i + 1]):
            src, v = indices[k], values[k]
            for j in range(rows):
                out[i, j] += v * x[src, j]
    return out
