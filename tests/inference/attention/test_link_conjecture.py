"""The link-function conjecture (the note "Attention as approximate message passing", eq. (15)
and section 4.1) for the Poisson family: exact attention against scipy.stats.poisson and
Robbins' formula, the fitted linear link, and the skip connection as gradient ascent."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

from attnbayes.inference.attention.link_conjecture import (
    LinearLink,
    fit_linear_link,
    link_kl,
    normaliser_blowup,
    poisson_key_weights,
    poisson_posterior_mean,
    skip_connection_iteration,
)

NARROW = np.geomspace(0.5, 2.0, 40)
WIDE = np.geomspace(0.1, 100.0, 40)
MAX_COUNT = 220  # one compiled fit for both ranges (the wide range's default is 210)
LINK = LinearLink(0.25, 0.5, -1.0, 0.0)  # a hand-made linear link: a = 0.25, b = 0.5
DEPTH = 300


@pytest.fixture(scope="module")
def narrow_fit():
    return fit_linear_link(NARROW, max_count=MAX_COUNT)


@pytest.fixture(scope="module")
def wide_fit():
    return fit_linear_link(WIDE, max_count=MAX_COUNT)


# ----------------------------------------------------------------------------- exact attention


def _brute_posterior(counts, rates, weights):
    joint = stats.poisson.pmf(np.asarray(counts)[:, None], rates[None, :]) * weights[None, :]
    return joint / joint.sum(axis=1, keepdims=True), joint.sum(axis=1)


def test_key_weights_are_the_poisson_posterior():
    rng = np.random.default_rng(0)
    rates = np.geomspace(0.3, 12.0, 9)
    weights = rng.dirichlet(np.ones(9))
    counts = np.array([0, 1, 3, 7, 15, 30])
    got = np.asarray(poisson_key_weights(counts, rates, np.log(weights) + 3.0))
    want, _ = _brute_posterior(counts, rates, weights)
    assert got.shape == (6, 9)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-300)
    uniform = np.asarray(poisson_key_weights(counts, rates))
    np.testing.assert_allclose(uniform, _brute_posterior(counts, rates, np.ones(9))[0], rtol=1e-12)


def test_posterior_mean_is_robbins_formula():
    rng = np.random.default_rng(1)
    rates = np.geomspace(0.5, 20.0, 12)
    weights = rng.dirichlet(np.ones(12))
    counts = np.arange(0, 25)
    got = np.asarray(poisson_posterior_mean(counts, rates, np.log(weights)))
    post, _ = _brute_posterior(counts, rates, weights)
    np.testing.assert_allclose(got, post @ rates, rtol=1e-12)
    # Robbins (1956): E[lambda | y] = (y + 1) p(y + 1) / p(y), p the marginal of the counts
    _, marginal = _brute_posterior(np.arange(0, 26), rates, weights)
    np.testing.assert_allclose(got, (counts + 1) * marginal[1:] / marginal[:-1], rtol=1e-11)


# ----------------------------------------------------------------------------- the linear link


@jax.jit
def _expected_kl(theta, counts, rates, count_weights):
    return jnp.dot(count_weights, link_kl(theta, counts, rates))


_expected_kl_grad = jax.jit(jax.grad(_expected_kl))


def test_fit_lowers_the_kl_and_is_a_stationary_point(narrow_fit, wide_fit):
    for fit, rates in ((narrow_fit, NARROW), (wide_fit, WIDE)):
        assert bool(fit.converged)
        assert fit.mean_kl < fit.start_kl and fit.mean_kl < fit.identity_kl
        # link_kl agrees with the fit's own per-count KL, and averages to mean_kl
        counts = np.asarray(fit.counts)
        per_count = np.asarray(link_kl(fit, counts, rates))
        np.testing.assert_allclose(per_count, fit.kl_per_count, rtol=1e-10, atol=1e-16)
        np.testing.assert_allclose(per_count @ np.asarray(fit.count_weights), fit.mean_kl)
        # uniform prior: the per-rate KL averages to the mean (truncation ~1e-25 here)
        np.testing.assert_allclose(np.mean(fit.kl_per_rate), fit.mean_kl, rtol=1e-10)
        assert fit.truncated_mass < 1e-15

        theta = jnp.stack([fit.link.key_slope, fit.link.bias_slope])
        args = (counts, rates, fit.count_weights)
        assert np.max(np.abs(_expected_kl_grad(theta, *args))) < 1e-8
        # nudging (a, c) only raises the KL
        nudged = theta + jnp.array([[1e-3, 0.0], [0.0, 1e-3], [-1e-3, 1e-3], [0.0, -1e-3]])
        values = jax.vmap(_expected_kl, in_axes=(0, None, None, None))(nudged, *args)
        assert np.all(np.asarray(values) > fit.mean_kl)


def test_narrow_range_is_near_linear_and_wide_range_is_not(narrow_fit, wide_fit):
    # measured: 5.16e-3 nats on [0.5, 2], 1.028 on [0.1, 100] (40 geometric rates, uniform)
    assert narrow_fit.mean_kl < 6e-3
    assert wide_fit.mean_kl > 1.0
    assert wide_fit.mean_kl > 150 * narrow_fit.mean_kl
    # the identity surrogate (key = lambda) is the naive reference: 0.011 and 642 nats
    assert narrow_fit.identity_kl > 2 * narrow_fit.mean_kl
    assert wide_fit.identity_kl > 500 * wide_fit.mean_kl
    # the key's shape against log lambda after the best affine alignment: 0.11 vs 0.36
    narrow_err = np.max(np.abs(narrow_fit.affine_relative_error))
    wide_err = np.max(np.abs(wide_fit.affine_relative_error))
    assert narrow_err < 0.12 and wide_err > 0.35


def test_key_and_bias_offsets_cancel(narrow_fit):
    counts = np.arange(MAX_COUNT + 1)
    a, c = float(narrow_fit.link.key_slope), float(narrow_fit.link.bias_slope)
    base = np.asarray(link_kl(np.array([a, c]), counts, NARROW))
    shifted = np.asarray(link_kl(np.array([a, 7.0, c, -3.0]), counts, NARROW))
    np.testing.assert_allclose(shifted, base, rtol=1e-9, atol=1e-15)
    # the exact key (log lambda) would give zero KL; the fitted linear one does not
    assert np.all(base >= 0) and base.max() > 0


# ----------------------------------------------------------------------------- skip connection


COUNTS = np.array([1.0, 4.0, 10.0])
ETA0 = np.log(COUNTS) + 1.0  # one nat above the answer


def _loglik(link):
    if link == "exact":
        return lambda eta, y: y * eta - jnp.exp(eta)
    a, b = LINK.key_slope, LINK.key_offset
    return lambda eta, y: y * eta - (eta - b) ** 2 / (2 * a)


@pytest.mark.parametrize("link", ["exact", "linear"])
def test_skip_update_is_gradient_ascent(link):
    counts = np.array([0.0, 4.0, 10.0])  # y = 0 too: eta decreases without end (MLE at -inf)
    trace = skip_connection_iteration(counts, ETA0, 0.1, DEPTH, link=link, linear_params=LINK)
    assert trace.eta.shape == (DEPTH + 1, 3)
    grad = jax.vmap(jax.vmap(jax.grad(_loglik(link)), in_axes=(0, 0)), in_axes=(0, None))
    want = trace.eta[:-1] + 0.1 * grad(trace.eta[:-1], jnp.asarray(counts))
    np.testing.assert_allclose(trace.eta[1:], want, rtol=1e-14, atol=1e-15)


def test_exact_iteration_converges_iff_step_times_count_below_two():
    stable = skip_connection_iteration(COUNTS, ETA0, 0.15, DEPTH)  # r = 0.15, 0.6, 1.5
    np.testing.assert_allclose(stable.eta[-1], np.log(COUNTS), atol=1e-12)
    np.testing.assert_allclose(stable.log_ratio[-1], 0.0, atol=1e-12)
    unstable = skip_connection_iteration(COUNTS, ETA0, 0.3, DEPTH)  # r = 0.3, 1.2, 3.0
    tail = np.abs(np.asarray(unstable.log_ratio[-50:]))
    assert tail[:, :2].max() < 1e-12  # r < 2 still converges
    assert tail[:, 2].min() > 0.1 or tail[:, 2].max() > 1.0  # r = 3: no convergence
    # the Ricker map x <- x exp(r (1 - x)): A(eta) / y <= exp(r - 1) / r after the first step
    r = 0.3 * COUNTS
    assert np.all(np.asarray(unstable.log_ratio[1:]) <= r - 1 - np.log(r) + 1e-12)


def test_linear_iteration_converges_to_a_y_plus_b_iff_step_over_a_below_two():
    a, b = LINK.key_slope, LINK.key_offset
    fixed = a * COUNTS + b

    def run(step):
        return skip_connection_iteration(
            COUNTS, ETA0, step, DEPTH, link="linear", linear_params=LINK
        )

    stable = run(0.4)
    np.testing.assert_allclose(stable.fixed_point, fixed)
    np.testing.assert_allclose(stable.eta[-1], fixed, atol=1e-12)
    np.testing.assert_allclose(stable.log_ratio[-1], fixed - np.log(COUNTS), atol=1e-12)
    # step / a = 2.4: the error is multiplied by 1 - step / a = -1.4 at every step
    err = np.asarray(run(0.6).eta) - fixed
    np.testing.assert_allclose(err[1:], -1.4 * err[:-1], rtol=1e-9)
    assert np.all(np.abs(err[-1]) > 1e40)


def test_normaliser_blowup_table():
    counts = np.array([1, 2, 5, 10, 40])
    steps = np.array([0.05, 0.3, 0.6])
    table = normaliser_blowup(counts, steps, [1, 10, DEPTH], linear_params=LINK)
    assert table.exact_log_ratio.shape == table.linear_log_ratio.shape == (3, 5, 3)
    assert table.exact_first_depth.shape == (3, 5)
    r = steps[:, None] * counts[None, :]
    np.testing.assert_array_equal(table.exact_stable, r < 2)
    np.testing.assert_array_equal(table.linear_stable, steps / LINK.key_slope < 2)
    # exact: the Ricker bound below log 10 means never; the converged ones end at 0
    bound = r - 1 - np.log(r)
    first = np.asarray(table.exact_first_depth)
    assert np.all(first[bound < np.log(10)] == -1) and np.all(first[bound > 3.0] > 0)
    converged = (r > 0.1) & (r < 1.8)
    np.testing.assert_allclose(np.asarray(table.exact_log_ratio)[converged][:, -1], 0.0, atol=1e-9)
    # linear, stable step (0.05, 0.3 < 2a = 0.5): the limit a y + b - log y (> log 10 at y = 40)
    limit = LINK.key_slope * counts + LINK.key_offset - np.log(counts)
    np.testing.assert_allclose(table.linear_limit, limit)
    np.testing.assert_allclose(table.linear_log_ratio[1, :, -1], limit, atol=1e-10)
    lin_first = np.asarray(table.linear_first_depth)
    np.testing.assert_array_equal(lin_first[:2] > 0, np.broadcast_to(limit > np.log(10), (2, 5)))
    # linear, step 0.6 > 2a: geometric blow-up at every count, within a few layers
    assert np.all((lin_first[2] > 0) & (lin_first[2] <= 10))


def test_skip_iteration_under_jit_vmap_and_grad():
    eager = skip_connection_iteration(COUNTS, ETA0, 0.15, DEPTH)
    jitted = jax.jit(skip_connection_iteration, static_argnames=("depth", "link"))
    np.testing.assert_allclose(jitted(COUNTS, ETA0, 0.15, DEPTH).eta, eager.eta, rtol=1e-14)
    steps = jnp.array([0.1, 0.15])
    batched = jax.vmap(lambda s: skip_connection_iteration(COUNTS, ETA0, s, DEPTH).eta)(steps)
    np.testing.assert_allclose(batched[1], eager.eta, rtol=1e-14)

    def final(y, eta0):
        return jnp.sum(skip_connection_iteration(y, eta0, 0.15, DEPTH).eta[-1])

    # at convergence eta_L = log y: d eta_L / d y = 1 / y, and the start is forgotten
    d_counts, d_start = jax.grad(final, argnums=(0, 1))(jnp.asarray(COUNTS), jnp.asarray(ETA0))
    np.testing.assert_allclose(d_counts, 1 / COUNTS, rtol=1e-10)
    assert np.max(np.abs(d_start)) < 1e-12


# ----------------------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    ("call", "name"),
    [
        (lambda: poisson_key_weights([1, -1], [1.0, 2.0]), "counts"),
        (lambda: poisson_key_weights([1.5], [1.0, 2.0]), "counts"),
        (lambda: poisson_key_weights([1, np.nan], [1.0, 2.0]), "counts"),
        (lambda: poisson_key_weights([1], [0.0, 2.0]), "rates"),
        (lambda: poisson_key_weights([1], [np.inf, 2.0]), "rates"),
        (lambda: poisson_key_weights([1], [1.0, 2.0], [0.0]), "log_weights"),
        (lambda: link_kl([1.0, 2.0, 3.0], [1], [1.0, 2.0]), "params"),
        (lambda: fit_linear_link([2.0, 2.0]), "rates"),
        (lambda: fit_linear_link([1.0, 2.0], max_count=0), "max_count"),
        (lambda: skip_connection_iteration([1.0], 0.0, 0.0, 5), "step"),
        (lambda: skip_connection_iteration([1.0], 0.0, 0.1, 0), "depth"),
        (lambda: skip_connection_iteration([1.0], 0.0, 0.1, 2.0), "depth"),
        (lambda: skip_connection_iteration([1.0], 0.0, 0.1, 5, link="log"), "link"),
        (lambda: skip_connection_iteration([1.0], 0.0, 0.1, 5, link="linear"), "linear_params"),
        (lambda: skip_connection_iteration([1.0, 2.0], [0.0] * 3, 0.1, 5), "eta0"),
        (lambda: normaliser_blowup([0, 1], [0.1], [5], linear_params=LINK), "counts"),
        (lambda: normaliser_blowup([1], [-0.1], [5], linear_params=LINK), "steps"),
        (lambda: normaliser_blowup([1], [0.1], [0], linear_params=LINK), "depths"),
        (lambda: normaliser_blowup([1], [0.1], [5], linear_params=[-1.0, 1.0]), "linear_params"),
    ],
)
def test_bad_input_names_the_argument(call, name):
    with pytest.raises(ValueError, match=f"^{name}:"):
        call()
