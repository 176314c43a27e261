"""The normal-prior baselines for heteroscedastic data (``shrinkage``): the normal hierarchical
model by marginal ML against SciPy and on eight schools (tau = 0 at the boundary), SURE against
a brute-force grid and a Monte-Carlo risk, monotone SURE against a convex solve, James-Stein
against its projection form and Stein's identity, traceability, and the refused inputs."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from eight_schools import SCHOOLS_SIGMA, SCHOOLS_Y
from raising import check_refused
from scipy import optimize, stats

from attnbayes.inference.deconvolution import shrinkage
from attnbayes.inference.deconvolution.shrinkage import (
    james_stein,
    normal_eb,
    sure_monotone,
    sure_shrinkage,
)


def _heteroscedastic(seed, n=40, spread=2.0):
    rng = np.random.default_rng(seed)
    s = np.exp(rng.uniform(np.log(0.5), np.log(3.0), n))
    theta = rng.normal(1.0, spread, n)
    return theta + s * rng.normal(size=n), s, theta


def _neg_marginal(params, x, s):
    mu, log_tau = params
    return -np.sum(stats.norm.logpdf(x, mu, np.sqrt(np.exp(2 * log_tau) + s**2)))


def test_eight_schools_from_arviz_and_the_boundary():
    """ArviZ's centered_eight holds the data; the marginal MLE of tau is 0 (complete pooling)
    and mu_hat is the precision-weighted mean, 7.69, with standard error (sum 1/s^2)^-1/2."""
    az = pytest.importorskip("arviz_base")
    data = az.load_arviz_data("centered_eight")
    y = data.observed_data["obs"].values
    sigma = data.constant_data["sigma"].values
    np.testing.assert_array_equal(y, SCHOOLS_Y)
    np.testing.assert_array_equal(sigma, SCHOOLS_SIGMA)
    fit = normal_eb(y, sigma)
    w = 1.0 / sigma**2
    mu = np.sum(w * y) / np.sum(w)
    assert mu == pytest.approx(7.6856, abs=1e-4)
    assert float(fit.prior_variance) == 0.0 and bool(fit.at_boundary)
    assert float(fit.location) == pytest.approx(mu, rel=1e-12)
    assert float(fit.location_se) == pytest.approx(np.sum(w) ** -0.5, rel=1e-12)
    np.testing.assert_allclose(fit.z_hat, mu, rtol=1e-12)
    np.testing.assert_array_equal(fit.posterior_sd, 0.0)
    np.testing.assert_array_equal(fit.shrinkage, 1.0)
    assert float(fit.log_likelihood) == pytest.approx(
        stats.norm.logpdf(y, mu, sigma).sum(), rel=1e-12
    )
    # the profile score in tau^2 at 0 is negative: the maximum is on the boundary, not near it
    assert np.sum(w**2 * ((y - mu) ** 2 - sigma**2)) < 0


def test_normal_eb_matches_scipy_on_the_unprofiled_likelihood():
    x, s, _ = _heteroscedastic(1)
    fit = normal_eb(x, s)
    best = optimize.minimize(
        _neg_marginal, [np.mean(x), 0.0], args=(x, s), method="Nelder-Mead",
        options={"xatol": 1e-10, "fatol": 1e-12, "maxiter": 5000},
    )  # fmt: skip
    assert not bool(fit.at_boundary)
    assert float(fit.log_likelihood) == pytest.approx(-best.fun, abs=1e-8)
    assert float(fit.location) == pytest.approx(best.x[0], abs=1e-5)
    assert float(fit.prior_variance) == pytest.approx(np.exp(2 * best.x[1]), rel=1e-5)
    b = s**2 / (s**2 + float(fit.prior_variance))
    np.testing.assert_allclose(fit.shrinkage, b, rtol=1e-12)
    np.testing.assert_allclose(fit.z_hat, b * float(fit.location) + (1 - b) * x, rtol=1e-12)
    np.testing.assert_allclose(fit.posterior_sd, np.sqrt((1 - b) * s**2), rtol=1e-12)
    # (N, p): coordinate by coordinate, with (N,) or (N, p) sigma
    x2, s2, _ = _heteroscedastic(2)
    both = normal_eb(np.stack([x, x2], 1), np.stack([s, s2], 1))
    second = normal_eb(x2, s2)
    np.testing.assert_allclose(both.prior_variance, [fit.prior_variance, second.prior_variance])
    np.testing.assert_allclose(both.z_hat[:, 1], second.z_hat, rtol=1e-12)
    shared = normal_eb(np.stack([x, x2], 1), s)
    np.testing.assert_allclose(shared.z_hat[:, 0], fit.z_hat, rtol=1e-12)


def _sure_numpy(a, x, v, location):
    """(1/N) sum of SURE terms (XKB), written out independently of the module."""
    b = v / (v + a)
    if location == "grand-mean":
        m = x.mean()
        return np.mean(b**2 * (x - m) ** 2 + b * (a - v + 2 * v / len(x)))
    return np.mean(b**2 * (x - location) ** 2 + b * (a - v))


@pytest.mark.parametrize("location", ["grand-mean", "sure", 0.0])
def test_sure_minimises_sure_against_brute_force(location):
    x, s, _ = _heteroscedastic(3)
    v = s**2
    fit = sure_shrinkage(x, s, location=location)
    a, m = float(fit.prior_variance), float(fit.location)
    b = v / (v + a)
    np.testing.assert_allclose(fit.z_hat, m + (1 - b) * (x - m), rtol=1e-12)
    grid = np.linspace(0.0, 4 * np.var(x), 20001)
    if location == "sure":  # SURE-M: the joint minimum over (A, m), by SciPy from the grid's best
        rough = [
            min(_sure_numpy(g, x, v, mu) for mu in np.linspace(-1, 3, 41)) for g in grid[::200]
        ]
        start = [grid[::200][int(np.argmin(rough))], np.mean(x)]
        best = optimize.minimize(
            lambda t: _sure_numpy(abs(t[0]), x, v, t[1]), start, method="Nelder-Mead",
            options={"xatol": 1e-10, "fatol": 1e-14, "maxiter": 5000},
        )  # fmt: skip
        assert float(fit.sure) <= best.fun + 1e-12
        assert float(fit.sure) == pytest.approx(_sure_numpy(a, x, v, m), rel=1e-12)
        assert a == pytest.approx(abs(best.x[0]), rel=1e-4)
        return
    values = np.array([_sure_numpy(g, x, v, location) for g in grid])
    assert float(fit.sure) == pytest.approx(_sure_numpy(a, x, v, location), rel=1e-12)
    assert float(fit.sure) <= values.min() + 1e-12
    assert a == pytest.approx(grid[np.argmin(values)], abs=2 * (grid[1] - grid[0]))


def test_sure_is_unbiased_for_the_risk_monte_carlo():
    """At a fixed A, E[SURE-G(A)] = E (1/N)|theta_hat(A) - theta|^2 (Stein's identity, the mean
    xbar's dependence on x included): 20,000 replicates, within 4 Monte-Carlo standard errors."""
    _, s, theta = _heteroscedastic(4, n=12)
    v = jnp.asarray(s**2)
    a = 1.7
    noise = np.random.default_rng(5).normal(size=(20000, len(s)))
    xs = jnp.asarray(theta + s * noise)

    def one(x):
        sure, m = shrinkage._sure_objective(a, x, v, "grand-mean")
        b = v / (v + a)
        loss = jnp.mean((m + (1 - b) * (x - m) - theta) ** 2)
        return sure - loss

    diff = np.asarray(jax.jit(jax.vmap(one))(xs))
    assert abs(diff.mean()) < 4 * diff.std() / np.sqrt(len(diff))


@pytest.mark.parametrize("p", [1, 2])
def test_james_stein_is_the_whitened_projection_rule(p):
    """Toward the grand mean: y = x / s shrunk toward its projection on span(1/s), by the
    positive-part factor (N p - p - 2) / |y - P y|^2; SURE by Stein's identity with the
    divergence from autodiff."""
    rng = np.random.default_rng(6)
    n = 15
    x = rng.normal(0.0, 2.0, (n, p))
    s = np.exp(rng.uniform(-0.7, 1.0, (n, p)))
    fit = james_stein(x[:, 0] if p == 1 else x, s[:, 0] if p == 1 else s)
    expected = np.empty_like(x)
    resid_sq = 0.0
    for c in range(p):
        y, u = x[:, c] / s[:, c], 1.0 / s[:, c]
        proj = u * (u @ y) / (u @ u)
        expected[:, c] = proj
        resid_sq += np.sum((y - proj) ** 2)
    factor = max(0.0, 1.0 - (n * p - p - 2) / resid_sq)
    for c in range(p):
        y, u = x[:, c] / s[:, c], 1.0 / s[:, c]
        expected[:, c] = s[:, c] * (expected[:, c] + factor * (y - expected[:, c]))
    z_hat = np.asarray(fit.z_hat).reshape(n, p)
    np.testing.assert_allclose(z_hat, expected, rtol=1e-12, atol=1e-12)
    # Stein: SURE = (1/N) [|z_hat - x|^2 + 2 sum s^2 dz_hat/dx - sum s^2]
    xs, ss = jnp.asarray(x), jnp.asarray(s)
    jac = jax.jacfwd(lambda t: shrinkage.james_stein_unchecked(t, ss).z_hat)(xs)
    div = np.einsum("icic->ic", np.asarray(jac))
    sure = (np.sum((z_hat - x) ** 2) + 2 * np.sum(s**2 * div) - np.sum(s**2)) / n
    assert float(fit.sure) == pytest.approx(sure, rel=1e-10)


@pytest.mark.parametrize("location", ["grand-mean", 0.5])
def test_sure_monotone_against_a_convex_solve(location):
    """SURE-SG / monotone SURE: the quadratic program min SURE(b) over 0 <= b <= 1, b
    non-decreasing in s (equal s, equal b) solved by SciPy's trust-constr, with ties in s."""
    rng = np.random.default_rng(10)
    n = 15
    s = np.round(np.exp(rng.uniform(-0.7, 1.0, n)), 1)
    assert len(np.unique(s)) < n  # ties
    x = rng.normal(0.0, 1.0 + s, n)
    fit = sure_monotone(x, s, location=location)
    m, c = (x.mean(), 1 - 1 / n) if location == "grand-mean" else (location, 1.0)
    d2 = (x - m) ** 2
    order = np.argsort(s, kind="stable")
    steps = np.zeros((n - 1, n))
    steps[np.arange(n - 1), order[1:]], steps[np.arange(n - 1), order[:-1]] = 1.0, -1.0
    tied = s[order[1:]] == s[order[:-1]]
    best = optimize.minimize(
        lambda b: np.mean(b**2 * d2 + s**2 - 2 * c * b * s**2),
        np.full(n, 0.5),
        jac=lambda b: (2 * b * d2 - 2 * c * s**2) / n,
        hess=lambda b: np.diag(2 * d2 / n),
        bounds=optimize.Bounds(0.0, 1.0),
        constraints=[optimize.LinearConstraint(steps, 0.0, np.where(tied, 0.0, np.inf))],
        method="trust-constr",
        options={"gtol": 1e-12, "xtol": 1e-14, "maxiter": 5000},
    )
    b = np.asarray(fit.shrinkage)
    assert np.all(np.diff(b[order]) >= 0) and np.all(b[order][1:][tied] == b[order][:-1][tied])
    assert float(fit.sure) <= best.fun + 1e-12
    np.testing.assert_allclose(b, best.x, atol=1e-4)
    np.testing.assert_allclose(fit.z_hat, m + (1 - b) * (x - m), rtol=1e-12)
    assert float(fit.sure) == pytest.approx(np.mean(b**2 * d2 + s**2 - 2 * c * b * s**2))
    # one sigma: one factor, the SURE-optimal min(1, c N s^2 / sum (x - m)^2)
    common = sure_monotone(x, 1.3, location=location).shrinkage
    np.testing.assert_allclose(common, min(1.0, c * n * 1.3**2 / d2.sum()), rtol=1e-12)


def test_jit_and_vmap_over_x_and_sigma():
    x, s, _ = _heteroscedastic(7, n=20)
    xs = jnp.asarray(np.stack([x, x + 1.0, 2.0 * x]))
    ss = jnp.asarray(np.stack([s, s, 1.5 * s]))
    for fn in (normal_eb, sure_shrinkage, sure_monotone):  # james_stein: jacfwd test above
        batched = jax.jit(jax.vmap(fn))(xs, ss)
        for i in range(3):
            one = fn(np.asarray(xs[i]), np.asarray(ss[i]))
            np.testing.assert_allclose(batched.z_hat[i], one.z_hat, rtol=1e-10)
            np.testing.assert_allclose(batched.shrinkage[i], one.shrinkage, rtol=1e-10)


BAD_CALLS = {
    "sigma-negative": (lambda: normal_eb(SCHOOLS_Y, -SCHOOLS_SIGMA), "^sigma: "),
    "sigma-shape": (lambda: sure_shrinkage(SCHOOLS_Y, SCHOOLS_SIGMA[:5]), "^sigma: "),
    "sigma-2d-for-1d-x": (lambda: normal_eb(SCHOOLS_Y, np.ones((8, 2))), "^sigma: "),
    "x-nan": (lambda: james_stein(np.array([1.0, np.nan, 2, 3, 4]), 1.0), "^x: "),
    "location-name": (lambda: sure_shrinkage(SCHOOLS_Y, 1.0, location="median"), "^location: "),
    "location-nan": (lambda: sure_shrinkage(SCHOOLS_Y, 1.0, location=np.nan), "^location: "),
    "js-location": (lambda: james_stein(SCHOOLS_Y, 1.0, location=2.0), "^location: "),
    "js-too-few": (lambda: james_stein(SCHOOLS_Y[:3], 1.0), "^x: James-Stein needs"),
    "monotone-sure": (lambda: sure_monotone(SCHOOLS_Y, 1.0, location="sure"), "^location: "),
    "sure-g-one-point": (lambda: sure_shrinkage(SCHOOLS_Y[:1], 1.0), "^x: SURE-G needs"),
}


@pytest.mark.usefixtures("full_tracebacks")
@pytest.mark.parametrize("label", list(BAD_CALLS))
def test_bad_input_is_refused_before_jax(label):
    call, pattern = BAD_CALLS[label]
    check_refused(call, ValueError, pattern)
