"""Learning the parameters theta of switching models, below the models and above the filters
(as dynamax keeps ``inference.py`` below its models' fit methods): the filter likelihood,
maximum likelihood, EM, forecasts, model selection, the marginalised NumPyro program and the
learning comparison. The models are ``attnbayes.models.markov_switching``'s ``SwitchingSpec``
(Markov-switching regression, MS-AR(p), MS-VAR(p), a generic ``SwitchingParams`` with free
fields).

- ``parameters``: theta's checks (``check_spec``, ``check_theta``, ``check_free``), the
  unconstrained parametrisation of the free parameters, the specs' keys for compiled kernels;
- ``likelihood``: log p(y_{1:T} | theta) by a filter (``LIKELIHOODS``: exact, GPB2, IMM, GPB1,
  Kalman), ``switching_log_likelihood``, Hamilton's (1989) filter ``hamilton_filter``;
- ``results``: ``SwitchingFitResult``, ``information_criteria`` (AIC, BIC, HQIC),
  ``expected_durations``, ``boundary_mask`` (estimates on the boundary of their support),
  ``local_optima`` and ``LocalOptima`` (the distinct end points of a multi-start fit);
- ``em``: EM (Dempster, Laird and Rubin 1977; Hamilton 1990; Shumway and Stoffer 1982; Kim
  1994), the expected complete-data log-likelihood and its M-step;
- ``mle``: ``fit_switching``, maximum likelihood by L-BFGS from several starts at once (the
  regimes' orderings covered) driven by one compiled value-and-gradient program, Newton
  polishing and Hessian standard errors from that program, or EM;
- ``forecast``: ``forecast_switching``, k-step predictive distributions with intervals;
- ``selection``: ``smoothed_regime_probabilities`` and ``select_num_regimes`` (BIC and the
  held-out predictive density);
- ``marginal``: ``switching_marginal_model``, the NumPyro program over theta alone (the
  filter's log-likelihood in one ``numpyro.factor``), for NUTS;
- ``posteriors``: the conjugate priors (``study_priors``) and the posterior of theta by NUTS or
  the Gibbs sampler (``sample_theta_posterior``);
- ``comparison``: ``compare_switching_learning``, MLE, EM, NUTS and Gibbs on one series, scored
  against the truth and on held-out data;
- ``posterior_shift``: ``posterior_shift``, how far the collapsed filters' likelihoods move the
  posterior of theta from the exact one.

``switching_log_likelihood`` and the program are traceable (jit, vmap, grad); ``fit_switching``,
``forecast_switching``, ``select_num_regimes`` and the comparisons are Python-level drivers over
compiled kernels. Checked fronts and kernels follow the package's convention
(``attnbayes.inference.switching``): ``name`` checks, ``name_unchecked`` computes
(``switching_log_likelihood`` / ``switching_log_likelihood_unchecked``).

Public API (``__all__``), one line each:

- ``switching_log_likelihood``: log p(y_{1:T} | theta) of a ``SwitchingSpec`` by a named filter.
- ``switching_log_likelihood_unchecked``: its traceable kernel, on checked arrays.
- ``filter_unchecked``: the named filter on checked arrays.
- ``hamilton_filter``: Hamilton's (1989) filter on the modes alone (econometric models).
- ``LIKELIHOODS``: the filters a likelihood can use (exact, gpb2, imm, gpb1, kalman).
- ``fit_switching``: fit by maximum likelihood (L-BFGS, several starts, Hessian SEs) or EM.
- ``METHODS``: the methods of ``fit_switching`` ("mle", "em").
- ``pairwise_mode_probabilities``: P(s_t = i, s_{t+1} = j | y_{1:T}) (Kim 1994), for EM.
- ``SwitchingFitResult``: a fitted model: theta, standard errors, trace, AIC / BIC.
- ``information_criteria``: AIC, BIC and HQIC (statsmodels' definitions).
- ``expected_durations``: the expected stay in each regime, 1 / (1 - P_ii).
- ``boundary_mask``: where an estimate lies on the boundary of its support.
- ``forecast_switching``: k-step-ahead forecasts with central intervals, by simulation.
- ``SwitchingForecast``: its predictive distributions.
- ``smoothed_regime_probabilities``: P(s_t = j | y_{1:T}) of the regimes, (T, M).
- ``select_num_regimes``: the number of regimes by BIC and held-out predictive density.
- ``RegimeSelection``: its candidates, each fitted by maximum likelihood.
- ``switching_marginal_model``: the NumPyro program over theta alone, for NUTS.
- ``numpyro_priors``: the NumPyro priors matching the Gibbs sampler's conjugate ones.
- ``study_priors``: the priors of the parameter-learning study.
- ``sample_theta_posterior``: the posterior of theta by NUTS (under a filter) or Gibbs.
- ``ThetaPosterior``: its draws.
- ``POSTERIORS``: the ways to sample it (the filters but kalman, and "gibbs").
- ``GIBBS_FREE``: the parameters the Gibbs sampler learns.
- ``compare_switching_learning``: MLE, EM, NUTS and Gibbs on one series, one tidy table.
- ``SwitchingLearningComparison``: its result.
- ``LEARNING_METHODS``: the methods it compares ("mle", "em", "nuts", "gibbs").
- ``posterior_shift``: how far the collapsed filters' likelihoods move the posterior of theta.
- ``PosteriorShift``: its result.
"""

from .comparison import LEARNING_METHODS, SwitchingLearningComparison, compare_switching_learning
from .em import pairwise_mode_probabilities
from .forecast import SwitchingForecast, forecast_switching
from .likelihood import (
    LIKELIHOODS,
    filter_unchecked,
    hamilton_filter,
    switching_log_likelihood,
    switching_log_likelihood_unchecked,
)
from .marginal import switching_marginal_model
from .mle import METHODS, fit_switching
from .posterior_shift import PosteriorShift, posterior_shift
from .posteriors import (
    GIBBS_FREE,
    POSTERIORS,
    ThetaPosterior,
    numpyro_priors,
    sample_theta_posterior,
    study_priors,
)
from .results import (
    LocalOptima,
    SwitchingFitResult,
    boundary_mask,
    expected_durations,
    information_criteria,
    local_optima,
)
from .selection import RegimeSelection, select_num_regimes, smoothed_regime_probabilities

__all__ = [
    "GIBBS_FREE",
    "LEARNING_METHODS",
    "LIKELIHOODS",
    "METHODS",
    "POSTERIORS",
    "LocalOptima",
    "PosteriorShift",
    "RegimeSelection",
    "SwitchingFitResult",
    "SwitchingForecast",
    "SwitchingLearningComparison",
    "ThetaPosterior",
    "boundary_mask",
    "compare_switching_learning",
    "expected_durations",
    "filter_unchecked",
    "fit_switching",
    "forecast_switching",
    "hamilton_filter",
    "information_criteria",
    "local_optima",
    "numpyro_priors",
    "pairwise_mode_probabilities",
    "posterior_shift",
    "sample_theta_posterior",
    "select_num_regimes",
    "smoothed_regime_probabilities",
    "study_priors",
    "switching_log_likelihood",
    "switching_log_likelihood_unchecked",
    "switching_marginal_model",
]
