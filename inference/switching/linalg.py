"""Small dense linear algebra of the switching package, one definition of each helper (as
dynamax's ``utils``: ``psd_solve``, ``symmetrize``): the Kalman blocks, the smoothers, the Gibbs
sampler and the learning sub-package all use these.

- ``symmetrise``, ``transpose``, ``outer``: (A + A^T) / 2, A^T and a b^T over the last axes.
- ``mm``, ``mv``, ``chol``, ``solve_lower``, ``solve_lower_t``: products, the Cholesky factor of
  a positive-definite matrix and triangular solves, written out in fused ``jnp`` operations for
  small matrices (no LAPACK call inside the scans over time), the library routines above
  ``SMALL`` rows.
- ``psd_eigh``, ``psd_pinv``, ``psd_solve``, ``psd_factors``: symmetric positive semi-definite
  matrices by eigendecomposition, eigenvalues below a relative cutoff counted as zero: the
  Moore-Penrose pseudo-inverse, the solve A^+ B with the derivative of the pseudo-inverse at
  constant rank (the smoothers' RTS gain), and (factor, pseudo-inverse, rank, log
  pseudo-determinant) (the Gibbs sampler's and EM's densities on the range of a singular
  covariance).
- ``pd_factors``: (S^-1, log det S, n) of positive-definite matrices by Cholesky
  (differentiable).
- ``psd_chol``, ``psd_chol_solve``: a lower-triangular factor C C^T = A of a PSD matrix that
  may be singular (Cholesky with the pivots at round-off level dropped, no LAPACK call) and
  the generalised-inverse solve from it (the Gibbs sampler's draws of the states).

All are pure ``jnp`` functions (``jit``, ``vmap``; ``grad`` where stated); the shape choices
(by ``SMALL``) are static.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

# Small dense linear algebra written out in fused jnp operations (no LAPACK calls): inside the
# scans over time the matrices are d x d and o x o, and on the CPU one library call per product,
# factorisation or triangular solve costs more than the arithmetic. Above ``SMALL`` rows the
# unrolled loops would grow the program (and the d^3 broadcast products the memory traffic), so
# the helpers fall back to the library routines. The choice is static (by shape).
SMALL = 8


def symmetrise(a):
    """(A + A^T) / 2 over the last two axes."""
    return 0.5 * (a + jnp.swapaxes(a, -1, -2))


def transpose(a):
    """A^T over the last two axes."""
    return jnp.swapaxes(a, -1, -2)


def outer(a, b):
    """a b^T over the last axis, batched."""
    return a[..., :, None] * b[..., None, :]


def mm(a, b):
    """a @ b for small matrices, as a broadcast product and a sum: XLA fuses it into the scan's
    loop body, while a dot of tiny matrices on the CPU is a library call costing far more."""
    if a.shape[-1] > SMALL:
        return a @ b
    return jnp.sum(a[..., :, :, None] * b[..., None, :, :], axis=-2)


def mv(a, v):
    """a @ v for a small matrix a and vector v (see ``mm``)."""
    if a.shape[-1] > SMALL:
        return a @ v
    return jnp.sum(a * v[..., None, :], axis=-1)


def chol(a):
    """Lower Cholesky factor of a PD matrix (n, n), column by column."""
    n = a.shape[-1]
    if n > SMALL:
        return jnp.linalg.cholesky(a)
    below = jnp.arange(n)
    cols = []
    for j in range(n):
        v = a[:, j]
        for k in range(j):
            v = v - cols[k] * cols[k][j]
        cols.append(jnp.where(below >= j, v / jnp.sqrt(v[j]), 0.0))
    return jnp.stack(cols, axis=1)


def solve_lower(l, b):
    """L^-1 b for lower-triangular L (n, n) and b (n,) or (n, k), by forward substitution."""
    if l.shape[-1] > SMALL:
        return jax.scipy.linalg.solve_triangular(l, b, lower=True)
    rows = []
    for i in range(l.shape[-1]):
        v = b[i]
        for k in range(i):
            v = v - l[i, k] * rows[k]
        rows.append(v / l[i, i])
    return jnp.stack(rows, axis=0)


def solve_lower_t(l, b):
    """L^-T b for lower-triangular L, by back substitution."""
    n = l.shape[-1]
    if n > SMALL:
        return jax.scipy.linalg.solve_triangular(l, b, lower=True, trans="T")
    rows = [None] * n
    for i in reversed(range(n)):
        v = b[i]
        for k in range(i + 1, n):
            v = v - l[k, i] * rows[k]
        rows[i] = v / l[i, i]
    return jnp.stack(rows, axis=0)


# ----------------------------------------------------------------------------- PSD by eigh


def psd_eigh(a, rtol=None):
    """(eig, vec) of symmetric PSD matrices (..., n, n) (of their symmetric part), with every
    eigenvalue at or below ``rtol`` times the largest set to zero (the round-off of a singular
    matrix); ``rtol`` defaults to n eps."""
    n = a.shape[-1]
    eig, vec = jnp.linalg.eigh(symmetrise(a))
    if rtol is None:
        rtol = n * jnp.finfo(a.dtype).eps
    cutoff = rtol * jnp.max(eig, axis=-1, keepdims=True)
    return jnp.where(eig > cutoff, eig, 0.0), vec


def _inverse_eigenvalues(eig):
    """1 / eig where eig > 0, else 0."""
    positive = eig > 0
    return jnp.where(positive, 1.0 / jnp.where(positive, eig, 1.0), 0.0)


def psd_pinv(a, rtol=None):
    """The Moore-Penrose pseudo-inverse of symmetric PSD matrices (..., n, n), eigenvalues at
    or below ``rtol`` (default n eps) times the largest counted as zero (``psd_eigh``)."""
    eig, vec = psd_eigh(a, rtol)
    return symmetrise((vec * _inverse_eigenvalues(eig)[..., None, :]) @ transpose(vec))


@jax.custom_jvp
def psd_solve(a, b):
    """A^+ B for symmetric PSD A (d, d) and B (d, k), by eigendecomposition.

    Eigenvalues below d * eps * max eigenvalue count as zero, so this is the exact solve when A
    is positive definite and the pseudo-inverse solve when it is singular.

    Its derivative is that of the pseudo-inverse at constant rank (Golub and Pereyra 1973):
    d(A^+) = -A^+ dA A^+ + A^+ A^+ dA (I - A A^+) + (I - A A^+) dA A^+ A^+ (= -A^-1 dA A^-1
    for PD A), not the derivative of ``eigh``, which is NaN where A has a repeated eigenvalue
    (the isotropic and axis-symmetric covariances of the scenarios), although A^+ B is smooth
    there.
    """
    eig, vec = psd_eigh(a)
    return vec @ (_inverse_eigenvalues(eig)[:, None] * (vec.T @ b))


@psd_solve.defjvp
def _psd_solve_jvp(primals, tangents):
    a, b = primals
    da, db = tangents
    pinv = psd_pinv(a)
    da = symmetrise(da)
    null = jnp.eye(a.shape[-1], dtype=a.dtype) - symmetrise(a) @ pinv  # onto the null space
    d_pinv = -pinv @ da @ pinv + pinv @ pinv @ da @ null + null @ da @ pinv @ pinv
    return psd_solve(a, b), d_pinv @ b + pinv @ db


def psd_factors(a, rtol=None):
    """(factor, pseudo-inverse, rank, log pseudo-determinant) of symmetric PSD matrices
    (..., n, n), eigenvalues at or below ``rtol`` (default n eps) times the largest counted as
    zero (``psd_eigh``): factor L = V diag(sqrt(eig)) with L L^T = A, A^+, rank(A) (in A's
    dtype) and log pdet A = sum of the log positive eigenvalues. For fixed covariances (the
    densities on the range of a singular one): ``eigh``'s derivative is NaN at a repeated
    eigenvalue, so do not differentiate through it."""
    eig, vec = psd_eigh(a, rtol)
    positive = eig > 0
    pinv = symmetrise((vec * _inverse_eigenvalues(eig)[..., None, :]) @ transpose(vec))
    rank = jnp.sum(positive, axis=-1).astype(a.dtype)
    log_pdet = jnp.sum(jnp.where(positive, jnp.log(jnp.where(positive, eig, 1.0)), 0.0), axis=-1)
    return vec * jnp.sqrt(eig)[..., None, :], pinv, rank, log_pdet


def pd_factors(a):
    """(A^-1, log det A, n) of positive-definite matrices (..., n, n) by Cholesky
    (differentiable); n in A's dtype, broadcast over the batch."""
    factor = jnp.linalg.cholesky(symmetrise(a))
    eye = jnp.broadcast_to(jnp.eye(a.shape[-1], dtype=a.dtype), a.shape)
    inv = jax.scipy.linalg.cho_solve((factor, True), eye)
    log_det = 2.0 * jnp.sum(jnp.log(jnp.diagonal(factor, axis1=-2, axis2=-1)), axis=-1)
    return inv, log_det, jnp.full(a.shape[:-2], a.shape[-1], a.dtype)


# ----------------------------------------------------------------------------- PSD by Cholesky


def psd_chol(cov, scale=None):
    """Lower-triangular C (d, d) with C C' = cov for a symmetric PSD cov, singular allowed.

    Cholesky, column by column, with each pivot at or below 10 d eps ``scale`` taken as zero
    and its column zeroed (default scale max(diag(cov)); pass the scale of the matrix cov was
    computed from when cov itself may be all round-off, e.g. a conditional covariance that is
    zero). Exact zeros of a structurally singular matrix (rank-deficient Q, P0 = 0, the
    information matrices of partly observed states) stay zero, so the factor reproduces cov
    to round-off and draws C z lie on its support. No pivoting: a numerically rank-deficient
    but otherwise ill-conditioned matrix can lose accuracy in the deficient direction (a
    pivoted variant costs several times more inside the scans). Unlike ``eigh`` (a LAPACK
    call per matrix) it is a few fused vector operations for small d.
    """
    d = cov.shape[-1]
    a = symmetrise(cov)
    if scale is None:
        scale = functools.reduce(jnp.maximum, [a[i, i] for i in range(d)])
    tol = 10.0 * d * jnp.finfo(cov.dtype).eps * scale
    below = jnp.arange(d)
    cols = []
    for j in range(d):
        v = a[:, j]
        for k in range(j):
            v = v - cols[k] * cols[k][j]
        ok = v[j] > tol
        col = v * jax.lax.rsqrt(jnp.where(ok, v[j], 1.0))
        cols.append(jnp.where(ok & (below >= j), col, 0.0))
    return jnp.stack(cols, axis=1)


def psd_chol_solve(cov, b):
    """cov^- b for PSD cov (d, d) and b (d, k), with cov^- = [(L11 L11')^-1, 0; 0, 0] in the
    pivots that ``psd_chol`` keeps (L11 their block), a generalised inverse
    (cov cov^- cov = cov). Conditioning a Gaussian on a singular block needs no more: the
    residual and the cross-covariance lie in its range."""
    factor = psd_chol(cov)
    ok = jnp.diagonal(factor) > 0
    factor = factor + jnp.diag(jnp.where(ok, 0.0, 1.0))  # unit pivots for the dropped ones ...
    keep = ok.astype(cov.dtype)[:, None]  # ... whose unknowns are set to zero
    return keep * solve_lower_t(factor, keep * solve_lower(factor, b))


__all__ = [
    "SMALL",
    "chol",
    "mm",
    "mv",
    "outer",
    "pd_factors",
    "psd_chol",
    "psd_chol_solve",
    "psd_eigh",
    "psd_factors",
    "psd_pinv",
    "psd_solve",
    "solve_lower",
    "solve_lower_t",
    "symmetrise",
    "transpose",
]
