"""The unclamped sum-product of :class:`dpsynth.graphical.maxent.MaxEntModel`, one junction-tree
level at a time, with its reverse-mode derivative written out by hand.

Forward (:func:`level_forward`; ``levels`` from ``MaxEntModel._level_plan``, ``flat`` the
log-potentials of every tree cell in level order, (cells, B)). Up: b_d = ψ_d + add_up_d(u_{d+1}),
u_d = log to_sep_d(e^{b_d − top_d}) + top_d with top_d each clique's (constant) maximum; log Z =
log Σ e^{b_0}. Down, on probabilities: β_0 = e^{b_0 − log Z}, β_d = exp(b_d + to_sep_dᵀ(log q_d − u_d))
with q_d = add_up_{d−1}ᵀ β_{d−1} (sums onto separator cells floored at :data:`TINY`).

Backward (:class:`LevelPass`), given ḡ = ∂L/∂β (every level) and ∂L/∂log Z, the same maps in the
other direction. Down pass, d = last … 1: t̄_d = β̄_d ∘ β_d; b̄_d += t̄_d; r = to_sep_d(t̄_d);
ū_d −= r; β̄_{d−1} += add_up_{d−1}(r / q_d) (zero where the floor holds). Level 0:
t̄_0 = β̄_0 ∘ β_0, b̄_0 += t̄_0 + (∂L/∂log Z − Σ t̄_0) β_0 (∂ log Z/∂b_0 = β_0). Up pass, d = 0 … last:
b̄_d += e_d ∘ to_sep_dᵀ(ū_d / s_d) (d > 0: ∂u_d/∂b_d, the shift cancels), then
ū_{d+1} += add_up_dᵀ(b̄_d); ψ̄_d = b̄_d.

Why by hand: a NAPSU-MQ sampler gradient is two such passes and their backward at 16 chains,
a few hundred operations whose cost is torch's per-operation overhead, not arithmetic; autograd
recorded and replayed every forward operation (Adult-10 with 20 % MCAR, 2,100 tree cells, three
levels: the backward of one pass took about twice its forward). When a graph of the backward is
asked for (``create_graph``, e.g. the Hessian of a Laplace approximation) the backward instead
differentiates the forward again under autograd, so derivatives of any order stay exact.
Batches that need no graph (the sampler's 1–32 rows) run both directions as compiled loops
(:mod:`dpsynth.graphical.level_kernels`), the same sums fused; :func:`torch_forward` and
:func:`torch_backward` are the torch operations, recorded by autograd where asked.

Example
-------
>>> import torch
>>> from dpsynth.graphical import Domain, MaxEntModel
>>> model = MaxEntModel(Domain(["a", "b", "c"], [2, 3, 2]), [("a", "b"), ("b", "c")])
>>> theta = torch.randn(model.D, dtype=torch.float64, requires_grad=True)
>>> flat = model.lifted_potentials(theta)
>>> levels = model._level_plan()["levels"]
>>> g1 = torch.autograd.grad(level_pass(levels, flat)[0].sum(), theta)[0]
>>> g2 = torch.autograd.grad(level_forward(levels, flat)[0].sum(), theta)[0]  # recorded op by op
>>> bool(torch.allclose(g1, g2))
True
"""
from __future__ import annotations

import math

import torch

from .factor import DTYPE

#: floor of the level pass's sums onto separator cells (smallest normal float64): a separator cell
#: whose configurations all underflow keeps a finite log (≥ −708), never −inf − (−inf) = NaN
TINY = torch.finfo(DTYPE).tiny


#: batches of at most this many rows that need no autograd graph run the compiled loops of
#: :mod:`dpsynth.graphical.level_kernels` (the sampler's 1–32 rows); larger ones, whose torch
#: operations spread over the machine's threads, run :func:`torch_forward`
KERNEL_MAX_ROWS = 64


def level_forward(levels: list[dict], flat: torch.Tensor):
    """(log Z (B,), beliefs of every cell (cells in level order, B), what the backward needs) from
    the log-potentials ``flat`` (cells, B): :func:`torch_forward`, recorded by autograd, where
    ``flat`` asks for gradients; otherwise, for float64 batches of up to :data:`KERNEL_MAX_ROWS`
    rows (as :meth:`dpsynth.graphical.sparse_map.SparseMap.mm`), the same pass compiled
    (:func:`dpsynth.graphical.level_kernels.forward`, whose loops are float64)."""
    if (torch.is_grad_enabled() and flat.requires_grad) or flat.shape[1] > KERNEL_MAX_ROWS or flat.dtype != DTYPE:
        return torch_forward(levels, flat)
    from . import level_kernels

    return level_kernels.forward(levels, flat)


def torch_forward(levels: list[dict], flat: torch.Tensor):
    """:func:`level_forward` as torch operations (recorded by autograd where ``flat`` asks for
    gradients; the sparse maps add no node otherwise)."""
    pieces = torch.split(flat, [lv["size"] for lv in levels], dim=0)
    up, below, tilted, sums = [None] * len(levels), [None] * len(levels), [None] * len(levels), [None] * len(levels)
    for d in reversed(range(len(levels))):
        b = pieces[d]
        if d + 1 < len(levels):
            b = b + levels[d]["add_up"](up[d + 1])
        below[d] = b
        if d > 0:  # u = log Σ_{cells → separator} e^b, shifted by each clique's maximum
            lv = levels[d]
            with torch.no_grad():
                top = b.new_full((lv["n"], b.shape[1]), -math.inf).scatter_reduce(
                    0, lv["clique"][:, None].expand_as(b), b, "amax", include_self=True)
            tilted[d] = torch.exp(b - top.index_select(0, lv["clique"]))
            sums[d] = lv["to_sep"](tilted[d])
            up[d] = torch.log(sums[d].clamp_min(TINY)) + top.index_select(0, lv["sep_clique"])
    log_z = torch.logsumexp(below[0], dim=0)
    belief, onto = [torch.exp(below[0] - log_z)], [None]
    for d in range(1, len(levels)):
        parent, lv = levels[d - 1], levels[d]
        # the parent's (normalised) belief summed onto each child's separator: probabilities,
        # so no shift is needed
        onto.append(parent["add_up"].T(belief[d - 1]))
        belief.append(torch.exp(below[d] + lv["to_sep"].T(torch.log(onto[d].clamp_min(TINY)) - up[d])))
    return log_z, torch.cat(belief, dim=0), (belief, tilted, sums, onto)


def _floored_ratio(grad: torch.Tensor, value: torch.Tensor) -> torch.Tensor:
    """grad / max(value, TINY), zero where the floor holds (the derivative of log max(v, TINY))."""
    return torch.where(value >= TINY, grad / value.clamp_min(TINY), torch.zeros_like(grad))


def level_backward(levels: list[dict], saved, grad_log_z: torch.Tensor | None,
                   grad_belief: torch.Tensor) -> torch.Tensor:
    """∂L/∂flat from ∂L/∂log Z (B,; None: zero) and ∂L/∂beliefs (cells, B) (module docstring);
    ``saved``: the third value :func:`level_forward` returned (compiled loops where it ran them)."""
    from . import level_kernels

    if isinstance(saved, level_kernels.Saved):
        return level_kernels.backward(levels, saved, grad_log_z, grad_belief)
    return torch_backward(levels, saved, grad_log_z, grad_belief)


def torch_backward(levels: list[dict], saved, grad_log_z: torch.Tensor | None,
                   grad_belief: torch.Tensor) -> torch.Tensor:
    """:func:`level_backward` as torch operations, from what :func:`torch_forward` saved."""
    belief, tilted, sums, onto = saved
    g_bel = list(torch.split(grad_belief, [lv["size"] for lv in levels], dim=0))
    g_below, g_up = [None] * len(levels), [None] * len(levels)
    for d in range(len(levels) - 1, 0, -1):
        g_t = g_bel[d] * belief[d]
        g_below[d] = g_t
        r = levels[d]["to_sep"].mm(g_t)
        g_up[d] = -r
        g_bel[d - 1] = g_bel[d - 1] + levels[d - 1]["add_up"].mm(_floored_ratio(r, onto[d]))
    g_t = g_bel[0] * belief[0]
    g_below[0] = g_t + ((0.0 if grad_log_z is None else grad_log_z) - g_t.sum(0)) * belief[0]
    for d in range(len(levels)):
        if d > 0:
            g_below[d] = g_below[d] + tilted[d] * levels[d]["to_sep"].T.mm(_floored_ratio(g_up[d], sums[d]))
        if d + 1 < len(levels):
            g_up[d + 1] = g_up[d + 1] + levels[d]["add_up"].T.mm(g_below[d])
    return torch.cat(g_below, dim=0)


class LevelPass(torch.autograd.Function):
    """:func:`level_forward` as one autograd node whose backward is :func:`level_backward`."""

    @staticmethod
    def forward(ctx, flat, levels):
        log_z, belief, saved = level_forward(levels, flat)
        ctx.levels, ctx.saved = levels, saved
        ctx.save_for_backward(flat)
        return log_z, belief

    @staticmethod
    def backward(ctx, grad_log_z, grad_belief):
        if torch.is_grad_enabled():  # a graph of the backward: differentiate the forward under autograd
            (flat,) = ctx.saved_tensors
            log_z, belief, _ = level_forward(ctx.levels, flat)
            (g,) = torch.autograd.grad((log_z, belief), flat, (grad_log_z, grad_belief), create_graph=True)
            return g, None
        return level_backward(ctx.levels, ctx.saved, grad_log_z, grad_belief.contiguous()), None


def calibrated(levels: list[dict], flat: torch.Tensor) -> tuple:
    """(log Z, beliefs, what :func:`level_backward` needs) from :func:`level_forward`; where ``flat``
    asks for gradients, (log Z, beliefs, None) from one :class:`LevelPass` node instead."""
    if torch.is_grad_enabled() and flat.requires_grad:
        return (*LevelPass.apply(flat, levels), None)
    return level_forward(levels, flat)


def level_pass(levels: list[dict], flat: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(log Z (B,), beliefs (cells in level order, B)) of the log-potentials ``flat`` (cells, B),
    differentiable in ``flat`` to any order (module docstring)."""
    return calibrated(levels, flat)[:2]
