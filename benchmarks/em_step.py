"""Attention-EM against a NumPy/SciPy reference implementation of the same EM.

Prints, for N in a range of sizes (K = N atoms, 1-D and 2-D, float64), the time per EM step
of the jitted JAX implementation (E-step as softmax attention) and of a plain NumPy
implementation (scipy.special.logsumexp), and their ratio, measured in one run so that the
ratio is meaningful on a shared machine. Also checks the two agree to 1e-10.

    python benchmarks/em_step.py [--sizes 500 1000 2000 4000] [--repeats 5]
"""

from __future__ import annotations

import argparse
import time

import jax

jax.config.update("jax_enable_x64", True)

import numpy as np  # noqa: E402
from scipy.special import logsumexp  # noqa: E402

from attnbayes.inference.deconvolution.em import em_step  # noqa: E402
from attnbayes.models.deconvolution import simulate  # noqa: E402


def numpy_em_step(x, atoms, weights, sigma):
    """The textbook EM step with Gaussian log-densities and a log-sum-exp normaliser."""
    sq = ((x[:, None, :] - atoms[None, :, :]) ** 2).sum(-1)
    log_r = np.log(weights)[None, :] - 0.5 * sq / sigma**2
    resp = np.exp(log_r - logsumexp(log_r, axis=1, keepdims=True))
    mass = resp.sum(0)
    return (resp.T @ x) / mass[:, None], weights


def best_time(fn, repeats):
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        out = fn()
        jax.block_until_ready(out)
        times.append(time.perf_counter() - start)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[500, 1000, 2000, 4000])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    print(f"{'measure':>12} {'N = K':>7} {'jax ms':>9} {'numpy ms':>9} {'numpy/jax':>9}")
    for name, sigma in (("three-atoms", 1.0), ("ring", 0.5)):
        for n in args.sizes:
            _, x = simulate(jax.random.PRNGKey(n), name, sigma, n)
            x2 = np.asarray(x).reshape(n, -1)
            w = np.full(n, 1.0 / n)
            em_step(x, x, w, sigma)  # compile once for this shape
            t_jax = best_time(lambda x=x, w=w, s=sigma: em_step(x, x, w, s), args.repeats)
            t_np = best_time(lambda x2=x2, w=w, s=sigma: numpy_em_step(x2, x2, w, s), args.repeats)
            a_jax = np.asarray(em_step(x, x, w, sigma)[0]).reshape(n, -1)
            a_np = numpy_em_step(x2, x2, w, sigma)[0]
            np.testing.assert_allclose(a_jax, a_np, rtol=0, atol=1e-10)
            print(f"{name:>12} {n:7d} {1e3 * t_jax:9.2f} {1e3 * t_np:9.2f} {t_np / t_jax:9.1f}")


if __name__ == "__main__":
    main()
