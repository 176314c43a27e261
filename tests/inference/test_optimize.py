"""``attnbayes.inference.optimize``: L-BFGS with one gradient per loop step, against the closed
form (Rosenbrock), scipy's BFGS and optax's L-BFGS; the Hessian by differences against
``jax.hessian``."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import scipy.optimize

from attnbayes.inference.optimize import (
    hessian_by_differences,
    hessian_from_batched_gradient,
    minimize_lbfgs,
    minimize_lbfgs_batch,
    refine_newton,
)


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


def test_the_host_driven_batch_follows_the_compiled_loop_start_by_start():
    """``minimize_lbfgs_batch`` is the same algorithm driven from the host over a batch: on a
    well-conditioned problem its accepted values, points and counts equal ``minimize_lbfgs``'s
    (vmapped) from each start to round-off, including a start that converges long before the
    others (it stops moving); on Rosenbrock (where round-off in the two-loop recursion grows
    along the path) every start reaches the minimum; a start that is not finite stops at once,
    and every call has the batch's shape (one compiled program)."""
    nll = _logistic_problem()
    x_hat = np.asarray(minimize_lbfgs(nll, jnp.zeros(4), tolerance=1e-12).x)
    starts = np.array([[0.0, 0.0, 0.0, 0.0], x_hat + 1e-9, [3.0, -3.0, 2.0, 1.0]])
    ref = jax.jit(jax.vmap(lambda x0: minimize_lbfgs(nll, x0, tolerance=1e-9)))(jnp.asarray(starts))
    batched = jax.jit(jax.vmap(jax.value_and_grad(nll)))
    calls = []

    def value_and_grad(points):
        calls.append(points.shape)
        return batched(points)

    res = minimize_lbfgs_batch(value_and_grad, starts, tolerance=1e-9, stall=None)
    assert set(calls) == {(3, 4)}
    np.testing.assert_array_equal(res.num_iterations, ref.num_iterations)
    assert res.num_iterations[1] < res.num_iterations[0]
    np.testing.assert_array_equal(res.converged, ref.converged)
    np.testing.assert_allclose(res.trace, ref.trace, rtol=1e-12)
    np.testing.assert_allclose(res.x, ref.x, rtol=0, atol=1e-10)
    assert res.num_evaluations == int(np.max(ref.num_evaluations))

    rosen = jax.jit(jax.vmap(jax.value_and_grad(rosenbrock)))
    far = np.array([[-1.2, 1.0, -0.5, 0.3, 2.0], [0.0] * 5, [2.0] * 5])
    end = minimize_lbfgs_batch(rosen, far, max_iterations=2000, stall=None)
    assert end.converged.all()
    np.testing.assert_allclose(end.x, 1.0, atol=1e-7)
    bad = minimize_lbfgs_batch(rosen, np.array([[np.nan] * 5, [1.0] * 5, [1.0] * 5]))
    assert bad.num_iterations[0] == 0 and not bad.converged[0] and bad.converged[1]


def test_the_hessian_from_a_batched_gradient_matches_jax_hessian():
    nll = _logistic_problem()
    x = np.array([0.3, -1.0, 0.2, 0.1])
    batched = jax.jit(jax.vmap(jax.value_and_grad(nll)))
    np.testing.assert_allclose(
        hessian_from_batched_gradient(batched, x, 3),
        np.asarray(jax.hessian(nll)(jnp.asarray(x))),
        rtol=1e-7,
    )


def test_a_start_that_stalls_stops_after_stall_steps():
    """f(x) = 1e30 + x_1 + x_2 near the origin has a gradient of 1 but no visible decrease in
    float64 (every change is below the round-off of f): ``stall`` stops it after that many
    accepted steps, and it is not converged (its gradient does not pass, and with no
    curvature pair stored there is no quasi-Newton model to say nothing is left to gain),
    while an ordinary start in the same batch (a quadratic where x_1 > 100) converges; with
    stall=None the first runs to the cap."""

    def f(x):
        return jnp.where(x[0] > 100.0, jnp.sum((x - 200.0) ** 2), 1e30 + jnp.sum(x))

    batched = jax.jit(jax.vmap(jax.value_and_grad(f)))
    starts = np.array([[1e-3, 1e-3], [200.0, 1.0]])
    res = minimize_lbfgs_batch(batched, starts, max_iterations=200, stall=5)
    assert not res.converged[0] and res.num_iterations[0] == 5
    assert np.max(np.abs(res.grad[0])) == 1.0
    assert res.converged[1]
    capped = minimize_lbfgs_batch(batched, starts[:1], max_iterations=200, stall=None)
    assert capped.num_iterations[0] == 200 and not capped.converged[0]


def test_newton_refinement_reaches_the_rosenbrock_minimum_in_few_steps():
    """Modified Newton from (-1.2, 1): the classic start, 2-D Rosenbrock, where its Hessian is
    indefinite along the way; it reaches (1, 1) to 1e-9 in at most 30 steps (L-BFGS needs
    about 35 accepted steps and many more evaluations), with one batched program."""
    batched = jax.jit(jax.vmap(jax.value_and_grad(rosenbrock)))
    res = refine_newton(batched, np.array([-1.2, 1.0]), 8, max_iterations=30, tolerance=1e-10)
    assert res.converged and res.num_iterations <= 30
    np.testing.assert_allclose(res.x, 1.0, atol=1e-9)


def test_a_start_running_off_to_huge_gradients_warns_nothing_and_spares_the_others():
    """f(x) = -exp(x_1) + x_2^2 is unbounded below: a start there takes the steepest step to
    gradients of 1e200 and beyond, whose squares overflow in float64. The batch raises no
    NumPy warning (the row norms are scaled, ``_row_norms``), that start does not converge,
    and the bounded start beside it (a quadratic where x_1 < 0) converges as alone."""
    import warnings

    def f(x):
        return jnp.where(x[0] < 0.0, jnp.sum((x + 2.0) ** 2), -jnp.exp(x[0]) + x[1] ** 2)

    batched = jax.jit(jax.vmap(jax.value_and_grad(f)))
    starts = np.array([[400.0, 1.0], [-1.0, 1.0]])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        res = minimize_lbfgs_batch(batched, starts, max_iterations=100)
    alone = minimize_lbfgs_batch(batched, starts[1:], max_iterations=100)
    assert not res.converged[0] and res.converged[1]
    np.testing.assert_allclose(res.x[1], alone.x[0], atol=1e-12)
    np.testing.assert_allclose(res.x[1], [-2.0, -2.0], atol=1e-6)
