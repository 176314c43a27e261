"""EM for Gaussian deconvolution, written so that the E-step *is* softmax attention (seed 1).

Model: x_i ~ sum_k w_k N(mu_k, sigma^2 I_p). With beta = 1 / sigma^2,

    log N(x_i; mu_k, sigma^2 I) = beta <x_i, mu_k> - beta |mu_k|^2 / 2 + c(x_i),

so the responsibilities are row-softmax attention with queries x, keys mu, Q K^T = beta I
and key bias b_k = log w_k - beta |mu_k|^2 / 2:

    E-step   A_ik = softmax_k(beta <x_i, mu_k> + b_k)
    M-step   mu_k <- sum_i A_ik x_i / sum_i A_ik          (and w_k <- sum_i A_ik / N if updated)

The row log-normaliser of that attention gives the observed-data log-likelihood for free,
and attending with values = atoms gives the posterior mean E[z_i | x_i] under the fitted
measure (Tweedie's empirical-Bayes denoiser): one attention step.

Seed 1's estimator takes K = N atoms started at the data, mu_k^0 = x_k, with w_k = 1/K fixed.
"""

from __future__ import annotations

import functools
import numbers
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh
from jax.sharding import PartitionSpec as P

from inference.attention import (
    Attention,
    _dot_product,
    _streamed_softmax_attention,
    softmax_attention,
)
from models import _checks

INITS = ("data",)


class EMResult(NamedTuple):
    """The fitted mixing measure and the run's record.

    Attributes:
        atoms: (K,) for scalar data or (K, p), the fitted mu_k.
        weights: (K,) the mixing weights (1/K throughout unless ``update_weights``).
        log_likelihood_trace: (num_iters + 1,) log p(x) at the start and after each EM step;
            never decreasing (up to round-off).
        num_iters: number of EM steps taken.
        converged: whether the per-point change in log-likelihood fell below ``tol``.
    """

    atoms: jax.Array
    weights: jax.Array
    log_likelihood_trace: jax.Array
    num_iters: int
    converged: bool


# ----------------------------------------------------------------------------- kernels (jitted)


def e_step_attention(x: jax.Array, atoms: jax.Array, weights: jax.Array, sigma) -> Attention:
    """The E-step as attention: queries x (N, p), keys = values = atoms (K, p).

    Returns ``Attention(output, weights, log_normalizer)`` whose ``weights`` are the
    responsibilities A (N, K), ``output`` the posterior means E[z_i | x_i] (N, p) and
    ``log_normalizer`` the row log-sum-exp used by the log-likelihood.

    Scores are formed on x - c and mu - c with c the mean of x: A is unchanged (the shift only
    adds a per-row constant to the scores), and beta <x, mu> no longer swamps the differences
    between keys when the data sit far from the origin (float32 would lose them).
    """
    centre, x_c, atoms_c, beta, key_bias = _centred_problem(x, atoms, weights, sigma)
    att = softmax_attention(x_c, atoms_c, atoms_c, scale=beta, key_bias=key_bias)
    return att._replace(output=att.output + centre)


def _centred_problem(x, atoms, weights, sigma):
    """(c, x - c, mu - c, beta, key bias log w_k - beta |mu_k - c|^2 / 2), c = mean of x."""
    centre = jnp.mean(x, axis=0)
    atoms_c = atoms - centre
    beta = 1.0 / sigma**2
    key_bias = jnp.log(weights) - 0.5 * beta * jnp.sum(atoms_c**2, axis=-1)
    return centre, x - centre, atoms_c, beta, key_bias


def _log_likelihood_from_normalizer(x, lse_sum, sigma):
    """log p(x) = sum_i [logsumexp_k s_ik - beta |x_i - c|^2 / 2] - N p log(2 pi sigma^2) / 2.

    ``lse_sum`` is sum_i logsumexp_k s_ik with the scores of ``e_step_attention``, centred at
    c = mean(x).
    """
    n, p = x.shape
    beta = 1.0 / sigma**2
    const = -0.5 * n * p * jnp.log(2.0 * jnp.pi * sigma**2)
    centred = x - jnp.mean(x, axis=0)
    return lse_sum - 0.5 * beta * jnp.sum(centred**2) + const


def _m_step(x, responsibilities, atoms, weights, update_weights: bool):
    """mu_k <- A[:, k]^T x / sum_i A_ik; an atom with no mass left keeps its position.

    The weighted means are taken of x - c (c = mean of x) and shifted back, for precision.
    """
    centre = jnp.mean(x, axis=0)
    mass = jnp.sum(responsibilities, axis=0)
    total = responsibilities.T @ (x - centre)
    return _atoms_from_sums(centre, mass, total, atoms, weights, x.shape[0], update_weights)


def _atoms_from_sums(centre, mass, total, atoms, weights, n, update_weights):
    """mu_k = c + total_k / mass_k (unchanged where mass_k = 0); w_k = mass_k / N if updated."""
    occupied = mass > 0
    new_atoms = centre + total / jnp.where(occupied, mass, 1.0)[:, None]
    new_atoms = jnp.where(occupied[:, None], new_atoms, atoms)
    new_weights = mass / n if update_weights else weights
    return new_atoms, new_weights


def _column_sums(xc, lse, atoms_c, key_bias, beta, block_size):
    """Pass 2 over row blocks, per atom block: mass_k = sum_i A_ik, total_k = sum_i A_ik x_i.

    A_ik = exp(beta <x_i, mu_k> + b_k - lse_i) is recomputed block by block from the row
    log-normalisers of pass 1 (``lse_i = +inf`` drops row i), so nothing N x K is formed.
    """
    n, p, k, b = xc.shape[0], xc.shape[1], atoms_c.shape[0], block_size
    pad_n, pad_k = (-n) % b, (-k) % b
    x_blocks = jnp.pad(xc, ((0, pad_n), (0, 0))).reshape(-1, b, p)
    lse_blocks = jnp.pad(lse, (0, pad_n), constant_values=jnp.inf).reshape(-1, b)
    atom_blocks = jnp.pad(atoms_c, ((0, pad_k), (0, 0))).reshape(-1, b, p)
    bias_blocks = jnp.pad(key_bias, (0, pad_k), constant_values=-jnp.inf).reshape(-1, b)

    def one_atom_block(args):
        mu_b, bias_b = args

        def body(carry, rows):
            mass, total = carry
            xb, lse_b = rows
            a = jnp.exp(beta * (xb @ mu_b.T) + bias_b[None, :] - lse_b[:, None])
            return (mass + a.sum(0), total + a.T @ xb), None

        init = (jnp.zeros((b,), xc.dtype), jnp.zeros((b, p), xc.dtype))
        (mass, total), _ = jax.lax.scan(body, init, (x_blocks, lse_blocks))
        return mass, total

    mass, total = jax.lax.map(one_atom_block, (atom_blocks, bias_blocks))
    return mass.reshape(-1)[:k], total.reshape(-1, p)[:k]


ROWS = "rows"


def _streamed_statistics(x, atoms, weights, sigma, block_size, num_devices, columns):
    """The streamed E-step statistics, with the data rows sharded over ``num_devices`` devices.

    Returns ``(z_mean (N, p), sum_i lse_i, mass (K,), total (K, p))``; ``mass`` and ``total``
    (pass 2, ``_column_sums``) only when ``columns``, else ``None``. Pass 1 (row log-sum-exp and
    the posterior means) needs no communication between devices; the sums over rows are
    ``psum``-reduced. The rows are padded to a multiple of ``num_devices`` and the padding
    masked out. With one device this is the plain two-pass stream.
    """
    centre, xc, atoms_c, beta, key_bias = _centred_problem(x, atoms, weights, sigma)
    n = x.shape[0]
    pad = (-n) % num_devices
    xc = jnp.pad(xc, ((0, pad), (0, 0)))
    valid = jnp.arange(n + pad) < n

    def on_rows(xc, valid, atoms_c, key_bias, beta):
        out, lse = _streamed_softmax_attention(
            _dot_product, beta, xc, atoms_c, atoms_c, key_bias, block_size
        )
        lse_sum = jnp.sum(jnp.where(valid, lse, 0.0))
        sums = ()
        if columns:
            lse_rows = jnp.where(valid, lse, jnp.inf)
            sums = _column_sums(xc, lse_rows, atoms_c, key_bias, beta, block_size)
        if num_devices > 1:
            lse_sum, sums = jax.lax.psum((lse_sum, sums), ROWS)
        return out, lse_sum, sums

    if num_devices > 1:
        mesh = Mesh(np.asarray(jax.devices()[:num_devices]), (ROWS,))
        on_rows = jax.shard_map(
            on_rows,
            mesh=mesh,
            in_specs=(P(ROWS), P(ROWS), P(), P(), P()),
            out_specs=(P(ROWS), P(), P()),
            check_vma=False,
        )
    out, lse_sum, sums = on_rows(xc, valid, atoms_c, key_bias, beta)
    mass, total = sums if columns else (None, None)
    return out[:n] + centre, lse_sum, mass, total


def _em_iteration(x, atoms, weights, sigma, update_weights, block_size, num_devices):
    """log p(x) at (atoms, weights) and the EM update: dense, or two streamed passes."""
    if block_size is None:
        att = e_step_attention(x, atoms, weights, sigma)
        ll = _log_likelihood_from_normalizer(x, jnp.sum(att.log_normalizer), sigma)
        return ll, *_m_step(x, att.weights, atoms, weights, update_weights)
    _, lse_sum, mass, total = _streamed_statistics(
        x, atoms, weights, sigma, block_size, num_devices, columns=True
    )
    ll = _log_likelihood_from_normalizer(x, lse_sum, sigma)
    centre = jnp.mean(x, axis=0)
    return ll, *_atoms_from_sums(centre, mass, total, atoms, weights, x.shape[0], update_weights)


_STREAM_STATIC = ("block_size", "num_devices")


@functools.partial(jax.jit, static_argnames=("update_weights", *_STREAM_STATIC))
def _em_step(x, atoms, weights, sigma, update_weights, block_size=None, num_devices=1):
    return _em_iteration(x, atoms, weights, sigma, update_weights, block_size, num_devices)[1:]


@functools.partial(jax.jit, static_argnames=("update_weights", "max_iters", *_STREAM_STATIC))
def _fit_em_loop(
    x, atoms, weights, sigma, tol, update_weights, max_iters, block_size=None, num_devices=1
):
    n = x.shape[0]
    trace = jnp.full((max_iters + 1,), jnp.nan, dtype=x.dtype)

    def body(state):
        t, atoms, weights, trace, _, _ = state
        ll, new_atoms, new_weights = _em_iteration(
            x, atoms, weights, sigma, update_weights, block_size, num_devices
        )
        trace = trace.at[t].set(ll)
        converged = (t > 0) & (jnp.abs(ll - trace[jnp.maximum(t - 1, 0)]) <= tol * n)
        stop = converged | (t >= max_iters)
        atoms = jnp.where(stop, atoms, new_atoms)
        weights = jnp.where(stop, weights, new_weights)
        return t + jnp.where(stop, 0, 1), atoms, weights, trace, stop, converged

    state = (jnp.asarray(0), atoms, weights, trace, jnp.asarray(False), jnp.asarray(False))
    t, atoms, weights, trace, _, converged = jax.lax.while_loop(lambda s: ~s[4], body, state)
    return atoms, weights, trace, t, converged


@functools.partial(jax.jit, static_argnames=_STREAM_STATIC)
def _log_likelihood(x, atoms, weights, sigma, block_size=None, num_devices=1):
    if block_size is None:
        lse_sum = jnp.sum(e_step_attention(x, atoms, weights, sigma).log_normalizer)
    else:
        lse_sum = _streamed_statistics(
            x, atoms, weights, sigma, block_size, num_devices, columns=False
        )[1]
    return _log_likelihood_from_normalizer(x, lse_sum, sigma)


@jax.jit
def _posterior(x, atoms, weights, sigma):
    att = e_step_attention(x, atoms, weights, sigma)
    return att.output, att.weights


@functools.partial(jax.jit, static_argnames=_STREAM_STATIC)
def _streamed_posterior_mean(x, atoms, weights, sigma, block_size, num_devices=1):
    return _streamed_statistics(x, atoms, weights, sigma, block_size, num_devices, False)[0]


def _check_streaming(block_size, num_devices) -> tuple[int | None, int]:
    """Validate (block_size, num_devices); default: every local device when streaming."""
    if block_size is not None:
        block_size = _checks.check_positive_int("block_size", block_size)
    available = jax.local_device_count()
    if num_devices is None:
        return block_size, (available if block_size is not None else 1)
    num_devices = _checks.check_positive_int("num_devices", num_devices)
    if num_devices > available:
        raise ValueError(
            f"num_devices: {num_devices} requested but only {available} local device(s) exist "
            "(on the CPU, XLA_FLAGS=--xla_force_host_platform_device_count=N makes N)"
        )
    if num_devices > 1 and block_size is None:
        raise ValueError("num_devices: sharding the rows needs the streamed path (set block_size)")
    return block_size, num_devices


# ----------------------------------------------------------------------------- validation


def _check_problem(x, atoms, weights, sigma):
    """Validate (x, atoms, weights, sigma); return them as (N, p), (K, p), (K,), float + flag."""
    points, scalar = _checks.as_points("x", x)
    atoms_arr = _checks.as_float_array("atoms", atoms)
    if atoms_arr.ndim != (1 if scalar else 2):
        raise ValueError(
            f"atoms: expected shape {'(K,)' if scalar else '(K, p)'} to match x of shape "
            f"{tuple(np.shape(x))}, got {tuple(atoms_arr.shape)}"
        )
    if atoms_arr.shape[0] == 0:
        raise ValueError("atoms: is empty (K = 0)")
    atoms_arr = atoms_arr[:, None] if scalar else atoms_arr
    if atoms_arr.shape[1] != points.shape[1]:
        raise ValueError(
            f"atoms: have {atoms_arr.shape[1]} coordinates but x has {points.shape[1]}"
        )
    _checks.check_finite("atoms", atoms_arr)
    weights = _checks.check_weights("weights", weights, size=atoms_arr.shape[0])
    sigma = _checks.check_positive_scalar("sigma", sigma)
    dtype = jnp.asarray(points).dtype
    if not _checks.is_traced(sigma):
        with np.errstate(over="ignore", under="ignore", divide="ignore"):
            s = np.asarray(sigma, dtype=dtype)
            beta = np.asarray(1.0, dtype) / (s * s)
        if not (np.isfinite(beta) and beta > 0):
            raise ValueError(
                f"sigma: {sigma} is out of range for {np.dtype(dtype).name} "
                f"(1 / sigma^2 = {beta} is not a finite positive number)"
            )
    return (
        jnp.asarray(points, dtype),
        jnp.asarray(atoms_arr, dtype),
        jnp.asarray(weights, dtype),
        jnp.asarray(sigma, dtype),
        scalar,
    )


# ----------------------------------------------------------------------------- public API


def posterior(x, atoms, weights, sigma) -> tuple[jax.Array, jax.Array]:
    """One E-step under nu = (atoms, weights): (E[z_i | x_i] like ``x``, A (N, K))."""
    xs, mus, ws, s, scalar = _check_problem(x, atoms, weights, sigma)
    z_mean, resp = _posterior(xs, mus, ws, s)
    return _checks.restore_shape(z_mean, scalar), resp


def responsibilities(x, atoms, weights, sigma) -> jax.Array:
    """A_ik = P(z_i = mu_k | x_i): the E-step's attention matrix, (N, K)."""
    xs, mus, ws, s, _ = _check_problem(x, atoms, weights, sigma)
    return _posterior(xs, mus, ws, s)[1]


def em_step(
    x,
    atoms,
    weights,
    sigma,
    *,
    update_weights: bool = False,
    block_size: int | None = None,
    num_devices: int | None = None,
):
    """One EM step: E-step by softmax attention, then the M-step (see the module docstring).

    Args:
        x: (N,) or (N, p) observations.
        atoms: (K,) or (K, p) current atoms, in the same convention as ``x``.
        weights: (K,) current weights.
        sigma: known noise scale.
        update_weights: also set w_k <- mean_i A_ik (otherwise the weights are returned as is).
        block_size: stream in two passes over blocks of this many points and atoms (row
            log-sum-exp, then column sums): memory O(block_size^2), never N x K.
        num_devices: with ``block_size``, shard the data rows over this many local devices
            (``jax.shard_map`` over a 1-D mesh; sums over rows are ``psum``-reduced); default
            all local devices. Equal to one device to round-off.

    Returns:
        ``(atoms, weights)`` after the step.
    """
    xs, mus, ws, s, scalar = _check_problem(x, atoms, weights, sigma)
    block_size, num_devices = _check_streaming(block_size, num_devices)
    new_atoms, new_weights = _em_step(xs, mus, ws, s, bool(update_weights), block_size, num_devices)
    return _checks.restore_shape(new_atoms, scalar), new_weights


def log_likelihood(
    x, atoms, weights, sigma, *, block_size: int | None = None, num_devices: int | None = None
) -> jax.Array:
    """log p(x) = sum_i log sum_k w_k N(x_i; mu_k, sigma^2 I_p) (a scalar); streamed with
    ``block_size`` and row-sharded over ``num_devices`` (see ``em_step``)."""
    problem = _check_problem(x, atoms, weights, sigma)[:4]
    block_size, num_devices = _check_streaming(block_size, num_devices)
    return _log_likelihood(*problem, block_size=block_size, num_devices=num_devices)


def posterior_mean(
    x, atoms, weights, sigma, *, block_size: int | None = None, num_devices: int | None = None
) -> jax.Array:
    """E[z_i | x_i] = sum_k A_ik mu_k under nu = sum_k w_k delta(mu_k): one attention step.

    Queries are the data, keys and values the atoms. Returns (N,) or (N, p), like ``x``.
    With ``block_size`` the attention streams over atom blocks (memory O(block_size^2)), with
    the rows sharded over ``num_devices`` (see ``em_step``).
    """
    xs, mus, ws, s, scalar = _check_problem(x, atoms, weights, sigma)
    block_size, num_devices = _check_streaming(block_size, num_devices)
    if block_size is None:
        return _checks.restore_shape(_posterior(xs, mus, ws, s)[0], scalar)
    z_mean = _streamed_posterior_mean(xs, mus, ws, s, block_size, num_devices)
    return _checks.restore_shape(z_mean, scalar)


def initial_atoms(x, num_atoms: int | None = None, init="data") -> jax.Array:
    """Starting atoms: the data themselves (seed 1), or an explicit (K,) / (K, p) array.

    ``init="data"`` with K = N (the default) puts mu_k^0 = x_k. With K < N it takes the K data
    points at evenly spaced ranks along the first coordinate (deterministic, spread out).
    """
    points, scalar = _checks.as_points("x", x)
    n = points.shape[0]
    if isinstance(init, str):
        if init not in INITS:
            raise ValueError(f"init: unknown initialisation {init!r}; known: {list(INITS)}")
        k = n if num_atoms is None else _checks.check_positive_int("num_atoms", num_atoms)
        if k > n:
            raise ValueError(f"num_atoms: init='data' needs num_atoms <= N = {n}, got {k}")
        if k == n:
            chosen = points
        else:
            order = np.argsort(np.asarray(points[:, 0]), kind="stable")
            ranks = np.round(np.linspace(0, n - 1, k)).astype(int)
            chosen = np.asarray(points)[order[ranks]]
        return _checks.restore_shape(jnp.asarray(chosen), scalar)
    start = _checks.as_float_array("init", init)
    if start.ndim != (1 if scalar else 2) or (not scalar and start.shape[1] != points.shape[1]):
        raise ValueError(
            f"init: initial atoms must have shape {'(K,)' if scalar else f'(K, {points.shape[1]})'}"
            f", got {tuple(start.shape)}"
        )
    if num_atoms is not None and start.shape[0] != num_atoms:
        raise ValueError(f"num_atoms: {num_atoms} does not match init with {start.shape[0]} rows")
    _checks.check_finite("init", start)
    return jnp.asarray(start)


def fit_em(
    x,
    sigma,
    *,
    num_atoms: int | None = None,
    init="data",
    weights=None,
    update_weights: bool = False,
    max_iters: int = 200,
    tol: float = 1e-8,
    block_size: int | None = None,
    num_devices: int | None = None,
) -> EMResult:
    """Fit nu = sum_k w_k delta(mu_k) by EM, iterating attention E-steps (seed 1).

    Args:
        x: (N,) or (N, p) observations.
        sigma: known noise scale.
        num_atoms: K; default N (one atom per data point).
        init: "data" or an initial (K,) / (K, p) array of atoms.
        weights: initial weights (K,); default 1/K.
        update_weights: also update the weights (the Kiefer-Wolfowitz EM); default fixed 1/K.
        max_iters: maximum number of EM steps.
        tol: stop when |Delta log p(x)| / N <= tol. The log-likelihood resolves changes of
            about eps |log p(x)| (eps = 1.2e-7 in float32), so a float32 run stops once its
            trace no longer moves at that resolution, usually before a float64 run would.
        block_size: stream each iteration in two passes over blocks of points and atoms
            (memory O(block_size^2) instead of N x K); equal to the dense path to round-off.
        num_devices: with ``block_size``, shard the data rows over this many local devices
            (``jax.shard_map`` over a 1-D mesh; sums over rows are ``psum``-reduced); default
            all local devices. Equal to one device to round-off.

    Returns:
        ``EMResult``; atoms in the convention of ``x``.
    """
    start = initial_atoms(x, num_atoms, init)
    k = start.shape[0]
    if weights is None:
        weights = np.full((k,), 1.0 / k)
    max_iters = _checks.check_positive_int("max_iters", max_iters, minimum=0)
    if isinstance(tol, bool) or not isinstance(tol, numbers.Real) or not tol >= 0:
        raise ValueError(f"tol: must be a number >= 0, got {tol!r}")
    xs, mus, ws, s, scalar = _check_problem(x, start, weights, sigma)
    block_size, num_devices = _check_streaming(block_size, num_devices)
    atoms, weights, trace, t, converged = _fit_em_loop(
        xs,
        mus,
        ws,
        s,
        jnp.asarray(tol, xs.dtype),
        bool(update_weights),
        max_iters,
        block_size,
        num_devices,
    )
    num_iters = int(t)
    return EMResult(
        atoms=_checks.restore_shape(atoms, scalar),
        weights=weights,
        log_likelihood_trace=trace[: num_iters + 1],
        num_iters=num_iters,
        converged=bool(converged),
    )


# The Kiefer-Wolfowitz NPMLE (weights on a fixed grid) lives in its own module; DESIGN names it
# ``inference.em.npmle``, so it is re-exported here (``inference.npmle`` imports em lazily).
from inference.npmle import NPMLEResult, npmle  # noqa: E402

__all__ = [
    "EMResult",
    "NPMLEResult",
    "e_step_attention",
    "em_step",
    "fit_em",
    "initial_atoms",
    "log_likelihood",
    "npmle",
    "posterior",
    "posterior_mean",
    "responsibilities",
]
