"""The E-step and M-step kernels of deconvolution EM, dense and streamed: no checks.

The traceable kernels beneath ``attnbayes.inference.deconvolution.em`` (whose module docstring
has the mathematics), used also by ``gibbs``, ``kiefer_wolfowitz``, ``comparison`` and the
learned stack (``learned``), each on inputs it checked at its own boundary
(``checks.checked_problem``). With beta = 1 / sigma^2 and s_ik = log w_k - |x_i - mu_k|^2 /
(2 sigma^2) (the dot-product scores of the note up to a per-row constant), the E-step is
A_ik = softmax_k(s_ik) and the M-step mu_k <- mu_k + sum_i A_ik (x_i - mu_k) / sum_i A_ik,
both formed from the differences x_i - mu_k (exact for nearby points wherever they sit).

- Dense: the N x K scores and responsibilities are held (``posterior_unchecked``, ``m_step``,
  ``weighted_differences``).
- Streamed (``block_size=B``): two passes over blocks of B points and B atoms, as
  memory-efficient attention: pass 1 the row log-sum-exp and the posterior means
  (``attnbayes.inference.attention.scored_attention_unchecked`` with a running log-sum-exp),
  pass 2 the column sums sum_i A_ik and sum_i A_ik (x_i - mu_k) (``block_sums``) from the
  recomputed A_ik = exp(s_ik - lse_i); memory O(B^2), never N x K. With ``num_devices > 1`` the
  data rows are sharded over devices (``jax.shard_map``) and the sums over rows ``psum``-reduced.

Heteroscedastic noise, x_i ~ N(z_i, diag(s_i1^2, ..., s_ip^2)): sigma is an array of shape ()
(one scale for all), (N, 1) (s_i per observation) or (N, p) (per observation and coordinate),
broadcasting against x (``checks.check_sigma``). The scores become
s_ik = log w_k - sum_c (x_ic - mu_kc)^2 / (2 s_ic^2): for (N, 1) the dot-product form
log w_k + (<x_i, mu_k> - |mu_k|^2 / 2) / s_i^2 is softmax attention with a per-query temperature
s_i^2 that scales the key bias -|mu_k|^2 / 2 but not log w_k
(``attnbayes.inference.attention.attend``'s ``temperature`` (Q,) and ``log_prior``). The M-step
is then precision-weighted, coordinate by coordinate,
mu_kc <- mu_kc + sum_i A_ik (x_ic - mu_kc) / s_ic^2 / sum_i A_ik / s_ic^2 (w_k <- sum_i A_ik / N
as before): the exact maximiser of the expected complete-data log-likelihood, so the iteration
stays monotone. Streamed, the row scales travel with the rows (pass 1 attends with queries
[x_i, 1 / s_i]; pass 2 blocks them with x; the sharded path shards them with x). A scalar sigma
takes exactly the homoscedastic code (the same numbers as before).

``em_iteration`` is one EM update and the log-likelihood at its start; ``em_step_unchecked``,
``log_likelihood_unchecked``, ``posterior_unchecked``, ``posterior_mean_unchecked`` and
``e_step_attention_unchecked`` are the kernels of the checked functions of ``em`` of the same
names (x as (N, p), atoms (K, p), weights (K,) and sigma as arrays of one float dtype).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh
from jax.sharding import PartitionSpec as P

from ..attention import Attention, scored_attention_unchecked


def _scores(x, atoms, log_weights, sigma):
    """(N, K) s_ik = log w_k - |x_i - mu_k|^2 / (2 sigma^2), from the differences x_i - mu_k.

    Summed coordinate by coordinate (p is small): each term is an (N, K) elementwise
    expression that XLA fuses, where a reduction over a short trailing axis would be slow.
    """
    return log_weights[None, :] + _log_kernel(x, atoms, sigma)


def _log_kernel(x, atoms, sigma):
    """(N, K) -|x_i - mu_k|^2 / (2 sigma^2): the score function of the streamed pass."""
    return -0.5 * _sq_distances(x, atoms, sigma)


def _sq_distances(x, atoms, sigma):
    """(N, K) sum_c (x_ic - mu_kc)^2 / s_ic^2 from the differences, one coordinate at a time.

    ``sigma`` has shape (), (N, 1) or (N, p) (``row_scale`` picks coordinate c's column).
    """
    inv_sigma = 1.0 / sigma
    total = None
    for c in range(x.shape[1]):
        u = (x[:, c, None] - atoms[None, :, c]) * row_scale(inv_sigma, c)
        total = u * u if total is None else total + u * u
    return total


def row_scale(scales, c: int):
    """Coordinate c's column of row scales of shape () (returned as is), (N, 1) or (N, p), as
    an (N, 1) column (or the scalar) that broadcasts against an (N, K) block."""
    if jnp.ndim(scales) == 0:
        return scales
    return scales[:, min(c, scales.shape[1] - 1), None]


def _row_scaled_log_kernel(rows, atoms, _):
    """(B, K) -sum_c (x_ic - mu_kc)^2 / (2 s_ic^2) for ``rows`` = [x_i, 1 / s_i] (B, p + r):
    the score function of the heteroscedastic streamed pass (the row scales ride with the
    queries, so the blocks of rows carry their own scales)."""
    p = atoms.shape[1]
    x, inv_sigma = rows[:, :p], rows[:, p:]
    total = None
    for c in range(p):
        u = (x[:, c, None] - atoms[None, :, c]) * row_scale(inv_sigma, c)
        total = u * u if total is None else total + u * u
    return -0.5 * total


def _e_step(x, atoms, weights, sigma) -> Attention:
    """Dense E-step: ``Attention(posterior means, A, lse)`` with the difference-form scores.

    ``lse_i = log sum_k w_k exp(-|x_i - mu_k|^2 / (2 sigma^2))``, so
    log p(x_i) = lse_i - p log(2 pi sigma^2) / 2 with nothing cancelling. A row whose scores
    are all -inf (squared distances overflowed: only under jit, where ``check_problem`` cannot
    run) gives NaN responsibilities, posterior mean and lse rather than a plausible zero.
    """
    # the barrier stores the scores once (N x K) rather than letting XLA keep each
    # coordinate's differences to share between the max and the exponential
    scores = jax.lax.optimization_barrier(_scores(x, atoms, jnp.log(weights), sigma))
    top = jax.lax.stop_gradient(jnp.max(scores, axis=-1, keepdims=True))
    unnormalised = jnp.exp(scores - top)
    total = jnp.sum(unnormalised, axis=-1, keepdims=True)
    resp = unnormalised / total
    return Attention(resp @ atoms, resp, (top + jnp.log(total))[:, 0])


def e_step_attention_unchecked(x, atoms, weights, sigma) -> Attention:
    """The kernel of ``em.e_step_attention``: ``Attention(posterior means, A, log_normalizer)``
    with the log-normaliser of the dot-product scores centred at c = mean of x (see there)."""
    att = _e_step(x, atoms, weights, sigma)
    centred = x - jnp.mean(x, axis=0)
    if jnp.ndim(sigma) == 0:
        log_normalizer = att.log_normalizer + 0.5 * jnp.sum(centred**2, axis=-1) / sigma**2
    else:
        log_normalizer = att.log_normalizer + 0.5 * jnp.sum(centred**2 / sigma**2, axis=-1)
    return att._replace(log_normalizer=log_normalizer)


def _log_likelihood_from_normalizer(x, lse_sum, sigma):
    """log p(x) = sum_i lse_i - N p log(2 pi sigma^2) / 2 (sum_ic log(2 pi s_ic^2) / 2 per unit).

    ``lse_sum`` is sum_i log sum_k w_k exp(-|x_i - mu_k|^2 / (2 sigma^2)): the row
    log-normalisers of the difference-form scores (``_e_step``, ``_streamed_statistics``), which
    need no centring term.
    """
    n, p = x.shape
    if jnp.ndim(sigma) == 0:
        return lse_sum - 0.5 * n * p * jnp.log(2.0 * jnp.pi * sigma**2)
    log_norm = jnp.broadcast_to(jnp.log(2.0 * jnp.pi * sigma**2), x.shape)
    return lse_sum - 0.5 * jnp.sum(log_norm)


def m_step(x, responsibilities, atoms, weights, update_weights: bool, sigma=None):
    """mu_k <- mu_k + sum_i A_ik (x_i - mu_k) / sum_i A_ik; an atom with no mass stays put.

    Equal to sum_i A_ik x_i / sum_i A_ik, but summing the differences x_i - mu_k (small where
    A_ik is not negligible) keeps the precision of nearby points wherever the data sit.
    ``sigma`` None or of shape () (one noise scale: the M-step does not depend on it), or row
    scales (N, 1) / (N, p): then the precision-weighted update
    mu_kc <- mu_kc + sum_i A_ik (x_ic - mu_kc) / s_ic^2 / sum_i A_ik / s_ic^2.
    """
    mass = jnp.sum(responsibilities, axis=0)
    # the barrier keeps XLA from sharing x_i - mu_k with the E-step, which would store it as an
    # (N, K, p) array; recomputed here it fuses into the reduction
    x, atoms = jax.lax.optimization_barrier((x, atoms))
    if sigma is None or jnp.ndim(sigma) == 0:
        shift = weighted_differences(responsibilities, x, atoms)
        return _atoms_from_sums(mass, shift, atoms, weights, x.shape[0], update_weights)
    precision_mass, shift = precision_sums(
        responsibilities,
        x,
        atoms,
        relative_precisions(sigma, _smallest(sigma)),
        weighted_differences,
    )
    return _atoms_from_sums(mass, shift, atoms, weights, x.shape[0], update_weights, precision_mass)


def _smallest(sigma):
    """min sigma, a constant to the derivatives (``relative_precisions``)."""
    return jax.lax.stop_gradient(jnp.min(sigma))


def relative_precisions(sigma, smallest):
    """(s_min / s_ic)^2 <= 1: the precisions 1 / s_ic^2 divided by the largest, 1 / s_min^2.

    The precision-weighted atom update is a ratio of two sums of precisions, unchanged by a
    common factor; relative precisions keep those sums at most N (1 / s^2 summed over many
    rows overflows float32 where each term does not). ``smallest`` is held constant for the
    derivatives, which the ratio does not depend on.
    """
    return jnp.square(smallest / sigma)


def precision_sums(a, x, atoms, precisions, sums):
    """``(precision mass (K, r), shift (K, p))``: sum_i a_ik / s_ic^2 and
    sum_i a_ik (x_ic - mu_kc) / s_ic^2 for row precisions (N, r), r = 1 or p.

    ``sums(a, x, atoms)`` is the homoscedastic reduction (``weighted_differences`` dense,
    ``block_sums``' shift streamed). With one precision per row (r = 1) the rows of ``a`` are
    scaled once; per coordinate (r = p) each coordinate gets its own scaled copy.
    """
    if precisions.shape[1] == 1:
        scaled = a * precisions
        return jnp.sum(scaled, axis=0)[:, None], sums(scaled, x, atoms)
    masses, shifts = [], []
    for c in range(x.shape[1]):
        scaled = a * precisions[:, c, None]
        masses.append(jnp.sum(scaled, axis=0))
        shifts.append(sums(scaled, x[:, c : c + 1], atoms[:, c : c + 1])[:, 0])
    return jnp.stack(masses, axis=-1), jnp.stack(shifts, axis=-1)


def weighted_differences(a, x, atoms):
    """(K, p) sum_i a_ik (x_i - mu_k) for an (N, K) ``a`` held whole (the dense M-step).

    The products a_ik (x_ic - mu_kc) are fused by XLA into the reductions over the rows, so no
    N x K x p array (nor a second N x K one) is stored. The form depends on the (static) dtype,
    because the speed of XLA's CPU reductions does: in float64 one (p, N, K) product reduced
    over its middle axis; in float32 (and other dtypes) one (N, K) product per coordinate,
    reduced over axis 0. The dense step at N = K = 8000 in 2-D took 101 ns per pair in float32
    with the (p, N, K) form and 8.6 per coordinate; in float64 17 with the (p, N, K) form and 5
    to 20 % more per coordinate (2-core AMD EPYC, jax 0.12, one core busy elsewhere). The
    streamed pass works on blocks and uses ``block_sums`` instead.
    """
    if a.dtype == jnp.float64:
        diffs = x.T[:, :, None] - atoms.T[:, None, :]  # (p, N, K)
        return jnp.sum(a[None, :, :] * diffs, axis=1).T
    return jnp.stack(
        [jnp.sum(a * (x[:, c, None] - atoms[None, :, c]), axis=0) for c in range(x.shape[1])],
        axis=-1,
    )


def block_sums(a, x, atoms):
    """``(mass (K,), shift (K, p))`` of one block ``a`` (N_b, K_b) of A: sum_i a_ik and
    sum_i a_ik (x_i - mu_k), the differences summed as in ``weighted_differences``.

    The form depends on the (static) dtype. In float64 the sums are XLA reductions (the mass
    ``a.sum(0)`` and the (p, N, K) form of ``weighted_differences``), which XLA's CPU backend
    runs on both cores. In float32 (and other dtypes) those reductions are slow on such blocks,
    and every sum over the rows is instead a vector-matrix product with a vector of ones
    (``ones @ a`` and ``ones @ (a * (x_c - mu_c))`` for each coordinate c), a vectorised GEMV,
    the products formed in an elementwise pass before it. The coordinates run in a
    ``lax.scan``, so that one product array lives at a time: the block holds two N_b x K_b
    arrays (``a`` and one product) whatever p is, as ``estep_memory_bytes`` counts (unrolled,
    XLA keeps all p products alive). Measured on the streamed step at N = K = 12,000 in 2-D
    (``block_size=1024``; 2-core AMD EPYC, jax 0.12; ns per pair of wall time, CPU time in
    brackets): float32 8.6 (16.7) with the (p, N, K) form, 3.8 (6.6) with one reduction per
    coordinate, 2.7 (3.8) with the GEMVs; float64 5.9 (11.6) with the reductions, 7.3 to 8.0
    (9.2 to 10.6) with the GEMVs, which run on one core (they win only when the other core is
    busy).
    """
    if a.dtype == jnp.float64:
        return jnp.sum(a, axis=0), weighted_differences(a, x, atoms)
    highest = jax.lax.Precision.HIGHEST
    ones = jnp.ones((a.shape[0],), a.dtype)
    mass = jnp.dot(ones, a, precision=highest)

    def coordinate(_, columns):
        x_c, mu_c = columns
        return None, jnp.dot(ones, a * (x_c[:, None] - mu_c[None, :]), precision=highest)

    _, shift = jax.lax.scan(coordinate, None, (x.T, atoms.T))
    return mass, shift.T


def _atoms_from_sums(mass, shift, atoms, weights, n, update_weights, precision_mass=None):
    """mu_k + shift_k / mass_k (unchanged where mass_k = 0); w_k = mass_k / N if updated.

    With per-unit noise the atoms divide by the precision mass (K, r) instead (an atom, or a
    coordinate of one, with no precision mass stays put). A NaN mass (an overflowed row under
    jit) propagates to the atom rather than being read as "no mass".
    """
    divisor = mass[:, None] if precision_mass is None else precision_mass
    empty = divisor == 0
    new_atoms = atoms + shift / jnp.where(empty, 1.0, divisor)
    new_atoms = jnp.where(empty, atoms, new_atoms)
    new_weights = mass / n if update_weights else weights
    return new_atoms, new_weights


# Pass 2 of the streamed step (``_column_sums``) works on tiles of at most this many rows and
# atoms, whatever the block size: a float32 tile then holds two arrays of 256 x 256
# (``block_sums``), which stay in the per-core cache. With the command line's suggested block
# of 1024 as the tile the float32 step took 10 to 40 % longer (N = K = 12,000, 2-core AMD EPYC,
# in several runs on a shared machine); in float64 the tile made no difference beyond noise.
# Pass 1 keeps the caller's block size, at which it is fastest.
_COLUMN_TILE = 256


def _block_shift(a, x, atoms):
    """``block_sums``' shift alone: sum_i a_ik (x_i - mu_k) of one block."""
    return block_sums(a, x, atoms)[1]


def _column_sums(x, lse, atoms, log_weights, sigma, block_size, smallest=None):
    """Pass 2 over row blocks, per atom block: mass_k = sum_i A_ik and
    shift_k = sum_i A_ik (x_i - mu_k); with row scales ``sigma`` (N, r) also the precision
    mass sum_i A_ik / s_ic^2, and the shift precision-weighted (``precision_sums``).

    A_ik = exp(s_ik - lse_i) is recomputed block by block from the row log-normalisers of
    pass 1 (``lse_i = +inf`` drops row i), so nothing N x K is formed. The blocks are
    ``min(block_size, _COLUMN_TILE)`` square; their sums are ``block_sums``. Returns
    ``(mass (K,), precision mass (K, r) or None, shift (K, p))``.
    """
    n, p, k = x.shape[0], x.shape[1], atoms.shape[0]
    b = min(block_size, _COLUMN_TILE)
    pad_n, pad_k = (-n) % b, (-k) % b
    x_blocks = jnp.pad(x, ((0, pad_n), (0, 0)), mode="edge").reshape(-1, b, p)
    lse_blocks = jnp.pad(lse, (0, pad_n), constant_values=jnp.inf).reshape(-1, b)
    atom_blocks = jnp.pad(atoms, ((0, pad_k), (0, 0)), mode="edge").reshape(-1, b, p)
    bias_blocks = jnp.pad(log_weights, (0, pad_k), constant_values=-jnp.inf).reshape(-1, b)
    per_unit = jnp.ndim(sigma) > 0
    if per_unit:
        r = sigma.shape[1]
        sigma_blocks = jnp.pad(sigma, ((0, pad_n), (0, 0)), mode="edge").reshape(-1, b, r)
    else:
        r, sigma_blocks = 1, None  # one scale: closed over

    def one_atom_block(args):
        mu_b, bias_b = args

        def body(carry, rows):
            mass, precision_mass, shift = carry
            xb, lse_b, sigma_b = rows
            sigma_b = sigma if sigma_b is None else sigma_b
            a = jnp.exp(_scores(xb, mu_b, bias_b, sigma_b) - lse_b[:, None])
            if per_unit:
                block_mass = jnp.sum(a, axis=0)
                block_precision, block_shift = precision_sums(
                    a, xb, mu_b, relative_precisions(sigma_b, smallest), _block_shift
                )
                precision_mass = precision_mass + block_precision
            else:
                block_mass, block_shift = block_sums(a, xb, mu_b)
            return (mass + block_mass, precision_mass, shift + block_shift), None

        init = (
            jnp.zeros((b,), x.dtype),
            jnp.zeros((b, r), x.dtype),
            jnp.zeros((b, p), x.dtype),
        )
        carry, _ = jax.lax.scan(body, init, (x_blocks, lse_blocks, sigma_blocks))
        return carry

    mass, precision_mass, shift = jax.lax.map(one_atom_block, (atom_blocks, bias_blocks))
    precision_mass = precision_mass.reshape(-1, r)[:k] if per_unit else None
    return mass.reshape(-1)[:k], precision_mass, shift.reshape(-1, p)[:k]


ROWS = "rows"


def _streamed_statistics(x, atoms, weights, sigma, block_size, num_devices, columns):
    """The streamed E-step statistics, with the data rows sharded over ``num_devices`` devices.

    Returns ``(z_mean (N, p), sum_i lse_i, sums)`` with ``sums`` = ``(mass (K,), precision
    mass (K, r) or None, shift (K, p))`` (pass 2, ``_column_sums``) only when ``columns``, else
    ``None``. Scores are formed from the differences x_i - mu_k block by block, as in the dense
    ``_e_step``; row scales (sigma of shape (N, r)) travel with the rows. Pass 1 (row
    log-sum-exp and the posterior means) needs no communication between devices; the sums over
    rows are ``psum``-reduced. The rows are padded (with copies of the last row, so every
    padded score is as finite as a real one) to a multiple of ``num_devices * block_size`` and
    the padding masked out. With one device this is the plain two-pass stream.
    """
    n = x.shape[0]
    pad = (-n) % (num_devices * block_size)
    xp = jnp.pad(x, ((0, pad), (0, 0)), mode="edge")
    valid = jnp.arange(n + pad) < n
    log_weights = jnp.log(weights)
    per_unit = jnp.ndim(sigma) > 0
    smallest = None
    if per_unit:
        smallest = _smallest(sigma)  # over all rows, before sharding: one scale for every shard
        sigma = jnp.pad(sigma, ((0, pad), (0, 0)), mode="edge")

    def on_rows(xp, valid, atoms, log_weights, sigma, smallest):
        if per_unit:
            rows = jnp.concatenate([xp, 1.0 / sigma], axis=1)
            out, _, lse = scored_attention_unchecked(
                _row_scaled_log_kernel, None, rows, atoms, atoms, log_weights, block_size, False
            )
        else:
            out, _, lse = scored_attention_unchecked(
                _log_kernel, sigma, xp, atoms, atoms, log_weights, block_size, False
            )
        # all scores -inf (overflow; only under jit, where the checks cannot run): NaN, not 0
        lse = jnp.where(lse == -jnp.inf, jnp.nan, lse)
        out = jnp.where(jnp.isnan(lse)[:, None], jnp.nan, out)
        lse_sum = jnp.sum(jnp.where(valid, lse, 0.0))
        sums = ()
        if columns:
            lse_rows = jnp.where(valid, lse, jnp.inf)
            sums = _column_sums(xp, lse_rows, atoms, log_weights, sigma, block_size, smallest)
        if num_devices > 1:
            lse_sum, sums = jax.lax.psum((lse_sum, sums), ROWS)
        return out, lse_sum, sums

    if num_devices > 1:
        mesh = Mesh(np.asarray(jax.devices()[:num_devices]), (ROWS,))
        on_rows = jax.shard_map(
            on_rows,
            mesh=mesh,
            in_specs=(P(ROWS), P(ROWS), P(), P(), P(ROWS) if per_unit else P(), P()),
            out_specs=(P(ROWS), P(), P()),
            check_vma=False,
        )
    out, lse_sum, sums = on_rows(xp, valid, atoms, log_weights, sigma, smallest)
    return out[:n], lse_sum, (sums if columns else None)


def em_iteration(x, atoms, weights, sigma, update_weights, block_size, num_devices):
    """log p(x) at (atoms, weights) and the EM update: dense, or two streamed passes."""
    if block_size is None:
        att = _e_step(x, atoms, weights, sigma)
        ll = _log_likelihood_from_normalizer(x, jnp.sum(att.log_normalizer), sigma)
        return ll, *m_step(x, att.weights, atoms, weights, update_weights, sigma)
    _, lse_sum, (mass, precision_mass, shift) = _streamed_statistics(
        x, atoms, weights, sigma, block_size, num_devices, columns=True
    )
    ll = _log_likelihood_from_normalizer(x, lse_sum, sigma)
    return ll, *_atoms_from_sums(
        mass, shift, atoms, weights, x.shape[0], update_weights, precision_mass
    )


_STREAM_STATIC = ("block_size", "num_devices")


@functools.partial(jax.jit, static_argnames=("update_weights", *_STREAM_STATIC))
def em_step_unchecked(x, atoms, weights, sigma, update_weights, block_size=None, num_devices=1):
    """The kernel of ``em.em_step``: ``(atoms, weights)`` after one EM step."""
    return em_iteration(x, atoms, weights, sigma, update_weights, block_size, num_devices)[1:]


@functools.partial(jax.jit, static_argnames=_STREAM_STATIC)
def log_likelihood_unchecked(x, atoms, weights, sigma, block_size=None, num_devices=1):
    """The kernel of ``em.log_likelihood``: log p(x) = sum_i log sum_k w_k N(x_i; mu_k, s^2 I)."""
    if block_size is None:
        lse_sum = jnp.sum(_e_step(x, atoms, weights, sigma).log_normalizer)
    else:
        lse_sum = _streamed_statistics(
            x, atoms, weights, sigma, block_size, num_devices, columns=False
        )[1]
    return _log_likelihood_from_normalizer(x, lse_sum, sigma)


@jax.jit
def posterior_unchecked(x, atoms, weights, sigma):
    """The kernel of ``em.posterior``: (E[z_i | x_i] (N, p), A (N, K)), dense."""
    att = _e_step(x, atoms, weights, sigma)
    return att.output, att.weights


@functools.partial(jax.jit, static_argnames=_STREAM_STATIC)
def _streamed_posterior_mean(x, atoms, weights, sigma, block_size, num_devices=1):
    return _streamed_statistics(x, atoms, weights, sigma, block_size, num_devices, False)[0]


def posterior_mean_unchecked(x, atoms, weights, sigma, block_size=None, num_devices=1):
    """The kernel of ``em.posterior_mean``: E[z_i | x_i] (N, p), one attention step, dense or
    streamed over blocks of ``block_size`` atoms with the rows sharded over ``num_devices``."""
    if block_size is None:
        return posterior_unchecked(x, atoms, weights, sigma)[0]
    return _streamed_posterior_mean(x, atoms, weights, sigma, block_size, num_devices)


__all__ = [
    "ROWS",
    "block_sums",
    "e_step_attention_unchecked",
    "em_iteration",
    "em_step_unchecked",
    "log_likelihood_unchecked",
    "m_step",
    "posterior_mean_unchecked",
    "posterior_unchecked",
    "precision_sums",
    "relative_precisions",
    "row_scale",
    "weighted_differences",
]
