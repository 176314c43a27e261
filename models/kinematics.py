"""Kinematic models of a target on the plane, state [px, vx, py, vy]: the dynamics matrices of
constant velocity and of the coordinated turn, and the process-noise covariances of the discrete
and continuous white-noise acceleration models (Bar-Shalom, Li and Kirubarajan 2001, Estimation
with Applications to Tracking and Navigation, ch. 6 and 11).

Plain NumPy matrices, no model of their own: ``attnbayes.models.switching.maneuvering_target``
builds the switching scenario from them (one constant-velocity mode, coordinated turns).
"""

from __future__ import annotations

import numpy as np


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


def continuous_white_noise_acceleration(sigma_a: float, dt: float = 1.0) -> np.ndarray:
    """(4, 4) Q of the continuous white-noise acceleration model (spectral density sigma_a^2):
    per axis sigma_a^2 [[dt^3/3, dt^2/2], [dt^2/2, dt]] (Bar-Shalom et al. 2001, sec. 6.2.2);
    full rank, so the states have a density given the modes."""
    block = sigma_a**2 * np.array([[dt**3 / 3.0, dt**2 / 2.0], [dt**2 / 2.0, dt]])
    q = np.zeros((4, 4))
    q[:2, :2] = block
    q[2:, 2:] = block
    return q


# the process-noise models of ``maneuvering_target``'s ``process_noise`` option, by name
PROCESS_NOISE = {
    "discrete": white_noise_acceleration,
    "continuous": continuous_white_noise_acceleration,
}


__all__ = [
    "PROCESS_NOISE",
    "constant_velocity",
    "continuous_white_noise_acceleration",
    "coordinated_turn",
    "white_noise_acceleration",
]
