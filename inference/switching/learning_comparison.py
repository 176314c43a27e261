"""Learning the parameters of a switching model four ways, and how far the collapsed filters'
likelihoods move the posterior.

The model (``attnbayes.models.switching``, ``attnbayes.models.markov_switching``) has M modes;
theta is its free parameters, by default the ones the Gibbs sampler draws
(``GIBBS_FREE``): the transition matrix Pi and the scales c_j, r_j of the noise covariances,
Q_j = c_j Q0_j and R_j = r_j R0_j. The priors are conjugate (Frühwirth-Schnatter 2006, on
Bayesian Markov switching and switching state-space models), here ``study_priors``:

    Pi[i, :] ~ Dirichlet(alpha_i),  alpha = 1 + 9 I      (prior stay probability 10 / (M + 9))
    c_j ~ InverseGamma(3, 2),  r_j ~ InverseGamma(3, 2)  (prior mean 1: the nominal covariances)

with density b^a / Gamma(a) x^(-a-1) exp(-b / x) for InverseGamma(a, b) (shape a, rate b), the
same law in NumPyro (``InverseGamma(concentration=a, rate=b)``) and in the Gibbs sampler's
conditionals. The first mode keeps its fixed pi0 in both.

``compare_switching_learning`` learns theta from a training series y_{1:T} and scores it on a
held-out continuation y_{T+1:T+H}:

- "mle": ``fit_switching(method="mle")``, argmax_theta log p(y_{1:T} | theta) by L-BFGS, the
  likelihood a filter's (``likelihood``: "exact", "gpb2" (Kim 1994), "imm" (Blom and
  Bar-Shalom 1988), "gpb1");
- "em": ``fit_switching(method="em")`` (Dempster, Laird and Rubin 1977; Hamilton 1990);
- "nuts": NUTS (Hoffman and Gelman 2014) on ``switching_marginal_model``, the density
  p(theta) p(y_{1:T} | theta) with the states and modes integrated out by the same filter;
  point estimate the posterior mean;
- "gibbs": ``run_switching_gibbs`` (Carter and Kohn 1994; Gerlach, Carter and Kohn 2000),
  which samples p(s, x, theta | y_{1:T}) exactly, with no filter approximation; point
  estimate the posterior mean.

``posterior_shift`` runs NUTS over theta with several likelihoods on one series (and the Gibbs
sampler) under the same priors and measures each posterior against a reference: the exact
likelihood (all M^T mode histories, short series) or the Gibbs sampler (long series), each
reference run twice with different seeds to give the Monte Carlo noise floor.
"""

from __future__ import annotations

import functools
import inspect
import time
from typing import TYPE_CHECKING, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import numpyro.distributions as dist

from ... import validation
from ...models.markov_switching import (
    SwitchingSpec,
    build_params,
    default_priors,
    switching_state_space,
)
from ...models.switching import SwitchingParams, SwitchingPriors, check_params, check_priors
from ..diagnostics import diagnostics
from ..mcmc import check_sampler_sizes, run_nuts
from .gibbs import run_switching_gibbs
from .kalman import check_inputs
from .learning import (
    LIKELIHOODS,
    _check_free,
    _check_likelihood,
    _check_spec,
    _check_theta,
    _log_likelihood,
    fit_switching,
)
from .marginal import switching_marginal_model

if TYPE_CHECKING:  # pandas and xarray are imported where used
    import pandas as pd
    import xarray as xr

GIBBS_FREE = ("transition_matrix", "dynamics_cov_scale", "emission_cov_scale")
LEARNING_METHODS = ("mle", "em", "nuts", "gibbs")
POSTERIORS = (*(lik for lik in LIKELIHOODS if lik != "kalman"), "gibbs")
_SCALE_FIELDS = ("dynamics_cov_scale", "emission_cov_scale")
_NUTS_OPTIONS = (
    "num_warmup",
    "num_samples",
    "num_chains",
    "target_accept_prob",
    "max_tree_depth",
    "dense_mass",
    "init_values",
    "chain_method",
)
_GIBBS_OPTIONS = ("num_warmup", "num_samples", "num_chains", "mode_sampler", "init_modes")
_NUTS_DEFAULTS = {"num_warmup": 500, "num_samples": 1000, "num_chains": 2}
_GIBBS_DEFAULTS = {"num_warmup": 1000, "num_samples": 4000, "num_chains": 2}


# ----------------------------------------------------------------------------- priors


def study_priors(num_modes: int) -> SwitchingPriors:
    """The priors of the parameter-learning study: each row of Pi ~ Dirichlet(1 + 9 e_i)
    (concentration (M, M) = 1 + 9 I), c_j ~ InverseGamma(3, 2) and r_j ~ InverseGamma(3, 2)
    (shape, rate; prior mean 1, the nominal Q0_j and R0_j)."""
    m = validation.check_positive_int("num_modes", num_modes)
    return SwitchingPriors(
        transition_concentration=np.ones((m, m)) + 9.0 * np.eye(m),
        dynamics_cov_scale=(3.0, 2.0),
        emission_cov_scale=(3.0, 2.0),
    )


def numpyro_priors(priors: SwitchingPriors, num_modes: int) -> dict:
    """The NumPyro distributions of ``switching_marginal_model``'s sites that match the Gibbs
    sampler's conjugate ``priors``: "transition_matrix" Dirichlet(alpha_i) per row (event
    shape (M, M)), "dynamics_cov_scale" and "emission_cov_scale" InverseGamma(shape, rate)
    per mode (event shape (M,)). A field of ``priors`` that is None gives no entry."""
    m = validation.check_positive_int("num_modes", num_modes)
    priors = check_priors("priors", priors, m)
    out = {}
    if priors.transition_concentration is not None:
        conc = jnp.asarray(priors.transition_concentration, jnp.result_type(float))
        out["transition_matrix"] = dist.Dirichlet(conc).to_event(1)
    for name in _SCALE_FIELDS:
        value = getattr(priors, name)
        if value is not None:
            shape, rate = (
                jnp.broadcast_to(jnp.asarray(v, jnp.result_type(float)), (m,)) for v in value
            )
            out[name] = dist.InverseGamma(shape, rate).to_event(1)
    return out


def _prior_start(priors: SwitchingPriors, name: str, m: int) -> np.ndarray:
    """The start of the fits for a field of ``priors``, fixed by the priors alone: the prior
    mean alpha_i / sum alpha_i of each row of Pi (the mode lies on the boundary when an alpha
    is 1), the prior mode b / (a + 1) of an inverse-gamma scale (its mean b / (a - 1) is 1
    under ``study_priors``: the truth of every scale of a ``SwitchingParams`` model)."""
    if name == "transition_matrix":
        conc = np.asarray(priors.transition_concentration, float)
        return conc / conc.sum(axis=1, keepdims=True)
    shape, rate = (np.broadcast_to(np.asarray(v, float), (m,)) for v in getattr(priors, name))
    return rate / (shape + 1.0)


# ----------------------------------------------------------------------------- the problem


class _Problem(NamedTuple):
    """What every learner sees (checked).

    spec: the model with the training data (observations (T, o), inputs (T, k)) and theta at
    the start of the fits; free: the learned names; truth: the true value of each free field
    (None: unknown); priors: the conjugate priors restricted to the free fields (Gibbs);
    nuts_priors: their NumPyro laws (the other free fields get ``default_priors(spec)`` inside
    ``switching_marginal_model``); gibbs_params: the ``SwitchingParams``
    the Gibbs sampler scales (Q0_j, R0_j: free scales at 1), or None when Gibbs cannot learn
    this theta (``gibbs_reason`` says why)."""

    spec: SwitchingSpec
    free: tuple
    truth: dict | None
    priors: SwitchingPriors
    nuts_priors: dict
    gibbs_params: SwitchingParams | None
    gibbs_reason: str


def _check_observations(name: str, value, width: int) -> np.ndarray:
    arr = validation.as_float_array(name, value)
    if arr.ndim == 1 and width == 1:
        arr = arr[:, None]
    if arr.ndim != 2 or arr.shape[1] != width or arr.shape[0] < 1:
        raise ValueError(f"{name}: expected shape (T, {width}), got {tuple(arr.shape)}")
    if np.any(np.isinf(arr)):
        raise ValueError(f"{name}: contains infinite values (use NaN for a missing coordinate)")
    if np.all(np.isnan(arr)):
        raise ValueError(f"{name}: every value is missing (NaN)")
    return arr


def _problem(model, observations, inputs, truth, free, priors, start) -> _Problem:
    """Check the model, data, free set, priors and start; build the learners' common view."""
    if isinstance(model, SwitchingParams):
        if truth is not None:
            raise ValueError(
                "truth: the SwitchingParams given as model are the truth; pass truth only with "
                "a SwitchingSpec"
            )
        if observations is None:
            raise ValueError("observations: required when model is a SwitchingParams")
        model = check_params("model", model)
        obs = _check_observations("observations", observations, model.emission_matrices.shape[1])
        spec = switching_state_space(model, obs, inputs=inputs)
        truth_theta = dict(spec.theta)
    elif isinstance(model, SwitchingSpec):
        spec = _check_spec("model", model)
        if observations is not None:
            o = spec.observations.shape[1]
            obs = _check_observations("observations", observations, o)
            k = spec.inputs.shape[1]
            if inputs is None and k:
                raise ValueError(
                    f"inputs: required (shape ({obs.shape[0]}, {k})) with observations"
                )
            u = np.zeros((obs.shape[0], 0)) if inputs is None else inputs
            spec = spec._replace(observations=obs, inputs=u)
        elif inputs is not None:
            raise ValueError("inputs: pass them with observations (the spec carries its own)")
        truth_theta = None
        if truth is not None:
            if not isinstance(truth, dict):
                raise ValueError(
                    f"truth: expected a dict of parameters, got {type(truth).__name__}"
                )
            truth_theta = _check_theta("truth", spec, spec.theta | truth)
    else:
        raise ValueError(
            f"model: expected a SwitchingParams (the truth) or a SwitchingSpec, got "
            f"{type(model).__name__}"
        )
    _, obs, u = check_inputs(spec.params, spec.observations, inputs=spec.inputs)
    spec = spec._replace(observations=np.asarray(obs), inputs=np.asarray(u))
    kind = spec.structure.kind
    m = spec.structure.num_regimes
    if free is None:
        free = GIBBS_FREE if kind == "state_space" else tuple(spec.free)
    free = _check_free(spec, free)
    if priors is None:
        priors = study_priors(m)
    priors = check_priors("priors", priors, m)
    covered = (
        ("transition_matrix", *_SCALE_FIELDS) if kind == "state_space" else ("transition_matrix",)
    )
    fields = {
        "transition_matrix": "transition_concentration",
        "dynamics_cov_scale": "dynamics_cov_scale",
        "emission_cov_scale": "emission_cov_scale",
    }
    restricted = {}
    for name in covered:
        if name in free:
            value = getattr(priors, fields[name])
            if value is None:
                raise ValueError(f"priors.{fields[name]}: required, {name!r} is free")
            restricted[fields[name]] = value
    priors = SwitchingPriors(**restricted)
    # NUTS gets the conjugate laws; ``switching_marginal_model`` puts ``default_priors`` (of the
    # spec at the start below) on the other free fields
    nuts_priors = numpyro_priors(priors, m)

    theta0 = dict(spec.theta)
    if isinstance(model, SwitchingParams):  # start away from the truth, where the priors say
        for name in free:
            if name in covered:
                theta0[name] = _prior_start(priors, name, m)
    if start is not None:
        if not isinstance(start, dict):
            raise ValueError(f"start: expected a dict of parameters, got {type(start).__name__}")
        unknown = sorted(set(start) - set(free))
        if unknown:
            raise ValueError(f"start: {unknown} are not free parameters (free: {list(free)})")
        theta0 |= start
    theta0 = _check_theta("start", spec, theta0)
    spec = spec._replace(theta={n: np.asarray(v) for n, v in theta0.items()})
    missing = [n for n in free if n not in (default_priors(spec) | nuts_priors)]
    if missing:
        raise ValueError(f"free: no prior for the free parameter(s) {missing}")

    gibbs_params, reason = None, ""
    if kind != "state_space":
        reason = f"the Gibbs sampler needs a state-space model, this spec is {kind!r}"
    elif not set(free) <= set(GIBBS_FREE):
        reason = f"the Gibbs sampler draws only {list(GIBBS_FREE)}; free is {list(free)}"
    else:
        base = dict(spec.theta) | {n: np.ones(m) for n in _SCALE_FIELDS if n in free}
        gibbs_params = SwitchingParams(*(np.asarray(a) for a in build_params(spec.structure, base)))
    truth_free = None
    if truth_theta is not None:
        truth_free = {n: np.asarray(truth_theta[n], float) for n in free}
    return _Problem(spec, free, truth_free, priors, nuts_priors, gibbs_params, reason)


def _check_kwargs(name: str, value, allowed: tuple) -> dict:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ValueError(f"{name}: expected a dict of keyword arguments, got {value!r}")
    unknown = sorted(set(value) - set(allowed))
    if unknown:
        raise ValueError(f"{name}: unknown keyword(s) {unknown}; known: {list(allowed)}")
    return dict(value)


def _fit_options() -> tuple:
    skip = {"key", "observations", "init", "method", "likelihood", "inputs", "free"}
    return tuple(n for n in inspect.signature(fit_switching).parameters if n not in skip)


# ----------------------------------------------------------------------------- samplers


def _run_nuts_theta(key, p: _Problem, likelihood: str, options: dict):
    """NUTS over theta on the filter-marginalised program: (DataTree, wall seconds)."""
    start = time.perf_counter()
    tree = run_nuts(
        key,
        switching_marginal_model,
        p.spec.observations,
        spec=p.spec,
        likelihood=likelihood,
        priors=p.nuts_priors,
        inputs=p.spec.inputs,
        free=p.free,
        posterior_predictive=False,
        **options,
    )
    return tree, time.perf_counter() - start


def _run_gibbs_theta(key, p: _Problem, options: dict):
    """The Gibbs sampler under the conjugate priors: (DataTree, wall seconds)."""
    start = time.perf_counter()
    tree = run_switching_gibbs(
        key,
        p.gibbs_params,
        p.spec.observations,
        priors=p.priors,
        inputs=p.spec.inputs,
        **options,
    )
    return tree, time.perf_counter() - start


def _check_samplers(p: _Problem, names: dict, nuts_kwargs, gibbs_kwargs) -> dict:
    """Check that each posterior of ``names`` ({name: the argument that asked for it}) can be
    sampled for this problem, and the sampler options: {"nuts": ..., "gibbs": ...}."""
    t = p.spec.observations.shape[0]
    for name, where in names.items():
        if name == "gibbs":
            if p.gibbs_params is None:
                raise ValueError(f"{where}: 'gibbs' cannot sample this theta: {p.gibbs_reason}")
            continue
        try:
            _check_likelihood(name, p.spec.structure, t)
        except ValueError as err:
            raise ValueError(f"{where}: {str(err).removeprefix('likelihood: ')}") from None
    opts = {
        "nuts": _NUTS_DEFAULTS | _check_kwargs("nuts_kwargs", nuts_kwargs, _NUTS_OPTIONS),
        "gibbs": _GIBBS_DEFAULTS | _check_kwargs("gibbs_kwargs", gibbs_kwargs, _GIBBS_OPTIONS),
    }
    for what in {"gibbs" if name == "gibbs" else "nuts" for name in names}:
        check_sampler_sizes(
            opts[what]["num_samples"],
            opts[what]["num_chains"],
            names=(f"{what}_kwargs['num_samples']", f"{what}_kwargs['num_chains']"),
        )
    return opts


def _sample(key, p: _Problem, name: str, opts: dict):
    """The posterior of theta by ``name`` (a likelihood for NUTS, or "gibbs"): (DataTree, s)."""
    if name == "gibbs":
        return _run_gibbs_theta(key, p, dict(opts["gibbs"]))
    return _run_nuts_theta(key, p, name, dict(opts["nuts"]))


class ThetaPosterior(NamedTuple):
    """Draws of p(theta | y_{1:T}) from ``sample_theta_posterior``.

    Attributes:
        posterior: the sampler's DataTree (posterior group: one variable per free parameter,
            (chain, draw, *shape); Gibbs adds the states and modes).
        seconds: wall time of the run, compilation included when it compiled.
        method: the likelihood of NUTS, or "gibbs".
        free: the parameter names.
    """

    posterior: xr.DataTree
    seconds: float
    method: str
    free: tuple


def sample_theta_posterior(
    key: jax.Array,
    model: SwitchingParams | SwitchingSpec,
    observations=None,
    *,
    method: str = "imm",
    free=None,
    priors: SwitchingPriors | None = None,
    inputs=None,
    nuts_kwargs: dict | None = None,
    gibbs_kwargs: dict | None = None,
) -> ThetaPosterior:
    """Sample the posterior of theta under the conjugate priors, one of the runs of
    ``posterior_shift``:

        method = a likelihood ("exact", "gpb2", "imm", "gpb1"): NUTS over theta on
                 ``switching_marginal_model``, p(theta | y) ∝ p(theta) L_method(theta);
        method = "gibbs": the Gibbs sampler of p(s, x, theta | y) (exact), theta kept.

    The priors are ``priors`` (default ``study_priors(M)``) as Dirichlet and inverse-gamma
    laws in both samplers (``numpyro_priors``). A second call with the same model, data
    shapes and sizes reuses the compiled sampler (``run_nuts``' cache, the Gibbs sampler's
    jit), so the wall time of a repeat call excludes compilation.

    Args: as ``posterior_shift`` (``method`` one of ``POSTERIORS``).

    Returns:
        ``ThetaPosterior``.
    """
    validation.check_key("key", key)
    p = _problem(model, observations, inputs, None, free, priors, None)
    if not isinstance(method, str) or method not in POSTERIORS:
        raise ValueError(f"method: expected one of {list(POSTERIORS)}, got {method!r}")
    opts = _check_samplers(p, {method: "method"}, nuts_kwargs, gibbs_kwargs)
    tree, seconds = _sample(key, p, method, opts)
    return ThetaPosterior(tree, seconds, method, p.free)


def _draws(tree: xr.DataTree, free: tuple) -> dict:
    """{name: (chains, draws, *shape)} of the free fields."""
    return {n: np.asarray(tree["posterior"][n]) for n in free}


# ----------------------------------------------------------------------------- held-out score


_CHUNK = 128  # draws per call of the held-out kernel: one compiled program for any S


@functools.partial(jax.jit, static_argnums=(0, 1))
def _heldout_kernel(structure, likelihood, draws, fixed, obs_train, u_train, obs_all, u_all):
    """Per draw of a chunk: (log L_T(theta), log L_{T+H}(theta) - log L_T(theta))."""

    def one(free_values):
        theta = fixed | free_values
        train = _log_likelihood(structure, likelihood, theta, obs_train, u_train)
        whole = _log_likelihood(structure, likelihood, theta, obs_all, u_all)
        return train, whole - train

    return jax.vmap(one)(draws)


class _Scorer(NamedTuple):
    spec: SwitchingSpec
    free: tuple
    likelihood: str
    obs_all: np.ndarray
    u_all: np.ndarray

    def __call__(self, draws: dict):
        """(train log-likelihoods (S,), held-out log predictive densities (S,)) of S draws
        {name: (S, *shape)}, vmapped over chunks of ``_CHUNK`` draws (the last one padded)."""
        dtype = self.spec.observations.dtype
        fixed = {n: jnp.asarray(v, dtype) for n, v in self.spec.theta.items() if n not in self.free}
        data = (
            jnp.asarray(self.spec.observations),
            jnp.asarray(self.spec.inputs, dtype),
            jnp.asarray(self.obs_all),
            jnp.asarray(self.u_all, dtype),
        )
        num = next(iter(draws.values())).shape[0]
        padded = -(-num // _CHUNK) * _CHUNK
        batch = {
            n: np.concatenate([v, np.repeat(v[-1:], padded - num, axis=0)]).astype(dtype)
            for n, v in ((n, np.asarray(draws[n])) for n in self.free)
        }
        train, heldout = [], []
        for lo in range(0, padded, _CHUNK):
            chunk = {n: jnp.asarray(v[lo : lo + _CHUNK]) for n, v in batch.items()}
            a, b = _heldout_kernel(self.spec.structure, self.likelihood, chunk, fixed, *data)
            train.append(np.asarray(a))
            heldout.append(np.asarray(b))
        return np.concatenate(train)[:num], np.concatenate(heldout)[:num]


def _mixture_lpd(heldout: np.ndarray) -> float:
    """log (1/S) sum_s exp(heldout_s): the posterior predictive density of the held-out steps
    (max-shifted, so no term underflows)."""
    top = float(np.max(heldout))
    return top + float(np.log(np.mean(np.exp(heldout - top))))


# ----------------------------------------------------------------------------- comparison


class SwitchingLearningComparison(NamedTuple):
    """The result of ``compare_switching_learning``.

    Attributes:
        table: pandas DataFrame with columns method, metric, value (tidy; the metrics are in
            ``compare_switching_learning``'s docstring).
        thetas: {method: {name: array}} each method's point estimate of the free parameters
            (the posterior mean for the samplers).
        truth: {name: array} the true free parameters (None when unknown).
        results: {method: result}: a ``SwitchingFitResult`` ("mle", "em") or the sampler's
            DataTree ("nuts", "gibbs").
        free: the learned parameter names.
        likelihood: the filter of the fits, NUTS and the held-out scores.
        priors: the conjugate priors of the samplers (restricted to the free fields).
    """

    table: pd.DataFrame
    thetas: dict
    truth: dict | None
    results: dict
    free: tuple
    likelihood: str
    priors: SwitchingPriors


def compare_switching_learning(
    key: jax.Array,
    model: SwitchingParams | SwitchingSpec,
    observations,
    heldout,
    *,
    methods=None,
    truth: dict | None = None,
    free=None,
    priors: SwitchingPriors | None = None,
    likelihood: str | None = None,
    inputs=None,
    heldout_inputs=None,
    start: dict | None = None,
    mle_kwargs: dict | None = None,
    em_kwargs: dict | None = None,
    nuts_kwargs: dict | None = None,
    gibbs_kwargs: dict | None = None,
) -> SwitchingLearningComparison:
    """Learn theta from y_{1:T} by MLE, EM, NUTS and Gibbs; score each against the truth and on
    the held-out y_{T+1:T+H}; one tidy table.

    theta is the free parameters (default ``GIBBS_FREE`` for a state-space model: Pi, c_j,
    r_j, the set the Gibbs sampler draws, so the four learn the same thing; ``spec.free`` for
    an econometric spec). The samplers share the priors (default ``study_priors``: Dirichlet
    (1 + 9 I) rows, InverseGamma(3, 2) scales; ``numpyro_priors`` gives NUTS the same laws;
    free fields they do not cover, e.g. an econometric spec's means and variances, get
    ``default_priors(spec)`` at the start under NUTS). The filter ``likelihood`` L_T(theta) =
    p(y_{1:T} | theta) is that of "mle", "em", "nuts" and of every held-out score:

        mle:   theta_hat = argmax_theta log L_T(theta)
        em:    theta_hat = the limit of EM on log L_T
        nuts:  theta_s ~ p(theta | y_{1:T}) ∝ p(theta) L_T(theta),  theta_hat = mean_s theta_s
        gibbs: (s, x, theta)_s ~ p(s, x, theta | y_{1:T}) (exact),  theta_hat = mean_s theta_s

    Metrics (``table``: method, metric, value):

    - ``rmse_<name>`` = sqrt(mean_k (theta_hat_k - theta_k)^2) over the entries of each free
      field, and ``rel_error_<name>`` = ||theta_hat - theta|| / ||theta|| (Frobenius), when the
      truth is known;
    - ``heldout_lpd_per_step``: (1/H) log p(y_{T+1:T+H} | y_{1:T}), where for a point estimate
      log p(y_{T+1:T+H} | y_{1:T}, theta_hat) = log L_{T+H}(theta_hat) - log L_T(theta_hat)
      = sum_{t>T} log p(y_t | y_{1:t-1}, theta_hat), and for a sampler the posterior
      predictive log (1/S) sum_s p(y_{T+1:T+H} | y_{1:T}, theta_s) (computed vmapped over the
      S draws); the samplers also report ``heldout_lpd_plugin_per_step`` at their posterior
      mean (H counts the held-out steps with an observed coordinate);
    - ``train_log_likelihood``: log L_T(theta_hat);
    - ``wall_time_s``: the method's wall time, compilation included;
    - MLE and EM: ``converged`` (1 or 0, ``SwitchingFitResult.converged``) and ``iterations``
      (the accepted steps of the best start; EM returns its start when its first step lowers
      log L, which an approximate (collapsed) E-step can);
    - samplers: ``max_rhat_theta``, ``min_ess_bulk_theta``, ``min_ess_tail_theta`` over the
      scalar entries of theta (rank-normalised split R-hat and ESS, Vehtari et al. 2021),
      ``ess_bulk_per_s`` = min bulk ESS / wall time; NUTS ``divergences``.

    Args:
        key: a ``jax.random`` key (MLE starts, NUTS, Gibbs).
        model: the true ``SwitchingParams`` (theta is read off it: Pi, and scales 1 of
            Q_j = c_j Q0_j, R_j = r_j R0_j with Q0, R0 its covariances; MLE and EM start at
            the prior mean of each row of Pi and the prior mode b / (a + 1) of each scale, not
            at the truth), or a ``SwitchingSpec`` whose theta is the start of the fits (its data
            are the training series unless ``observations`` is given).
        observations: (T, o) y_{1:T}, NaN coordinates missing; with a spec, None for its own.
        heldout: (H, o) y_{T+1:T+H}, the continuation of the same series.
        methods: any of ``LEARNING_METHODS``; default all that apply ("gibbs" needs a
            state-space model and free within ``GIBBS_FREE``).
        truth: with a spec, {name: true value} of (at least) the free parameters; None skips
            the parameter errors.
        free: the learned names (see above).
        priors: ``SwitchingPriors`` (default ``study_priors(M)``); it must cover the free
            fields among Pi, c, r.
        likelihood: "exact", "gpb2", "imm", "gpb1" (default "imm" for a state-space model,
            "exact" (Hamilton's filter) for an econometric spec, whose collapse is exact).
        inputs: (T, k) u_{1:T} when the model has inputs.
        heldout_inputs: (H, k) u_{T+1:T+H} when the model has inputs.
        start: {name: value} overriding the start of the fits for free parameters.
        mle_kwargs, em_kwargs: for ``fit_switching`` (num_starts, start_scale, max_iterations,
            tolerance).
        nuts_kwargs: for ``run_nuts`` (num_warmup, num_samples, num_chains, target_accept_prob,
            max_tree_depth, dense_mass, init_values, chain_method); default 2 x (500 + 1000).
        gibbs_kwargs: for ``run_switching_gibbs`` (num_warmup, num_samples, num_chains,
            mode_sampler, init_modes); default 2 x (1000 + 4000).

    Returns:
        ``SwitchingLearningComparison``.

    References: Kim (1994), J. Econometrics 60, 1-22 (GPB2 and the approximate likelihood);
    Blom and Bar-Shalom (1988), IEEE Trans. Automatic Control 33, 780-783 (IMM);
    Frühwirth-Schnatter (2006), Finite Mixture and Markov Switching Models, Springer (Bayesian
    estimation of switching models, conjugate priors, Gibbs); Hoffman and Gelman (2014), JMLR
    15, 1593-1623 (NUTS).
    """
    validation.check_key("key", key)
    p = _problem(model, observations, inputs, truth, free, priors, start)
    spec = p.spec
    kind = spec.structure.kind
    if likelihood is None:
        likelihood = "imm" if kind == "state_space" else "exact"
    heldout = _check_observations("heldout", heldout, spec.observations.shape[1])
    k = spec.inputs.shape[1]
    if k == 0:
        if heldout_inputs is not None and np.size(heldout_inputs):
            raise ValueError("heldout_inputs: the model takes no inputs")
        u_heldout = np.zeros((heldout.shape[0], 0))
    else:
        if heldout_inputs is None:
            raise ValueError(f"heldout_inputs: required, shape ({heldout.shape[0]}, {k})")
        u_heldout = validation.as_float_array("heldout_inputs", heldout_inputs)
        if u_heldout.ndim == 1 and k == 1:
            u_heldout = u_heldout[:, None]
        if u_heldout.shape != (heldout.shape[0], k):
            raise ValueError(
                f"heldout_inputs: expected shape ({heldout.shape[0]}, {k}), got {u_heldout.shape}"
            )
        validation.check_finite("heldout_inputs", u_heldout)
    obs_all = np.concatenate([spec.observations, heldout.astype(spec.observations.dtype)])
    u_all = np.concatenate([spec.inputs, u_heldout.astype(spec.inputs.dtype)])
    likelihood = _check_likelihood(likelihood, spec.structure, obs_all.shape[0])
    if likelihood == "kalman":
        raise ValueError("likelihood: 'kalman' has one mode; nothing switches to learn")

    if methods is None:
        methods = tuple(m for m in LEARNING_METHODS if m != "gibbs" or p.gibbs_params is not None)
    methods = (methods,) if isinstance(methods, str) else tuple(methods)
    unknown = [m for m in methods if m not in LEARNING_METHODS]
    if unknown or not methods or len(set(methods)) != len(methods):
        raise ValueError(
            f"methods: expected distinct names from {list(LEARNING_METHODS)}, got {list(methods)}"
        )
    if "gibbs" in methods and p.gibbs_params is None:
        raise ValueError(f"methods: 'gibbs' cannot learn this theta: {p.gibbs_reason}")
    fit_options = _fit_options()
    mle_opts = _check_kwargs("mle_kwargs", mle_kwargs, fit_options)
    em_opts = _check_kwargs("em_kwargs", em_kwargs, fit_options)
    samplers = {"nuts": likelihood, "gibbs": "gibbs"}
    sampler_opts = _check_samplers(
        p, {samplers[m]: "methods" for m in methods if m in samplers}, nuts_kwargs, gibbs_kwargs
    )
    num_heldout = int(np.sum(np.any(~np.isnan(heldout), axis=-1)))
    if num_heldout == 0:
        raise ValueError("heldout: every row is missing (NaN); nothing to score")
    score = _Scorer(spec, p.free, likelihood, obs_all, u_all)
    keys = dict(zip(LEARNING_METHODS, jax.random.split(key, len(LEARNING_METHODS)), strict=True))

    rows, thetas, results = [], {}, {}
    for method in methods:
        if method in ("mle", "em"):
            opts = mle_opts if method == "mle" else em_opts
            fit = fit_switching(
                keys[method],
                None,
                spec,
                method=method,
                likelihood=likelihood,
                free=p.free,
                **opts,
            )
            results[method] = fit
            thetas[method] = {n: np.asarray(fit.theta[n]) for n in p.free}
            seconds = fit.seconds
            draws = None
            rows.append((method, "converged", float(fit.converged)))
            rows.append((method, "iterations", float(len(fit.log_likelihood) - 1)))
        else:
            tree, seconds = _sample(keys[method], p, samplers[method], sampler_opts)
            results[method] = tree
            draws = _draws(tree, p.free)
            thetas[method] = {n: v.mean(axis=(0, 1)) for n, v in draws.items()}
        rows.append((method, "wall_time_s", seconds))
        if p.truth is not None:
            for name in p.free:
                err = thetas[method][name] - p.truth[name]
                rows.append((method, f"rmse_{name}", float(np.sqrt(np.mean(err**2)))))
                norm = float(np.linalg.norm(p.truth[name]))
                rows.append((method, f"rel_error_{name}", float(np.linalg.norm(err)) / norm))
        point = {n: v[None] for n, v in thetas[method].items()}
        train_ll, plugin = score(point)
        rows.append((method, "train_log_likelihood", float(train_ll[0])))
        if draws is None:
            rows.append((method, "heldout_lpd_per_step", float(plugin[0]) / num_heldout))
            continue
        flat = {n: v.reshape(-1, *v.shape[2:]) for n, v in draws.items()}
        _, per_draw = score(flat)
        rows.append((method, "heldout_lpd_per_step", _mixture_lpd(per_draw) / num_heldout))
        rows.append((method, "heldout_lpd_plugin_per_step", float(plugin[0]) / num_heldout))
        diag = diagnostics(tree, var_names=list(p.free))
        rows.append((method, "max_rhat_theta", diag.max_r_hat))
        rows.append((method, "min_ess_bulk_theta", diag.min_ess_bulk))
        rows.append((method, "min_ess_tail_theta", diag.min_ess_tail))
        rows.append((method, "ess_bulk_per_s", diag.min_ess_bulk / seconds))
        if method == "nuts":
            rows.append((method, "divergences", float(diag.num_divergences)))
    import pandas as pd

    return SwitchingLearningComparison(
        table=pd.DataFrame(rows, columns=["method", "metric", "value"]),
        thetas=thetas,
        truth=p.truth,
        results=results,
        free=p.free,
        likelihood=likelihood,
        priors=p.priors,
    )


# ----------------------------------------------------------------------------- posterior shift


class PosteriorShift(NamedTuple):
    """The result of ``posterior_shift``.

    Attributes:
        table: pandas DataFrame, one row per (method, parameter): columns method, parameter
            (e.g. "transition_matrix[0,1]"), mean, sd, ref_mean, ref_sd, shift, shift_mcse,
            sd_ratio, sd_ratio_mcse, w1 (see ``posterior_shift``). The method
            ``"<reference>-repeat"`` is the reference run again with another seed: its rows
            are the noise floor.
        summary: pandas DataFrame, one row per run: max_abs_shift, max_shift_in_mcse
            (max |shift| / shift_mcse), max_abs_log_sd_ratio, max_w1 (NaN for the reference
            itself), seconds, min_ess_bulk, max_rhat (over the scalar entries of theta).
        posteriors: {run: DataTree} the runs (the methods, the reference and its repeat).
        seconds: {run: wall seconds} (compilation included where the run compiled).
        reference: the reference's name.
        free: the parameter names.
    """

    table: pd.DataFrame
    summary: pd.DataFrame
    posteriors: dict
    seconds: dict
    reference: str
    free: tuple


def _labels(name: str, shape: tuple) -> list[str]:
    if not shape:
        return [name]
    return [f"{name}[{','.join(str(i) for i in idx)}]" for idx in np.ndindex(shape)]


def _mcse(draws: np.ndarray, method: str) -> float:
    """The Monte Carlo standard error of the mean or sd of (chains, draws) draws (arviz_stats:
    ESS-based, Vehtari et al. 2021)."""
    import arviz_stats

    return float(arviz_stats.mcse(draws, method=method))


def _wasserstein1(a: np.ndarray, b: np.ndarray) -> float:
    """W1 between the empirical laws of two 1-D samples: the integral of |F_a - F_b|."""
    from scipy import stats

    return float(stats.wasserstein_distance(a, b))


def _shift_rows(method: str, draws: dict, ref: dict) -> list[tuple]:
    rows = []
    for name, values in draws.items():
        shape = values.shape[2:]
        a = values.reshape(*values.shape[:2], -1)
        b = ref[name].reshape(*ref[name].shape[:2], -1)
        for i, label in enumerate(_labels(name, shape)):
            x, y = a[..., i], b[..., i]
            mean, sd = float(x.mean()), float(x.std(ddof=1))
            ref_mean, ref_sd = float(y.mean()), float(y.std(ddof=1))
            if ref_sd <= 0:
                raise ValueError(f"reference: the draws of {label} do not vary (sd 0)")
            shift = (mean - ref_mean) / ref_sd
            shift_mcse = float(np.hypot(_mcse(x, "mean"), _mcse(y, "mean"))) / ref_sd
            ratio = sd / ref_sd
            ratio_mcse = ratio * float(
                np.hypot(_mcse(x, "sd") / max(sd, 1e-300), _mcse(y, "sd") / ref_sd)
            )
            w1 = _wasserstein1(x.ravel(), y.ravel()) / ref_sd
            figures = (shift, shift_mcse, ratio, ratio_mcse, w1)
            rows.append((method, label, mean, sd, ref_mean, ref_sd, *figures))
    return rows


def posterior_shift(
    key: jax.Array,
    model: SwitchingParams | SwitchingSpec,
    observations=None,
    *,
    methods=("gpb2", "imm"),
    reference: str = "exact",
    free=None,
    priors: SwitchingPriors | None = None,
    inputs=None,
    nuts_kwargs: dict | None = None,
    gibbs_kwargs: dict | None = None,
) -> PosteriorShift:
    """How far the collapsed filters' likelihoods move the posterior of theta.

    Each method gives a posterior of theta under the same priors (``study_priors`` by default;
    theta = ``GIBBS_FREE`` for a state-space model): a filter likelihood name ("exact",
    "gpb2", "imm", "gpb1") is NUTS over theta on ``switching_marginal_model`` with that
    likelihood, p_m(theta | y) ∝ p(theta) L_m(theta), and "gibbs" the Gibbs sampler of
    p(s, x, theta | y), exact. The exact posterior is "exact" (all M^T mode histories: short
    series) or "gibbs" (any length). Per scalar entry theta_k of theta and method m, against
    the reference run r:

        shift_k    = (E_m[theta_k] - E_r[theta_k]) / sd_r(theta_k)
        sd_ratio_k = sd_m(theta_k) / sd_r(theta_k)
        w1_k       = W1(p_m(theta_k), p_r(theta_k)) / sd_r(theta_k),
                     W1 = int |F_m(x) - F_r(x)| dx   (empirical CDFs of the draws)

    with Monte Carlo errors shift_mcse = sqrt(mcse_m(mean)^2 + mcse_r(mean)^2) / sd_r and
    sd_ratio_mcse = sd_ratio sqrt((mcse_m(sd) / sd_m)^2 + (mcse_r(sd) / sd_r)^2) (ESS-based
    MCSE). The reference runs twice with different seeds; the second run against the first
    ("<reference>-repeat") is the noise floor: a method whose figures are at the floor is
    indistinguishable from the exact posterior at this Monte Carlo size. Where the collapse is
    exact (F_j = 0: the state forgets its past, so GPB1, GPB2 and IMM are the exact filter)
    every method is at the floor (tested).

    Args:
        key: a ``jax.random`` key.
        model: the ``SwitchingParams`` of the model (its covariances are Q0_j, R0_j; the
            fixed parameters stay at their values) or a ``SwitchingSpec`` (its theta holds the
            fixed parameters).
        observations: (T, o) y_{1:T}; with a spec, None for its own data.
        methods: the posteriors to measure, names from ``POSTERIORS``, not the reference.
        reference: "exact" (default; refused above 2^16 histories) or "gibbs", or another
            name of ``POSTERIORS``.
        free: the parameters (default ``GIBBS_FREE`` for a state-space model, ``spec.free``
            otherwise; "gibbs" needs them within ``GIBBS_FREE``).
        priors: ``SwitchingPriors`` (default ``study_priors(M)``).
        inputs: (T, k) u_{1:T} when the model has inputs.
        nuts_kwargs: for every NUTS run (``run_nuts``: num_warmup, num_samples, num_chains,
            target_accept_prob, max_tree_depth, dense_mass, init_values, chain_method);
            default 2 x (500 + 1000).
        gibbs_kwargs: for every Gibbs run (num_warmup, num_samples, num_chains, mode_sampler,
            init_modes); default 2 x (1000 + 4000).

    Returns:
        ``PosteriorShift``.

    References: Kim (1994), J. Econometrics 60, 1-22 (GPB2); Blom and Bar-Shalom (1988), IEEE
    Trans. Automatic Control 33, 780-783 (IMM); Frühwirth-Schnatter (2006), Finite Mixture
    and Markov Switching Models, Springer (the exact posterior of a switching model, Gibbs);
    Vehtari, Gelman, Simpson, Carpenter and Bürkner (2021), Bayesian Analysis 16, 667-718
    (ESS, MCSE).
    """
    validation.check_key("key", key)
    p = _problem(model, observations, inputs, None, free, priors, None)
    methods = (methods,) if isinstance(methods, str) else tuple(methods)
    if not isinstance(reference, str) or reference not in POSTERIORS:
        raise ValueError(f"reference: expected one of {list(POSTERIORS)}, got {reference!r}")
    unknown = [m for m in methods if not isinstance(m, str) or m not in POSTERIORS]
    if unknown or not methods or len(set(methods)) != len(methods):
        raise ValueError(
            f"methods: expected distinct names from {list(POSTERIORS)}, got {list(methods)}"
        )
    if reference in methods:
        raise ValueError(
            f"methods: {reference!r} is the reference (its repeat run is the noise floor); "
            "leave it out of methods"
        )
    opts = _check_samplers(
        p, {reference: "reference"} | dict.fromkeys(methods, "methods"), nuts_kwargs, gibbs_kwargs
    )
    runs = (reference, f"{reference}-repeat", *methods)
    posteriors, seconds, draws = {}, {}, {}
    for run, run_key in zip(runs, jax.random.split(key, len(runs)), strict=True):
        name = reference if run == f"{reference}-repeat" else run
        posteriors[run], seconds[run] = _sample(run_key, p, name, opts)
        draws[run] = _draws(posteriors[run], p.free)

    rows = []
    for run in runs[1:]:
        rows += _shift_rows(run, draws[run], draws[reference])
    import pandas as pd

    columns = [
        "method",
        "parameter",
        "mean",
        "sd",
        "ref_mean",
        "ref_sd",
        "shift",
        "shift_mcse",
        "sd_ratio",
        "sd_ratio_mcse",
        "w1",
    ]
    table = pd.DataFrame(rows, columns=columns)
    summary_rows = []
    for run in runs[1:]:
        part = table[table["method"] == run]
        diag = diagnostics(posteriors[run], var_names=list(p.free))
        summary_rows.append(
            (
                run,
                float(part["shift"].abs().max()),
                float((part["shift"].abs() / part["shift_mcse"]).max()),
                float(np.abs(np.log(part["sd_ratio"])).max()),
                float(part["w1"].max()),
                seconds[run],
                diag.min_ess_bulk,
                diag.max_r_hat,
            )
        )
    ref_diag = diagnostics(posteriors[reference], var_names=list(p.free))
    summary_rows.insert(
        0,
        (
            reference,
            np.nan,
            np.nan,
            np.nan,
            np.nan,
            seconds[reference],
            ref_diag.min_ess_bulk,
            ref_diag.max_r_hat,
        ),
    )
    summary = pd.DataFrame(
        summary_rows,
        columns=[
            "method",
            "max_abs_shift",
            "max_shift_in_mcse",
            "max_abs_log_sd_ratio",
            "max_w1",
            "seconds",
            "min_ess_bulk",
            "max_rhat",
        ],
    )
    return PosteriorShift(table, summary, posteriors, seconds, reference, p.free)


__all__ = [
    "GIBBS_FREE",
    "LEARNING_METHODS",
    "POSTERIORS",
    "PosteriorShift",
    "SwitchingLearningComparison",
    "ThetaPosterior",
    "compare_switching_learning",
    "numpyro_priors",
    "posterior_shift",
    "sample_theta_posterior",
    "study_priors",
]
