"""DP-CTGAN: CTGAN (Xu, Skoularidou, Cuesta-Infante & Veeramachaneni, NeurIPS 2019, §4) with a
DP-SGD critic (Fang, Dhami & Kersting 2022; SmartNoise's ``DPCTGAN``, the seed paper's baseline,
Mohapatra et al., PVLDB 2024, §6).

CTGAN's pieces, and what changes for a provable guarantee:

1. **Mode-specific normalisation** → numerics as the schema's public bins plus the position inside
   the bin (:class:`~dpsynth.generators.dpsgd.MixedEncoder`, ``numeric="binned"``): the modes come
   from public metadata instead of a Gaussian mixture fitted to the private column.
2. **Conditional vector and training-by-sampling** (CTGAN §4.3): a discrete column j is drawn
   uniformly and a category k with probability ∝ log(1 + frequency). The frequencies are private:
   they are released once as histograms of the categorical columns over the complete rows with
   discrete Laplace noise (L1 sensitivity = number of those columns; ``cond_share`` of ε, 0.3 as in
   the seed's DPCTGAN), clipped at 0. CTGAN then picks *real rows with category k* — a
   data-dependent batch that the subsampled-Gaussian analysis does not cover (SmartNoise's DPCTGAN
   accounts as if it were uniform). Here the real batch is Poisson-sampled at rate q and each real
   row's conditional vector is its own category in a uniformly drawn column (public randomness per
   row position); only fake rows are conditioned by training-by-sampling. The critic therefore sees
   (row, condition) pairs from the data and from the generator with matching condition marginals,
   up to the log-frequency reweighting of the fakes.
3. **Critic** (PacGAN with pac = 1): an MLP on [row, cond], WGAN with weight clipping; its real
   term −D(x_i, c_i) is clipped per row and noised, its fake term over round(q·ñ) fakes (a public
   number) reads no private row (:func:`~dpsynth.generators.dpsgd.wgan_critic_step`).
4. **Generator**: [z, cond] ↦ row (softmax per one-hot part, :class:`~dpsynth.generators.misgan.DataGenerator`),
   loss −D(G(z, c), c) plus CTGAN's cross-entropy of the conditioned column (post-processing).

Only complete rows are used (the seed's baseline); their number ñ is released with ``count_share``
of ε (discrete Laplace) and fixes q = B/ñ, T and the normalisation q·ñ. Accounting: one
:class:`~dpsynth.privacy.dpsgd_accounting.SGMPlan` (opacus RDP) for the T critic steps at
ε − ε_n − ε_cond, charged before training. Neighbouring relation: add/remove one row.

Example
-------
>>> import dpsynth
>>> df, schema = dpsynth.load_dataset("adult")
>>> small = df.iloc[:800][["age", "sex", "income"]]
>>> gen = DPCTGAN(3.0, 1e-6, epochs=1, batch_size=100).fit(small, schema.subset(small.columns), seed=1)
>>> gen.sample(n=20, seed=2).datasets[0].shape, gen.ledger.total_epsilon() <= 3.0
((20, 3), True)
"""
from __future__ import annotations

import math

import numpy as np
import torch
from torch import nn

from ..privacy import laplace_counts
from .base import Generator
from .dpautogan import sample_encoded
from .dpsgd import DPSGD, SGMPlan, TorchFit, critic_real_row_loss, poisson_indices, step_rng, wgan_critic_step
from .misgan import DataGenerator, mlp
from .options import OPTION_CHECKS

CRITIC_STEP = "critic (DP-SGD)"


class DPCTGAN(TorchFit, Generator):
    """DP-CTGAN on the complete rows (see the module docstring for the privacy argument).

    Parameters: ``epsilon``, ``delta`` (required); ``epochs`` (expected passes, in critic steps),
    ``batch_size`` (expected Poisson batch B), ``nz``, ``hidden``, ``n_critic``, ``weight_clip``,
    ``clip`` (C), ``lr`` / ``lr_generator`` (Adam), ``cond_share`` (fraction of ε for the category
    frequencies), ``count_share`` (fraction of ε for the row count), ``num_threads``.
    """

    method = "dpctgan"

    def __init__(self, epsilon: float, delta: float | None = None, epochs: float = 10.0, batch_size: int = 128,
                 nz: int = 32, hidden: int = 64, n_critic: int = 5, weight_clip: float = 0.01, clip: float = 1.0,
                 lr: float = 2e-3, lr_generator: float = 2e-3, cond_share: float = 0.3, count_share: float = 0.01,
                 num_threads: int = 1):
        super().__init__(epsilon, delta)
        self._set_params(locals(), OPTION_CHECKS)
        if cond_share + count_share >= 1:
            raise ValueError("cond_share + count_share must leave part of ε for the critic (their sum < 1)")

    # ------------------------------------------------------------------ conditional vectors
    def _cond_blocks(self, enc):
        cat = [j for j, b in enumerate(enc.blocks) if b.categorical]
        return cat or [j for j, b in enumerate(enc.blocks) if b.levels]

    def _cond(self, cols: np.ndarray, cats: np.ndarray) -> torch.Tensor:
        out = np.zeros((len(cols), self.cond_width_), dtype=np.float32)
        out[np.arange(len(cols)), self.cond_offsets_[cols] + cats] = 1.0
        return torch.from_numpy(out)

    def _draw_cond(self, k: int, rng: np.random.Generator, log: bool):
        """Training-by-sampling (``log=True``: ∝ log(1 + f)) or sampling (∝ f) from the released
        frequencies: (column positions among the conditioned columns, categories)."""
        cols = rng.integers(0, len(self.cond_columns_), k)
        cats = np.empty(k, dtype=np.int64)
        for c in np.unique(cols):
            f = self.frequencies_[c]
            w = np.log1p(f) if log else f
            w = w / w.sum() if w.sum() > 0 else np.full(len(w), 1.0 / len(w))
            at = np.flatnonzero(cols == c)
            cats[at] = rng.choice(len(w), size=len(at), p=w)
        return cols, cats

    # ------------------------------------------------------------------ fitting
    def _fit_torch(self, codes, data, source):
        eps_n, eps_c = self.count_share * self.epsilon, self.cond_share * self.epsilon
        codes, data, enc, seed, noise_gen, latent_gen = self._start_on_complete_rows(codes, data, source, eps_n)
        cond = self._cond_blocks(enc)
        self.cond_columns_ = cond
        sizes = [enc.blocks[j].levels for j in cond]
        self.cond_offsets_ = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)
        self.cond_width_ = int(sum(sizes))
        hist = np.concatenate([np.bincount(codes[:, j], minlength=s) for j, s in zip(cond, sizes)]).astype(np.int64)
        noisy = laplace_counts(hist, epsilon=eps_c, sensitivity=len(cond), ledger=self.ledger, source=source,
                               step="category frequencies (conditional sampler)", relation=self.relation,
                               note=f"{len(cond)} histograms of the complete rows, one count per row in each")
        noisy = np.clip(noisy, 0, None).astype(float)
        self.frequencies_ = [noisy[o:o + s] for o, s in zip(self.cond_offsets_, sizes)]
        q = min(1.0, self.batch_size / self.n_)
        steps = int(math.ceil(self.epochs / q))
        plan = SGMPlan.calibrate(self.epsilon - eps_n - eps_c, self.delta, q, steps, self.clip)
        plan.charge(self.ledger, CRITIC_STEP, note="real term of the WGAN critic on [row, its own condition]; "
                                                   "generator steps are post-processing")
        self.plan_ = plan
        X = torch.from_numpy(enc.encode(data, codes)[0])
        n, n_fake = X.shape[0], max(1, int(round(q * self.n_)))
        gen = DataGenerator(self.nz + self.cond_width_, self.hidden, enc.blocks)
        critic = mlp([enc.width + self.cond_width_, self.hidden, self.hidden, 1], lambda: nn.LeakyReLU(0.2)).double()
        # float64 critic: the MLP path's per-row norms come from a formula; in float32 the assembled
        # clipped gradient can exceed C by a relative 1e-5
        critic_opt = DPSGD({"d": critic}, plan, noise_gen, expected_batch_size=q * self.n_, step=CRITIC_STEP,
                           row_losses=critic_real_row_loss, lr=self.lr)
        gen_opt = torch.optim.Adam(gen.parameters(), lr=self.lr_generator)
        fake_rng = np.random.default_rng(int(source.numpy.integers(0, 2**62)))  # data-independent
        row_cols = np.array(cond)
        for t in range(steps):
            idx = poisson_indices(step_rng(seed, 0, t), n, q)
            pick = step_rng(seed, 1, t).integers(0, len(cond), n)[idx]  # each row's column: public draw
            real = torch.cat([X[idx], self._cond(pick, codes[idx, row_cols[pick]])], dim=1)
            with torch.no_grad():
                fake = self._fake(gen, n_fake, fake_rng, latent_gen)[0]
            wgan_critic_step(critic_opt, critic, real.double(), fake.double(), self.weight_clip)
            if (t + 1) % self.n_critic == 0:
                fake, cols, cats, rows = self._fake(gen, n_fake, fake_rng, latent_gen)
                loss = -critic(fake.double()).mean() + self._cond_loss(rows, cols, cats, enc)
                gen_opt.zero_grad(set_to_none=True)
                loss.backward()
                gen_opt.step()
                critic.zero_grad(set_to_none=True)
        plan.finish()
        self.gan_generator_, self.encoder_ = gen.eval(), enc

    def _fake(self, gen, k, rng, latent_gen):
        cols, cats = self._draw_cond(k, rng, log=True)
        c = self._cond(cols, cats)
        rows = gen(torch.cat([torch.randn(k, self.nz, generator=latent_gen), c], dim=1))
        return torch.cat([rows, c], dim=1), cols, cats, rows

    def _cond_loss(self, rows, cols, cats, enc):
        """CTGAN's conditional loss: cross-entropy of the generated conditioned column at the category."""
        starts = np.array([enc.blocks[j].start for j in self.cond_columns_])[cols] + cats
        p = rows[torch.arange(len(cols)), torch.from_numpy(starts)]
        return -torch.log(p + 1e-8).mean()

    def _sample_frame(self, n, rng, index):
        tg = torch.Generator()
        tg.manual_seed(int(rng.integers(0, 2**62)))
        cols, cats = self._draw_cond(n, rng, log=False)
        with torch.no_grad():
            z = torch.randn(n, self.nz, generator=tg)
            out = self.gan_generator_(torch.cat([z, self._cond(cols, cats)], dim=1)).numpy().astype(float)
        return sample_encoded(out, self.encoder_, self.schema_, rng)


__all__ = ["DPCTGAN"]
