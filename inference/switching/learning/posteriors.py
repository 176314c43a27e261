"""The posterior of the parameters theta of a switching model under conjugate priors, by NUTS
on the filter-marginalised program or by the Gibbs sampler: what the learning comparison and
the posterior shift share.

The model (``attnbayes.models.switching``, ``attnbayes.models.markov_switching``) has M modes;
theta is its free parameters, by default the ones the Gibbs sampler draws
(``GIBBS_FREE``, ``attnbayes.constants.STATE_SPACE_FREE``): the transition matrix Pi and the
scales c_j, r_j of the noise covariances, Q_j = c_j Q0_j and R_j = r_j R0_j. The priors are
conjugate (Frühwirth-Schnatter 2006, on Bayesian Markov switching and switching state-space
models), here ``study_priors``:

    Pi[i, :] ~ Dirichlet(alpha_i),  alpha = 1 + 9 I      (prior stay probability 10 / (M + 9))
    c_j ~ InverseGamma(3, 2),  r_j ~ InverseGamma(3, 2)  (prior mean 1: the nominal covariances)

with density b^a / Gamma(a) x^(-a-1) exp(-b / x) for InverseGamma(a, b) (shape a, rate b), the
same law in NumPyro (``InverseGamma(concentration=a, rate=b)``, ``numpyro_priors``) and in the
Gibbs sampler's conditionals. The first mode keeps its fixed pi0 in both.

- ``sample_theta_posterior``: one posterior of theta, NUTS (Hoffman and Gelman 2014) on
  ``switching_marginal_model`` with a filter's likelihood, or ``run_switching_gibbs``
  (Carter and Kohn 1994; Gerlach, Carter and Kohn 2000), exact;
- ``learning_problem`` (``LearningProblem``), ``check_samplers``, ``sample_theta``,
  ``posterior_draws``: the checked problem and the runs that ``comparison`` and
  ``posterior_shift`` build on.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import numpyro.distributions as dist

from .... import validation
from ....models.markov_switching import (
    STATE_SPACE_FREE,
    SwitchingSpec,
    build_params,
    default_priors,
    switching_state_space,
)
from ....models.switching import SwitchingParams, SwitchingPriors, check_params, check_priors
from ...mcmc import check_sampler_sizes, run_nuts
from ..gibbs import run_switching_gibbs
from ..kalman import check_inputs
from .likelihood import LIKELIHOODS, check_likelihood
from .marginal import switching_marginal_model
from .parameters import check_free, check_spec, check_theta

if TYPE_CHECKING:  # xarray is imported where used
    import xarray as xr

GIBBS_FREE = STATE_SPACE_FREE  # the parameters the conjugate Gibbs sampler draws
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


class LearningProblem(NamedTuple):
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


def check_observations(name: str, value, width: int) -> np.ndarray:
    """A series (T, ``width``) of floats (a vector when ``width`` is 1), NaN for a missing
    coordinate, no +-inf, not all missing; else a ``ValueError`` naming ``name``."""
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


def learning_problem(model, observations, inputs, truth, free, priors, start) -> LearningProblem:
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
        obs = check_observations("observations", observations, model.emission_matrices.shape[1])
        spec = switching_state_space(model, obs, inputs=inputs)
        truth_theta = dict(spec.theta)
    elif isinstance(model, SwitchingSpec):
        spec = check_spec("model", model)
        if observations is not None:
            o = spec.observations.shape[1]
            obs = check_observations("observations", observations, o)
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
            truth_theta = check_theta("truth", spec, spec.theta | truth)
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
    free = check_free(spec, free)
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
    theta0 = check_theta("start", spec, theta0)
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
    return LearningProblem(spec, free, truth_free, priors, nuts_priors, gibbs_params, reason)


def check_kwargs(name: str, value, allowed: tuple) -> dict:
    """A dict of keyword arguments among ``allowed`` (None: empty), else a ``ValueError``
    naming ``name``."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ValueError(f"{name}: expected a dict of keyword arguments, got {value!r}")
    unknown = sorted(set(value) - set(allowed))
    if unknown:
        raise ValueError(f"{name}: unknown keyword(s) {unknown}; known: {list(allowed)}")
    return dict(value)


# ----------------------------------------------------------------------------- samplers


def _run_nuts_theta(key, p: LearningProblem, likelihood: str, options: dict):
    """NUTS over theta on the filter-marginalised program: (DataTree, wall seconds)."""
    start = time.perf_counter()
    model_kwargs = {
        "spec": p.spec,
        "likelihood": likelihood,
        "priors": p.nuts_priors,
        "inputs": p.spec.inputs,
        "free": p.free,
    }
    tree = run_nuts(
        key,
        switching_marginal_model,
        (p.spec.observations,),
        model_kwargs,
        posterior_predictive=False,
        **options,
    )
    return tree, time.perf_counter() - start


def _run_gibbs_theta(key, p: LearningProblem, options: dict):
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


def check_samplers(p: LearningProblem, names: dict, nuts_kwargs, gibbs_kwargs) -> dict:
    """Check that each posterior of ``names`` ({name: the argument that asked for it}) can be
    sampled for this problem, and the sampler options: {"nuts": ..., "gibbs": ...}."""
    t = p.spec.observations.shape[0]
    for name, where in names.items():
        if name == "gibbs":
            if p.gibbs_params is None:
                raise ValueError(f"{where}: 'gibbs' cannot sample this theta: {p.gibbs_reason}")
            continue
        try:
            check_likelihood(name, p.spec.structure, t)
        except ValueError as err:
            raise ValueError(f"{where}: {str(err).removeprefix('likelihood: ')}") from None
    opts = {
        "nuts": _NUTS_DEFAULTS | check_kwargs("nuts_kwargs", nuts_kwargs, _NUTS_OPTIONS),
        "gibbs": _GIBBS_DEFAULTS | check_kwargs("gibbs_kwargs", gibbs_kwargs, _GIBBS_OPTIONS),
    }
    for what in {"gibbs" if name == "gibbs" else "nuts" for name in names}:
        check_sampler_sizes(
            opts[what]["num_samples"],
            opts[what]["num_chains"],
            names=(f"{what}_kwargs['num_samples']", f"{what}_kwargs['num_chains']"),
        )
    return opts


def sample_theta(key, p: LearningProblem, name: str, opts: dict):
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
    p = learning_problem(model, observations, inputs, None, free, priors, None)
    if not isinstance(method, str) or method not in POSTERIORS:
        raise ValueError(f"method: expected one of {list(POSTERIORS)}, got {method!r}")
    opts = check_samplers(p, {method: "method"}, nuts_kwargs, gibbs_kwargs)
    tree, seconds = sample_theta(key, p, method, opts)
    return ThetaPosterior(tree, seconds, method, p.free)


def posterior_draws(tree: xr.DataTree, free: tuple) -> dict:
    """{name: (chains, draws, *shape)} of the free fields."""
    return {n: np.asarray(tree["posterior"][n]) for n in free}


__all__ = [
    "GIBBS_FREE",
    "POSTERIORS",
    "LearningProblem",
    "ThetaPosterior",
    "check_kwargs",
    "check_observations",
    "check_samplers",
    "learning_problem",
    "numpyro_priors",
    "posterior_draws",
    "sample_theta",
    "sample_theta_posterior",
    "study_priors",
]
