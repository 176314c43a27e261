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

from typing import NamedTuple

import jax
import jax.numpy as jnp

__all__ = ["LbfgsResult", "hessian_by_differences", "minimize_lbfgs"]

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
