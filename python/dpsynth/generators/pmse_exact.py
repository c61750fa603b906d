"""Moved to :mod:`dpsynth.generators.pmse.exact` (the pMSE mechanism's exact finite-candidate sampler);
this module re-exports its public names so that old imports keep working."""
from .pmse.exact import (BATCH, LOG_SD_RANGE, STAGE_SPREAD0, candidate_box, draw_candidates, exact_releases, scores,
                         stage_plan)

__all__ = ["candidate_box", "draw_candidates", "exact_releases", "stage_plan", "scores", "BATCH", "LOG_SD_RANGE",
           "STAGE_SPREAD0"]
