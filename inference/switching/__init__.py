"""Switching linear-Gaussian state-space models: filters, smoothers, samplers and learning.

- ``linalg``: the shared small dense linear algebra (products, Cholesky factors, triangular
  and PSD (pseudo-)inverse solves: ``symmetrise``, ``mm``, ``chol``, ``psd_solve``, ...);
- ``kalman``: the Kalman predict/update blocks and the M = 1 filter;
- ``filters``: GPB1, GPB2 and IMM (Bar-Shalom and Li 1993; Blom and Bar-Shalom 1988), the exact
  filter over all M^T mode histories, one-step log predictive densities, and attention as one
  IMM mixing step;
- ``smoothers``: Rauch-Tung-Striebel, Kim's (1994) approximate smoother, exact smoothing;
- ``particle``: the Rao-Blackwellised particle filter (Doucet, de Freitas, Murphy and Russell 2000);
- ``gibbs_conditionals``: the conditional laws of one Gibbs sweep over modes, states and
  parameters (Carter and Kohn 1994; Gerlach, Carter and Kohn 2000; Kim and Nelson 1999);
- ``gibbs``: the Gibbs sampler itself (``switching_gibbs_init``, ``switching_gibbs_step``,
  ``run_switching_gibbs``);
- ``comparison``: every method on the same series, one tidy table;
- ``learning/``: learning the parameters of a parametrised model
  (``attnbayes.models.markov_switching``): ``learning.parameters`` (checks and transforms of
  theta), ``learning.likelihood`` (the filters' log-likelihood, Hamilton's filter),
  ``learning.results`` (``SwitchingFitResult``, AIC/BIC, durations), ``learning.em`` (EM),
  ``learning.mle`` (``fit_switching``: L-BFGS from several starts, Hessian standard errors),
  ``learning.forecast`` (k-step forecasts), ``learning.selection`` (smoothed regime
  probabilities, the number of regimes), ``learning.marginal`` (``switching_marginal_model``,
  the NumPyro program over the parameters alone, for NUTS over theta),
  ``learning.posteriors`` (conjugate priors, the posterior of theta by NUTS or Gibbs),
  ``learning.comparison`` (MLE, EM, NUTS and Gibbs on one series) and
  ``learning.posterior_shift`` (how far the collapsed likelihoods move the posterior).

The filters and smoothers are ``jax.jit``-, ``jax.vmap``- and ``jax.grad``-able over
``SwitchingParams`` and the observations: the public functions validate at the boundary
(every check on concrete values, only the static ones on tracers) and their results are
pytrees of arrays. ``filters``' module docstring says which functions are not differentiable
and why (the RBPF and the Gibbs sampler draw discrete modes; ``all_histories`` is static).

Checked fronts and unchecked kernels, one spelling in the whole package: the public function
``name`` validates its arguments on concrete values (a ``ValueError`` naming the argument,
before any tracing), then calls ``name_unchecked``, the traceable kernel with no checks, a plain
name for other modules and for use inside ``jit``/``vmap``/``grad`` (``imm_filter`` /
``imm_filter_unchecked``, ``kim_smoother_moments`` / ``kim_smoother_moments_unchecked``,
``rbpf`` / ``rbpf_unchecked``, ``switching_log_likelihood`` /
``switching_log_likelihood_unchecked``, ...).

Public API (``__all__``), one line each:

- ``kalman_filter``: the Kalman filter of a one-mode model (M = 1), as a ``FilterResult``.
- ``kalman_predict``: x_{t+1} | y_{1:t} ~ N(F m + b, F P F^T + Q).
- ``kalman_update``: condition N(m, P) on y ~ N(H x, R) (Joseph form), with log N(y; ...).
- ``check_inputs``: validate (params, observations, inputs) at a public entry point.
- ``FilterResult``: p(x_t, s_t | y_{1:t}): mode probabilities, moments, log-likelihood.
- ``gpb1_filter``: GPB1: collapse to one Gaussian, then predict and update under each mode.
- ``gpb2_filter``: GPB2: M^2 Kalman updates (i -> j), then collapse over i for each j.
- ``imm_filter``: the IMM filter: mix, then M Kalman predict-update steps.
- ``exact_filter``: the exact filter over all M^T mode histories (small T only).
- ``filter_batch``: one filter (IMM, GPB1, GPB2) on B series (B, T, o) of one model, the series
  split over a mesh's devices.
- ``imm_mixing``: IMM's mixing probabilities mu_{i|j} and predicted mode probabilities.
- ``collapse``: moment-match a Gaussian mixture to one Gaussian.
- ``all_histories``: every mode sequence (M^T, T), in lexicographic order.
- ``attention_as_imm_step``: the attention sublayer as one IMM mixing-and-collapse step.
- ``check_filter_result``: raise ``FloatingPointError`` naming the first non-finite step.
- ``one_step_log_predictive``: log p(y_t | y_{1:t-1}, theta), t = 1..T, under a filter.
- ``one_step_log_predictive_unchecked``: its traceable kernel, on checked arrays.
- ``kalman_smoother``: the Rauch-Tung-Striebel smoother of a one-mode model.
- ``kim_smoother``: Kim's (1994) approximate switching smoother over a filter's result.
- ``exact_smoother``: exact smoothing by enumeration of the mode histories (small T only).
- ``fixed_modes_smoother``: Kalman filter and RTS smoother along a given mode sequence.
- ``kim_smoother_moments``: EM's E-step moments by Kim's smoother (``SmootherMoments``).
- ``exact_smoother_moments``: the same moments exactly, by enumeration (small T only).
- ``SmootherResult``: smoothed posteriors p(x_t, s_t | y_{1:T}).
- ``SmootherMoments``: per-mode moments, pairwise mode probabilities, lag-one covariances.
- ``rbpf``: the Rao-Blackwellised particle filter (particles over modes, a Kalman filter each).
- ``systematic_resample``: systematic resampling indices.
- ``run_switching_gibbs``: Gibbs sampling of p(s, x, theta | y), as a DataTree.
- ``switching_gibbs_init``: the initial state of one chain.
- ``switching_gibbs_step``: one sweep (modes, states by FFBS, parameters) -> (state, info).
- ``SwitchingGibbsState``: one chain's state.
- ``SwitchingGibbsInfo``: what one sweep did.
- ``MODE_SAMPLERS``: how the modes are drawn ("collapsed", "conditional").
- ``compare_switching``: every method on the same series: a tidy table and each fit.
- ``SwitchingComparison``: its result (``table``, ``fits``, the reference per target).
- ``SwitchingFit``: one method's summary of its target posterior.
- ``default_switching_methods``: every method that fits the series' size.
- ``SWITCHING_METHODS``: the registry's switching methods.
- ``FILTERS``: the filters among them.
- ``SMOOTHERS``: the smoothers among them.

and the names re-exported from ``learning`` (listed there): ``LIKELIHOODS``, ``PosteriorShift``,
``SwitchingFitResult``, ``SwitchingLearningComparison``, ``compare_switching_learning``,
``expected_durations``, ``fit_switching``, ``hamilton_filter``, ``information_criteria``,
``posterior_shift``, ``smoothed_regime_probabilities``, ``study_priors``,
``switching_log_likelihood``, ``switching_marginal_model``.
"""

from .comparison import (
    FILTERS,
    SMOOTHERS,
    SWITCHING_METHODS,
    SwitchingComparison,
    SwitchingFit,
    compare_switching,
    default_switching_methods,
)
from .filters import (
    all_histories,
    attention_as_imm_step,
    check_filter_result,
    collapse,
    exact_filter,
    filter_batch,
    gpb1_filter,
    gpb2_filter,
    imm_filter,
    imm_mixing,
    one_step_log_predictive,
    one_step_log_predictive_unchecked,
)
from .gibbs import (
    MODE_SAMPLERS,
    SwitchingGibbsInfo,
    SwitchingGibbsState,
    run_switching_gibbs,
    switching_gibbs_init,
    switching_gibbs_step,
)
from .kalman import FilterResult, check_inputs, kalman_filter, kalman_predict, kalman_update
from .learning import (
    LIKELIHOODS,
    PosteriorShift,
    SwitchingFitResult,
    SwitchingLearningComparison,
    compare_switching_learning,
    expected_durations,
    fit_switching,
    hamilton_filter,
    information_criteria,
    posterior_shift,
    smoothed_regime_probabilities,
    study_priors,
    switching_log_likelihood,
    switching_marginal_model,
)
from .particle import rbpf, systematic_resample
from .smoothers import (
    SmootherMoments,
    SmootherResult,
    exact_smoother,
    exact_smoother_moments,
    fixed_modes_smoother,
    kalman_smoother,
    kim_smoother,
    kim_smoother_moments,
)

__all__ = [
    "FILTERS",
    "LIKELIHOODS",
    "MODE_SAMPLERS",
    "SMOOTHERS",
    "SWITCHING_METHODS",
    "FilterResult",
    "PosteriorShift",
    "SmootherMoments",
    "SmootherResult",
    "SwitchingComparison",
    "SwitchingFit",
    "SwitchingFitResult",
    "SwitchingGibbsInfo",
    "SwitchingGibbsState",
    "SwitchingLearningComparison",
    "all_histories",
    "attention_as_imm_step",
    "check_filter_result",
    "check_inputs",
    "collapse",
    "compare_switching",
    "compare_switching_learning",
    "default_switching_methods",
    "exact_filter",
    "exact_smoother",
    "exact_smoother_moments",
    "expected_durations",
    "filter_batch",
    "fit_switching",
    "fixed_modes_smoother",
    "gpb1_filter",
    "gpb2_filter",
    "hamilton_filter",
    "imm_filter",
    "imm_mixing",
    "information_criteria",
    "kalman_filter",
    "kalman_predict",
    "kalman_smoother",
    "kalman_update",
    "kim_smoother",
    "kim_smoother_moments",
    "one_step_log_predictive",
    "one_step_log_predictive_unchecked",
    "posterior_shift",
    "rbpf",
    "run_switching_gibbs",
    "smoothed_regime_probabilities",
    "study_priors",
    "switching_gibbs_init",
    "switching_gibbs_step",
    "switching_log_likelihood",
    "switching_marginal_model",
    "systematic_resample",
]
