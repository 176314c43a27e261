"""Gibbs sampling of the switching state-space model (``attnbayes.inference.switching.gibbs``
and its conditionals, ``gibbs_conditionals``).

Checked against dense Gaussian computations written out here in NumPy/SciPy: the collapsed
single-site conditionals p(s_t | s_{-t}, y) against normalising p(s, y) over s_t (log p(y | s)
from the dense joint of (x, y) given s), the Kalman FFBS draws against the dense conditional of
x | s, y, the conditional mode sampler against p(s | x, y) enumerated over histories, the
conjugate parameter draws against SciPy's Beta and inverse-gamma laws, ``lp`` against SciPy
log-densities (and, summed over histories, against
``attnbayes.models.switching.switching_log_joint``), and short chains against the exact smoothing
posterior of ``switching_bruteforce``. The extended model (emission offsets, inputs u_t, single
missing coordinates of y_t; o = 2) is checked the same way, from one compiled program: the
collapsed conditionals of every history against ``switching_bruteforce``, FFBS against the dense
conditional and ``fixed_modes_smoother``, ``lp`` against SciPy and ``log_joint_density``, and the
conjugate laws exactly; the public kernel and run with inputs at the sizes of the tests above
(the same compiled sampler). Slow: the maneuvering-target scenario (R-hat of every state
coordinate), and with priors on Pi, c, r the posterior means against NUTS on ``switching_model``.
Bad input to ``run_switching_gibbs`` is refused before tracing (``switching_inputs``).
"""

import functools
import itertools
import time

import arviz as az
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from raising import check_refused
from scipy import stats
from scipy.special import logsumexp
from switching_bruteforce import (
    as_numpy,
    enumerate_posterior,
    log_joint_density,
    random_switching_params,
)
from switching_inputs import KEY, P2, entry_point_cases, parametrize_cases
from switching_inputs import Y as Y_TINY

from attnbayes.inference.diagnostics import diagnostics
from attnbayes.inference.mcmc import run_nuts
from attnbayes.inference.switching import gibbs as sg
from attnbayes.inference.switching import gibbs_conditionals as gc
from attnbayes.inference.switching.kalman import kalman_update
from attnbayes.inference.switching.smoothers import fixed_modes_smoother
from attnbayes.models.switching import (
    SwitchingParams,
    SwitchingPriors,
    maneuvering_target,
    simulate,
    switching_dims,
    switching_log_joint,
    switching_model,
)

T = 6
MISSING_ROW = 3
NUM_CHAINS = 4
NUM_SAMPLES = 2000  # one compiled configuration for every fast run
# test_comparison.py runs the sampler at these sizes too: one worker compiles it once
XDIST_GROUP = "switching-gibbs"
NO_PRIORS = sg._check_priors(None, 2, jnp.float64)


# ----------------------------------------------------------------------------- problems


def _problem(seed: int, singular_q: bool, num_steps: int = T, missing=(MISSING_ROW,)):
    """A random M = 2, d = 2, o = 1 model, a simulated series with NaN rows, and the truth."""
    params = random_switching_params(np.random.default_rng(seed), singular_q=singular_q)
    modes, states, y = (np.asarray(a) for a in simulate(jax.random.key(seed), params, num_steps))
    y = y.copy()
    y[list(missing)] = np.nan
    return params, y, modes, states


@functools.cache
def singular_problem():
    return _problem(3, singular_q=True)


@functools.cache
def definite_problem():
    return _problem(4, singular_q=False)


@functools.cache
def known_start_problem():
    """Singular Q and P0 = 0 (x_1 = m0 known): F P F' + Q is singular in the backward pass."""
    params, y, modes, _ = singular_problem()
    params = params._replace(initial_covs=np.zeros_like(params.initial_covs))
    _, states, _ = simulate(jax.random.key(3), params, T)
    return params, y, modes, np.asarray(states)


PROBLEMS = {
    "singular-q": singular_problem,
    "definite": definite_problem,
    "known-start": known_start_problem,
}

PARTLY_MISSING = ((1, 0), (4, 1))  # (step, coordinate): single missing coordinates of y


def simulate_numpy(rng, params: SwitchingParams, inputs):
    """(modes (T,), states (T, d), y (T, o)) drawn from the model with inputs u (T, k) in
    NumPy (``simulate`` would compile a sampler for every new shape)."""
    p = as_numpy(params)
    m = len(p.initial_probs)
    modes = [rng.choice(m, p=p.initial_probs)]
    states = [rng.multivariate_normal(p.initial_means[modes[0]], p.initial_covs[modes[0]])]
    for t in range(1, len(inputs)):
        j = rng.choice(m, p=p.transition_matrix[modes[-1]])
        offset = p.dynamics_biases[j] + p.dynamics_input_weights[j] @ inputs[t]
        mean = p.dynamics_matrices[j] @ states[-1] + offset
        modes.append(j)
        states.append(rng.multivariate_normal(mean, p.dynamics_covs[j]))
    y = [
        rng.multivariate_normal(
            p.emission_matrices[j] @ x + p.emission_biases[j] + p.emission_input_weights[j] @ u,
            p.emission_covs[j],
        )
        for j, x, u in zip(modes, states, inputs, strict=True)
    ]
    return np.array(modes), np.array(states), np.array(y)


@functools.cache
def input_problem():
    """M = 2, d = 2, o = 2 (PD Q) with emission offsets d_j and one input (B_j, D_j): params,
    a series with one coordinate missing at steps 2 and 5 and the row MISSING_ROW missing,
    the inputs u (T, 1), and the simulated modes and states."""
    rng = np.random.default_rng(38)  # modes 0 0 1 0 1 0: a partly missing row in each mode
    params = random_switching_params(rng, o=2, num_inputs=1)
    u = rng.normal(size=(T, 1))
    modes, states, y = simulate_numpy(rng, params, u)
    for t, i in PARTLY_MISSING:
        y[t, i] = np.nan
    y[MISSING_ROW] = np.nan
    return params, y, u, modes, states


@functools.cache
def small_input_problem():
    """The sizes of ``definite_problem`` (o = 1) with emission offsets and one input: the
    public kernel and run reuse the samplers compiled for the tests without inputs (they see
    the per-step offsets, not the inputs). Returns (params, y, u)."""
    rng = np.random.default_rng(22)
    params = random_switching_params(rng, num_inputs=1)
    u = rng.normal(size=(T, 1))
    _, _, y = simulate_numpy(rng, params, u)
    y[MISSING_ROW] = np.nan
    return params, y, u


def _model(params, y, inputs=None):
    return gc.prepare_model(*sg._check_data(params, y, inputs))


def _theta(params, trans=None, c=(1.0, 1.0), r=(1.0, 1.0)):
    """A state carrying theta = (Pi, c, r) (modes and states unused)."""
    return sg.SwitchingGibbsState(
        modes=jnp.zeros(T, jnp.int32),
        states=jnp.zeros((T, 2)),
        transition_matrix=jnp.asarray(params.transition_matrix if trans is None else trans),
        dynamics_cov_scale=jnp.asarray(c, float),
        emission_cov_scale=jnp.asarray(r, float),
        lp=jnp.zeros(()),
    )


def _effective(params, theta) -> SwitchingParams:
    """params with Pi, Q_j = c_j Q_j, R_j = r_j R_j of theta."""
    c, r = np.asarray(theta.dynamics_cov_scale), np.asarray(theta.emission_cov_scale)
    return params._replace(
        transition_matrix=np.asarray(theta.transition_matrix),
        dynamics_covs=c[:, None, None] * np.asarray(params.dynamics_covs),
        emission_covs=r[:, None, None] * np.asarray(params.emission_covs),
    )


# ----------------------------------------------------------------------------- dense references


def _inputs(p: SwitchingParams, inputs, n: int):
    """u (n, k): ``inputs``, or no columns."""
    k = p.emission_input_weights.shape[-1]
    return np.zeros((n, k)) if inputs is None else np.asarray(inputs, float).reshape(n, k)


def dense_joint(p: SwitchingParams, hist, inputs=None):
    """Means and covariances of (x_{1:T}, y_{1:T}) given the history s, by the mean recursion
    mx_t = F_t mx_{t-1} + b_t + B_t u_t, my_t = H_t mx_t + d_t + D_t u_t, and the covariance
    recursion V[t, u] = F_t V[t-1, u] (u < t), V[t, t] = F_t V[t-1, t-1] F_t' + Q_t.

    Returns (mx (T d,), vxx (T d, T d), my (T o,), vyy (T o, T o), vxy (T d, T o)).
    """
    p = as_numpy(p)
    n, d = len(hist), p.initial_means.shape[1]
    inputs = _inputs(p, inputs, n)
    mx = np.zeros((n, d))
    v = np.zeros((n, n, d, d))
    mx[0], v[0, 0] = p.initial_means[hist[0]], p.initial_covs[hist[0]]
    for t in range(1, n):
        j = hist[t]
        f = p.dynamics_matrices[j]
        mx[t] = f @ mx[t - 1] + p.dynamics_biases[j] + p.dynamics_input_weights[j] @ inputs[t]
        for u in range(t):
            v[t, u] = f @ v[t - 1, u]
            v[u, t] = v[t, u].T
        v[t, t] = f @ v[t - 1, t - 1] @ f.T + p.dynamics_covs[hist[t]]
    h = [p.emission_matrices[j] for j in hist]
    vxx = v.transpose(0, 2, 1, 3).reshape(n * d, n * d)
    my = np.concatenate(
        [
            h[t] @ mx[t] + p.emission_biases[j] + p.emission_input_weights[j] @ inputs[t]
            for t, j in enumerate(hist)
        ]
    )
    vxy = np.block([[v[t, u] @ h[u].T for u in range(n)] for t in range(n)])
    vyy = np.block(
        [
            [
                h[t] @ v[t, u] @ h[u].T + (p.emission_covs[hist[t]] if t == u else 0)
                for u in range(n)
            ]
            for t in range(n)
        ]
    )
    return mx.ravel(), vxx, my, vyy, vxy


def _observed(y):
    return np.flatnonzero(~np.isnan(y.ravel()))


def log_joint_modes_y(p: SwitchingParams, y, hist) -> float:
    """log p(s, y) = log p(s) + log N(y_obs; dense mean, dense covariance)."""
    _, _, my, vyy, _ = dense_joint(p, hist)
    rows = _observed(y)
    log_s = np.log(p.initial_probs[hist[0]]) + sum(
        np.log(p.transition_matrix[a, b]) for a, b in itertools.pairwise(hist)
    )
    return log_s + stats.multivariate_normal(my[rows], vyy[np.ix_(rows, rows)]).logpdf(
        y.ravel()[rows]
    )


def states_given_modes(p: SwitchingParams, y, hist, inputs=None):
    """Mean (T d,) and covariance (T d, T d) of x | s, y by dense Gaussian conditioning on the
    observed entries of y."""
    mx, vxx, my, vyy, vxy = dense_joint(p, hist, inputs)
    rows = _observed(y)
    gain = np.linalg.solve(vyy[np.ix_(rows, rows)], vxy[:, rows].T).T
    mean = mx + gain @ (y.ravel()[rows] - my[rows])
    cov = vxx - gain @ vxy[:, rows].T
    return mean, 0.5 * (cov + cov.T)


def log_prior_scipy(theta, priors: SwitchingPriors) -> float:
    """log of the Dirichlet rows of Pi and the inverse-gamma c_j, r_j at theta (SciPy)."""
    out = 0.0
    for row, alpha in zip(
        np.asarray(theta.transition_matrix), priors.transition_concentration, strict=True
    ):
        out += stats.dirichlet(alpha).logpdf(row)
    for prior, value in (
        (priors.dynamics_cov_scale, theta.dynamics_cov_scale),
        (priors.emission_cov_scale, theta.emission_cov_scale),
    ):
        shape, rate = (np.broadcast_to(v, (2,)) for v in prior)
        out += np.sum(stats.invgamma(shape, scale=rate).logpdf(np.asarray(value)))
    return float(out)


def log_joint_scipy(p: SwitchingParams, y, hist, x, theta=None, priors=None, inputs=None):
    """log p(x, s, y_obs, theta) with SciPy log-densities (degenerate ones for singular Q_j),
    y_obs the observed (non-NaN) entries of y; offsets b_j + B_j u_t and d_j + D_j u_t."""
    p = as_numpy(p)
    u = _inputs(p, inputs, len(hist))
    out = np.log(p.initial_probs[hist[0]])
    out += sum(np.log(p.transition_matrix[a, b]) for a, b in itertools.pairwise(hist))
    mvn = functools.partial(stats.multivariate_normal.logpdf, allow_singular=True)
    out += mvn(x[0], p.initial_means[hist[0]], p.initial_covs[hist[0]])
    for t in range(1, len(hist)):
        j = hist[t]
        offset = p.dynamics_biases[j] + p.dynamics_input_weights[j] @ u[t]
        out += mvn(x[t], p.dynamics_matrices[j] @ x[t - 1] + offset, p.dynamics_covs[j])
    for t, j in enumerate(hist):
        seen = np.flatnonzero(~np.isnan(y[t]))
        if seen.size:
            offset = p.emission_biases[j] + p.emission_input_weights[j] @ u[t]
            mean = p.emission_matrices[j] @ x[t] + offset
            out += mvn(y[t, seen], mean[seen], p.emission_covs[j][np.ix_(seen, seen)])
    if priors is not None:
        out += log_prior_scipy(theta, priors)
    return float(out)


# ----------------------------------------------------------------------------- jitted internals


@functools.cache
def _collapsed_fn():
    """The collapsed pass (sample: traced flag; False keeps every s_t)."""
    return jax.jit(gc.collapsed_pass)


@functools.cache
def _ffbs_fn():
    return jax.jit(jax.vmap(gc.sample_states, (0, None, None, None)))


@functools.cache
def _log_joint_fn():
    return jax.jit(gc.log_joint)


@functools.cache
def _parameters_fn():
    return jax.jit(jax.vmap(gc.sample_parameters, (0, None, None, None, None, None)))


@functools.cache
def _run(mode_sampler: str, singular: bool):
    """Short chains (4 x 2000 draws) on the random T = 6 problem, shared by the tests."""
    params, y, _, _ = singular_problem() if singular else definite_problem()
    return sg.run_switching_gibbs(
        jax.random.key(11),
        params,
        y,
        num_warmup=100,
        num_samples=NUM_SAMPLES,
        num_chains=NUM_CHAINS,
        mode_sampler=mode_sampler,
    )


# ----------------------------------------------------------------------------- building blocks


def test_kalman_update_matches_the_textbook_update():
    """``kalman.kalman_update`` (the one update, written out for small matrices) equals the
    textbook update in NumPy (gain, Joseph form, log N(y; H m, S)); with a NaN coordinate it
    is the update by the observed one, and a NaN row leaves (m, P) unchanged and adds 0. (The
    semidefinite factor of the sampler's draws: ``test_linalg.py``.)"""
    rng = np.random.default_rng(0)
    a = rng.normal(size=(3, 3))
    cov, h = a @ a.T + 0.1 * np.eye(3), rng.normal(size=(2, 3))
    r, mean, y = np.diag([0.5, 2.0]), rng.normal(size=3), rng.normal(size=2)

    def textbook(y, h, r):
        s_mat = h @ cov @ h.T + r
        gain = cov @ h.T @ np.linalg.inv(s_mat)
        joseph = np.eye(3) - gain @ h
        resid = y - h @ mean
        return (
            mean + gain @ resid,
            joseph @ cov @ joseph.T + gain @ r @ gain.T,
            -0.5
            * (resid @ np.linalg.solve(s_mat, resid) + np.linalg.slogdet(2 * np.pi * s_mat)[1]),
        )

    update = jax.jit(kalman_update)
    for got, ref in zip(update(mean, cov, y, h, r), textbook(y, h, r), strict=True):
        np.testing.assert_allclose(got, ref, rtol=1e-12, atol=1e-12)
    partly = update(mean, cov, np.array([np.nan, y[1]]), h, r)
    for got, ref in zip(partly, textbook(y[1:], h[1:], r[1:, 1:]), strict=True):
        np.testing.assert_allclose(got, ref, rtol=1e-12, atol=1e-12)
    missing = update(mean, cov, np.array([np.nan, np.nan]), h, r)
    for got, ref in zip(missing, (mean, cov, 0.0), strict=True):
        np.testing.assert_allclose(got, ref, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("problem", list(PROBLEMS))
def test_collapsed_conditionals_equal_brute_force(problem):
    """p(s_t | s_{-t}, theta, y) from the backward information pass and the forward candidate
    updates equals p(s, y) normalised over s_t (dense Gaussians), for every t, a NaN row, at
    theta != the defaults."""
    params, y, _, _ = PROBLEMS[problem]()
    model = _model(params, y)
    theta = _theta(params, trans=[[0.7, 0.3], [0.45, 0.55]], c=(0.6, 1.7), r=(1.3, 0.8))
    eff = _effective(params, theta)
    rng = np.random.default_rng(1)
    for hist in (np.zeros(T, int), rng.integers(0, 2, T), rng.integers(0, 2, T)):
        kept, _, _, log_probs = _collapsed_fn()(
            jax.random.key(0), jnp.asarray(hist), model, theta, False
        )
        np.testing.assert_array_equal(kept, hist)
        for t in range(T):
            logs = []
            for j in range(2):
                h = hist.copy()
                h[t] = j
                logs.append(log_joint_modes_y(eff, y, h))
            want = np.exp(np.array(logs) - logsumexp(logs))
            np.testing.assert_allclose(np.exp(log_probs[t]), want, rtol=0, atol=1e-8)


def test_collapsed_sweep_uses_new_past_and_old_future():
    """In a sampling sweep, the conditional of s_t is taken given the new s_{1:t-1} and the old
    s_{t+1:T} (a valid systematic-scan Gibbs sweep), and the filter it returns is the Kalman
    filter under the new modes."""
    params, y, _, _ = singular_problem()
    model = _model(params, y)
    theta = _theta(params)
    old = np.array([1, 0, 0, 1, 1, 0])
    for seed in range(3):
        new, means, covs, log_probs = _collapsed_fn()(
            jax.random.key(seed), jnp.asarray(old), model, theta, True
        )
        new = np.asarray(new)
        for t in range(T):
            logs = [log_joint_modes_y(params, y, np.r_[new[:t], j, old[t + 1 :]]) for j in (0, 1)]
            want = np.exp(np.array(logs) - logsumexp(logs))
            np.testing.assert_allclose(np.exp(log_probs[t]), want, rtol=0, atol=1e-8)
        # the last filtered moments are those of x_T | s_new, y
        mean, cov = states_given_modes(params, y, new)
        np.testing.assert_allclose(means[-1], mean[-2:], atol=1e-9)
        np.testing.assert_allclose(covs[-1], cov[-2:, -2:], atol=1e-9)


@pytest.mark.parametrize("problem", list(PROBLEMS))
def test_ffbs_draws_match_dense_conditional(problem):
    """20000 Kalman FFBS draws of x | s, y: mean and covariance within Monte Carlo error of the
    dense conditional; with singular Q every draw has x_t - F x_{t-1} - b in range(Q), and with
    P0 = 0 every draw starts at m0."""
    params, y, _, _ = PROBLEMS[problem]()
    singular = problem != "definite"
    model = _model(params, y)
    theta = _theta(params, c=(0.8, 1.4), r=(1.0, 0.5))
    eff = _effective(params, theta)
    hist = np.array([0, 1, 1, 0, 1, 0])
    n = 20_000
    draws = np.asarray(
        _ffbs_fn()(jax.random.split(jax.random.key(5), n), jnp.asarray(hist), model, theta)
    )
    mean, cov = states_given_modes(eff, y, hist)
    flat = draws.reshape(n, -1)
    se = np.sqrt(np.diag(cov) / n)
    assert np.all(np.abs(flat.mean(0) - mean) <= 5 * se + 1e-10)
    var = np.diag(cov)
    se_cov = np.sqrt((np.outer(var, var) + cov**2) / n)
    assert np.all(np.abs(np.cov(flat.T) - cov) <= 5 * se_cov + 1e-10)
    assert np.all(np.isfinite(draws))
    if problem == "known-start":
        assert np.max(np.abs(draws[:, 0] - params.initial_means[hist[0]])) < 1e-12
    if singular:
        p = as_numpy(eff)
        for t in range(1, T):
            j = hist[t]
            w = draws[:, t] - draws[:, t - 1] @ p.dynamics_matrices[j].T - p.dynamics_biases[j]
            eig, vec = np.linalg.eigh(p.dynamics_covs[j])
            null = vec[:, eig < 1e-12 * eig.max()]
            assert null.shape[1] == 1
            assert np.max(np.abs(w @ null)) < 1e-9


def test_conditional_mode_draws_match_enumeration():
    """HMM FFBS of s | x, y: the law of 20000 draws matches p(s | x, y) enumerated over the 2^T
    histories with SciPy densities (marginals, and the joint of two steps), on a model whose
    two modes are close enough for the states not to pin them down."""
    params, y, _, _ = definite_problem()
    p = as_numpy(params)
    close = p._replace(
        initial_means=p.initial_means[[0, 0]] + [[0, 0], [0.3, 0]],
        dynamics_matrices=p.dynamics_matrices[[0, 0]] * [[[1.0]], [[0.9]]],
        dynamics_biases=p.dynamics_biases[[0, 0]] + [[0, 0], [0.2, -0.1]],
        dynamics_covs=p.dynamics_covs[[0, 0]] * [[[1.0]], [[1.5]]],
        emission_matrices=p.emission_matrices[[0, 0]],
        emission_covs=p.emission_covs[[0, 0]] * [[[1.0]], [[0.7]]],
    )
    _, states, _ = (np.asarray(a) for a in simulate(jax.random.key(9), close, T))
    model = _model(close, y)
    hists = np.array(list(itertools.product(range(2), repeat=T)))
    logs = np.array([log_joint_scipy(close, y, h, states) for h in hists])
    probs = np.exp(logs - logsumexp(logs))
    marg = probs @ hists
    assert np.sum((marg > 0.1) & (marg < 0.9)) >= 3  # the test has something to test
    n = 20_000
    fn = jax.jit(jax.vmap(gc.conditional_modes, (0, None, None, None)))
    keys = jax.random.split(jax.random.key(2), n)
    draws = np.asarray(fn(keys, jnp.asarray(states), model, _theta(close)))
    assert np.all(np.abs(draws.mean(0) - marg) <= 5 * np.sqrt(marg * (1 - marg) / n))
    both = probs @ (hists[:, 1] * hists[:, 2])
    freq = np.mean(draws[:, 1] * draws[:, 2])
    assert abs(freq - both) <= 5 * np.sqrt(both * (1 - both) / n)


# ----------------------------------------------------------------------------- densities, priors


PRIORS = SwitchingPriors(
    transition_concentration=np.array([[2.0, 1.0], [1.5, 3.0]]),
    dynamics_cov_scale=(2.0, 1.0),
    emission_cov_scale=(3.0, np.array([0.5, 2.0])),
)


@pytest.mark.parametrize("singular", [True, False])
def test_lp_matches_scipy(singular):
    """lp = log p(x, s, y, theta) against SciPy (degenerate Gaussians for singular Q, with the
    Dirichlet and inverse-gamma priors); without priors and summed over all histories it is
    ``switching_log_joint``'s log p(x, y) (PD Q)."""
    params, y, modes, states = singular_problem() if singular else definite_problem()
    model = _model(params, y)
    theta = _theta(params, trans=[[0.6, 0.4], [0.2, 0.8]], c=(0.7, 1.2), r=(1.5, 0.9))
    priors = sg._check_priors(PRIORS, 2, jnp.float64)
    log_joint = _log_joint_fn()
    got = float(log_joint(jnp.asarray(modes), jnp.asarray(states), model, theta, priors))
    eff = _effective(params, theta)
    want = log_joint_scipy(eff, y, modes, states, theta, PRIORS)
    np.testing.assert_allclose(got, want, rtol=1e-10)
    if not singular:
        hists = jnp.asarray(list(itertools.product(range(2), repeat=T)))
        each = jax.vmap(log_joint, (0, None, None, None, None))(
            hists, jnp.asarray(states), model, _theta(params), NO_PRIORS
        )
        np.testing.assert_allclose(
            logsumexp(np.asarray(each)), switching_log_joint(params, states, y), rtol=1e-10
        )


@pytest.mark.parametrize("singular", [True, False])
def test_conjugate_draws_match_closed_forms(singular):
    """theta | x, s, y over 4000 draws at a fixed (x, s) of T = 40: Pi[i, 0] ~ Beta(alpha_i +
    counts), c_j and r_j ~ the inverse-gamma of the module docstring (rank(Q_j) n_j / 2, Q_j^+),
    by Kolmogorov-Smirnov against SciPy; NaN rows do not count for r_j."""
    n_steps = 40
    params, y, modes, states = _problem(7 if singular else 8, singular, n_steps, (5, 17))
    model = _model(params, y)
    priors = sg._check_priors(PRIORS, 2, jnp.float64)
    theta = _theta(params)
    n = 4000
    draws = _parameters_fn()(
        jax.random.split(jax.random.key(3), n),
        jnp.asarray(modes),
        jnp.asarray(states),
        model,
        theta,
        priors,
    )
    p = as_numpy(params)
    counts = np.zeros((2, 2))
    for a, b in itertools.pairwise(modes):
        counts[a, b] += 1
    alpha = PRIORS.transition_concentration + counts
    for i in range(2):
        law = stats.beta(alpha[i, 0], alpha[i, 1])
        assert stats.kstest(np.asarray(draws.transition_matrix[:, i, 0]), law.cdf).pvalue > 1e-3
    np.testing.assert_allclose(draws.transition_matrix.sum(-1), 1.0, rtol=1e-12)
    seen = ~np.isnan(y).any(axis=1)
    for j in range(2):
        # c_j: w_t = x_t - F_j x_{t-1} - b_j over t >= 2 with s_t = j, Q_j^+ by NumPy
        ts = [t for t in range(1, n_steps) if modes[t] == j]
        w = states[ts] - states[np.array(ts) - 1] @ p.dynamics_matrices[j].T - p.dynamics_biases[j]
        q_pinv = np.linalg.pinv(p.dynamics_covs[j], rcond=1e-10, hermitian=True)
        rank = np.linalg.matrix_rank(p.dynamics_covs[j], tol=1e-10)
        assert rank == (1 if singular else 2)
        shape = 2.0 + rank * len(ts) / 2
        rate = 1.0 + 0.5 * np.einsum("ti,ij,tj->", w, q_pinv, w)
        law = stats.invgamma(shape, scale=rate)
        assert stats.kstest(np.asarray(draws.dynamics_cov_scale[:, j]), law.cdf).pvalue > 1e-3
        # r_j: v_t = y_t - H_j x_t over observed t with s_t = j
        ts = [t for t in range(n_steps) if modes[t] == j and seen[t]]
        v = y[ts] - states[ts] @ p.emission_matrices[j].T
        shape = 3.0 + 1 * len(ts) / 2
        rate = [0.5, 2.0][j] + 0.5 * np.einsum(
            "ti,ij,tj->", v, np.linalg.inv(p.emission_covs[j]), v
        )
        law = stats.invgamma(shape, scale=rate)
        assert stats.kstest(np.asarray(draws.emission_cov_scale[:, j]), law.cdf).pvalue > 1e-3


# ---------------------------------------------------------------- inputs, missing coordinates


INPUT_THETA = {"trans": [[0.65, 0.35], [0.3, 0.7]], "c": (0.8, 1.3), "r": (1.2, 0.7)}
FFBS_MODES = np.array([0, 1, 1, 0, 1, 0])
ALL_HISTORIES = np.array(list(itertools.product(range(2), repeat=T)))


def _input_problem_program(keys, histories, ffbs_modes, modes, states, data, theta, priors):
    """The internals the input-problem tests check, in one compiled program (``prepare_model`` of
    the checked ``data`` included): the collapsed conditionals log p(s_t | s_{-t}, theta, y)
    of every history (H, T, M), FFBS draws of x | ffbs_modes (keys, T, d), lp of (x, s) for
    every history s (H,), and the laws of theta | x, s at the simulated modes. The collapsed
    pass and FFBS run in ``lax.map`` loops: vmapped, they compile for seconds longer."""
    model = gc.prepare_model(*data)
    conditionals = jax.lax.map(
        lambda h: gc.collapsed_pass(keys[0], h, model, theta, False)[3], histories
    )
    draws = jax.lax.map(lambda k: gc.sample_states(k, ffbs_modes, model, theta), keys)
    lps = jax.vmap(gc.log_joint, (0, None, None, None, None))(
        histories, states, model, theta, priors
    )
    return conditionals, draws, lps, gc.parameter_laws(modes, states, model, theta, priors)


@functools.cache
def input_problem_results():
    """``_input_problem_program`` on ``input_problem`` at INPUT_THETA with PRIORS (20000 FFBS
    draws), as NumPy arrays; computed once for the tests below."""
    params, y, u, modes, states = input_problem()
    out = jax.jit(_input_problem_program)(
        jax.random.split(jax.random.key(6), 20_000),
        jnp.asarray(ALL_HISTORIES),
        jnp.asarray(FFBS_MODES),
        jnp.asarray(modes),
        jnp.asarray(states),
        sg._check_data(params, y, u),
        _theta(params, **INPUT_THETA),
        sg._check_priors(PRIORS, 2, jnp.float64),
    )
    return jax.tree.map(np.asarray, out)


def test_collapsed_conditionals_with_inputs_and_missing_coordinates():
    """With emission offsets, an input, two single missing coordinates and a missing row,
    p(s_t | s_{-t}, theta, y) of the backward information messages and forward candidates
    equals p(s, y) of ``switching_bruteforce`` normalised over s_t, for every one of the 2^T
    histories and every t."""
    params, y, u, _, _ = input_problem()
    eff = _effective(params, _theta(params, **INPUT_THETA))
    exact = enumerate_posterior(eff, y, inputs=u)
    np.testing.assert_array_equal(exact.histories, ALL_HISTORIES)
    conditionals = input_problem_results()[0]
    index = np.arange(len(ALL_HISTORIES))
    for t in range(T):
        bit = 1 << (T - 1 - t)  # histories in row-major order: s_t is this bit of the index
        logs = np.stack([exact.log_joint[index & ~bit], exact.log_joint[index | bit]], axis=-1)
        want = np.exp(logs - logsumexp(logs, axis=-1, keepdims=True))
        np.testing.assert_allclose(np.exp(conditionals[:, t]), want, rtol=0, atol=1e-8)


def test_ffbs_with_inputs_and_missing_coordinates():
    """20000 FFBS draws of x | s, y with offsets, an input and missing coordinates: mean and
    covariance (across steps too) within Monte Carlo error of the dense conditional, whose
    per-step moments are those of ``fixed_modes_smoother(..., inputs=u)``."""
    params, y, u, _, _ = input_problem()
    eff = _effective(params, _theta(params, **INPUT_THETA))
    mean, cov = states_given_modes(eff, y, FFBS_MODES, u)
    smoothed = fixed_modes_smoother(eff, y, FFBS_MODES, inputs=u)
    np.testing.assert_allclose(smoothed.mean, mean.reshape(T, 2), rtol=0, atol=1e-10)
    blocks = [cov[2 * t : 2 * t + 2, 2 * t : 2 * t + 2] for t in range(T)]
    np.testing.assert_allclose(smoothed.cov, np.stack(blocks), rtol=0, atol=1e-10)
    draws = input_problem_results()[1]
    n = len(draws)
    flat = draws.reshape(n, -1)
    assert np.all(np.abs(flat.mean(0) - mean) <= 5 * np.sqrt(np.diag(cov) / n))
    var = np.diag(cov)
    assert np.all(np.abs(np.cov(flat.T) - cov) <= 5 * np.sqrt((np.outer(var, var) + cov**2) / n))


def test_lp_with_inputs_and_missing_coordinates():
    """lp = log p(x, s, y_obs, theta) with offsets, an input and missing coordinates, for
    every history s: against SciPy densities of the observed sub-vectors, and summed over the
    histories against ``switching_bruteforce.log_joint_density`` (+ the log prior)."""
    params, y, u, _, states = input_problem()
    theta = _theta(params, **INPUT_THETA)
    eff = _effective(params, theta)
    lps = input_problem_results()[2]
    want = [log_joint_scipy(eff, y, h, states, theta, PRIORS, u) for h in ALL_HISTORIES]
    np.testing.assert_allclose(lps, want, rtol=1e-10)
    np.testing.assert_allclose(
        logsumexp(lps),
        log_joint_density(eff, states, y, inputs=u) + log_prior_scipy(theta, PRIORS),
        rtol=1e-10,
    )


def test_conjugate_laws_count_observed_coordinates():
    """The laws of theta | x, s, y with offsets, an input and missing coordinates, exactly:
    r_j ~ InvGamma(a + N_j / 2, b + sum v_o' R_j,oo^-1 v_o / 2) with N_j the observed
    coordinates of the steps in mode j (a partly missing row counts its observed one),
    v = y - H_j x - d_j - D_j u; c_j with w = x_t - F_j x_{t-1} - b_j - B_j u_t; the
    Dirichlet counts of Pi."""
    params, y, u, modes, states = input_problem()
    assert {modes[t] for t, _ in PARTLY_MISSING} == {0, 1}  # a partly missing row per mode
    p = as_numpy(params)
    concentration, dynamics, emission = input_problem_results()[3]
    counts = np.zeros((2, 2))
    for a, b in itertools.pairwise(modes):
        counts[a, b] += 1
    np.testing.assert_allclose(concentration, PRIORS.transition_concentration + counts, rtol=0)
    num_observed = []
    for j in range(2):
        ts = [t for t in range(1, T) if modes[t] == j]
        w = (
            states[ts]
            - states[np.array(ts) - 1] @ p.dynamics_matrices[j].T
            - p.dynamics_biases[j]
            - u[ts] @ p.dynamics_input_weights[j].T
        )
        law = [
            2.0 + 2 * len(ts) / 2,  # rank(Q_j) = 2
            1.0 + 0.5 * np.einsum("ti,ij,tj->", w, np.linalg.inv(p.dynamics_covs[j]), w),
        ]
        np.testing.assert_allclose(dynamics[:, j], law, rtol=1e-12)
        seen_count, quad = 0, 0.0
        for t in np.flatnonzero(modes == j):
            seen = np.flatnonzero(~np.isnan(y[t]))
            v = y[t] - p.emission_matrices[j] @ states[t] - p.emission_biases[j]
            v = (v - p.emission_input_weights[j] @ u[t])[seen]
            quad += v @ np.linalg.solve(p.emission_covs[j][np.ix_(seen, seen)], v)
            seen_count += seen.size
        law = [3.0 + seen_count / 2, [0.5, 2.0][j] + quad / 2]
        np.testing.assert_allclose(emission[:, j], law, rtol=1e-12)
        num_observed.append(seen_count)
    assert sum(num_observed) == np.sum(~np.isnan(y)) == 2 * T - 2 - len(PARTLY_MISSING)


# ----------------------------------------------------------------------------- chains


def _within_mcse(draws, exact, k=4.0):
    """|mean of the draws (chain, draw, ...) - exact| <= k MCSE (+ 1e-3 for near-constant ones)."""
    draws = np.asarray(draws, float)
    mcse = np.asarray(az.mcse(draws, chain_axis=0, draw_axis=1))
    err = np.abs(draws.mean(axis=(0, 1)) - exact)
    ok = err <= k * np.nan_to_num(mcse) + 1e-3
    assert np.all(ok), (err[~ok], mcse[~ok])


@pytest.mark.parametrize(
    ("mode_sampler", "singular"),
    [("collapsed", True), ("collapsed", False), ("conditional", False)],
)
def test_chains_match_exact_smoothing_posterior(mode_sampler, singular):
    """4 chains x 2000 draws on T = 6: P(s_t = 1 | y) and E[x_t | y] within 4 MCSE of the
    posterior enumerated over all mode histories (``switching_bruteforce``)."""
    params, y, _, _ = singular_problem() if singular else definite_problem()
    exact = enumerate_posterior(params, y)
    dt = _run(mode_sampler, singular)
    post = dt["posterior"]
    _within_mcse(post["modes"].values == 1, exact.smoothed_mode_probs[:, 1])
    _within_mcse(post["states"].values, exact.smoothed_mean)
    assert post.attrs["mode_sampler"] == mode_sampler


def test_datatree_layout():
    """Groups, names, dims and dtypes shared with the NUTS run of ``switching_model``."""
    dt = _run("collapsed", True)
    post = dt["posterior"]
    assert set(dt.children) == {"posterior", "sample_stats", "observed_data"}
    assert set(post.data_vars) == {"states", "modes"}
    assert post["states"].dims == ("chain", "draw", "time", "state_dim")
    assert post["states"].shape == (NUM_CHAINS, NUM_SAMPLES, T, 2)
    assert post["modes"].dims == ("chain", "draw", "time")
    assert np.issubdtype(post["modes"].dtype, np.integer)
    assert set(np.unique(post["modes"].values)) <= {0, 1}
    assert dt["sample_stats"]["lp"].dims == ("chain", "draw")
    assert np.all(np.isfinite(dt["sample_stats"]["lp"].values))
    assert dt["observed_data"]["observations"].dims == ("time", "obs_dim")
    assert np.isnan(dt["observed_data"]["observations"].values[MISSING_ROW]).all()
    for key in ("sampling_time", "sampler", "mode_sampler", "chain_method", "num_warmup"):
        assert key in post.attrs


def test_kernel_init_step_and_priors():
    """``switching_gibbs_init`` + ``switching_gibbs_step`` (BlackJAX style): init keeps the
    given modes, draws x | s, y and puts theta at ``params`` with lp = log p(x, s, y, theta);
    the step traces under ``jax.jit``, moves theta with priors and keeps it without; both mode
    samplers run through it."""
    params, y, _, _ = definite_problem()
    modes = np.array([0, 0, 1, 1, 1, 0])
    state = sg.switching_gibbs_init(jax.random.key(0), params, y, modes=modes, priors=PRIORS)
    np.testing.assert_array_equal(state.modes, modes)
    assert state.modes.dtype == jnp.int32 and state.states.shape == (T, 2)
    np.testing.assert_array_equal(state.transition_matrix, params.transition_matrix)
    np.testing.assert_array_equal(state.dynamics_cov_scale, 1.0)
    want = log_joint_scipy(params, y, modes, np.asarray(state.states), state, PRIORS)
    np.testing.assert_allclose(state.lp, want, rtol=1e-10)
    step = functools.partial(sg.switching_gibbs_step, priors=PRIORS)
    # traceable under jit (the value checks are skipped for tracers)
    shapes, info_shapes = jax.eval_shape(jax.jit(step), jax.random.key(0), state, params, y)
    assert jax.tree.map(lambda a: (a.shape, a.dtype), shapes) == jax.tree.map(
        lambda a: (a.shape, a.dtype), state
    )
    assert (
        info_shapes.num_mode_changes.shape == () and info_shapes.num_mode_changes.dtype == jnp.int32
    )
    # the step under jit equals the eager step, state and info
    eager = step(jax.random.key(3), state, params, y)
    jitted = jax.jit(step)(jax.random.key(3), state, params, y)
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-12), eager, jitted)
    for i in range(3):
        previous = state.modes
        state, info = step(jax.random.key(100 + i), state, params, y)
        assert int(info.num_mode_changes) == int(np.sum(np.asarray(state.modes) != previous))
    state, _ = step(jax.random.key(7), state, params, y, mode_sampler="conditional")
    assert np.isfinite(state.lp)
    assert not np.allclose(state.dynamics_cov_scale, 1.0)
    assert not np.allclose(state.transition_matrix, params.transition_matrix)
    fixed, _ = sg.switching_gibbs_step(jax.random.key(1), state, params, y)
    np.testing.assert_array_equal(fixed.dynamics_cov_scale, state.dynamics_cov_scale)
    np.testing.assert_array_equal(fixed.transition_matrix, state.transition_matrix)


def test_run_with_priors_has_parameter_draws():
    """With priors (and given initial modes) the posterior holds transition_matrix (mode_from,
    mode_to) and the two scales (mode); rows of Pi sum to one and the scales are positive."""
    params, y, _, _ = definite_problem()
    dt = sg.run_switching_gibbs(  # the sizes of ``_run``: the same compiled sampler
        jax.random.key(1),
        params,
        y,
        priors=PRIORS,
        num_warmup=10,
        num_samples=NUM_SAMPLES,
        num_chains=NUM_CHAINS,
        init_modes=np.zeros(T, int),
    )
    post = dt["posterior"]
    assert post["transition_matrix"].dims == ("chain", "draw", "mode_from", "mode_to")
    assert post["dynamics_cov_scale"].dims == ("chain", "draw", "mode")
    assert post["emission_cov_scale"].dims == ("chain", "draw", "mode")
    np.testing.assert_allclose(post["transition_matrix"].values.sum(-1), 1.0, rtol=1e-12)
    assert np.all(post["dynamics_cov_scale"].values > 0)
    assert np.all(post["emission_cov_scale"].values > 0)


def test_kernel_and_run_with_inputs():
    """The public kernel and run take ``inputs`` (offsets and an input at the sizes of the
    tests above, so the compiled samplers are reused): init and a collapsed step with priors
    give lp = log p(x, s, y, theta) of SciPy with the offsets; the chains match the exact
    smoothing posterior with the inputs; params with input weights need ``inputs``."""
    params, y, u = small_input_problem()
    modes = np.array([0, 1, 1, 0, 0, 1])
    key = jax.random.key(4)
    state = sg.switching_gibbs_init(key, params, y, modes=modes, priors=PRIORS, inputs=u)
    want = log_joint_scipy(params, y, modes, np.asarray(state.states), state, PRIORS, u)
    np.testing.assert_allclose(state.lp, want, rtol=1e-10)
    state, _ = sg.switching_gibbs_step(key, state, params, y, priors=PRIORS, inputs=u)
    want = log_joint_scipy(
        _effective(params, state), y, state.modes, np.asarray(state.states), state, PRIORS, u
    )
    np.testing.assert_allclose(state.lp, want, rtol=1e-10)
    dt = sg.run_switching_gibbs(
        jax.random.key(12),
        params,
        y,
        inputs=u,
        num_warmup=100,
        num_samples=NUM_SAMPLES,
        num_chains=NUM_CHAINS,
    )
    exact = enumerate_posterior(params, y, inputs=u)
    _within_mcse(dt["posterior"]["modes"].values == 1, exact.smoothed_mode_probs[:, 1])
    _within_mcse(dt["posterior"]["states"].values, exact.smoothed_mean)
    for call in (
        lambda: sg.switching_gibbs_init(key, params, y),
        lambda: sg.switching_gibbs_step(key, state, params, y),
        lambda: sg.run_switching_gibbs(key, params, y, inputs=u[:-1]),
    ):
        with pytest.raises(ValueError, match="^inputs: "):
            call()


# ----------------------------------------------------------------------------- bad input


def test_bad_input_errors():
    params, y, _, _ = singular_problem()
    key = jax.random.key(0)
    run = sg.run_switching_gibbs
    with pytest.raises(ValueError, match="^observations:"):
        run(key, params, y[:, None])
    with pytest.raises(ValueError, match="^observations:"):
        run(key, params, np.where(np.isnan(y), np.inf, y))
    with pytest.raises(ValueError, match="^mode_sampler:"):
        run(key, params, y, mode_sampler="gibbs")
    with pytest.raises(ValueError, match=r"^params\.dynamics_covs:.*positive definite"):
        run(key, params, y, mode_sampler="conditional")
    with pytest.raises(ValueError, match="^num_chains:"):
        run(key, params, y, num_chains=0)
    with pytest.raises(ValueError, match="^num_warmup:"):
        run(key, params, y, num_warmup=-1)
    with pytest.raises(ValueError, match="^init_modes:"):
        run(key, params, y, init_modes=np.full(T, 2))
    with pytest.raises(ValueError, match="^init_modes:"):
        run(key, params, y, init_modes=np.zeros((3, T), int), num_chains=4)
    with pytest.raises(ValueError, match="^init_modes:"):
        run(key, params, y, init_modes="filter")
    with pytest.raises(ValueError, match="^key:"):
        run(0, params, y)
    with pytest.raises(ValueError, match=r"^params\.transition_matrix:"):
        run(key, params._replace(transition_matrix=np.ones((2, 2))), y)
    with pytest.raises(ValueError, match="^priors:"):
        run(key, params, y, priors={"transition_concentration": np.ones((2, 2))})
    with pytest.raises(ValueError, match=r"^priors\.transition_concentration:"):
        run(key, params, y, priors=SwitchingPriors(transition_concentration=np.ones(2)))
    with pytest.raises(ValueError, match=r"^priors\.dynamics_cov_scale"):
        run(key, params, y, priors=SwitchingPriors(dynamics_cov_scale=(1.0, -1.0)))
    state = sg.switching_gibbs_init(key, params, y)
    with pytest.raises(ValueError, match="^state:"):
        sg.switching_gibbs_step(key, state._replace(states=state.states[:-1]), params, y)
    with pytest.raises(ValueError, match="^modes:"):
        sg.switching_gibbs_init(key, params, y, modes=np.zeros(T + 1, int))


def test_singular_emission_covs_are_refused():
    """A singular R_j (PSD, valid for the filters) is refused by init, step and run before any
    tracing: the r_j update and the backward messages need R_j^-1."""
    params, y, _, _ = definite_problem()
    covs = np.array(params.emission_covs)
    covs[1] = 0.0
    singular = params._replace(emission_covs=covs)
    key = jax.random.key(0)
    pattern = r"^params\.emission_covs: the Gibbs sampler needs positive definite .*mode\(s\) \[1\]"
    for call in (
        lambda: sg.switching_gibbs_init(key, singular, y),
        lambda: sg.switching_gibbs_step(key, _theta(params), singular, y),
        lambda: sg.run_switching_gibbs(key, singular, y),
    ):
        with pytest.raises(ValueError, match=pattern):
            call()


def test_non_finite_draws_are_refused_naming_the_step():
    """Explosive dynamics (F scaled by 1e100) observed once: the filtered variances overflow
    by step 3 and backward sampling carries the NaN to every step, so the run raises instead
    of returning the draws. (Moved here from the bad-input catalogue: at ``_run``'s sizes it
    reuses that compiled sampler.)"""
    params, y, _, _ = definite_problem()
    params = params._replace(dynamics_matrices=1e100 * np.asarray(params.dynamics_matrices))
    y = np.full_like(y, np.nan)
    y[0] = 0.5
    with pytest.raises(
        FloatingPointError, match=r"^run_switching_gibbs: non-finite .* step 1 of 6"
    ):
        sg.run_switching_gibbs(
            jax.random.key(0),
            params,
            y,
            num_warmup=2,
            num_samples=NUM_SAMPLES,
            num_chains=NUM_CHAINS,
        )


# ----------------------------------------------------------------------------- slow


@pytest.mark.slow
def test_maneuvering_target_converges():
    """The maneuvering-target scenario (T = 200, rank-2 Q): 4 chains of the collapsed sampler,
    R-hat < 1.01 on every state coordinate. Measured (2 shared cores): see the printout."""
    _, _, obs = simulate(jax.random.key(0), "maneuvering-target", 200)
    start = time.perf_counter()
    dt = sg.run_switching_gibbs(
        jax.random.key(1),
        maneuvering_target(),
        obs,
        num_warmup=1000,
        num_samples=6000,
        num_chains=4,
    )
    elapsed = time.perf_counter() - start
    diag = diagnostics(dt, ["states"])
    print(
        f"maneuvering T=200: {elapsed:.1f} s, max R-hat {diag.max_r_hat:.4f}, "
        f"min ESS bulk {diag.min_ess_bulk:.0f}"
    )
    assert diag.max_r_hat < 1.01


@pytest.mark.slow
def test_priors_agree_with_nuts():
    """With priors on Pi, c and r (PD Q, T = 20, a missing row): the posterior means of the
    states and the parameters from Gibbs and from NUTS on ``switching_model`` (modes
    marginalised) agree within 5 combined MCSE, under the same names and dims."""
    params, y, _, _ = _problem(12, singular_q=False, num_steps=20, missing=(7,))
    priors = SwitchingPriors(
        transition_concentration=np.array([[8.0, 2.0], [2.0, 8.0]]),
        dynamics_cov_scale=(5.0, 5.0),
        emission_cov_scale=(5.0, np.array([4.0, 6.0])),
    )
    start = time.perf_counter()
    gibbs = sg.run_switching_gibbs(
        jax.random.key(21), params, y, priors=priors, num_warmup=500, num_samples=4000
    )
    gibbs_time = time.perf_counter() - start
    nuts = run_nuts(
        jax.random.key(22),
        switching_model,
        (y,),
        {"params": params, "priors": priors},
        num_warmup=1000,
        num_samples=2000,
        num_chains=4,
        dims=switching_dims(priors),
        posterior_predictive=False,
    )
    print(f"gibbs {gibbs_time:.1f} s, nuts {nuts['posterior'].attrs['sampling_time']:.1f} s")
    for name in ("states", "transition_matrix", "dynamics_cov_scale", "emission_cov_scale"):
        g, n = gibbs["posterior"][name], nuts["posterior"][name]
        assert g.dims == n.dims
        se = np.hypot(
            np.asarray(az.mcse(g.values, chain_axis=0, draw_axis=1)),
            np.asarray(az.mcse(n.values, chain_axis=0, draw_axis=1)),
        )
        err = np.abs(g.values.mean(axis=(0, 1)) - n.values.mean(axis=(0, 1)))
        assert np.all(err <= 5 * se), (name, err / se)


# ----------------------------------------------------------------------------- bad input


def _gibbs(**kwargs):
    """``run_switching_gibbs`` on the tiny model with one short chain, ``kwargs`` overriding."""
    sizes = {"num_warmup": 1, "num_samples": 1, "num_chains": 1} | kwargs
    params, key = sizes.pop("params", P2), sizes.pop("key", KEY)
    return lambda: sg.run_switching_gibbs(key, params, Y_TINY, **sizes)


BAD_INPUT = [
    *entry_point_cases(
        "run_switching_gibbs",
        lambda p, y: sg.run_switching_gibbs(KEY, p, y, num_warmup=1, num_samples=1, num_chains=1),
        P2,
    ),
]
BAD_INPUT += [
    (f"run_switching_gibbs-{label}", call, ValueError, pattern)
    for label, (call, pattern) in {
        "key": (_gibbs(key=0), "^key: "),
        "num_samples-0": (_gibbs(num_samples=0), "^num_samples: "),
        "num_samples-float": (_gibbs(num_samples=2.0), "^num_samples: "),
        "num_chains-0": (_gibbs(num_chains=0), "^num_chains: "),
        "num_warmup-negative": (_gibbs(num_warmup=-1), "^num_warmup: "),
        "mode_sampler": (_gibbs(mode_sampler="x"), "^mode_sampler: "),
        "init_modes-name": (_gibbs(init_modes="x"), "^init_modes: "),
        "init_modes-range": (_gibbs(init_modes=[0, 5, 0]), "^init_modes: "),
        "init_modes-shape": (_gibbs(init_modes=[0, 1]), "^init_modes: "),
        "init_modes-fraction": (_gibbs(init_modes=[0.5, 0, 0]), "^init_modes: "),
        "init_modes-bool": (_gibbs(init_modes=np.array([True, False, True])), "^init_modes: "),
        "priors-type": (_gibbs(priors="x"), "^priors: "),
        "priors-shape": (
            _gibbs(priors=SwitchingPriors(np.ones((3, 3)))),
            r"^priors\.transition_concentration: ",
        ),
        "conditional-singular-q": (
            _gibbs(
                params=P2._replace(dynamics_covs=np.zeros((2, 2, 2))), mode_sampler="conditional"
            ),
            r"^params\.dynamics_covs: ",
        ),
    }.items()
]


@pytest.mark.usefixtures("full_tracebacks")
@parametrize_cases(BAD_INPUT)
def test_bad_input_raises_before_jax(call, error, pattern):
    """Every case refused before tracing (``switching_inputs``), naming the argument."""
    check_refused(call, error, pattern)
