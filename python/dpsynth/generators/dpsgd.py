"""The DP-SGD training loop shared by the neural generators (DP-MisGAN, Kamino/KaminoI, DPautoGAN,
DP-CTGAN).

What lives where:

- The privacy side of a run lives in :mod:`dpsynth.privacy.dpsgd_accounting` (its names are
  re-exported here): :class:`SGMPlan` (σ, q, T, C calibrated by opacus's RDP accountant, charged
  once before training, one :meth:`SGMPlan.release` per noisy step, :meth:`SGMPlan.finish` checks
  that exactly T steps ran), :func:`poisson_indices` (Poisson subsampling at rate q),
  :func:`step_rng` (per-step generators that keep neighbouring runs coupled) and
  :func:`released_row_count` (the noisy number of training rows that fixes q and T).
  Gradients are normalised by the expected batch size q·ñ, a public (released) number, never by
  the realised batch size.
- Rows as model inputs live in :mod:`dpsynth.generators.encoding` (re-exported here):
  :class:`MixedEncoder`, :func:`block_log_likelihood`, :func:`draw_rows`, :func:`complete_rows`, ...
- Here: :class:`DPSGD` — one DP-SGD optimiser: per-sample gradients by ``torch.func``
  (``vmap(grad(ℓ))`` with ``functional_call``; this also works when the per-sample loss contains a
  gradient penalty, where opacus's ``GradSampleModule`` fails on the double backward) or, for plain
  MLPs, by the exact outer-product identity (:func:`mlp_clipped_gradient_sum`, ~100× faster on CPU);
  per-sample clipping of the joint L2 norm to C (less :data:`CLIP_MARGIN` for float32 rounding), one
  :meth:`SGMPlan.release` per step, then an Adam
  step (post-processing); :func:`wgan_critic_step` (a WGAN critic step with DP-SGD on the real term
  only); :class:`TorchFit` (torch threads and seeding around a generator's ``fit``). The generators'
  option checks are :mod:`dpsynth.validation`'s.

Privacy unit: one row; neighbouring relation: add/remove one row (Poisson subsampling's analysis).
The Gaussian noise is float noise from torch (not floating-point safe; documented in PRIVACY.md).

Example
-------
>>> import torch
>>> from dpsynth.privacy import PrivacyLedger, NoiseSource
>>> plan = SGMPlan.calibrate(epsilon=1.0, delta=1e-5, sample_rate=0.01, steps=500, clip=1.0)
>>> led = PrivacyLedger(1.0, 1e-5)
>>> plan.charge(led, "demo model (DP-SGD)")
>>> model = torch.nn.Linear(3, 2)
>>> def loss(params, x, y):  # one row
...     out = torch.func.functional_call(model, params, (x.unsqueeze(0),))
...     return torch.nn.functional.cross_entropy(out, y.unsqueeze(0))
>>> opt = DPSGD({"m": model}, plan, NoiseSource(1).torch_generator(), expected_batch_size=5.0,
...             step="demo model (DP-SGD)", loss_fn=lambda p, x, y: loss(split_params(p, "m"), x, y))
>>> opt.step(torch.randn(4, 3), torch.tensor([0, 1, 1, 0]))
>>> plan.steps_taken, round(led.total_epsilon(), 3) <= 1.0
(1, True)
"""
from __future__ import annotations

import contextlib

from ..graphical.chunks import torch_threads  # noqa: F401  (re-exported: the generators' thread setting)
from ..privacy.dpsgd_accounting import DPSGD_MECHANISM, SGMPlan, poisson_indices, released_row_count, step_rng
from .encoding import (Block, MixedEncoder, block_log_likelihood, complete_rows, draw_encoded, draw_rows,
                       numeric_range, numeric_values, values_in_bins)


@contextlib.contextmanager
def torch_seeded(seed: int):
    """Run a block with torch's global generator seeded (model initialisation), leaving the
    caller's global torch random state as it was."""
    import torch

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(int(seed))
        yield


class TorchFit:
    """Mixin for the torch generators: ``fit`` runs :meth:`_fit_torch` with ``self.num_threads``
    torch threads and torch's global random state seeded from the noise source (restored after).
    Each is trained by DP-SGD on Poisson-subsampled batches, whose (ε, δ) guarantee is under
    add/remove-one neighbours and needs δ > 0, on rows encoded within public bounds."""

    relation = "add-remove"
    needs_delta = True
    needs_bounds = True

    def _fit(self, codes, data, source):
        with torch_threads(self.num_threads), torch_seeded(source.numpy.integers(0, 2**62)):
            self._fit_torch(codes, data, source)

    def _fit_torch(self, codes, data, source):
        raise NotImplementedError

    def _start_on_complete_rows(self, codes, data, source, eps_n: float):
        """The opening of a fit on the complete rows (DPautoGAN, DP-CTGAN): the complete rows
        (codes, data), their encoder (numerics binned), a seed and two torch generators (the
        noise's and the latent draws') from ``source``, and the released number of complete rows
        ``n_`` (ε = ``eps_n``, charged to the ledger)."""
        codes, data = complete_rows(codes, data)
        enc = MixedEncoder(self.schema_, numeric="binned")
        seed = int(source.numpy.integers(0, 2**62))
        noise_gen, latent_gen = source.torch_generator(), source.torch_generator()
        self.n_ = released_row_count(len(codes), eps_n, self.ledger, source, self.relation,
                                     step="number of complete rows")
        return codes, data, enc, seed, noise_gen, latent_gen


# ====================================================================== per-sample gradients
#: each row's gradient is clipped to C·(1 − CLIP_MARGIN), and the rows are summed in float64: in
#: float32 a row clipped to exactly C, and a batch sum taken with or without one row, come out a
#: little off (the neighbour audit on an Intel Xeon with AVX-512, 2026-12-01: the sums of D and D'
#: 1 + 1.8e-6 apart for C = 1 in DP-MisGAN's critic, 1 + 5.7e-8 in KaminoI's column models), so
#: the declared L2 sensitivity C holds with room for float32 rounding
CLIP_MARGIN = 1e-4


def _clip_factor(norms, clip: float):
    """min(1, C(1 − :data:`CLIP_MARGIN`) / ‖g_i‖) per row."""
    return (clip * (1.0 - CLIP_MARGIN) / (norms + 1e-12)).clamp(max=1.0)


def clipped_gradient_sum(loss_fn, params: dict, batch: tuple, clip: float):
    """Σ_i clip_C(∇θ ℓ(θ; row_i)) as one flat vector, with ``vmap(grad(loss_fn))``.

    ``loss_fn(params, *row)`` is the loss of ONE row (tensors without the batch dimension);
    ``batch`` holds tensors whose first dimension indexes rows. Returns (flat sum, per-row norms)."""
    import torch
    from torch.func import grad, vmap

    names = list(params)
    total = sum(p.numel() for p in params.values())
    b = int(batch[0].shape[0]) if batch else 0
    if b == 0:
        ref = next(iter(params.values()))
        return torch.zeros(total, dtype=ref.dtype), torch.zeros(0, dtype=ref.dtype)
    grads = vmap(grad(loss_fn), in_dims=(None,) + (0,) * len(batch))(params, *batch)
    flat = torch.cat([grads[k].reshape(b, -1) for k in names], dim=1)
    norms = flat.norm(dim=1)
    return (flat * _clip_factor(norms, clip)[:, None]).double().sum(dim=0).to(flat.dtype), norms


_ELEMENTWISE = ("ReLU", "LeakyReLU", "Tanh", "Sigmoid", "Identity", "ELU", "GELU", "SiLU")


def mlp_clipped_gradient_sum(model, row_losses, inputs, targets: tuple, clip: float):
    """Σ_i clip_C(∇θ ℓ_i) for an ``nn.Sequential`` of ``nn.Linear`` layers and element-wise
    activations, without materialising per-row gradients (Goodfellow 2015; opacus's "ghost"
    clipping): the row-i gradient of a linear layer is δ_i a_iᵀ (weight) and δ_i (bias), with a_i
    the layer's input and δ_i = ∂ℓ_i/∂z_i its output's gradient, so its squared norm is
    ‖δ_i‖²(‖a_i‖² + 1) and the clipped sum is (c ⊙ δ)ᵀ a. Exactly equal to
    :func:`clipped_gradient_sum` (tested), about two orders of magnitude faster on CPU.

    ``row_losses(outputs, *targets)`` returns the vector of per-row losses (row i may depend on
    row i only). Returns (flat sum in ``named_parameters`` order, per-row norms)."""
    import torch
    from torch import nn

    layers = list(model)
    for m in layers:
        if not isinstance(m, nn.Linear) and type(m).__name__ not in _ELEMENTWISE:
            raise TypeError(f"mlp_clipped_gradient_sum supports Linear layers and element-wise activations, "
                            f"not {type(m).__name__}")
    ref = next(model.parameters())
    total = sum(p.numel() for p in model.parameters())
    if inputs.shape[0] == 0:
        return torch.zeros(total, dtype=ref.dtype), torch.zeros(0, dtype=ref.dtype)
    ins, outs, h = [], [], inputs
    for m in layers:
        if isinstance(m, nn.Linear):
            ins.append(h.detach())
            h = m(h)
            outs.append(h)
        else:
            h = m(h)
    deltas = torch.autograd.grad(row_losses(h, *targets).sum(), outs)
    sq = torch.zeros(inputs.shape[0], dtype=ref.dtype)
    for m, a, dlt in zip((m for m in layers if isinstance(m, nn.Linear)), ins, deltas):
        sq = sq + (dlt * dlt).sum(1) * ((a * a).sum(1) + (1.0 if m.bias is not None else 0.0))
    norms = sq.sqrt()
    factor = _clip_factor(norms, clip)
    pieces = []
    for m, a, dlt in zip((m for m in layers if isinstance(m, nn.Linear)), ins, deltas):
        scaled = (dlt * factor[:, None]).double()  # summed over the rows in float64 (CLIP_MARGIN)
        pieces.append((scaled.T @ a.double()).reshape(-1))
        if m.bias is not None:
            pieces.append(scaled.sum(0))
    return torch.cat(pieces).to(ref.dtype).detach(), norms.detach()


class DPSGD:
    """DP-SGD (Abadi et al. 2016, Alg. 1) with Adam as the post-processing update rule.

    ``modules`` maps a prefix to an ``nn.Module``. Per-row gradients come either from
    ``loss_fn(params, *row)`` — the loss of ONE row, parameters as one dict keyed
    ``"<prefix>.<name>"`` (use :func:`split_params` and ``functional_call``), differentiated by
    ``vmap(grad(...))`` (any per-row loss, gradient penalties included) — or, for a single
    ``nn.Sequential`` MLP, from ``row_losses(outputs, *targets)`` by :func:`mlp_clipped_gradient_sum`."""

    def __init__(self, modules: dict, plan: SGMPlan, generator, expected_batch_size: float, step: str,
                 loss_fn=None, row_losses=None, lr: float = 1e-3, betas=(0.9, 0.999)):
        import torch

        if (loss_fn is None) == (row_losses is None):
            raise ValueError("give exactly one of loss_fn (vmap path) or row_losses (MLP path)")
        if row_losses is not None and len(modules) != 1:
            raise ValueError("the MLP path (row_losses) takes a single nn.Sequential")
        self.modules = dict(modules)
        self.params = {f"{prefix}.{k}": p for prefix, mod in modules.items() for k, p in mod.named_parameters()}
        self.loss_fn = loss_fn
        self.row_losses = row_losses
        self.plan = plan
        self.generator = generator
        self.expected_batch_size = float(expected_batch_size)
        self.step_name = step
        self.optimizer = torch.optim.Adam(list(self.params.values()), lr=lr, betas=betas)

    def clipped_sum(self, *batch):
        """Σ_i clip_C(∇θ ℓ_i) over the batch, flat, and the per-row norms."""
        if self.row_losses is not None:
            (model,) = self.modules.values()
            return mlp_clipped_gradient_sum(model, self.row_losses, batch[0], batch[1:], self.plan.clip)
        detached = {k: p.detach() for k, p in self.params.items()}
        return clipped_gradient_sum(self.loss_fn, detached, batch, self.plan.clip)

    def step(self, *batch, public_grad=None) -> None:
        """One noisy step on a Poisson batch (possibly empty). ``public_grad`` (flat, optional): a
        gradient computed without private rows (e.g. a WGAN critic's fake-sample term over a public
        number of fakes), added after the release (post-processing)."""
        summed, _ = self.clipped_sum(*batch)  # per-row norms are private: not kept
        noisy = self.plan.release(summed, self.generator, self.step_name) / self.expected_batch_size
        if public_grad is not None:
            noisy = noisy + public_grad
        offset = 0
        for p in self.params.values():
            k = p.numel()
            p.grad = noisy[offset:offset + k].view_as(p).clone()
            offset += k
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)


def wgan_critic_step(opt: "DPSGD", critic, real, fake, weight_clip: float | None = None) -> None:
    """One step of a WGAN critic (loss E D(fake) − E D(real)) with DP-SGD on the real term only.

    The real term −D(x_i) is clipped per row and noised (``opt``: the MLP path, row loss −D); the
    fake term's gradient, mean over ``fake`` (whose number must be public, e.g. round(q·ñ), never the
    realised Poisson batch size), reads no private row and is added after the release. Weight
    clipping to [−c, c] (Arjovsky et al. 2017) is post-processing."""
    import torch

    params = list(critic.parameters())
    g = torch.autograd.grad(critic(fake).mean(), params)
    opt.step(real, public_grad=torch.cat([x.reshape(-1) for x in g]).detach())
    if weight_clip is not None:
        with torch.no_grad():
            for p in params:
                p.clamp_(-weight_clip, weight_clip)


def critic_real_row_loss(outputs):
    """Per-row loss of the real term of a WGAN critic: −D(x_i) (for :func:`wgan_critic_step`)."""
    return -outputs[:, 0]


def split_params(params: dict, prefix: str) -> dict:
    """The entries of a flat ``"<prefix>.<name>"`` parameter dict that belong to ``prefix``."""
    head = prefix + "."
    return {k[len(head):]: v for k, v in params.items() if k.startswith(head)}


__all__ = ["wgan_critic_step", "critic_real_row_loss", "released_row_count", "complete_rows",
           "block_log_likelihood", "SGMPlan", "DPSGD", "TorchFit", "DPSGD_MECHANISM", "MixedEncoder", "Block",
           "clipped_gradient_sum", "mlp_clipped_gradient_sum", "poisson_indices", "step_rng", "split_params",
           "torch_threads", "torch_seeded", "draw_rows", "draw_encoded", "numeric_range", "numeric_values", "values_in_bins"]
