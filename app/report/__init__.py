"""The comparison report: simulate the built-in data, run every method, write one HTML page.

``write_report(out_dir)`` writes ``out_dir/<name>/`` with ``index.html`` (self-contained:
tables and PNG figures inlined), the figures as PNG files, ``results.csv`` (section, scenario,
method, metric, value) and the samplers' DataTrees as netCDF. Sections:

1. Data: the deconvolution scenarios and the maneuvering target.
2. Methods side by side: ``compare_deconvolution`` and ``compare_switching`` tables
   (accuracy, calibration, time) with their figures.
3. Posterior diagnostics: R-hat, bulk/tail ESS and divergences of every sampler; trace and
   rank plots on permutation-invariant quantities; posterior predictive checks.
4. Model comparison: PSIS-LOO (``az.compare``) across numbers of atoms and between the
   finite and Dirichlet-process mixtures; leave-future-out one-step-ahead log predictive
   density across numbers of switching modes.
5. Attention maps: softmax, sparsemax and entmax on the simplex; EM responsibilities.
6. Nadaraya-Watson: kernel regression as attention pooling, bandwidths by LOO-CV.

The folder is assembled under a temporary name and renamed into place, so a failed run never
leaves a half-written report. Modules: ``scenarios`` (data sets and sizes), ``runners``
(simulate and fit), ``figures`` (matplotlib), ``html`` (tables and section blocks) and
``build`` (``write_report``).
"""

from .build import write_report
from .runners import run_scenario, run_switching
from .scenarios import (
    ATOM_COUNTS,
    REQUIRED_METHODS,
    SCENARIOS,
    SECTIONS,
    SWITCHING,
    Scenario,
    SwitchingSettings,
)

__all__ = [
    "ATOM_COUNTS",
    "REQUIRED_METHODS",
    "SCENARIOS",
    "SECTIONS",
    "SWITCHING",
    "Scenario",
    "SwitchingSettings",
    "run_scenario",
    "run_switching",
    "write_report",
]
