"""Parametrised switching models: Markov-switching regression, Hamilton's MS-AR(p), Krolzig's
MS-VAR(p), and a generic ``SwitchingParams`` with a few free fields.

A ``SwitchingSpec`` maps a small dictionary of named parameters theta to the full
``SwitchingParams`` of the switching state-space model (``attnbayes.models.switching``), and
carries the data in the form the filters take (observations (T, o), inputs (T, k)). The
learning routines of ``attnbayes.inference.switching`` (maximum likelihood, EM, NUTS over
theta) work on theta: ``build_params(spec.structure, theta)`` is a pure JAX function, and
``spec.support[name]`` is the NumPyro constraint of each parameter (its bijection to the reals,
``numpyro.distributions.transforms.biject_to``, is the unconstrained parametrisation).

The econometric models have no continuous latent state; they are written with a
one-dimensional dummy state x_t = 0 (F = 0, Q = 0, P0 = 0, H = 0), so the observation is

    y_t | s_t = j ~ N(d_j + D_j u_t, R_j)   (o = 1, or o series for MS-VAR)

and every filter's collapse is exact: GPB1, GPB2 and IMM all compute Hamilton's (1989) filter.

- ``markov_switching_regression``: y_t = mu_{s_t} + x_t' beta_{s_t} + e_t,
  e_t ~ N(0, sigma^2_{s_t}) (statsmodels' ``MarkovRegression`` with switching exog and
  variance): d_j = mu_j, D_j = beta_j', R_j = sigma^2_j, inputs u_t = x_t. Without an
  intercept (``trend="n"``) d_j = 0; regressors may switch one by one (statsmodels'
  ``switching_exog`` list): the switching columns' coefficients are per regime, the others
  common.
- ``markov_switching_ar``: Hamilton's (1989) MS-AR(p) with switching mean,
  y_t - mu_{s_t} = sum_k phi_k (y_{t-k} - mu_{s_{t-k}}) + e_t, e_t ~ N(0, sigma^2). Its
  modes are the tuples (s_t, s_{t-1}, ..., s_{t-p}) (M^(p+1) of them, C order: s_t most
  significant, as statsmodels orders them internally), the tuple (i_0, ..., i_p) moves to
  (j_0, i_0, ..., i_{p-1}) with probability P[i_0, j_0], the inputs are the lags
  u_t = (y_{t-1}, ..., y_{t-p}), and d_tuple = mu_{s_t} - sum_k phi_k mu_{s_{t-k}}, D = phi'.
  The first p observations are conditioned on (the likelihood is that of y_{p+1:T}). Without
  a mean (``trend="n"``) d = 0; the lags may switch one by one (``switching_ar`` list).
- ``markov_switching_var``: the MS(I)AH-VAR(p) of Krolzig (1997), y_t in R^o,
  y_t = nu_{s_t} + sum_l A_{l, s_t} y_{t-l} + e_t, e_t ~ N(0, Sigma_{s_t}): d_j = nu_j,
  D_j = [A_{1,j}, ..., A_{p,j}], R_j = Sigma_j, inputs the o p lags; the modes are the M
  regimes (the emission depends on s_t alone). Not in statsmodels (its issue 4564).
- regime labels (``regime_ordering``): by increasing intercept or mean; for MS-VAR the first
  series' intercept; without an intercept, the first switching coefficient; else the variance.
  statsmodels labels regimes by where its optimiser ends; ours are relabelled to compare.

Conventions next to statsmodels' (0.14-0.15, ``statsmodels.tsa.regime_switching``):

- transition matrix: ours is row-from, P[i, j] = P(s_t = j | s_{t-1} = i); statsmodels'
  ``regime_transition[j, i]`` is column-from, and its parameters ``p[i->j]`` are our P[i, j].
- first regime: the regime chain starts in its stationary (ergodic) distribution pi, pi P = pi
  (statsmodels' default ``initialization='steady-state'``); for MS-AR the first tuple has the
  stationary law of p + 1 consecutive regimes, pi[s_{t-p}] prod_k P[s_{t-k}, s_{t-k+1}].
  statsmodels applies one transition to pi before the first regime (two for
  ``MarkovRegression``, which it runs as an order-1 filter internally); at the stationary pi
  that changes nothing, so the likelihoods agree.
- variances: statsmodels' ``sigma2`` are variances, as here.
- time-varying transition probabilities (TVTP; Filardo 1994, Diebold, Lee and Weinbach 1994),
  statsmodels' ``exog_tvtp``: covariates z_t (k_tvtp columns, one row per endog row) and
  coefficients gamma (theta["transition_coefficients"], (M, M - 1, k_tvtp), in place of
  "transition_matrix"):

      P_t[i, j] = exp(z_t' gamma_ij) / sum_l exp(z_t' gamma_il),   gamma_{i, M-1} = 0

  (the last regime is the reference, as in statsmodels). P_t moves s_{t-1} to s_t, so the
  per-step matrices are (T, M, M), entry t computed from row t (the suite's convention for a
  time-varying transition matrix, ``attnbayes.models.switching.SwitchingParams``). The first
  regime follows statsmodels' steady-state initialisation at the first row: the ergodic law
  of P_0. For MS-AR(p) statsmodels keeps every row of ``exog_tvtp`` (endog's length) although
  it conditions on the first p observations: row r gives the move into the regime of row r, and
  the first tuple (s_p, ..., s_0) (rows of endog) has the law
  pi(s_0) prod_{r=1..p} P_r[s_{r-1}, s_r], pi the ergodic law of P_0 (checked against its
  log-likelihood: changing the first row of ``exog_tvtp`` changes it). So the inputs of an MS-AR
  spec with TVTP carry, after the p lags of y, the covariates of rows t-p..t (z_{t-p}, ...,
  z_{t-1}, z_t; time order): the first row's lags give the first tuple's law, and z_t (the
  last k_tvtp columns, as in every spec) gives P_t. The covariates ride in the spec's inputs,
  as their LAST k_tvtp columns, so every compiled kernel keeps its (observations, inputs)
  signature and a forecast takes future covariates as future inputs; the emissions give them
  zero weight.
- switching variance in MS-AR(p >= 2): here sigma^2 follows s_t. statsmodels 0.15 broadcasts a
  switching variance over the tuple axis of s_{t-p+1} instead (its p = 1 and common-variance
  models agree with ours).

The sub-package's modules:

- ``structure``: ``SwitchingStructure`` (static shape), ``SwitchingSpec`` (theta, supports, data)
  and ``build_params`` (theta to ``SwitchingParams``, pure JAX), with the regime-tuple chain of
  MS-AR, the TVTP transition matrices and the ergodic law;
- ``constructors``: ``markov_switching_regression``, ``markov_switching_ar``,
  ``markov_switching_var`` and ``switching_state_space`` (start values from the data);
- ``labels``: the one regime-labelling convention (``regime_ordering``, ``relabel_regimes``)
  and the priors that keep it (``default_priors``).

Public API (``__all__``), one line each:

- ``markov_switching_regression``: y_t = mu_{s_t} + x_t' beta_{s_t} + e_t (statsmodels'
  ``MarkovRegression``; ``trend``, per-column switching, ``exog_tvtp``).
- ``markov_switching_ar``: Hamilton's MS-AR(p) (statsmodels' ``MarkovAutoregression``).
- ``markov_switching_var``: Krolzig's MS(I)AH-VAR(p) of o series.
- ``switching_state_space``: a ``SwitchingParams`` with free fields and noise scales.
- ``SwitchingSpec``, ``SwitchingStructure``: a model's theta, supports, names and data; its
  static shape.
- ``build_params``: theta to ``SwitchingParams`` (pure JAX).
- ``coefficient_matrix``: the (M, k) coefficients of each regime from theta.
- ``regime_transition_matrix``: P, or the (T, M, M) matrices P_t with TVTP.
- ``tvtp_transition_matrices``: P_t[i, j] = softmax_j(z_t' gamma_ij), gamma_{i, M-1} = 0.
- ``ergodic_probabilities``: pi with pi P = pi.
- ``regime_tuples``, ``tuple_transition_matrix``, ``tuple_initial_probs``: MS-AR's chain of
  regime tuples (s_t, ..., s_{t-p}).
- ``regime_of_mode``, ``regime_probabilities``: a filter's modes to the regimes.
- ``regime_ordering``, ``RegimeOrdering``: the parameter that labels the regimes, stated.
- ``relabel_regimes``: theta with its regimes relabelled (an exact symmetry).
- ``per_regime_names``: an econometric spec's parameters with one entry per regime;
  ``fixed_parameters_alike``: whether relabelling leaves its fixed parameters as they are.
- ``labelling_order``, ``unlabelled``: the permutation into the suite's labelling; the spec
  whose labelling parameter is unordered (what the fits optimise over).
- ``default_priors``: weakly informative priors that keep the labels (NUTS).
- ``KINDS``, ``TRENDS``: the model kinds and trends; ``STATE_SPACE_FREE``: a state-space
  spec's default free set.
"""

from .constructors import (
    STATE_SPACE_FREE,
    markov_switching_ar,
    markov_switching_regression,
    markov_switching_var,
    switching_state_space,
)
from .labels import (
    RegimeOrdering,
    default_priors,
    fixed_parameters_alike,
    labelling_order,
    per_regime_names,
    regime_ordering,
    relabel_regimes,
    unlabelled,
)
from .structure import (
    KINDS,
    TRENDS,
    SwitchingSpec,
    SwitchingStructure,
    build_params,
    coefficient_matrix,
    ergodic_probabilities,
    regime_of_mode,
    regime_probabilities,
    regime_transition_matrix,
    regime_tuples,
    tuple_initial_probs,
    tuple_transition_matrix,
    tvtp_transition_matrices,
)

__all__ = [
    "KINDS",
    "STATE_SPACE_FREE",
    "TRENDS",
    "RegimeOrdering",
    "SwitchingSpec",
    "SwitchingStructure",
    "build_params",
    "coefficient_matrix",
    "default_priors",
    "ergodic_probabilities",
    "fixed_parameters_alike",
    "labelling_order",
    "markov_switching_ar",
    "markov_switching_regression",
    "markov_switching_var",
    "per_regime_names",
    "regime_of_mode",
    "regime_ordering",
    "regime_probabilities",
    "regime_transition_matrix",
    "regime_tuples",
    "relabel_regimes",
    "switching_state_space",
    "tuple_initial_probs",
    "tuple_transition_matrix",
    "tvtp_transition_matrices",
    "unlabelled",
]
