"""``attnbayes.inference.optimize``: L-BFGS with one gradient per loop step, against the closed
form (Rosenbrock), scipy's BFGS and optax's L-BFGS; the Hessian by differences against
``jax.hessian``."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import scipy.optimize

from attnbayes.inference.optimize import hessian_by_differences, minimize_lbfgs


def rosenbrock(x):
    return jnp.sum(100.0 * (x[1:] - x[:-1] ** 2) ** 2 + (1.0 - x[:-1]) ** 2)


def _logistic_problem():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(300, 4))
    p = 1.0 / (1.0 + np.exp(-x @ np.array([1.0, -2.0, 0.5, 0.0])))
    y = (rng.random(300) < p).astype(float)

    def nll(b):
        z = x @ b
        return jnp.sum(jnp.logaddexp(0.0, z) - y * z)

    return nll


def test_rosenbrock_reaches_its_minimum_at_ones_from_vmapped_starts():
    starts = jnp.array([[-1.2, 1.0, -0.5, 0.3, 2.0], [0.0, 0.0, 0.0, 0.0, 0.0], [2, 2, 2, 2, 2.0]])
    run = jax.jit(jax.vmap(lambda x0: minimize_lbfgs(rosenbrock, x0, max_iterations=2000)))
    res = run(starts)
    assert res.converged.all()
    np.testing.assert_allclose(res.x, 1.0, atol=1e-7)
    # the trace is f at the accepted points: non-increasing up to round-off, NaN after the end
    for trace, count in zip(np.asarray(res.trace), np.asarray(res.num_iterations), strict=True):
        path = trace[: count + 1]
        assert np.all(np.isfinite(path)) and np.all(np.isnan(trace[count + 1 :]))
        assert np.all(np.diff(path) <= 1e-12 * np.abs(path[:-1]) + 1e-300)
    assert np.all(res.num_evaluations >= res.num_iterations + 1)


def test_logistic_regression_agrees_with_scipy_and_optax():
    nll = _logistic_problem()
    res = minimize_lbfgs(nll, jnp.zeros(4), tolerance=1e-10)
    ours = np.asarray(res.x)
    value_and_grad = jax.jit(jax.value_and_grad(nll))
    ref = scipy.optimize.minimize(
        lambda b: tuple(np.asarray(v) for v in value_and_grad(b)),
        np.zeros(4),
        jac=True,
        method="BFGS",
        options={"gtol": 1e-11},
    )
    np.testing.assert_allclose(ours, ref.x, atol=1e-8)
    solver = optax.lbfgs()
    value_and_grad = optax.value_and_grad_from_state(nll)

    def step(carry, _):
        b, state = carry
        value, grad = value_and_grad(b, state=state)
        updates, state = solver.update(grad, state, b, value=value, grad=grad, value_fn=nll)
        return (optax.apply_updates(b, updates), state), None

    (b, _), _ = jax.lax.scan(step, (jnp.zeros(4), solver.init(jnp.zeros(4))), length=100)
    np.testing.assert_allclose(ours, b, atol=1e-8)
    assert bool(res.converged) and float(jnp.max(jnp.abs(res.grad))) < 1e-10


def test_a_non_finite_start_stops_at_once_and_a_non_finite_trial_is_rejected():
    res = minimize_lbfgs(lambda x: jnp.sum(jnp.log(x)), jnp.array([-1.0]))
    assert int(res.num_evaluations) == 1 and not bool(res.converged)
    # log barrier: trials past 0 give NaN and are halved back into the domain
    res = minimize_lbfgs(lambda x: jnp.sum(x - jnp.log(x)), jnp.array([0.05, 8.0]))
    np.testing.assert_allclose(res.x, 1.0, atol=1e-8)


def test_hessian_by_differences_matches_jax_hessian():
    nll = _logistic_problem()
    b = jnp.array([0.9, -1.8, 0.4, 0.1])
    np.testing.assert_allclose(
        jax.jit(hessian_by_differences, static_argnums=0)(jax.grad(nll), b),
        jax.jit(jax.hessian(nll))(b),
        rtol=1e-7,
        atol=1e-9,
    )
    x = jnp.array([0.3, -0.2, 1.5])
    np.testing.assert_allclose(
        jax.jit(hessian_by_differences, static_argnums=0)(jax.grad(rosenbrock), x),
        jax.jit(jax.hessian(rosenbrock))(x),
        rtol=1e-7,
        atol=1e-6,
    )
