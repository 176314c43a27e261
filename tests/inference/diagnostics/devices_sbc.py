"""Device check for simulation-based calibration (run by tests/run_devices.py): ``sbc`` gives
the same draws, ranks and PIT values, replicate for replicate, on meshes of 1, 2 and 4 devices
(``interval_coverage`` runs the same chunks: ``_run_replicates``); so does ``calibrate``'s NUTS
at the registry's settings, with another chunk size on each mesh.

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
from attnbayes.inference.calibration import calibrate
from attnbayes.inference.diagnostics import PosteriorDraws, sbc

KEY = jax.random.key(39)
N_OBS = 5
# with the replicates vmapped on each device, every one of the 6 differed between 1 and 2
# devices (and 3 of 24 between chunks of 24 and 12 on one device)
NUTS_REPLICATES = 6


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
    check_nuts(meshes)
    first = _results(meshes[0])
    assert np.all(first["ranks"] >= 0)  # no replicate failed
    for mesh in meshes[1:]:
        got = _results(mesh)
        for name, value in first.items():
            np.testing.assert_array_equal(
                got[name], value, err_msg=f"{name}, {sharding.mesh_size(mesh)} devices"
            )


def _nuts_results(mesh, chunk_size: int) -> dict[str, np.ndarray]:
    """NUTS on the registry's deconvolution study at its settings (2 chains x 300 + 300; an
    adaptive sampler, where an ulp of difference grows into other draws): per replicate, its
    ranks and the ESS of its draws."""
    tree = calibrate(
        jax.random.key(39),
        "deconvolution",
        "nuts",
        num_replicates=NUTS_REPLICATES,
        chunk_size=chunk_size,
        mesh=mesh,
    )
    assert tree.attrs["devices"] == sharding.mesh_size(mesh)
    found = {f"ranks of {n}": tree["ranks"][n].values for n in tree["ranks"].data_vars}
    return {**found, "ess": tree["replicates"]["ess"].values}


def check_nuts(meshes):
    first = _nuts_results(meshes[0], NUTS_REPLICATES)
    assert all(np.all(v >= 0) for n, v in first.items() if n != "ess")  # no replicate failed
    for mesh, chunk_size in zip(meshes[1:], (4, 3), strict=True):
        got = _nuts_results(mesh, chunk_size)
        for name, value in first.items():
            np.testing.assert_array_equal(
                got[name],
                value,
                err_msg=f"NUTS {name}, {sharding.mesh_size(mesh)} devices, chunks of {chunk_size}",
            )
