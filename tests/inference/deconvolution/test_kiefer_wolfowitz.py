"""Kiefer-Wolfowitz NPMLE on a grid against independent NumPy/SciPy computations.

The references never call the library's kernels: densities come from scipy.stats.norm, the
KKT vector q_j = (1/N) sum_i phi_ij / sum_k w_k phi_ik and the log-likelihood are written out
in NumPy, and an independent optimum comes from SciPy's SLSQP on the simplex. All fits share
two problem shapes (1-D: N = 200, G = 40; 2-D: N = 150, G = 40) so each solver compiles once.
"""

import jax
import numpy as np
import pytest
from bad_values import all_finite, spread_limit_problem
from jax.sharding import Mesh
from raising import check_refused
from scipy.special import logsumexp
from scipy.stats import norm
from simplex_reference import slsqp_simplex

from attnbayes import sharding, validation
from attnbayes.inference.deconvolution import em
from attnbayes.inference.deconvolution.kiefer_wolfowitz import (
    NPMLEResult,
    default_grid,
    npmle,
    npmle_gradient,
    npmle_posterior,
)
from attnbayes.models.deconvolution import simulate

N1, N2, G = 200, 150, 40
SIGMA1, SIGMA2 = 1.0, 0.5

# ----------------------------------------------------------------------------- references


def _as_2d(a):
    a = np.asarray(a, dtype=np.float64)
    return a[:, None] if a.ndim == 1 else a


def ref_log_phi(x, grid, sigma):
    """(N, G) log N(x_i; g_j, sigma^2 I_p), coordinate by coordinate from scipy.stats.norm."""
    x, grid = _as_2d(x), _as_2d(grid)
    return norm.logpdf(x[:, None, :], loc=grid[None, :, :], scale=sigma).sum(-1)


def ref_log_likelihood(x, grid, weights, sigma):
    with np.errstate(divide="ignore"):
        log_w = np.log(np.asarray(weights, np.float64))
    return float(np.sum(logsumexp(ref_log_phi(x, grid, sigma) + log_w[None, :], axis=1)))


def ref_kkt(x, grid, weights, sigma):
    """q_j = (1/N) sum_i phi_ij / sum_k w_k phi_ik, from densities shifted by their row max."""
    lp = ref_log_phi(x, grid, sigma)
    lik = np.exp(lp - lp.max(axis=1, keepdims=True))
    return (lik / (lik @ np.asarray(weights, np.float64))[:, None]).mean(axis=0)


def ref_posterior(x, grid, weights, sigma):
    """Responsibilities (N, G) and posterior means E[z_i | x_i] (N, p) by brute force."""
    with np.errstate(divide="ignore"):
        lj = ref_log_phi(x, grid, sigma) + np.log(np.asarray(weights, np.float64))[None, :]
    resp = np.exp(lj - logsumexp(lj, axis=1, keepdims=True))
    return resp, resp @ _as_2d(grid)


def slsqp_npmle(x, grid, sigma):
    """An independent optimum: maximise mean_i log (L w)_i on the simplex with SciPy's SLSQP."""
    return slsqp_simplex(ref_log_phi(x, grid, sigma), ftol=1e-12)


# ----------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def data1():
    """N = 200 draws of the three-atom measure, sigma = 1."""
    return np.asarray(simulate(jax.random.PRNGKey(11), "three-atoms", SIGMA1, N1)[1])


@pytest.fixture(scope="module")
def data2():
    """N = 150 draws of the 2-D ring measure, sigma = 0.5."""
    return np.asarray(simulate(jax.random.PRNGKey(12), "ring", SIGMA2, N2)[1])


@pytest.fixture(scope="module")
def fits1(data1):
    """The three solvers on the 1-D problem, each to its own certified tolerance."""
    return {
        "mixsqp": npmle(data1, SIGMA1, grid_size=G, tol=1e-10),
        "squarem": npmle(data1, SIGMA1, grid_size=G, method="squarem", tol=1e-8),
        "em": npmle(data1, SIGMA1, grid_size=G, method="em", tol=1e-7),
    }


@pytest.fixture(scope="module")
def fit2(data2):
    return npmle(data2, SIGMA2, grid_size=G, tol=1e-10)


# ----------------------------------------------------------------------------- KKT and optimum


def _check_kkt(x, result, sigma, tol):
    """The KKT conditions, from the independent q: q_j <= 1 + tol everywhere, and on the
    support q_j >= 1 + tol - tol / w_j (from sum_j w_j q_j = 1)."""
    w = np.asarray(result.weights)
    q = ref_kkt(x, result.atoms, w, sigma)
    assert result.converged
    assert q.max() - 1.0 <= tol + 1e-12
    np.testing.assert_allclose(result.kkt_gap, q.max() - 1.0, rtol=0, atol=1e-11)
    support = w > 0
    assert np.all(q[support] >= 1.0 + tol - tol / w[support] - 1e-12)
    big = w > 1e-3  # there the bound pins q_j to 1 within about 1e-7
    assert big.any()
    np.testing.assert_allclose(q[big], 1.0, rtol=0, atol=1e-7 + 1e-12)
    return q


def test_kkt_holds_at_the_solution_1d(data1, fits1):
    result = fits1["mixsqp"]
    assert result.atoms.shape == (G,) and result.weights.shape == (G,)
    _check_kkt(data1, result, SIGMA1, 1e-10)


def test_kkt_holds_at_the_solution_2d(data2, fit2):
    assert fit2.atoms.shape == (G, 2) and fit2.weights.shape == (G,)
    _check_kkt(data2, fit2, SIGMA2, 1e-10)


def test_log_likelihood_and_gradient_match_references(data1, data2, fits1, fit2):
    for x, fit, sigma in ((data1, fits1["mixsqp"], SIGMA1), (data2, fit2, SIGMA2)):
        w = np.asarray(fit.weights)
        ll = ref_log_likelihood(x, fit.atoms, w, sigma)
        np.testing.assert_allclose(fit.log_likelihood, ll, rtol=1e-12)
        np.testing.assert_allclose(float(em.log_likelihood(x, fit.atoms, w, sigma)), ll, rtol=1e-12)
        q = npmle_gradient(x, sigma, fit.atoms, w)
        np.testing.assert_allclose(q, ref_kkt(x, fit.atoms, w, sigma), rtol=1e-12)


def test_solvers_agree(data1, fits1):
    """Each log-likelihood is certified within N * tol of the optimum, so they agree."""
    best = fits1["mixsqp"]
    for name, tol in (("squarem", 1e-8), ("em", 1e-7)):
        other = fits1[name]
        assert other.converged and other.kkt_gap <= tol
        assert -N1 * 1e-10 <= best.log_likelihood - other.log_likelihood <= N1 * tol
        assert abs(best.log_likelihood - other.log_likelihood) <= 1e-6 * abs(best.log_likelihood)
        cdf_gap = np.abs(np.cumsum(best.weights) - np.cumsum(other.weights)).max()
        assert cdf_gap < 1e-3, (name, cdf_gap)
    # the accelerated solvers need far fewer iterations than EM for a tighter certificate
    assert fits1["mixsqp"].num_iters < 50 < 1000 < fits1["squarem"].num_iters
    assert fits1["em"].num_iters > 10 * fits1["squarem"].num_iters


def test_matches_an_independent_convex_solver(data1, fits1):
    w_ref = slsqp_npmle(data1, fits1["mixsqp"].atoms, SIGMA1)
    ll_ref = ref_log_likelihood(data1, fits1["mixsqp"].atoms, w_ref, SIGMA1)
    ll = fits1["mixsqp"].log_likelihood
    # ours is certified within N * 1e-10 = 2e-8 of the optimum; SLSQP lands as close
    assert abs(ll - ll_ref) <= 1e-7
    cdf_gap = np.abs(np.cumsum(fits1["mixsqp"].weights) - np.cumsum(w_ref)).max()
    assert cdf_gap < 1e-4


def test_iterations_never_lower_the_likelihood(data1):
    """The same compiled loops, stopped after 0, 1, 2, ... iterations."""
    for method in ("em", "squarem", "mixsqp"):
        lls = [
            npmle(data1, SIGMA1, grid_size=G, method=method, tol=1e-14, max_iters=k).log_likelihood
            for k in (0, 1, 2, 3, 5, 8)
        ]
        assert np.all(np.diff(lls) >= -1e-10 * abs(lls[0])), (method, lls)
        assert lls[-1] > lls[0], method


@pytest.mark.parametrize("seed", [0, 4])
def test_isolated_points_far_from_the_bulk(seed):
    """N(0, 1) data with a few points out at 3-10: the first SQP step starves the point at
    10.4 ((L w)_i ~ 1e-20), which Newton steps alone would rebuild by doubling (these runs
    then stall with a KKT gap of 1e6); the vertex-direction step restores it at once."""
    x = np.random.default_rng(seed).standard_normal(N1)
    x[:6] = [6.3, 6.4, 7.2, 7.2, 10.4, 3.1]
    result = npmle(x, SIGMA1, grid_size=G, tol=1e-10)
    _check_kkt(x, result, SIGMA1, 1e-10)
    assert result.num_iters < 20
    assert result.weights[-1] > 1.0 / (2 * N1)  # the last grid point sits on x = 10.4


def test_mixsqp_refuses_a_grid_too_coarse_for_sigma():
    """Data spread over [0, 1000] with sigma = 0.5 and 40 grid points: mix-SQP's sparse start
    leaves some x_i 25 sigma from its support, a likelihood that underflows."""
    x = np.linspace(0.0, 1000.0, N1)
    with pytest.raises(ValueError, match=r"^grid: too coarse for sigma"):
        npmle(x, 0.5, grid_size=G)
    result = npmle(x, 0.5, grid_size=G, method="squarem")  # starts from the whole grid
    assert result.converged and np.isfinite(result.log_likelihood)


def test_target_log_likelihood_stops_the_run(data1, fits1):
    best = fits1["mixsqp"].log_likelihood
    target = best - 1e-3 * abs(best)
    early = npmle(data1, SIGMA1, grid_size=G, method="em", tol=1e-7, target_log_likelihood=target)
    assert early.log_likelihood >= target
    assert early.num_iters < fits1["em"].num_iters
    assert not early.converged


def test_weights_flush_to_exact_zero(data1):
    """EM weights of unused grid points decay geometrically; below 1e-250 they become 0.

    The NumPy EM alongside (no flush) holds such weights in (0, 1e-250) at those iteration
    counts, most of them stuck at the smallest subnormal (w q rounds back to 5e-324), so a
    missing flush would be seen.
    """
    grid = default_grid(data1, G)
    lp = ref_log_phi(data1, grid, SIGMA1)
    lik = np.exp(lp - lp.max(axis=1, keepdims=True))
    w_ref = np.full(G, 1.0 / G)
    iters = (3000, 10000)
    tiny_seen = False
    for t in range(1, iters[-1] + 1):
        w_ref = w_ref * (lik / (lik @ w_ref)[:, None]).mean(axis=0)
        if t in iters:
            tiny_seen |= bool(np.any((w_ref > 0) & (w_ref < 1e-250)))
            fit = npmle(data1, SIGMA1, grid_size=G, method="em", tol=1e-14, max_iters=t)
            w = np.asarray(fit.weights)
            assert np.all((w == 0) | (w >= 1e-250)), t
            np.testing.assert_allclose(w.sum(), 1.0, rtol=1e-14)
            np.testing.assert_array_equal(w == 0, w_ref < 1e-250)
    assert tiny_seen


def test_float32(data1, fits1):
    """float32 in, float32 out; the default float32 tolerance (1e-4) is reached."""
    result = npmle(data1.astype(np.float32), SIGMA1, grid_size=G)
    assert result.weights.dtype == np.float32 and result.atoms.dtype == np.float32
    assert result.converged and result.kkt_gap <= 1e-4
    q = ref_kkt(data1.astype(np.float32), result.atoms, result.weights, SIGMA1)
    assert q.max() - 1.0 <= 1e-4 + 1e-5
    best = fits1["mixsqp"].log_likelihood
    ll32 = ref_log_likelihood(data1, result.atoms, result.weights, SIGMA1)
    assert -N1 * 1e-10 <= best - ll32 <= N1 * 2e-4
    # a gap below float32 resolution: mix-SQP stops once the gap no longer falls, unconverged
    stuck = npmle(data1.astype(np.float32), SIGMA1, grid_size=G, tol=1e-9, max_iters=1000)
    assert not stuck.converged and stuck.num_iters < 1000
    assert 0 < stuck.kkt_gap <= 1e-4


# ----------------------------------------------------------------------------- streamed, sharded


def _check_streamed_loop(data1, method, iters):
    """``method`` with ``block_size`` (L never formed; the rows sharded over the default mesh,
    two devices in the tests) stopped after ``iters`` iterations: the dense loop's numbers
    (whose program ``test_iterations_never_lower_the_likelihood`` compiled) and the independent
    log-likelihood. Returns the streamed weights."""
    args = dict(grid_size=G, method=method, tol=1e-14, max_iters=iters)
    dense = npmle(data1, SIGMA1, **args)
    streamed = npmle(data1, SIGMA1, block_size=48, **args)
    assert int(streamed.num_iters) == int(dense.num_iters) == iters
    np.testing.assert_allclose(streamed.weights, dense.weights, rtol=0, atol=1e-12)
    np.testing.assert_allclose(streamed.kkt_gap, dense.kkt_gap, rtol=0, atol=1e-12)
    w = np.asarray(streamed.weights)
    ll = ref_log_likelihood(data1, streamed.atoms, w, SIGMA1)
    np.testing.assert_allclose(streamed.log_likelihood, ll, rtol=1e-12)
    return streamed.atoms, w


def test_streamed_em_and_gradient_match_the_dense_path_and_references(data1):
    atoms, w = _check_streamed_loop(data1, "em", 8)
    q = npmle_gradient(data1, SIGMA1, atoms, w, block_size=48)
    np.testing.assert_allclose(q, ref_kkt(data1, atoms, w, SIGMA1), rtol=1e-12)


@pytest.mark.slow
def test_streamed_squarem_and_mixsqp_match_the_dense_path(data1, fits1):
    """SQUAREM as EM above; mix-SQP streamed over two devices (one sigma; ``devices_npmle``
    checks per-unit sigma on 1, 2 and 4 devices) to the dense fit's iterations, weights and
    certificate."""
    _check_streamed_loop(data1, "squarem", 3)
    fit = npmle(data1, SIGMA1, grid_size=G, tol=1e-10, block_size=32)
    dense = fits1["mixsqp"]
    assert int(fit.num_iters) == int(dense.num_iters) and bool(fit.converged)
    np.testing.assert_allclose(fit.weights, dense.weights, rtol=0, atol=1e-10)
    np.testing.assert_allclose(fit.log_likelihood, dense.log_likelihood, rtol=1e-13)
    np.testing.assert_allclose(fit.kkt_gap, dense.kkt_gap, rtol=0, atol=1e-12)
    _check_kkt(data1, fit, SIGMA1, 1e-10)


# ----------------------------------------------------------------------------- grid


def test_default_grid(data1, data2):
    grid = default_grid(data1, G)
    np.testing.assert_array_equal(grid, np.linspace(data1.min(), data1.max(), G))
    grid2 = default_grid(data2, G)
    assert grid2.shape == (G, 2)
    # rows of the data, distinct, deterministic, and the farthest point from the first is in
    matches = (grid2[:, None, :] == data2[None, :, :]).all(-1)
    assert np.all(matches.sum(1) >= 1) and len({tuple(r) for r in grid2}) == G
    np.testing.assert_array_equal(grid2, default_grid(data2, G))
    far = data2[np.argmax(((data2 - grid2[0]) ** 2).sum(1))]
    np.testing.assert_array_equal(grid2[1], far)
    np.testing.assert_array_equal(default_grid(data2[:30], G), data2[:30])  # N <= G: all


def test_user_grid_matches_default(data1, fits1):
    result = npmle(data1, SIGMA1, grid=np.linspace(data1.min(), data1.max(), G), tol=1e-10)
    np.testing.assert_allclose(result.log_likelihood, fits1["mixsqp"].log_likelihood, rtol=1e-12)


# ----------------------------------------------------------------------------- posterior


def test_posterior_matches_brute_force(data1, data2, fits1, fit2):
    for x, fit, sigma in ((data1, fits1["mixsqp"], SIGMA1), (data2, fit2, SIGMA2)):
        w = np.asarray(fit.weights)
        assert np.any(w == 0)
        mean, intervals = npmle_posterior(x, sigma, fit, probs=(0.5, 0.9))
        resp, ref_mean = ref_posterior(x, fit.atoms, w, sigma)
        assert mean.shape == x.shape
        np.testing.assert_allclose(np.asarray(mean).reshape(len(x), -1), ref_mean, atol=1e-12)
        # zero weight: exactly zero responsibility, and no NaN anywhere
        a = np.asarray(em.responsibilities(x, fit.atoms, w, sigma))
        assert np.all(np.isfinite(a)) and np.all(a[:, w == 0] == 0.0)
        np.testing.assert_allclose(a, resp, atol=1e-12)
        # equal-tailed intervals of sum_j A_ij delta(g_j), coordinate by coordinate
        atoms = _as_2d(fit.atoms)
        for prob, (lo, hi) in intervals.items():
            lo, hi = _as_2d(lo), _as_2d(hi)
            assert lo.shape == hi.shape == (len(x), atoms.shape[1])
            for i in range(0, len(x), 7):
                for c in range(atoms.shape[1]):
                    order = np.argsort(atoms[:, c], kind="stable")
                    cdf = np.cumsum(resp[i, order])
                    want_lo = atoms[order[np.searchsorted(cdf, (1 - prob) / 2)], c]
                    want_hi = atoms[order[np.searchsorted(cdf, (1 + prob) / 2)], c]
                    assert lo[i, c] == want_lo and hi[i, c] == want_hi, (prob, i, c)
    mean, none = npmle_posterior(data1, SIGMA1, fits1["mixsqp"], probs=())
    assert none == {} and mean.shape == (N1,)


# ----------------------------------------------------------------------------- bad input


X1 = np.array([-1.0, 0.5, 2.0, 3.0])  # (N,) with N = 4
X2 = np.array([[0.0, 1.0], [1.0, 0.0], [2.0, 2.0]])  # (N, p) = (3, 2)
INSIDE = np.linspace(-1.0, 3.0, 5)
FIT = NPMLEResult(INSIDE, np.full(5, 0.2), 0.0, 0, True, 0.0)

BAD_CALLS = {
    "grid-outside": (lambda: npmle(X1, 1.0, grid=np.append(INSIDE, 3.5)), "grid"),
    "grid-below": (lambda: npmle(X1, 1.0, grid=np.append(INSIDE, -1.0 - 1e-9)), "grid"),
    "grid-outside-2d": (lambda: npmle(X2, 1.0, grid=X2 + np.array([0.0, 0.5])), "grid"),
    "grid-2d-for-1d": (lambda: npmle(X1, 1.0, grid=INSIDE[:, None]), "grid"),
    "grid-wrong-p": (lambda: npmle(X2, 1.0, grid=np.ones((4, 3))), "grid"),
    "grid-empty": (lambda: npmle(X1, 1.0, grid=np.zeros(0)), "grid"),
    "grid-nan": (lambda: npmle(X1, 1.0, grid=np.append(INSIDE, np.nan)), "grid"),
    "sigma-zero": (lambda: npmle(X1, 0.0), "sigma"),
    "sigma-negative": (lambda: npmle(X1, -1.0), "sigma"),
    "sigma-nan": (lambda: npmle(X1, np.nan), "sigma"),
    "sigma-vector": (lambda: npmle(X1, np.ones(2)), "sigma"),
    "sigma-underflow": (lambda: npmle(X1, 1e-300), "sigma"),
    "x-nan": (lambda: npmle(np.append(X1, np.nan), 1.0), "x"),
    "x-3d": (lambda: npmle(np.zeros((3, 2, 2)), 1.0), "x"),
    "x-empty": (lambda: npmle(np.zeros(0), 1.0), "x"),
    "method": (lambda: npmle(X1, 1.0, method="newton"), "method"),
    "grid-size-1": (lambda: npmle(X1, 1.0, grid_size=1), "grid_size"),
    "grid-size-float": (lambda: npmle(X1, 1.0, grid_size=30.0), "grid_size"),
    "tol-zero": (lambda: npmle(X1, 1.0, tol=0.0), "tol"),
    "tol-nan": (lambda: npmle(X1, 1.0, tol=np.nan), "tol"),
    "max-iters": (lambda: npmle(X1, 1.0, max_iters=-1), "max_iters"),
    "target-nan": (
        lambda: npmle(X1, 1.0, target_log_likelihood=np.nan),
        "target_log_likelihood",
    ),
    "gradient-weights": (lambda: npmle_gradient(X1, 1.0, INSIDE, np.ones(4) / 4), "weights"),
    "gradient-grid": (lambda: npmle_gradient(X1, 1.0, INSIDE[:, None], np.ones(5) / 5), "grid"),
    "posterior-probs": (lambda: npmle_posterior(X1, 1.0, FIT, probs=(1.5,)), "probs"),
    "posterior-result": (lambda: npmle_posterior(X1, 1.0, (INSIDE, None)), "result"),
}


@pytest.mark.parametrize("label", sorted(BAD_CALLS))
def test_bad_input_names_the_argument(label):
    call, name = BAD_CALLS[label]
    with pytest.raises(ValueError, match=rf"^{name}: "):
        call()


# ----------------------------------------------------------------------------- bad input (issue 12)
#
# Every public function of ``kiefer_wolfowitz`` against huge values (finding 2: spreads whose
# squared distances overflow), NaN/inf, empty, complex and wrong-rank arrays and bad scalars:
# a ValueError starting with the argument's name, raised before any JAX tracing.

# the NPMLE's share of the bad-input catalogue of issue 12 (as ``test_em``'s, for EM)
A1 = np.array([-1.0, 2.0])
W1 = np.array([0.5, 0.5])
A2 = np.array([[0.0, 0.0], [1.0, 1.0]])
GRID1 = INSIDE
FIT1 = FIT
HUGE64 = 1e160
HUGE32 = np.float32(1e20)
X1_HUGE = np.array([-1.0, 0.5, 2.0, HUGE64])
X1_HUGE32 = np.array([-1.0, 0.5, 2.0, HUGE32], np.float32)
X1_COMPLEX = X1 + 0j
X_3D = np.zeros((3, 2, 2))


def _x64_off(fn, *args, **kwargs):
    """Call ``fn`` with jax_enable_x64 off (float64 input is then computed in float32)."""
    with jax.enable_x64(False):
        return fn(*args, **kwargs)


def _data_entry_points(x, sigma):
    """Every public NPMLE function that takes data and sigma (and makes its own grid)."""
    return {
        "npmle": lambda: npmle(x, sigma, max_iters=2),
        "npmle-em": lambda: npmle(x, sigma, method="em", max_iters=2),
        "npmle_posterior": lambda: npmle_posterior(x, sigma, FIT1),
    }


# bad sigma where the older catalogue does not look
BAD_SIGMAS = {
    "zero": 0.0,
    "negative": -1.0,
    "nan": np.nan,
    "str": "1.0",
    "vector": np.ones(2),
    "bool": True,
    "none": None,
    "underflow": 1e-300,
}


def _bad_input_cases():
    """(id, callable, anchored pattern)."""
    cases = []

    def add(label, call, pattern):
        cases.append((label, call, pattern))

    x_nan = np.array([-1.0, np.nan, 2.0, 3.0])
    beyond = np.array([1e39, 1e39, 1e39])  # beyond float32's range, computed in float32
    for fn, call in _data_entry_points(X1_HUGE, 1.0).items():
        add(f"{fn}-x-huge", call, r"^x: spread .* exceeds")
    for fn, call in _data_entry_points(X1_HUGE32, 1.0).items():
        add(f"{fn}-x-huge-float32", call, r"^x: spread .* exceeds .* for float32")
    # sigma small enough that the spread in units of sigma overflows (1 / sigma^2 is finite)
    for fn, call in _data_entry_points(X1, 1e-153).items():
        add(f"{fn}-x-spread-by-sigma", call, r"^x: spread .* exceeds")
    add(
        "npmle_gradient-x-huge",
        lambda: npmle_gradient(X1_HUGE, 1.0, GRID1, np.full(5, 0.2)),
        "^x: spread",
    )
    add(
        "npmle_gradient-grid-huge",
        lambda: npmle_gradient(X1, 1.0, np.array([0.0, HUGE64]), W1),
        "^grid: spread",
    )
    add(
        "npmle_posterior-result-atoms-huge",
        lambda: npmle_posterior(
            X1, 1.0, FIT1._replace(atoms=np.array([0.0, 1.0, 2.0, 3.0, HUGE64]))
        ),
        r"^result\.atoms: spread",
    )
    add(
        "default_grid-x-spread-overflows",
        lambda: default_grid(np.array([-1e308, 1e308])),
        "^x: ",
    )
    add("npmle-x-beyond-float32", lambda: _x64_off(npmle, beyond, 1.0), "^x: values")
    add(
        "npmle_gradient-grid-beyond-float32",
        lambda: _x64_off(npmle_gradient, X1, 1.0, np.array([0.0, 1e39]), W1),
        "^grid: values",
    )
    add("npmle-x-inf", lambda: npmle(np.append(X1, np.inf), 1.0), "^x: ")
    add("npmle-sigma-inf", lambda: npmle(X1, np.inf), "^sigma: ")
    add("npmle_gradient-x-nan", lambda: npmle_gradient(x_nan, 1.0, GRID1, np.full(5, 0.2)), "^x: ")
    add("npmle_gradient-grid-inf", lambda: npmle_gradient(X1, 1.0, [0.0, np.inf], W1), "^grid: ")
    add(
        "npmle_gradient-weights-nan",
        lambda: npmle_gradient(X1, 1.0, A1, [np.nan, 1.0]),
        "^weights: ",
    )
    add("npmle_posterior-x-nan", lambda: npmle_posterior(x_nan, 1.0, FIT1), "^x: ")
    add(
        "npmle_posterior-result-atoms-nan",
        lambda: npmle_posterior(X1, 1.0, FIT1._replace(atoms=np.append(GRID1[:-1], np.nan))),
        r"^result\.atoms: ",
    )
    add(
        "npmle_posterior-result-weights-nan",
        lambda: npmle_posterior(
            X1, 1.0, FIT1._replace(weights=np.append(np.full(4, 0.25), np.nan))
        ),
        r"^result\.weights: ",
    )
    add(
        "npmle_posterior-probs-nan",
        lambda: npmle_posterior(X1, 1.0, FIT1, probs=(np.nan,)),
        "^probs: ",
    )
    add("default_grid-x-nan", lambda: default_grid(x_nan), "^x: ")
    add("default_grid-x-inf-2d", lambda: default_grid(np.array([[0.0, np.inf]])), "^x: ")
    add("npmle-x-empty-2d", lambda: npmle(np.zeros((0, 2)), 1.0), "^x: ")
    add(
        "npmle_gradient-grid-empty",
        lambda: npmle_gradient(X1, 1.0, np.zeros(0), np.zeros(0)),
        "^grid: ",
    )
    add("npmle_posterior-x-empty", lambda: npmle_posterior(np.zeros(0), 1.0, FIT1), "^x: ")
    add("default_grid-x-empty", lambda: default_grid(np.zeros(0)), "^x: ")
    add("npmle-x-complex", lambda: npmle(X1_COMPLEX, 1.0), "^x: ")
    add("npmle-grid-complex", lambda: npmle(X1, 1.0, grid=GRID1 + 0j), "^grid: ")
    add(
        "npmle_gradient-weights-complex", lambda: npmle_gradient(X1, 1.0, A1, W1 + 0j), "^weights: "
    )
    add("npmle_posterior-x-complex", lambda: npmle_posterior(X1_COMPLEX, 1.0, FIT1), "^x: ")
    add("default_grid-x-complex", lambda: default_grid(X1_COMPLEX), "^x: ")
    add("npmle_gradient-x-rank3", lambda: npmle_gradient(X_3D, 1.0, A2, W1), "^x: ")
    add(
        "npmle_gradient-grid-rank3",
        lambda: npmle_gradient(X2, 1.0, np.zeros((2, 2, 1)), W1),
        "^grid: ",
    )
    add(
        "npmle_gradient-weights-rank2",
        lambda: npmle_gradient(X1, 1.0, A1, W1[None, :]),
        "^weights: ",
    )
    add("npmle_posterior-x-rank3", lambda: npmle_posterior(X_3D, 1.0, FIT1), "^x: ")
    add(
        "npmle_posterior-x-2d-for-1d-fit",
        lambda: npmle_posterior(X2, 1.0, FIT1),
        r"^result\.atoms: ",
    )
    add("default_grid-x-rank3", lambda: default_grid(X_3D), "^x: ")
    for label, m in (("float", 2.5), ("bool", True), ("negative", -3)):
        add(f"npmle-max_iters-{label}", lambda m=m: npmle(X1, 1.0, max_iters=m), "^max_iters: ")
    for label, t in (("negative", -1.0), ("inf", np.inf), ("str", "1e-6"), ("bool", True)):
        add(f"npmle-tol-{label}", lambda t=t: npmle(X1, 1.0, tol=t), "^tol: ")
    for label, g in (("one", 1), ("zero", 0), ("float", 2.5), ("bool", True), ("str", "30")):
        add(f"default_grid-grid_size-{label}", lambda g=g: default_grid(X1, g), "^grid_size: ")
    add("npmle-grid_size-bool", lambda: npmle(X1, 1.0, grid_size=True), "^grid_size: ")
    add("npmle-grid-str", lambda: npmle(X1, 1.0, grid="auto"), "^grid: ")
    add("npmle-grid-rank3", lambda: npmle(X2, 1.0, grid=np.zeros((2, 2, 1))), "^grid: ")
    add("npmle-method-none", lambda: npmle(X1, 1.0, method=None), "^method: ")
    add(
        "npmle-target-str",
        lambda: npmle(X1, 1.0, target_log_likelihood="0"),
        "^target_log_likelihood: ",
    )
    add("npmle_gradient-grid-str", lambda: npmle_gradient(X1, 1.0, "auto", W1), "^grid: ")
    for label, probs in (("zero", (0.0,)), ("one", (1.0,)), ("bool", (True,)), ("str", ("0.5",))):
        add(
            f"npmle_posterior-probs-{label}",
            lambda probs=probs: npmle_posterior(X1, 1.0, FIT1, probs=probs),
            "^probs: ",
        )
    add(
        "npmle_posterior-probs-scalar",
        lambda: npmle_posterior(X1, 1.0, FIT1, probs=0.5),
        "^probs: ",
    )
    add("npmle_posterior-result-none", lambda: npmle_posterior(X1, 1.0, None), "^result: ")
    # streaming and sharding: block_size an int >= 1; mesh a one-axis Mesh, one device if dense
    for label, b in (("zero", 0), ("negative", -8), ("float", 8.0), ("bool", True), ("str", "8")):
        add(f"npmle-block_size-{label}", lambda b=b: npmle(X1, 1.0, block_size=b), "^block_size: ")
        add(
            f"npmle_gradient-block_size-{label}",
            lambda b=b: npmle_gradient(X1, 1.0, GRID1, np.full(5, 0.2), block_size=b),
            "^block_size: ",
        )
    add(
        "npmle-mesh-dense-two-devices",
        lambda: npmle(X1, 1.0, mesh=sharding.batch_mesh(jax.devices()[:2])),
        r"^mesh: the dense path \(block_size=None\) runs on one device, got a mesh of 2",
    )
    add(
        "npmle_gradient-mesh-dense-two-devices",
        lambda: npmle_gradient(X1, 1.0, GRID1, np.full(5, 0.2), mesh=sharding.batch_mesh()),
        "^mesh: the dense path",
    )
    add(
        "npmle-mesh-two-axes",
        lambda: npmle(
            X1, 1.0, block_size=2, mesh=Mesh(np.array(jax.devices()[:1])[:, None], ("a", "b"))
        ),
        "^mesh: expected a mesh with one axis",
    )
    for label, sigma in BAD_SIGMAS.items():
        add(
            f"npmle_gradient-sigma-{label}",
            lambda s=sigma: npmle_gradient(X1, s, A1, W1),
            "^sigma: ",
        )
        add(
            f"npmle_posterior-sigma-{label}",
            lambda s=sigma: npmle_posterior(X1, s, FIT1),
            "^sigma: ",
        )
    return cases


BAD_INPUT_CASES = _bad_input_cases()


@pytest.mark.usefixtures("full_tracebacks")
@pytest.mark.parametrize(
    ("call", "pattern"), [c[1:] for c in BAD_INPUT_CASES], ids=[c[0] for c in BAD_INPUT_CASES]
)
def test_bad_input_is_refused_before_jax(call, pattern):
    check_refused(call, ValueError, pattern)


@pytest.mark.usefixtures("full_tracebacks")
@pytest.mark.parametrize("mesh", ["cpu", 2, jax.devices()[:1]], ids=["str", "int", "list"])
def test_mesh_not_a_mesh_is_a_type_error(mesh):
    check_refused(lambda: npmle(X1, 1.0, block_size=2, mesh=mesh), TypeError, "^mesh: expected")
    check_refused(lambda: npmle(X1, 1.0, mesh=mesh), TypeError, "^mesh: expected")


def test_bad_input_case_ids_are_unique():
    ids = [c[0] for c in BAD_INPUT_CASES]
    assert len(ids) == len(set(ids))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("dim", [1, 2])
def test_just_inside_the_spread_limit_every_npmle_entry_point_is_finite(dtype, dim):
    """At 0.9 times the limit sqrt(finfo.max / (4 N p)) nothing overflows in the NPMLE (EM's
    entry points: ``test_em``): the safety factor
    covers the sum over p coordinates and the log-likelihood's sum over N points, even with
    every point far from the only atom (log p(x) about -N p D^2 / 2 = -0.1 finfo.max)."""
    d = 0.9 * validation.max_scaled_spread(dtype, 4, dim)
    x, far_atom, bulk, atoms, w = spread_limit_problem(dtype, dim, d)
    results = {
        "npmle-em": npmle(x, 1.0, method="em", max_iters=5),
        "npmle-squarem": npmle(x, 1.0, method="squarem", max_iters=5),
        "npmle_gradient": npmle_gradient(bulk, 1.0, far_atom, np.ones(1)),
        "npmle_posterior": npmle_posterior(x, 1.0, NPMLEResult(atoms, w, 0.0, 0, True, 0.0)),
    }
    for name, result in results.items():
        assert all_finite(result), name
