"""Koenker & Mizera (2014), Table 2: the GMLEB rule on the Johnstone-Silverman design.

n = 1000 normal means, k in {5, 50, 500} of them equal to mu in {3, 4, 5, 7} and the rest 0;
x_i = z_i + N(0, 1), sigma = 1 known. GMLEB: the Kiefer-Wolfowitz NPMLE of the mixing measure
on 300 equally spaced points over [min x, max x] (``npmle``, mix-SQP, default tol 1e-6), then
the posterior mean of z_i under it (``npmle_posterior``). Loss: the total squared error
sum_i (z_hat_i - z_i)^2, averaged over replications, each with a fresh jax.random key; the
Monte Carlo standard error is sd / sqrt(reps). Their GMLEB rows: the NPMLE by an interior
point solver ("IP"), and by EM as in Jiang & Zhang (2009) ("EM", stopped early, hence worse).

    python benchmarks/koenker_mizera.py [--reps 100] [--seed 2014]
"""

from __future__ import annotations

import argparse
import time

import jax

jax.config.update("jax_enable_x64", True)

import numpy as np  # noqa: E402

from attnbayes.inference.deconvolution.kiefer_wolfowitz import npmle, npmle_posterior  # noqa: E402

N = 1000
SIGMA = 1.0
# (k, mu): (GMLEB interior point, GMLEB EM), Koenker & Mizera (2014), Table 2
KM_TABLE = {
    (5, 3): (33, 37),
    (5, 4): (30, 33),
    (5, 5): (16, 21),
    (5, 7): (8, 11),
    (50, 3): (153, 162),
    (50, 4): (107, 111),
    (50, 5): (51, 56),
    (50, 7): (11, 14),
    (500, 3): (454, 458),
    (500, 4): (276, 285),
    (500, 5): (127, 130),
    (500, 7): (18, 18),
}


def gmleb_losses(k, mu, reps, key):
    """Total squared errors of the GMLEB posterior mean over ``reps`` fresh noise draws.

    Returns (losses (reps,), iterations (reps,), number not converged).
    """
    z = np.where(np.arange(N) < k, float(mu), 0.0)
    losses, iters, unconverged = [], [], 0
    for rep in range(reps):
        noise = jax.random.normal(jax.random.fold_in(key, rep), (N,), dtype=np.float64)
        x = z + np.asarray(noise)
        fit = npmle(x, SIGMA)
        z_hat, _ = npmle_posterior(x, SIGMA, fit, probs=())
        losses.append(float(np.sum((np.asarray(z_hat) - z) ** 2)))
        iters.append(fit.num_iters)
        unconverged += not fit.converged
    return np.asarray(losses), np.asarray(iters), unconverged


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=100)
    parser.add_argument("--seed", type=int, default=2014)
    args = parser.parse_args()
    base = jax.random.PRNGKey(args.seed)
    rows = []
    start = time.perf_counter()
    for cell, ((k, mu), (ip, em)) in enumerate(KM_TABLE.items()):
        losses, iters, unconverged = gmleb_losses(k, mu, args.reps, jax.random.fold_in(base, cell))
        mean, se = losses.mean(), losses.std(ddof=1) / np.sqrt(args.reps)
        rows.append((k, mu, mean, se, ip, em, iters.mean(), unconverged))
        print(
            f"k = {k:3d}, mu = {mu}: {mean:7.1f} +- {se:4.1f} (IP {ip}, EM {em}); "
            f"{iters.mean():.1f} mix-SQP iterations, {unconverged} unconverged; "
            f"{time.perf_counter() - start:.0f} s",
            flush=True,
        )
    print()
    print(f"n = {N}, sigma = 1, {args.reps} replications per cell, seed {args.seed}.")
    print()
    print(
        "| k | mu | ours (mix-SQP) +- s.e. | KM GMLEB (IP) | KM GMLEB (EM) | (ours - IP) / s.e. |"
    )
    print("|---|---|---|---|---|---|")
    for k, mu, mean, se, ip, em, _, _ in rows:
        print(f"| {k} | {mu} | {mean:.1f} +- {se:.1f} | {ip} | {em} | {(mean - ip) / se:+.1f} |")


if __name__ == "__main__":
    main()
