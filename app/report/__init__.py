"""The comparison report: simulate the built-in data, run every method, write one HTML page.

``write_report(out_dir)`` writes ``out_dir/<name>/`` with ``index.html`` (self-contained:
tables and PNG figures inlined), the figures as PNG files, ``results.csv`` (section, scenario,
method, metric, value) and the samplers' DataTrees as netCDF: thinned by default (at most 100
draws per chain, without the posterior predictive draws, pointwise arrays in float32; the
full report's folder is about 23 MB), in full with ``keep_trees=True`` (``attnbayes report
--keep-trees``; about 180 MB).
The page opens with a summary generated from results.csv (``summary``: which method wins on
which measure, where full Bayes and the point methods agree, where intervals under-cover),
then the sections (``SECTIONS``):

1. Data: the deconvolution scenarios (one of them with its own noise scale s_i per
   observation, ``Scenario.per_unit``) and the maneuvering target.
2. Methods side by side: ``compare_deconvolution`` and ``compare_switching`` tables
   (accuracy, calibration, time) with their figures; the learned stack ("learned", the grid
   stack, scalar data only) runs on every scalar scenario, and a 2-D one says it is left out.
3. Posterior diagnostics: R-hat, bulk/tail ESS and divergences of every sampler; trace and
   rank plots on permutation-invariant quantities; posterior predictive checks.
4. Model comparison: PSIS-LOO (``az.compare``) across numbers of atoms and between the
   finite and Dirichlet-process mixtures; leave-future-out one-step-ahead log predictive
   density across numbers of switching modes.
5. Learning the switching model's parameters: MLE, EM, NUTS and Gibbs
   (``compare_switching_learning``), and how far GPB2 and IMM move the posterior of the
   parameters.
6. Attention maps: softmax, sparsemax and entmax on the simplex; EM responsibilities.
7. Nadaraya-Watson: kernel regression as attention pooling, bandwidths by LOO-CV.
8. Learned attention: the unrolled-EM stack against EM, the NPMLE, James-Stein and NUTS, the
   link-function conjecture, attention pooling inside a forecaster.
9. Calibration over the prior: SBC ranks of the samplers, interval coverage of the others
   (the learned stack's among them), with a verdict per method.

Warnings raised while a part computes (ArviZ's on Pareto k, R-hat, ESS) are printed once each,
on one line naming the scenario and the method, and listed on the page beside that part.

The folder is assembled under a temporary name and renamed into place, so a failed run never
leaves a half-written report. Modules:

- ``scenarios``: the data sets, sizes (quick and full runs), sections and colours;
- ``runners``: simulate and fit (sections 1-5);
- ``figures``: the matplotlib figures of sections 1-7;
- ``pieces``: the pieces every section uses (notes, figure tags, tables with one number
  format per column, the warnings of a part named by scenario and method, tidy rows of
  results.csv, the DataTrees thinned or in full);
- ``summary``: the opening summary;
- ``html``: the blocks of sections 1-7, and the page;
- ``learned`` and ``calibration``: sections 8 and 9, each with its runner, figures and blocks;
- ``build``: ``write_report``, the parts on worker processes and the page assembled.
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
