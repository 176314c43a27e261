"""The link-function conjecture, measured for the Poisson family.

The note "Attention as approximate message passing in a switching state-space model" (its
eq. (15)) conjectures that the query/key matrices of attention are a linear approximation to the
canonical link function of an exponential family,

    P(eta_i | mu_j) ∝ exp(<f(eta_i), mu_j>)  ≈  exp(<mu_i W_q, mu_j W_k>),

and (its section 4.1) that with a skip connection the repeated update is gradient ascent on the
natural parameter, where "the linear approximation to the link function causes blowup of the
normalization function". Here both are made measurable for the Poisson family: natural
parameter eta = log lambda, log-normaliser A(eta) = exp(eta), mean m(eta) = A'(eta) = lambda,
canonical link g(mu) = log mu.

1. Exact attention is the Poisson posterior over keys (Robbins 1956, "An empirical Bayes
   approach to statistics", with a discrete prior): keys are rates lambda_j with prior weights
   w_j, a query is a count y_i, and

       P(j | y_i) ∝ w_j Pois(y_i; lambda_j) = softmax_j(y_i eta_j - exp(eta_j) + log w_j),

   attention with query y_i (the sufficient statistic), key eta_j = g(lambda_j) (the link) and
   key bias -A(eta_j) + log w_j; E[lambda | y_i] = sum_j A_ij lambda_j, which equals Robbins'
   (y + 1) p(y + 1) / p(y) with p the marginal of the counts (``poisson_key_weights``,
   ``poisson_posterior_mean``).

2. The linear surrogate keeps the query y_i and replaces the key and bias by maps linear in the
   mean parameter: key a lambda_j + b, bias c lambda_j + d + log w_j. For a scalar query, b and d
   add y_i b + d to every score of row i and cancel in the softmax; an affine query
   a_q y_i + b_q adds nothing either (only a_q a is identified, and b_q a lambda_j merges into
   c lambda_j). So (a, c) are the free parameters. The exact bias -A(g(lambda)) = -lambda is
   itself linear in the mean (c = -1 is exact): the surrogate's only approximation is the key,
   a lambda + b against log lambda. ``fit_linear_link`` minimises the expected
   KL(exact || surrogate) over queries y drawn from the marginal of the counts
   (``minimize_lbfgs``); the reference "identity" surrogate is the no-link choice a = 1,
   c = -1 (key = lambda, exact bias).

3. The skip connection eta <- eta + step (y - m(eta)) is gradient ascent on the Poisson
   log-likelihood y eta - A(eta). In x = exp(eta) / y it is the Ricker map
   x <- x exp(r (1 - x)) with r = step * y: converges to eta = log y for r < 2 (the derivative
   at the fixed point is 1 - r) and is unstable beyond (period doubling, chaos from r ≈ 2.69),
   with A(eta) / A(log y) = x bounded by exp(r - 1) / r after the first step (bounded above:
   no convergence rather than divergence). Under the linear surrogate the mean map
   is the inverse of the linear link, m_lin(eta) = (eta - b) / a, the gradient of the quadratic
   (Gaussian) log-normaliser A_lin(eta) = (eta - b)^2 / (2 a): the error u = eta - (a y + b)
   obeys u <- (1 - step / a) u, so the iteration converges to a y + b for 0 < step / a < 2 and
   diverges geometrically (alternating in sign) beyond. Evaluated with the true log-normaliser,
   log(A(eta) / A(log y)) = eta - log y: at the linear fixed point a y + b - log y, which grows
   linearly in y (the ratio exponentially) outside the fitted range of rates, and for
   step / a > 2 it grows as |1 - step / a|^depth (``skip_connection_iteration``,
   ``normaliser_blowup``). The attention weights do not identify b; the fit sets it by a
   prior-weighted shift of the key onto log lambda, so the fixed point a y + b uses that b.

Errors: public functions check concrete inputs before any tracing and raise a ``ValueError``
whose message starts with the argument's name; under ``jax.jit``/``jax.vmap``/``jax.grad``
only static checks (rank, shape) run.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.scipy.special import gammaln

from ...validation import (
    any_traced,
    as_float_array,
    check_finite,
    check_positive_int,
    check_positive_scalar,
    is_traced,
)
from ..optimize import minimize_lbfgs

__all__ = [
    "LINKS",
    "LinearLink",
    "LinearLinkFit",
    "NormaliserBlowup",
    "SkipConnectionTrace",
    "fit_linear_link",
    "link_kl",
    "normaliser_blowup",
    "poisson_key_weights",
    "poisson_posterior_mean",
    "skip_connection_iteration",
]

LINKS = ("exact", "linear")


class LinearLink(NamedTuple):
    """A linear surrogate of the Poisson link: key a lambda + b, key bias c lambda + d.

    b and d cancel in the attention weights (scalar query); b fixes the iteration's fixed point
    a y + b and the mean map m_lin(eta) = (eta - b) / a.
    """

    key_slope: jax.Array  # a
    key_offset: jax.Array  # b
    bias_slope: jax.Array  # c
    bias_offset: jax.Array  # d


class LinearLinkFit(NamedTuple):
    """The result of ``fit_linear_link``.

    Attributes:
        link: the fitted ``LinearLink``; b aligns the key to log lambda by a shift
            (prior-weighted mean of log lambda_j - a lambda_j), d = 0.
        mean_kl: () E_y KL(exact || surrogate) at the fit, y from the marginal of the counts.
        kl_per_count: (Y + 1,) KL for the query y = 0..Y.
        kl_per_rate: (K,) E_{y ~ Pois(lambda_j)} KL, for each rate of the grid.
        counts: (Y + 1,) the query counts 0..Y.
        count_weights: (Y + 1,) the marginal p(y) renormalised over 0..Y.
        truncated_mass: () 1 - sum_{y <= Y} p(y), the marginal mass left out.
        start_kl: () expected KL at the start x0.
        identity_kl: () expected KL of the identity surrogate (a = 1, c = -1).
        key_relative_error: (K,) (a lambda_j + b - log lambda_j) / (log max - log min), the
            fitted key against the link after a shift.
        affine_relative_error: (K,) the same after the best affine alignment (prior-weighted
            least squares of log lambda on lambda): the intrinsic error of any linear key.
        converged: () L-BFGS converged.
        num_iterations: () L-BFGS iterations.
    """

    link: LinearLink
    mean_kl: jax.Array
    kl_per_count: jax.Array
    kl_per_rate: jax.Array
    counts: jax.Array
    count_weights: jax.Array
    truncated_mass: jax.Array
    start_kl: jax.Array
    identity_kl: jax.Array
    key_relative_error: jax.Array
    affine_relative_error: jax.Array
    converged: jax.Array
    num_iterations: jax.Array


class SkipConnectionTrace(NamedTuple):
    """The result of ``skip_connection_iteration``, shapes (depth + 1, *batch) or (*batch,).

    Attributes:
        eta: (depth + 1, ...) eta_0, ..., eta_depth.
        log_ratio: (depth + 1, ...) log(A(eta_t) / A(log y)) = eta_t - log y (+inf for y = 0).
        fixed_point: (...) log y (exact) or a y + b (linear).
    """

    eta: jax.Array
    log_ratio: jax.Array
    fixed_point: jax.Array


class NormaliserBlowup(NamedTuple):
    """The result of ``normaliser_blowup`` (S steps, N counts, D depths).

    Attributes:
        counts, steps, depths: (N,), (S,), (D,) the grid.
        exact_log_ratio, linear_log_ratio: (S, N, D) log(A(eta_L) / A(log y)) at depth L.
        exact_first_depth, linear_first_depth: (S, N) the smallest depth 1..max(depths) with
            log ratio > log(threshold); -1 if none.
        exact_stable: (S, N) step * y < 2.
        linear_stable: (S,) step / a < 2.
        linear_limit: (N,) a y + b - log y, the linear log ratio's limit when stable.
        exact_max_log_ratio: (S, N) log(exp(r - 1) / r), r = step * y: the Ricker bound of the
            exact log ratio after the first step (>= 0; 0 at r = 1).
        log_threshold: () log(threshold).
    """

    counts: jax.Array
    steps: jax.Array
    depths: jax.Array
    exact_log_ratio: jax.Array
    linear_log_ratio: jax.Array
    exact_first_depth: jax.Array
    linear_first_depth: jax.Array
    exact_stable: jax.Array
    linear_stable: jax.Array
    linear_limit: jax.Array
    exact_max_log_ratio: jax.Array
    log_threshold: jax.Array


# ----------------------------------------------------------------------------- checks


def _check_counts(counts, *, minimum: int = 0, rank: int | None = None, name: str = "counts"):
    """Counts: finite, integer-valued, >= minimum (value checks on concrete input only)."""
    arr = as_float_array(name, counts)
    if rank is not None and arr.ndim != rank:
        raise ValueError(f"{name}: expected rank {rank}, got shape {tuple(arr.shape)}")
    if arr.size == 0:
        raise ValueError(f"{name}: is empty")
    if is_traced(arr):
        return arr
    check_finite(name, arr)
    if np.any(arr < minimum):
        raise ValueError(f"{name}: must be >= {minimum}, got min {float(arr.min())}")
    if np.any(arr != np.round(arr)):
        raise ValueError(f"{name}: must be integer-valued counts")
    return arr


def _check_rates(rates):
    arr = as_float_array("rates", rates)
    if arr.ndim != 1 or arr.shape[0] == 0:
        raise ValueError(f"rates: expected a non-empty vector (K,), got shape {tuple(arr.shape)}")
    if is_traced(arr):
        return arr
    check_finite("rates", arr)
    if np.any(arr <= 0):
        raise ValueError(f"rates: must be > 0, got min {float(arr.min())}")
    return arr


def _check_log_weights(log_weights, size: int, dtype):
    if log_weights is None:
        return np.zeros(size, dtype)
    arr = as_float_array("log_weights", log_weights)
    if arr.shape != (size,):
        raise ValueError(f"log_weights: expected shape ({size},), got {tuple(arr.shape)}")
    check_finite("log_weights", arr)
    return arr


def _check_link(link):
    if link not in LINKS:
        raise ValueError(f"link: expected one of {LINKS}, got {link!r}")
    return link


def _as_link(params, name: str = "params") -> LinearLink:
    """A ``LinearLink``, a ``LinearLinkFit`` (its link), or an array (a, c) or (a, b, c, d)."""
    if isinstance(params, LinearLinkFit):
        params = params.link
    if isinstance(params, LinearLink):
        parts = [as_float_array(name, p) for p in params]
        if any(p.ndim != 0 for p in parts):
            raise ValueError(f"{name}: LinearLink entries must be scalars")
    else:
        arr = as_float_array(name, params)
        if arr.shape == (2,):
            zero = jnp.zeros((), arr.dtype) if is_traced(arr) else np.zeros((), arr.dtype)
            parts = [arr[0], zero, arr[1], zero]
        elif arr.shape == (4,):
            parts = [arr[i] for i in range(4)]
        else:
            raise ValueError(
                f"{name}: expected a LinearLink or an array (a, c) or (a, b, c, d), "
                f"got shape {tuple(arr.shape)}"
            )
    for p in parts:
        check_finite(name, p)
    return LinearLink(*parts)


# ----------------------------------------------------------------------------- kernels


def _poisson_log_weights(counts, rates, log_weights):
    """(N, K) log P(j | y_i) = log_softmax_j(y_i log lambda_j - lambda_j + log w_j)."""
    scores = counts[:, None] * jnp.log(rates)[None, :] - rates[None, :] + log_weights[None, :]
    return jax.nn.log_softmax(scores, axis=1)


def _surrogate_log_weights(counts, rates, log_weights, a, c):
    """(N, K) log softmax_j(y_i a lambda_j + c lambda_j + log w_j) (b, d cancel)."""
    scores = counts[:, None] * (a * rates)[None, :] + (c * rates + log_weights)[None, :]
    return jax.nn.log_softmax(scores, axis=1)


def _kl_rows(log_p, log_q):
    return jnp.sum(jnp.exp(log_p) * (log_p - log_q), axis=1)


@jax.jit
def _weights_kernel(counts, rates, log_weights):
    return jnp.exp(_poisson_log_weights(counts, rates, log_weights))


@jax.jit
def _link_kl_kernel(counts, rates, log_weights, a, c):
    log_p = _poisson_log_weights(counts, rates, log_weights)
    return _kl_rows(log_p, _surrogate_log_weights(counts, rates, log_weights, a, c))


@functools.partial(jax.jit, static_argnames=("max_count", "max_iterations", "history"))
def _fit_kernel(rates, log_weights, x0, tolerance, *, max_count, max_iterations, history):
    dtype = rates.dtype
    counts = jnp.arange(max_count + 1, dtype=dtype)
    log_w = jax.nn.log_softmax(log_weights)
    log_pmf = (
        counts[:, None] * jnp.log(rates)[None, :] - rates[None, :] - gammaln(counts + 1)[:, None]
    )  # (Y + 1, K) log Pois(y; lambda_j)
    log_joint = log_pmf + log_w[None, :]
    log_marginal = jax.nn.logsumexp(log_joint, axis=1)
    marginal = jnp.exp(log_marginal)
    count_weights = marginal / jnp.sum(marginal)
    log_p = log_joint - log_marginal[:, None]

    def kl_per_count(theta):
        return _kl_rows(log_p, _surrogate_log_weights(counts, rates, log_w, theta[0], theta[1]))

    def objective(theta):
        return jnp.dot(count_weights, kl_per_count(theta))

    res = minimize_lbfgs(
        objective, x0, max_iterations=max_iterations, tolerance=tolerance, history=history
    )
    a, c = res.x[0], res.x[1]
    kl_y = kl_per_count(res.x)
    pmf = jnp.exp(log_pmf)
    kl_rate = (pmf.T @ kl_y) / jnp.sum(pmf, axis=0)

    w = jnp.exp(log_w)
    log_rates = jnp.log(rates)
    span = jnp.max(log_rates) - jnp.min(log_rates)
    b = jnp.dot(w, log_rates - a * rates)
    key_err = (a * rates + b - log_rates) / span
    mean_r, mean_l = jnp.dot(w, rates), jnp.dot(w, log_rates)
    slope = jnp.dot(w, (rates - mean_r) * (log_rates - mean_l)) / jnp.dot(w, (rates - mean_r) ** 2)
    affine_err = (mean_l + slope * (rates - mean_r) - log_rates) / span
    zero = jnp.zeros((), dtype)
    return LinearLinkFit(
        link=LinearLink(a, b, c, zero),
        mean_kl=jnp.dot(count_weights, kl_y),
        kl_per_count=kl_y,
        kl_per_rate=kl_rate,
        counts=counts,
        count_weights=count_weights,
        truncated_mass=jnp.maximum(1.0 - jnp.sum(marginal), 0.0),
        start_kl=objective(x0),
        identity_kl=objective(jnp.array([1.0, -1.0], dtype)),
        key_relative_error=key_err,
        affine_relative_error=affine_err,
        converged=res.converged,
        num_iterations=res.num_iterations,
    )


@functools.partial(jax.jit, static_argnames=("depth", "link"))
def _skip_kernel(counts, eta0, step, a, b, *, depth, link):
    counts, eta0, step = jnp.broadcast_arrays(counts, eta0, step)

    def mean_map(eta):
        return jnp.exp(eta) if link == "exact" else (eta - b) / a

    def body(eta, _):
        new = eta + step * (counts - mean_map(eta))
        return new, new

    _, etas = jax.lax.scan(body, eta0, None, length=depth)
    eta = jnp.concatenate([eta0[None], etas], axis=0)
    log_y = jnp.log(counts)
    fixed = log_y if link == "exact" else a * counts + b
    return SkipConnectionTrace(eta=eta, log_ratio=eta - log_y, fixed_point=fixed)


@functools.partial(jax.jit, static_argnames=("max_depth",))
def _blowup_kernel(counts, steps, depths, eta0, a, b, log_threshold, *, max_depth):
    y = counts[None, :]
    s = steps[:, None]
    e0 = jnp.broadcast_to(eta0, counts.shape)[None, :]

    def table(link):
        tr = _skip_kernel(y, e0, s, a, b, depth=max_depth, link=link)
        ratio = tr.log_ratio  # (max_depth + 1, S, N)
        over = ratio[1:] > log_threshold
        first = jnp.where(jnp.any(over, axis=0), jnp.argmax(over, axis=0) + 1, -1)
        return jnp.moveaxis(ratio[depths], 0, -1), first

    exact_ratio, exact_first = table("exact")
    linear_ratio, linear_first = table("linear")
    r = s * y
    return NormaliserBlowup(
        counts=counts,
        steps=steps,
        depths=depths,
        exact_log_ratio=exact_ratio,
        linear_log_ratio=linear_ratio,
        exact_first_depth=exact_first,
        linear_first_depth=linear_first,
        exact_stable=r < 2.0,
        linear_stable=steps / a < 2.0,
        linear_limit=a * counts + b - jnp.log(counts),
        exact_max_log_ratio=r - 1.0 - jnp.log(r),
        log_threshold=log_threshold,
    )


# ----------------------------------------------------------------------------- public


def poisson_key_weights(counts, rates, log_weights=None) -> jax.Array:
    """Exact attention = the Poisson posterior over keys (Robbins 1956; the note, eq. (15)).

    A_ij = P(j | y_i) ∝ w_j Pois(y_i; lambda_j) = softmax_j(y_i eta_j - exp(eta_j) + log w_j),
    eta_j = log lambda_j: query y_i, key g(lambda_j), key bias -A(eta_j) + log w_j.

    Args:
        counts: (N,) observed counts y_i (non-negative, integer-valued).
        rates: (K,) key rates lambda_j > 0.
        log_weights: (K,) prior log weights log w_j (unnormalised); default uniform.

    Returns:
        (N, K) weights, rows on the simplex.
    """
    counts = _check_counts(counts, rank=1)
    rates = _check_rates(rates)
    log_weights = _check_log_weights(log_weights, rates.shape[0], rates.dtype)
    return _weights_kernel(jnp.asarray(counts), jnp.asarray(rates), jnp.asarray(log_weights))


def poisson_posterior_mean(counts, rates, log_weights=None) -> jax.Array:
    """E[lambda | y_i] = sum_j A_ij lambda_j: Robbins' Poisson empirical Bayes as attention
    (values = rates); equals (y + 1) p(y + 1) / p(y) with p the marginal of the counts.

    Args as ``poisson_key_weights``. Returns (N,).
    """
    rates = _check_rates(rates)
    return poisson_key_weights(counts, rates, log_weights) @ jnp.asarray(rates)


def link_kl(params, counts, rates, log_weights=None) -> jax.Array:
    """KL(exact || linear surrogate) of the attention weights, one per query count.

    KL_i = sum_j P(j | y_i) log(P(j | y_i) / Q(j | y_i)), P = ``poisson_key_weights``,
    Q_ij ∝ exp(y_i (a lambda_j + b) + c lambda_j + d + log w_j) (b, d cancel).

    Args:
        params: a ``LinearLink``/``LinearLinkFit``, or an array (a, c) or (a, b, c, d).
        counts: (N,) query counts; rates: (K,); log_weights: (K,) or None (uniform).

    Returns:
        (N,) KL per query.
    """
    link = _as_link(params)
    counts = _check_counts(counts, rank=1)
    rates = _check_rates(rates)
    log_weights = _check_log_weights(log_weights, rates.shape[0], rates.dtype)
    return _link_kl_kernel(
        jnp.asarray(counts),
        jnp.asarray(rates),
        jnp.asarray(log_weights),
        jnp.asarray(link.key_slope),
        jnp.asarray(link.bias_slope),
    )


def fit_linear_link(
    rates,
    *,
    log_weights=None,
    max_count: int | None = None,
    x0=None,
    max_iterations: int = 200,
    tolerance: float = 1e-8,
    history: int = 10,
) -> LinearLinkFit:
    """The best linear surrogate of the link: (a, c) minimising E_y KL(exact || surrogate).

    The note's conjecture (eq. (15)) with key a lambda_j + b and bias c lambda_j + d in place of
    log lambda_j and -lambda_j (b, d cancel; see the module docstring). The expectation is over
    y = 0..max_count drawn from the marginal p(y) = sum_j w_j Pois(y; lambda_j), renormalised
    (``truncated_mass`` says what is left out); minimised by ``minimize_lbfgs``.

    Args:
        rates: (K,) rates > 0 (at least two distinct).
        log_weights: (K,) prior log weights; default uniform.
        max_count: largest query count Y (static); default ceil(max + 10 sqrt(max) + 10).
        x0: (2,) start (a, c); default the chord of log over [min, max] and c = -1.
        max_iterations, tolerance, history: of ``minimize_lbfgs`` (converged when
            max |grad| < tolerance; the objective's round-off, ~1e-16 absolute, lets the line
            search certify about 1e-8 but not much less).

    Traceable under ``jax.jit``/``jax.vmap`` (``max_count`` must then be given); not
    reverse-differentiable (the L-BFGS ``lax.while_loop``).
    """
    rates = _check_rates(rates)
    log_weights = _check_log_weights(log_weights, rates.shape[0], rates.dtype)
    if max_count is None:
        if is_traced(rates):
            raise ValueError("max_count: required when rates are traced")
        top = float(np.max(rates))
        max_count = int(np.ceil(top + 10.0 * np.sqrt(top) + 10.0))
    max_count = check_positive_int("max_count", max_count)
    max_iterations = check_positive_int("max_iterations", max_iterations)
    history = check_positive_int("history", history)
    tolerance = check_positive_scalar("tolerance", tolerance)
    if not is_traced(rates) and np.ptp(rates) == 0:
        raise ValueError("rates: need at least two distinct rates")
    dtype = jnp.asarray(rates).dtype
    if x0 is None:
        if any_traced(rates):
            lo, hi = jnp.min(rates), jnp.max(rates)
            chord = (jnp.log(hi) - jnp.log(lo)) / (hi - lo)
        else:
            lo, hi = float(np.min(rates)), float(np.max(rates))
            chord = (np.log(hi) - np.log(lo)) / (hi - lo)
        x0 = jnp.stack([jnp.asarray(chord, dtype), jnp.asarray(-1.0, dtype)])
    else:
        x0 = as_float_array("x0", x0)
        if x0.shape != (2,):
            raise ValueError(f"x0: expected shape (2,) (a, c), got {tuple(x0.shape)}")
        check_finite("x0", x0)
        x0 = jnp.asarray(x0, dtype)
    return _fit_kernel(
        jnp.asarray(rates),
        jnp.asarray(log_weights, dtype),
        x0,
        jnp.asarray(tolerance, dtype),
        max_count=max_count,
        max_iterations=max_iterations,
        history=history,
    )


def _check_linear_params(link, linear_params):
    if link == "exact" and linear_params is None:
        return 1.0, 0.0
    if linear_params is None:
        raise ValueError('linear_params: required for link="linear"')
    params = _as_link(linear_params, "linear_params")
    a, b = params.key_slope, params.key_offset
    if not is_traced(a) and not float(a) > 0:
        raise ValueError(f"linear_params: key slope a must be > 0, got {float(a)}")
    return a, b


def skip_connection_iteration(
    counts, eta0, step, depth: int, *, link: str = "exact", linear_params=None
) -> SkipConnectionTrace:
    """The skip connection as gradient ascent on the natural parameter (the note, section 4.1).

    eta_{t+1} = eta_t + step (y - m(eta_t)), with m(eta) = exp(eta) = A'(eta) ("exact": gradient
    ascent on y eta - exp(eta), fixed point log y, stable iff step * y < 2) or
    m_lin(eta) = (eta - b) / a ("linear": the mean map of the linear link, gradient ascent on
    y eta - (eta - b)^2 / (2 a), fixed point a y + b, stable iff step / a < 2).

    Args:
        counts: (...) counts y >= 0 (integer-valued when concrete).
        eta0: start, broadcastable with counts.
        step: scalar > 0.
        depth: number of updates (static).
        link: "exact" or "linear" (static).
        linear_params: for "linear": a ``LinearLink``/``LinearLinkFit`` or (a, c)/(a, b, c, d).

    Returns:
        ``SkipConnectionTrace`` with eta (depth + 1, ...) by ``lax.scan``. Traceable in counts,
        eta0 and step (jit, vmap, grad).
    """
    counts = _check_counts(counts)
    eta0 = as_float_array("eta0", eta0)
    check_finite("eta0", eta0)
    try:
        np.broadcast_shapes(np.shape(counts), np.shape(eta0))
    except ValueError:
        raise ValueError(
            f"eta0: shape {tuple(np.shape(eta0))} does not broadcast with counts "
            f"{tuple(np.shape(counts))}"
        ) from None
    step = check_positive_scalar("step", step)
    depth = check_positive_int("depth", depth)
    link = _check_link(link)
    a, b = _check_linear_params(link, linear_params)
    counts = jnp.asarray(counts)
    dtype = jnp.result_type(counts.dtype, jnp.asarray(eta0).dtype, float)
    return _skip_kernel(
        counts.astype(dtype),
        jnp.asarray(eta0, dtype),
        jnp.asarray(step, dtype),
        jnp.asarray(a, dtype),
        jnp.asarray(b, dtype),
        depth=depth,
        link=link,
    )


def normaliser_blowup(
    counts, steps, depths, *, linear_params, eta0=None, threshold: float = 10.0
) -> NormaliserBlowup:
    """The true log-normaliser at the skip-connection iterate, A(eta_L) / A(log y), for both links.

    For each step size, count and depth L, log(A(eta_L) / A(log y)) = eta_L - log y (the note,
    section 4.1: "the linear approximation to the link function causes blowup of the
    normalization function"), and the smallest depth at which it exceeds log(threshold).
    Exact link: -> 0 for step * y < 2; beyond, the Ricker map, bounded by
    log(exp(r - 1) / r), r = step * y. Linear link: -> a y + b - log y for step / a < 2;
    beyond, grows as |1 - step / a|^L (without bound; overflows to inf/NaN eventually).

    Args:
        counts: (N,) counts >= 1 (integer-valued).
        steps: (S,) step sizes > 0.
        depths: (D,) depths >= 1 to report (the search for the first depth runs to max).
        linear_params: the linear link (a ``LinearLink``/``LinearLinkFit`` or array).
        eta0: start, scalar or (N,); default log y + 1 (one nat above the answer).
        threshold: ratio > 1 (default 10).
    """
    counts = _check_counts(counts, minimum=1, rank=1)
    steps = as_float_array("steps", steps)
    if steps.ndim != 1 or steps.shape[0] == 0:
        raise ValueError(f"steps: expected a non-empty vector, got shape {tuple(steps.shape)}")
    if not is_traced(steps):
        check_finite("steps", steps)
        if np.any(steps <= 0):
            raise ValueError(f"steps: must be > 0, got min {float(steps.min())}")
    if is_traced(depths):
        raise ValueError("depths: must be concrete (static)")
    depth_list = [check_positive_int("depths", d) for d in np.atleast_1d(depths).tolist()]
    threshold = check_positive_scalar("threshold", threshold)
    if not is_traced(threshold) and threshold <= 1.0:
        raise ValueError(f"threshold: must be > 1, got {threshold}")
    a, b = _check_linear_params("linear", linear_params)
    dtype = jnp.result_type(jnp.asarray(counts).dtype, float)
    counts = jnp.asarray(counts, dtype)
    if eta0 is None:
        eta0 = jnp.log(counts) + 1.0
    else:
        eta0 = as_float_array("eta0", eta0)
        if eta0.shape not in ((), tuple(counts.shape)):
            raise ValueError(f"eta0: expected a scalar or shape {tuple(counts.shape)}")
        check_finite("eta0", eta0)
    return _blowup_kernel(
        counts,
        jnp.asarray(steps, dtype),
        jnp.asarray(depth_list, jnp.int32),
        jnp.asarray(eta0, dtype),
        jnp.asarray(a, dtype),
        jnp.asarray(b, dtype),
        jnp.log(jnp.asarray(threshold, dtype)),
        max_depth=max(depth_list),
    )
