"""Learning the parameters theta of switching models, below the models and above the filters
(as dynamax keeps ``inference.py`` below its models' fit methods): the filter likelihood,
maximum likelihood, EM, forecasts, model selection, the marginalised NumPyro program and the
learning comparison. The models are ``attnbayes.models.markov_switching``'s ``SwitchingSpec``
(Markov-switching regression, MS-AR(p), a generic ``SwitchingParams`` with free fields).

- ``parameters``: theta's checks (``check_spec``, ``check_theta``, ``check_free``), the
  unconstrained parametrisation of the free parameters, the specs' keys for compiled kernels;
- ``likelihood``: log p(y_{1:T} | theta) by a filter (``LIKELIHOODS``: exact, GPB2, IMM, GPB1,
  Kalman), ``switching_log_likelihood``, Hamilton's (1989) filter ``hamilton_filter``;
- ``results``: ``SwitchingFitResult``, ``information_criteria`` (AIC, BIC, HQIC),
  ``expected_durations``, ``boundary_mask`` (estimates on the boundary of their support);
- ``em``: EM (Dempster, Laird and Rubin 1977; Hamilton 1990; Shumway and Stoffer 1982; Kim
  1994), the expected complete-data log-likelihood and its M-step;
- ``mle``: ``fit_switching``, maximum likelihood by L-BFGS from several starts with Hessian
  standard errors, or EM;
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
    SwitchingFitResult,
    boundary_mask,
    expected_durations,
    information_criteria,
)
from .selection import RegimeSelection, select_num_regimes, smoothed_regime_probabilities

__all__ = [
    "GIBBS_FREE",
    "LEARNING_METHODS",
    "LIKELIHOODS",
    "METHODS",
    "POSTERIORS",
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
