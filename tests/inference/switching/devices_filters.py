"""Device check for batched filtering (run by tests/run_devices.py): ``filter_batch`` gives the
same numbers on meshes of 1, 2 and 4 devices (to 1e-12) and the single-series ``imm_filter``'s
on every series (to 1e-12).

A tiny batch: 5 series (odd: two and four devices pad it to 6 and 8 with copies of the last
series, dropped from the result) of T = 12 steps of a two-mode model with a 2-D state (a
local level and its slope; calm and volatile modes) and a 1-D observation: random walks with
noise and a jump (NumPy draws), a missing row in one series and a missing stretch in another.
"""

import jax
import numpy as np

from attnbayes import sharding
from attnbayes.inference.switching.filters import check_filter_result, filter_batch, imm_filter
from attnbayes.models.switching import SwitchingParams

NUM_SERIES, NUM_STEPS = 5, 12


def _model() -> SwitchingParams:
    trend = np.array([[1.0, 1.0], [0.0, 1.0]])
    return SwitchingParams(
        initial_probs=np.array([0.8, 0.2]),
        transition_matrix=np.array([[0.95, 0.05], [0.2, 0.8]]),
        initial_means=np.zeros((2, 2)),
        initial_covs=np.tile(np.eye(2), (2, 1, 1)),
        dynamics_matrices=np.stack([trend, trend]),
        dynamics_biases=np.zeros((2, 2)),
        dynamics_covs=np.stack([np.diag([0.01, 0.001]), np.diag([1.0, 0.1])]),
        emission_matrices=np.tile(np.array([[1.0, 0.0]]), (2, 1, 1)),
        emission_covs=np.tile(0.25 * np.eye(1), (2, 1, 1)),
    )


def _series() -> np.ndarray:
    rng = np.random.default_rng(39)
    y = np.cumsum(rng.normal(0.0, 0.3, (NUM_SERIES, NUM_STEPS, 1)), axis=1)
    y[:, 7:] += 4.0 * rng.normal(size=(NUM_SERIES, 1, 1))  # a jump: the volatile mode
    y += rng.normal(0.0, 0.5, y.shape)
    y[1, 4] = np.nan
    y[3, 6:9] = np.nan
    return y


def _close(got, want, where):
    for field, a, b in zip(want._fields, got, want, strict=True):
        np.testing.assert_allclose(
            sharding.gather(a), b, rtol=1e-12, atol=1e-12, err_msg=f"{where}: {field}"
        )


def check(meshes):
    params = _model()
    y = _series()
    loop = [imm_filter(params, series) for series in y]
    stacked = jax.tree.map(lambda *v: np.stack(v), *loop)
    first = None
    for mesh in meshes:
        got = check_filter_result(filter_batch(params, y, mesh=mesh))
        where = f"{sharding.mesh_size(mesh)} device(s)"
        _close(got, stacked, f"{where} vs one series at a time")
        if first is None:
            first = got
        else:
            _close(got, first, f"{where} vs 1 device")
