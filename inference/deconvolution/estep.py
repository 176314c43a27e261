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
- Streamed (``block_size=B``), memory O(B^2), never N x K. With K <= B^2 (the usual case):
  one pass over tiles of R rows against all K atoms, R K <= min(B^2, 2^19)
  (``tile_rows``), one exponential per row-atom pair: E_ik = exp(s_ik - m) with one shift
  m = max_k log w_k >= s_ik for every row (no pass for row maxima), the row sums
  l_i = sum_k E_ik (lse_i = m + log l_i), and every sum over the atoms (posterior means) or
  over the rows (column sums sum_i A_ik and sum_i A_ik (x_i - mu_k), with A_ik = E_ik / l_i)
  a matrix product with the stored tile (``_tile_statistics``). Rows that this shift would
  leave underflowing are recomputed with their exact maxima (a rare branch). With K > B^2:
  two passes over blocks of B points and B atoms, as memory-efficient attention: pass 1 the
  row log-sum-exp and the posterior means
  (``attnbayes.inference.attention.scored_attention_unchecked`` with a running log-sum-exp),
  pass 2 the column sums (``block_sums``) from the recomputed A_ik = exp(s_ik - lse_i).
- Sharded: the streamed kernels take ``mesh`` (``attnbayes.sharding``; static under jit):
  the data rows are split over its devices (``sharding.shard_batch``, padded with
  ``sharding.pad_batch`` and masked), every device holds all K atoms, and the sums over rows
  (column sums, sum_i lse_i) are ``psum``-reduced (``sharding.batch_sum``). Per step each
  device moves (2 + r + p) K + 1 numbers (the column sums, r = 0 or the row scales' width)
  against (N / D) K pairs of work; the posterior means stay split over the devices (and
  processes: ``sharding.gather``). ``mesh=None`` runs the plain program on one device; the
  dense path is never sharded.

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
stays monotone. Streamed, the row scales travel with the rows (in a tile's rows; in the
two-pass stream pass 1 attends with queries [x_i, 1 / s_i] and pass 2 blocks them with x;
the sharded path shards them with x). A scalar sigma
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

from ... import sharding, validation
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


# The one-pass stream works on tiles of R rows against all K atoms, with R K at most this many
# pairs (and at most block_size^2): 4 MB of float64 exponentials a tile. Measured on one
# float64 step at N = K = 20,000 in 2-D over two host devices (2-core AMD EPYC, jax 0.12), in
# ns per pair: 1.92 with tiles of 2^15 pairs, 1.47 with 2^17, 1.31 with 2^18, 1.24 with 2^19
# and 1.26 with 2^20 (fewer, longer matrix products and fewer scan steps beat keeping a tile
# in the 2 MB L2 cache).
_TILE_PAIRS = 1 << 19


def tile_rows(rows: int, k: int, block_size: int) -> int:
    """R, the rows of a one-pass tile of the streamed E-step: R K <= min(block_size^2,
    _TILE_PAIRS), at least 1 and at most ``rows`` (a device's share of the rows); or 0 when a
    single row of K atoms exceeds block_size^2 pairs (then the two-pass stream over blocks of
    ``block_size`` atoms runs instead). ``em.estep_memory_bytes`` counts the tiles with it."""
    if k > block_size * block_size:
        return 0
    return max(1, min(rows, min(block_size * block_size, _TILE_PAIRS) // k))


def _least_row_sum(dtype, k: int) -> float:
    """exp(-G): the smallest row sum l_i = sum_k exp(s_ik - m_i) that the shared shift m_i may
    leave (``_tile_statistics``). Terms below finfo.tiny underflow (to 0 or a subnormal); there
    are at most K of them, each < tiny, so with l_i >= exp(-G) their share of the row is below
    K tiny exp(G) = eps exp(-5), G = -log(tiny) - log(1 / eps) - log(K) - 5 (about 650 in
    float64 and 55 in float32 at K = 20,000)."""
    info = jnp.finfo(dtype)
    g = -np.log(float(info.tiny)) - np.log(1.0 / float(info.eps)) - np.log(k) - 5.0
    return float(np.exp(-max(g, 0.0)))


# The centred column sums (``_column_sums_of_tile``) are allowed where the data and atoms
# span at most this many noise scales (``centred_sums_allowed``): their round-off then stays
# below about eps * _NARROW * sigma (2e-13 sigma in float64). Beyond it, and in float32 (where
# even 16 sigma would cost 2e-6 sigma), the differences are formed pair by pair.
_NARROW = 1024.0


def centred_sums_allowed(points, atoms, sigma) -> bool:
    """Whether the streamed step may take its column sums about a centre (``centred=True`` of
    ``em_step_unchecked``): concrete float64 data ``points`` (N, p) and ``atoms`` (K, p) (None:
    the atoms lie among the data's range, as EM's own do) spanning at most
    ``_NARROW / 2`` times the smallest noise scale in every coordinate, so that any centre c
    inside that range keeps |x_i - c| + |mu_k - c| <= _NARROW min sigma, and of a magnitude whose
    weighted sums cannot overflow (N span exp(G) below finfo.max / 16). False on tracers
    (under jit nothing is known: the pair-by-pair form, exact wherever the points sit) and in
    float32. A host-side decision of the checked functions (``em``), made once per call, so
    that one program is compiled per form."""
    arrays = [points] + ([] if atoms is None else [atoms])
    if any(validation.is_traced(a) for a in [*arrays, sigma]):
        return False
    if np.asarray(points).dtype != np.float64:
        return False
    values = np.concatenate([np.asarray(a, np.float64) for a in arrays], axis=0)
    span = float(np.max(values.max(axis=0) - values.min(axis=0)))
    # the row weights (x_ic - c_c) / l_i reach span exp(G) (``_least_row_sum``) and N of them
    # are summed: data of huge magnitude would overflow there, so they keep the pair form
    n, k = np.shape(points)[0], np.shape(arrays[-1])[0]
    largest = span * n / _least_row_sum(np.float64, k)
    narrow = 2.0 * span <= _NARROW * float(np.min(sigma))
    return bool(narrow and largest <= float(np.finfo(np.float64).max) / 16.0)


def _tile_statistics(rows, atoms, log_weights, sigma, tables, flags):
    """One tile of R rows against all K atoms, one exponential per pair.

    ``rows = (x (R, p), c0 (R,) 1 for a real row and 0 for padding, sigma (R, r) or None,
    relative precisions (R, r) or None)``; ``tables`` the per-call constants ``(centre (p,),
    top, floor)``: the atoms' mean c, m = max_k log w_k and ``_least_row_sum``; ``flags`` =
    ``(columns, means, centred)`` (static). Returns ``(lse (R,), means (R, p) or None,
    (masses (1 + r, K), shift (p, K)) or None)``: the tile's share of the column sums
    sum_i A_ik, sum_i A_ik pi_ic and sum_i A_ik pi_ic (x_ic - mu_kc) (``_column_sums_of_tile``).

    The scores s_ik = log w_k - sum_c (x_ic - mu_kc)^2 / (2 s_ic^2) (from the differences, as
    dense) are at most m, one shift for every row: E_ik = exp(s_ik - m) <= 1 never overflows,
    and no pass over the tile finds row maxima. The row sums l_i = sum_k E_ik give
    lse_i = m + log l_i, the posterior means sum_k E_ik mu_k / l_i, and the column sums weigh
    E_ik by 1 / l_i (A_ik = E_ik / l_i is never formed): the stored tile is read by matrix
    products and never exponentiated twice. A row whose best atom scores far below m
    (l_i < exp(-G): an outlier many sigma from every atom, or tiny weights) would lose
    precision to underflow; such a tile is recomputed with the exact row maxima (the rare
    branch of a ``lax.cond``), where a row whose scores are all -inf (squared distances
    overflowed: only under jit) gets NaN, not a plausible 0.
    """
    columns, means, centred = flags
    x, c0, sigma_b, precisions = rows
    sigma_b = sigma if sigma_b is None else sigma_b
    centre, top, floor = tables

    def statistics(e, total, shift):
        lse = shift + jnp.log(total)
        inv = 1.0 / total
        mean = None
        if means:  # sum_k A_ik (mu_k - c) + c
            mean = jnp.dot(e, atoms - centre, precision=_HIGHEST) * inv[:, None] + centre
        sums = None
        if columns:
            sums = _column_sums_of_tile(e, x, atoms, c0 * inv, precisions, centre, centred)
        return lse, mean, sums

    def exact(_, __):
        scores = _scores(x, atoms, log_weights, sigma_b)
        shift = jax.lax.stop_gradient(jnp.max(scores, axis=1))
        e = jnp.exp(scores - shift[:, None])  # shift -inf (all scores -inf): NaN
        return statistics(e, jnp.sum(e, axis=1), shift)

    def shared(e, total):
        return statistics(e, total, jnp.broadcast_to(top, total.shape))

    e = jnp.exp(_scores(x, atoms, log_weights, sigma_b) - top)
    total = jnp.sum(e, axis=1)
    return jax.lax.cond(jnp.all(total >= floor), shared, exact, e, total)


_HIGHEST = jax.lax.Precision.HIGHEST
# From this many pairs a tile's centred column sums are one matrix product (9 % quicker than
# one vector-matrix product a sum at N = K = 20,000); below, the vector-matrix products, which
# XLA compiles in 0.38 s rather than 0.48 s for a small test problem (CPU time, streamed
# ``em_step_unchecked`` at N = K = 37 in 2-D).
_STACKED_PAIRS = 1 << 16


def _column_sums_of_tile(e, x, atoms, inv, precisions, centre, centred):
    """One tile's ``(masses (1 + r, K), shift (p, K))``: sum_i A_ik, sum_i A_ik pi_ij
    (j < r, with relative precisions pi (R, r), ``relative_precisions``) and
    sum_i A_ik pi_ic (x_ic - mu_kc), from E (R, K) and ``inv`` = 1 / l_i (0 for padding), so
    that A_ik = inv_i E_ik.

    Each sum over the rows is a product of row weights with the stored tile (row-major E read
    as it lies). ``centred`` takes the shifts as
    sum_i A_ik pi_ic (x_ic - c_c) - (mu_kc - c_c) sum_i A_ik pi_ic about the centre c, so that
    every sum is a product of weights with E (one matrix product from ``_STACKED_PAIRS``
    pairs), with round-off eps |x_i - c| per unit of mass: the checked functions allow it only
    for data spanning at most ``_NARROW`` sigma (``centred_sums_allowed``). Otherwise each
    coordinate's differences are formed pair by pair, sum_i w_i E_ik (x_ic - mu_kc), exact for
    nearby points wherever they sit (as ``block_sums``), at the price of one more pass over
    the tile per coordinate.
    """
    p = x.shape[1]
    weights = [inv]
    if precisions is not None:
        weights += [inv * precisions[:, j] for j in range(precisions.shape[1])]
    shift_weights = [
        inv if precisions is None else inv * row_scale(precisions, c)[:, 0] for c in range(p)
    ]
    if centred:
        shift_weights = [w * (x[:, c] - centre[c]) for c, w in enumerate(shift_weights)]
        if e.size >= _STACKED_PAIRS:  # one matrix product
            table = jnp.dot(jnp.stack(weights + shift_weights), e, precision=_HIGHEST)
            masses, shift = table[: len(weights)], table[len(weights) :]
        else:  # small tiles: one vector-matrix product a sum (quicker to compile)
            masses = jnp.stack([jnp.dot(w, e, precision=_HIGHEST) for w in weights])
            shift = jnp.stack([jnp.dot(w, e, precision=_HIGHEST) for w in shift_weights])
        divisor = masses[:1] if precisions is None else masses[1:]  # back from the centre
        return masses, shift - (atoms - centre).T * divisor
    masses = jnp.dot(jnp.stack(weights), e, precision=_HIGHEST)
    shift = [
        jnp.dot(w, e * (x[:, c, None] - atoms[None, :, c]), precision=_HIGHEST)
        for c, w in enumerate(shift_weights)
    ]
    return masses, jnp.stack(shift)


def _streamed_statistics(
    x, atoms, weights, sigma, block_size, mesh, columns, means=True, centred=False
):
    """The streamed E-step statistics, the data rows sharded over ``mesh`` (None: one device).
    ``centred``: the one-pass column sums about the atoms' mean (``centred_sums_allowed``).

    Returns ``(z_mean (N, p) or None, sum_i lse_i, sums)`` with ``sums`` = ``(mass (K,),
    precision mass (K, r) or None, shift (K, p))`` only when ``columns``, else ``None``.

    The rows are padded (``sharding.pad_batch``: copies of the last row, so every padded score
    is as finite as a real one) to ``sharding.padded_size`` and the padding masked out; each
    device takes an equal slice of the rows (``sharding.shard_batch``) and the atoms whole.
    With K <= block_size^2 a device scans its rows in tiles of R rows against all K atoms
    (``_tile_statistics``: one pass, one exponential per pair); otherwise two passes over
    blocks of ``block_size`` rows and atoms (``_two_pass_statistics``: two exponentials per
    pair). Per call a device receives its N / D rows and the K atoms, and sends back its rows'
    lse and posterior means; the column sums, (2 + r + p) K numbers, and sum_i lse_i are
    ``psum``-reduced (``sharding.batch_sum``): O(K) bytes against O(N K / D) pairs of work.
    """
    n, k = x.shape[0], atoms.shape[0]
    if mesh is None:
        mesh = sharding.batch_mesh(jax.devices()[:1])
    devices = sharding.mesh_size(mesh)
    per_unit = jnp.ndim(sigma) > 0
    tile = tile_rows(-(-n // devices), k, block_size)
    size = sharding.padded_size(n, mesh, tile or block_size)
    valid = (jnp.arange(size) < n).astype(x.dtype)
    log_weights = jnp.log(weights)
    xp = sharding.pad_batch(x, size)
    if per_unit:
        smallest = _smallest(sigma)  # over all rows, before sharding: one scale for every shard
        sigma_p = sharding.pad_batch(sigma, size)
        precisions = relative_precisions(sigma_p, smallest)
    else:
        smallest, sigma_p, precisions = None, None, None

    if tile:
        centre = jnp.mean(atoms, axis=0)
        top = jax.lax.stop_gradient(jnp.max(log_weights))
        floor = jnp.asarray(_least_row_sum(x.dtype, k), x.dtype)
        scalar_sigma = None if per_unit else sigma
        tables = (centre, top, floor)
        flags = (columns, means, centred)

        def on_rows(xp, valid, sigma_p, precisions, atoms, log_weights, scalar_sigma, tables):
            rows = (xp, valid, sigma_p, precisions)
            rows = jax.tree.map(lambda a: a.reshape(-1, tile, *a.shape[1:]), rows)

            def body(carry, rows_b):
                lse, mean, sums = _tile_statistics(
                    rows_b, atoms, log_weights, scalar_sigma, tables, flags
                )
                carry = None if sums is None else jax.tree.map(jnp.add, carry, sums)
                return carry, (lse, mean)

            init = None
            if columns:  # (masses (1 + r, K), shift (p, K))
                r = 0 if precisions is None else precisions.shape[1]
                init = (jnp.zeros((1 + r, k), x.dtype), jnp.zeros((x.shape[1], k), x.dtype))
            # rematerialised in the backward pass: gradient memory stays one tile per step
            sums, (lse, mean) = jax.lax.scan(jax.checkpoint(body), init, rows)
            lse = lse.reshape(-1)
            mean = None if mean is None else mean.reshape(-1, x.shape[1])
            return _reduce(lse, mean, sums, valid, mesh)

        shard = sharding.shard_batch(
            on_rows,
            mesh,
            (True, True, per_unit, per_unit, False, False, False, False),
            (True, False, False),
        )
        mean, lse_sum, sums = shard(
            xp, valid, sigma_p, precisions, atoms, log_weights, scalar_sigma, tables
        )
        if columns:
            masses, shift = sums
            sums = (masses[0], masses[1:].T if per_unit else None, shift.T)
    else:

        def on_rows(xp, valid, sigma_p, atoms, log_weights, sigma, smallest):
            sigma = sigma if sigma_p is None else sigma_p
            mean, lse, sums = _two_pass_statistics(
                xp, valid, atoms, log_weights, sigma, block_size, smallest, columns
            )
            return _reduce(lse, mean, sums, valid, mesh)

        scalar = None if per_unit else sigma
        shard = sharding.shard_batch(
            on_rows,
            mesh,
            (True, True, per_unit, False, False, False, False),
            (True, False, False),
        )
        mean, lse_sum, sums = shard(xp, valid, sigma_p, atoms, log_weights, scalar, smallest)
    return (None if mean is None or not means else mean[:n]), lse_sum, (sums if columns else None)


def _reduce(lse, mean, sums, valid, mesh):
    """A device's ``(means, sum of its rows' lse, column sums)``: the NaN convention (a row
    whose scores are all -inf gets NaN, not 0) and the sums over rows ``psum``-reduced."""
    lse = jnp.where(lse == -jnp.inf, jnp.nan, lse)
    if mean is not None:
        mean = jnp.where(jnp.isnan(lse)[:, None], jnp.nan, mean)
    lse_sum = jnp.sum(jnp.where(valid > 0, lse, 0.0))
    lse_sum, sums = sharding.batch_sum((lse_sum, sums), mesh)
    return mean, lse_sum, sums


def _two_pass_statistics(xp, valid, atoms, log_weights, sigma, block_size, smallest, columns):
    """The stream when one row of K atoms exceeds block_size^2 pairs: pass 1 the row
    log-sum-exp and posterior means over blocks of ``block_size`` atoms
    (``attnbayes.inference.attention.scored_attention_unchecked``, a running log-sum-exp),
    pass 2 the column sums from the recomputed A_ik = exp(s_ik - lse_i) (``_column_sums``).
    Rows a multiple of ``block_size``; returns ``(means, lse, sums or None)``."""
    if jnp.ndim(sigma) > 0:
        rows = jnp.concatenate([xp, 1.0 / sigma], axis=1)
        out, _, lse = scored_attention_unchecked(
            _row_scaled_log_kernel, None, rows, atoms, atoms, log_weights, block_size, False
        )
    else:
        out, _, lse = scored_attention_unchecked(
            _log_kernel, sigma, xp, atoms, atoms, log_weights, block_size, False
        )
    sums = None
    if columns:
        lse_rows = jnp.where(valid > 0, jnp.where(lse == -jnp.inf, jnp.nan, lse), jnp.inf)
        sums = _column_sums(xp, lse_rows, atoms, log_weights, sigma, block_size, smallest)
    return out, lse, sums


def em_iteration(x, atoms, weights, sigma, update_weights, block_size, mesh, centred=False):
    """log p(x) at (atoms, weights) and the EM update: dense, or streamed (rows over ``mesh``;
    ``centred`` as ``em_step_unchecked``)."""
    if block_size is None:
        att = _e_step(x, atoms, weights, sigma)
        ll = _log_likelihood_from_normalizer(x, jnp.sum(att.log_normalizer), sigma)
        return ll, *m_step(x, att.weights, atoms, weights, update_weights, sigma)
    _, lse_sum, (mass, precision_mass, shift) = _streamed_statistics(
        x, atoms, weights, sigma, block_size, mesh, columns=True, means=False, centred=centred
    )
    ll = _log_likelihood_from_normalizer(x, lse_sum, sigma)
    return ll, *_atoms_from_sums(
        mass, shift, atoms, weights, x.shape[0], update_weights, precision_mass
    )


_STREAM_STATIC = ("block_size", "mesh")


@functools.partial(jax.jit, static_argnames=("update_weights", *_STREAM_STATIC, "centred"))
def em_step_unchecked(
    x, atoms, weights, sigma, update_weights, block_size=None, mesh=None, centred=False
):
    """The kernel of ``em.em_step``: ``(atoms, weights)`` after one EM step. ``mesh``: a
    one-axis ``jax.sharding.Mesh`` the rows of the streamed step are sharded over, or None for
    the plain program on one device (the checked functions resolve their default, every
    device, before calling); the dense path (``block_size`` None) is never sharded.
    ``centred``: the streamed column sums in one product about the atoms' mean, allowed by
    ``centred_sums_allowed`` (default False: the differences pair by pair, exact anywhere)."""
    return em_iteration(x, atoms, weights, sigma, update_weights, block_size, mesh, centred)[1:]


@functools.partial(jax.jit, static_argnames=_STREAM_STATIC)
def log_likelihood_unchecked(x, atoms, weights, sigma, block_size=None, mesh=None):
    """The kernel of ``em.log_likelihood``: log p(x) = sum_i log sum_k w_k N(x_i; mu_k, s^2 I)
    (``mesh`` as in ``em_step_unchecked``)."""
    if block_size is None:
        lse_sum = jnp.sum(_e_step(x, atoms, weights, sigma).log_normalizer)
    else:
        lse_sum = _streamed_statistics(
            x, atoms, weights, sigma, block_size, mesh, columns=False, means=False
        )[1]
    return _log_likelihood_from_normalizer(x, lse_sum, sigma)


@jax.jit
def posterior_unchecked(x, atoms, weights, sigma):
    """The kernel of ``em.posterior``: (E[z_i | x_i] (N, p), A (N, K)), dense."""
    att = _e_step(x, atoms, weights, sigma)
    return att.output, att.weights


@functools.partial(jax.jit, static_argnames=_STREAM_STATIC)
def _streamed_posterior_mean(x, atoms, weights, sigma, block_size, mesh=None):
    return _streamed_statistics(x, atoms, weights, sigma, block_size, mesh, False)[0]


def posterior_mean_unchecked(x, atoms, weights, sigma, block_size=None, mesh=None):
    """The kernel of ``em.posterior_mean``: E[z_i | x_i] (N, p), one attention step, dense or
    streamed with the rows sharded over ``mesh`` (as in ``em_step_unchecked``). Jitted, the
    streamed result is one global array, split over the mesh's devices when N fills their
    padded row tiles exactly and otherwise gathered whole onto each (cutting the padding off
    leaves rows that cannot be split evenly); under several processes split rows are spread
    over them (``attnbayes.sharding.gather``, as ``em.posterior_mean`` does, brings them
    whole)."""
    if block_size is None:
        return posterior_unchecked(x, atoms, weights, sigma)[0]
    return _streamed_posterior_mean(x, atoms, weights, sigma, block_size, mesh)


__all__ = [
    "block_sums",
    "centred_sums_allowed",
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
    "tile_rows",
    "weighted_differences",
]
