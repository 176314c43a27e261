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
import itertools
import math
import time

import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree
from numpyro.distributions import constraints

from .... import validation
from ....models.markov_switching import (
    build_params,
    fixed_parameters_alike,
    labelling_order,
    per_regime_names,
    regime_ordering,
    relabel_regimes,
    switching_state_space,
    unlabelled,
)
from ....models.switching import SwitchingParams
from ...optimize import hessian_from_batched_gradient, minimize_lbfgs_batch, refine_newton
from .em import check_em_free, fit_em_unchecked
from .likelihood import check_likelihood, switching_log_likelihood_unchecked
from .parameters import (
    built_params,
    check_data,
    check_free,
    check_free_values,
    check_spec,
    constrain,
    num_free,
    register_spec,
    registered_spec,
    unconstrained,
)
from .results import (
    SwitchingFitResult,
    boundary_mask,
    flatten,
    local_optima,
    reported_jacobian,
    unflatten,
)

METHODS = ("mle", "em")


# a series is padded with missing (NaN) rows to a bucket length, so that a series a few steps
# longer reuses the compiled programs: lengths up to 64 round up to a multiple of 16, longer
# ones to a multiple of a quarter of the power of 2 below them (at most 25% padding)
_BUCKET_MIN = 16


def bucket_length(num_steps: int) -> int:
    """The padded length of a series of ``num_steps`` rows (``fit_switching``): a multiple of
    16 up to 64, above that a multiple of 2^(floor(log2 T) - 2) (at most 25% more rows)."""
    t = int(num_steps)
    grain = max(_BUCKET_MIN, 2 ** max(math.floor(math.log2(max(t, 1))) - 2, 0))
    return max(_BUCKET_MIN, -(-t // grain) * grain)


def _padded(spec, likelihood: str, obs, u):
    """The series padded to ``bucket_length`` with missing rows (NaN observations, zero inputs):
    the likelihood of a recursive filter is unchanged (a missing row only propagates the
    regime probabilities through the transition matrix, whose rows sum to 1). Not for the
    enumeration of histories ("exact" on a state-space model), whose cost grows as M^T."""
    obs, u = np.asarray(obs), np.asarray(u)
    if likelihood == "exact" and spec.structure.kind == "state_space":
        return obs, u
    t = obs.shape[0]
    pad = bucket_length(t) - t
    if pad == 0:
        return obs, u
    obs = np.concatenate([obs, np.full((pad, obs.shape[1]), np.nan, obs.dtype)])
    u = np.concatenate([u, np.zeros((pad, u.shape[1]), u.dtype)])
    return obs, u


@functools.partial(jax.jit, static_argnums=(0, 1, 2))
def _objective_batch(spec_key, free, likelihood, points, like, theta_fixed, obs, u):
    """(-log L / T, its gradient) at each row of ``points`` (B, n), the unconstrained free
    coordinates laid out as ``like``: one compiled program per model shape and batch size,
    which drives every L-BFGS step of every start (``minimize_lbfgs_batch``) and the Hessian
    (``hessian_from_batched_gradient``)."""
    spec = registered_spec(spec_key)
    num_steps = jnp.sum(jnp.any(~jnp.isnan(obs), axis=-1)).astype(obs.dtype)
    _, unravel = ravel_pytree(like)

    def objective(flat):
        theta = constrain(spec, free, theta_fixed, unravel(flat))
        return (
            -switching_log_likelihood_unchecked(spec.structure, likelihood, theta, obs, u)
            / num_steps
        )

    return jax.vmap(jax.value_and_grad(objective))(points)


def _standard_errors(spec, free, hess, jac, theta, num_obs) -> tuple:
    """(standard errors, on_boundary, edge): dicts over theta's names, and the boolean mask of
    the unconstrained coordinates on the boundary (``boundary_mask``), from the Hessian ``hess`` of
    log L in the unconstrained coordinates z and the Jacobian ``jac`` of the reported (free,
    constrained, flattened) parameters with respect to z, at the maximum.

    Delta method on the interior: with B the unconstrained coordinates on the boundary of the
    support (``boundary_mask``: a scale at 0, a probability at 0 or 1), where log L is flat
    in z, and I the others, Cov(theta) = J_I (-H_II)^-1 J_I^T at the maximum: the inverse
    observed information of the model with the boundary coordinates fixed at their values
    (the estimate of a boundary parameter has no Gaussian limit; Self and Liang 1987).
    NaN for the entries that move with a boundary coordinate, and everywhere when -H_II is
    not positive definite (a parameter not identified)."""
    edge, on_edge = boundary_mask(spec, free, theta, -np.diagonal(hess), num_obs)
    like = {n: theta[n] for n in free}

    def per_name(flat, fill):
        out = {n: np.full(np.shape(theta[n]), fill) for n in theta}
        return out | unflatten(flat, like)

    boundary = {n: v.astype(bool) for n, v in per_name(on_edge.astype(float), 0.0).items()}
    nan = per_name(np.full(jac.shape[0], np.nan), np.nan)
    inner = ~edge
    info = -0.5 * (hess + hess.T)[np.ix_(inner, inner)]
    if not np.all(np.isfinite(info)):
        return nan, boundary, edge
    if info.size:
        try:
            eig = np.linalg.eigvalsh(info)
        except np.linalg.LinAlgError:  # LAPACK's iteration failed on an extreme matrix
            return nan, boundary, edge
        if eig[0] <= 1e-10 * max(eig[-1], 1e-300):
            return nan, boundary, edge
    cov = jac[:, inner] @ np.linalg.solve(info, jac[:, inner].T) if info.size else None
    se = (
        np.full(jac.shape[0], np.nan)
        if cov is None
        else np.sqrt(np.clip(np.diagonal(cov), 0, None))
    )
    se = np.where(on_edge, np.nan, se)
    return per_name(se, np.nan), boundary, edge


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
        params=build_params(spec.structure, theta, spec.inputs),
        theta=theta,
        stderr=relabel_regimes(spec, result.stderr, order),
        on_boundary=relabel_regimes(spec, result.on_boundary, order),
    )


# unconverged starts that end within this many nats of the best are polished by Newton steps
POLISH_NATS = 1.0

# the spread of the regimes' variances in the ordering starts: v_j = v0 exp(a_j), a_j evenly
# spaced on [-ORDERING_SPREAD, ORDERING_SPREAD] (a factor e^1.4 = 4 between the extremes)
ORDERING_SPREAD = 0.7


def _orderings(m: int) -> list:
    """The assignments of m ranked profiles to the regimes: every permutation for m <= 4, else
    the m cyclic shifts and their reversals."""
    if m <= 4:
        return [list(p) for p in itertools.permutations(range(m))]
    shifts = [list(np.roll(np.arange(m), k)) for k in range(m)]
    return shifts + [s[::-1] for s in shifts]


def ordering_starts(spec, free) -> list:
    """The deterministic starts of a fit: ``spec.theta``; for a Markov-switching regression
    or MS-AR model with a free switching variance that does not itself label the regimes, one
    start per assignment of spread variances to the regimes (``ORDERING_SPREAD``; every
    permutation for M <= 4), for an MS-VAR the same with its covariances scaled; when fixed
    per-regime parameters differ between regimes (``fixed_parameters_alike``), one start per
    pairing of the free per-regime parameters with them; and, for those models with a free
    transition matrix, each of these again with the uniform
    transition matrix P_ij = 1/M (statsmodels' start) instead of the persistent one.

    Why: the regimes are labelled by increasing intercept / mean (``regime_ordering``), but
    which regime is the volatile one is not; from equal variances a gradient method settles
    into whichever pairing the first steps favour. And a persistent start (stay with
    probability 0.9) misses optima whose high-mean regime is short-lived: on statsmodels'
    Areturns case (switching variance, published optimum -745.7977 with P = [[0.75, 0.25],
    [0.68, 0.32]]) the persistent starts all end at -746.362."""
    starts = [dict(spec.theta)]
    s = spec.structure
    if s.kind not in ("regression", "ar", "var") or s.num_regimes == 1:
        return starts
    noise = "covariances" if s.kind == "var" else "variances"
    labelled = spec.support[noise] is constraints.positive_ordered_vector
    if s.switching_variance and noise in free and not labelled:
        base = np.asarray(spec.theta[noise], float)
        spread = np.exp(np.linspace(-ORDERING_SPREAD, ORDERING_SPREAD, s.num_regimes))
        for perm in _orderings(s.num_regimes):
            scale = spread[perm].reshape(-1, *([1] * (base.ndim - 1)))  # per regime
            starts.append(dict(spec.theta) | {noise: base * scale})
    moving = [n for n in per_regime_names(spec) if n in free]
    if moving and not fixed_parameters_alike(spec, free):
        # fixed per-regime parameters tell the regimes apart: each pairing of the free ones
        # with them is another basin (e.g. which fixed variance goes with the high intercept)
        for perm in _orderings(s.num_regimes)[1:]:
            starts.append(dict(spec.theta) | {n: np.asarray(spec.theta[n])[perm] for n in moving})
    if "transition_matrix" in free:
        m = s.num_regimes
        uniform = np.full((m, m), 1.0 / m)
        starts += [theta | {"transition_matrix": uniform} for theta in list(starts)]
    if "transition_coefficients" in free:  # TVTP: all coefficients 0, uniform P_t
        starts += [
            theta
            | {"transition_coefficients": np.zeros(np.shape(theta["transition_coefficients"]))}
            for theta in list(starts)
        ]
    return starts


@functools.partial(jax.jit, static_argnums=(0, 1))
def _estimate(spec_key, free, flat, like, theta_fixed):
    """theta at the flat unconstrained point ``flat`` and the Jacobian of the reported free
    parameters there (``reported_jacobian``), in one compiled program."""
    spec = registered_spec(spec_key)
    theta = constrain(spec, free, theta_fixed, ravel_pytree(like)[1](flat))
    return theta, reported_jacobian(spec_key, free, flat, like)


@functools.partial(jax.jit, static_argnums=(0, 1))
def _thetas_at(spec_key, free, flats, like):
    """The free parameters at each flat unconstrained point of ``flats`` (one program)."""
    spec = registered_spec(spec_key)
    unravel = ravel_pytree(like)[1]
    return jax.vmap(lambda flat: constrain(spec, free, {}, unravel(flat)))(flats)


def _labelled_ends(labels, spec_key, free, ends, like, fixed) -> list:
    """The estimate of the free parameters at each start's end point, labelled by the
    convention of the labelled spec ``labels`` (``labelling_order``; the fixed parameters
    ``fixed`` complete theta for it), for ``LocalOptima.thetas``."""
    dtype = next(iter(like.values())).dtype
    batch = {
        n: np.asarray(v)
        for n, v in _thetas_at(spec_key, free, jnp.asarray(ends, dtype), like).items()
    }
    out = []
    for i in range(ends.shape[0]):
        theta = {n: np.asarray(v) for n, v in fixed.items()} | {n: v[i] for n, v in batch.items()}
        order = labelling_order(labels, theta, free)
        if not np.array_equal(order, np.arange(order.size)):
            theta = relabel_regimes(labels, theta, order)
        out.append({n: theta[n] for n in free})
    return out


def _starts(key, spec, free, num_starts: int, scale: float, warmed=()):
    """(num_starts, n) unconstrained starts and the layout ``like`` of one: the deterministic
    ``ordering_starts`` first (as many as fit; the EM-warmed thetas ``warmed`` second), then
    perturbations of them in turn by N(0, scale^2) in the unconstrained coordinates (NumPy
    draws seeded by ``key``)."""
    dtype = np.dtype(np.float64 if jax.config.jax_enable_x64 else np.float32)
    spec_key = register_spec(spec)
    thetas = ordering_starts(spec, free)
    thetas = thetas[:1] + list(warmed) + thetas[1:]
    zs = [
        unconstrained(spec_key, free, {n: np.asarray(theta[n], dtype) for n in free})
        for theta in thetas[:num_starts]
    ]  # one compiled program (``check_free_values``'), called per start
    base, like = np.stack([flatten(z) for z in zs]), zs[0]
    rng = np.random.default_rng(np.asarray(jax.random.key_data(key)).ravel().tolist())
    extra = num_starts - base.shape[0]
    around = base[np.arange(extra) % base.shape[0]]
    noise = scale * rng.standard_normal((extra, base.shape[1]))
    return np.concatenate([base, around + noise]).astype(dtype), like


def fit_switching(
    key,
    init,
    observations=None,
    *,
    method: str = "mle",
    likelihood: str | None = None,
    inputs=None,
    free=None,
    num_starts: int | None = None,
    start_scale: float = 0.5,
    max_iterations: int = 500,
    tolerance: float = 1e-8,
    em_warmup: int | None = None,
) -> SwitchingFitResult:
    """Fit a switching model by maximum likelihood ("mle") or EM ("em").

    "mle": L-BFGS (the algorithm of ``minimize_lbfgs``: backtracking line search, one
    evaluation per step) on -log L(theta) / T over the unconstrained coordinates z of the
    free parameters (theta = biject_to(support)(z)), from ``num_starts`` starts at once
    (``minimize_lbfgs_batch``): the deterministic ``ordering_starts`` (``init``'s theta, and
    for a model with a switching variance one start per pairing of spread variances with the
    regimes, which are labelled by increasing intercept or mean) and perturbations of them,
    z + N(0, start_scale^2) drawn with ``key``; with ``em_warmup`` > 0, the end of that many
    EM iterations from ``init``'s theta is the second start (as statsmodels' ``em_iter``
    warm-up; by default for an econometric model with three regimes or more, where the
    ordering starts cannot cover the pairings: ``default_em_warmup``). Every step of every
    start and the Hessian are evaluated by ONE compiled program, the batched value and
    gradient of the likelihood
    (compiled once per model shape and number of starts; the series is padded with missing
    rows to ``bucket_length``, so a series a few steps longer reuses it). The best end point
    is returned, with the distinct optima the starts reached (``result.local_optima``: the
    log-likelihoods within 1e-4 nats grouped, best first, with how many starts reached
    each), and standard errors from the Hessian of log L (central differences of the same
    gradient, ``hessian_from_batched_gradient``; delta method to the reported
    parametrisation) on the coordinates inside the support: an estimate on its boundary (a
    noise scale at 0, a transition probability at 0 or 1; ``result.on_boundary``,
    ``boundary_mask``) gets no standard error, and the others are those of the model with
    it fixed there. Converged (``result.converged``, and per start in
    ``result.local_optima.num_converged``): max |gradient of log L / T| < ``tolerance``, or
    the start stalled with no gain visible at round-off left by the quasi-Newton model
    (``minimize_lbfgs_batch``'s ``stall``), or, for the returned estimate only, it lies on the
    boundary of the support and the gradient passes on the coordinates inside it.

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
        likelihood: "exact", "gpb2", "imm", "gpb1", "kalman"; default "exact" for the
            econometric models (Hamilton's filter, exact and the smallest program) and "imm"
            for a state-space model.
        inputs: (T, k) u_{1:T} when the model has inputs.
        free: names of the parameters to fit (default ``init.free``: the spec's identified
            set; for a generic model ``STATE_SPACE_FREE``, the transition matrix and the noise
            scales); the others stay at their values in ``init``.
        num_starts: >= 1; default ``default_num_starts`` (every deterministic start and as
            many random ones, 8 to 32).
        start_scale: > 0, the spread of the random starts (unconstrained units).
        max_iterations: per start.
        tolerance: > 0.
        em_warmup: EM iterations whose end joins the starts ("mle"; >= 0); default
            ``default_em_warmup(init)`` (``EM_WARMUP`` for an econometric model with M >= 3,
            else 0).

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
    check_free_values(unlabelled(spec), free)  # any labelling starts a fit
    obs, u = check_data(spec, observations, inputs)
    if not validation.is_traced(obs):
        observed = int(np.sum(np.any(~np.isnan(np.asarray(obs)), axis=-1)))
        if observed < 2:
            raise ValueError(
                f"observations: {observed} observed step(s) (rows with an entry not NaN) of "
                f"{obs.shape[0]}; a fit needs at least 2 (BIC and HQIC use log T and log log T)"
            )
    if likelihood is None:
        likelihood = "imm" if spec.structure.kind == "state_space" else "exact"
    likelihood = check_likelihood(likelihood, spec.structure, obs.shape[0])
    if num_starts is not None:
        num_starts = validation.check_positive_int("num_starts", num_starts)
    max_iterations = validation.check_positive_int("max_iterations", max_iterations)
    if em_warmup is not None:
        em_warmup = validation.check_positive_int("em_warmup", em_warmup, minimum=0)
    start_scale = validation.check_positive_scalar("start_scale", start_scale)
    tolerance = validation.check_positive_scalar("tolerance", tolerance)
    # the fits run over the regimes unlabelled (the labelling parameter's support unordered)
    # and label the optimum afterwards: an ordered coordinate would put a boundary (two
    # regimes' intercepts merged) between the basins of the two labellings, where a start in
    # the other labelling's basin stops
    labels = spec
    spec = unlabelled(spec)
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
        optima = local_optima(
            result.log_likelihood[-1:],
            [result.converged],
            thetas=[{n: np.asarray(result.theta[n]) for n in free}],
        )
        result = result._replace(local_optima=optima)
        order = labelling_order(labels, result.theta, free)
        if not np.array_equal(order, np.arange(order.size)):
            theta = relabel_regimes(labels, result.theta, order)
            result = result._replace(theta=theta, params=built_params(spec.structure, theta, u))
        return _relabel(labels, free, result)
    dtype = obs.dtype
    theta0 = {n: jnp.asarray(v, dtype) for n, v in spec.theta.items()}
    fixed = {n: v for n, v in theta0.items() if n not in free}
    spec_key = register_spec(spec)
    if num_starts is None:
        num_starts = default_num_starts(spec, free)
    warmed = []
    warmup = default_em_warmup(spec) if em_warmup is None else em_warmup
    if warmup and num_starts > 1:
        check_em_free(spec, free)
        em = fit_em_unchecked(
            spec,
            obs,
            inputs=u,
            free=free,
            max_iterations=warmup,
            tolerance=tolerance,
            began=began,
            likelihood=likelihood,
        )
        if np.isfinite(em.log_likelihood[-1]):
            warmed.append({n: np.asarray(v) for n, v in em.theta.items()})
    z0, like = _starts(key, spec._replace(theta=theta0), free, num_starts, start_scale, warmed)
    like = {n: jnp.asarray(v, dtype) for n, v in like.items()}
    obs_pad, u_pad = _padded(spec, likelihood, obs, u)
    num_obs = int(np.sum(np.any(~np.isnan(np.asarray(obs)), axis=-1)))

    def objective(points):
        return _objective_batch(
            spec_key, free, likelihood, np.asarray(points, dtype), like, fixed, obs_pad, u_pad
        )

    run = minimize_lbfgs_batch(objective, z0, max_iterations=max_iterations, tolerance=tolerance)
    values = -run.value * num_obs
    ends, grads, converged = run.x.copy(), run.grad.copy(), run.converged.copy()
    # polish the unconverged starts that end within POLISH_NATS of the best by modified Newton
    # steps on the same program (a badly conditioned valley, e.g. three regimes, can take
    # L-BFGS thousands of steps)
    top = np.max(np.where(np.isfinite(values), values, -np.inf))
    for i in np.flatnonzero(~converged & (values >= top - POLISH_NATS)):
        polished = refine_newton(objective, ends[i], num_starts, tolerance=tolerance)
        if polished.value <= run.value[i]:
            ends[i], grads[i], values[i] = polished.x, polished.grad, -polished.value * num_obs
            converged[i] = polished.converged
    best = int(np.argmax(np.where(np.isfinite(values), values, -np.inf)))
    flat_best = ends[best]
    theta, jac = _estimate(spec_key, free, jnp.asarray(flat_best, dtype), like, fixed)
    order = labelling_order(labels, {n: np.asarray(v) for n, v in theta.items()}, free)
    if not np.array_equal(order, np.arange(order.size)):  # the same optimum, labelled
        relabelled = relabel_regimes(labels, {n: np.asarray(v) for n, v in theta.items()}, order)
        flat_best = flatten(
            unconstrained(spec_key, free, {n: np.asarray(relabelled[n], dtype) for n in free})
        )
        grads[best] = objective(np.broadcast_to(flat_best, z0.shape))[1][0]
        theta, jac = _estimate(spec_key, free, jnp.asarray(flat_best, dtype), like, fixed)
    theta, jac = {n: np.asarray(v) for n, v in theta.items()}, np.asarray(jac, dtype=float)
    hess = -num_obs * hessian_from_batched_gradient(objective, flat_best, num_starts)
    stderr, on_boundary, edge = _standard_errors(spec, free, hess, jac, theta, num_obs)
    # at an estimate on the boundary of the support (a transition probability at 0), the
    # gradient along the boundary coordinate cannot vanish (log L keeps rising as z -> inf):
    # converged when it passes on the coordinates inside the support
    if (
        not converged[best]
        and edge.any()
        and np.max(np.abs(grads[best][~edge]), initial=0.0) < tolerance
    ):
        converged[best] = True
    trace = -run.trace[best][: int(run.num_iterations[best]) + 1] * num_obs
    if values[best] != trace[-1]:
        trace = np.append(trace, values[best])
    result = SwitchingFitResult(
        params=built_params(spec.structure, theta, u),
        theta=theta,
        log_likelihood=trace,
        stderr=stderr,
        on_boundary=on_boundary,
        start_log_likelihoods=values,
        num_parameters=num_free(spec, free),
        num_observations=num_obs,
        converged=bool(converged[best]),
        method="mle",
        likelihood=likelihood,
        seconds=time.perf_counter() - began,
        local_optima=local_optima(
            values, converged, thetas=_labelled_ends(labels, spec_key, free, ends, like, fixed)
        ),
    )
    return _relabel(labels, free, result)


# EM iterations from the spec's start that give a model with three regimes or more its
# second start (``default_em_warmup``): on US GDP growth with three regimes and switching
# variances the 28 default starts all miss the optimum (-228.090) that L-BFGS reaches from
# 5 to 50 EM iterations (they end at -228.301 and -228.326)
EM_WARMUP = 10


def default_em_warmup(spec) -> int:
    """The EM warm-up ``fit_switching`` runs by default: ``EM_WARMUP`` iterations for a
    Markov-switching regression, MS-AR or MS-VAR with M >= 3 regimes (two regimes are covered
    by the ordering starts: every published case reaches its optimum without), else 0."""
    s = spec.structure
    return EM_WARMUP if s.kind in ("regression", "ar", "var") and s.num_regimes >= 3 else 0


def default_num_starts(spec, free) -> int:
    """The number of starts ``fit_switching`` uses by default: every deterministic
    ``ordering_starts`` start and as many random ones again, at least 8 and at most 32."""
    return int(min(max(8, 2 * len(ordering_starts(spec, free))), 32))


__all__ = [
    "EM_WARMUP",
    "METHODS",
    "ORDERING_SPREAD",
    "bucket_length",
    "default_em_warmup",
    "default_num_starts",
    "fit_switching",
    "ordering_starts",
]
