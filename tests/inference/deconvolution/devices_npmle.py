"""Device check for the streamed NPMLE (run by tests/run_devices.py): ``npmle`` and
``npmle_gradient`` with ``block_size`` give the same numbers on meshes of 1, 2 and 4 devices
(to 1e-12) and the dense path's (to 1e-10), with the same iteration counts.

A tiny 1-D problem, N = 37 (odd: the last device's rows are padded and masked), G = 20,
``block_size=8`` (several blocks a device on one device, one block on four). Per-unit scales
(sigma of shape (N,)) with mix-SQP (whose every product goes through the streamed operator:
KKT vector, Gram matrix, line search, vertex step); one scale with ``npmle_gradient`` (the
one-pass ``evaluate`` of EM and SQUAREM). (Each call compiles one program per mesh: the split
keeps the check to a few seconds; tests/inference/deconvolution/test_kiefer_wolfowitz.py runs
EM and SQUAREM streamed on 2 devices against the dense path.)
"""

import jax
import numpy as np

from attnbayes import sharding
from attnbayes.inference.deconvolution.kiefer_wolfowitz import npmle, npmle_gradient

N, G, BLOCK = 37, 20, 8
FIELDS = ("weights", "log_likelihood", "kkt_gap")


def _problem():
    rng = np.random.default_rng(5)
    z = rng.choice([0.0, 0.0, 2.5], size=N) + 0.3 * rng.normal(size=N)
    sigma = np.linspace(0.6, 1.4, N)
    x = z + sigma * rng.normal(size=N)
    return x, sigma, np.linspace(x.min(), x.max(), G)


def _results(x, sigma, grid, **stream):
    fit = npmle(x, sigma, grid=grid, tol=1e-9, **stream)
    w = np.linspace(1.0, 2.0, G)
    return fit, npmle_gradient(x, 1.0, grid, w / w.sum(), **stream)


def _compare(got, want, tol, where):
    a, b = got[0], want[0]
    assert int(a.num_iters) == int(b.num_iters), (where, a.num_iters, b.num_iters)
    assert bool(a.converged) == bool(b.converged), where
    for field in FIELDS:
        u, v = np.asarray(getattr(a, field)), np.asarray(getattr(b, field))
        scale = max(1.0, float(np.max(np.abs(v))))
        np.testing.assert_allclose(u, v, rtol=0, atol=tol * scale, err_msg=f"{where} {field}")
    np.testing.assert_allclose(got[1], want[1], rtol=0, atol=tol, err_msg=f"{where} gradient")


def check(meshes):
    x, sigma, grid = _problem()
    dense = _results(x, sigma, grid)
    assert bool(dense[0].converged) and int(dense[0].num_iters) > 1
    first = None
    for mesh in meshes:
        got = _results(x, sigma, grid, block_size=BLOCK, mesh=mesh)
        # replicated outputs: readable on every process without a gather
        for leaf in jax.tree.leaves(got):
            assert not isinstance(leaf, jax.Array) or leaf.is_fully_replicated
        where = f"{sharding.mesh_size(mesh)} device(s)"
        _compare(got, dense, 1e-10, f"{where} vs dense:")
        if first is None:
            first = got
        else:
            _compare(got, first, 1e-12, f"{where} vs 1 device:")
