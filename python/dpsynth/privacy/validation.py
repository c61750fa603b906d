"""The privacy parameters' checks (ε, δ, seeds, neighbouring relations) live in :mod:`dpsynth.validation`,
the one home of every parameter check; this module keeps their old import path."""
from __future__ import annotations

from ..validation import (RELATIONS, check_delta, check_epsilon, check_positive_float, check_positive_int,
                          check_relation, check_seed)

__all__ = ["RELATIONS", "check_delta", "check_epsilon", "check_positive_float", "check_positive_int",
           "check_relation", "check_seed"]
