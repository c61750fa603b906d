"""The checks of the generators' options, one table for the names they share (scikit-learn style:
constructors store what the user passed, after these checks; see `Generator._set_params`).

An option name shared by several generators is checked by one rule (:mod:`dpsynth.validation`):
``batch_size``, the expected Poisson batch of DP-SGD, is a count everywhere; ``count_share``, the
fraction of ε for a noisy row count, is a share everywhere. A generator adds its own options, or a
different range for a shared name (AIM's ``alpha``, the column-wise ``hidden = 0``), with `checks`.
"""
from __future__ import annotations

from functools import partial

from ..validation import (check_bool, check_count, check_nonnegative_number, check_number, check_positive_float,
                          check_share)

OPTION_CHECKS = {
    # DP-SGD training (the GANs, the column-wise synthesiser)
    "epochs": check_positive_float, "ae_epochs": check_positive_float, "gan_epochs": check_positive_float,
    "batch_size": check_count, "n_critic": check_count, "num_threads": check_count,
    "nz": check_count, "latent": check_count, "hidden": check_count, "critic_hidden": check_count,
    "clip": check_positive_float, "weight_clip": check_positive_float,
    "lr": check_positive_float, "lr_generator": check_positive_float,
    "lam": check_nonnegative_number, "alpha": check_nonnegative_number,
    "mask_temperature": check_positive_float,
    # shares of ε
    "count_share": check_share, "cond_share": check_share, "first_share": check_share, "order_share": check_share,
    "refine_share": partial(check_number, low=0.0, high=1.0, high_open=True,
                            what="in [0, 1) (the share of ρ for within-bin histograms, e.g. 0.05)"),
    # model fitting and sampling
    "iters": check_count, "keep_missing": check_bool,
}


def checks(**own) -> dict:
    """The shared table with a generator's own checks added (or replacing a shared one)."""
    return {**OPTION_CHECKS, **own}


__all__ = ["OPTION_CHECKS", "checks"]
