"""What each idea of the grid stack (version 2) buys: the shipped stack with one part switched off.

    python benchmarks/grid_stack_ablation.py [--tasks 64] [--sizes 100 500]

Regret (MSE - oracle MSE) of the shipped stack, and of the same stack with
- "no NPMLE input": gamma = 0 (the layers start from uniform weights, as EM does);
- "no layers": every layer the identity on the NPMLE start (a = 1, alpha = 0, eta = 1: the
  NPMLE is a fixed point of Kiefer-Wolfowitz EM);
- "no attention over priors": gate lambda = 0 (the learned discrete measure's posterior only);
- "no N-conditioning": the candidates' log N slopes c_r = 0;
- "EM start": ``init_grid_stack`` (the untrained stack, heteroscedastic EM);
against the NPMLE's and SURE's, on the training prior's families, heteroscedastic standard
errors from the training ``NoisePrior``, paired over the same tasks (mean and SE over tasks).
"""

from __future__ import annotations

import argparse
import time

import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

from attnbayes.inference.deconvolution import em, kiefer_wolfowitz, shrinkage  # noqa: E402
from attnbayes.inference.deconvolution.learned import grid_stack, grid_training  # noqa: E402
from attnbayes.inference.deconvolution.learned.training import FAMILIES, TaskPrior  # noqa: E402


def variants(params):
    layers, ro = params.layers, params.readout
    identity = layers._replace(
        mass_weight=jnp.ones_like(layers.mass_weight),
        pseudo_count=jnp.zeros_like(layers.pseudo_count),
        step=jnp.ones_like(layers.step),
    )
    return {
        "shipped": params,
        "no NPMLE input": params._replace(readout=ro._replace(npmle_trust=jnp.zeros(()))),
        "no layers": params._replace(layers=identity),
        "no attention over priors": params._replace(readout=ro._replace(gate=jnp.zeros(()))),
        "no N-conditioning": params._replace(
            readout=ro._replace(candidate_slope=jnp.zeros_like(ro.candidate_slope))
        ),
        "EM start": grid_stack.init_grid_stack(params.num_layers),
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=64)
    parser.add_argument("--sizes", type=int, nargs="+", default=[100, 500])
    args = parser.parse_args(argv)
    params, meta = grid_stack.pretrained_grid_stack(metadata=True)
    noise = grid_training.NoisePrior(meta["homoscedastic_prob"], meta["max_ratio"])
    prior = TaskPrior(min_points=meta["min_points"], max_points=meta["max_points"])
    start = time.perf_counter()
    names = list(variants(params))
    print("| family | N | " + " | ".join(names) + " | NPMLE | SURE |")
    print("|---|---|" + "---|" * (len(names) + 2))
    for family in FAMILIES:
        for n in args.sizes:
            tasks = grid_training.heldout_noisy_tasks(
                jax.random.PRNGKey(11), family, args.tasks, n, noise=noise, prior=prior
            )
            cells = []
            oracle = None
            for p in variants(params).values():
                mse, oracle = grid_training.grid_task_regret(p, tasks)
                cells.append(np.asarray(mse) - np.asarray(oracle))
            npmle, sure = [], []
            data = zip(
                np.asarray(tasks.x), np.asarray(tasks.sigma), np.asarray(tasks.z), strict=True
            )
            for x, s, z in data:
                fit = kiefer_wolfowitz.npmle(x, s)
                mean = np.asarray(em.posterior_mean(x, fit.atoms, fit.weights, s))
                npmle.append(np.mean((mean - z) ** 2))
                sure.append(np.mean((np.asarray(shrinkage.sure_shrinkage(x, s).z_hat) - z) ** 2))
            cells.append(np.asarray(npmle) - np.asarray(oracle))
            cells.append(np.asarray(sure) - np.asarray(oracle))
            text = [f"{c.mean():.4f} ({c.std(ddof=1) / np.sqrt(len(c)):.4f})" for c in cells]
            print(f"| {family} | {n} | " + " | ".join(text) + " |", flush=True)
    print(f"\n{args.tasks} tasks per cell, {time.perf_counter() - start:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
