"""The privacy side of DP-SGD: Poisson sampling, the accounted plan (σ, q, T, C) and its noisy steps.

- :func:`poisson_indices` — Poisson subsampling: each row enters a batch independently with
  probability q (variable batch size), the sampling the subsampled-Gaussian analysis assumes
  (Mironov, Talwar & Zhang 2019; Abadi et al. 2016); :func:`step_rng` gives each step of a run its
  own numpy generator (``SeedSequence([seed, *keys])``), so that runs on neighbouring data sets with
  the same seed stay coupled (a row added at the end changes only its own inclusion and its own
  fakes), which the grey-box neighbour tests use.
- :func:`released_row_count` — the number of rows a run trains on, released by the discrete Laplace
  mechanism (L1 sensitivity 1): it fixes q, T and the gradient normalisation q·ñ publicly.
- :class:`SGMPlan` — σ is calibrated with opacus's RDP accountant
  (:func:`~dpsynth.privacy.sgm_noise_multiplier`); the ledger is charged **once, before training**,
  with the accountant's (ε, δ) for exactly (σ, q, T) (:meth:`SGMPlan.charge`). Charging each step
  through :func:`~dpsynth.privacy.gaussian_values` would be wrong: it would compose T Gaussian
  mechanisms by basic composition and ignore both subsampling and RDP. Every noisy step goes
  through :meth:`SGMPlan.release`, which reports the pre-noise clipped gradient sum and its
  sensitivity C to the grey-box recorder (:func:`~dpsynth.privacy.observe_noise_input`), adds
  N(0, σ²C²) noise from a ``torch.Generator`` of the fit's :class:`~dpsynth.privacy.NoiseSource`,
  and counts the step; it refuses a step beyond T, and :meth:`SGMPlan.finish` checks that exactly T
  steps ran, so the accountant's (σ, q, T) is the loop's (σ, q, T).

Neighbouring relation: add/remove one row (the analysis of Poisson subsampling). The noise is float
noise from torch (not floating-point safe; PRIVACY.md). The optimiser, per-sample clipping and row
encoding (post-processing and the value handed to the noise) live in :mod:`dpsynth.generators.dpsgd`.

Example
-------
>>> from dpsynth.privacy import PrivacyLedger
>>> plan = SGMPlan.calibrate(epsilon=1.0, delta=1e-5, sample_rate=0.01, steps=500, clip=1.0)
>>> led = PrivacyLedger(1.0, 1e-5)
>>> plan.charge(led, "demo model (DP-SGD)")
>>> plan.epsilon <= 1.0, led.spends[0].mechanism
(True, 'subsampled Gaussian (DP-SGD)')
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np

from .calibration import sgm_epsilon, sgm_noise_multiplier
from .ledger import PrivacyLedger
from .mechanisms import laplace_counts, observe_noise_input, release_noise_output
from .validation import check_positive_float, check_positive_int

DPSGD_MECHANISM = "subsampled Gaussian (DP-SGD)"

__all__ = ["DPSGD_MECHANISM", "SGMPlan", "poisson_indices", "released_row_count", "step_rng"]


def poisson_indices(rng: np.random.Generator, n: int, q: float) -> np.ndarray:
    """Indices of a Poisson-subsampled batch: row i is included independently with probability q."""
    if not 0 < q <= 1:
        raise ValueError(f"the Poisson sampling rate must be in (0, 1], got {q}")
    return np.flatnonzero(rng.random(n) < q)


def step_rng(seed: int, *keys: int) -> np.random.Generator:
    """A numpy generator for one step of one run, from ``SeedSequence([seed, *keys])``."""
    return np.random.default_rng(np.random.SeedSequence([int(seed), *[int(k) for k in keys]]))


def released_row_count(n_rows: int, epsilon: float, ledger, source, relation: str, step: str = "row count") -> float:
    """max(1, n + discrete Laplace(1/ε)): the number of rows a DP-SGD generator trains on (e.g. the
    complete rows), released with L1 sensitivity 1 (add/remove); it fixes q, T and the gradient
    normalisation publicly."""
    noisy = laplace_counts(np.array([int(n_rows)], dtype=np.int64), epsilon=epsilon, sensitivity=1, ledger=ledger,
                           source=source, step=step, relation=relation)
    return float(max(1, int(noisy[0])))


@dataclass
class SGMPlan:
    """(σ, q, T, C) of a DP-SGD run and its (ε, δ) by opacus's RDP accountant.

    ``steps`` is the total number of noisy releases the accountant is told about; one plan may cover
    several models trained one after another with the same σ and q (adaptive composition of their
    steps is the composition of all ``steps`` subsampled Gaussian mechanisms)."""

    noise_multiplier: float
    sample_rate: float
    steps: int
    clip: float
    delta: float
    epsilon: float
    steps_taken: int = 0
    charged: bool = False

    @classmethod
    def calibrate(cls, epsilon: float, delta: float, sample_rate: float, steps: int, clip: float) -> "SGMPlan":
        """Smallest σ (RDP accountant, bisection) whose T Poisson-subsampled Gaussian steps at rate q
        are (ε, δ)-DP; ``epsilon`` of the plan is the accountant's ε for that σ (≤ the target)."""
        steps = check_positive_int(steps, "steps")
        clip = check_positive_float(clip, "clip")
        if not 0 < sample_rate <= 1:
            raise ValueError(f"sample_rate must be in (0, 1], got {sample_rate}")
        with warnings.catch_warnings():
            # opacus warns when the best RDP order is at the end of its grid: the bound is then valid
            # but not the tightest possible (it errs on the side of more noise)
            warnings.filterwarnings("ignore", message="Optimal order is the")
            sigma = sgm_noise_multiplier(epsilon, delta, sample_rate, steps)
            eps = sgm_epsilon(sigma, sample_rate, steps, delta)
        if eps > epsilon * (1 + 1e-9):  # the calibration returns the side with ε ≤ target
            raise RuntimeError(f"calibrated σ = {sigma} gives ε = {eps} above the target {epsilon}")
        return cls(float(sigma), float(sample_rate), steps, clip, float(delta), float(eps))

    def history(self) -> list[tuple[float, float, int]]:
        """The accountant's history ``[(σ, q, T)]`` (opacus ``RDPAccountant.history`` format)."""
        return [(self.noise_multiplier, self.sample_rate, self.steps)]

    def accountant_epsilon(self) -> float:
        """ε recomputed by a fresh opacus ``RDPAccountant`` from :meth:`history` at ``delta``."""
        from opacus.accountants import RDPAccountant

        acc = RDPAccountant()
        acc.history = self.history()
        return float(acc.get_epsilon(delta=self.delta))

    def charge(self, ledger: PrivacyLedger, step: str, relation: str = "add-remove", note: str = "") -> None:
        """Record the whole run in the ledger (once, before any noisy step)."""
        if self.charged:
            raise RuntimeError("this DP-SGD plan has already been charged")
        detail = (f"σ={self.noise_multiplier:.4g}, q={self.sample_rate:.4g}, T={self.steps}, C={self.clip:g} "
                  "via RDP (opacus)")
        ledger.spend(step, DPSGD_MECHANISM, epsilon=self.epsilon, delta=self.delta, sensitivity=self.clip,
                     relation=relation, norm="L2", note=f"{detail}; {note}" if note else detail)
        self.charged = True

    def release(self, clipped_sum, generator, step: str):
        """clipped_sum + N(0, (σC)²) for one DP-SGD step (torch); counts the step."""
        import torch

        if not self.charged:
            raise RuntimeError("charge the ledger (SGMPlan.charge) before the first noisy step")
        if self.steps_taken >= self.steps:
            raise RuntimeError(f"DP-SGD step {self.steps_taken + 1} exceeds the {self.steps} steps accounted for")
        token = observe_noise_input(step, "DP-SGD step", clipped_sum.reshape(-1), sensitivity=self.clip, norm="L2")
        self.steps_taken += 1
        noise = torch.randn(clipped_sum.shape, generator=generator, dtype=clipped_sum.dtype)
        return release_noise_output(token, clipped_sum + (self.noise_multiplier * self.clip) * noise)

    def finish(self) -> None:
        """Check that the loop ran exactly the accounted number of steps."""
        if self.steps_taken != self.steps:
            raise RuntimeError(f"DP-SGD ran {self.steps_taken} noisy steps but {self.steps} were accounted for")

    def summary(self) -> dict:
        return {"noise_multiplier": self.noise_multiplier, "sample_rate": self.sample_rate, "steps": self.steps,
                "clip": self.clip, "epsilon": self.epsilon, "delta": self.delta, "steps_taken": self.steps_taken}
