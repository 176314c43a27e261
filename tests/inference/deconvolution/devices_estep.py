"""Device check for the streamed E-step (run by tests/run_devices.py): ``em_step``,
``log_likelihood``, ``posterior_mean`` and two ``fit_em`` iterations, streamed with
``block_size``, give the same numbers on meshes of 1, 2 and 4 devices (to 1e-12, relative to
the largest entry when above 1) and the dense path's (to 1e-10).

Two tiny 2-D problems, N = K = 37 (odd: the last device's rows are padded and masked): one
noise scale, and one per unit (sigma of shape (N,)) with one point 2,000 sigma from the rest,
whose tile takes the exact-maximum branch (its row sum underflows the shared shift) and the
pair-by-pair differences (outside the centred sums' reach), while the other tiles take the
fast one. ``block_size=16`` streams in tiles of rows against all atoms (K <= 16^2).
"""

import jax
import numpy as np

from attnbayes import sharding
from attnbayes.inference.deconvolution import em

N = 37
BLOCK = 16
ITERS = 2


def _problems():
    rng = np.random.default_rng(7)
    x = rng.normal(size=(N, 2))
    w = np.linspace(1.0, 2.0, N)
    w = w / w.sum()
    one = (x, x + 0.05, w, 0.6)
    far = x.copy()
    far[-1] = [2000.0 * 0.3, 0.0]
    per_unit = (far, far + 0.05, w, np.linspace(0.3, 0.9, N))
    return {"one sigma": one, "per unit": per_unit}


def _results(label, problem, **stream):
    """Each entry point once, the two noise forms shared out: one noise scale ``em_step`` and
    ``log_likelihood``; one per unit ``fit_em`` (two steps; its trace holds log p(x) at each)
    and ``posterior_mean``. (Every call compiles one program per mesh; tests/inference/
    deconvolution/test_em*.py run every entry point in both forms on 1 and 2 devices.)"""
    x, atoms, w, sigma = problem
    if label == "one sigma":
        return {
            "em_step": em.em_step(x, atoms, w, sigma, update_weights=True, **stream),
            "log_likelihood": em.log_likelihood(x, atoms, w, sigma, **stream),
        }
    fit = em.fit_em(x, sigma, max_iters=ITERS, tol=0.0, update_weights=True, **stream)
    return {
        "fit_em": (fit.atoms, fit.weights, fit.log_likelihood_trace),
        "posterior_mean": em.posterior_mean(x, atoms, w, sigma, **stream),
    }


def _compare(got, want, tol, where):
    for name in want:
        for a, b in zip(jax.tree.leaves(got[name]), jax.tree.leaves(want[name]), strict=True):
            a, b = np.asarray(sharding.gather(a)), np.asarray(sharding.gather(b))
            scale = max(1.0, float(np.max(np.abs(b))))
            np.testing.assert_allclose(a, b, rtol=0, atol=tol * scale, err_msg=f"{where} {name}")


def check(meshes):
    for label, problem in _problems().items():
        dense = _results(label, problem)
        first = None
        for mesh in meshes:
            got = _results(label, problem, block_size=BLOCK, mesh=mesh)
            where = f"{label}, {sharding.mesh_size(mesh)} device(s)"
            _compare(got, dense, 1e-10, f"{where} vs dense:")
            if first is None:
                first = got
            else:
                _compare(got, first, 1e-12, f"{where} vs 1 device:")
