"""Issue 14: every algorithm traceable over its parameters.

For deconvolution (EM, NPMLE, approximate Gibbs), attention (weight maps, ``attend``) and
Nadaraya-Watson: ``jax.jit(f)`` equals the eager ``f``; ``jax.vmap`` over a batch of parameters
equals a Python loop; ``jax.grad`` equals central finite differences in float64; and traced
arguments skip the value checks (no error, a non-finite result) while eager calls still refuse
bad values.

Finite differences: directional derivatives (f(x + e d) - f(x - e d)) / (2 e) with
e = 1e-6 * max(1, |x|), compared as |grad . d - fd| <= 1e-6 |fd| + 1e-8 (1 + |f(x)|): the
truncation error is O(e^2) and the rounding error about 1e-16 |f| / e = 1e-10 |f|, both well
inside. Sizes are small and compiled functions are shared at module level: the file costs about
a minute of CPU time, most of it XLA compiling (mix-SQP alone about 5 s, twice).
"""

import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

from attnbayes.inference import attention as at  # noqa: E402
from attnbayes.inference import kernel_regression as kr  # noqa: E402
from attnbayes.inference.deconvolution import em, gibbs  # noqa: E402
from attnbayes.inference.deconvolution import kiefer_wolfowitz as kw  # noqa: E402

RNG = np.random.default_rng(14)
X = RNG.normal(size=16) * 1.5
X2 = RNG.normal(size=(10, 2))
ATOMS = np.linspace(-2.0, 2.0, 5)
ATOMS2 = RNG.normal(size=(4, 2))
W = np.array([0.1, 0.2, 0.3, 0.25, 0.15])
W4 = np.full(4, 0.25)
SIGMA = 0.8
GRID = np.linspace(X.min(), X.max(), 12)
W_GRID = np.full(12, 1.0 / 12)
QUERIES = RNG.normal(size=(4, 3))
KEYS = RNG.normal(size=(6, 3))
VALUES = RNG.normal(size=(6, 2))
SCORES = RNG.normal(size=(3, 6)) * 2.0
KR_KEYS = np.sort(RNG.uniform(-2, 2, size=14))
KR_VALUES = np.sin(KR_KEYS) + 0.1 * RNG.normal(size=14)
KR_QUERIES = np.linspace(-1.5, 1.5, 5)


def _leaves_close(a, b, rtol=1e-12, atol=1e-12):
    """Same pytree structure, every leaf a JAX array (from the jit) or array, equal to tolerance."""
    la, ta = jax.tree.flatten(a)
    lb, tb = jax.tree.flatten(b)
    assert ta == tb
    for x, y in zip(la, lb, strict=True):
        x, y = np.asarray(x), np.asarray(y)
        assert x.shape == y.shape and x.dtype == y.dtype
        if x.dtype == bool or np.issubdtype(x.dtype, np.integer):
            np.testing.assert_array_equal(x, y)
        else:
            np.testing.assert_allclose(x, y, rtol=rtol, atol=atol, equal_nan=True)


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
        lambda x, a, w, s: em.posterior_mean(x, a, w, s, block_size=4, num_devices=1),
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
    "softmax": (lambda s, t: at.softmax(s, temperature=t), (SCORES, 0.7)),
    "sparsemax": (lambda s, t: at.sparsemax(s, axis=0, temperature=t), (SCORES, 0.7)),
    "entmax15": (lambda s, t: at.entmax15(s, temperature=t), (SCORES, 0.7)),
    "entmax_bisect": (lambda s, a, t: at.entmax_bisect(s, a, temperature=t), (SCORES, 1.7, 0.7)),
    "regularised_argmax-tsallis": (
        lambda s, a: at.regularised_argmax(s, "tsallis", a),
        (SCORES, 1.7),
    ),
    "nadaraya_watson": (
        lambda k, v, q, h: kr.nadaraya_watson(k, v, q, bandwidth=h),
        (KR_KEYS, KR_VALUES, KR_QUERIES, 0.4),
    ),
    "nadaraya_watson-epanechnikov-streamed": (
        lambda k, v, q, h: kr.nadaraya_watson(
            k, v, q, kernel="epanechnikov", bandwidth=h, block_size=4
        ),
        (KR_KEYS, KR_VALUES, KR_QUERIES, 0.6),
    ),
    "kernel_scores": (
        lambda q, k, h: kr.kernel_scores(q, k, kernel="tricube", bandwidth=h),
        (KR_QUERIES, KR_KEYS, 0.5),
    ),
    "leave_one_out": (
        lambda k, v, h: kr.leave_one_out(k, v, bandwidth=h),
        (KR_KEYS, KR_VALUES, 0.4),
    ),
}
for _weights in at.WEIGHT_MAPS:
    JIT_CASES[f"attend-{_weights}"] = (
        lambda q, k, v, t, sc, w=_weights: at.attend(q, k, v, weights=w, temperature=t, scale=sc),
        (QUERIES, KEYS, VALUES, 0.8, 0.6),
    )
JIT_CASES["attend-softmax-streamed"] = (
    lambda q, k, v, t: at.attend(q, k, v, temperature=t, block_size=4),
    (QUERIES, KEYS, VALUES, 0.8),
)
JITTED = {name: jax.jit(fn) for name, (fn, _) in JIT_CASES.items()}


@pytest.mark.parametrize("name", list(JIT_CASES))
def test_jit_equals_eager(name):
    fn, args = JIT_CASES[name]
    with np.errstate(all="ignore"):
        _leaves_close(JITTED[name](*args), fn(*args))


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
    _leaves_close(f(X, SIGMA, fit), kw.npmle_posterior(X, SIGMA, fit, probs=(0.5, 0.9)))


# ----------------------------------------------------------------------------- vmap == loop


def _vmap_vs_loop(f, batch, atol=1e-12):
    batched = jax.vmap(f)(jnp.asarray(batch))
    looped = jax.tree.map(lambda *leaves: jnp.stack(leaves), *[f(b) for b in batch])
    _leaves_close(batched, looped, rtol=1e-10, atol=atol)


SIGMAS = np.array([0.5, 0.8, 1.3])


def test_vmap_posterior_mean_over_sigma():
    _vmap_vs_loop(lambda s: em.posterior_mean(X, ATOMS, W, s), SIGMAS)


def test_vmap_fit_em_over_sigma():
    """Each element of the batch stops at its own iteration (its own num_iters)."""
    f = jax.jit(lambda s: em.fit_em(X, s, num_atoms=5, update_weights=True, max_iters=40))
    batched = jax.vmap(f)(jnp.asarray(SIGMAS))
    assert len(set(np.asarray(batched.num_iters).tolist())) > 1
    looped = jax.tree.map(lambda *leaves: jnp.stack(leaves), *[f(s) for s in SIGMAS])
    _leaves_close(batched, looped, rtol=1e-10, atol=1e-12)


def test_vmap_npmle_over_sigma():
    """Batched matrix products sum in another order than unbatched ones: round-off level
    differences in the weights (<= 1e-12 here, after 50 SQUAREM cycles) move
    kkt_gap = max_j q_j - 1, a difference of numbers near 1, by as much in absolute terms."""
    _vmap_vs_loop(
        lambda s: kw.npmle(X, s, grid=GRID, method="squarem", tol=1e-8), SIGMAS, atol=1e-11
    )


def test_vmap_nadaraya_watson_over_bandwidth():
    _vmap_vs_loop(
        lambda h: kr.nadaraya_watson(KR_KEYS, KR_VALUES, KR_QUERIES, bandwidth=h),
        np.array([0.2, 0.4, 1.0]),
    )


def test_vmap_entmax_bisect_over_alpha():
    _vmap_vs_loop(lambda a: at.entmax_bisect(SCORES, a), np.array([1.2, 1.5, 2.0, 3.0]))


def test_vmap_attend_over_temperature():
    for weights in ("softmax", "entmax15"):
        _vmap_vs_loop(
            lambda t, w=weights: at.attend(QUERIES, KEYS, VALUES, weights=w, temperature=t),
            np.array([0.3, 1.0, 2.5]),
        )


# ----------------------------------------------------------------------------- grad == FD


_COMPILED = {}


def _check_grads(f, args, directions):
    """grad f . d against central differences for each {argnum: direction d}.

    ``f`` and its gradient in those arguments are compiled once per (f, argnums) and kept
    (pass module-level functions to share them between tests); the tolerance is the module
    docstring's.
    """
    key = (f, tuple(directions))
    if key not in _COMPILED:
        _COMPILED[key] = (jax.jit(f), jax.jit(jax.grad(f, argnums=tuple(directions))))
    value, grad_fn = _COMPILED[key]
    grads = grad_fn(*args)
    f0 = float(value(*args))
    for (i, direction), grad in zip(directions.items(), grads, strict=True):
        x0 = np.asarray(args[i], np.float64)
        d = np.asarray(direction, np.float64)
        eps = 1e-6 * max(1.0, float(np.max(np.abs(x0))))
        plus, minus = list(args), list(args)
        plus[i], minus[i] = x0 + eps * d, x0 - eps * d
        fd = (float(value(*plus)) - float(value(*minus))) / (2 * eps)
        analytic = float(jnp.sum(grad * d))
        assert abs(analytic - fd) <= 1e-6 * abs(fd) + 1e-8 * (1 + abs(f0)), (i, analytic, fd)


def _simplex_direction(k, seed):
    d = np.random.default_rng(seed).normal(size=k)
    return d - d.mean()


C_X = RNG.normal(size=X.shape)  # fixed linear functionals of vector outputs
C_X2 = RNG.normal(size=X2.shape)


@pytest.mark.parametrize("block_size", [None, 4])
def test_grad_posterior_mean(block_size):
    """E[z | x] (one attention step) in sigma, the atoms and the weights (simplex direction)."""

    def f(a, w, s):
        return jnp.sum(C_X * em.posterior_mean(X, a, w, s, block_size=block_size, num_devices=1))

    directions = {0: RNG.normal(size=5), 1: _simplex_direction(5, 1), 2: 1.0}
    _check_grads(f, (ATOMS, W, SIGMA), directions)


def test_grad_attention_posterior_mean():
    """The E-step as attention (queries x, keys = values = atoms), 2-D, in the same three."""

    def f(a, w, s):
        return jnp.sum(C_X2 * em.e_step_attention(X2, a, w, s).output)

    directions = {0: RNG.normal(size=ATOMS2.shape), 1: _simplex_direction(4, 2), 2: 1.0}
    _check_grads(f, (ATOMS2, W4, SIGMA), directions)


def test_grad_approximate_gibbs_log_likelihood():
    """The scan is reverse-differentiable: the last log-likelihood in sigma and step size."""

    def f(s, eta):
        trace = gibbs.approximate_gibbs(X, s, ATOMS, W, num_iters=3, step_size=eta)
        return trace.log_likelihood[-1]

    _check_grads(f, (SIGMA, 1.2), {0: 1.0, 1: 1.0})


def test_grad_npmle_objective_in_weights():
    """log p(x) in the weights along simplex directions; its gradient / N is npmle_gradient."""
    w = RNG.dirichlet(np.full(12, 2.0))

    def ll(w):
        return em.log_likelihood(X, GRID, w, SIGMA)

    for seed in range(3):
        _check_grads(ll, (w,), {0: _simplex_direction(12, seed)})
    q = kw.npmle_gradient(X, SIGMA, GRID, w)
    np.testing.assert_allclose(jax.grad(ll)(jnp.asarray(w)) / X.shape[0], q, rtol=1e-12)
    # and npmle_gradient is itself differentiable in the weights (a Hessian-vector product)
    d = _simplex_direction(12, 5)
    _check_grads(lambda w: jnp.sum(d * kw.npmle_gradient(X, SIGMA, GRID, w)), (w,), {0: d})


def test_grad_kernel_regression_in_bandwidth():
    """Nadaraya-Watson (Gaussian kernel) and the leave-one-out CV(h), dense, in h."""
    c = RNG.normal(size=KR_QUERIES.shape)

    def f(h_nw, h_loo):
        nw = kr.nadaraya_watson(KR_KEYS, KR_VALUES, KR_QUERIES, bandwidth=h_nw)
        return jnp.sum(c * nw) + kr.leave_one_out(KR_KEYS, KR_VALUES, bandwidth=h_loo).score

    _check_grads(f, (0.4, 0.4), {0: 1.0, 1: 1.0})


C_SCORES = RNG.normal(size=SCORES.shape)


def _entmax_objective(a, t):
    return jnp.sum(C_SCORES * at.entmax_bisect(SCORES, a)) + jnp.sum(
        C_SCORES * at.regularised_argmax(SCORES, "tsallis", a, temperature=t)
    )


@pytest.mark.parametrize("alpha", [1.3, 1.5, 2.0, 2.6])
def test_grad_entmax_bisect_in_alpha(alpha):
    """Away from support changes (the support is the same at alpha +- eps)."""
    eps = 1e-6 * alpha
    for temperature in (1.0, 0.6):
        supports = [
            np.asarray(at.entmax_bisect(SCORES, a, temperature=temperature)) > 0
            for a in (alpha - eps, alpha + eps)
        ]
        np.testing.assert_array_equal(*supports)
    _check_grads(_entmax_objective, (alpha, 0.6), {0: 1.0, 1: 1.0})


C_OUT = RNG.normal(size=(QUERIES.shape[0], VALUES.shape[1]))
ATTEND_OBJECTIVES = {
    weights: lambda q, k, v, t, w=weights: jnp.sum(
        C_OUT * at.attend(q, k, v, weights=w, temperature=t)
    )
    for weights in at.WEIGHT_MAPS
}


@pytest.mark.parametrize("weights", at.WEIGHT_MAPS)
def test_grad_attend(weights):
    """attend's output in queries, keys, values and temperature (directional derivatives)."""
    directions = {i: RNG.normal(size=a.shape) for i, a in enumerate((QUERIES, KEYS, VALUES))}
    _check_grads(ATTEND_OBJECTIVES[weights], (QUERIES, KEYS, VALUES, 0.8), {**directions, 3: 1.0})


# ----------------------------------------------------------------------------- value checks


BAD_X = X.copy()
BAD_X[3] = np.nan
BAD_QUERIES = np.where(QUERIES > 1.0, np.nan, QUERIES)
# (compiled case of JIT_CASES, its arguments with one bad value, what the eager error starts
# with); a NaN or inf in the data is propagated as NaN under jit, and so is an alpha <= 1.
BAD_VALUE_CASES = {
    "fit_em-x-nan": ("fit_em", (BAD_X, SIGMA), "^x: "),
    "posterior_mean-x-nan": ("posterior_mean", (BAD_X, ATOMS, W, SIGMA), "^x: "),
    "npmle-x-nan": ("npmle-em", (BAD_X, SIGMA, GRID), "^x: "),
    "approximate_gibbs-x-nan": ("approximate_gibbs", (BAD_X, SIGMA, ATOMS, W, 1.3), "^x: "),
    "entmax_bisect-alpha": ("entmax_bisect", (SCORES, 0.5, 0.7), "^alpha: "),
    "attend-sparsemax-queries-nan": (
        "attend-sparsemax",
        (BAD_QUERIES, KEYS, VALUES, 0.8, 0.6),
        "^queries: ",
    ),
    "nadaraya_watson-bandwidth": (
        "nadaraya_watson",
        (KR_KEYS, KR_VALUES, KR_QUERIES, -0.5),
        "^bandwidth: ",
    ),
}


@pytest.mark.parametrize("name", list(BAD_VALUE_CASES))
def test_bad_values_raise_eagerly_and_not_under_jit(name):
    case, args, match = BAD_VALUE_CASES[name]
    fn = JIT_CASES[case][0]
    with pytest.raises(ValueError, match=match):
        fn(*args)
    leaves = jax.tree.leaves(JITTED[case](*args))  # tracers: no value check, no error
    if name == "nadaraya_watson-bandwidth":  # h enters as 1 / h^2: a negative h is mirrored
        np.testing.assert_allclose(leaves[0], JITTED[case](*args[:3], 0.5), rtol=1e-14)
    else:
        out = np.concatenate(
            [np.ravel(leaf) for leaf in leaves if jnp.issubdtype(leaf.dtype, jnp.floating)]
        )
        assert np.isnan(out).any(), name
