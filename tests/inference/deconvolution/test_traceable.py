"""Issue 14: the deconvolution algorithms traceable over their parameters.

EM, the NPMLE and approximate Gibbs: ``jax.jit(f)`` equals the eager ``f``; ``jax.vmap`` over
a batch of parameters equals a Python loop; ``jax.grad`` equals central finite differences in
float64 (``traceable.check_grads``); and traced arguments skip the value checks (no error, a
non-finite result) while eager calls still refuse bad values. Sizes are small and compiled
functions are shared at module level (mix-SQP alone compiles in about 5 s, twice).
"""

import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
from traceable import (  # noqa: E402
    check_grads,
    has_nan,
    issue14_data,
    leaves_close,
    simplex_direction,
    vmap_vs_loop,
)

from attnbayes import sharding  # noqa: E402
from attnbayes.inference.deconvolution import em, gibbs  # noqa: E402
from attnbayes.inference.deconvolution import kiefer_wolfowitz as kw  # noqa: E402

D, RNG = issue14_data()
X, X2, ATOMS2, C_X, C_X2 = D.X, D.X2, D.ATOMS2, D.C_X, D.C_X2
ONE_DEVICE = sharding.batch_mesh(jax.devices()[:1])  # the plain (unsharded) stream
ATOMS = np.linspace(-2.0, 2.0, 5)
W = np.array([0.1, 0.2, 0.3, 0.25, 0.15])
W4 = np.full(4, 0.25)
SIGMA = 0.8
GRID = np.linspace(X.min(), X.max(), 12)
W_GRID = np.full(12, 1.0 / 12)


# ----------------------------------------------------------------------------- jit == eager
#
# (name, function of array arguments only, the arguments). Each is compiled once here.

JIT_CASES = {
    "fit_em": (lambda x, s: em.fit_em(x, s, max_iters=30), (X, SIGMA)),
    "fit_em-weights-tol": (
        lambda x, s, tol: em.fit_em(x, s, num_atoms=4, update_weights=True, max_iters=30, tol=tol),
        (X, SIGMA, 1e-9),
    ),
    "fit_em-init-2d": (
        lambda x, s, init, w: em.fit_em(x, s, init=init, weights=w, max_iters=20),
        (X2, SIGMA, ATOMS2, W4),
    ),
    "em_step": (
        lambda x, a, w, s: em.em_step(x, a, w, s, update_weights=True),
        (X, ATOMS, W, SIGMA),
    ),
    "posterior_mean": (em.posterior_mean, (X, ATOMS, W, SIGMA)),
    "posterior_mean-streamed": (
        lambda x, a, w, s: em.posterior_mean(x, a, w, s, block_size=4, mesh=ONE_DEVICE),
        (X, ATOMS, W, SIGMA),
    ),
    "posterior": (em.posterior, (X2, ATOMS2, W4, SIGMA)),
    "responsibilities": (em.responsibilities, (X, ATOMS, W, SIGMA)),
    "log_likelihood": (em.log_likelihood, (X, ATOMS, W, SIGMA)),
    "npmle-mixsqp": (lambda x, s, g: kw.npmle(x, s, grid=g), (X, SIGMA, GRID)),
    "npmle-squarem": (
        lambda x, s, g, tol: kw.npmle(x, s, grid=g, method="squarem", tol=tol),
        (X, SIGMA, GRID, 1e-7),
    ),
    "npmle-em": (
        lambda x, s, g: kw.npmle(x, s, grid=g, method="em", max_iters=500),
        (X, SIGMA, GRID),
    ),
    "npmle-2d-default-grid": (
        lambda x, s: kw.npmle(x, s, grid_size=8, method="em", max_iters=300),
        (X2, SIGMA),
    ),
    "npmle_gradient": (kw.npmle_gradient, (X, SIGMA, GRID, W_GRID)),
    "approximate_gibbs": (
        lambda x, s, a, w, eta: gibbs.approximate_gibbs(
            x, s, a, w, num_iters=5, step_size=eta, update_weights=True
        ),
        (X, SIGMA, ATOMS, W, 1.3),
    ),
}
JITTED = {name: jax.jit(fn) for name, (fn, _) in JIT_CASES.items()}


@pytest.mark.parametrize("name", list(JIT_CASES))
def test_jit_equals_eager(name):
    fn, args = JIT_CASES[name]
    with np.errstate(all="ignore"):
        leaves_close(JITTED[name](*args), fn(*args))


def test_results_leave_jit_as_pytrees_of_arrays():
    """fit_em, npmle and approximate_gibbs return arrays only: counts and flags as 0-d arrays."""
    for name in ("fit_em", "npmle-mixsqp", "approximate_gibbs"):
        _, args = JIT_CASES[name]
        result = JITTED[name](*args)
        assert all(isinstance(leaf, jax.Array) for leaf in jax.tree.leaves(result)), name
    fit = JITTED["fit_em"](X, SIGMA)
    assert fit.num_iters.shape == () and jnp.issubdtype(fit.num_iters.dtype, jnp.integer)
    assert fit.converged.shape == () and fit.converged.dtype == bool
    assert fit.log_likelihood_trace.shape == (31,)
    trace = np.asarray(fit.log_likelihood_trace)
    assert np.all(np.isfinite(trace[: int(fit.num_iters) + 1]))
    assert np.all(np.isnan(trace[int(fit.num_iters) + 1 :]))
    result = JITTED["npmle-mixsqp"](X, SIGMA, GRID)
    assert bool(result.converged) and result.kkt_gap.shape == result.log_likelihood.shape == ()
    assert not hasattr(result, "method")


def test_default_grid_under_jit():
    """The traced grid is jnp.linspace (the eager one np.linspace) or the same farthest points."""
    f = jax.jit(kw.default_grid, static_argnums=1)
    np.testing.assert_allclose(f(X, 12), kw.default_grid(X, 12), rtol=0, atol=1e-14)
    np.testing.assert_array_equal(f(X2, 6), kw.default_grid(X2, 6))


def test_npmle_posterior_under_jit():
    fit = kw.npmle(X, SIGMA, grid=GRID)
    f = jax.jit(lambda x, s, r: kw.npmle_posterior(x, s, r, probs=(0.5, 0.9)))
    leaves_close(f(X, SIGMA, fit), kw.npmle_posterior(X, SIGMA, fit, probs=(0.5, 0.9)))


# ----------------------------------------------------------------------------- vmap == loop


SIGMAS = np.array([0.5, 0.8, 1.3])


def test_vmap_posterior_mean_over_sigma():
    vmap_vs_loop(lambda s: em.posterior_mean(X, ATOMS, W, s), SIGMAS)


def test_vmap_fit_em_over_sigma():
    """Each element of the batch stops at its own iteration (its own num_iters)."""
    f = jax.jit(lambda s: em.fit_em(X, s, num_atoms=5, update_weights=True, max_iters=40))
    batched = jax.vmap(f)(jnp.asarray(SIGMAS))
    assert len(set(np.asarray(batched.num_iters).tolist())) > 1
    looped = jax.tree.map(lambda *leaves: jnp.stack(leaves), *[f(s) for s in SIGMAS])
    leaves_close(batched, looped, rtol=1e-10, atol=1e-12)


def test_vmap_npmle_over_sigma():
    """Batched matrix products sum in another order than unbatched ones: round-off level
    differences in the weights (<= 1e-12 here, after 50 SQUAREM cycles) move
    kkt_gap = max_j q_j - 1, a difference of numbers near 1, by as much in absolute terms."""
    vmap_vs_loop(
        lambda s: kw.npmle(X, s, grid=GRID, method="squarem", tol=1e-8), SIGMAS, atol=1e-11
    )


# ----------------------------------------------------------------------------- grad == FD


@pytest.mark.parametrize("block_size", [None, 4])
def test_grad_posterior_mean(block_size):
    """E[z | x] (one attention step) in sigma, the atoms and the weights (simplex direction)."""

    def f(a, w, s):
        return jnp.sum(C_X * em.posterior_mean(X, a, w, s, block_size=block_size, mesh=ONE_DEVICE))

    directions = {0: RNG.normal(size=5), 1: simplex_direction(5, 1), 2: 1.0}
    check_grads(f, (ATOMS, W, SIGMA), directions)


def test_grad_attention_posterior_mean():
    """The E-step as attention (queries x, keys = values = atoms), 2-D, in the same three."""

    def f(a, w, s):
        return jnp.sum(C_X2 * em.e_step_attention(X2, a, w, s).output)

    directions = {0: RNG.normal(size=ATOMS2.shape), 1: simplex_direction(4, 2), 2: 1.0}
    check_grads(f, (ATOMS2, W4, SIGMA), directions)


def test_grad_approximate_gibbs_log_likelihood():
    """The scan is reverse-differentiable: the last log-likelihood in sigma and step size."""

    def f(s, eta):
        trace = gibbs.approximate_gibbs(X, s, ATOMS, W, num_iters=3, step_size=eta)
        return trace.log_likelihood[-1]

    check_grads(f, (SIGMA, 1.2), {0: 1.0, 1: 1.0})


def test_grad_npmle_objective_in_weights():
    """log p(x) in the weights along simplex directions; its gradient / N is npmle_gradient."""
    w = RNG.dirichlet(np.full(12, 2.0))

    def ll(w):
        return em.log_likelihood(X, GRID, w, SIGMA)

    for seed in range(3):
        check_grads(ll, (w,), {0: simplex_direction(12, seed)})
    q = kw.npmle_gradient(X, SIGMA, GRID, w)
    np.testing.assert_allclose(jax.grad(ll)(jnp.asarray(w)) / X.shape[0], q, rtol=1e-12)
    # and npmle_gradient is itself differentiable in the weights (a Hessian-vector product)
    d = simplex_direction(12, 5)
    check_grads(lambda w: jnp.sum(d * kw.npmle_gradient(X, SIGMA, GRID, w)), (w,), {0: d})


# ----------------------------------------------------------------------------- value checks


BAD_X = X.copy()
BAD_X[3] = np.nan
# (compiled case of JIT_CASES, its arguments with one bad value, what the eager error starts
# with); a NaN or inf in the data is propagated as NaN under jit.
BAD_VALUE_CASES = {
    "fit_em-x-nan": ("fit_em", (BAD_X, SIGMA), "^x: "),
    "posterior_mean-x-nan": ("posterior_mean", (BAD_X, ATOMS, W, SIGMA), "^x: "),
    "npmle-x-nan": ("npmle-em", (BAD_X, SIGMA, GRID), "^x: "),
    "approximate_gibbs-x-nan": ("approximate_gibbs", (BAD_X, SIGMA, ATOMS, W, 1.3), "^x: "),
}


@pytest.mark.parametrize("name", list(BAD_VALUE_CASES))
def test_bad_values_raise_eagerly_and_not_under_jit(name):
    case, args, match = BAD_VALUE_CASES[name]
    fn = JIT_CASES[case][0]
    with pytest.raises(ValueError, match=match):
        fn(*args)
    leaves = jax.tree.leaves(JITTED[case](*args))  # tracers: no value check, no error
    assert has_nan(leaves), name
