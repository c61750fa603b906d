"""Randomness for noise and sampling.

``NoiseSource(seed=None)`` (the default) draws every noise value for counts from OpenDP's exact
discrete Laplace / Gaussian samplers, which take their randomness from the operating system, and
seeds the numpy generator used for sampling synthetic rows from OS entropy.
``NoiseSource(seed=42)`` makes a run repeatable for tests and examples: counts get exact discrete
noise computed from a seeded numpy ``Generator`` (geometric differences for the discrete Laplace,
rejection from it for the discrete Gaussian; Canonne, Kamath & Steinke 2020, Alg. 1–3). Seeds are for
reproducibility, never for privacy: anyone who knows the seed can remove the noise.

Example
-------
>>> src = NoiseSource(seed=1)
>>> src.discrete_laplace(2.0, size=3).dtype
dtype('int64')
"""
from __future__ import annotations

import math
import secrets

import numpy as np

from .validation import check_seed


class NoiseSource:
    def __init__(self, seed: int | None = None):
        self.seed = check_seed(seed)
        self.exact_os_entropy = self.seed is None
        entropy = self.seed if self.seed is not None else secrets.randbits(128)
        self.numpy = np.random.default_rng(entropy)

    # -------------------------------------------------------------- discrete noise for counts
    def discrete_laplace(self, scale: float, size) -> np.ndarray:
        """Integer noise with P(x) ∝ exp(−|x|/scale)."""
        if scale <= 0:
            raise ValueError("scale must be positive")
        n = int(np.prod(size))
        if self.exact_os_entropy:
            out = _opendp_vector("laplace", scale, n)
        else:
            p = -math.expm1(-1.0 / scale)  # success probability 1 − e^{−1/scale}
            out = self.numpy.geometric(p, n) - self.numpy.geometric(p, n)
        return np.asarray(out, dtype=np.int64).reshape(size)

    def discrete_gaussian(self, sigma: float, size) -> np.ndarray:
        """Integer noise with P(x) ∝ exp(−x²/(2σ²))."""
        if sigma <= 0:
            raise ValueError("sigma must be positive")
        n = int(np.prod(size))
        if self.exact_os_entropy:
            out = _opendp_vector("gaussian", sigma, n)
        else:
            out = _dgauss_rejection(self, sigma, n)
        return np.asarray(out, dtype=np.int64).reshape(size)

    # -------------------------------------------------------------- continuous noise (float, documented)
    def laplace(self, scale: float, size) -> np.ndarray:
        """Float Laplace noise (not floating-point safe; used only where values are not integers)."""
        return self.numpy.laplace(0.0, scale, size)

    def gaussian(self, sigma: float, size) -> np.ndarray:
        """Float Gaussian noise (not floating-point safe; documented in PRIVACY.md)."""
        return self.numpy.normal(0.0, sigma, size)

    def gumbel(self, size) -> np.ndarray:
        return self.numpy.gumbel(0.0, 1.0, size)

    def torch_generator(self):
        """A torch.Generator seeded from this source (for DP-SGD / GAN noise)."""
        import torch

        g = torch.Generator()
        g.manual_seed(int(self.numpy.integers(0, 2**63 - 1)))
        return g

    def spawn(self) -> np.random.Generator:
        """An independent numpy generator for non-private randomness (e.g. sampling rows)."""
        return np.random.default_rng(self.numpy.integers(0, 2**63 - 1))


def _dgauss_rejection(src: NoiseSource, sigma: float, n: int) -> np.ndarray:
    """Discrete Gaussian by rejection from a discrete Laplace with t = ⌊σ⌋ + 1 (CKS 2020, Alg. 3)."""
    t = math.floor(sigma) + 1
    out = np.empty(0, dtype=np.int64)
    while out.size < n:
        k = max(2 * (n - out.size), 64)
        y = src.discrete_laplace(t, k)
        accept = src.numpy.random(k) < np.exp(-((np.abs(y) - sigma**2 / t) ** 2) / (2 * sigma**2))
        out = np.concatenate([out, y[accept]])
    return out[:n]


_OPENDP_CACHE: dict = {}


def _opendp_vector(kind: str, scale: float, n: int):
    """Exact integer noise from OpenDP (``make_laplace``/``make_gaussian`` on integer vectors),
    applied to a vector of zeros: the noise itself."""
    import opendp.prelude as dp

    dp.enable_features("contrib")

    key = (kind, float(scale))
    meas = _OPENDP_CACHE.get(key)
    if meas is None:
        if kind == "laplace":
            space = dp.vector_domain(dp.atom_domain(T=int)), dp.l1_distance(T=int)
            meas = dp.m.make_laplace(*space, scale=float(scale))
        else:
            space = dp.vector_domain(dp.atom_domain(T=int)), dp.l2_distance(T=float)
            meas = dp.m.make_gaussian(*space, scale=float(scale))
        if len(_OPENDP_CACHE) > 256:
            _OPENDP_CACHE.clear()
        _OPENDP_CACHE[key] = meas
    if n == 0:
        return []
    return meas([0] * n)
