"""Diagnostics shared by every reading.

- ``convergence``: rank-normalised split R-hat, bulk and tail ESS and divergences of one MCMC
  run (``diagnostics``);
- ``loo``: PSIS-LOO (``psis_loo``), arviz_stats' numbers for all observations at once;
- ``sbc``: calibration over the prior: simulation-based calibration of samplers
  (``sbc``: rank statistics and their uniformity tests) and the coverage of interval methods
  (``interval_coverage``), one compilation for all replicates.

ArviZ (arviz_stats), xarray, pandas and scipy are imported when a function runs, not with this
package.

``sbc(key, simulate, posterior, quantities, ...)`` takes any simulator ``key -> (truth, data)``,
any traceable sampler ``(key, data) -> PosteriorDraws(draws, num_divergent)``
(``attnbayes.inference.mcmc.run_nuts_unchecked`` is NumPyro's NUTS as one) and any test
quantities; failed replicates (a non-finite draw or quantity) are counted and reported, never
dropped silently. ``attnbayes.inference.calibration`` runs it on the registry's methods.

Public API (``__all__``), one line each:

- ``diagnostics``: R-hat and bulk/tail ESS of every scalar of the posterior, and divergences.
- ``Diagnostics``: its result (a table per scalar element, divergences, sizes).
- ``psis_loo``: PSIS-LOO of a DataTree's pointwise log-likelihood, all observations at once.
- ``sbc``: simulation-based calibration of a sampler (Talts et al. 2018), one compilation.
- ``PosteriorDraws``: what a sampler returns for one data set, for ``sbc``.
- ``rank_statistics``: ranks of the truth among the draws, random tie-breaking, PIT values.
- ``uniformity_tests``: chi-square and Kolmogorov-Smirnov tests of uniform PIT values.
- ``interval_coverage``: coverage of a method's central intervals over the prior, from its PIT.
- ``coverage_summary``: coverage per target and level, with two standard errors.
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
