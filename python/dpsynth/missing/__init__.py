"""Missing data: simulators (MCAR, MAR, MNAR, MNARQ) and the vanilla strategies of the seed paper
(Mohapatra et al., PVLDB 2024, §4.1): complete rows only, and imputation first.

>>> import dpsynth
>>> df, schema = dpsynth.load_dataset("adult")
>>> masked = dpsynth.missing.ampute(df.dropna(), "MAR", p=0.2, seed=1, schema=schema)
"""
from .ampute import MECHANISMS, PRESETS, ampute, missing_rates
from .strategies import CompleteRows, ImputeFirst

__all__ = ["ampute", "MECHANISMS", "PRESETS", "missing_rates", "CompleteRows", "ImputeFirst"]
