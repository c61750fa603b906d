"""The expanded-V surrogate of NAPSU-MQ's reduced form
(:meth:`dpsynth.graphical.noise_aware.NoiseAwareLikelihood._expanded_v`, which states the
approximation) as one autograd node with its gradient written out by hand.

Forward, per row x = (θ, v) (the same operations as before, so the same values):
n = n₀e^{s·v}; ψ = Lθ (+ offset: tree cells' log-potentials); μ = C·pass(ψ) (canonical means);
r = ŝ − n(μ, 1); u = r·V₀⁻¹ (u_D = u without its last entry), Σ₀u = u_D·C₀ with C₀ = n₀Σ_D(θ₀);
μ_t = C·pass(ψ + h·Cᵀu_D) (the means tilted along u); ΔVu = n(μ_t − μ)/h − Σ₀u;
a = r·u, b = u_D·ΔVu, w = ΔVu·W₀ (W₀ = V₀⁻¹ less its last row and column), c = w·ΔVu,
t = 1 + b/a;
f = −½(a/t + (c − b²/a)/t³) − log|V₀|^{1/2}.
Large models (``c0=None``, :data:`dpsynth.graphical.noise_aware.SIGMA0_BY_PASS_MIN_DIM`) take Σ₀u as
the same forward difference at θ₀ instead, n₀(μ(θ₀ + h·u) − μ₀)/h with ψ₀ = Lθ₀ and μ₀ = C·pass(ψ₀)
fixed, its pass run in the tilted pass's batch (ψ + h·Cᵀu_D and ψ₀ + h·Cᵀu_D side by side, 2B
rows), so ΔVu = (n(μ_t − μ) − n₀(μ₀,t − μ₀))/h, 0 at x₀ (to rounding), and no product with C₀.

Backward (reverse order, ḡ for ∂f/∂·): with F = a/t + (c − b²/a)/t³ and F_t = −a/t² − 3(c − b²/a)/t⁴,
ā = −½(1/t + b²/(a²t³) − F_t·b/a²), b̄ = −½(−2b/(at³) + F_t/a), c̄ = −½/t³; then
r̄ = ā·u, ū = ā·r (+ b̄·ΔVu on u_D), (ΔVu)‾ = b̄·u_D + 2c̄·w (W₀ symmetric); n̄ = Σ (ΔVu)‾(μ_t − μ)/h,
μ̄_t = n(ΔVu)‾/h = −μ̄ (so far), (Σ₀u)‾ = −(ΔVu)‾; the tilted pass backward
(:func:`dpsynth.graphical.level_pass.level_backward`) gives ψ̄_t, which adds to ψ̄ and, through the
tilt, ū_D += h·Cψ̄_t; ū_D += (Σ₀u)‾·C₀; r̄ += ū·V₀⁻¹; μ̄ −= n·r̄_D, n̄ −= r̄·(μ, 1); the untilted
pass backward adds to ψ̄; θ̄ = Lᵀψ̄, v̄ = n̄·n·s. With Σ₀u by the pass at θ₀, that pass goes back
in the tilted pass's batch with μ̄₀,t = −n₀(ΔVu)‾/h, and its ψ̄₀,t reaches u only: ū_D += h·C(ψ̄_t + ψ̄₀,t).

Why by hand: the sampler's gradient is this density's (16 chains at a time), some 150 autograd
nodes besides the two passes, each costing the engine's per-node overhead rather than arithmetic
(module docstring of :mod:`dpsynth.graphical.level_pass`). When a graph of the backward is
asked for, the backward differentiates :meth:`ExpandedV.reference` (the same forward under
autograd) instead, so derivatives of every order stay exact.
"""
from __future__ import annotations

import pathlib
import re

import torch

from .factor import DTYPE
from .level_pass import calibrated, level_backward


def cpu_vendor() -> str:
    """The processor's vendor id (``"GenuineIntel"``, ``"AuthenticAMD"``, …) from /proc/cpuinfo;
    ``""`` where it cannot be read."""
    try:
        found = re.search(r"^vendor_id\s*:\s*(\S+)", pathlib.Path("/proc/cpuinfo").read_text(), re.MULTILINE)
    except OSError:
        return ""
    return found.group(1) if found else ""


#: batches of 2 to fewer rows than this are multiplied as x @ M (``torch.nn.functional.linear``
#: with the stored Mᵀ), others as (Mᵀxᵀ)ᵀ (:class:`FixedMatrix`): 16 on AMD processors, 0 (every
#: batch as (Mᵀxᵀ)ᵀ) elsewhere. A single row (the surrogate's gradient at its reference point),
#: as fast either way, keeps (Mᵀxᵀ)ᵀ. MKL on an AMD EPYC (AVX-512), one thread, M 1,027² in float32, ms
#: per product: 8 rows 0.756 as (Mᵀxᵀ)ᵀ against 0.378 as x @ M, 16 rows 0.565 against 0.634, 6–12
#: rows all favour x @ M (``bench/napsu_products.py``). The sampler's process split
#: (:mod:`dpsynth.graphical.split_chains`) hands each process 8 of the 16 chains. On the Intel Xeon
#: machines of the earlier sessions (Mᵀxᵀ)ᵀ was the faster at 16 rows and x @ M was not measured at
#: 8, so they keep the layout their studies ran on; so do 1 and 16 rows everywhere (one process:
#: Adult-10's fits, whose paths stay as they were on any machine). The vendor, not a timing,
#: decides, so that a seed gives the same draws on one machine every time
LINEAR_BELOW_ROWS = 16 if cpu_vendor() == "AuthenticAMD" else 0


class FixedMatrix:
    """A fixed matrix M (already cast to the precision wanted) for products x @ M with a few rows
    x (the chains): kept as Mᵀ, contiguous, and applied as (Mᵀxᵀ)ᵀ, the result in float64. MKL's
    skinny products run faster that way round at 16 rows: 16 rows by M of 1,027 × 2,053 in float32,
    2.0–3.1 ms against 3.8–4.4 ms for x @ M (the bundled Adult at 15 columns, one thread beside
    another job, Intel Xeon). Batches of 2 to fewer than :data:`LINEAR_BELOW_ROWS` rows (on AMD
    processors, where MKL's (Mᵀxᵀ)ᵀ of 8 rows is twice as slow as x @ M) are multiplied as x @ M
    (the same Mᵀ, read by ``linear``).

    >>> m = torch.arange(6.0, dtype=torch.float64).reshape(2, 3)
    >>> x = torch.ones(4, 2, dtype=torch.float64)
    >>> bool(torch.equal(FixedMatrix(m)(x), x @ m)), FixedMatrix(m)(torch.ones(5, 4, 2, dtype=torch.float64)).shape
    (True, torch.Size([5, 4, 3]))
    """

    def __init__(self, matrix: torch.Tensor):
        self.t = matrix.T.contiguous()

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        """x @ M for x (…, rows of M)."""
        flat = x.reshape(-1, x.shape[-1]).to(self.t.dtype)
        rows = flat.shape[0]
        out = torch.nn.functional.linear(flat, self.t) if 1 < rows < LINEAR_BELOW_ROWS else (self.t @ flat.T).T
        return out.to(DTYPE).reshape(x.shape[:-1] + (self.t.shape[0],))


class ExpandedV:
    """f(x) of the module docstring, (B, D + 1) → (B,), for one count group: ``model`` (a
    :class:`dpsynth.graphical.maxent.MaxEntModel`), ``y`` = ŝ (D + 1,), ``n0`` / ``scale`` (1,) the
    count's reference and scale, ``step`` = h, ``v0_inv`` the product x ↦ x·V₀⁻¹ ((D + 1)²: a
    :class:`FixedMatrix`, or a :class:`dpsynth.graphical.half_matrix.HalfMatrix` for large models) and ``c0`` = C₀ (D²),
    both symmetric and fixed, in the precision of their products, ``log_det`` = log|V₀|^{1/2};
    ``c0=None`` with ``reference`` = (θ₀ (D,), n₀ at x₀): Σ₀u by a forward difference at θ₀ in
    the tilted pass's batch (module docstring), three products per value and gradient, not five.
    The bundled Adult at 15 columns (D = 1,026, seed 6, AMD EPYC, one thread): at 8 rows the
    products with C₀ took 0.58 ms each, the pass 0.62 → 0.81 ms and its backward 0.38 → 0.48 ms
    for 8 → 16 rows; a value and gradient of 8 rows 6.2–6.8 → 5.2–6.0 ms alone; the split
    sampler's step over the first 1,500 of a fit, medians 7.56 / 8.39 / 7.65 → 6.77 / 7.24 /
    7.83 ms (runs alternated).

    Five products with these two matrices per value and gradient (three forward, two backward),
    each with the matrix on the left (:class:`FixedMatrix`). They were products with
    P = [V₀⁻¹ | V₀⁻¹C₀], Pᵀ and W₀: the same arithmetic over 21 MB of matrices at D = 1,026 (the
    bundled Adult, 15 columns) against 8.4 MB now, which together with the sampler's metric had
    outgrown the machine's shared 32 MB cache (the five products of 16 rows, one thread beside
    another job: 9.4 ms before, 6.2 ms now; the sampler's whole value and gradient, one thread
    alone, medians of six rounds of 30: 21.1 ms before, 18.3 ms now, and half an hour later, the
    machine running faster, medians of twelve: 14.1 ms before, 12.6 ms now)."""

    def __init__(self, model, y, n0, scale, step: float, v0_inv, c0, log_det: float, reference=None):
        self.model, self.y, self.n0, self.scale = model, y, n0, scale
        self.step, self.log_det = step, log_det
        self.v0_inv = v0_inv
        self.c0 = None if c0 is None else FixedMatrix(c0)
        self.D = model.D
        self.flat0 = self.mu0 = self.n_ref = None
        if c0 is None:  # Σ₀u by a forward difference at θ₀, in the tilted pass's batch
            theta0, self.n_ref = reference
            _, collect, levels = model.pass_maps()
            with torch.no_grad():
                self.flat0 = model.lifted_potentials(torch.as_tensor(theta0, dtype=DTYPE).reshape(1, -1))
                self.mu0 = collect(calibrated(levels, self.flat0)[1]).T

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        if torch.is_grad_enabled() and x.requires_grad:
            return _ExpandedFunction.apply(x, self)
        return self.forward(x.reshape(-1, x.shape[-1]))[0].reshape(x.shape[:-1])

    def forward(self, x: torch.Tensor):
        """(f (B,), what :meth:`backward` needs) at x (B, D + 1); recorded by autograd where x asks
        for gradients (then the passes' entries of what is returned are None)."""
        d = self.D
        _, collect, levels = self.model.pass_maps()
        theta, n = x[..., :d], self.n0 * torch.exp(self.scale * x[..., d:])
        flat = self.model.lifted_potentials(theta)
        belief = calibrated(levels, flat)
        mu = collect(belief[1]).T
        m = torch.cat([mu, torch.ones_like(mu[..., :1])], dim=-1)
        r = self.y - n * m
        u = self.v0_inv(r)
        ud = u[..., :d]
        tilt = collect.T((self.step * ud).T)  # h·u_D on the tree cells
        if self.c0 is not None:
            sigma0_u = self.c0(ud)
            tilted = calibrated(levels, flat + tilt)
            delta = collect(tilted[1]).T - mu  # μ_t − μ
            dvu = n * delta / self.step - sigma0_u  # ΔV u
        else:  # the tilt at θ and at θ₀ in one pass of 2B rows: Σ₀u ≈ (μ(θ₀ + h·u) − μ₀)/h
            rows = flat.shape[1]
            tilted = calibrated(levels, torch.cat([flat + tilt, self.flat0.expand(-1, rows) + tilt], dim=1))
            means = collect(tilted[1]).T
            delta = means[:rows] - mu
            dvu = (n * delta - self.n_ref * (means[rows:] - self.mu0)) / self.step
        w = self.v0_inv(torch.nn.functional.pad(dvu, (0, 1)))[..., :d]  # ΔVu·W₀
        a, b, c = (r * u).sum(-1), (ud * dvu).sum(-1), (w * dvu).sum(-1)
        t = 1.0 + b / a
        f = -0.5 * (a / t + (c - b * b / a) / t ** 3) - self.log_det
        return f, (n, m, r, u, delta, dvu, w, a, b, c, t, belief[2], tilted[2])

    def value_and_grad(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(f (…,), ∂f/∂x (…, D + 1)) at x by :meth:`forward` and :meth:`backward` directly: the
        sampler's gradient without autograd's graph (:func:`dpsynth.graphical.posterior.hmc`)."""
        flat = x.detach().reshape(-1, x.shape[-1])
        with torch.no_grad():
            f, saved = self.forward(flat)
            grad = self.backward(saved, torch.ones_like(f))
        return f.reshape(x.shape[:-1]), grad.reshape(x.shape)

    def reference(self, x: torch.Tensor) -> torch.Tensor:
        """f(x) as a graph of autograd nodes (x asking for gradients; each pass one
        :class:`dpsynth.graphical.level_pass.LevelPass` node): tests, and derivatives past the first."""
        return self.forward(x)[0]

    def backward(self, saved, grad_f: torch.Tensor) -> torch.Tensor:
        """∂L/∂x (B, D + 1) from ∂L/∂f (B,) (module docstring)."""
        d, h = self.D, self.step
        lift, collect, levels = self.model.pass_maps()
        n, m, r, u, delta, dvu, w, a, b, c, t, pass_mu, pass_tilted = saved
        q = c - b * b / a
        f_t = -a / t ** 2 - 3.0 * q / t ** 4
        g_a = -0.5 * grad_f * (1.0 / t + b * b / (a * a * t ** 3) - f_t * b / (a * a))
        g_b = -0.5 * grad_f * (-2.0 * b / (a * t ** 3) + f_t / a)
        g_c = -0.5 * grad_f / t ** 3
        g_r = g_a[:, None] * u
        g_u = g_a[:, None] * r
        g_u[:, :d] += g_b[:, None] * dvu
        g_dvu = g_b[:, None] * u[:, :d] + 2.0 * g_c[:, None] * w
        g_n = (g_dvu * delta).sum(-1, keepdim=True) / h
        g_mu_t = n * g_dvu / h
        if self.c0 is not None:
            g_flat_t = level_backward(levels, pass_tilted, None, collect.T.mm(g_mu_t.T))
            g_u[:, :d] += h * collect.mm(g_flat_t).T
            g_u[:, :d] -= self.c0(g_dvu)  # (Σ₀u)‾ = −(ΔVu)‾, through Σ₀u = u_D·C₀
        else:  # both tilts' passes back at once; the one at θ₀ reaches u only
            rows = g_mu_t.shape[0]
            g_both = level_backward(levels, pass_tilted, None,
                                    collect.T.mm(torch.cat([g_mu_t, -self.n_ref * g_dvu / h]).T))
            g_flat_t = g_both[:, :rows]
            g_u[:, :d] += h * collect.mm(g_flat_t + g_both[:, rows:]).T
        g_r = g_r + self.v0_inv(g_u)
        g_mu = -g_mu_t - n * g_r[:, :d]
        g_n = g_n - (g_r * m).sum(-1, keepdim=True)
        g_flat = g_flat_t + level_backward(levels, pass_mu, None, collect.T.mm(g_mu.T))
        return torch.cat([lift.T.mm(g_flat).T, g_n * n * self.scale], dim=-1)


class _ExpandedFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, density):
        flat_x = x.reshape(-1, x.shape[-1])
        f, saved = density.forward(flat_x)
        ctx.density, ctx.saved = density, saved
        ctx.save_for_backward(x)
        return f.reshape(x.shape[:-1])

    @staticmethod
    def backward(ctx, grad_f):
        (x,) = ctx.saved_tensors
        if torch.is_grad_enabled():  # a graph of the backward: differentiate the reference under autograd
            f = ctx.density.reference(x.reshape(-1, x.shape[-1])).reshape(x.shape[:-1])
            (g,) = torch.autograd.grad(f, x, grad_f, create_graph=True)
            return g, None
        return ctx.density.backward(ctx.saved, grad_f.reshape(-1)).reshape(x.shape), None
