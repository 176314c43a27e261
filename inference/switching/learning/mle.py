"""Maximum likelihood for parametrised switching models: ``fit_switching``.

L-BFGS (``attnbayes.inference.optimize.minimize_lbfgs``) on -log L(theta) / T over the
unconstrained parametrisation of the free parameters (``parameters``: ``biject_to`` of each
parameter's support), from several starts (vmapped, one compilation); standard errors from the
Hessian of log L (the observed information, mapped to the reported parametrisation by the
delta method). ``fit_switching(method="em")`` runs EM instead (``em``). The likelihood is a
filter's (``likelihood``).

``fit_switching`` is a Python-level driver over compiled kernels (validation, starts, NumPy
results), not traceable; ``switching_log_likelihood`` is (jit, vmap, grad).
"""

from __future__ import annotations

import functools
import time

import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree

from .... import validation
from ....models.markov_switching import (
    build_params,
    regime_ordering,
    relabel_regimes,
    switching_state_space,
)
from ....models.switching import SwitchingParams
from ...optimize import hessian_by_differences, minimize_lbfgs
from .em import check_em_free, fit_em_unchecked
from .likelihood import check_likelihood, switching_log_likelihood_unchecked
from .parameters import (
    check_data,
    check_free,
    check_free_values,
    check_spec,
    constrain,
    num_free,
    register_spec,
    registered_spec,
    unconstrain,
)
from .results import SwitchingFitResult, boundary_mask

METHODS = ("mle", "em")


@functools.partial(jax.jit, static_argnums=(0, 1, 2, 3))
def _mle_kernel(spec_key, free, likelihood, max_iterations, z0, theta_fixed, obs, u, tol):
    """L-BFGS from each start z0 (batched): minimise -log L / T (``minimize_lbfgs``: one
    filter gradient per loop step, so the program compiles one copy of it)."""
    spec = registered_spec(spec_key)
    num_steps = jnp.sum(jnp.any(~jnp.isnan(obs), axis=-1)).astype(obs.dtype)
    _, unravel = ravel_pytree(jax.tree.map(lambda a: a[0], z0))

    def objective(flat):
        theta = constrain(spec, free, theta_fixed, unravel(flat))
        return (
            -switching_log_likelihood_unchecked(spec.structure, likelihood, theta, obs, u)
            / num_steps
        )

    def run(z):
        res = minimize_lbfgs(
            objective, ravel_pytree(z)[0], max_iterations=max_iterations, tolerance=tol
        )
        return (
            res.x,
            -res.value * num_steps,
            res.converged,
            -res.trace * num_steps,
            res.num_iterations,
        )

    return jax.vmap(run)(z0)


@functools.partial(jax.jit, static_argnums=(0, 1, 2))
def _hessian_kernel(spec_key, free, likelihood, z, theta_fixed, obs, u):
    """Hessian of log L in the unconstrained coordinates, and the Jacobian of the reported
    (constrained, flattened) free parameters with respect to them."""
    spec = registered_spec(spec_key)
    flat, unravel = ravel_pytree(z)

    def loglik(f):
        theta = constrain(spec, free, theta_fixed, unravel(f))
        return switching_log_likelihood_unchecked(spec.structure, likelihood, theta, obs, u)

    def reported(f):
        theta = constrain(spec, free, theta_fixed, unravel(f))
        return ravel_pytree({n: theta[n] for n in free})[0]

    return hessian_by_differences(jax.grad(loglik), flat), jax.jacfwd(reported)(flat)


def _standard_errors(spec, free, likelihood, z, theta_fixed, obs, u, theta) -> tuple:
    """(standard errors, on_boundary), dicts over theta's names.

    Delta method on the interior: with B the unconstrained coordinates on the boundary of the
    support (``boundary_mask``: a scale at 0, a probability at 0 or 1), where log L is flat
    in z, and I the others, Cov(theta) = J_I (-H_II)^-1 J_I^T at the maximum: the inverse
    observed information of the model with the boundary coordinates fixed at their values
    (the estimate of a boundary parameter has no Gaussian limit; Self and Liang 1987).
    NaN for the entries that move with a boundary coordinate, and everywhere when -H_II is
    not positive definite (a parameter not identified)."""
    hess, jac = _hessian_kernel(register_spec(spec), free, likelihood, z, theta_fixed, obs, u)
    hess, jac = np.asarray(hess), np.asarray(jac)
    num_obs = int(np.sum(np.any(~np.isnan(np.asarray(obs)), axis=-1)))
    edge, on_edge = boundary_mask(spec, free, theta, -np.diagonal(hess), num_obs)
    _, unravel = ravel_pytree({n: jnp.asarray(theta[n]) for n in free})

    def per_name(flat, fill):
        out = {n: np.full(np.shape(theta[n]), fill) for n in theta}
        return out | {n: np.asarray(v) for n, v in unravel(jnp.asarray(flat)).items()}

    boundary = {n: v.astype(bool) for n, v in per_name(on_edge.astype(float), 0.0).items()}
    nan = per_name(np.full(jac.shape[0], np.nan), np.nan)
    inner = ~edge
    info = -0.5 * (hess + hess.T)[np.ix_(inner, inner)]
    if not np.all(np.isfinite(info)):
        return nan, boundary
    if info.size:
        eig = np.linalg.eigvalsh(info)
        if eig[0] <= 1e-10 * max(eig[-1], 1e-300):
            return nan, boundary
    cov = jac[:, inner] @ np.linalg.solve(info, jac[:, inner].T) if info.size else None
    se = (
        np.full(jac.shape[0], np.nan)
        if cov is None
        else np.sqrt(np.clip(np.diagonal(cov), 0, None))
    )
    se = np.where(on_edge, np.nan, se)
    return per_name(se, np.nan), boundary


def _relabel(spec, free, result: SwitchingFitResult) -> SwitchingFitResult:
    """The result in the suite's labelling (``regime_ordering``): when the modes of a
    state-space spec are exchangeable, sort them by increasing ordering parameter
    (``relabel_regimes``: theta, the standard errors and the boundary flags, the transition
    matrix's rows and columns), an exact symmetry of the likelihood."""
    name = regime_ordering(spec, free).parameter
    if spec.structure.kind != "state_space" or name is None:
        return result
    order = np.argsort(np.asarray(result.theta[name]), kind="stable")
    if np.array_equal(order, np.arange(order.size)):
        return result
    theta = relabel_regimes(spec, result.theta, order)
    return result._replace(
        params=build_params(spec.structure, theta),
        theta=theta,
        stderr=relabel_regimes(spec, result.stderr, order),
        on_boundary=relabel_regimes(spec, result.on_boundary, order),
    )


def _starts(key, spec, free, num_starts: int, scale: float):
    """num_starts unconstrained starts: the spec's theta, then perturbations of it by
    N(0, scale^2) in the unconstrained coordinates."""
    z = unconstrain(spec, free, spec.theta)
    flat, unravel = ravel_pytree(z)
    noise = scale * jax.random.normal(key, (num_starts, flat.shape[0]), flat.dtype)
    noise = noise.at[0].set(0.0)
    return jax.vmap(unravel)(flat[None] + noise)


def fit_switching(
    key,
    init,
    observations=None,
    *,
    method: str = "mle",
    likelihood: str = "imm",
    inputs=None,
    free=None,
    num_starts: int = 8,
    start_scale: float = 0.5,
    max_iterations: int = 500,
    tolerance: float = 1e-8,
) -> SwitchingFitResult:
    """Fit a switching model by maximum likelihood ("mle") or EM ("em").

    "mle": L-BFGS (``minimize_lbfgs``: backtracking line search, one filter gradient per loop
    step, so it compiles about four times faster than optax's zoom search) on -log L(theta) / T
    over the unconstrained coordinates z of the free parameters
    (theta = biject_to(support)(z)), from ``num_starts`` starts: ``init``'s theta and
    perturbations z + N(0, start_scale^2) drawn with ``key``, all run in one vmapped,
    compiled program; the best end point is returned,
    with standard errors from the Hessian of log L (central differences of its gradient,
    ``hessian_by_differences``; delta method to the reported parametrisation) on the
    coordinates inside the support: an estimate on its boundary (a noise scale at 0, a
    transition probability at 0 or 1; ``result.on_boundary``, ``boundary_mask``) gets no
    standard error, and the others are those of the model with it fixed there. Converged:
    max |gradient of log L / T| < ``tolerance``.

    Labels (both methods): the estimate follows ``regime_ordering(spec, free)``; the
    exchangeable modes of a state-space spec are sorted by their ordering parameter
    (``relabel_regimes``, an exact symmetry of the likelihood).

    "em": generalised EM (``fit_em_unchecked``): for the econometric models Hamilton's (1990)
    smoothed regime probabilities in the E-step; for a state-space model
    (``switching_state_space``) Kim's (1994) smoother over the ``likelihood`` filter (or the
    enumeration of all mode histories for "exact"), with the per-mode moments, pairwise mode
    probabilities and lag-one cross-covariances of the states (``kim_smoother_moments``);
    the M-step is the closed-form transition matrix, then L-BFGS steps on the expected
    complete-data log-likelihood. One start (``init``'s theta; ``key``, ``num_starts`` and
    ``start_scale`` are not used); no standard errors (NaN). The log-likelihood trace is
    non-decreasing where the E-step is exact (constant-state models, M = 1, "exact", F_j = 0).

    Not traceable: a Python-level driver (validation, starts, the EM loop, NumPy results) over
    compiled kernels. To ``jit``, ``vmap`` or ``grad``, use ``switching_log_likelihood`` (or
    the filters and smoothers) directly.

    The parameters come before the data: ``fit_switching(key, init, observations)``.

    Args:
        key: a ``jax.random`` key (the starts).
        init: ``SwitchingSpec`` (its theta is the first start) or ``SwitchingParams`` (a
            generic model, ``switching_state_space``).
        observations: (T, o); ``None`` (the default) for the spec's own data (then ``inputs``
            too); required with a ``SwitchingParams``.
        method: "mle" or "em".
        likelihood: "exact", "gpb2", "imm" (default), "gpb1", "kalman".
        inputs: (T, k) u_{1:T} when the model has inputs.
        free: names of the parameters to fit (default ``init.free``: the spec's identified
            set; for a generic model ``STATE_SPACE_FREE``, the transition matrix and the noise
            scales); the others stay at their values in ``init``.
        num_starts: >= 1.
        start_scale: > 0, the spread of the random starts (unconstrained units).
        max_iterations: per start.
        tolerance: > 0.

    Returns:
        ``SwitchingFitResult``.

    Raises:
        ValueError: naming the argument: a bad key, spec, method, likelihood ("exact" on a
            state-space model with M^T > 2^16 histories; "kalman" with M > 1), an unknown or
            empty ``free``, or a free parameter whose value in ``init`` lies on the boundary
            of its support (e.g. a singular ``dynamics_covs``: free ``dynamics_cov_scale``
            instead, which EM fits on the range of a singular Q0); for "em" on a state-space
            model, a free mean parameter (F_j, b_j, B_j; H_j, d_j, D_j; m0_j) of a mode whose
            covariance (Q0_j; R0_j; P0_j) is singular (``check_em_free``).
    """
    began = time.perf_counter()
    validation.check_key("key", key)
    if isinstance(init, SwitchingParams):
        if observations is None:
            raise ValueError("observations: required when init is a SwitchingParams")
        init = switching_state_space(init, observations, inputs=inputs)
    spec = check_spec("init", init)
    if not isinstance(method, str) or method not in METHODS:
        raise ValueError(f"method: expected one of {list(METHODS)}, got {method!r}")
    free = check_free(spec, free)
    check_free_values(spec, free)
    obs, u = check_data(spec, observations, inputs)
    if not validation.is_traced(obs):
        observed = int(np.sum(np.any(~np.isnan(np.asarray(obs)), axis=-1)))
        if observed < 2:
            raise ValueError(
                f"observations: {observed} observed step(s) (rows with an entry not NaN) of "
                f"{obs.shape[0]}; a fit needs at least 2 (BIC and HQIC use log T and log log T)"
            )
    likelihood = check_likelihood(likelihood, spec.structure, obs.shape[0])
    num_starts = validation.check_positive_int("num_starts", num_starts)
    max_iterations = validation.check_positive_int("max_iterations", max_iterations)
    start_scale = validation.check_positive_scalar("start_scale", start_scale)
    tolerance = validation.check_positive_scalar("tolerance", tolerance)
    if method == "em":
        check_em_free(spec, free)
        result = fit_em_unchecked(
            spec,
            obs,
            inputs=u,
            free=free,
            max_iterations=max_iterations,
            tolerance=tolerance,
            began=began,
            likelihood=likelihood,
        )
        return _relabel(spec, free, result)
    dtype = obs.dtype
    theta0 = {n: jnp.asarray(v, dtype) for n, v in spec.theta.items()}
    fixed = {n: v for n, v in theta0.items() if n not in free}
    spec_key = register_spec(spec)
    z0 = _starts(key, spec._replace(theta=theta0), free, num_starts, start_scale)
    flat, values, converged, traces, counts = _mle_kernel(
        spec_key, free, likelihood, max_iterations, z0, fixed, obs, u, tolerance
    )
    values = np.asarray(values)
    best = int(np.nanargmax(np.where(np.isfinite(values), values, -np.inf)))
    _, unravel = ravel_pytree(jax.tree.map(lambda a: a[0], z0))
    z_best = unravel(flat[best])
    theta = {n: np.asarray(v) for n, v in constrain(spec, free, fixed, z_best).items()}
    stderr, on_boundary = _standard_errors(spec, free, likelihood, z_best, fixed, obs, u, theta)
    trace = np.asarray(traces[best])[: int(counts[best]) + 1]
    result = SwitchingFitResult(
        params=build_params(spec.structure, theta),
        theta=theta,
        log_likelihood=trace,
        stderr=stderr,
        on_boundary=on_boundary,
        start_log_likelihoods=values,
        num_parameters=num_free(spec, free),
        num_observations=int(np.sum(np.any(~np.isnan(np.asarray(obs)), axis=-1))),
        converged=bool(converged[best]),
        method="mle",
        likelihood=likelihood,
        seconds=time.perf_counter() - began,
    )
    return _relabel(spec, free, result)


__all__ = ["METHODS", "fit_switching"]
