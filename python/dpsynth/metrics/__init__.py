"""Utility metrics for synthetic data: k-way TVD, pMSE / S_pMSE, train-synthetic/test-real F1, and
`utility` (TVD and pMSE of m datasets in one table).

>>> import dpsynth
>>> df, schema = dpsynth.load_dataset("adult")
>>> dpsynth.metrics.tvd(df, df, schema, k=2)
0.0
"""
from .cart import RpartLikeTree
from .f1 import ADULT_TARGETS, BANK_TARGETS, CLASSIFIERS, PAPER_TARGETS, F1Result, f1_average, make_classifier
from .pmse import PMSEResult, pmse
from .tvd import tvd
from .utility import utility

__all__ = ["tvd", "pmse", "utility", "PMSEResult", "f1_average", "F1Result", "CLASSIFIERS", "PAPER_TARGETS", "ADULT_TARGETS",
           "BANK_TARGETS", "make_classifier", "RpartLikeTree"]
