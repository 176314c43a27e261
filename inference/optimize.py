"""Unconstrained minimisation with one gradient evaluation per loop step: limited-memory BFGS
with a backtracking (Armijo) line search, and a Hessian by central differences of a gradient.

Why not ``optax.lbfgs``: its zoom line search evaluates the objective and its gradient at several
places of one iteration, and each place is a separate copy of the objective in the compiled
program. When the objective is a filter's log-likelihood (a ``lax.scan`` over time, reverse-mode
differentiated), XLA compiles each copy: on a 1-D two-mode IMM likelihood, an optax L-BFGS loop
lowered and compiled in 19.0 s against 4.5 s for this one, which also ran 6.6x faster warm
(``benchmarks/switching_learning.py``, part 3; BENCHMARKS.md).
Here every loop step evaluates (f, grad f) at exactly one point, the trial point, so the program
holds one copy, and a rejected trial costs one evaluation like an accepted one.

The algorithm (Nocedal and Wright 2006, Algorithms 7.4 and 7.5, with the backtracking of their
Algorithm 3.1): from x_k with gradient g_k and direction d_k = -H_k g_k, try
x = x_k + a d_k with a = 1, 1/2, 1/4, ... until the Armijo condition
f(x) <= f(x_k) + c1 a g_k^T d_k + 4 eps |f(x_k)| holds (c1 = 1e-4; the last term lets a step
whose decrease is below round-off pass, as Hager and Zhang's approximate Wolfe conditions do,
instead of halving it to nothing near the minimum); accept, store s = x - x_k, y = g(x) - g_k
(when s^T y > 0, which keeps H positive definite), and form the next direction by the
two-loop recursion with H_0 = (s^T y / y^T y) I over the last ``history`` pairs. A direction
that is not a descent direction is replaced by -g. Stops when max |g| < ``tolerance``, after
``max_iterations`` accepted steps, or when the step shrinks below 1e-12 (not converged).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

__all__ = [
    "LbfgsBatchResult",
    "LbfgsResult",
    "NewtonResult",
    "hessian_by_differences",
    "hessian_from_batched_gradient",
    "minimize_lbfgs",
    "minimize_lbfgs_batch",
    "refine_newton",
]

_ARMIJO = 1e-4
_MIN_STEP = 1e-12


class LbfgsResult(NamedTuple):
    """The end of ``minimize_lbfgs``.

    Attributes:
        x: (n,) the last accepted point.
        value: () f(x).
        grad: (n,) grad f(x).
        converged: () bool, max |grad| < tolerance.
        num_iterations: () accepted steps.
        num_evaluations: () evaluations of (f, grad f), rejected trials included.
        trace: (max_iterations + 1,) f at x_0, x_1, ... (NaN after ``num_iterations``).
    """

    x: jax.Array
    value: jax.Array
    grad: jax.Array
    converged: jax.Array
    num_iterations: jax.Array
    num_evaluations: jax.Array
    trace: jax.Array


def _two_loop(grad, s_mem, y_mem, valid):
    """-H grad by the two-loop recursion over the stored pairs (oldest first; ``valid`` marks
    the filled slots)."""
    sy = jnp.sum(s_mem * y_mem, axis=1)
    rho = jnp.where(valid, 1.0 / jnp.where(valid, sy, 1.0), 0.0)

    def backward(q, pair):
        s, y, r = pair
        alpha = r * jnp.dot(s, q)
        return q - alpha * y, alpha

    q, alphas = jax.lax.scan(backward, grad, (s_mem, y_mem, rho), reverse=True)
    last_y = y_mem[-1]
    gamma = jnp.where(valid[-1], sy[-1] / jnp.maximum(jnp.dot(last_y, last_y), 1e-300), 1.0)
    r = gamma * q

    def forward(r, pair):
        s, y, rh, alpha = pair
        beta = rh * jnp.dot(y, r)
        return r + s * (alpha - beta), None

    r, _ = jax.lax.scan(forward, r, (s_mem, y_mem, rho, alphas))
    return -r


def minimize_lbfgs(
    fun, x0, *, max_iterations: int = 500, tolerance: float = 1e-8, history: int = 10
) -> LbfgsResult:
    """Minimise ``fun`` (a scalar JAX function of an (n,) array) from ``x0`` by L-BFGS with a
    backtracking line search (module docstring), in one ``lax.while_loop`` whose body evaluates
    ``jax.value_and_grad(fun)`` once. Traceable: jit it, vmap it over starts.

    Args:
        fun: f(x) -> scalar. A non-finite value at a trial point counts as a failed Armijo test.
        x0: (n,) start (float).
        max_iterations: accepted steps at most (static); the evaluations are capped at 30 times
            that.
        tolerance: converged when max_i |df/dx_i| < tolerance.
        history: stored (s, y) pairs (static).
    """
    x0 = jnp.asarray(x0)
    n = x0.shape[0]
    dtype = x0.dtype
    value_and_grad = jax.value_and_grad(fun)
    max_evaluations = 30 * max_iterations + 1

    class Carry(NamedTuple):
        x: jax.Array
        f: jax.Array
        g: jax.Array
        d: jax.Array
        step: jax.Array
        s_mem: jax.Array
        y_mem: jax.Array
        valid: jax.Array
        iteration: jax.Array
        evaluations: jax.Array
        trace: jax.Array
        stop: jax.Array

    def cond(c: Carry):
        return ~c.stop & (c.evaluations < max_evaluations)

    def body(c: Carry):
        first = c.evaluations == 0
        trial = c.x + c.step * c.d
        f, g = value_and_grad(trial)
        finite = jnp.isfinite(f) & jnp.all(jnp.isfinite(g))
        # Armijo, up to round-off in f (a decrease below 4 ulp of f cannot be seen)
        noise = 4.0 * jnp.finfo(dtype).eps * jnp.abs(c.f)
        armijo = f <= c.f + _ARMIJO * c.step * jnp.dot(c.g, c.d) + noise
        accept = first | (finite & armijo)

        # on acceptance: the curvature pair, the memory, the next direction
        s, y = trial - c.x, g - c.g
        sy = jnp.dot(s, y)
        store = ~first & (sy > 1e-10 * jnp.linalg.norm(s) * jnp.linalg.norm(y))
        s_mem = jnp.where(store, jnp.roll(c.s_mem, -1, axis=0).at[-1].set(s), c.s_mem)
        y_mem = jnp.where(store, jnp.roll(c.y_mem, -1, axis=0).at[-1].set(y), c.y_mem)
        valid = jnp.where(store, jnp.roll(c.valid, -1).at[-1].set(True), c.valid)
        direction = _two_loop(g, s_mem, y_mem, valid)
        steepest = -g / jnp.maximum(1.0, jnp.linalg.norm(g))
        no_memory = ~jnp.any(valid)
        descent = jnp.dot(direction, g) < 0
        direction = jnp.where(no_memory | ~descent, steepest, direction)
        iteration = c.iteration + jnp.where(accept & ~first, 1, 0)
        converged = jnp.max(jnp.abs(g)) < tolerance

        new = Carry(
            x=jnp.where(accept, trial, c.x),
            f=jnp.where(accept, f, c.f),
            g=jnp.where(accept, g, c.g),
            d=jnp.where(accept, direction, c.d),
            step=jnp.where(accept, jnp.ones((), dtype), 0.5 * c.step),
            s_mem=jnp.where(accept, s_mem, c.s_mem),
            y_mem=jnp.where(accept, y_mem, c.y_mem),
            valid=jnp.where(accept, valid, c.valid),
            iteration=iteration,
            evaluations=c.evaluations + 1,
            trace=jnp.where(accept, c.trace.at[iteration].set(f), c.trace),
            stop=jnp.where(
                accept,
                (finite & converged) | (iteration >= max_iterations) | (first & ~finite),
                0.5 * c.step < _MIN_STEP,
            ),
        )
        return new

    init = Carry(
        x=x0,
        f=jnp.asarray(jnp.inf, dtype),
        g=jnp.zeros((n,), dtype),
        d=jnp.zeros((n,), dtype),
        step=jnp.zeros((), dtype),
        s_mem=jnp.zeros((history, n), dtype),
        y_mem=jnp.zeros((history, n), dtype),
        valid=jnp.zeros((history,), bool),
        iteration=jnp.zeros((), jnp.int32),
        evaluations=jnp.zeros((), jnp.int32),
        trace=jnp.full((max_iterations + 1,), jnp.nan, dtype),
        stop=jnp.asarray(False),
    )
    end = jax.lax.while_loop(cond, body, init)
    return LbfgsResult(
        x=end.x,
        value=end.f,
        grad=end.g,
        converged=jnp.max(jnp.abs(end.g)) < tolerance,
        num_iterations=end.iteration,
        num_evaluations=end.evaluations,
        trace=end.trace,
    )


def hessian_by_differences(grad, x, *, relative_step: float = 1e-5):
    """The Hessian of f at x from its gradient, by central differences, symmetrised:
    H[:, i] = (grad(x + h_i e_i) - grad(x - h_i e_i)) / (2 h_i), h_i = relative_step
    max(|x_i|, 1), then (H + H^T) / 2. The 2n gradients run as one vmapped call, so the compiled
    program holds one gradient (on a scanned filter: 4.9 s to compile against 8.4 s for
    ``jax.hessian``, BENCHMARKS.md). Error O(h^2) in exact arithmetic plus O(eps / h) round-off:
    about 1e-8 relative in float64 at the default step, ample for standard errors.

    Args:
        grad: x -> (n,) gradient (a JAX function).
        x: (n,).
        relative_step: h_i / max(|x_i|, 1).
    """
    x = jnp.asarray(x)
    h = relative_step * jnp.maximum(jnp.abs(x), 1.0)
    shifts = jnp.diag(h)
    points = jnp.concatenate([x + shifts, x - shifts])
    grads = jax.vmap(grad)(points)
    n = x.shape[0]
    hess = (grads[:n] - grads[n:]) / (2.0 * h[:, None])
    return 0.5 * (hess + hess.T)


def _two_loop_numpy(grad, s_mem, y_mem, valid):
    """``_two_loop`` for a batch in NumPy: grad (B, n), s_mem, y_mem (B, m, n), valid (B, m)
    (oldest pair first); returns -H grad (B, n)."""
    sy = np.sum(s_mem * y_mem, axis=-1)
    rho = np.where(valid, 1.0 / np.where(valid, sy, 1.0), 0.0)
    q = grad.copy()
    alphas = np.zeros(valid.shape)
    for k in range(valid.shape[1] - 1, -1, -1):
        alphas[:, k] = rho[:, k] * np.sum(s_mem[:, k] * q, axis=-1)
        q = q - alphas[:, k, None] * y_mem[:, k]
    last_y = y_mem[:, -1]
    gamma = np.where(
        valid[:, -1], sy[:, -1] / np.maximum(np.sum(last_y * last_y, axis=-1), 1e-300), 1.0
    )
    r = gamma[:, None] * q
    for k in range(valid.shape[1]):
        beta = rho[:, k] * np.sum(y_mem[:, k] * r, axis=-1)
        r = r + s_mem[:, k] * (alphas[:, k] - beta)[:, None]
    return -r


class LbfgsBatchResult(NamedTuple):
    """The end of ``minimize_lbfgs_batch``, one entry per start (NumPy arrays).

    Attributes:
        x: (B, n) the last accepted points.
        value: (B,) f there.
        grad: (B, n) grad f there.
        converged: (B,) bool, max |grad| < tolerance, or stalled with no visible gain
            predicted (``stall``).
        num_iterations: (B,) accepted steps.
        num_evaluations: () calls of the batched value-and-gradient (each evaluates every
            start once).
        trace: (B, max_iterations + 1) f at x_0, x_1, ... (NaN after ``num_iterations``).
    """

    x: np.ndarray
    value: np.ndarray
    grad: np.ndarray
    converged: np.ndarray
    num_iterations: np.ndarray
    num_evaluations: int
    trace: np.ndarray


def _row_norms(x: np.ndarray) -> np.ndarray:
    """The Euclidean norm of each row, scaled by its largest entry so that no square
    overflows (a gradient of 1e160 has norm 1e160, not inf)."""
    top = np.max(np.abs(x), axis=1)
    safe = np.where(top > 0, top, 1.0)
    with np.errstate(over="ignore", invalid="ignore"):  # rows with NaN or inf
        return top * np.sqrt(np.sum((x / safe[:, None]) ** 2, axis=1))


def minimize_lbfgs_batch(
    value_and_grad: Callable,
    x0,
    *,
    max_iterations: int = 500,
    tolerance: float = 1e-8,
    history: int = 10,
    stall: int | None = 10,
) -> LbfgsBatchResult:
    """``minimize_lbfgs``'s algorithm (module docstring: L-BFGS, backtracking Armijo line search,
    one evaluation per step) run from B starts at once, driven from the host: each step makes
    one call ``value_and_grad(points (B, n)) -> (values (B,), grads (B, n))`` (a compiled,
    vmapped program: the same program serves every step, every start and, through
    ``hessian_from_batched_gradient``, the Hessian), and the bookkeeping (the line search, the
    two-loop recursion) is NumPy on (B, n) arrays. A start that has stopped is evaluated again
    at its point (the batch keeps its shape, so nothing recompiles) and does not move. Not
    traceable; the iterates equal ``minimize_lbfgs``'s from each start to round-off.

    Args:
        value_and_grad: points (B, n) -> (values (B,), gradients (B, n)), array-likes.
        x0: (B, n) starts.
        max_iterations: accepted steps at most per start; the calls are capped at 30 times
            that.
        tolerance: converged when max_i |df/dx_i| < tolerance.
        history: stored (s, y) pairs per start.
        stall: stop a start whose f has fallen by less than 16 eps |f| (round-off) over its
            last ``stall`` accepted steps: it sits at a minimum that f cannot resolve
            further, or creeps along a flat valley; otherwise one such start keeps the whole
            batch running to ``max_iterations``. It counts as converged when its gradient
            passes ``tolerance`` or when the quasi-Newton model predicts no visible gain
            either: -g^T d / 2 <= 16 eps |f| for the L-BFGS direction d = -H g (not the
            steepest-descent fallback; eps of the objective's dtype; the
            spirit of L-BFGS-B's relative-reduction test, Byrd, Lu, Nocedal and Zhu 1995).
            None: never (then the iterates are ``minimize_lbfgs``'s).
    """
    x = np.array(x0, dtype=float)
    if x.ndim != 2:
        raise ValueError(f"x0: expected shape (B, n), got {x.shape}")
    b, n = x.shape
    eps = np.finfo(float).eps
    f = np.full(b, np.inf)
    g = np.zeros((b, n))
    d = np.zeros((b, n))
    step = np.zeros(b)
    s_mem = np.zeros((b, history, n))
    y_mem = np.zeros((b, history, n))
    valid = np.zeros((b, history), bool)
    iteration = np.zeros(b, np.int64)
    trace = np.full((b, max_iterations + 1), np.nan)
    stop = np.zeros(b, bool)
    settled = np.zeros(b, bool)  # stalled with no visible gain predicted
    first = np.ones(b, bool)
    calls = 0
    while not stop.all() and calls < 30 * max_iterations + 1:
        trial = np.where(stop[:, None], x, x + step[:, None] * d)
        values, grads = value_and_grad(trial)
        # a start running off (gradients of 1e200) overflows a product here: its row turns
        # inf or NaN, which the finite checks and comparisons below already refuse
        with np.errstate(over="ignore", invalid="ignore"):
            if calls == 0:  # the objective's precision sets the round-off allowances
                eps = np.finfo(np.result_type(np.asarray(values).dtype, np.float32)).eps
            fv = np.asarray(values, dtype=float)
            gv = np.asarray(grads, dtype=float)
            calls += 1
            finite = np.isfinite(fv) & np.all(np.isfinite(gv), axis=1)
            noise = 4.0 * eps * np.abs(f)
            armijo = fv <= f + _ARMIJO * step * np.sum(g * d, axis=1) + noise
            accept = ~stop & (first | (finite & armijo))
            s, yv = trial - x, gv - g
            sy = np.sum(s * yv, axis=1)
            store = accept & ~first & (sy > 1e-10 * _row_norms(s) * _row_norms(yv))
            s_mem[store] = np.concatenate([s_mem[store, 1:], s[store, None]], axis=1)
            y_mem[store] = np.concatenate([y_mem[store, 1:], yv[store, None]], axis=1)
            valid[store] = np.concatenate(
                [valid[store, 1:], np.ones((int(store.sum()), 1), bool)], axis=1
            )
            direction = _two_loop_numpy(gv, s_mem, y_mem, valid)
            steepest = -gv / np.maximum(1.0, _row_norms(gv))[:, None]
            bad = ~np.any(valid, axis=1) | ~(np.sum(direction * gv, axis=1) < 0)
            direction = np.where(bad[:, None], steepest, direction)
            iteration = iteration + (accept & ~first)
            converged = np.max(np.abs(gv), axis=1) < tolerance
            rows = np.flatnonzero(accept)
            trace[rows, iteration[rows]] = fv[rows]
            stalled = np.zeros(b, bool)
            if stall is not None:
                back = iteration - stall
                rows = np.flatnonzero(accept & (back >= 0))
                before = trace[rows, back[rows]]
                stalled[rows] = before - fv[rows] <= 16.0 * eps * np.abs(fv[rows])
                gain = -0.5 * np.sum(gv * direction, axis=1)
                # only the quasi-Newton model predicts a gain (not the steepest-descent fallback)
                settled |= stalled & ~bad & (gain <= 16.0 * eps * np.abs(fv))
            x = np.where(accept[:, None], trial, x)
            f = np.where(accept, fv, f)
            g = np.where(accept[:, None], gv, g)
            d = np.where(accept[:, None], direction, d)
            halve = ~stop & ~accept
            stop = (
                stop
                | (
                    accept
                    & ((finite & converged) | (iteration >= max_iterations) | (first & ~finite))
                )
                | stalled
                | (halve & (0.5 * step < _MIN_STEP))
            )
            step = np.where(accept, 1.0, np.where(halve, 0.5 * step, step))
            first = first & ~accept
    return LbfgsBatchResult(
        x=x,
        value=f,
        grad=g,
        converged=(np.max(np.abs(g), axis=1) < tolerance) | settled,
        num_iterations=iteration,
        num_evaluations=calls,
        trace=trace,
    )


def hessian_from_batched_gradient(
    value_and_grad: Callable, x, batch_size: int, *, relative_step: float = 1e-5
) -> np.ndarray:
    """``hessian_by_differences`` (central differences of the gradient, symmetrised) with the
    2n gradients evaluated by a batched ``value_and_grad(points (batch_size, n))`` in chunks
    of ``batch_size`` points (the last chunk padded with x), so the compiled program of an
    optimiser's batch of starts (``minimize_lbfgs_batch``) also gives the Hessian without
    compiling another. NumPy result (n, n)."""
    x = np.asarray(x, dtype=float)
    n = x.shape[0]
    h = relative_step * np.maximum(np.abs(x), 1.0)
    points = np.concatenate([x + np.diag(h), x - np.diag(h)])
    pad = (-points.shape[0]) % batch_size
    points = np.concatenate([points, np.broadcast_to(x, (pad, n))])
    grads = np.concatenate(
        [
            np.asarray(value_and_grad(points[i : i + batch_size])[1], dtype=float)
            for i in range(0, points.shape[0], batch_size)
        ]
    )
    hess = (grads[:n] - grads[n : 2 * n]) / (2.0 * h[:, None])
    return 0.5 * (hess + hess.T)


class NewtonResult(NamedTuple):
    """The end of ``refine_newton`` (NumPy).

    Attributes:
        x: (n,) the last accepted point.
        value: f(x).
        grad: (n,) grad f(x).
        converged: max |grad| < tolerance.
        num_iterations: Newton steps taken.
    """

    x: np.ndarray
    value: float
    grad: np.ndarray
    converged: bool
    num_iterations: int


def refine_newton(
    value_and_grad: Callable,
    x,
    batch_size: int,
    *,
    max_iterations: int = 30,
    tolerance: float = 1e-8,
    relative_step: float = 1e-5,
) -> NewtonResult:
    """Polish a point by modified Newton steps, using only a batched value-and-gradient
    program (``minimize_lbfgs_batch``'s): the Hessian H by central differences of the gradient
    (``hessian_from_batched_gradient``), its eigenvalues replaced by max(|lambda|, delta),
    delta = 1e-8 max |lambda| (Nocedal and Wright 2006, sec. 3.4, a modified Newton method:
    a descent direction d = -H_mod^-1 g even where H is indefinite or nearly singular), and
    the step lengths 1, 1/2, ..., 2^-(batch_size - 1) tried in ONE batched call; the longest
    step that passes the Armijo test is taken. Where L-BFGS crawls along a badly conditioned
    valley (thousands of steps on a three-regime switching regression), Newton converges in a
    few. Stops when max |grad| < ``tolerance``, after ``max_iterations``, or when no step
    length decreases f.

    Args:
        value_and_grad: points (batch_size, n) -> (values, gradients).
        x: (n,) the start.
        batch_size: the program's batch (the step lengths tried: 1, 1/2, ..., 2^-(batch_size - 1)).
    """
    x = np.asarray(x, dtype=float)
    n = x.shape[0]
    eps = np.finfo(float).eps
    steps = 0.5 ** np.arange(batch_size)

    def at(points):
        values, grads = value_and_grad(points)
        return np.asarray(values, dtype=float), np.asarray(grads, dtype=float)

    values, grads = at(np.broadcast_to(x, (batch_size, n)))
    f, g = float(values[0]), grads[0]
    done = 0
    while (
        done < max_iterations
        and not np.max(np.abs(g)) < tolerance
        and np.isfinite(f)
        and np.all(np.isfinite(g))
    ):
        hess = hessian_from_batched_gradient(
            value_and_grad, x, batch_size, relative_step=relative_step
        )
        if not np.all(np.isfinite(hess)):  # e.g. a variance collapsing to 0 on a short series
            break
        try:
            lam, vec = np.linalg.eigh(hess)
        except np.linalg.LinAlgError:  # LAPACK's iteration failed on an extreme matrix
            break
        if not np.all(np.isfinite(lam)):
            break
        lam = np.maximum(np.abs(lam), 1e-8 * max(np.max(np.abs(lam)), 1e-300))
        d = -vec @ ((vec.T @ g) / lam)
        trials = x + steps[:, None] * d
        values, grads = at(trials)
        slope = float(g @ d)
        ok = np.isfinite(values) & (values <= f + _ARMIJO * steps * slope + 4.0 * eps * abs(f))
        if not ok.any():
            break
        k = int(np.argmax(ok))
        x, f, g = trials[k], float(values[k]), grads[k]
        done += 1
    return NewtonResult(x, f, g, bool(np.max(np.abs(g)) < tolerance), done)
