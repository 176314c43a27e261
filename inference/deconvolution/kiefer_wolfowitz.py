"""Kiefer-Wolfowitz nonparametric MLE of the mixing measure on a fixed grid.

Kiefer and Wolfowitz (1956); on a grid as in Koenker and Mizera (2014, "Convex optimization,
shape constraints, compound decisions, and empirical Bayes rules", JASA), solved by mix-SQP
(Kim, Carbonetto, Stephens and Anitescu 2020, JCGS).

Model: z_i ~ nu iid, x_i | z_i ~ N(z_i, diag(s_i1^2, ..., s_ip^2)), the noise scales known:
one sigma for all (s_ic = sigma), one per observation (s_ic = s_i) or one per observation and
coordinate (s_ic), as ``sigma`` is a number, an (N,) or an (N, p) array (the sigma convention
of ``attnbayes.inference.deconvolution.em``). The NPMLE maximises

    log p(x) = sum_i log sum_j w_j phi_ij,    phi_ij = prod_c N(x_ic; g_jc, s_ic^2),

over the weights w on the simplex, with the atoms fixed at grid points g_1..g_G (Koenker &
Mizera 2014); each unit brings its own likelihood row phi_i. (the heteroscedastic NPMLE:
Jiang 2020, "On general maximum likelihood empirical Bayes estimation of heteroscedastic IID
normal means", Electronic Journal of Statistics; Soloff, Guntuboyina & Sen 2024,
"Multivariate, heteroscedastic empirical Bayes via nonparametric maximum likelihood", JRSS B,
whose finite-dimensional approximation with the atoms fixed is this problem; their atoms are
the data points, ours a grid). It is a convex problem in w, and the per-unit scales change
the rows of the likelihood matrix only: everything below (the solvers, the certificate)
acts on L and is the same for one sigma and for many. With
L_ij = exp(log phi_ij - m_i), m_i = max_j log phi_ij (the row-max shift cancels in the argmax
and keeps every row's largest entry at 1),

    log p(x) = sum_i log (L w)_i + sum_i m_i - sum_i sum_c log(2 pi s_ic^2) / 2.

The support of the NPMLE lies in the data's bounding box [min x, max x] (coordinate by
coordinate), whatever the scales: moving an atom's mass onto the box moves it closer to
every x_i in every coordinate and so raises every phi_ij (each N(x_ic; g_c, s_ic^2) falls
with |x_ic - g_c|). User grids must lie inside it, and the default grid spans it
(``default_grid``; it does not depend on sigma).

KKT conditions: with q_j = (1 / N) sum_i L_ij / (L w)_i (the directional derivative of
log p(x) / N towards delta(g_j), plus one), w is optimal iff q_j <= 1 for every grid point,
with equality on the support of w. Since sum_j w_j q_j = 1 at any w, concavity gives
log p(x; w*) - log p(x; w) <= N (max_j q_j - 1), so ``kkt_gap = max_j q_j - 1`` certifies the
per-point log-likelihood gap; every solver stops once ``kkt_gap <= tol``.

Solvers (all in one ``lax.while_loop``, compiled once per shape, dtype and method):

- ``"em"``: the baseline fixed point w_j <- w_j q_j (each step two passes over L, for L w and
  L^T (1 / L w); the E-step is the attention map of ``attnbayes.inference.deconvolution.em`` with
  the grid as keys). Linear convergence at best, and very slow once the weights are nearly right.
- ``"squarem"``: SQUAREM (Varadhan & Roland 2008, scheme S3) on the EM map: from two EM steps
  r = F(w) - w, v = F(F(w)) - 2 F(w) + w, step alpha = -|r| / |v| (at most -1, at least
  -step_max), w' = w - 2 alpha r + alpha^2 v, then one stabilising EM step; alpha is pulled
  back towards -1 until w' >= 0, and the plain double EM step F(F(w)) is taken whenever the
  extrapolation lowers the likelihood, so the iteration is monotone.
- ``"mixsqp"`` (default): mix-SQP (Kim, Carbonetto, Stephens & Anitescu 2020). Minimise
  phi(w) = -(1 / N) sum_i log (L w)_i + sum_j w_j over w >= 0 (its minimiser lies on the
  simplex); each step solves the quadratic model with gradient 1 - q and Hessian
  H = L^T diag(1 / (L w)^2) L / N by a primal active-set method, then backtracks on phi
  (Armijo, with the decrease formed as a sum of log1p terms so that it is resolved even below
  the round-off of phi itself) along the segment to the QP solution. The QP is restricted to
  a working set of at most ``WORKING_SET`` = 64 grid points (the current support, then the
  grid points with the largest q_j, i.e. the most violated KKT conditions), so the Hessian
  costs N S^2 instead of N G^2 flops; the certificate ``kkt_gap`` is still over the whole
  grid. Iterates are rescaled to the simplex (this never increases phi). Each step ends with
  a step of the vertex direction method (Fedorov 1972, Wynn 1970) towards the grid point of
  largest q_j, w <- (1 - a) w + a delta_j with the best a (bisection on the derivative):
  when an SQP step has starved an outlying x_i (its (L w)_i tiny), Newton steps on -log only
  double (L w)_i each time, while this step restores it at once. When the QP yields no
  acceptable step, the step is one EM step instead. The iterates start from the uniform
  measure on ``WORKING_SET / 2`` grid points spread by farthest-point order, and keep at most
  ``WORKING_SET`` support points: an NPMLE needing more (we have seen 4-8 points in 1-D and
  27-33 in 2-D with G = 300) is out of its reach and ends with ``converged=False``; use
  "squarem" then. The run also stops, unconverged, when the gap has not fallen by 1% in 30
  steps (working precision reached: the usual end of a float32 run with a small ``tol``).

Streamed and sharded (``block_size``, ``mesh``): the dense path holds L, N G numbers (2.4 GB
at N = 10^6, G = 300). The solvers see L only through a likelihood operator (u = L w,
L^T v, the working set's columns L_S with their Gram matrix Z^T Z, Z = L_S / u, and products
L_S y, one column L_j, sums over rows); the dense operator holds L, the streamed one
(``block_size=B``) never forms it and recomputes L_ij = exp(log phi_ij - m_i) over blocks of B
rows (``lax.scan``) for every product: q = L^T (1 / u) / N, in one pass with u = L w for EM
and SQUAREM; mix-SQP's Gram matrix, backtracking ratios (L_S step) / u and L_S w over the S
working-set columns; the vertex step's column and its bisection sums; the row maxima m_i and
the constant (one pass at the start). The rows (and per-unit scales) are sharded over the D
devices of ``mesh`` (``attnbayes.sharding.shard_batch``; padded with copies of the last row,
masked out of every sum) and every sum over rows is ``psum``-reduced
(``sharding.batch_sum``), so the solver's state (w, q, the QP, the stopping tests) is the same
on every device and process and the results come back replicated (no gather needed under
``jax.distributed``), while the per-row vectors (x_i, s_i, m_i, u_i, the ratios, the column)
stay on their device. Bytes against compute per mix-SQP iteration: each device computes about
(N / D) (G + 3 S + 1) exponentials (S = ``WORKING_SET``) and moves O(G + S^2) numbers (q, the
S x S Gram matrix, 30 backtracking sums, one number per bisection step of the vertex step);
per EM step (N / D) G exponentials against G + 1 numbers. Memory per device: a few numbers per
row and one B x G block, never N G. The results equal the dense path's, and each other's on
any number of devices, to round-off (sums taken in another order; SQUAREM's extrapolation
amplifies that round-off before convergence, the other solvers do not).

Weights below 1e-250 (1e-30 in float32) are flushed to exactly zero: subnormal weights make
every later pass over L about 20 times slower and carry no likelihood.

Precision: float64 when ``jax_enable_x64`` is on and x is float64, else float32 (the QP,
Hessian and line search included). In float32 the weights carry about 7 digits and the
changes of log p(x) near the optimum fall below them, so KKT gaps much under 1e-5 are often
out of reach; the default tolerance is 1e-4 there (1e-6 in float64), and a smaller float32
``tol`` may end with ``converged=False`` at the last weights reached.

The empirical-Bayes posterior under the fitted measure is one attention step with the grid as
keys and values (``npmle_posterior``, the GMLEB rule of Jiang & Zhang 2009, "General maximum
likelihood empirical Bayes estimation of normal means", Annals of Statistics; per unit, with
its own s_i: Jiang 2020); grid points of zero weight get key bias log 0 = -inf and
hence zero responsibility.

Over 1,000 lines, on purpose: the three solvers (EM, SQUAREM, mix-SQP) run against one
likelihood operator with two implementations, dense and streamed (row blocks, sharded over a
mesh), through a private interface (products with L and L^T, their flushing); the public
functions ``npmle``, ``npmle_gradient`` and ``npmle_posterior`` share the grid and tolerance
checks. Split, that private interface would become public across modules with no other user.
"""

from __future__ import annotations

import functools
import math
import numbers
from collections.abc import Iterable
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from ... import sharding, validation
from .checks import check_sigma, check_streaming, checked_problem
from .estep import posterior_unchecked
from .intervals import discrete_posterior_intervals

METHODS = ("mixsqp", "squarem", "em")
DEFAULT_MAX_ITERS = {"mixsqp": 1_000, "squarem": 20_000, "em": 200_000}
WORKING_SET = 64  # mix-SQP's QP size (grid points) and the largest support it can reach

_ARMIJO = 0.01  # sufficient decrease (as in mixsqp)
_BACKTRACKS = 30  # step sizes 1, 1/2, ..., 2^-29
_SQUAREM_BACKTRACKS = 12
_BISECTIONS = 60  # vertex-direction line search
_PATIENCE = 30  # mix-SQP stops when its KKT gap has not fallen by 1% for this many steps


class NPMLEResult(NamedTuple):
    """The fitted NPMLE nu = sum_j weights[j] delta(atoms[j]) and the solver's record.

    A pytree of arrays (it can be returned from ``jax.jit`` and batched by ``jax.vmap``). The
    solver is not recorded: the caller knows the ``method`` it asked for.

    Attributes:
        atoms: (G,) for scalar data or (G, p): the grid (fixed, not fitted).
        weights: (G,) on the simplex; most entries exactly 0.
        log_likelihood: () log p(x) = sum_i log sum_j w_j prod_c N(x_ic; g_jc, s_ic^2) at
            ``weights`` (s_ic = sigma, s_i or s_ic as ``sigma`` was given).
        num_iters: () int array, iterations taken (EM steps; SQUAREM cycles of three EM maps;
            SQP steps).
        converged: () bool array, whether ``kkt_gap <= tol``.
        kkt_gap: () max_j q_j - 1 over the whole grid at ``weights``; <= 0 up to round-off at
            the optimum and an upper bound on (log p(x; w*) - log_likelihood) / N.
    """

    atoms: jax.Array
    weights: jax.Array
    log_likelihood: jax.Array
    num_iters: jax.Array
    converged: jax.Array
    kkt_gap: jax.Array


# ----------------------------------------------------------------------------- kernels (jitted)


def _log_phi(x, grid, sigma):
    """(N, G) log prod_c N(x_ic; g_jc, s_ic^2) up to terms in i only, from the differences.

    ``sigma`` is () (one scale), (N, 1) (one per row) or (N, p) (one per row and coordinate),
    the row scales of ``checks.check_sigma``. The first two share one expression, so a
    constant (N, 1) sigma gives the scalar's numbers bit for bit.
    """
    diff = x[:, None, :] - grid[None, :, :]
    if jnp.ndim(sigma) == 2 and sigma.shape[1] > 1:
        return -0.5 * jnp.sum((diff / sigma[:, None, :]) ** 2, axis=-1)
    return -0.5 * jnp.sum(diff**2, axis=-1) / sigma**2


def _log_phi_by_coordinate(x, grid, sigma):
    """``_log_phi`` summed coordinate by coordinate: the same numbers for p <= 2 (round-off
    apart for p > 2), each term an (N, G) elementwise expression that XLA fuses, where the
    reduction over a short trailing axis of ``_log_phi`` is many times slower (the streamed
    path's kernel, which recomputes it every pass)."""
    per_coordinate = jnp.ndim(sigma) == 2 and sigma.shape[1] > 1
    total = None
    for c in range(x.shape[1]):
        d = x[:, c, None] - grid[None, :, c]
        if per_coordinate:
            d = d / sigma[:, c, None]
        total = d * d if total is None else total + d * d
    return -0.5 * total if per_coordinate else -0.5 * total / sigma**2


def _log_normaliser(sigma, n, p):
    """sum_i sum_c log(2 pi s_ic^2) / 2: the terms of log p(x) in the data only."""
    if jnp.ndim(sigma) == 0:
        return 0.5 * n * p * jnp.log(2.0 * jnp.pi * sigma**2)
    per_row = jnp.sum(jnp.log(2.0 * jnp.pi * sigma**2), axis=1)  # (N,): over the coordinates
    return 0.5 * (p // sigma.shape[1]) * jnp.sum(per_row)


def _likelihood_matrix(x, grid, sigma):
    """(L (N, G) with row maxima 1, row maxima m (N,), constant c): log p(x) = sum_i log (L w)_i
    + c."""
    n, p = x.shape
    log_phi = _log_phi(x, grid, sigma)
    row_max = jnp.max(log_phi, axis=1)
    lik = jnp.exp(log_phi - row_max[:, None])
    const = jnp.sum(row_max) - _log_normaliser(sigma, n, p)
    return lik, row_max, const


def _evaluate(lik, w):
    """(sum_i log (L w)_i, q = L^T (1 / L w) / N): the shifted log-likelihood and KKT vector."""
    u = lik @ w
    return jnp.sum(jnp.log(u)), (1.0 / u) @ lik / lik.shape[0], u


# ----------------------------------------------------------------------------- likelihood operators
#
# The solvers see L only through a small operator: ``n`` (rows), ``g`` (grid points), ``dtype``,
# ``evaluate(w)`` = (sum_i log (L w)_i, L^T (1 / L w) / n), ``matvec(w)`` = L w (per row),
# ``rmatvec(v)`` = L^T v, ``column(j)`` = L_:j (per row), ``row_sum`` (over the rows),
# ``line_search(ratio, steps)`` (mix-SQP's backtracking sums), ``positive(u)`` (no u_i
# underflows) and ``restrict(ws)``, the columns L_S of a working set S, with ``gram(u)`` =
# Z^T Z (Z = L_S / u), ``matvec(y)`` = L_S y and ``weights_matvec(w)`` = L w for w supported
# on S. ``_DenseLikelihood`` holds L (its programs are the ones the solvers compiled before the
# operator existed); ``_StreamedLikelihood`` recomputes L's entries over blocks of rows, the
# rows sharded over a mesh.


class _DenseLikelihood:
    """L held as an (N, G) matrix; ``columns(idx)`` gives L[:, idx] (recomputed by ``_solve``:
    cheaper than a strided gather)."""

    def __init__(self, lik, columns):
        self.lik, self.columns = lik, columns
        self.n, self.g = lik.shape
        self.dtype = lik.dtype

    def evaluate(self, w):
        return _evaluate(self.lik, w)[:2]

    def matvec(self, w):
        return self.lik @ w

    def rmatvec(self, v):
        return v @ self.lik

    def column(self, j):
        return self.lik[:, j]

    def row_sum(self, v):
        return jnp.sum(v, axis=-1)

    def line_search(self, ratio, steps):
        arg = steps[:, None] * ratio[None, :]
        decrease = -jnp.mean(jnp.log1p(jnp.where(arg > -1, arg, 0.0)), axis=1)
        return decrease, jnp.all(arg > -1, axis=1)

    def positive(self, u):
        """Whether every u_i is a normal number (no likelihood underflowed)."""
        return jnp.min(u) >= jnp.finfo(self.dtype).tiny

    def restrict(self, ws):
        return _DenseColumns(self.columns(ws), self.lik)


class _DenseColumns:
    def __init__(self, lik_s, lik):
        self.lik_s, self.lik = lik_s, lik

    def gram(self, u):
        z = self.lik_s / u[:, None]
        return z.T @ z

    def matvec(self, y):
        return self.lik_s @ y

    def weights_matvec(self, w):
        return self.lik @ w


def _weighted_rows(block, w):
    """block @ w as an elementwise product and a row sum: XLA fuses it with the exponentials
    that make the block (about twice as fast as a matrix-vector product of the stored block)."""
    return jnp.sum(block * w[None, :], axis=1)


def _weighted_columns(block, v):
    """v @ block, fused likewise (a column sum)."""
    return jnp.sum(v[:, None] * block, axis=0)


class _StreamedLikelihood:
    """L never formed: every product recomputes L_ij = exp(log phi_ij - m_i) over blocks of
    ``block`` rows (``lax.scan``), on this device's rows of x. Use inside
    ``sharding.shard_batch``'s function: ``x`` (R, p), ``valid`` (R,) and ``sigma`` ((R, r), or
    () for one scale) are the device's rows, R a multiple of ``block``, padded rows marked
    False in ``valid`` and left out of every sum; sums over rows are ``psum``-reduced over
    ``mesh`` (``sharding.batch_sum``), so they, and all the solver's replicated state, are the
    same on every device, while per-row vectors (u = L w, ratios, columns) stay on their
    device. ``n`` is the number of real rows over all devices. The row maxima m_i are computed
    once (one pass), with ``max_sum`` = sum_i m_i."""

    def __init__(self, x, valid, sigma, grid, block, mesh, n):
        self.grid, self.mesh, self.n = grid, mesh, n
        self.g, self.dtype = grid.shape[0], x.dtype
        self.blocks = x.shape[0] // block
        self.x, self.valid, self.sigma = x, valid, sigma
        self.per_row = jnp.ndim(sigma) > 0
        self.row_max = self.map_rows(lambda b: jnp.max(self._log_phi(b, grid), axis=1))
        self.max_sum = self.row_sum(self.row_max)

    def _split(self, *rows):
        """(x, valid, sigma, m and ``rows``) as (blocks, block, ...) arrays, for ``lax.scan``."""
        tree = (self.x, self.valid, self.sigma if self.per_row else None, *rows)
        return jax.tree.map(lambda a: a.reshape(self.blocks, -1, *a.shape[1:]), tree)

    def _log_phi(self, b, atoms):
        return _log_phi_by_coordinate(b[0], atoms, b[2] if self.per_row else self.sigma)

    def _exp(self, b, atoms):
        """A block's (block, len(atoms)) entries of L: exp(log phi - m), m the block's b[3]."""
        return jnp.exp(self._log_phi(b, atoms) - b[3][:, None])

    def map_rows(self, fn, *rows):
        """fn(block) for each block of rows, concatenated: a per-row array of this device."""
        out = jax.lax.map(fn, self._split(*rows))
        return out.reshape(-1, *out.shape[2:])

    def sum_rows(self, fn, init, *rows):
        """sum over blocks of fn(block) (a pytree like ``init``), psum-reduced over the mesh."""

        def body(total, b):
            return jax.tree.map(jnp.add, total, fn(b)), None

        total, _ = jax.lax.scan(body, init, self._split(*rows))
        return sharding.batch_sum(total, self.mesh)

    def evaluate(self, w):
        # one pass: u = L w and L^T (1 / u) from the same block of exponentials
        def block(b):
            lik = self._exp(b, self.grid)
            u = _weighted_rows(lik, w)
            ll = jnp.sum(jnp.where(b[1], jnp.log(u), 0.0))
            return ll, _weighted_columns(lik, jnp.where(b[1], 1.0 / u, 0.0))

        zero = jnp.zeros((), self.dtype)
        ll, q = self.sum_rows(block, (zero, jnp.zeros((self.g,), self.dtype)), self.row_max)
        return ll, q / self.n

    def matvec(self, w):
        return self.map_rows(lambda b: _weighted_rows(self._exp(b, self.grid), w), self.row_max)

    def rmatvec(self, v):
        def block(b):
            return _weighted_columns(self._exp(b, self.grid), jnp.where(b[1], b[4], 0.0))

        return self.sum_rows(block, jnp.zeros((self.g,), self.dtype), self.row_max, v)

    def column(self, j):
        # one number per row: no blocks needed
        log_phi = _log_phi_by_coordinate(self.x, self.grid[j][None, :], self.sigma)
        return jnp.exp(log_phi[:, 0] - self.row_max)

    def row_sum(self, v):
        return sharding.batch_sum(jnp.sum(jnp.where(self.valid, v, 0.0), axis=-1), self.mesh)

    def line_search(self, ratio, steps):
        # over blocks of rows: the (steps, rows) terms are never held for all rows at once
        def block(b):
            arg = steps[:, None] * b[3][None, :]
            inside = arg > -1
            terms = jnp.where(b[1] & inside, jnp.log1p(jnp.where(inside, arg, 0.0)), 0.0)
            outside = jnp.sum(b[1] & ~inside, axis=1, dtype=jnp.int32)
            return jnp.sum(terms, axis=1), outside

        init = (jnp.zeros_like(steps), jnp.zeros(steps.shape, jnp.int32))
        total, outside = self.sum_rows(block, init, ratio)
        return -total / self.n, outside == 0

    def positive(self, u):
        bad = jnp.sum(self.valid & (u < jnp.finfo(self.dtype).tiny), dtype=jnp.int32)
        return sharding.batch_sum(bad, self.mesh) == 0

    def restrict(self, ws):
        return _StreamedColumns(self, ws)


class _StreamedColumns:
    """The working set's columns L_S, recomputed for each product (one exponential per row and
    column of S)."""

    def __init__(self, op, ws):
        self.op, self.ws, self.atoms = op, ws, op.grid[ws]

    def gram(self, u):
        op = self.op

        def block(b):
            z = jnp.where(b[1][:, None], op._exp(b, self.atoms) / b[4][:, None], 0.0)
            return z.T @ z

        size = self.atoms.shape[0]
        return op.sum_rows(block, jnp.zeros((size, size), op.dtype), op.row_max, u)

    def matvec(self, y):
        op = self.op
        return op.map_rows(lambda b: _weighted_rows(op._exp(b, self.atoms), y), op.row_max)

    def weights_matvec(self, w):
        return self.matvec(w[self.ws])


def _flush(w):
    """Zero the weights below the flush threshold, then renormalise to the simplex."""
    w = jnp.where(w < _flush_threshold(w.dtype), 0.0, w)
    return w / jnp.sum(w)


def _flush_threshold(dtype):
    return 1e-250 if jnp.dtype(dtype) == jnp.float64 else 1e-30


def _em_map(w, q):
    """One EM step w_j <- w_j q_j (sum_j w_j q_j = 1 exactly; renormalised for round-off)."""
    return _flush(w * q)


def _em_loop(op, w, tol, max_iters, target):
    def body(state):
        t, w, _, _, _ = state
        ll, q = op.evaluate(w)
        gap = jnp.max(q) - 1.0
        stop = (gap <= tol) | (t >= max_iters) | (ll >= target)
        w = jnp.where(stop, w, _em_map(w, q))
        return t + jnp.where(stop, 0, 1), w, ll, gap, stop

    zero = jnp.zeros((), op.dtype)
    state = (jnp.asarray(0, jnp.int32), w, zero, zero, jnp.asarray(False))
    t, w, ll, gap, _ = jax.lax.while_loop(lambda s: ~s[4], body, state)
    return t, w, ll, gap


def _squarem_loop(op, w, tol, max_iters, target):
    dtype = op.dtype
    # extrapolation lengths tried: alpha, then halfway back to -1 each time, ending at -1
    shrink = jnp.concatenate(
        [0.5 ** jnp.arange(_SQUAREM_BACKTRACKS, dtype=dtype), jnp.zeros((1,), dtype)]
    )

    def body(state):
        t, w0, step_max, _, _, _ = state
        ll0, q0 = op.evaluate(w0)
        gap = jnp.max(q0) - 1.0
        stop = (gap <= tol) | (t >= max_iters) | (ll0 >= target)
        w1 = _em_map(w0, q0)
        w2 = _em_map(w1, op.evaluate(w1)[1])
        r, v = w1 - w0, w2 - 2.0 * w1 + w0
        vv = jnp.sum(v * v)
        alpha = jnp.where(vv > 0, -jnp.sqrt(jnp.sum(r * r) / jnp.where(vv > 0, vv, 1.0)), -1.0)
        alpha = jnp.clip(alpha, -step_max, -1.0)
        alphas = -1.0 + (alpha + 1.0) * shrink  # (B + 1,), the last one -1 gives w2
        cands = w0 - 2.0 * alphas[:, None] * r + alphas[:, None] ** 2 * v
        # EM cannot revive a zero weight, so an extrapolation may not zero a live one
        feasible = jnp.all((cands >= 0) & ((cands > 0) | (w2 <= 0)), axis=1)
        k = jnp.argmax(feasible)
        w_ext = _flush(jnp.maximum(cands[k], 0.0))
        ll_ext, q_ext = op.evaluate(w_ext)
        ok = jnp.isfinite(ll_ext) & (ll_ext >= ll0) & (k < _SQUAREM_BACKTRACKS)
        w_new = jnp.where(ok, _em_map(w_ext, q_ext), w2)
        at_max = alphas[k] <= -step_max
        step_max = jnp.where(
            at_max, jnp.where(ok, 4.0 * step_max, jnp.maximum(1.0, step_max / 4.0)), step_max
        )
        w0 = jnp.where(stop, w0, w_new)
        return t + jnp.where(stop, 0, 1), w0, step_max, ll0, gap, stop

    zero = jnp.zeros((), dtype)
    state = (jnp.asarray(0, jnp.int32), w, jnp.ones((), dtype), zero, zero, jnp.asarray(False))
    t, w, _, ll, gap, _ = jax.lax.while_loop(lambda s: ~s[5], body, state)
    return t, w, ll, gap


def _qp_active_set(hess, c, y, free, tol, max_inner):
    """min_y y^T H y / 2 + c^T y subject to y >= 0, by the primal active-set method.

    ``free`` marks the coordinates allowed to move (the rest are held at 0); ``y`` must be
    feasible and zero off ``free``. Each step solves the equality-constrained problem on the
    free set; a blocking bound is dropped from it, and at a subspace minimiser the most
    negative multiplier (gradient entry of a held coordinate) is freed. Stops at a KKT point
    (multipliers >= -tol) or after ``max_inner`` steps, at a feasible y with a lower model
    value than the start.
    """
    size = hess.shape[0]
    eye = jnp.eye(size, dtype=hess.dtype)
    index = jnp.arange(size)

    def body(state):
        it, y, free, _ = state
        b = hess @ y + c
        m = jnp.where(free[:, None] & free[None, :], hess, eye)
        chol = jnp.linalg.cholesky(m)
        p = jax.scipy.linalg.cho_solve((chol, True), jnp.where(free, -b, 0.0))
        p = jnp.where(free, p, 0.0)
        ratios = jnp.where(free & (p < 0), y / jnp.where(p < 0, -p, 1.0), jnp.inf)
        k = jnp.argmin(ratios)
        blocked = ratios[k] < 1.0
        y = jnp.maximum(y + jnp.minimum(ratios[k], 1.0) * p, 0.0)
        y = jnp.where(blocked & (index == k), 0.0, y)
        free = free & ~(blocked & (index == k))
        # not blocked: y now minimises the model on the free set; check the held coordinates
        held = jnp.where(free, jnp.inf, hess @ y + c)
        j = jnp.argmin(held)
        optimal = ~blocked & (held[j] >= -tol)
        free = free | ((index == j) & ~blocked & ~optimal)
        return it + 1, y, free, optimal

    state = (jnp.asarray(0), y, free, jnp.asarray(False))
    _, y, _, _ = jax.lax.while_loop(lambda s: ~s[3] & (s[0] < max_inner), body, state)
    return y


def mixsqp_loop(lik, columns, w, tol, max_iters, target):
    """mix-SQP on a likelihood matrix: ``(iterations, w, shifted log p, kkt_gap, start_ok)``.

    ``lik`` (N, G) with row maxima 1 (``_likelihood_matrix``), ``columns(idx)`` its columns
    ``idx`` (N, len(idx)), ``w`` the start (``mixsqp_start``). A row of ones adds a constant
    to the objective (log sum_j w_j = 0 on the simplex) and the all-ones vector to N q, so it
    leaves the optimum unchanged: callers mark padded rows that way (the learned grid stack).
    Traceable (one ``lax.while_loop``); the caller jits.
    """
    return _mixsqp(_DenseLikelihood(lik, columns), w, tol, max_iters, target)


def _mixsqp(op, w, tol, max_iters, target):
    """mix-SQP on a likelihood operator (``_DenseLikelihood``, ``_StreamedLikelihood``)."""
    n, g = op.n, op.g
    dtype = op.dtype
    size = min(g, WORKING_SET)
    f64 = jnp.dtype(dtype) == jnp.float64
    ridge = 1e-10 if f64 else 1e-5  # relative to each diagonal entry of H
    qp_tol = 1e-10 if f64 else 1e-5
    steps = 0.5 ** jnp.arange(_BACKTRACKS, dtype=dtype)

    def sqp_step(w, q, u):
        # working set: the support (|support| <= size always), then the largest q_j
        key = jnp.where(w > 0, jnp.inf, q)
        _, ws = jax.lax.top_k(key, size)
        lik_s = op.restrict(ws)  # (N, size), recomputed: cheaper than a strided gather from L
        hess = lik_s.gram(u) / n  # Z^T Z / N, Z = L_S / u
        # Levenberg damping relative to each diagonal entry: the entries span many decades
        # (an x_i with a tiny (L w)_i inflates its columns' curvature)
        hess = hess + ridge * jnp.diag(jnp.diag(hess))
        grad = 1.0 - q[ws]
        # the model in y = w + step: y^T H y / 2 + (grad - H w)^T y, and H w = q on the set
        y = _qp_active_set(hess, grad - q[ws], w[ws], w[ws] > 0, qp_tol, 2 * size + 10)
        step = y - w[ws]
        slope = jnp.dot(grad, step)
        # phi(w + a step) - phi(w) = -mean_i log1p(a (L step)_i / u_i) + a sum(step), formed
        # directly so that steps whose gain is below the resolution of phi are still judged
        decrease, inside = op.line_search(lik_s.matvec(step) / u, steps)
        decrease = decrease + steps * jnp.sum(step)
        accept = (
            inside & (decrease <= _ARMIJO * steps * slope) & jnp.all(jnp.isfinite(y)) & (slope < 0)
        )
        k = jnp.argmax(accept)
        w_sqp = _flush(jnp.maximum(w.at[ws].add(steps[k] * step), 0.0))
        # no acceptable SQP step (the QP model failed, or the gain is below round-off): EM
        w = jax.lax.cond(accept[k], lambda: w_sqp, lambda: _em_map(w, q))
        # either way the support of w lies in the working set
        return w, lik_s.weights_matvec(w)

    def vertex_step(w, u, j):
        # the vertex-direction step towards grid point j: maximise sum_i log((1 - a) u_i + a L_ij)
        # over a in [0, 1) by bisection on its derivative. It restores in one move an x_i whose
        # likelihood an SQP step left tiny (Newton steps on -log u only double u_i each time).
        col = op.column(j)
        diff = col - u

        def slope(a):
            return op.row_sum(diff / (u + a * diff))

        def bisect(_, bounds):
            lo, hi = bounds
            mid = 0.5 * (lo + hi)
            up = slope(mid) > 0
            return jnp.where(up, mid, lo), jnp.where(up, hi, mid)

        one = jnp.ones((), dtype)
        a, _ = jax.lax.fori_loop(0, _BISECTIONS, bisect, (0.0 * one, one))
        room = (w[j] > 0) | (jnp.sum(w > 0) < size)  # the support must fit the working set
        a = jnp.where(room & (slope(0.0 * one) > 0), a, 0.0)
        return _flush((1.0 - a) * w + a * (jnp.arange(g) == j)), (1.0 - a) * u + a * col

    def body(state):
        t, w, u, _, _, best, since, _ = state
        ll, q = op.row_sum(jnp.log(u)), op.rmatvec(1.0 / u) / n
        gap = jnp.max(q) - 1.0
        better = gap < best - 0.01 * jnp.abs(best)
        since = jnp.where(better, 0, since + 1)
        best = jnp.where(better, gap, best)
        # the gap has not fallen by 1% for _PATIENCE steps: stuck at working precision
        stop = (gap <= tol) | (t >= max_iters) | (ll >= target) | (since >= _PATIENCE)

        def advance():
            w1, u1 = sqp_step(w, q, u)
            return vertex_step(w1, u1, jnp.argmax(q))

        w, u = jax.lax.cond(stop, lambda: (w, u), advance)
        return t + jnp.where(stop, 0, 1), w, u, ll, gap, best, since, stop

    u0 = op.matvec(w)
    start_ok = op.positive(u0)
    zero = jnp.zeros((), dtype)
    huge = jnp.full((), jnp.finfo(dtype).max, dtype)  # finite: best - 1% of best is defined
    state = (jnp.asarray(0, jnp.int32), w, u0, zero, zero, huge, jnp.asarray(0), ~start_ok)
    t, w, _, ll, gap, _, _, _ = jax.lax.while_loop(lambda s: ~s[7], body, state)
    return t, w, ll, gap, start_ok


def _run(op, w0, tol, max_iters, target, method):
    """The solver ``method`` on a likelihood operator: (iterations, w, shifted log p, kkt_gap,
    start_ok)."""
    if method == "em":
        return *_em_loop(op, w0, tol, max_iters, target), jnp.asarray(True)
    if method == "squarem":
        return *_squarem_loop(op, w0, tol, max_iters, target), jnp.asarray(True)
    return _mixsqp(op, w0, tol, max_iters, target)


def _finish(t, w, ll, gap, start_ok, const, tol):
    """(w, log p(x), iterations, kkt_gap, converged, start_ok), NaN where the start failed."""
    nan = jnp.asarray(jnp.nan, w.dtype)
    w = jnp.where(start_ok, w, nan)
    ll = jnp.where(start_ok, ll + const, nan)
    gap = jnp.where(start_ok, gap, nan)
    return w, ll, t, gap, gap <= tol, start_ok


@functools.partial(jax.jit, static_argnames=("method",))
def _solve(x, grid, sigma, w0, tol, max_iters, target, method):
    """The solver on checked arrays: (w, log p(x), iterations, kkt_gap, converged, start_ok).

    A start that leaves some x_i with an underflowing likelihood (mix-SQP only; refused by
    ``npmle`` on concrete inputs) gives NaN weights, log-likelihood and gap.
    """
    lik, row_max, const = _likelihood_matrix(x, grid, sigma)

    def columns(idx):
        return jnp.exp(_log_phi(x, grid[idx], sigma) - row_max[:, None])

    op = _DenseLikelihood(lik, columns)
    t, w, ll, gap, start_ok = _run(op, w0, tol, max_iters, target - const, method)
    return _finish(t, w, ll, gap, start_ok, const, tol)


def _streamed(x, grid, sigma, block_size, mesh, fn):
    """``fn(op, const)`` on the streamed likelihood operator of (x, grid, sigma), the rows
    sharded over ``mesh`` (None: one device); ``fn``'s outputs are replicated.

    The rows (and per-unit scales) are padded (``sharding.pad_batch``: copies of the last
    row) to a multiple of D B (D devices, B = min(block_size, ceil(N / D)) rows a block) and
    split into D equal slices (``sharding.shard_batch``); padded rows are masked out of every
    sum. ``const`` = sum_i m_i - sum_ic log(2 pi s_ic^2) / 2, so that log p(x) = sum_i log
    (L w)_i + const.
    """
    n, p = x.shape
    if mesh is None:
        mesh = sharding.batch_mesh(jax.devices()[:1])
    devices = sharding.mesh_size(mesh)
    block = min(block_size, -(-n // devices))
    size = sharding.padded_size(n, mesh, block)
    per_row = jnp.ndim(sigma) > 0
    rows = sharding.pad_batch((x, sigma if per_row else None), size)
    valid = jnp.arange(size) < n
    normaliser = _log_normaliser(sigma, n, p)

    def on_rows(x, valid, sigma_rows, sigma, grid, normaliser):
        op = _StreamedLikelihood(x, valid, sigma_rows if per_row else sigma, grid, block, mesh, n)
        return fn(op, op.max_sum - normaliser)

    shard = sharding.shard_batch(on_rows, mesh, (True, True, per_row, False, False, False), False)
    return shard(rows[0], valid, rows[1], None if per_row else sigma, grid, normaliser)


@functools.partial(jax.jit, static_argnames=("method", "block_size", "mesh"))
def _solve_streamed(x, grid, sigma, w0, tol, max_iters, target, method, block_size, mesh):
    """``_solve`` with L streamed over blocks of ``block_size`` rows, sharded over ``mesh``."""

    def fn(op, const):
        t, w, ll, gap, start_ok = _run(op, w0, tol, max_iters, target - const, method)
        return _finish(t, w, ll, gap, start_ok, const, tol)

    return _streamed(x, grid, sigma, block_size, mesh, fn)


@jax.jit
def _gradient(x, grid, sigma, w):
    lik = _likelihood_matrix(x, grid, sigma)[0]
    return _evaluate(lik, w)[1]


@functools.partial(jax.jit, static_argnames=("block_size", "mesh"))
def _gradient_streamed(x, grid, sigma, w, block_size, mesh):
    return _streamed(x, grid, sigma, block_size, mesh, lambda op, _: op.evaluate(w)[1])


# ----------------------------------------------------------------------------- validation


def _check_grid(grid, points, scalar, *, inside: bool):
    """A user grid in the convention of x, as (G, p); inside the data's bounding box if asked."""
    arr = validation.as_float_array("grid", grid)
    p = points.shape[1]
    if arr.ndim != (1 if scalar else 2) or (not scalar and arr.shape[1] != p):
        raise ValueError(
            f"grid: expected shape {'(G,)' if scalar else f'(G, {p})'} to match x of shape "
            f"{tuple(points.shape[:1]) if scalar else tuple(points.shape)}, "
            f"got {tuple(arr.shape)}"
        )
    if arr.shape[0] == 0:
        raise ValueError("grid: is empty (G = 0)")
    validation.check_finite("grid", arr)
    arr = arr[:, None] if scalar else arr
    if inside and not validation.any_traced(arr, points):
        lo, hi = points.min(axis=0), points.max(axis=0)
        outside = np.any((arr < lo) | (arr > hi), axis=1)
        if outside.any():
            raise ValueError(
                f"grid: {int(outside.sum())} of {arr.shape[0]} point(s) lie outside the data's "
                "range [min x, max x] (per coordinate); the NPMLE's support lies in the convex "
                "hull of the data"
            )
    return arr


def _check_tol(tol, dtype):
    """The KKT tolerance: a finite number > 0 (or a 0-d tracer, not value-checked)."""
    if tol is None:
        return 1e-6 if jnp.dtype(dtype) == jnp.float64 else 1e-4
    value = validation.check_real_scalar("tol", tol, "a finite number > 0")
    if validation.is_traced(value):
        return value
    if not math.isfinite(value):
        raise ValueError(f"tol: must be a finite number > 0, got {tol!r}")
    if value <= 0:
        raise ValueError(f"tol: must be > 0, got {tol!r}")
    return value


def _check_target(target):
    """``target_log_likelihood``: None (no target), a number (not NaN) or a 0-d tracer."""
    if target is None:
        return math.inf
    value = validation.check_real_scalar("target_log_likelihood", target, "a number")
    if not validation.is_traced(value) and math.isnan(value):
        raise ValueError("target_log_likelihood: is NaN")
    return value


def _farthest_point_order(points, count, start=None):
    """Indices of ``count`` rows chosen greedily, each the farthest from those already chosen.

    Starts at ``start`` or at the row nearest the coordinate-wise mean; deterministic (ties go
    to the lowest index). Covers the point cloud to within twice the best covering radius.
    """
    points = np.asarray(points, dtype=np.float64)
    if start is None:
        start = int(np.argmin(np.sum((points - points.mean(axis=0)) ** 2, axis=1)))
    chosen = [start]
    dist = np.sum((points - points[start]) ** 2, axis=1)
    for _ in range(count - 1):
        nxt = int(np.argmax(dist))
        chosen.append(nxt)
        dist = np.minimum(dist, np.sum((points - points[nxt]) ** 2, axis=1))
    return np.asarray(chosen)


def _farthest_point_order_traced(points, count):
    """``_farthest_point_order`` from the point nearest the mean, for traced points."""

    def sq_dist(a):
        return jnp.sum((points - a) ** 2, axis=1)

    start = jnp.argmin(sq_dist(jnp.mean(points, axis=0)))
    chosen = jnp.zeros((count,), jnp.int32).at[0].set(start.astype(jnp.int32))

    def body(i, carry):
        chosen, dist = carry
        nxt = jnp.argmax(dist)
        return chosen.at[i].set(nxt.astype(jnp.int32)), jnp.minimum(dist, sq_dist(points[nxt]))

    chosen, _ = jax.lax.fori_loop(1, count, body, (chosen, sq_dist(points[start])))
    return chosen


def _default_grid(points, scalar, grid_size):
    """``default_grid`` of checked (N, p) points, as (G, p): NumPy, or JAX when traced."""
    n = points.shape[0]
    if validation.is_traced(points):
        if scalar:
            return jnp.linspace(points.min(), points.max(), grid_size, dtype=points.dtype)[:, None]
        return points if n <= grid_size else points[_farthest_point_order_traced(points, grid_size)]
    if scalar:
        grid = np.linspace(points.min(), points.max(), grid_size, dtype=points.dtype)
        return grid[:, None]
    if n <= grid_size:
        return points.copy()
    return points[_farthest_point_order(points, grid_size)]


def default_grid(x, grid_size: int = 300):
    """The default grid: G = ``grid_size`` points spanning the data.

    Scalar data (N,): ``linspace(min x, max x, grid_size)`` (Koenker & Mizera 2014).
    p-dimensional data (N, p): a deterministic subsample of min(N, grid_size) data points
    (Saha & Guntuboyina 2020 put the atoms at the data), chosen by farthest-point sampling
    from the point nearest the mean, so the grid covers the data cloud, outliers included,
    rather than its densest part; in the order chosen. The same for per-unit noise scales:
    the NPMLE's support lies in the data's bounding box whatever the scales (module
    docstring), and the grid does not look at sigma (with scales spanning a wide range, check
    that the spacing is small against the smallest; a larger ``grid_size`` if not).

    Returns (G,) or (G, p), like ``x``: a NumPy array, or a JAX array when ``x`` is traced
    (then computed by the same rule in JAX; a near-tie in the farthest-point order may resolve
    differently in the last bits). Not differentiable in ``x`` for p-dimensional data (it
    selects points); piecewise linear in min x and max x for scalar data.
    """
    points, scalar = validation.as_points("x", x)
    grid_size = validation.check_positive_int("grid_size", grid_size, minimum=2)
    if not validation.is_traced(points):
        with np.errstate(over="ignore"):
            spread = np.max(points.max(axis=0) - points.min(axis=0))
        if not np.isfinite(spread):
            raise ValueError(
                f"x: spread (max - min) overflows {points.dtype.name} (values from "
                f"{points.min():.3g} to {points.max():.3g}); rescale the data"
            )
    return validation.restore_shape(_default_grid(points, scalar, grid_size), scalar)


def mixsqp_start(grid):
    """mix-SQP's start: uniform on min(G, WORKING_SET / 2) grid points by farthest-point order."""
    g = grid.shape[0]
    count = min(g, WORKING_SET // 2)
    if validation.is_traced(grid):
        if count == g:
            return jnp.full((g,), 1.0 / g, grid.dtype)
        idx = _farthest_point_order_traced(grid, count)
        return jnp.zeros((g,), grid.dtype).at[idx].set(1.0 / count)
    idx = _farthest_point_order(grid, count) if count < g else np.arange(g)
    w0 = np.zeros(g, dtype=grid.dtype)
    w0[idx] = 1.0 / count
    return w0


# ----------------------------------------------------------------------------- public API


def npmle(
    x,
    sigma,
    *,
    grid=None,
    grid_size: int = 300,
    method: str = "mixsqp",
    tol: float | None = None,
    max_iters: int | None = None,
    target_log_likelihood: float | None = None,
    block_size: int | None = None,
    mesh=None,
) -> NPMLEResult:
    """Kiefer-Wolfowitz NPMLE of nu on a fixed grid: the weights w maximising log p(x).

    Args:
        x: (N,) or (N, p) observations.
        sigma: the known noise scales, each finite and > 0 with 1 / sigma^2 finite in x's
            dtype: a number (one for all), an (N,) array (s_i: x_i ~ N(z_i, s_i^2 I_p)) or,
            for (N, p) data, an (N, p) array (s_ic, one per observation and coordinate).
            Each unit's row of the likelihood matrix uses its own scales; a constant array
            gives the number's fit to round-off.
        grid: the atoms, (G,) or (G, p) in the convention of ``x``, inside the per-coordinate
            range [min x, max x] of the data (the NPMLE's support lies in that box for any
            scales; module docstring). Default ``default_grid(x, grid_size)``: the data's
            range, not widened or refined by sigma; its spacing (max x - min x) / (G - 1)
            should stay well below the smallest s_i (else pass a larger ``grid_size``).
        grid_size: G for the default grid, >= 2 (ignored when ``grid`` is given).
        method: "mixsqp" (default), "squarem" or "em" (see the module docstring).
        tol: stop when kkt_gap = max_j q_j - 1 <= tol, which certifies
            (log p(x; w*) - log p(x; w)) / N <= tol. Default 1e-6 (float64), 1e-4 (float32).
        max_iters: iteration cap; default 1,000 (mixsqp), 20,000 (squarem), 200,000 (em).
        target_log_likelihood: also stop once log p(x) reaches this value (for benchmarks:
            the time a solver takes to come within a given gap of a known optimum).
        block_size: stream L (every method): it is never formed, and each product with it
            recomputes its entries over blocks of ``block_size`` rows (memory one block of
            block_size x G plus a few numbers per row; module docstring). ``None`` (default):
            the dense path, the N x G matrix L in memory.
        mesh: with ``block_size``, a one-axis ``jax.sharding.Mesh`` whose devices the rows are
            sharded over (``attnbayes.sharding``), or None for every device
            (``sharding.batch_mesh()``; under ``jax.distributed`` every process's). The
            results are the same to round-off on any mesh and come back replicated on every
            device and process. The dense path is not sharded: None or a one-device mesh.

    Returns:
        ``NPMLEResult`` (a pytree of arrays); ``converged`` is False when the cap was hit
        first, when the target stopped the run, or when mix-SQP stopped improving at working
        precision (float32).

    Tracing. Every solver runs in one ``lax.while_loop``, so ``npmle`` is traceable under
    ``jax.jit`` and ``jax.vmap`` over ``x``, ``sigma`` (a number or an array, traced as
    such), ``grid``, ``tol`` and ``target_log_likelihood`` (``method``, ``grid_size``,
    ``max_iters``, ``block_size``, ``mesh`` and the shapes are static). On
    tracers only the static checks run: inputs that the eager call refuses (see Raises; call
    ``attnbayes.inference.deconvolution.em.check_problem(x, sigma, atoms=grid)`` and this
    function on concrete values first) give NaN weights, log-likelihood and ``kkt_gap`` and
    ``converged`` False, as does a grid too coarse for mix-SQP's start. The solution map
    sigma -> w* is not differentiable (the loop is not reverse-differentiable, and its
    support changes with the data); its objective is: ``em.log_likelihood(x, grid, w, sigma)``
    in the weights w, whose gradient divided by N is ``npmle_gradient``.

    Raises:
        ValueError: bad arguments (naming the argument), before any tracing: among others
            ``sigma`` of the wrong shape ((N, p) for (N,) data among them), non-finite,
            <= 0 or too small for x's dtype; data (and grid) whose spread (max - min) / sigma
            (the smallest sigma) exceeds sqrt(finfo.max / (4 N p)),
            where the squared distances overflow
            (``attnbayes.inference.deconvolution.em.check_problem`` runs the same checks); for
            "mixsqp" also when the grid is so coarse for ``sigma`` that the start leaves some x_i
            with an underflowing likelihood (use "squarem" then); ``block_size`` not an
            integer >= 1; ``mesh`` with more than one axis, or of several devices without
            ``block_size``.
        TypeError: ``mesh`` neither None nor a ``jax.sharding.Mesh``.
    """
    points, scalar = validation.as_points("x", x)
    dtype, sigma = check_sigma(points, sigma, scalar=scalar)
    grid_size = validation.check_positive_int("grid_size", grid_size, minimum=2)
    if not isinstance(method, str) or method not in METHODS:
        raise ValueError(f"method: unknown method {method!r}; known: {list(METHODS)}")
    tol = _check_tol(tol, dtype)
    if max_iters is None:
        max_iters = DEFAULT_MAX_ITERS[method]
    max_iters = min(validation.check_positive_int("max_iters", max_iters, minimum=0), 2**31 - 1)
    target = _check_target(target_log_likelihood)
    block_size, mesh = check_streaming(block_size, mesh)
    # the grid lies inside the data's range, so the data's spread bounds every distance
    validation.check_scaled_spread("x", points, sigma, dtype)
    if grid is None:
        grid2 = _default_grid(points, scalar, grid_size)
    else:
        grid2 = _check_grid(grid, points, scalar, inside=True)
    grid2 = jnp.asarray(grid2, dtype) if validation.is_traced(grid2) else np.asarray(grid2, dtype)
    g = grid2.shape[0]
    w0 = mixsqp_start(grid2) if method == "mixsqp" else np.full(g, 1.0 / g, dtype=dtype)
    args = (
        jnp.asarray(points, dtype),
        jnp.asarray(grid2),
        jnp.asarray(sigma, dtype),
        jnp.asarray(w0),
        jnp.asarray(tol, dtype),
        jnp.asarray(max_iters),
        jnp.asarray(target, dtype),
        method,
    )
    if block_size is None:
        w, ll, t, gap, converged, start_ok = _solve(*args)
    else:
        w, ll, t, gap, converged, start_ok = _solve_streamed(*args, block_size, mesh)
    if not validation.is_traced(start_ok) and not bool(start_ok):
        raise ValueError(
            "grid: too coarse for sigma: mix-SQP's start (the uniform measure on "
            f"{int(np.count_nonzero(w0))} spread-out grid points) gives some x_i a likelihood "
            "that underflows; use method='squarem', a finer grid or a larger sigma"
        )
    return NPMLEResult(
        atoms=validation.restore_shape(jnp.asarray(grid2), scalar),
        weights=w,
        log_likelihood=ll,
        num_iters=t,
        converged=converged,
        kkt_gap=gap,
    )


def npmle_gradient(
    x, sigma, grid, weights, *, block_size: int | None = None, mesh=None
) -> jax.Array:
    """q_j = (1 / N) sum_i phi_ij / sum_k w_k phi_ik, (G,), phi_ij = prod_c N(x_ic; g_jc, s_ic^2).

    The KKT vector of the NPMLE: w is optimal on the grid iff q_j <= 1 for all j, with
    equality where w_j > 0; max_j q_j - 1 bounds the per-point log-likelihood gap
    (log p(x; w*) - log p(x; w)) / N, for one sigma or per-unit scales alike (each term of
    q_j is a ratio within one row, so the row's own scales are all it needs). ``sigma`` as in
    ``npmle`` (a number, (N,) or (N, p)). The grid
    may be any (G,) / (G, p) array in the convention of ``x`` (no range restriction here),
    as long as the spread (max - min) / sigma of the data and the grid stays within
    sqrt(finfo.max / (4 N p)), beyond which the squared distances overflow (refused with a
    ValueError naming ``x`` or ``grid``). ``block_size`` and ``mesh`` as in ``npmle``: with
    ``block_size`` the likelihood matrix is streamed over blocks of rows, sharded over
    ``mesh``, in one pass; q comes back replicated.
    """
    points, scalar = validation.as_points("x", x)
    dtype, sigma = check_sigma(points, sigma, scalar=scalar)
    grid2 = _check_grid(grid, points, scalar, inside=False)
    weights = validation.check_weights("weights", weights, size=grid2.shape[0])
    block_size, mesh = check_streaming(block_size, mesh)
    validation.check_scaled_spread("x", points, sigma, dtype, others=(("grid", grid2),))
    args = (
        jnp.asarray(points, dtype),
        jnp.asarray(grid2, dtype),
        jnp.asarray(sigma, dtype),
        jnp.asarray(weights, dtype),
    )
    if block_size is None:
        return _gradient(*args)
    return _gradient_streamed(*args, block_size, mesh)


def npmle_posterior(x, sigma, result: NPMLEResult, *, probs=(0.5, 0.9)):
    """The empirical-Bayes posterior of z_i | x_i under the fitted measure (GMLEB).

    One attention step with the grid as keys and values
    (``attnbayes.inference.deconvolution.em.posterior``): the responsibilities A_ij = w_j phi_ij /
    sum_k w_k phi_ik, phi_ij = prod_c N(x_ic; g_jc, s_ic^2) with each unit's own scales (a
    per-query temperature 1 / s_i^2 for (N,) sigma), zero for grid points of zero weight, then
    E[z_i | x_i] = sum_j A_ij g_j and equal-tailed intervals of the discrete posterior
    sum_j A_ij delta(g_j), coordinate by coordinate
    (``attnbayes.inference.deconvolution.intervals.discrete_posterior_intervals``): the GMLEB rule
    (Jiang & Zhang 2009; heteroscedastic: Jiang 2020). ``x`` may be new data.

    Args:
        x: (N,) or (N, p) observations, in the convention of the fit.
        sigma: the noise scales of these observations: a number, (N,) or (N, p) as in
            ``npmle``.
        result: an ``NPMLEResult``.
        probs: central probabilities of the intervals, each in (0, 1); () for none.

    Returns:
        ``(mean, {prob: (lower, upper)})``, each array shaped like ``x``. Traceable (the
        intervals are then computed in JAX); under ``jax.jit`` inputs that ``em.check_problem``
        refuses give NaN means. The mean is differentiable in x, sigma and the result's
        atoms and weights; the interval end points are grid points (piecewise constant, zero
        gradient).
    """
    if not isinstance(result, NPMLEResult):
        raise ValueError(f"result: expected an NPMLEResult, got {type(result).__name__}")
    if isinstance(probs, str) or not isinstance(probs, Iterable):
        raise ValueError(f"probs: expected a sequence of numbers in (0, 1), got {probs!r}")
    probs = tuple(probs)
    for prob in probs:
        if isinstance(prob, bool) or not isinstance(prob, numbers.Real) or not 0 < prob < 1:
            raise ValueError(f"probs: each must be a number in (0, 1), got {prob!r}")
    xs, mus, ws, s, scalar = checked_problem(
        x, result.atoms, result.weights, sigma, names=("result.atoms", "result.weights")
    )
    mean, resp = posterior_unchecked(xs, mus, ws, s)
    mean = validation.restore_shape(mean, scalar)
    if not probs:
        return mean, {}
    intervals = {
        prob: (validation.restore_shape(lo, scalar), validation.restore_shape(hi, scalar))
        for prob, (lo, hi) in discrete_posterior_intervals(resp, mus, probs).items()
    }
    return mean, intervals


__all__ = [
    "DEFAULT_MAX_ITERS",
    "METHODS",
    "WORKING_SET",
    "NPMLEResult",
    "default_grid",
    "npmle",
    "npmle_gradient",
    "npmle_posterior",
]
