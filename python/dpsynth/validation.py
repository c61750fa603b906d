"""Checks of the parameters users pass, used at every boundary (generators, `synthesize`, the ledger).

One rule per kind of value, one message style: ``"<name> must be <what>, got <value>"``. A value of
the wrong kind raises TypeError; a value of the right kind outside its range raises ValueError.

* **Integers** (counts such as ``m``, ``n``, ``batch_size``; seeds): an ``int`` or numpy integer, or a
  whole-number float such as ``2.0`` (R's numbers arrive as doubles through reticulate, so
  ``dp_synthesize(..., iters = 100)`` must work); returned as ``int``. ``True``/``False``, ``2.5``,
  NaN and strings are TypeErrors.
* **Numbers** (ε, shares, learning rates): a real number other than a bool; NaN and ±inf are
  ValueErrors unless the range allows them.
* **Flags**: exactly ``True`` or ``False``. **Choices**: one of the listed values.

Every check returns the value the caller uses, and returns the object it was given whenever that
is already of the right kind (a Python int for an integer, a Python int or float for a number):
generators store what the user passed (``get_params`` and ``sklearn.base.clone`` rely on it).

>>> check_count(3.0, "m"), check_share(0.25, "count_share")
(3, 0.25)
>>> check_count(2.5, "m")
Traceback (most recent call last):
...
TypeError: m must be a whole number (an int such as 2), got 2.5
"""
from __future__ import annotations

import math
import numbers

RELATIONS = ("add-remove", "replace-one")  # neighbouring relations a spend may declare


def _is_number(value) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def check_int(value, name: str, minimum: int | None = None, allow_none: bool = False) -> int | None:
    """``value`` is an integer (a whole float such as 2.0 is accepted, see the module docstring) of
    at least ``minimum``; None passes when ``allow_none``."""
    if value is None and allow_none:
        return None
    if isinstance(value, numbers.Integral) and not isinstance(value, bool):
        out = value if type(value) is int else int(value)
    elif _is_number(value) and math.isfinite(value) and float(value).is_integer():
        out = int(value)
    else:
        none = "None or " if allow_none else ""
        raise TypeError(f"{name} must be {none}a whole number (an int such as 2), got {value!r}")
    if minimum is not None and out < minimum:
        raise ValueError(f"{name} must be at least {minimum}, got {value!r}")
    return out


def check_count(value, name: str) -> int:
    """``value`` is an integer ≥ 1 (a number of datasets, rows, steps, units)."""
    return check_int(value, name, minimum=1)


def check_positive_int(value, name: str) -> int:
    """``value`` is an integer ≥ 1 (the same rule as :func:`check_count`)."""
    return check_int(value, name, minimum=1)


def check_seed(seed):
    """``seed`` is None (OS entropy) or a non-negative integer."""
    return check_int(seed, "seed", minimum=0, allow_none=True)


def check_number(value, name: str, low: float = -math.inf, high: float = math.inf, *, low_open: bool = False,
                 high_open: bool = False, what: str | None = None) -> float:
    """``value`` is a real number in the interval from ``low`` to ``high`` (ends excluded when
    ``low_open`` / ``high_open``); ``what`` words the range in the message (default: the interval)."""
    if not _is_number(value):
        raise TypeError(f"{name} must be a number, got {value!r}")
    v = float(value)
    inside = (v > low if low_open else v >= low) and (v < high if high_open else v <= high)
    if math.isnan(v) or not inside:
        if what is None:
            what = f"in {'(' if low_open else '['}{low:g}, {high:g}{')' if high_open else ']'}"
        raise ValueError(f"{name} must be {what}, got {value!r}")
    return value if type(value) in (int, float) else v


def check_positive_float(value, name: str) -> float:
    """``value`` is a finite number > 0."""
    return check_number(value, name, 0.0, math.inf, low_open=True, high_open=True, what="a positive finite number")


def check_nonnegative_number(value, name: str) -> float:
    """``value`` is a finite number ≥ 0."""
    return check_number(value, name, 0.0, math.inf, high_open=True, what="a non-negative finite number")


def check_share(value, name: str) -> float:
    """``value`` is a fraction of the budget strictly between 0 and 1."""
    return check_number(value, name, 0.0, 1.0, low_open=True, high_open=True,
                        what="a fraction of the budget strictly between 0 and 1")


def check_bool(value, name: str, meaning: str = "") -> bool:
    """``value`` is exactly True or False (``meaning`` says what each does, for the message)."""
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be True or False{meaning}, got {value!r}")
    return value


def check_choice(value, name: str, choices, meaning: str = ""):
    """``value`` is one of ``choices`` (``meaning`` words them for the message)."""
    if not isinstance(value, str) or value not in choices:
        listed = meaning or " or ".join(repr(c) for c in choices)
        raise ValueError(f"{name} must be {listed}, got {value!r}")
    return value


def check_relation(relation) -> str:
    """``relation`` is one of :data:`RELATIONS`."""
    if relation not in RELATIONS:
        raise ValueError(f"relation must be one of {RELATIONS}, got {relation!r}")
    return relation


def check_epsilon(epsilon, name: str = "epsilon") -> float:
    """ε must be a finite number > 0."""
    if not _is_number(epsilon):
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
    if not _is_number(delta):
        raise TypeError(f"{name} must be a number, got {type(delta).__name__}")
    delta = float(delta)
    if math.isnan(delta) or delta < 0 or delta >= 1 or (delta == 0 and not allow_zero):
        rng = "[0, 1)" if allow_zero else "(0, 1)"
        raise ValueError(f"{name} must be in {rng} (typically below 1/n, e.g. 1e-6), got {delta}")
    return delta


__all__ = ["RELATIONS", "check_int", "check_count", "check_positive_int", "check_seed", "check_number",
           "check_positive_float", "check_nonnegative_number", "check_share", "check_bool", "check_choice",
           "check_relation", "check_epsilon", "check_delta"]
