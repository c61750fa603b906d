"""DP-MisGAN: MisGAN (Li, Jiang & Marlin, ICLR 2019) trained with differentially private critics.

MisGAN learns from incomplete rows without imputing them first. Two generators are trained:
a data generator G_x(z) (a complete row) and a mask generator G_m(z') (which cells are observed),
against two WGAN-GP critics (Gulrajani et al. 2017): the mask critic D_m compares real masks m with
G_m(z'); the data critic D_x compares the real rows *as observed*, f(x, m) = x ⊙ m (missing cells
set to τ = 0), with generated rows masked by generated masks, f(G_x(z), G_m(z')). G_x minimises
−E D_x(f(G_x, G_m)); G_m minimises −E D_m(G_m) + α·(−E D_x(f(G_x, G_m))) (MisGAN Eq. 4–5; seed
paper Alg. 1). Only the generators are kept; the output is complete data from G_x (optionally with
missing cells drawn from G_m, ``keep_missing=True``).

Rows are encoded from the public schema (:class:`~dpsynth.generators.dpsgd.MixedEncoder`,
``numeric="binned"``): categoricals one-hot; a numeric, clipped to its public bounds, as a one-hot
over the schema's bins plus its position inside the bin (CTGAN's mode-specific normalisation with
public modes; a single sigmoid output saturates and collapses on Adult's numerics). The mask is per
column and expanded over a column's block. G_x ends in a softmax per one-hot part; synthetic
categories and bins are drawn from these softmaxes, positions clipped to [0, 1]. The released
generators are exponential moving averages of the trained ones (``ema``; post-processing), which
damps the GAN's oscillation.

Privacy (add/remove one row; the privacy unit is a row)
---------------------------------------------------------
The seed paper sanitises the gradients that reach the generators (GS-WGAN), but with one
non-private critic that has seen every row the sampling rate is 1 and every sanitised per-sample
gradient is a composition, so its accounting (q = B/N) does not hold (``dp-privacy.md`` §1.3:
ε ≈ 8.6·10⁵ on Adult). We instead make the **critics** differentially private with DP-SGD and treat
everything the generators do as post-processing:

1. A noisy row count ñ (discrete Laplace, L1 sensitivity 1, ε_n = ``count_share``·ε) fixes the
   public sampling rate q = min(1, B/ñ), the number of critic steps T = ⌈epochs/q⌉ and the
   normalisation q·ñ (post-processing of ñ); ``n_`` = ñ.
2. Critic step t: a Poisson batch S_t (each row independently with probability q). For each row
   i ∈ S_t, a fresh fake row and fake mask (from the generators with latent noise drawn
   independently of the data) and interpolation weights a_i, b_i ~ U(0, 1) form the per-row loss
   ℓ_i(θ) = D_x(x̃_i) − D_x(x_i⊙m_i) + λ(‖∇D_x(x̂_i)‖ − 1)²
            + D_m(m̃_i) − D_m(m_i) + λ(‖∇D_m(m̂_i)‖ − 1)²,
   x̂_i = a_i x_i⊙m_i + (1 − a_i) x̃_i, m̂_i likewise. ℓ_i depends on row i only (the gradient
   penalty uses one real row per interpolate, so it is inside the privacy unit). Its gradient with
   respect to both critics' parameters jointly is computed per row (``torch.func.vmap(grad)``;
   opacus's GradSampleModule fails on the penalty's double backward), clipped to L2 norm C, summed,
   and N(0, σ²C²I) is added: one Poisson-subsampled Gaussian mechanism with L2 sensitivity C under
   add/remove (coupling the fakes of the rows both data sets share). The noisy sum divided by q·ñ
   feeds Adam (post-processing).
3. Generator steps (one every ``n_critic`` critic steps) use only the current critic parameters
   and fresh latent noise: no private row is read, so they are post-processing, as is sampling.
4. The T critic steps compose adaptively; opacus's RDP accountant gives ε_SGM for the history
   (σ, q, T) at δ, and σ is the smallest that keeps ε_SGM ≤ ε − ε_n. The ledger is charged once,
   before training, with exactly that (σ, q, T); the loop refuses a step beyond T and checks that it
   ran exactly T. Total: ε_n + ε_SGM ≤ ε, δ_SGM = δ.

Example
-------
>>> import dpsynth
>>> df, schema = dpsynth.load_dataset("adult")
>>> small = df.iloc[:1000][["age", "sex", "income"]]
>>> gen = DPMisGAN(3.0, 1e-6, epochs=2, batch_size=100).fit(small, schema.subset(small.columns), seed=1)
>>> gen.sample(n=20, seed=2).datasets[0].shape
(20, 3)
>>> gen.ledger.total_epsilon() <= 3.0
True
"""
from __future__ import annotations

import copy
import math
from functools import partial

import numpy as np
import torch
from torch import nn

from ..privacy import laplace_counts
from ..schema import MISSING
from .base import Generator
from ..validation import check_number
from .dpsgd import DPSGD, MixedEncoder, SGMPlan, TorchFit, draw_encoded, poisson_indices, split_params, step_rng
from .options import checks

FIT_STEP = "critics (DP-SGD)"
_CHECKS = checks(ema=partial(check_number, low=0.0, high=1.0, high_open=True,
                             what="in [0, 1) (0 = no averaging of the generator weights)"))


def mlp(sizes, act) -> nn.Sequential:
    """A multilayer perceptron: Linear layers of the given sizes with ``act()`` between them."""
    layers = []
    for a, b in zip(sizes[:-2], sizes[1:-1]):
        layers += [nn.Linear(a, b), act()]
    layers.append(nn.Linear(sizes[-2], sizes[-1]))
    return nn.Sequential(*layers)


class DataGenerator(nn.Module):
    """G_x: z → a complete encoded row: a softmax over each one-hot part (categories or bins),
    a linear output for the position inside a numeric bin (clipped to [0, 1] when decoding)."""

    def __init__(self, nz: int, hidden: int, blocks):
        super().__init__()
        self.parts = [(b.start, b.levels) for b in blocks if b.levels]  # softmax groups
        width = sum(b.width for b in blocks)
        self.net = mlp([nz, hidden, hidden, width], nn.ReLU)
        self.layout = []  # (start, stop, softmax?) covering the row in order
        for b in blocks:
            if b.levels:
                self.layout.append((b.start, b.start + b.levels, True))
            if b.width > b.levels:
                self.layout.append((b.start + b.levels, b.start + b.width, False))

    def forward(self, z):
        h = self.net(z)
        return torch.cat([torch.softmax(h[:, a:b], dim=1) if soft else h[:, a:b] for a, b, soft in self.layout],
                         dim=1)


class MaskGenerator(nn.Module):
    """G_m: z' → per-column observation probabilities sigmoid(h/τ) (MisGAN's τ = 0.66)."""

    def __init__(self, nz: int, hidden: int, d: int, temperature: float):
        super().__init__()
        self.temperature = temperature
        self.net = mlp([nz, hidden, hidden, d], nn.ReLU)

    def forward(self, z):
        return torch.sigmoid(self.net(z) / self.temperature)


def _moving_average(average: nn.Module, current: nn.Module, decay: float) -> None:
    with torch.no_grad():
        for a, c in zip(average.parameters(), current.parameters()):
            a.mul_(decay).add_(c, alpha=1.0 - decay)


def critic_row_loss(d_x, d_m, lam: float):
    """The per-row WGAN-GP loss of both critics, ℓ_i(θ) (module docstring, step 2), as a function
    ``loss(params, x_real, x_fake, a, m_real, m_fake, b)`` of ONE row for ``vmap(grad(...))``;
    ``params`` holds the data critic's parameters under ``"dx."`` and the mask critic's under ``"dm."``."""
    from torch.func import functional_call, grad

    def value(module, params, v):
        return functional_call(module, params, (v.unsqueeze(0),))[0, 0]

    def penalty(module, params, v):
        g = grad(lambda u: value(module, params, u))(v)
        return (torch.sqrt((g * g).sum() + 1e-12) - 1.0) ** 2

    def loss(params, x_real, x_fake, a, m_real, m_fake, b):
        px, pm = split_params(params, "dx"), split_params(params, "dm")
        loss_x = value(d_x, px, x_fake) - value(d_x, px, x_real) + lam * penalty(d_x, px, a * x_real + (1 - a) * x_fake)
        loss_m = value(d_m, pm, m_fake) - value(d_m, pm, m_real) + lam * penalty(d_m, pm, b * m_real + (1 - b) * m_fake)
        return loss_x + loss_m

    return loss


class DPMisGAN(TorchFit, Generator):
    """MisGAN with DP-SGD critics (see module docstring for the privacy proof).

    Parameters: ``epsilon``, ``delta`` (required); ``epochs`` (expected passes over the rows, in
    critic steps), ``batch_size`` (expected Poisson batch B), ``n_critic`` (critic steps per
    generator step), ``nz`` (latent size), ``hidden`` / ``critic_hidden`` (MLP widths), ``lam``
    (gradient-penalty weight λ), ``alpha`` (weight of the data loss in the mask generator's loss),
    ``clip`` (C), ``lr`` / ``lr_generator`` (Adam), ``count_share`` (fraction of ε for the noisy
    row count), ``keep_missing`` (draw missing cells from the mask generator when sampling),
    ``num_threads`` (torch threads during fit).
    """

    method = "dp-misgan"

    def __init__(self, epsilon: float, delta: float | None = None, epochs: float = 20.0, batch_size: int = 128,
                 n_critic: int = 2, nz: int = 32, hidden: int = 128, critic_hidden: int = 64, lam: float = 10.0,
                 alpha: float = 0.2, clip: float = 1.0, lr: float = 1e-3, lr_generator: float = 1e-3,
                 count_share: float = 0.01, keep_missing: bool = False, mask_temperature: float = 0.66,
                 ema: float = 0.99, num_threads: int = 1):
        super().__init__(epsilon, delta)
        self._set_params(locals(), _CHECKS)

    # ------------------------------------------------------------------ fitting
    def _fit_torch(self, codes, data, source):
        schema = self.schema_
        d = len(schema.names)
        enc = MixedEncoder(schema, numeric="binned")
        seed = int(source.numpy.integers(0, 2**62))
        noise_gen = source.torch_generator()
        latent_gen = source.torch_generator()  # generator steps: data-independent randomness

        # 1. released row count → q, T
        eps_n = self.count_share * self.epsilon
        n_noisy = laplace_counts(np.array([len(codes)], dtype=np.int64), epsilon=eps_n, sensitivity=1,
                                 ledger=self.ledger, source=source, step="row count", relation=self.relation)
        self.n_ = float(max(1, int(n_noisy[0])))
        q = min(1.0, self.batch_size / self.n_)
        steps = int(math.ceil(self.epochs / q))
        plan = SGMPlan.calibrate(self.epsilon - eps_n, self.delta, q, steps, self.clip)
        plan.charge(self.ledger, FIT_STEP, note=f"data and mask critics (WGAN-GP), joint per-row clipping; "
                                                f"{steps // self.n_critic} generator steps are post-processing")
        self.plan_ = plan

        # private rows, encoded (local only; never stored on self)
        X, M = enc.encode(data, codes)
        expand = torch.from_numpy(enc.column_of_feature)
        X = torch.from_numpy(X)
        M = torch.from_numpy(M)
        X_obs = X * M[:, expand]  # f(x, m) with τ = 0

        g_x = DataGenerator(self.nz, self.hidden, enc.blocks)
        g_m = MaskGenerator(self.nz, self.hidden, d, self.mask_temperature)
        d_x = mlp([enc.width, self.critic_hidden, self.critic_hidden, 1], lambda: nn.LeakyReLU(0.2))
        d_m = mlp([d, self.critic_hidden, self.critic_hidden, 1], lambda: nn.LeakyReLU(0.2))
        row_loss = critic_row_loss(d_x, d_m, self.lam)
        critics = DPSGD({"dx": d_x, "dm": d_m}, plan, noise_gen, expected_batch_size=q * self.n_, step=FIT_STEP,
                        loss_fn=row_loss, lr=self.lr, betas=(0.5, 0.9))
        opt_gx = torch.optim.Adam(g_x.parameters(), lr=self.lr_generator, betas=(0.5, 0.9))
        opt_gm = torch.optim.Adam(g_m.parameters(), lr=self.lr_generator, betas=(0.5, 0.9))
        avg_x, avg_m = copy.deepcopy(g_x), copy.deepcopy(g_m)  # exponential moving averages (released)
        n = X.shape[0]
        for t in range(steps):
            idx = torch.from_numpy(poisson_indices(step_rng(seed, 0, t), n, q))
            k = len(idx)
            # one fake row, fake mask and pair of interpolation weights per sampled row, each from its
            # own stream (a row added at the end of the data changes only its own draws)
            z = torch.from_numpy(step_rng(seed, 1, t).standard_normal((k, self.nz)).astype(np.float32))
            z2 = torch.from_numpy(step_rng(seed, 2, t).standard_normal((k, self.nz)).astype(np.float32))
            ab = torch.from_numpy(step_rng(seed, 3, t).random((k, 2)).astype(np.float32))
            with torch.no_grad():
                m_fake = g_m(z2)
                x_fake = g_x(z) * m_fake[:, expand]
            critics.step(X_obs[idx], x_fake, ab[:, :1], M[idx], m_fake, ab[:, 1:])
            if (t + 1) % self.n_critic == 0:
                self._generator_step(g_x, g_m, d_x, d_m, opt_gx, opt_gm, expand, latent_gen)
                u = (t + 1) // self.n_critic  # generator updates so far
                decay = min(self.ema, (1.0 + u) / (10.0 + u))  # short memory early on (TF's num_updates)
                _moving_average(avg_x, g_x, decay)
                _moving_average(avg_m, g_m, decay)
        plan.finish()
        self.g_x_, self.g_m_ = avg_x.eval(), avg_m.eval()
        self.encoder_ = enc

    def _generator_step(self, g_x, g_m, d_x, d_m, opt_gx, opt_gm, expand, latent_gen):
        """One update of both generators (MisGAN Eq. 4–5): reads no private row."""
        b = self.batch_size
        z = torch.randn(b, self.nz, generator=latent_gen)
        z2 = torch.randn(b, self.nz, generator=latent_gen)
        m_fake = g_m(z2)
        x_fake = g_x(z) * m_fake[:, expand]
        loss_x = -d_x(x_fake).mean()
        loss_m = -d_m(m_fake).mean()
        gx_params, gm_params = list(g_x.parameters()), list(g_m.parameters())
        grads_x = torch.autograd.grad(loss_x, gx_params, retain_graph=True)
        grads_m = torch.autograd.grad(loss_m + self.alpha * loss_x, gm_params)
        for p, g in zip(gx_params, grads_x):
            p.grad = g
        for p, g in zip(gm_params, grads_m):
            p.grad = g
        opt_gx.step()
        opt_gm.step()
        opt_gx.zero_grad(set_to_none=True)
        opt_gm.zero_grad(set_to_none=True)

    # ------------------------------------------------------------------ sampling
    def _sample_frame(self, n, rng, index):
        schema, enc = self.schema_, self.encoder_
        tg = torch.Generator()
        tg.manual_seed(int(rng.integers(0, 2**62)))
        with torch.no_grad():
            x = self.g_x_(torch.randn(n, self.nz, generator=tg)).numpy().astype(float)
            m = self.g_m_(torch.randn(n, self.nz, generator=tg)).numpy().astype(float)
        codes, values = draw_encoded(x, enc, schema, rng)
        if self.keep_missing:
            missing = rng.random(m.shape) >= m
            codes[missing] = MISSING
            for j, b in enumerate(enc.blocks):
                if not b.categorical:
                    values[b.name] = np.where(missing[:, j], np.nan, values[b.name])
        return schema.decode(codes, rng, numeric_values=values)


__all__ = ["DPMisGAN"]
