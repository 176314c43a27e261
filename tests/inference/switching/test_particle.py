"""Rao-Blackwellised particle filter against the Kalman filter (M = 1) and against exact
filtering by enumeration (M = 2), within Monte Carlo error; its bad input is refused before
tracing, naming the argument (``switching_inputs``)."""

import jax
import numpy as np
import pytest
from raising import check_refused
from switching_bruteforce import enumerate_posterior, random_switching_params
from switching_inputs import (
    BAD_KEYS,
    KEY,
    P2,
    Y,
    entry_point_cases,
    parametrize_cases,
)

from attnbayes.inference.switching.kalman import FilterResult, kalman_filter
from attnbayes.inference.switching.particle import rbpf, systematic_resample

NUM_PARTICLES = 2500  # per run; the accuracy test averages REPLICATES runs
REPLICATES = 8


def test_rbpf_with_one_mode_is_the_kalman_filter():
    rng = np.random.default_rng(2)
    params = random_switching_params(rng, M=1, d=2, o=1, singular_q=True)
    y = 2.0 * rng.normal(size=(8, 1))
    y[3] = np.nan
    res = rbpf(jax.random.key(0), params, y, 16)
    kf = kalman_filter(params, y)
    assert isinstance(res, FilterResult)
    for k in ("mode_probs", "means", "covs", "mean", "cov"):
        np.testing.assert_allclose(getattr(res, k), getattr(kf, k), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(float(res.log_likelihood), float(kf.log_likelihood), rtol=1e-12)


def simulate_numpy(rng, params, num_steps):
    """Observations (T, o) drawn from the switching model (Q PD here)."""
    pi0, trans, m0, p0, f, b, q, h, r = (np.asarray(a) for a in params[:9])
    s = rng.choice(len(pi0), p=pi0)
    x = rng.multivariate_normal(m0[s], p0[s])
    ys = []
    for t in range(num_steps):
        if t > 0:
            s = rng.choice(len(pi0), p=trans[s])
            x = rng.multivariate_normal(f[s] @ x + b[s], q[s])
        ys.append(rng.multivariate_normal(h[s] @ x, r[s]))
    return np.array(ys)


@pytest.fixture(scope="module")
def two_mode_problem():
    """M = 2, d = 2, o = 1, T = 8 (simulated, one missing row) and its exact filter."""
    rng = np.random.default_rng(5)
    params = random_switching_params(rng, M=2, d=2, o=1)
    y = simulate_numpy(rng, params, 8)
    y[4] = np.nan
    return params, y, enumerate_posterior(params, y)


def test_rbpf_matches_exact_filter_within_monte_carlo_error(two_mode_problem):
    params, y, bf = two_mode_problem
    keys = jax.random.split(jax.random.key(1), REPLICATES)
    runs = [rbpf(k, params, y, NUM_PARTICLES) for k in keys]
    probs = np.stack([r.mode_probs[:, 1] for r in runs])  # (R, T)
    means = np.stack([r.mean for r in runs])  # (R, T, d)
    lls = np.array([float(r.log_likelihood) for r in runs])

    def check(name, est, exact):
        avg = est.mean(axis=0)
        se = est.std(axis=0, ddof=1) / np.sqrt(REPLICATES)
        z = np.abs(avg - exact) / np.maximum(se, 1e-12)
        print(
            f"{name:>10}: max |error| {np.abs(avg - exact).max():.2e}, max se {se.max():.2e}, "
            f"max |z| {np.max(np.where(np.abs(avg - exact) > 1e-9, z, 0)):.2f}"
        )
        np.testing.assert_array_less(np.abs(avg - exact), 5.0 * se + 1e-9)

    print(f"\nRBPF, {REPLICATES} runs x {NUM_PARTICLES} particles vs exact filtering, T = 8:")
    check("P(s_t=1)", probs, bf.filtered_mode_probs[:, 1])
    check("mean", means, bf.filtered_mean)
    check("log p(y)", lls, bf.log_likelihood)
    # each run on its own is close too
    assert np.abs(probs - bf.filtered_mode_probs[:, 1]).max() < 0.03
    assert np.abs(lls - bf.log_likelihood).max() < 0.05
    for r in runs:
        np.testing.assert_allclose(np.sum(r.mode_probs, axis=1), 1.0, rtol=1e-12)
        assert np.all(np.linalg.eigvalsh(np.asarray(r.covs)) > -1e-9)
    # never resampling (plain sequential importance sampling) and resampling at every step
    # (which does change the particles) are consistent too
    never = rbpf(keys[0], params, y, NUM_PARTICLES, ess_threshold=0.0)
    always = rbpf(keys[0], params, y, NUM_PARTICLES, ess_threshold=1.0)
    for r in (never, always):
        assert np.abs(r.mode_probs[:, 1] - bf.filtered_mode_probs[:, 1]).max() < 0.03
        assert abs(float(r.log_likelihood) - bf.log_likelihood) < 0.05
    assert np.abs(np.asarray(never.mean) - np.asarray(always.mean)).max() > 1e-6


def test_rbpf_finite_under_a_300_sigma_outlier(two_mode_problem):
    params, y, _ = two_mode_problem
    y = y.copy()
    y[5, 0] += 300.0 * np.sqrt(np.max(params.emission_covs))
    res = rbpf(jax.random.key(2), params, y, NUM_PARTICLES)
    for k in FilterResult._fields:
        assert np.all(np.isfinite(np.asarray(getattr(res, k)))), k
    np.testing.assert_allclose(np.sum(res.mode_probs, axis=1), 1.0, rtol=1e-12)
    assert float(res.log_likelihood) < -1e3


def test_rbpf_vmap_over_a_batch_of_series(two_mode_problem):
    params, y, _ = two_mode_problem
    batch = np.stack([y, y + 0.5, -y])
    keys = jax.random.split(jax.random.key(3), 3)
    out = jax.vmap(lambda k, obs: rbpf(k, params, obs, NUM_PARTICLES))(keys, batch)
    for i in range(3):
        one = rbpf(keys[i], params, batch[i], NUM_PARTICLES)
        for k in FilterResult._fields:
            np.testing.assert_allclose(
                getattr(out, k)[i], getattr(one, k), rtol=1e-9, atol=1e-12, err_msg=k
            )


def test_systematic_resample():
    log_w = np.array([np.log(0.5), -np.inf, np.log(0.25), np.log(0.25)])
    idx = np.asarray(systematic_resample(jax.random.key(0), log_w))
    assert idx.shape == (4,)
    np.testing.assert_array_equal(np.bincount(idx, minlength=4), [2, 0, 1, 1])


def test_rbpf_bad_input(two_mode_problem):
    params, y, _ = two_mode_problem
    key = jax.random.key(0)
    for bad in (0, 1.5, True, None):
        with pytest.raises(ValueError, match="^num_particles"):
            rbpf(key, params, y, bad)
    for bad in (-0.1, 1.5, "half", np.nan):
        with pytest.raises(ValueError, match="^ess_threshold"):
            rbpf(key, params, y, 10, ess_threshold=bad)
    with pytest.raises(ValueError, match="^observations: expected shape"):
        rbpf(key, params, y[:, None], 10)
    with pytest.raises(ValueError, match="^observations: expected shape"):
        rbpf(key, params, np.zeros((0, 1)), 10)
    with pytest.raises(ValueError, match="^key"):
        rbpf(0, params, y, 10)
    with pytest.raises(ValueError, match="^params.initial_probs"):
        rbpf(key, params._replace(initial_probs=np.array([0.7, 0.7])), y, 10)


# ----------------------------------------------------------------------------- bad input

BAD_INPUT = [
    *entry_point_cases("rbpf", lambda p, y: rbpf(KEY, p, y, 4), P2),
    *(
        (
            f"rbpf-num_particles-{n!r}",
            lambda n=n: rbpf(KEY, P2, Y, n),
            ValueError,
            "^num_particles: ",
        )
        for n in (0, -1, 2.5, True, None)
    ),
    *(
        (
            f"rbpf-ess_threshold-{e!r}",
            lambda e=e: rbpf(KEY, P2, Y, 4, ess_threshold=e),
            ValueError,
            "^ess_threshold: ",
        )
        for e in (-0.1, 1.5, np.nan, "half")
    ),
    *(
        (f"rbpf-key-{label}", lambda k=key: rbpf(k, P2, Y, 4), ValueError, "^key: ")
        for label, key in BAD_KEYS.items()
    ),
]


@pytest.mark.usefixtures("full_tracebacks")
@parametrize_cases(BAD_INPUT)
def test_bad_input_raises_before_jax(call, error, pattern):
    """Every case refused before tracing (``switching_inputs``), naming the argument."""
    check_refused(call, error, pattern)
