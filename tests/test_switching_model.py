"""The switching state-space model's parameters, the maneuvering-target scenario and simulate."""

import jax
import numpy as np
import pytest

from models.switching import (
    SwitchingParams,
    check_params,
    coordinated_turn,
    maneuvering_target,
    simulate,
    white_noise_acceleration,
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
    from models.switching import _simulate

    arrays = SwitchingParams(*(jax.numpy.asarray(a) for a in params))
    return _simulate(key, arrays, 400)


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
        "emission_covs": np.zeros((2, 2, 2)),
        "dynamics_covs": -np.tile(np.eye(4), (2, 1, 1)),
        "dynamics_matrices": np.zeros((2, 3, 3)),
        "initial_means": np.full((2, 4), np.nan),
    }
    for field, value in bad.items():
        with pytest.raises(ValueError, match=f"^params.{field}"):
            simulate(jax.random.key(1), p._replace(**{field: value}), 5)
    with pytest.raises(ValueError, match="^params: expected a SwitchingParams"):
        check_params("params", tuple(p))
