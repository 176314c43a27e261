"""The switching filters and smoothers are traceable over their parameters (issue 14).

``jax.jit``, ``jax.vmap`` and ``jax.grad`` over ``SwitchingParams`` (and the observations) apply
to the public functions: they validate once at the boundary, running every check on concrete
values and only the static ones (shapes, dtypes) on tracers, never NumPy on a tracer.

1. ``jax.jit(f)(params, y)`` equals ``f(params, y)`` for every filter and smoother.
2. ``jax.vmap`` over a batch of parameters equals a Python loop.
3. ``jax.grad`` of every log-likelihood with respect to every field of ``SwitchingParams``
   equals central finite differences (float64, eps = 1e-5), taken on the unchecked kernels
   along directions that keep covariances symmetric and probability vectors on the simplex.
   Measured agreement is 6e-9 relative at worst; the tolerance is rtol = 1e-6 (FD truncation
   O(eps^2) plus round-off O(1e-16 |f| / eps)).
4. Under tracing, invalid values are not refused (value checks are skipped), shapes still
   are; on concrete values the same ``ValueError`` naming the argument is raised.

Small sizes (T = 10, M = 2, d = 2, o = 1 or 2), shared compiled functions at module level;
``jax.eval_shape`` (tracing without compiling) where only tracing is in question.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from attnbayes.inference.switching import filters, smoothers
from attnbayes.inference.switching.filters import (
    all_histories,
    check_filter_result,
    exact_filter,
    gpb1_filter,
    gpb2_filter,
    imm_filter,
    kalman_filter,
    one_step_log_predictive,
)
from attnbayes.inference.switching.gibbs import switching_gibbs_init, switching_gibbs_step
from attnbayes.inference.switching.kalman import check_inputs, kalman_filter_unchecked
from attnbayes.inference.switching.particle import rbpf
from attnbayes.inference.switching.smoothers import (
    exact_smoother,
    fixed_modes_smoother,
    kalman_smoother,
    kim_smoother,
)
from attnbayes.models.switching import SwitchingParams, check_params, simulate

jax.config.update("jax_enable_x64", True)

T = 10
KEY = jax.random.key(3)


def two_modes(scale: float = 1.0, stay: float = 0.85) -> SwitchingParams:
    """M = 2, d = 2, o = 1: stable, PD covariances with distinct eigenvalues."""
    return SwitchingParams(
        initial_probs=np.array([0.6, 0.4]),
        transition_matrix=np.array([[stay, 1.0 - stay], [0.25, 0.75]]),
        initial_means=np.array([[0.5, -0.2], [-0.3, 0.4]]),
        initial_covs=np.array([[[1.0, 0.3], [0.3, 0.8]], [[0.7, -0.2], [-0.2, 1.2]]]),
        dynamics_matrices=np.array([[[0.9, 0.2], [-0.1, 0.8]], [[0.7, -0.3], [0.25, 0.85]]]),
        dynamics_biases=np.array([[0.1, 0.0], [-0.1, 0.2]]),
        dynamics_covs=scale * np.array([[[0.2, 0.05], [0.05, 0.3]], [[0.4, -0.1], [-0.1, 0.25]]]),
        emission_matrices=np.array([[[1.0, 0.5]], [[0.6, -1.0]]]),
        emission_covs=scale * np.array([[[0.5]], [[0.3]]]),
    )


def one_mode(params: SwitchingParams) -> SwitchingParams:
    fields = {f: np.asarray(v)[:1] for f, v in params._asdict().items() if v is not None}
    return SwitchingParams(**fields)._replace(
        initial_probs=np.ones(1), transition_matrix=np.ones((1, 1))
    )


def isotropic() -> SwitchingParams:
    """M = 2, d = o = 2 with isotropic covariances: every covariance the filters and smoothers
    meet has a repeated eigenvalue (where ``eigh``'s derivative is NaN)."""
    c, s = np.cos(0.3), np.sin(0.3)
    rot = np.array([[c, -s], [s, c]])
    eye = np.eye(2)
    return SwitchingParams(
        initial_probs=np.array([0.5, 0.5]),
        transition_matrix=np.array([[0.9, 0.1], [0.2, 0.8]]),
        initial_means=np.zeros((2, 2)),
        initial_covs=np.stack([eye, 2.0 * eye]),
        dynamics_matrices=np.stack([0.9 * rot, 0.8 * rot.T]),
        dynamics_biases=np.array([[0.1, 0.0], [0.0, -0.1]]),
        dynamics_covs=np.stack([0.2 * eye, 0.5 * eye]),
        emission_matrices=np.stack([eye, eye]),
        emission_covs=np.stack([0.5 * eye, 0.3 * eye]),
    )


# every field given (zero offsets, k = 0 input weights): the kernels take checked params
P2 = check_params("params", two_modes())
P1 = one_mode(P2)
PISO = check_params("params", isotropic())
_, _, _Y = simulate(jax.random.key(1), P2, T)
Y = np.array(_Y)
Y[4] = np.nan  # a missing row
_, _, YISO = simulate(jax.random.key(2), PISO, T)
YISO = np.asarray(YISO)
MODES = np.array([0, 1] * (T // 2))
SHORT = 6  # the exact methods enumerate M^T histories: they run on Y[:SHORT]


def _kim(p, y):
    return kim_smoother(p, y, imm_filter(p, y))


# name -> (public call (params, y) -> a pytree of arrays, the params it takes)
PUBLIC = {
    "kalman_filter": (kalman_filter, P1),
    "gpb1_filter": (gpb1_filter, P2),
    "gpb2_filter": (gpb2_filter, P2),
    "imm_filter": (imm_filter, P2),
    "exact_filter": (lambda p, y: exact_filter(p, y[:SHORT]), P2),
    "one_step_log_predictive": (lambda p, y: one_step_log_predictive(p, y, method="gpb2"), P2),
    "rbpf": (lambda p, y: rbpf(KEY, p, y, 16), P2),
    "kalman_smoother": (kalman_smoother, P1),
    "kim_smoother": (_kim, P2),
    "exact_smoother": (lambda p, y: exact_smoother(p, y[:SHORT]), P2),
    "fixed_modes_smoother": (lambda p, y: fixed_modes_smoother(p, y, MODES), P2),
}
JITTED = {name: jax.jit(call) for name, (call, _) in PUBLIC.items()}


def _assert_trees_close(got, want, rtol=1e-10, atol=1e-10):
    assert jax.tree.structure(got) == jax.tree.structure(want)
    for g, w in zip(jax.tree.leaves(got), jax.tree.leaves(want), strict=True):
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=rtol, atol=atol)


# ----------------------------------------------------------------------------- 1. jit


@pytest.mark.parametrize("name", list(PUBLIC))
def test_jit_equals_eager(name):
    call, params = PUBLIC[name]
    _assert_trees_close(JITTED[name](params, Y), call(params, Y))


def test_jit_over_jax_arrays_and_float32_observations():
    """Device arrays as params, and params cast to the observations' dtype under jit."""
    params = jax.tree.map(jnp.asarray, P2)
    _assert_trees_close(JITTED["imm_filter"](params, Y), imm_filter(P2, Y))
    got = jax.jit(imm_filter)(params, Y.astype(np.float32))
    assert got.log_likelihood.dtype == jnp.float32
    np.testing.assert_allclose(got.log_likelihood, imm_filter(P2, Y).log_likelihood, rtol=1e-4)


# ----------------------------------------------------------------------------- 2. vmap

BATCH = [two_modes(1.0, 0.85), two_modes(0.5, 0.6), two_modes(2.0, 0.95)]
STACKED = jax.tree.map(lambda *a: jnp.stack(a), *BATCH)
VMAPPED = ("imm_filter", "exact_filter", "kim_smoother")


@pytest.mark.parametrize("name", VMAPPED)
def test_vmap_over_params_equals_loop(name):
    call, _ = PUBLIC[name]
    got = jax.vmap(call, in_axes=(0, None))(STACKED, Y)
    want = jax.tree.map(lambda *a: jnp.stack(a), *(call(p, Y) for p in BATCH))
    _assert_trees_close(got, want, rtol=1e-9, atol=1e-9)


def test_vmap_over_params_and_series_of_the_kalman_filter():
    batch = [one_mode(p) for p in BATCH]
    stacked = jax.tree.map(lambda *a: jnp.stack(a), *batch)
    ys = np.stack([Y, Y + 0.5, Y - 1.0])
    got = jax.vmap(kalman_filter)(stacked, ys)
    want = jax.tree.map(
        lambda *a: jnp.stack(a), *(kalman_filter(p, y) for p, y in zip(batch, ys, strict=True))
    )
    _assert_trees_close(got, want, rtol=1e-9, atol=1e-9)
    check_filter_result(got)  # the batched result is finite


# ----------------------------------------------------------------------------- 3. grad

HIST = jnp.asarray(all_histories(2, SHORT))
# unchecked kernels: (params, y) -> the log-likelihood. one_step_log_predictive sums to
# imm_filter_unchecked's and kalman_smoother's is kalman_filter_unchecked's (the same code), so
# they are not repeated here: compiling a gradient is the slow part of this file.
KERNELS = {
    "kalman_filter": (lambda p, y: kalman_filter_unchecked(p, y).log_likelihood, P1),
    "gpb1_filter": (lambda p, y: filters.gpb1_filter_unchecked(p, y).log_likelihood, P2),
    "gpb2_filter": (lambda p, y: filters.gpb2_filter_unchecked(p, y).log_likelihood, P2),
    "imm_filter": (lambda p, y: filters.imm_filter_unchecked(p, y).log_likelihood, P2),
    "exact_filter": (
        lambda p, y: filters.exact_filter_unchecked(p, y[:SHORT], HIST).log_likelihood,
        P2,
    ),
    "exact_smoother": (
        lambda p, y: smoothers.exact_smoother_unchecked(p, y[:SHORT]).log_likelihood,
        P2,
    ),
    "fixed_modes_smoother": (
        lambda p, y: (
            smoothers.fixed_modes_smoother_unchecked(p, y, jnp.asarray(MODES)).log_likelihood
        ),
        P2,
    ),
}
# value and gradient in params and observations, compiled once (also used for the differences)
GRADS = {name: jax.jit(jax.value_and_grad(fn, argnums=(0, 1))) for name, (fn, _) in KERNELS.items()}
EPS = 1e-5
RTOL = 1e-6


def _directions(params: SwitchingParams, seed: int) -> SwitchingParams:
    """A random direction per field that keeps the parameters in the model: zero-sum rows for
    initial_probs and transition_matrix, symmetric matrices for the covariances."""
    rng = np.random.default_rng(seed)
    out = {}
    for field, value in params._asdict().items():
        if value is None:
            continue
        d = rng.normal(size=np.shape(value))
        if field in ("initial_probs", "transition_matrix"):
            d = 0.1 * (d - d.mean(axis=-1, keepdims=True))
        elif field.endswith("covs"):
            d = 0.1 * (d + np.swapaxes(d, -1, -2))
        out[field] = d
    return SwitchingParams(**out)


def _check_gradient(value_and_grad, params, y, seed):
    """For every field, <grad, direction> against the central difference along it."""
    grad = value_and_grad(params, y)[1][0]

    def value(p, y):
        return value_and_grad(p, y)[0]

    dirs = _directions(params, seed)
    for field in SwitchingParams._fields:
        d = getattr(dirs, field)
        base = getattr(params, field)
        plus = value(params._replace(**{field: base + EPS * d}), y)
        minus = value(params._replace(**{field: base - EPS * d}), y)
        fd = float(plus - minus) / (2 * EPS)
        ad = float(jnp.vdot(getattr(grad, field), d))
        assert np.isfinite(ad), field
        np.testing.assert_allclose(ad, fd, rtol=RTOL, atol=1e-9, err_msg=field)


@pytest.mark.parametrize("name", list(KERNELS))
def test_grad_of_log_likelihood_matches_finite_differences(name):
    params = jax.tree.map(jnp.asarray, KERNELS[name][1])
    _check_gradient(GRADS[name], params, Y, seed=len(name))


def test_grad_of_smoothed_moments_at_repeated_eigenvalues():
    """Smoothed moments (through the RTS gain's ``psd_solve``, which every smoother uses) on a
    model whose covariances all have a repeated eigenvalue, where ``eigh``'s derivative is NaN.
    The RTS smoother of one mode keeps the compilation short."""

    def moments(p, y):
        out = smoothers.kalman_smoother_unchecked(p, y)
        return jnp.sum(out.mean * jnp.arange(1.0, 3.0)) + jnp.sum(out.cov)

    params = jax.tree.map(jnp.asarray, one_mode(PISO))
    _check_gradient(jax.jit(jax.value_and_grad(moments, argnums=(0, 1))), params, YISO, seed=1)


def test_public_grad_equals_kernel_grad_and_covers_observations():
    """jax.grad of a public function (params and observations) is its kernel's; every public
    filter and smoother traces under grad (``eval_shape``: traced, not compiled)."""
    params = jax.tree.map(jnp.asarray, P1)
    y = jnp.asarray(np.nan_to_num(Y))

    def public(p, yy):
        return kalman_filter(p, yy).log_likelihood

    got = jax.grad(public, argnums=(0, 1))(params, y)
    want = GRADS["kalman_filter"](params, y)[1]
    _assert_trees_close(got, want, rtol=1e-12, atol=1e-12)
    # the observation gradient along a direction, against central differences
    fn = KERNELS["kalman_filter"][0]
    d = np.random.default_rng(0).normal(size=y.shape)
    fd = (fn(params, y + EPS * d) - fn(params, y - EPS * d)) / (2 * EPS)
    np.testing.assert_allclose(float(jnp.vdot(got[1], d)), float(fd), rtol=RTOL)
    for name, (call, p) in PUBLIC.items():

        def loss(p, yy, call=call, name=name):
            out = call(p, yy)
            return jnp.sum(out) if name == "one_step_log_predictive" else out.log_likelihood

        grads = jax.eval_shape(jax.grad(loss, argnums=(0, 1)), jax.tree.map(jnp.asarray, p), y)
        assert jax.tree.map(jnp.shape, grads[0]) == jax.tree.map(jnp.shape, p), name


# ----------------------------------------------------------------------------- 4. checks


def test_check_params_on_tracers_runs_static_checks_only():
    bad_rows = P2._replace(transition_matrix=np.array([[0.5, 0.7], [0.2, 0.2]]))
    with pytest.raises(ValueError, match=r"^params\.transition_matrix: rows must be"):
        check_params("params", bad_rows)
    # under jit the values are unknown: no value check, no NumPy on the tracers
    out = jax.jit(lambda p: check_params("params", p))(bad_rows)
    np.testing.assert_array_equal(out.transition_matrix, bad_rows.transition_matrix)
    # one traced field: the concrete ones are still value-checked
    bad_cov = P2._replace(emission_covs=-np.ones((2, 1, 1)))
    with pytest.raises(ValueError, match=r"^params\.emission_covs: .* positive semi-definite"):
        jax.grad(lambda t: imm_filter(bad_cov._replace(transition_matrix=t), Y).log_likelihood)(
            jnp.asarray(P2.transition_matrix)
        )
    # static checks run on tracers
    bad_shape = P2._replace(dynamics_matrices=np.zeros((2, 3, 3)))
    with pytest.raises(ValueError, match=r"^params\.dynamics_matrices: expected shape"):
        jax.jit(imm_filter)(bad_shape, Y)
    with pytest.raises(ValueError, match=r"^params\.emission_matrices: expected real numbers"):
        jax.jit(lambda h: imm_filter(P2._replace(emission_matrices=h), Y))(
            jnp.asarray(P2.emission_matrices) + 0j
        )
    with pytest.raises(ValueError, match=r"^observations: expected shape \(T, 1\)"):
        jax.jit(imm_filter)(P2, np.zeros((T, 2)))
    with pytest.raises(ValueError, match=r"^params: expected 1 mode"):
        jax.jit(kalman_filter)(P2, Y)


@pytest.mark.parametrize("name", ["imm_filter", "exact_filter", "rbpf", "kim_smoother"])
def test_invalid_values_raise_eagerly_but_not_under_jit(name):
    call, params = PUBLIC[name]
    bad = params._replace(initial_probs=np.array([0.7, 0.7]))
    with pytest.raises(ValueError, match=r"^params\.initial_probs: must sum to 1"):
        call(bad, Y)
    JITTED[name](bad, Y)  # traced: the value check is skipped, and nothing raises
    inf_y = Y.copy()
    inf_y[0, 0] = np.inf
    with pytest.raises(ValueError, match="^observations: contain"):
        call(params, inf_y)


def test_check_inputs_returns_numpy_when_concrete_and_tracers_when_traced():
    params, obs, _ = check_inputs(P2, Y)
    assert all(isinstance(a, np.ndarray) for a in (*params, obs))

    def traced(p, y):
        params, obs, _ = check_inputs(p, y)
        assert all(isinstance(a, jax.core.Tracer) for a in (*params, obs))
        return obs

    jax.jit(traced)(P2, Y)


def test_rbpf_traces_over_key_params_and_ess_threshold():
    """Traced (not compiled: ``eval_shape``) over a batch of keys, parameters and thresholds."""
    out = jax.eval_shape(
        jax.vmap(lambda k, p, e: rbpf(k, p, Y, 16, ess_threshold=e)),
        jax.random.split(KEY, 3),
        STACKED,
        jnp.array([0.0, 0.5, 1.0]),
    )
    assert out.means.shape == (3, T, 2, 2) and out.log_likelihood.shape == (3,)


def test_gibbs_kernel_traces_over_params():
    """The Gibbs kernel's public init and step trace over the parameters and the initial modes
    (``eval_shape``: traced, not compiled; not differentiable: the draws are random)."""

    def run(p, key, modes):
        k1, k2 = jax.random.split(key)
        state = switching_gibbs_init(k1, p, Y, modes=modes)
        return switching_gibbs_step(k2, state, p, Y)

    state, info = jax.eval_shape(jax.vmap(run, (0, None, None)), STACKED, KEY, jnp.asarray(MODES))
    assert state.states.shape == (3, T, 2) and info.num_mode_changes.shape == (3,)
    with pytest.raises(ValueError, match=r"^modes: expected shape \(10,\)"):
        jax.eval_shape(run, P2, KEY, jnp.zeros(3, jnp.int32))
