"""The switching state-space model: parameters, scenario, simulate, the brute-force reference
(``switching_bruteforce``) and the NumPyro program against it; bad input to the scenarios, the
simulator and the program refused before tracing (``switching_inputs``)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from numpyro.handlers import seed, substitute, trace
from numpyro.infer import Predictive
from numpyro.infer.util import log_density
from raising import check_refused
from scipy import stats
from scipy.special import logsumexp
from switching_bruteforce import (
    enumerate_posterior,
    log_joint_density,
    log_posterior_density,
    random_switching_params,
)
from switching_inputs import (
    BAD_KEYS,
    KEY,
    P2,
    Y,
    bad_params,
    parametrize_cases,
)

from attnbayes.inference.switching.kalman import kalman_filter
from attnbayes.models.kinematics import coordinated_turn, white_noise_acceleration
from attnbayes.models.switching import (
    SwitchingParams,
    SwitchingPriors,
    check_params,
    check_priors,
    get_scenario,
    maneuvering_target,
    simulate,
    simulate_unchecked,
    switching_dims,
    switching_log_joint,
    switching_model,
)


def test_coordinated_turn_rotates_the_velocity_and_integrates_it():
    w = np.deg2rad(3.0)
    f = coordinated_turn(w, dt=1.0)
    state = np.array([5.0, 10.0, -2.0, 4.0])
    new = f @ state
    # the velocity rotates by w dt, its norm is kept
    rot = np.array([[np.cos(w), -np.sin(w)], [np.sin(w), np.cos(w)]])
    np.testing.assert_allclose(new[[1, 3]], rot @ state[[1, 3]], rtol=1e-14)
    # the position moves by the integral of the rotating velocity (fine Riemann sum)
    ts = (np.arange(200_000) + 0.5) / 200_000
    vel = np.stack(
        [np.cos(w * ts) * 10.0 - np.sin(w * ts) * 4.0, np.sin(w * ts) * 10.0 + np.cos(w * ts) * 4.0]
    )
    np.testing.assert_allclose(new[[0, 2]], state[[0, 2]] + vel.mean(axis=1), rtol=1e-9)
    np.testing.assert_array_equal(coordinated_turn(0.0), coordinated_turn(0.0, 1.0))


def test_white_noise_acceleration_is_rank_two_psd():
    q = white_noise_acceleration(0.5)
    eig = np.linalg.eigvalsh(q)
    assert np.sum(eig > 1e-12) == 2 and eig.min() > -1e-15
    np.testing.assert_allclose(q[:2, :2], 0.25 * np.array([[0.25, 0.5], [0.5, 1.0]]))


def test_maneuvering_target_params():
    p = check_params("params", maneuvering_target())
    np.testing.assert_allclose(p.transition_matrix, [[0.95, 0.05], [0.10, 0.90]])
    # the initial mode law is stationary under the transition matrix
    np.testing.assert_allclose(p.initial_probs @ p.transition_matrix, p.initial_probs)
    np.testing.assert_allclose(p.emission_covs[0], 100.0 * np.eye(2))


def test_simulate_shapes_and_laws():
    """Over 40 series of 400 steps: mode transition frequencies match Pi, x_1 matches the
    initial law, and y_t - H x_t has covariance R (within Monte Carlo error)."""
    params = maneuvering_target()
    keys = jax.random.split(jax.random.key(0), 40)
    modes, states, obs = jax.vmap(lambda k: simulate_jit(k, params))(keys)
    assert modes.shape == (40, 400) and states.shape == (40, 400, 4) and obs.shape == (40, 400, 2)
    modes, states, obs = np.asarray(modes), np.asarray(states), np.asarray(obs)
    prev, nxt = modes[:, :-1].ravel(), modes[:, 1:].ravel()
    for i in range(2):
        rows = nxt[prev == i]
        freq = np.mean(rows == 1 - i)
        p = params.transition_matrix[i, 1 - i]
        assert abs(freq - p) < 5 * np.sqrt(p * (1 - p) / rows.size), (i, freq)
    x1 = states[:, 0]
    assert np.all(np.abs(x1.mean(0) - [0, 10, 0, 0]) < 5 * np.sqrt(np.array([100, 1, 100, 1]) / 40))
    resid = obs - states[..., [0, 2]]
    cov = np.cov(resid.reshape(-1, 2).T)
    np.testing.assert_allclose(cov, 100 * np.eye(2), atol=5 * 100 * np.sqrt(2 / resid[..., 0].size))
    # in the constant-velocity mode with sigma_a = 0.1 the velocity barely changes
    cv = (modes[:, 1:] == 0).ravel()
    dv = (states[:, 1:, 1] - states[:, :-1, 1]).ravel()[cv]
    assert abs(dv.std() - 0.1) < 0.01


def simulate_jit(key, params):
    arrays = SwitchingParams(*(jax.numpy.asarray(a) for a in check_params("params", params)))
    return simulate_unchecked(key, arrays, jax.numpy.zeros((400, 0)))


def test_simulate_public_entry_and_bad_input():
    modes, states, obs = simulate(jax.random.key(1), "maneuvering-target", 5)
    assert modes.shape == (5,) and states.shape == (5, 4) and obs.shape == (5, 2)
    one = simulate(jax.random.key(1), "maneuvering-target", 1)
    assert one[0].shape == (1,)
    p = maneuvering_target()
    with pytest.raises(ValueError, match="^num_steps"):
        simulate(jax.random.key(1), p, 0)
    with pytest.raises(ValueError, match="^name"):
        simulate(jax.random.key(1), "bogus", 5)
    with pytest.raises(ValueError, match="^key"):
        simulate(3, p, 5)
    bad = {
        "transition_matrix": np.array([[0.9, 0.2], [0.1, 0.9]]),
        "initial_probs": np.array([0.5, 0.6]),
        "emission_covs": -np.tile(np.eye(2), (2, 1, 1)),
        "dynamics_covs": -np.tile(np.eye(4), (2, 1, 1)),
        "dynamics_matrices": np.zeros((2, 3, 3)),
        "initial_means": np.full((2, 4), np.nan),
    }
    for field, value in bad.items():
        with pytest.raises(ValueError, match=f"^params.{field}"):
            simulate(jax.random.key(1), p._replace(**{field: value}), 5)
    with pytest.raises(ValueError, match="^params: expected a SwitchingParams"):
        check_params("params", tuple(p))


# ----------------------------------------------------------------------------- brute force


def test_bruteforce_one_mode_is_the_kalman_filter():
    """M = 1 (singular Q, a missing row): the enumeration is dense Gaussian conditioning."""
    rng = np.random.default_rng(0)
    params = random_switching_params(rng, M=1, d=3, o=2, singular_q=True)
    y = rng.normal(size=(6, 2))
    y[2] = np.nan
    bf = enumerate_posterior(params, y)
    kf = kalman_filter(params, y)
    np.testing.assert_allclose(bf.filtered_mean, kf.mean, rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(bf.filtered_cov, kf.cov, rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(bf.filtered_means[:, 0], kf.mean, rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(bf.log_likelihood, float(kf.log_likelihood), rtol=1e-12)
    np.testing.assert_allclose(bf.filtered_mode_probs, 1.0)
    # the last smoothed marginal is the last filtered one
    np.testing.assert_allclose(bf.smoothed_mean[-1], bf.filtered_mean[-1], atol=1e-10)
    np.testing.assert_allclose(bf.smoothed_cov[-1], bf.filtered_cov[-1], atol=1e-10)


def test_bruteforce_two_modes_bookkeeping():
    rng = np.random.default_rng(1)
    params = random_switching_params(rng, M=2, d=2, o=1)
    y = rng.normal(size=(5, 1)) * 2.0
    y[3] = np.nan
    bf = enumerate_posterior(params, y)
    assert bf.histories.shape == (32, 5) and bf.log_joint.shape == (32,)
    assert bf.filtered_means.shape == (5, 2, 2) and bf.smoothed_covs.shape == (5, 2, 2, 2)
    np.testing.assert_allclose(bf.log_likelihood, logsumexp(bf.log_joint), rtol=1e-14)
    np.testing.assert_allclose(bf.filtered_mode_probs.sum(1), 1.0, rtol=1e-12)
    np.testing.assert_allclose(bf.smoothed_mode_probs.sum(1), 1.0, rtol=1e-12)
    # the smoothed mode marginals are sums of the history posteriors
    post = np.exp(bf.log_joint - bf.log_likelihood)
    for t in range(5):
        np.testing.assert_allclose(
            bf.smoothed_mode_probs[t, 1], post[bf.histories[:, t] == 1].sum()
        )
    for prefix in ("filtered", "smoothed"):
        probs, means = getattr(bf, f"{prefix}_mode_probs"), getattr(bf, f"{prefix}_means")
        covs, mean = getattr(bf, f"{prefix}_covs"), getattr(bf, f"{prefix}_mean")
        np.testing.assert_allclose(np.einsum("tj,tjd->td", probs, means), mean, atol=1e-12)
        dev = means - mean[:, None]
        total = np.einsum("tj,tjab->tab", probs, covs + dev[..., :, None] * dev[..., None, :])
        np.testing.assert_allclose(total, getattr(bf, f"{prefix}_cov"), atol=1e-12)
    # at the last step the smoothed marginals are the filtered ones
    for field in ("mode_probs", "means", "covs", "mean", "cov"):
        a, b = getattr(bf, f"smoothed_{field}")[-1], getattr(bf, f"filtered_{field}")[-1]
        np.testing.assert_allclose(a, b, atol=1e-12)


def test_bruteforce_identical_modes_carry_no_mode_information():
    """Two copies of one linear-Gaussian model: the mode posteriors are the prior marginals
    pi0 Pi^(t-1) and the state posteriors are the Kalman filter's."""
    rng = np.random.default_rng(2)
    one = random_switching_params(rng, M=1, d=2, o=1, singular_q=True)
    two = SwitchingParams(
        initial_probs=np.array([0.3, 0.7]),
        transition_matrix=np.array([[0.8, 0.2], [0.4, 0.6]]),
        **{f: np.repeat(getattr(one, f), 2, axis=0) for f in SwitchingParams._fields[2:9]},
    )
    y = rng.normal(size=(4, 1))
    bf = enumerate_posterior(two, y)
    prior = [two.initial_probs]
    for _ in range(3):
        prior.append(prior[-1] @ two.transition_matrix)
    np.testing.assert_allclose(bf.filtered_mode_probs, prior, rtol=1e-12)
    np.testing.assert_allclose(bf.smoothed_mode_probs, prior, rtol=1e-12)
    kf = kalman_filter(one, y)
    np.testing.assert_allclose(bf.filtered_means[:, 1], kf.mean, atol=1e-10)
    np.testing.assert_allclose(bf.filtered_cov, kf.cov, atol=1e-10)
    np.testing.assert_allclose(bf.log_likelihood, float(kf.log_likelihood), rtol=1e-12)


def test_bruteforce_densities_factorise():
    """log p(x, y) = log p(y) + log p(x | y), each side computed differently (PD Q)."""
    rng = np.random.default_rng(3)
    params = random_switching_params(rng, M=2, d=2, o=1)
    y = rng.normal(size=(4, 1))
    y[0] = np.nan
    x = rng.normal(size=(4, 2))
    lhs = log_joint_density(params, x, y)
    rhs = enumerate_posterior(params, y).log_likelihood + log_posterior_density(params, y, x)
    np.testing.assert_allclose(lhs, rhs, rtol=1e-11)


# ----------------------------------------------------------------------------- NumPyro program


def _log_density(y, values, **kwargs):
    """log density of ``switching_model(y, **kwargs)`` at the latent ``values``."""
    return log_density(switching_model, (y,), kwargs, values)[0]


def _series(rng, params, t=5, missing=(2,)):
    """(x (T, d), y (T, o)) random, with the ``missing`` rows of y set to NaN."""
    d, o = params.initial_means.shape[1], params.emission_matrices.shape[1]
    x = rng.normal(size=(t, d))
    y = 2.0 * rng.normal(size=(t, o))
    y[list(missing)] = np.nan
    return x, y


def test_switching_log_joint_equals_enumeration():
    """The forward algorithm against the sum over all 2^5 histories of dense Gaussians."""
    rng = np.random.default_rng(10)
    for o in (1, 2):
        params = random_switching_params(rng, M=2, d=2, o=o)
        x, y = _series(rng, params)
        got = float(switching_log_joint(params, x, y))
        np.testing.assert_allclose(got, log_joint_density(params, x, y), rtol=1e-10)
    # jit and vmap over a batch of state paths
    arrays = SwitchingParams(*(jnp.asarray(a) for a in check_params("params", params)))
    xs = np.stack([x, x + 0.3, x - 1.0])
    batch = jax.jit(jax.vmap(switching_log_joint, in_axes=(None, 0, None)))(arrays, xs, y)
    for k in range(3):
        np.testing.assert_allclose(batch[k], log_joint_density(params, xs[k], y), rtol=1e-10)
    # T = 1: no transition at all
    one = float(switching_log_joint(params, x[:1], y[:1]))
    np.testing.assert_allclose(one, log_joint_density(params, x[:1], y[:1]), rtol=1e-10)


def test_model_pins_the_exact_posterior():
    """log p(x, y) = log p(y) + log p(x | y), with p(y) and p(x | y) from the enumeration: the
    density NUTS targets over the states is the exact smoothing posterior."""
    rng = np.random.default_rng(11)
    params = random_switching_params(rng, M=2, d=2, o=1)
    x, y = _series(rng, params, t=5, missing=(1,))
    bf = enumerate_posterior(params, y)
    for point in (x, bf.smoothed_mean):
        lhs = float(_log_density(y, {"states": point}, params=params))
        rhs = bf.log_likelihood + log_posterior_density(params, y, point)
        np.testing.assert_allclose(lhs, rhs, rtol=1e-10)


def test_model_log_density_is_log_joint_plus_priors():
    rng = np.random.default_rng(12)
    params = random_switching_params(rng, M=2, d=2, o=1)
    x, y = _series(rng, params)
    priors = SwitchingPriors(
        transition_concentration=np.array([[4.0, 1.0], [0.5, 2.0]]),
        dynamics_cov_scale=(3.0, np.array([2.0, 1.5])),
        emission_cov_scale=(np.array([2.5, 4.0]), 3.0),
    )
    trans = rng.dirichlet([2.0, 2.0], size=2)
    c, r = np.array([0.7, 1.6]), np.array([1.3, 0.4])
    values = {
        "states": x,
        "transition_matrix": trans,
        "dynamics_cov_scale": c,
        "emission_cov_scale": r,
    }
    got = float(_log_density(y, values, params=params, priors=priors, jitter=0.01))
    scaled = params._replace(
        transition_matrix=trans,
        dynamics_covs=c[:, None, None] * params.dynamics_covs + 0.01 * np.eye(2),
        emission_covs=r[:, None, None] * params.emission_covs,
    )
    log_prior = sum(stats.dirichlet(a).logpdf(p) for a, p in zip(priors[0], trans, strict=True))
    log_prior += stats.invgamma(3.0, scale=[2.0, 1.5]).logpdf(c).sum()
    log_prior += stats.invgamma([2.5, 4.0], scale=3.0).logpdf(r).sum()
    want = float(switching_log_joint(scaled, x, y)) + log_prior
    np.testing.assert_allclose(got, want, rtol=1e-10)
    np.testing.assert_allclose(got, log_joint_density(scaled, x, y) + log_prior, rtol=1e-10)
    # every sample site is continuous: the modes are marginalised
    tr = trace(seed(substitute(switching_model, values), 0)).get_trace(
        y, params=params, priors=priors
    )
    sites = {k: v for k, v in tr.items() if v["type"] == "sample"}
    assert set(sites) == set(values) | {"log_joint"}
    assert not any(v["fn"].support.is_discrete for v in sites.values())
    assert switching_dims(priors) == {
        "states": ["time", "state_dim"],
        "transition_matrix": ["mode_from", "mode_to"],
        "dynamics_cov_scale": ["mode"],
        "emission_cov_scale": ["mode"],
    }
    assert switching_dims() == {"states": ["time", "state_dim"]}
    assert set(switching_dims(SwitchingPriors(emission_cov_scale=(1, 1)))) == {
        "states",
        "emission_cov_scale",
    }


def test_gradients_are_finite():
    rng = np.random.default_rng(13)
    params = random_switching_params(rng, M=2, d=2, o=2)
    x, y = _series(rng, params, missing=(0, 3))
    y[4, 1] = np.nan
    g = jax.grad(switching_log_joint, argnums=1)(params, x, y)
    assert g.shape == x.shape and np.all(np.isfinite(g))
    # against central differences
    eps = 1e-6
    for idx in [(0, 0), (2, 1), (4, 0)]:
        dx = np.zeros_like(x)
        dx[idx] = eps
        fd = (switching_log_joint(params, x + dx, y) - switching_log_joint(params, x - dx, y)) / (
            2 * eps
        )
        np.testing.assert_allclose(g[idx], fd, rtol=1e-6, atol=1e-6)
    priors = SwitchingPriors(np.full((2, 2), 2.0), (2.0, 2.0), (2.0, 2.0))
    values = {
        "states": jnp.asarray(x),
        "transition_matrix": jnp.array([[0.6, 0.4], [0.3, 0.7]]),
        "dynamics_cov_scale": jnp.array([1.1, 0.9]),
        "emission_cov_scale": jnp.array([0.8, 1.2]),
    }
    grads = jax.jit(jax.grad(lambda v: _log_density(y, v, params=params, priors=priors)))(values)
    for name, val in grads.items():
        assert np.all(np.isfinite(val)), name


def test_singular_process_noise_needs_jitter():
    """The maneuvering target's rank-2 Q: refused without jitter, Q + jitter I with it."""
    params = maneuvering_target()
    _, states, y = simulate(jax.random.key(3), params, 3)
    with pytest.raises(ValueError, match=r"^params.dynamics_covs: .*singular.*jitter > 0"):
        _log_density(y, {"states": states}, params=params)
    with pytest.raises(ValueError, match=r"^params.dynamics_covs: .*singular"):
        switching_log_joint(params, states, y)
    got = float(_log_density(y, {"states": states}, params=params, jitter=1e-3))
    jittered = params._replace(dynamics_covs=params.dynamics_covs + 1e-3 * np.eye(4))
    np.testing.assert_allclose(got, log_joint_density(jittered, states, y), rtol=1e-10)
    np.testing.assert_allclose(got, float(switching_log_joint(jittered, states, y)), rtol=1e-12)
    # the scenario name works too
    same = _log_density(y, {"states": states}, params="maneuvering-target", jitter=1e-3)
    np.testing.assert_allclose(float(same), got, rtol=1e-14)
    for bad in (-1.0, np.inf, "0.1", True):
        with pytest.raises(ValueError, match="^jitter"):
            _log_density(y, {"states": states}, params=params, jitter=bad)
    singular_p0 = jittered._replace(initial_covs=np.zeros((2, 4, 4)))
    with pytest.raises(ValueError, match="^params.initial_covs: .*singular"):
        _log_density(y, {"states": states}, params=singular_p0, jitter=1e-3)


def test_prior_predictive_draws():
    rng = np.random.default_rng(14)
    params = random_switching_params(rng, M=2, d=3, o=2, singular_q=True)
    priors = SwitchingPriors(np.ones((2, 2)), (3.0, 2.0), (3.0, 2.0))
    draws = Predictive(switching_model, num_samples=4, parallel=True)(
        jax.random.key(0), params=params, num_steps=6, priors=priors
    )
    shapes = {k: v.shape for k, v in draws.items()}
    assert shapes == {
        "transition_matrix": (4, 2, 2),
        "dynamics_cov_scale": (4, 2),
        "emission_cov_scale": (4, 2),
        "modes": (4, 6),
        "states": (4, 6, 3),
        "observations": (4, 6, 2),
    }
    assert set(np.unique(draws["modes"])) <= {0, 1}
    np.testing.assert_allclose(draws["transition_matrix"].sum(-1), 1.0, rtol=1e-12)
    assert np.all(np.isfinite(draws["observations"]))
    # the draws differ between samples, and no priors means only the simulated sites
    assert np.ptp(np.asarray(draws["states"][:, 0, 0])) > 0
    plain = trace(seed(switching_model, 1)).get_trace(params=params, num_steps=6)
    assert {k: (v["type"], v["value"].shape) for k, v in plain.items()} == {
        "modes": ("deterministic", (6,)),
        "states": ("deterministic", (6, 3)),
        "observations": ("deterministic", (6, 2)),
    }
    assert set(switching_dims(priors, prior_predictive=True)) == set(shapes)


def test_model_and_log_joint_bad_input():
    rng = np.random.default_rng(15)
    params = random_switching_params(rng, M=2, d=2, o=1)
    x, y = _series(rng, params)
    with pytest.raises(ValueError, match="^num_steps: required"):
        switching_model(params=params)
    with pytest.raises(ValueError, match="^num_steps: 4 does not match"):
        switching_model(y, params=params, num_steps=4)
    with pytest.raises(ValueError, match="^y: with y=None"), pytest.warns(UserWarning):
        switching_model(params=params, num_steps=3)
    with pytest.raises(ValueError, match="^y: expected shape"):
        switching_model(np.zeros((3, 2)), params=params)
    with pytest.raises(ValueError, match="^y: contains"):
        switching_model(np.array([[np.inf]]), params=params)
    with pytest.raises(ValueError, match="^params.emission_covs"):
        switching_model(y, params=params._replace(emission_covs=-params.emission_covs))
    with pytest.raises(ValueError, match="^states: expected shape"):
        switching_log_joint(params, x[:, :1], y)
    with pytest.raises(ValueError, match="^states: contains"):
        switching_log_joint(params, np.full_like(x, np.nan), y)
    with pytest.raises(ValueError, match="^states: has 4 steps"):
        switching_log_joint(params, x[:4], y)
    with pytest.raises(ValueError, match="^observations: expected shape"):
        switching_log_joint(params, x, y[:, 0])


@pytest.mark.parametrize(
    ("priors", "match"),
    [
        ((np.ones((2, 2)), None, None), "^priors: expected a SwitchingPriors"),
        (SwitchingPriors(np.ones((2, 3))), r"^priors.transition_concentration: expected shape"),
        (SwitchingPriors(np.array([[1.0, 0.0], [1, 1]])), r"^priors.transition_concentration: "),
        (SwitchingPriors(np.full((2, 2), np.nan)), r"^priors.transition_concentration: contains"),
        (SwitchingPriors(dynamics_cov_scale=2.0), r"^priors.dynamics_cov_scale: expected a pair"),
        (SwitchingPriors(dynamics_cov_scale=(2.0, -1.0)), r"^priors.dynamics_cov_scale\[1\]"),
        (SwitchingPriors(emission_cov_scale=(np.ones(3), 1.0)), r"^priors.emission_cov_scale\[0\]"),
        (SwitchingPriors(emission_cov_scale=(1.0, "a")), r"^priors.emission_cov_scale\[1\]"),
    ],
)
def test_priors_validation(priors, match):
    params = random_switching_params(np.random.default_rng(16), M=2, d=2, o=1)
    with pytest.raises(ValueError, match=match):
        switching_model(np.zeros((3, 1)), params=params, priors=priors)
    if isinstance(priors, SwitchingPriors):
        with pytest.raises(ValueError, match=match):
            check_priors("priors", priors, 2)


# ----------------------------------------------------------------------------- bad input

# scenarios, the simulator, the NumPyro program (issue 12): refused before tracing, naming the
# argument (``switching_inputs``)
BAD_INPUT = [
    (f"get_scenario-name-{label}", lambda n=name: get_scenario(n), ValueError, "^name: ")
    for label, name in {"unknown": "bogus", "int": 3, "list": ["x"], "none": None}.items()
]
BAD_INPUT += [
    (
        f"get_scenario-{option}-{value!r}",
        lambda o=option, v=value: get_scenario("maneuvering-target", **{o: v}),
        ValueError,
        f"^{option}: ",
    )
    for option, values in {
        "measurement_sigma": (0.0, -1.0, np.nan, np.inf, "10"),
        "dt": (0.0, -1.0, np.nan),
        "sigma_a": ((0.1,), (0.1, -1.0), (0.1, np.nan), "ab", 0.5),
        "turn_rate_deg": (np.nan, "3"),
        "turn_rates_deg": ((3.0, np.inf), "3", 3.0),
        "process_noise": ("bogus", None),
    }.items()
    for value in values
]
BAD_INPUT += [
    (
        "get_scenario-unknown-option",
        lambda: get_scenario("maneuvering-target", bogus=1),
        TypeError,
        "^bogus: not an option of scenario 'maneuvering-target'",
    ),
    *(
        (f"simulate-key-{label}", lambda k=key: simulate(k, P2, 3), ValueError, "^key: ")
        for label, key in BAD_KEYS.items()
    ),
    *(
        (f"simulate-num_steps-{n!r}", lambda n=n: simulate(KEY, P2, n), ValueError, "^num_steps: ")
        for n in (0, -3, 2.0, True, None)
    ),
    *(
        (f"simulate-params-{label}", lambda b=bad: simulate(KEY, b, 3), ValueError, pattern)
        for label, (bad, pattern) in bad_params(P2).items()
    ),
    (
        "switching_model-params-transition",
        lambda: switching_model(Y, params=bad_params(P2)["transition-rows-sum"][0]),
        ValueError,
        r"^params\.transition_matrix: ",
    ),
]


@pytest.mark.usefixtures("full_tracebacks")
@parametrize_cases(BAD_INPUT)
def test_bad_input_raises_before_jax(call, error, pattern):
    """Every case refused before tracing (``switching_inputs``), naming the argument."""
    check_refused(call, error, pattern)


def test_scenario_options_still_work():
    """The checks on maneuvering_target's options leave valid values alone."""
    three = get_scenario("maneuvering-target", turn_rates_deg=[3.0, -3.0], sigma_a=[0.2, 0.0])
    assert np.asarray(three.transition_matrix).shape == (3, 3)
    np.testing.assert_allclose(
        three.dynamics_covs[0],
        0.04 * get_scenario("maneuvering-target", sigma_a=(1.0, 1.0)).dynamics_covs[0],
    )
    one = get_scenario("maneuvering-target-cwna", turn_rates_deg=(), dt=np.float64(0.5))
    assert np.asarray(one.initial_probs).shape == (1,)
