"""Deconvolution: z ~ nu, x | z ~ N(z, sigma^2 I), nu discrete; attention as its E-step.

- ``em``: EM with one atom per data point, whose E-step is softmax attention with
  Q K^T = I / sigma^2 and key bias -|mu_k|^2 / (2 sigma^2); the posterior mean z_hat as one
  attention step (Tweedie's denoiser); streamed for large N.
- ``kiefer_wolfowitz``: the Kiefer-Wolfowitz NPMLE of nu on a grid (Koenker and Mizera 2014), by
  mix-SQP (Kim, Carbonetto, Stephens and Anitescu 2020), SQUAREM or EM.
- ``gibbs``: the conjugate Gibbs sampler over assignments, weights and atoms, and "approximate
  Gibbs" (each draw replaced by its expectation: iterated attention with tied weights).
- ``invariants``: permutation-invariant summaries of mixture draws (CDF of nu, moments).
- ``intervals``: equal-tailed intervals of a discrete posterior.
- ``comparison``: every method on the same data, one tidy table.
"""

from .comparison import (
    METHODS,
    DeconvolutionComparison,
    MethodFit,
    compare_deconvolution,
    wasserstein1,
)
from .em import (
    EMResult,
    check_problem,
    e_step_attention,
    em_step,
    estep_memory_bytes,
    fit_em,
    initial_atoms,
    log_likelihood,
    posterior,
    posterior_mean,
    responsibilities,
)
from .gibbs import (
    ApproximateGibbsTrace,
    RelaxationStability,
    approximate_gibbs,
    relaxation_stability,
    run_gibbs,
)
from .intervals import INTERVAL_PROBS, discrete_posterior_intervals
from .invariants import INVARIANT_NAMES, add_invariants, measure_cdf
from .kiefer_wolfowitz import NPMLEResult, default_grid, npmle, npmle_gradient, npmle_posterior

__all__ = [
    "INTERVAL_PROBS",
    "INVARIANT_NAMES",
    "METHODS",
    "ApproximateGibbsTrace",
    "DeconvolutionComparison",
    "EMResult",
    "MethodFit",
    "NPMLEResult",
    "RelaxationStability",
    "add_invariants",
    "approximate_gibbs",
    "check_problem",
    "compare_deconvolution",
    "default_grid",
    "discrete_posterior_intervals",
    "e_step_attention",
    "em_step",
    "estep_memory_bytes",
    "fit_em",
    "initial_atoms",
    "log_likelihood",
    "measure_cdf",
    "npmle",
    "npmle_gradient",
    "npmle_posterior",
    "posterior",
    "posterior_mean",
    "relaxation_stability",
    "responsibilities",
    "run_gibbs",
    "wasserstein1",
]
