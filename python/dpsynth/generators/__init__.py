"""Generator registry: method name → class and fixed options (one generator per module)."""
from __future__ import annotations

import importlib
import importlib.util

from .base import Generator

# name: (module, class, fixed options)
_REGISTRY = {
    "independent": ("dpsynth.generators.independent", "IndependentMarginals", {}),
    "privbayes": ("dpsynth.generators.privbayes", "PrivBayes", {"missing": "complete-rows"}),
    "privbayes-e": ("dpsynth.generators.privbayes", "PrivBayes", {"missing": "partial"}),
    "napsu-mq": ("dpsynth.generators.napsu", "NAPSUMQ", {}),
    "pmse": ("dpsynth.generators.pmse", "PMSEMechanism", {}),
    "dp-misgan": ("dpsynth.generators.misgan", "DPMisGAN", {}),
    "mst": ("dpsynth.generators.mst", "MST", {}),
    "aim": ("dpsynth.generators.aim", "AIM", {"missing": "complete-rows"}),
    "aim-e": ("dpsynth.generators.aim", "AIM", {"missing": "partial"}),
    "dpautogan": ("dpsynth.generators.dpautogan", "DPAutoGAN", {}),
    "dpctgan": ("dpsynth.generators.dpctgan", "DPCTGAN", {}),
    "kamino": ("dpsynth.generators.columnwise", "ColumnwiseSynth", {"impute": False}),
    "kamino-i": ("dpsynth.generators.columnwise", "ColumnwiseSynth", {"impute": True}),
    # the seed paper's vanilla strategies (§4.1) around any generator above: pass generator="privbayes", ...
    "complete-rows": ("dpsynth.missing.strategies", "CompleteRows", {}),
    "impute-random": ("dpsynth.missing.strategies", "ImputeFirst", {"imputation": "random"}),
    "impute-dp-mean": ("dpsynth.missing.strategies", "ImputeFirst", {"imputation": "dp-mean"}),
}


def generator_class(method: str):
    """The class behind ``method`` and its fixed options; ValueError for unknown or absent methods."""
    if not isinstance(method, str):
        raise TypeError(f"method must be a string such as 'privbayes-e', got {type(method).__name__}")
    key = method.lower()
    if key not in _REGISTRY:
        raise ValueError(f"unknown method {method!r}; choose one of {available_methods()}")
    module, cls, fixed = _REGISTRY[key]
    try:
        mod = importlib.import_module(module)
    except ModuleNotFoundError as err:
        if err.name == module:
            raise ValueError(f"method {method!r} is not available in this version of dpsynth; "
                             f"available: {available_methods()}") from None
        raise
    return getattr(mod, cls), dict(fixed)


def available_methods() -> list[str]:
    out = []
    for name, (module, _, _) in _REGISTRY.items():
        try:
            importlib.util.find_spec(module)
        except ModuleNotFoundError:
            continue
        if importlib.util.find_spec(module) is not None:
            out.append(name)
    return out


def make_generator(method: str, epsilon, delta=None, **options) -> Generator:
    cls, fixed = generator_class(method)
    clash = set(fixed) & set(options)
    if clash:
        raise ValueError(f"method {method!r} fixes {sorted(clash)}; do not pass them as options")
    return cls(epsilon, delta, **fixed, **options)


__all__ = ["Generator", "generator_class", "available_methods", "make_generator"]
