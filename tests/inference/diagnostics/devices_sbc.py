"""Device check for simulation-based calibration (run by tests/run_devices.py): ``sbc`` gives
the same draws, ranks and PIT values, replicate for replicate, on meshes of 1, 2 and 4 devices
(``interval_coverage`` runs the same chunks: ``_run_replicates``).

The conjugate normal model of ``test_sbc.py`` (mu ~ N(0, 1), y_i | mu ~ N(mu, 1), i = 1..5),
its posterior N(sum y / 6, 1 / 6) sampled exactly (the cheapest sampler ``sbc`` can take: no
warmup, no adaptation): 13 replicates in chunks of 5, so the chunks (5, 5, 3) are padded to
8 on four devices and to 6 on two, and the "auto" thinning's pilot (the first 13 replicates)
spans three chunks. The ranks are random (ties broken with NumPy generators seeded per
replicate), the PIT values too: equal only if every replicate saw the same draws. The
per-replicate ESS of the draws (float64) is compared exactly as well, a fingerprint of the
draws themselves.
"""

import jax
import jax.numpy as jnp
import numpy as np

from attnbayes import sharding
from attnbayes.inference.diagnostics import PosteriorDraws, sbc

KEY = jax.random.key(39)
N_OBS = 5


def _simulate(key):
    k_mu, k_y = jax.random.split(key)
    mu = jax.random.normal(k_mu)
    return {"mu": mu}, {"y": mu + jax.random.normal(k_y, (N_OBS,))}


def _posterior(key, data):
    mean = jnp.sum(data["y"]) / (N_OBS + 1)
    draws = mean + jax.random.normal(key, (2, 40)) / jnp.sqrt(N_OBS + 1.0)
    return PosteriorDraws({"mu": draws}, jnp.zeros((), jnp.int32))


def _quantities(values, data):
    return {"mu": values["mu"]}


def _results(mesh) -> dict[str, np.ndarray]:
    ranks = sbc(
        KEY,
        _simulate,
        _posterior,
        _quantities,
        num_replicates=13,
        chunk_size=5,
        thin="auto",
        mesh=mesh,
    )
    assert ranks.attrs["devices"] == sharding.mesh_size(mesh)
    return {
        "truth": ranks["truth"]["mu"].values,
        "ranks": ranks["ranks"]["mu"].values,
        "pit": ranks["prior_sbc"]["mu"].values,
        "ess": ranks["replicates"]["ess"].values,
        "thin": np.asarray(ranks.attrs["thin"]),
    }


def check(meshes):
    first = _results(meshes[0])
    assert np.all(first["ranks"] >= 0)  # no replicate failed
    for mesh in meshes[1:]:
        got = _results(mesh)
        for name, value in first.items():
            np.testing.assert_array_equal(
                got[name], value, err_msg=f"{name}, {sharding.mesh_size(mesh)} devices"
            )
