"""EM for Gaussian deconvolution, written so that the E-step *is* softmax attention.

The reading of the note "Attention as deconvolution"; EM for mixtures is Dempster, Laird and
Rubin (1977), and with a fixed grid of atoms it is the classical NPMLE iteration (Laird 1978).

Model: x_i ~ sum_k w_k N(mu_k, sigma^2 I_p). With beta = 1 / sigma^2,

    log N(x_i; mu_k, sigma^2 I) = beta <x_i, mu_k> - beta |mu_k|^2 / 2 + c(x_i),

so the responsibilities are row-softmax attention with queries x, keys mu, Q K^T = beta I
and key bias b_k = log w_k - beta |mu_k|^2 / 2:

    E-step   A_ik = softmax_k(beta <x_i, mu_k> + b_k)
    M-step   mu_k <- sum_i A_ik x_i / sum_i A_ik          (and w_k <- sum_i A_ik / N if updated)

The row log-normaliser of that attention gives the observed-data log-likelihood for free,
and attending with values = atoms gives the posterior mean E[z_i | x_i] under the fitted
measure (Tweedie's empirical-Bayes denoiser): one attention step.

Numerics. The kernels form the same scores as s_ik = log w_k - |x_i - mu_k|^2 / (2 sigma^2),
from the differences x_i - mu_k (Gaussian-kernel attention, ``attnbayes.inference.attention``'s
negative squared distance; it differs from the dot-product form by the per-row constant
-beta |x_i|^2 / 2, which the softmax cancels). A difference of nearby points is exact in
floating point wherever the points sit, so float32 keeps the distances between nearby data
and atoms even with data far from the origin or one outlier far from the rest; the row
log-sum-exp is then log sum_k w_k exp(-|x_i - mu_k|^2 / (2 sigma^2)) itself, and the M-step
moves each atom by the weighted mean of x_i - mu_k. The streamed and the sharded paths do the
same tile by tile, except that float64 data and atoms spanning at most 512 sigma (the usual
case; ``estep.centred_sums_allowed``, decided on the concrete inputs) take the M-step's sums
about the atoms' mean, sum_i A_ik (x_i - c) - (mu_k - c) sum_i A_ik, in one matrix product:
round-off below about 1e-16 * 1024 sigma.

Bad input is refused before tracing (``check_problem``): non-finite values, wrong shapes, a
sigma out of range, and a spread (max - min) / sigma of the data and atoms so large that the
squared distances overflow (``attnbayes.validation.max_scaled_spread``: sqrt(finfo.max / (4 N p)),
about 1e153 in float64 and 1e18 in float32 for small N p). Under ``jax.jit`` the arguments are
tracers and only the static checks (shapes, ranks, dtypes) run: non-finite inputs, a sigma of
0 and spreads that overflow then give NaN results (NaN posterior means, responsibilities,
atoms, weights and log-likelihood), and a negative sigma, which enters only through sigma^2,
is not noticed at all. Call ``check_problem`` on the concrete inputs before jitting.

The note's estimator takes K = N atoms started at the data, mu_k^0 = x_k, with w_k = 1/K fixed.

Each observation its own noise. Every function here takes sigma as a number, an (N,) array
(x_i ~ N(z_i, s_i^2 I_p)) or, for x as (N, p), an (N, p) array (x_ic ~ N(z_ic, s_ic^2)). The
E-step scores become log w_k + (<x_i, mu_k> - |mu_k|^2 / 2) / s_i^2: softmax attention with a
per-query temperature s_i^2 that scales the key bias but not log w_k
(``attnbayes.inference.attention.attend`` with ``temperature`` (N,) and ``log_prior``), and the
M-step weights each point by its precision, mu_kc <- sum_i A_ik x_ic / s_ic^2 /
sum_i A_ik / s_ic^2, still the exact EM update (so the log-likelihood never decreases). This is
the heteroscedastic normal-means problem of empirical Bayes (Efron and Morris 1975; Xie, Kou and
Brown 2012; with the NPMLE, Jiang 2020 and Soloff, Guntuboyina and Sen 2024), which the
Kiefer-Wolfowitz NPMLE of ``kiefer_wolfowitz`` solves on a grid.

This module holds the checked public functions and the EM loop; their traceable kernels,
dense and streamed, are in ``estep`` (``posterior`` runs ``estep.posterior_unchecked``, and so
on) and the shared checks in ``checks``.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from ... import sharding, validation
from ..attention import Attention
from .checks import check_data, check_sigma, check_streaming, checked_problem
from .estep import (
    centred_sums_allowed,
    e_step_attention_unchecked,
    em_iteration,
    em_step_unchecked,
    log_likelihood_unchecked,
    posterior_mean_unchecked,
    posterior_unchecked,
    tile_rows,
)

INITS = ("data",)


class EMResult(NamedTuple):
    """The fitted mixing measure and the run's record.

    Attributes:
        atoms: (K,) for scalar data or (K, p), the fitted mu_k.
        weights: (K,) the mixing weights (1/K throughout unless ``update_weights``).
        log_likelihood_trace: (max_iters + 1,) log p(x) at the start and after each EM step
            (entries 0..num_iters), never decreasing (up to round-off); the entries after
            ``num_iters`` are NaN (a fixed shape, so that the result can leave ``jax.jit``):
            ``trace[: int(num_iters) + 1]`` on a concrete result is the run's trace.
        num_iters: () int array, the number of EM steps taken.
        converged: () bool array, whether the per-point change in log-likelihood fell below
            ``tol``.

    A pytree of arrays: it can be returned from ``jax.jit`` and batched by ``jax.vmap``.
    """

    atoms: jax.Array
    weights: jax.Array
    log_likelihood_trace: jax.Array
    num_iters: jax.Array
    converged: jax.Array


# ------------------------------------------------------------------- the E-step and the EM loop


def e_step_attention(x: jax.Array, atoms: jax.Array, weights: jax.Array, sigma) -> Attention:
    """The E-step as attention: queries x (N, p), keys = values = atoms (K, p).

    Returns ``Attention(output, weights, log_normalizer)`` whose ``weights`` are the
    responsibilities A (N, K), ``output`` the posterior means E[z_i | x_i] (N, p) and
    ``log_normalizer`` the row log-sum-exp of the dot-product scores centred at c = mean of x,
    beta <x_i - c, mu_k - c> + log w_k - beta |mu_k - c|^2 / 2, so that
    log p(x_i) = log_normalizer_i - beta |x_i - c|^2 / 2 - p log(2 pi sigma^2) / 2;
    with sigma per unit, beta_ic = 1 / s_ic^2 and
    log p(x_i) = log_normalizer_i - sum_c beta_ic (x_ic - c_c)^2 / 2 - sum_c log(2 pi s_ic^2) / 2.

    A and the posterior means are computed from the differences x_i - mu_k (see the module
    docstring), which keeps nearby points apart in float32 wherever the data sit.

    On concrete arguments it runs ``check_problem`` first (and wants x as (N, p)); on tracers
    (inside ``jax.jit``, as ``attnbayes.inference.deconvolution.invariants`` calls it) no check
    can run, and inputs it would refuse give NaN. Its kernel is
    ``estep.e_step_attention_unchecked``.
    """
    if np.ndim(x) != 2:
        raise ValueError(
            f"x: e_step_attention takes points of shape (N, p), got shape {np.shape(x)}"
        )
    if not any(validation.is_traced(a) for a in (x, atoms, weights, sigma)):
        x, atoms, weights, sigma, _ = checked_problem(x, atoms, weights, sigma)
    elif np.ndim(sigma) == 2 and np.shape(sigma) == (np.shape(x)[0], 1):
        sigma = jnp.asarray(sigma)  # row scales already (the kernels' own form)
    else:
        sigma = jnp.asarray(check_sigma(x, sigma)[1])
    return e_step_attention_unchecked(x, atoms, weights, sigma)


class _LoopState(NamedTuple):
    """The EM loop's state: step t, the atoms and weights at step t, the trace so far, and
    whether the loop has stopped (converged, or t = max_iters)."""

    step: jax.Array
    atoms: jax.Array
    weights: jax.Array
    trace: jax.Array
    stop: jax.Array
    converged: jax.Array


@functools.partial(jax.jit, static_argnames=("update_weights", "block_size", "mesh", "centred"))
def _em_iterations(
    x, sigma, tol, state, max_passes, update_weights, block_size=None, mesh=None, centred=False
) -> _LoopState:
    """EM from ``state``: at most ``max_passes`` passes of the loop, fewer if it stops first.

    A pass at step t records log p(x) at the current atoms in ``trace[t]``, then stops (the
    per-point change from step t - 1 is at most ``tol``, or t = max_iters, max_iters + 1 being
    the trace's length) or takes the EM step to t + 1. The state after the passes depends on
    the passes alone, so chunks of passes run one after another give the state of one loop
    that runs them all (``fit_em`` chunks; ``max_passes`` is an argument, so one program per
    shape serves every chunk length).
    """
    n = x.shape[0]
    max_iters = state.trace.shape[0] - 1

    def body(carry):
        passes, (t, atoms, weights, trace, _, _) = carry
        ll, new_atoms, new_weights = em_iteration(
            x, atoms, weights, sigma, update_weights, block_size, mesh, centred
        )
        trace = trace.at[t].set(ll)
        converged = (t > 0) & (jnp.abs(ll - trace[jnp.maximum(t - 1, 0)]) <= tol * n)
        stop = converged | (t >= max_iters)
        atoms = jnp.where(stop, atoms, new_atoms)
        weights = jnp.where(stop, weights, new_weights)
        step = t + jnp.where(stop, 0, 1)
        return passes + 1, _LoopState(step, atoms, weights, trace, stop, converged)

    def running(carry):
        passes, state = carry
        return ~state.stop & (passes < max_passes)

    return jax.lax.while_loop(running, body, (jnp.zeros((), jnp.int32), state))[1]


# A chunk of a concrete fit does at most this much work, in score entries (N K (p + 1) a pass,
# twice that streamed: the second pass recomputes them): about 0.2-1 s on one CPU core at a few
# ns an entry, after which Python runs and honours a Ctrl-C. One pass is the least a chunk does
# (at N = K = 20,000 dense one pass is 8e8 entries, one to three seconds).
_CHUNK_ENTRIES = 200_000_000


def _chunk_passes(n: int, k: int, p: int, block_size: int | None, max_iters: int) -> int:
    """Loop passes a chunk runs: as many as ``_CHUNK_ENTRIES`` allow, at least 1, at most the
    whole loop (max_iters + 1): small fits run as one chunk."""
    entries = n * k * (p + 1) * (1 if block_size is None else 2)
    return int(min(max_iters + 1, max(1, _CHUNK_ENTRIES // entries)))


def _whole(rows):
    """Per-row results of a sharded program, whole on this process: a concrete array split
    over several processes is gathered (``sharding.gather``); anything else is returned as is."""
    if isinstance(rows, jax.Array) and not validation.is_traced(rows):
        if not rows.is_fully_addressable:
            return jnp.asarray(sharding.gather(rows))
    return rows


def estep_memory_bytes(
    num_points: int,
    num_atoms: int,
    dim: int = 1,
    dtype=jnp.float64,
    block_size: int | None = None,
) -> int:
    """Estimated peak memory in bytes of one EM iteration on N points and K atoms in R^p.

    For deciding, before anything is allocated, whether the dense path fits (a command line
    can refuse ``fit_em`` on 40,000 rows and suggest ``block_size`` instead of running out of
    memory). Counted from what the compiled iteration materialises, as reported by XLA's
    memory analysis (``jax.jit(f).lower(...).compile().memory_analysis()``: temporaries plus
    arguments and outputs) for ``fit_em``'s loop, ``em_step``, ``log_likelihood`` and
    ``posterior_mean``:

    - dense (``block_size=None``): the scores and the responsibilities, two N x K arrays
      (``em_step`` and ``posterior`` hold both; ``fit_em``'s loop and ``log_likelihood`` one),
      plus O((N + K)(p + 1)) vectors: ``itemsize * (2 N K + 4 (N + K) (p + 1))``.
    - streamed (``block_size=b``) with K <= b^2: tiles of R rows against all K atoms
      (``estep.tile_rows``: R K <= min(b^2, 2^19) pairs), each holding its exponentials and,
      per coordinate, one product of them with the differences (column sums), plus a score
      tile of the rare exact branch, p + 2 tiles in all; plus the padded data, the atoms, the
      row log-normalisers, posterior means and column sums:
      ``itemsize * ((p + 2) R K + 5 (N' + K) (p + 1))``, N' rounded up to a multiple of R.
    - streamed with K > b^2 (two passes over blocks of b rows and b atoms): the scores and
      their exponentials for one block (pass 2: one tile of A and one product
      a_ik (x_ic - mu_kc), tiles of at most b), plus the padded copies of data and atoms, the
      row log-normalisers, posterior means and column sums:
      ``itemsize * (2 b^2 + 5 (N' + K') (p + 1))``, with N' and K' rounded up to multiples of b.

    All are upper bounds: for ``fit_em``'s loop and ``em_step`` the measured peaks lie
    between 1/2.1 and 1 times the estimate (XLA fuses some of the arrays away in some
    programs); ``log_likelihood`` and ``posterior_mean`` need no more. Sharding the rows over
    D devices divides the per-row terms by about D on each device.

    Args:
        num_points: N.
        num_atoms: K (``fit_em``'s default is K = N).
        dim: p.
        dtype: float32 or float64 (4 or 8 bytes a number).
        block_size: the streamed path's block size; ``None`` for the dense path.

    Returns:
        The estimate in bytes.

    Example: N = K = 40,000 in float64 needs about 25.6 GB dense, and about 19 MB with
    ``block_size=1024``.
    """
    n = validation.check_positive_int("num_points", num_points)
    k = validation.check_positive_int("num_atoms", num_atoms)
    p = validation.check_positive_int("dim", dim)
    try:
        dt = np.dtype(dtype)
    except TypeError:
        raise ValueError(f"dtype: expected float32 or float64, got {dtype!r}") from None
    if dt not in (np.float32, np.float64):
        raise ValueError(f"dtype: expected float32 or float64, got {dt.name}")
    if block_size is None:
        return dt.itemsize * (2 * n * k + 4 * (n + k) * (p + 1))
    b = validation.check_positive_int("block_size", block_size)
    rows = tile_rows(n, k, b)
    if rows:
        n_pad = -(-n // rows) * rows
        return dt.itemsize * ((p + 2) * rows * k + 5 * (n_pad + k) * (p + 1))
    n_pad, k_pad = -(-n // b) * b, -(-k // b) * b
    return dt.itemsize * (2 * b * b + 5 * (n_pad + k_pad) * (p + 1))


# ----------------------------------------------------------------------------- validation


def check_problem(x, sigma, *, atoms=None, weights=None) -> None:
    """Run every value check of this module's entry points on concrete inputs; raise or pass.

    The checks that ``fit_em``, ``em_step``, ``posterior``, ``posterior_mean``,
    ``log_likelihood``, ``responsibilities`` (and
    ``attnbayes.inference.deconvolution.kiefer_wolfowitz``) run before tracing: x (N,) or (N, p),
    finite and non-empty; sigma a finite number > 0 with 1 / sigma^2 finite in x's dtype, or an
    array of them, (N,) or (N, p) (``checks.check_sigma``); atoms (K,)
    / (K, p) matching x and finite, weights on the simplex (default 1/K); and the spread (max - min)
    / sigma of x and the atoms at most ``attnbayes.validation.max_scaled_spread(dtype, N, p)`` =
    sqrt(finfo.max / (4 N p)), beyond which the squared distances |x_i - mu_k|^2 / sigma^2 and the
    log-likelihood overflow (EM's own atoms stay inside the data's range, so ``fit_em`` needs only x
    checked).

    Under ``jax.jit`` the arguments are tracers and no value check can run: inputs refused
    here then give NaN results. Call this on the concrete inputs first.

    Raises:
        ValueError: naming the offending argument.
    """
    if atoms is not None and weights is None:
        k = np.shape(atoms)[0] if np.ndim(atoms) >= 1 else 0
        weights = np.full((max(k, 1),), 1.0 / max(k, 1))
    checked_problem(x, atoms, weights, sigma)


# ----------------------------------------------------------------------------- public API


def posterior(x, atoms, weights, sigma) -> tuple[jax.Array, jax.Array]:
    """One E-step under nu = (atoms, weights): (E[z_i | x_i] like ``x``, A (N, K)).

    Under ``jax.jit`` (tracers: no value checks) inputs that ``check_problem`` refuses give NaN.
    """
    xs, mus, ws, s, scalar = checked_problem(x, atoms, weights, sigma)
    z_mean, resp = posterior_unchecked(xs, mus, ws, s)
    return validation.restore_shape(z_mean, scalar), resp


def responsibilities(x, atoms, weights, sigma) -> jax.Array:
    """A_ik = P(z_i = mu_k | x_i): the E-step's attention matrix, (N, K).

    Under ``jax.jit`` (tracers: no value checks) inputs that ``check_problem`` refuses give NaN.
    """
    xs, mus, ws, s, _ = checked_problem(x, atoms, weights, sigma)
    return posterior_unchecked(xs, mus, ws, s)[1]


def em_step(
    x,
    atoms,
    weights,
    sigma,
    *,
    update_weights: bool = False,
    block_size: int | None = None,
    mesh=None,
):
    """One EM step: E-step by softmax attention, then the M-step (see the module docstring).

    Args:
        x: (N,) or (N, p) observations.
        atoms: (K,) or (K, p) current atoms, in the same convention as ``x``.
        weights: (K,) current weights.
        sigma: known noise scale: a number, (N,) one per observation, or (N, p) one per
            observation and coordinate (``check_problem``).
        update_weights: also set w_k <- mean_i A_ik (otherwise the weights are returned as is).
        block_size: stream the step (memory O(block_size^2), never N x K): tiles of R rows
            against all K atoms with R K <= block_size^2, one exponential per row-atom pair
            (when K > block_size^2, two passes over blocks of this many points and atoms).
        mesh: with ``block_size``, a one-axis ``jax.sharding.Mesh`` the data rows are sharded
            over (``attnbayes.sharding``; the sums over rows are ``psum``-reduced); default
            None: every device (``sharding.batch_mesh()``). Equal to one device to round-off.
            The dense path (``block_size=None``) is not sharded: None or a one-device mesh.

    Returns:
        ``(atoms, weights)`` after the step. Under ``jax.jit`` (tracers: no value checks)
        inputs that ``check_problem`` refuses give NaN atoms (and weights, when updated):
        call ``check_problem`` on the concrete inputs first.
    """
    xs, mus, ws, s, scalar = checked_problem(x, atoms, weights, sigma)
    update_weights = validation.check_flag("update_weights", update_weights)
    block_size, mesh = check_streaming(block_size, mesh)
    centred = block_size is not None and centred_sums_allowed(xs, mus, s)
    new_atoms, new_weights = em_step_unchecked(
        xs, mus, ws, s, update_weights, block_size, mesh, centred
    )
    return validation.restore_shape(new_atoms, scalar), new_weights


def log_likelihood(
    x, atoms, weights, sigma, *, block_size: int | None = None, mesh=None
) -> jax.Array:
    """log p(x) = sum_i log sum_k w_k N(x_i; mu_k, sigma^2 I_p) (a scalar); streamed with
    ``block_size`` and row-sharded over ``mesh`` (default every device; see ``em_step``).

    Under ``jax.jit`` (tracers: no value checks) inputs that ``check_problem`` refuses give NaN.
    """
    problem = checked_problem(x, atoms, weights, sigma)[:4]
    block_size, mesh = check_streaming(block_size, mesh)
    return log_likelihood_unchecked(*problem, block_size=block_size, mesh=mesh)


def posterior_mean(
    x, atoms, weights, sigma, *, block_size: int | None = None, mesh=None
) -> jax.Array:
    """E[z_i | x_i] = sum_k A_ik mu_k under nu = sum_k w_k delta(mu_k): one attention step.

    Queries are the data, keys and values the atoms. Returns (N,) or (N, p), like ``x``.
    With ``block_size`` the attention streams (memory O(block_size^2)), with the rows sharded
    over ``mesh`` (default every device; see ``em_step``). Under several processes
    (``jax.distributed``) the sharded rows are gathered (``attnbayes.sharding.gather``), so that
    every process gets the whole (N, p) array; every process must make the call.

    Under ``jax.jit`` (tracers: no value checks) inputs that ``check_problem`` refuses give NaN.
    """
    xs, mus, ws, s, scalar = checked_problem(x, atoms, weights, sigma)
    block_size, mesh = check_streaming(block_size, mesh)
    if block_size is None:
        return validation.restore_shape(posterior_unchecked(xs, mus, ws, s)[0], scalar)
    z_mean = _whole(posterior_mean_unchecked(xs, mus, ws, s, block_size, mesh))
    return validation.restore_shape(z_mean, scalar)


def _start_atoms(points, scalar, num_atoms, init):
    """The checked starting atoms (K, p) of ``initial_atoms`` for checked ``points`` (N, p)."""
    n = points.shape[0]
    if isinstance(init, str):
        if init not in INITS:
            raise ValueError(f"init: unknown initialisation {init!r}; known: {list(INITS)}")
        k = n if num_atoms is None else validation.check_positive_int("num_atoms", num_atoms)
        if k > n:
            raise ValueError(f"num_atoms: init='data' needs num_atoms <= N = {n}, got {k}")
        if k == n:
            return points
        ranks = np.round(np.linspace(0, n - 1, k)).astype(int)  # static: depends on N, K only
        if validation.is_traced(points):
            return points[jnp.argsort(points[:, 0], stable=True)[ranks]]
        order = np.argsort(np.asarray(points[:, 0]), kind="stable")
        return np.asarray(points)[order[ranks]]
    start = validation.as_float_array("init", init)
    p = points.shape[1]
    if start.ndim != (1 if scalar else 2) or (not scalar and start.shape[1] != p):
        raise ValueError(
            f"init: initial atoms must have shape {'(K,)' if scalar else f'(K, {p})'}"
            f", got {tuple(start.shape)}"
        )
    if start.shape[0] == 0:
        raise ValueError("init: is empty (K = 0)")
    if num_atoms is not None and start.shape[0] != num_atoms:
        raise ValueError(f"num_atoms: {num_atoms} does not match init with {start.shape[0]} rows")
    validation.check_finite("init", start)
    return start[:, None] if scalar else start


def initial_atoms(x, num_atoms: int | None = None, init="data") -> jax.Array:
    """Starting atoms: the data themselves (the note "Attention as
    deconvolution"), or an explicit (K,) / (K, p) array.

    ``init="data"`` with K = N (the default) puts mu_k^0 = x_k. With K < N it takes the K data
    points at evenly spaced ranks along the first coordinate (deterministic, spread out).

    Traceable (``jax.jit``, ``jax.vmap``); not differentiable in ``x`` for K < N (a sort picks
    the points).
    """
    points, scalar = validation.as_points("x", x)
    start = _start_atoms(points, scalar, num_atoms, init)
    return validation.restore_shape(jnp.asarray(start), scalar)


def _check_tol(tol):
    """fit_em's tolerance: a real number >= 0 (or a 0-d tracer, not value-checked)."""
    value = validation.check_real_scalar("tol", tol, "a number >= 0")
    if not validation.is_traced(value) and not value >= 0:
        raise ValueError(f"tol: must be a number >= 0, got {tol!r}")
    return tol


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
    mesh=None,
) -> EMResult:
    """Fit nu = sum_k w_k delta(mu_k) by EM, iterating attention E-steps.

    The iteration is a ``lax.while_loop``: ``fit_em`` is traceable over its array arguments
    (``x``, ``sigma``, an ``init`` array, ``weights``, ``tol``) under ``jax.jit`` and
    ``jax.vmap``, with ``max_iters``, ``num_atoms``, ``update_weights``, ``block_size`` and
    ``mesh`` static; traced, it is one loop. It is not reverse-mode differentiable (a
    while loop); differentiate ``posterior_mean``, ``log_likelihood`` or ``em_step`` at the
    fitted atoms instead. On concrete arguments the loop runs in chunks of one compiled program
    (each chunk at most about 2e8 score entries, N K (p + 1) a step, twice that streamed, and at
    least one step), back in Python between chunks, so that a Ctrl-C (KeyboardInterrupt) stops a
    long fit within about a second (one step, 1-3 s, at N = K = 20,000); small fits run as one
    chunk. The chunks split the same sequence of steps: the result equals the one loop's bit
    for bit, and no more programs are compiled.

    Args:
        x: (N,) or (N, p) observations.
        sigma: known noise scale: a number, (N,) one per observation, or (N, p) one per
            observation and coordinate (``check_problem``).
        num_atoms: K; default N (one atom per data point).
        init: "data" or an initial (K,) / (K, p) array of atoms.
        weights: initial weights (K,); default 1/K.
        update_weights: also update the weights (the Kiefer-Wolfowitz EM); default fixed 1/K.
        max_iters: maximum number of EM steps (a static Python int).
        tol: stop when |Delta log p(x)| / N <= tol (a number >= 0, or a 0-d array). The
            log-likelihood resolves changes of about eps |log p(x)| (eps = 1.2e-7 in float32),
            so a float32 run stops once its trace no longer moves at that resolution, usually
            before a float64 run would.
        block_size: stream each iteration (memory O(block_size^2) instead of N x K; see
            ``em_step``); equal to the dense path to round-off.
        mesh: with ``block_size``, the one-axis ``jax.sharding.Mesh`` the data rows are
            sharded over (the sums over rows are ``psum``-reduced); default None: every device
            (``sharding.batch_mesh()``). Equal to one device to round-off; the dense path
            takes None or a one-device mesh. The result (atoms, weights, trace) is the same
            on every device and process.

    Returns:
        ``EMResult``, a pytree of arrays; atoms in the convention of ``x``. Under ``jax.jit``
        (tracers: only the static checks run) non-finite or overflowing inputs that
        ``check_problem`` refuses give NaN atoms, weights and trace, run to ``max_iters`` with
        ``converged`` False (see the module docstring for what is not noticed): call
        ``check_problem(x, sigma, atoms=init)`` on the concrete inputs first.

    Raises:
        ValueError: bad input, naming the argument (see ``check_problem``), before any
            tracing; among others data whose spread (max - min) / sigma exceeds
            sqrt(finfo.max / (4 N p)), where the squared distances overflow.
    """
    points, scalar, dtype, sigma = check_data(x, sigma)
    validation.check_scaled_spread("x", points, sigma, dtype)
    start = _start_atoms(points, scalar, num_atoms, init)
    k = start.shape[0]
    max_iters = validation.check_positive_int("max_iters", max_iters, minimum=0)
    tol = _check_tol(tol)
    update_weights = validation.check_flag("update_weights", update_weights)
    if weights is None:
        weights = np.full((k,), 1.0 / k)
    else:
        weights = validation.check_weights("weights", weights, size=k)
    if not isinstance(init, str):  # the data's own atoms stay inside the data's range
        others = (("init", start),)
        validation.check_scaled_spread("x", points, sigma, dtype, others=others)
    block_size, mesh = check_streaming(block_size, mesh)
    # EM's atoms stay in the range of the data and the starting atoms
    # decided in the run's dtype (float32 when x64 is off: never centred)
    centred = block_size is not None and centred_sums_allowed(
        jnp.asarray(points, dtype), start, sigma
    )
    args = (jnp.asarray(points, dtype), jnp.asarray(sigma, dtype), jnp.asarray(tol, dtype))
    static = (update_weights, block_size, mesh, centred)
    state = _LoopState(
        step=np.int32(0),
        atoms=jnp.asarray(start, dtype),
        weights=jnp.asarray(weights, dtype),
        trace=np.full((max_iters + 1,), np.nan, dtype),
        stop=np.False_,
        converged=np.False_,
    )
    if validation.any_traced(*args, state):  # under jit / vmap: one loop
        state = _em_iterations(*args, state, max_iters + 1, *static)
    else:  # concrete: chunks, back in Python (where Ctrl-C is honoured) between them
        passes = _chunk_passes(points.shape[0], k, points.shape[1], block_size, max_iters)
        state = _em_iterations(*args, state, passes, *static)
        # a chunk of max_iters + 1 passes is the whole loop: no wait, the result stays async
        while passes <= max_iters and not bool(state.stop):
            state = _em_iterations(*args, state, passes, *static)
    return EMResult(
        atoms=validation.restore_shape(state.atoms, scalar),
        weights=state.weights,
        log_likelihood_trace=state.trace,
        num_iters=state.step,
        converged=state.converged,
    )


__all__ = [
    "EMResult",
    "check_problem",
    "e_step_attention",
    "em_step",
    "estep_memory_bytes",
    "fit_em",
    "initial_atoms",
    "log_likelihood",
    "posterior",
    "posterior_mean",
    "responsibilities",
]
