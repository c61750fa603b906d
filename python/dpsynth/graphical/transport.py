"""Coordinate-wise sinh–arcsinh maps that bring a posterior's skewed, heavy-tailed coordinates
closer to a Gaussian before HMC runs on them (transport-map preconditioning: Parno & Marzouk
2018; Hoffman et al. 2019 with a learned map; here the simplest map, one per coordinate).

Why: NAPSU-MQ's parameters of near-empty cells have a sharp bulk where the noisy count bounds the
cell from above and a long, flat left shelf where the count could be zero under the noise (only
the prior ends it). A dense metric rescales such a coordinate by its overall spread, so the step
size is set by the bulk while the shelf needs long trajectories: on Adult-10 under MAR (seed 12)
the coordinates with the lowest ESS were exactly those with skewness −2 to −3 and excess kurtosis
10–24 (Spearman correlation of ESS with |skew| −0.76 over 240 coordinates).

The map of one coordinate is the sinh–arcsinh transformation of Jones & Pewsey (2009):
x = loc + scale · sinh((asinh(z) + skew) / tail), which turns a standard normal z into a
distribution with skewness set by ``skew`` and tail weight by ``tail`` (tail < 1: heavier than
Gaussian). :func:`fit_marginal_map` fits the four numbers of each coordinate whose draws look
skewed or heavy-tailed by maximum likelihood (shrunk towards the identity shape); HMC then runs on
z with the density p(x(z)) |dx/dz| (:func:`dpsynth.graphical.posterior.hmc`, ``fit_transform=``).
The map is fitted in warm-up only (and between runs), so each run is a valid HMC kernel for the
target.

Example
-------
>>> import torch
>>> _ = torch.manual_seed(0)
>>> x = torch.distributions.Gumbel(0.0, 1.0).sample((4000, 2)).double()
>>> m = fit_marginal_map(-x)  # left-skewed coordinates
>>> m.active.tolist(), bool((m.skew < 0).all())  # both coordinates mapped, both left-skewed
([0, 1], True)
>>> z = m.inverse(-x)
>>> float(abs(((z - z.mean(0)) ** 3).mean(0) / z.var(0) ** 1.5).max()) < 0.3  # from 1.1
True
"""
from __future__ import annotations

import math
from concurrent.futures import ThreadPoolExecutor

import torch

from .chunks import cores

DTYPE = torch.float64
#: bounds of the tail parameter: below 0.5 a step of a few units in z would map to a
#: value of θ far outside anything the posterior supports (sinh grows as e^(|z|/tail))
TAIL_RANGE = (0.5, 2.0)
#: the shape parameters (skew, log tail) get a N(0, SHAPE_SD²)-like penalty per draw's worth of
#: weight SHAPE_WEIGHT / n: a coordinate that is already Gaussian keeps the identity shape
SHAPE_SD, SHAPE_WEIGHT = 1.0, 50.0
#: coordinates whose fitted |skew| and |log tail| both stay below this keep x = z (the dense
#: metric rescales them anyway): the map's cost is then that of the skewed coordinates only
SHAPE_MIN = 0.1
#: only coordinates whose draws' sample skewness or excess kurtosis exceeds these are fitted (on
#: Adult-10 under MAR a fifth of the coordinates had skewness below −1)
SCREEN_SKEW, SCREEN_KURTOSIS = 0.25, 1.0


class MarginalMap:
    """x = loc + scale · sinh((asinh(z) + skew) / tail), coordinate by coordinate (each a (dim,)
    tensor), on the coordinates whose shape differs from a Gaussian's by at least
    :data:`SHAPE_MIN` (``active``); x = z exactly on the others (:meth:`identity`: on all)."""

    def __init__(self, loc, scale, skew, tail):
        loc, scale, skew, tail = (torch.as_tensor(v, dtype=DTYPE) for v in (loc, scale, skew, tail))
        self.active = torch.nonzero((skew.abs() >= SHAPE_MIN) | (torch.log(tail).abs() >= SHAPE_MIN)).flatten()
        self.loc, self.scale, self.skew, self.tail = (v[self.active] for v in (loc, scale, skew, tail))
        self.is_identity = self.active.numel() == 0
        self._terms = _MapTerms(self.active, self.loc, self.scale, self.skew, self.tail, dim=loc.numel())

    @classmethod
    def identity(cls, dim: int) -> "MarginalMap":
        zero, one = torch.zeros(dim, dtype=DTYPE), torch.ones(dim, dtype=DTYPE)
        return cls(zero, one, zero, one)

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        return self.forward_and_log_jacobian(z.detach())[0]

    def inverse(self, x: torch.Tensor) -> torch.Tensor:
        z = x.detach().clone()
        if not self.is_identity:
            xa = x[..., self.active]
            z[..., self.active] = torch.sinh(self.tail * torch.asinh((xa - self.loc) / self.scale) - self.skew)
        return z

    def log_jacobian(self, z: torch.Tensor) -> torch.Tensor:
        """log |dx/dz| summed over the coordinates (…,)."""
        return self.forward_and_log_jacobian(z)[1]

    def forward_and_log_jacobian(self, z: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(x, log |dx/dz|) in one pass with a hand-written backward (:class:`_SinhArcsinh`): three
        transcendental functions per coordinate instead of the dozen autograd would run (16
        chains × 421 coordinates: 1.45 ms per gradient through autograd, profiled)."""
        if self.is_identity:
            return z.clone(), torch.zeros(z.shape[:-1], dtype=z.dtype)
        return _SinhArcsinh.apply(z, self._terms)

    def value_and_grad(self, value_and_grad, z: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(log p(x(z)) + log |dx/dz|, its gradient in z) from ``value_and_grad(x)`` = (log p(x), its
        gradient in x), both (…,) and (…, dim), by the chain rule written out (no autograd)."""
        if self.is_identity:
            return value_and_grad(z.detach())
        x, log_jac, saved = _sinh_arcsinh(z.detach(), self._terms)
        lp, grad_x = value_and_grad(x)
        return lp + log_jac, _sinh_arcsinh_pull_back(saved, grad_x, None)


class _MapTerms:
    """The numbers :func:`_sinh_arcsinh` needs per active coordinate, computed once per map: 1/tail,
    skew/tail, scale/2, scale/(2·tail), Σ log(scale/tail) − k·log 2 (the log-Jacobian's constant),
    and whether every coordinate is active (then no gather and scatter)."""

    def __init__(self, active, loc, scale, skew, tail, dim: int):
        self.active, self.loc = active, loc
        self.inv_tail, self.skew_over_tail = 1.0 / tail, skew / tail
        self.half_scale, self.dx_scale = 0.5 * scale, 0.5 * scale / tail
        self.log_const = float(torch.log(scale / tail).sum()) - active.numel() * math.log(2.0)
        self.whole = active.numel() == dim and bool(torch.equal(active, torch.arange(dim)))


def _sinh_arcsinh(z_all, terms: _MapTerms):
    """(x, Σ log dx/dz, what :func:`_sinh_arcsinh_pull_back` needs) of :class:`_SinhArcsinh`, with
    a = (asinh z + skew)/tail, e = e^(−|a|): sinh a = sign(a)(1/e − e)/2, log cosh a = |a| +
    log1p(e²) − log 2, log dx/dz = log(scale/tail) + log cosh a − ½ log(1 + z²) (asinh z =
    sign(z) log(|z| + √(1 + z²)), odd and stable). A score of operations fewer than written term by
    term, each a pass over the chains' coordinates in the sampler's every gradient."""
    z = z_all if terms.whole else z_all[..., terms.active]
    one_zz = (z * z).add_(1.0)                                           # 1 + z²
    root = torch.sqrt(one_zz)
    a = torch.addcmul(terms.skew_over_tail, torch.copysign(torch.log(z.abs() + root), z), terms.inv_tail)
    abs_a = a.abs()
    e = torch.exp(-abs_a)                                                # e^(−|a|) ≤ 1
    big = torch.reciprocal(e)
    ee = e * e
    x_active = torch.addcmul(terms.loc, terms.half_scale, torch.copysign(big - e, a))
    log_jac = torch.sub(abs_a + torch.log1p(ee), torch.log(one_zz), alpha=0.5).sum(-1) + terms.log_const
    if terms.whole:
        x = x_active
    else:
        x = z_all.clone()
        x[..., terms.active] = x_active
    return x, log_jac, (terms, z, root, a, e, big, ee)


def _sinh_arcsinh_pull_back(saved, grad_x, grad_log_jac):
    """∂L/∂z from ∂L/∂x and ∂L/∂(Σ log dx/dz) (``grad_log_jac`` (…,); None: ones): dx/dz =
    scale·cosh a/(tail·√(1 + z²)), d log(dx/dz)/dz = (tanh a / tail − z/√(1 + z²)) / √(1 + z²)."""
    terms, z, root, a, e, big, ee = saved
    g_active = grad_x if terms.whole else grad_x[..., terms.active]
    dx = terms.dx_scale * (big + e) / root
    tanh = torch.copysign((1.0 - ee) / (1.0 + ee), a)
    dlog = (tanh * terms.inv_tail - z / root) / root
    g_active = g_active * dx + (dlog if grad_log_jac is None else grad_log_jac.unsqueeze(-1) * dlog)
    if terms.whole:
        return g_active
    grad = grad_x.clone()
    grad[..., terms.active] = g_active
    return grad


class _SinhArcsinh(torch.autograd.Function):
    """x = loc + scale·sinh(a), a = (asinh z + skew)/tail, and Σ log dx/dz with
    dx/dz = scale·cosh(a) / (tail·√(1 + z²)); gradients with respect to z only (the map's
    numbers are fixed while the chains move)."""

    @staticmethod
    def forward(ctx, z_all, terms):
        x, log_jac, saved = _sinh_arcsinh(z_all, terms)
        ctx.saved = saved
        return x, log_jac

    @staticmethod
    def backward(ctx, grad_x, grad_log_jac):
        return _sinh_arcsinh_pull_back(ctx.saved, grad_x, grad_log_jac), None


class _Asinh(torch.autograd.Function):
    """asinh y = sign(y) log1p(|y| + y² / (1 + √(1 + y²))) (stable near 0; log 2|y| beyond 1e8) with
    the derivative 1 / √(1 + y²) from the same root: torch's own asinh runs element by element
    (the map's fit, 1,000 draws × 650 coordinates, AMD EPYC, one thread: 18.6 ms a call, a third of
    each loss evaluation, its backward as long again)."""

    @staticmethod
    def forward(ctx, y):
        root = torch.sqrt(1.0 + y * y)
        ctx.save_for_backward(root)
        a = y.abs()
        value = torch.log1p(a + a * a / (1.0 + root))
        big = a > 1e8  # there asinh |y| = log 2|y| to double precision (and a² may overflow)
        if bool(big.any()):  # rare: no second logarithm over every value otherwise
            value = torch.where(big, torch.log(a) + math.log(2.0), value)
        return torch.sign(y) * value

    @staticmethod
    def backward(ctx, grad):
        (root,) = ctx.saved_tensors
        return grad / root


def _shape(raw_skew, raw_tail):
    lo, hi = math.log(TAIL_RANGE[0]), math.log(TAIL_RANGE[1])
    log_tail = lo + (hi - lo) * torch.sigmoid(raw_tail)
    return raw_skew, torch.exp(log_tail), log_tail


def fit_marginal_map(draws: torch.Tensor, max_iter: int = 30, max_draws: int = 1000) -> MarginalMap:
    """The sinh–arcsinh map of the coordinates of ``draws`` (n, dim) that look non-Gaussian
    (sample |skewness| > :data:`SCREEN_SKEW` or |excess kurtosis| > :data:`SCREEN_KURTOSIS`, over
    all draws), by penalised maximum likelihood (L-BFGS over those coordinates at once; they are
    independent problems) on at most ``max_draws`` draws, thinned evenly. Starts at the median and
    the robust spread (IQR / 1.349), the identity shape. The other coordinates keep x = z. Each
    evaluation of the loss runs over blocks of coordinates on Python threads (:func:`_fit_shash`),
    each block on the caller's torch threads (one inside a NAPSU-MQ fit). torch's own intra-op
    threads ran the whole fit from commit 1cfb404 to 2026-12-01: faster alone, but each of its many
    small parallel regions waits for the slower thread, so with the other core busy it was several
    times slower. On the 2-core Intel machine of 2026-12-01, 1,000 draws × 650 skewed coordinates: alone 1.15–1.28 s on two threads, 2.08–2.19
    on one; beside one busy process 5.8–9.4 s on two, 2.3–2.5 on one. The 1,392 draws × 656
    screened coordinates of a 15-column Adult fit: alone 1.57 s on two, 1.36–1.50 on one; beside a
    second fit 10.96 s on two, 1.40 on one. A 15-column fit beside another (seed 6 of the bundled
    Adult, py-spy) spent 137.5 of 546 s in these fits, 16 of them."""
    x_all = torch.as_tensor(draws, dtype=DTYPE).detach()
    dim = x_all.shape[1]
    centred = x_all - x_all.mean(0)
    var = (centred ** 2).mean(0).clamp(min=1e-300)
    skew_hat, kurt_hat = (centred ** 3).mean(0) / var ** 1.5, (centred ** 4).mean(0) / var ** 2 - 3.0
    screened = torch.nonzero((skew_hat.abs() > SCREEN_SKEW) | (kurt_hat.abs() > SCREEN_KURTOSIS)).flatten()
    loc, scale = torch.zeros(dim, dtype=DTYPE), torch.ones(dim, dtype=DTYPE)
    skew, tail = torch.zeros(dim, dtype=DTYPE), torch.ones(dim, dtype=DTYPE)
    if screened.numel():
        fitted = _fit_shash(x_all[::math.ceil(x_all.shape[0] / max_draws)][:, screened], max_iter)
        for full, part in zip((loc, scale, skew, tail), fitted):
            full[screened] = part
    return MarginalMap(loc, scale, skew, tail)


#: :func:`_fit_shash` splits the coordinates into blocks at multiples of this many columns: torch's
#: column means of an (n, k) array (its reduction over rows, vectorised across columns) then equal
#: those of the whole array bit for bit (tested; an arbitrary split changes the last bit of some)
BLOCK_COLUMNS = 64


def _shash_terms(params: torch.Tensor, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(−log f(x) averaged over the rows of x, the shape penalty's squares), one per column of x,
    for the map's four numbers per column (``params`` (4, k)): the normal's −log φ(z) less log |dz/dx|."""
    loc, log_scale, raw_skew, raw_tail = params
    skew, tail, log_tail = _shape(raw_skew, raw_tail)
    y = (x - loc) / torch.exp(log_scale)
    s = tail * _Asinh.apply(y) - skew
    z = torch.sinh(s)
    log_cosh = s.abs() + torch.log1p(torch.exp(-2 * s.abs())) - math.log(2.0)
    nll = 0.5 * z * z - log_cosh - log_tail + 0.5 * torch.log1p(y * y) + log_scale
    return nll.mean(0), skew ** 2 + log_tail ** 2


def _fit_shash(x: torch.Tensor, max_iter: int) -> tuple:
    """(loc, scale, skew, tail) of each column of x by penalised maximum likelihood. The loss is a
    sum of the columns' own terms, so each evaluation's value and gradient are computed over blocks
    of columns (:data:`BLOCK_COLUMNS`) on :func:`dpsynth.graphical.chunks.cores` threads, each block's
    forward and backward on one thread (torch's intra-op threads would wait at each of the loss's
    many small parallel regions: :func:`fit_marginal_map`), with the values of one block. Draws of
    the bundled Adult at 15 columns (786–806 mapped coordinates of 1,027), AMD EPYC, alone: 1.32–2.03 s
    as one block, 0.89–1.41 s as two, the same maps."""
    n, dim = x.shape
    q = torch.quantile(x, torch.tensor([0.25, 0.5, 0.75], dtype=DTYPE), dim=0)
    spread = torch.clamp((q[2] - q[0]) / 1.349, min=1e-6)
    spread = torch.where(spread > 1e-6, spread, x.std(0).clamp(min=1e-6))
    mid = (math.log(1.0) - math.log(TAIL_RANGE[0])) / (math.log(TAIL_RANGE[1]) - math.log(TAIL_RANGE[0]))
    params = torch.stack([q[1], torch.log(spread), torch.zeros(dim, dtype=DTYPE),
                          torch.full((dim,), math.log(mid / (1 - mid)), dtype=DTYPE)]).requires_grad_(True)
    penalty = SHAPE_WEIGHT / n / (2 * SHAPE_SD ** 2)
    blocks = min(cores(), dim // BLOCK_COLUMNS)
    edges = [0] + [BLOCK_COLUMNS * round(dim * k / blocks / BLOCK_COLUMNS) for k in range(1, blocks)] + [dim]
    columns = [(slice(lo, hi), x[:, lo:hi].contiguous()) for lo, hi in zip(edges[:-1], edges[1:])] \
        if blocks > 1 else [(slice(None), x)]

    def block(part):  # one block's terms and their gradient in its own numbers
        cols, xb = part
        with torch.enable_grad():
            own = params.detach()[:, cols].clone().requires_grad_(True)
            mean_nll, shape_sq = _shash_terms(own, xb)
            (mean_nll.sum() + penalty * shape_sq.sum()).backward()
        return mean_nll.detach(), shape_sq.detach(), own.grad

    opt = torch.optim.LBFGS([params], max_iter=max_iter, line_search_fn="strong_wolfe", tolerance_grad=1e-9)

    # one pool for the whole fit: a thread's first backward costs as much as a block's (measured: no
    # gain from two threads started for each of the fit's ~35 evaluations)
    pool = ThreadPoolExecutor(len(columns)) if len(columns) > 1 else None

    def closure():
        opt.zero_grad()
        parts = list(pool.map(block, columns)) if pool is not None else [block(columns[0])]
        params.grad = torch.cat([g for _, _, g in parts], dim=1)
        return torch.cat([m for m, _, _ in parts]).sum() + penalty * torch.cat([s for _, s, _ in parts]).sum()

    try:
        opt.step(closure)
    finally:
        if pool is not None:
            pool.shutdown()
    with torch.no_grad():
        loc, log_scale, raw_skew, raw_tail = params
        skew, tail, _ = _shape(raw_skew, raw_tail)
        ok = torch.isfinite(loc) & torch.isfinite(log_scale) & torch.isfinite(skew) & torch.isfinite(tail)
        return (torch.where(ok, loc, q[1]), torch.where(ok, torch.exp(log_scale), spread),
                torch.where(ok, skew, 0.0), torch.where(ok, tail, 1.0))
