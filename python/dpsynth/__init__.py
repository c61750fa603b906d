"""dpsynth: differentially private synthetic data with missing values, and valid inference from it.

>>> import dpsynth
>>> df, schema = dpsynth.load_dataset("adult")
>>> res = dpsynth.synthesize(df, schema, "independent", epsilon=1.0, m=2, seed=1)
"""
from __future__ import annotations

import importlib

from .api import synthesize
from .datasets import load_dataset
from .generators import available_methods
from .privacy import PrivacyLedger
from .result import SynthResult
from .schema import Schema

from .version import __version__

# Names resolved on first use, so that importing dpsynth stays light (torch, statsmodels load lazily).
_LAZY = {
    "PrivBayes": "dpsynth.generators.privbayes",
    "NAPSUMQ": "dpsynth.generators.napsu",
    "PMSEMechanism": "dpsynth.generators.pmse",
    "DPMisGAN": "dpsynth.generators.misgan",
    "ColumnwiseSynth": "dpsynth.generators.columnwise",
    "IndependentMarginals": "dpsynth.generators.independent",
    "MST": "dpsynth.generators.mst",
    "AIM": "dpsynth.generators.aim",
    "DPAutoGAN": "dpsynth.generators.dpautogan",
    "DPCTGAN": "dpsynth.generators.dpctgan",
    "pool": "dpsynth.inference",
    "fit_pooled": "dpsynth.inference",
    "compare_fit": "dpsynth.inference",
    "UncongenialAnalysisWarning": "dpsynth.analyses",
    "PosteriorNotMixedWarning": "dpsynth.graphical.posterior",
}


def __getattr__(name):
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    if name in ("privacy", "missing", "metrics", "inference", "report", "generators", "marginals",
                "analyses", "progress"):
        return importlib.import_module(f"dpsynth.{name}")
    raise AttributeError(f"module 'dpsynth' has no attribute {name!r}")


__all__ = ["synthesize", "load_dataset", "Schema", "PrivacyLedger", "SynthResult", "available_methods",
           *_LAZY]
