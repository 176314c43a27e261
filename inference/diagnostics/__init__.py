"""Diagnostics shared by every reading.

- ``convergence``: rank-normalised split R-hat, bulk and tail ESS and divergences of one MCMC
  run (``diagnostics``);
- ``loo``: PSIS-LOO (``psis_loo``), arviz_stats' numbers for all observations at once;
- ``sbc``: calibration over the prior: simulation-based calibration of samplers
  (``sbc``: rank statistics and their uniformity tests) and the coverage of interval methods
  (``interval_coverage``), one compilation for all replicates.

ArviZ (arviz_stats), xarray, pandas and scipy are imported when a function runs, not with this
package.
"""

from .convergence import Diagnostics, diagnostics
from .loo import psis_loo
from .sbc import (
    PosteriorDraws,
    coverage_summary,
    interval_coverage,
    rank_statistics,
    sbc,
    uniformity_tests,
)

__all__ = [
    "Diagnostics",
    "PosteriorDraws",
    "coverage_summary",
    "diagnostics",
    "interval_coverage",
    "psis_loo",
    "rank_statistics",
    "sbc",
    "uniformity_tests",
]
