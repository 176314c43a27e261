"""Switching linear-Gaussian state-space model (seed 3): parameters, scenarios and a simulator.

Model with M modes, state dimension d, observation dimension o, steps t = 1..T:

    s_1 ~ Cat(pi0),                   s_t | s_{t-1} = i ~ Cat(Pi[i, :])
    x_1 | s_1 = j ~ N(m0_j, P0_j)     (no prediction before the first update)
    x_t | x_{t-1}, s_t = j ~ N(F_j x_{t-1} + b_j, Q_j)
    y_t | x_t, s_t = j ~ N(H_j x_t, R_j)

Process noise covariances Q_j may be singular PSD (the discrete white-noise acceleration model
has rank 2 in 2-D); emission covariances R_j must be positive definite.

The NumPyro program and the filters are the subject of the switching issue; this module holds
the parameters, the named scenario ``"maneuvering-target"`` and ``simulate``.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from models import _checks


class SwitchingParams(NamedTuple):
    """Parameters of a switching linear-Gaussian state-space model (names as in dynamax).

    Attributes:
        initial_probs: (M,) P(s_1 = j).
        transition_matrix: (M, M), [i, j] = P(s_t = j | s_{t-1} = i); rows sum to one.
        initial_means: (M, d) mean of x_1 given s_1 = j.
        initial_covs: (M, d, d) covariance of x_1 given s_1 = j (PSD).
        dynamics_matrices: (M, d, d) F_j.
        dynamics_biases: (M, d) b_j.
        dynamics_covs: (M, d, d) Q_j (PSD, may be singular).
        emission_matrices: (M, o, d) H_j.
        emission_covs: (M, o, o) R_j (positive definite).
    """

    initial_probs: jax.Array
    transition_matrix: jax.Array
    initial_means: jax.Array
    initial_covs: jax.Array
    dynamics_matrices: jax.Array
    dynamics_biases: jax.Array
    dynamics_covs: jax.Array
    emission_matrices: jax.Array
    emission_covs: jax.Array


def _check_psd(name: str, covs: np.ndarray, *, definite: bool) -> None:
    """Each (d, d) matrix symmetric (to 1e-8 relative) and PSD (PD when ``definite``)."""
    scale = max(1.0, float(np.max(np.abs(covs))))
    if not np.allclose(covs, np.swapaxes(covs, -1, -2), atol=1e-8 * scale, rtol=0):
        raise ValueError(f"{name}: covariance matrices must be symmetric")
    eig = np.linalg.eigvalsh(covs)
    floor = -1e-8 * scale
    if definite and np.any(eig <= 0):
        raise ValueError(f"{name}: covariance matrices must be positive definite")
    if np.any(eig < floor):
        raise ValueError(f"{name}: covariance matrices must be positive semi-definite")


def check_params(name: str, params: SwitchingParams) -> SwitchingParams:
    """Validate shapes, probabilities and covariances; return the fields as float arrays.

    Raises ``ValueError`` naming ``name.field`` for the first problem found.
    """
    if not isinstance(params, SwitchingParams):
        raise ValueError(f"{name}: expected a SwitchingParams, got {type(params).__name__}")
    fields = {
        f: np.asarray(_checks.as_float_array(f"{name}.{f}", getattr(params, f)))
        for f in SwitchingParams._fields
    }
    for f, arr in fields.items():
        _checks.check_finite(f"{name}.{f}", arr)
    pi0, trans = fields["initial_probs"], fields["transition_matrix"]
    if pi0.ndim != 1 or pi0.shape[0] < 1:
        raise ValueError(f"{name}.initial_probs: expected shape (M,), got {pi0.shape}")
    m = pi0.shape[0]
    means = fields["initial_means"]
    if means.ndim != 2 or means.shape[0] != m:
        raise ValueError(f"{name}.initial_means: expected shape ({m}, d), got {means.shape}")
    d = means.shape[1]
    emis = fields["emission_matrices"]
    if emis.ndim != 3 or emis.shape[0] != m or emis.shape[2] != d:
        raise ValueError(
            f"{name}.emission_matrices: expected shape ({m}, o, {d}), got {emis.shape}"
        )
    o = emis.shape[1]
    expected = {
        "transition_matrix": (m, m),
        "initial_covs": (m, d, d),
        "dynamics_matrices": (m, d, d),
        "dynamics_biases": (m, d),
        "dynamics_covs": (m, d, d),
        "emission_covs": (m, o, o),
    }
    for f, shape in expected.items():
        if fields[f].shape != shape:
            raise ValueError(f"{name}.{f}: expected shape {shape}, got {fields[f].shape}")
    _checks.check_weights(f"{name}.initial_probs", pi0)
    if np.any(trans < 0) or not np.allclose(trans.sum(axis=1), 1.0, atol=1e-5):
        raise ValueError(
            f"{name}.transition_matrix: rows must be probability vectors "
            "([i, j] = P(s_t = j | s_{t-1} = i))"
        )
    _check_psd(f"{name}.initial_covs", fields["initial_covs"], definite=False)
    _check_psd(f"{name}.dynamics_covs", fields["dynamics_covs"], definite=False)
    _check_psd(f"{name}.emission_covs", fields["emission_covs"], definite=True)
    return SwitchingParams(**fields)


# ----------------------------------------------------------------------------- scenarios


def constant_velocity(dt: float = 1.0) -> np.ndarray:
    """(4, 4) F of the constant-velocity model on the state [px, vx, py, vy]."""
    return np.array([[1, dt, 0, 0], [0, 1, 0, 0], [0, 0, 1, dt], [0, 0, 0, 1]], dtype=float)


def coordinated_turn(turn_rate: float, dt: float = 1.0) -> np.ndarray:
    """(4, 4) F of the coordinated turn at ``turn_rate`` (rad per unit time), [px, vx, py, vy].

    The velocity rotates by omega dt and the position integrates the rotating velocity exactly:
    px' = px + (sin(w dt) vx - (1 - cos(w dt)) vy) / w, and likewise for py.
    """
    w = float(turn_rate)
    if w == 0.0:
        return constant_velocity(dt)
    s, c = np.sin(w * dt), np.cos(w * dt)
    return np.array(
        [
            [1, s / w, 0, -(1 - c) / w],
            [0, c, 0, -s],
            [0, (1 - c) / w, 1, s / w],
            [0, s, 0, c],
        ]
    )


def white_noise_acceleration(sigma_a: float, dt: float = 1.0) -> np.ndarray:
    """(4, 4) Q of the discrete white-noise acceleration model: per axis sigma_a^2 G G^T with
    G = [dt^2 / 2, dt]^T (Bar-Shalom et al. 2001, sec. 6.3.3); rank 2, singular PSD."""
    g = np.array([dt**2 / 2.0, dt])
    block = sigma_a**2 * np.outer(g, g)
    q = np.zeros((4, 4))
    q[:2, :2] = block
    q[2:, 2:] = block
    return q


def maneuvering_target(
    *,
    dt: float = 1.0,
    turn_rate_deg: float = 3.0,
    sigma_a: tuple[float, float] = (0.1, 0.5),
    measurement_sigma: float = 10.0,
) -> SwitchingParams:
    """The named scenario: a target on the plane, state [px, vx, py, vy], 2-D position measured.

    Mode 0 is constant velocity (sigma_a = 0.1), mode 1 a coordinated turn at 3 deg/s
    (sigma_a = 0.5); measurements have sigma = 10; Pi = [[.95, .05], [.10, .90]]. The first
    mode is drawn from Pi's stationary distribution (2/3, 1/3), and x_1 ~ N([0, 10, 0, 0],
    diag(100, 1, 100, 1)) in both modes: the target starts near the origin moving at 10 per
    step along the first axis.
    """
    trans = np.array([[0.95, 0.05], [0.10, 0.90]])
    stationary = np.array([2.0 / 3.0, 1.0 / 3.0])
    dyn = np.stack([constant_velocity(dt), coordinated_turn(np.deg2rad(turn_rate_deg), dt)])
    q = np.stack([white_noise_acceleration(s, dt) for s in sigma_a])
    h = np.array([[1.0, 0, 0, 0], [0, 0, 1.0, 0]])
    return SwitchingParams(
        initial_probs=stationary,
        transition_matrix=trans,
        initial_means=np.tile([0.0, 10.0, 0.0, 0.0], (2, 1)),
        initial_covs=np.tile(np.diag([100.0, 1.0, 100.0, 1.0]), (2, 1, 1)),
        dynamics_matrices=dyn,
        dynamics_biases=np.zeros((2, 4)),
        dynamics_covs=q,
        emission_matrices=np.stack([h, h]),
        emission_covs=np.tile(measurement_sigma**2 * np.eye(2), (2, 1, 1)),
    )


SCENARIOS = {"maneuvering-target": maneuvering_target}


def get_scenario(name: str, **kwargs) -> SwitchingParams:
    """A named scenario's parameters (see ``SCENARIOS``)."""
    if name not in SCENARIOS:
        raise ValueError(f"name: unknown scenario {name!r}; known: {list(SCENARIOS)}")
    return SCENARIOS[name](**kwargs)


# ----------------------------------------------------------------------------- simulation


def _psd_factor(covs):
    """L with L L^T = C for PSD C (singular allowed): eigendecomposition, negative round-off
    eigenvalues clipped to zero."""
    eig, vec = jnp.linalg.eigh(covs)
    return vec * jnp.sqrt(jnp.clip(eig, 0.0))[..., None, :]


@functools.partial(jax.jit, static_argnames=("num_steps",))
def _simulate(key, params: SwitchingParams, num_steps: int):
    key_s0, key_x0, key_steps = jax.random.split(key, 3)
    d = params.initial_means.shape[1]
    o = params.emission_matrices.shape[1]
    chol_p0 = _psd_factor(params.initial_covs)
    chol_q = _psd_factor(params.dynamics_covs)
    chol_r = _psd_factor(params.emission_covs)
    log_trans = jnp.log(params.transition_matrix)

    def emit(key, s, x):
        eps = jax.random.normal(key, (o,), x.dtype)
        return params.emission_matrices[s] @ x + chol_r[s] @ eps

    s1 = jax.random.categorical(key_s0, jnp.log(params.initial_probs))
    x1 = params.initial_means[s1] + chol_p0[s1] @ jax.random.normal(
        key_x0, (d,), params.initial_means.dtype
    )

    def step(carry, key):
        s, x = carry
        key_s, key_x, key_y = jax.random.split(key, 3)
        s_new = jax.random.categorical(key_s, log_trans[s])
        eps = jax.random.normal(key_x, (d,), x.dtype)
        x_new = params.dynamics_matrices[s_new] @ x + params.dynamics_biases[s_new]
        x_new = x_new + chol_q[s_new] @ eps
        return (s_new, x_new), (s_new, x_new, emit(key_y, s_new, x_new))

    keys = jax.random.split(key_steps, num_steps)
    y1 = emit(keys[0], s1, x1)
    _, (modes, states, obs) = jax.lax.scan(step, (s1, x1), keys[1:])
    modes = jnp.concatenate([s1[None], modes])
    states = jnp.concatenate([x1[None], states])
    obs = jnp.concatenate([y1[None], obs])
    return modes, states, obs


def simulate(key, params: SwitchingParams | str, num_steps: int):
    """Draw (modes (T,), states (T, d), observations (T, o)) from the model.

    ``params`` is a ``SwitchingParams`` or a scenario name. x_1 comes from the initial
    distribution of s_1 with no dynamics step before it; y_t is emitted under s_t.
    """
    _checks.check_key("key", key)
    if isinstance(params, str):
        params = get_scenario(params)
    params = check_params("params", params)
    num_steps = _checks.check_positive_int("num_steps", num_steps)
    arrays = SwitchingParams(*(jnp.asarray(a) for a in params))
    return _simulate(key, arrays, num_steps)


__all__ = [
    "SCENARIOS",
    "SwitchingParams",
    "check_params",
    "constant_velocity",
    "coordinated_turn",
    "get_scenario",
    "maneuvering_target",
    "simulate",
    "white_noise_acceleration",
]
