"""Checks of privacy parameters at the API boundary (ValueError/TypeError that say what to do)."""
from __future__ import annotations

import math
import numbers

RELATIONS = ("add-remove", "replace-one")  # neighbouring relations a spend may declare


def check_relation(relation) -> str:
    """``relation`` is one of :data:`RELATIONS`."""
    if relation not in RELATIONS:
        raise ValueError(f"relation must be one of {RELATIONS}, got {relation!r}")
    return relation


def check_epsilon(epsilon, name: str = "epsilon") -> float:
    """ε must be a finite number > 0."""
    if isinstance(epsilon, bool) or not isinstance(epsilon, numbers.Real):
        raise TypeError(f"{name} must be a number, got {type(epsilon).__name__}")
    epsilon = float(epsilon)
    if math.isnan(epsilon) or math.isinf(epsilon) or epsilon <= 0:
        raise ValueError(f"{name} must be a finite number > 0 (e.g. {name}=1.0), got {epsilon}")
    return epsilon


def check_delta(delta, allow_zero: bool = True, allow_none: bool = False, name: str = "delta"):
    """δ must be in [0, 1) (or (0, 1) when ``allow_zero`` is False)."""
    if delta is None:
        if allow_none:
            return None
        raise ValueError(f"{name} is required here (e.g. {name}=1e-6, well below 1/n)")
    if isinstance(delta, bool) or not isinstance(delta, numbers.Real):
        raise TypeError(f"{name} must be a number, got {type(delta).__name__}")
    delta = float(delta)
    if math.isnan(delta) or delta < 0 or delta >= 1 or (delta == 0 and not allow_zero):
        rng = "[0, 1)" if allow_zero else "(0, 1)"
        raise ValueError(f"{name} must be in {rng} (typically below 1/n, e.g. 1e-6), got {delta}")
    return delta


def check_seed(seed):
    """``seed`` is None (OS entropy) or a non-negative integer."""
    if seed is None:
        return None
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral):
        if isinstance(seed, float) and seed.is_integer():
            seed = int(seed)
        else:
            raise TypeError(f"seed must be None or an integer, got {seed!r}")
    if seed < 0:
        raise ValueError(f"seed must be a non-negative integer, got {seed}")
    return int(seed)


def check_positive_int(value, name: str) -> int:
    """``value`` is an integer ≥ 1."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")
    return int(value)


def check_positive_float(value, name: str) -> float:
    """``value`` is a finite number > 0."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value) or value <= 0:
        raise ValueError(f"{name} must be a positive finite number, got {value!r}")
    return float(value)
