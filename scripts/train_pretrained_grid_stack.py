"""Regenerate the pretrained grid stack (version 2) shipped with attnbayes, and its model card.

    python scripts/train_pretrained_grid_stack.py [--steps 3000] [--out DIR]

Trains ``train_grid_stack`` from heteroscedastic EM's parameters (``init_grid_stack``) on the
task prior below (float64, seed below), writes ``grid_stack_v2.npz`` (atomically, with a
checkpoint after every chunk) and ``MODEL_CARD_V2.md`` with the held-out regret per family,
homoscedastic and heteroscedastic, which
``tests/inference/deconvolution/learned/test_grid_stack.py`` reproduces from the shipped file.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import jax

jax.config.update("jax_enable_x64", True)

import numpy as np  # noqa: E402

from attnbayes.inference.deconvolution import em, kiefer_wolfowitz, shrinkage  # noqa: E402
from attnbayes.inference.deconvolution.learned import (  # noqa: E402
    grid_stack,
    grid_training,
    training,
)

SEED = 20261128
NUM_LAYERS = 4
BATCH_SIZE = 32
LEARNING_RATE = 1e-2
PRIOR = training.TaskPrior(min_points=20, max_points=400)
NOISE = grid_training.NoisePrior(homoscedastic_prob=0.4)
HELDOUT_SEED = 7
HELDOUT_TASKS = 64
HELDOUT_POINTS = 100
HERE = os.path.join(
    os.path.dirname(__file__), "..", "inference", "deconvolution", "learned", "pretrained"
)
NOISES = {"homoscedastic": grid_training.HOMOSCEDASTIC, "heteroscedastic": NOISE}


def heldout_rows(params):
    """Per noise kind and family: (noise, family, stack, EM L steps, NPMLE, SURE, oracle MSE)."""
    em_params = grid_stack.init_grid_stack(NUM_LAYERS)
    rows = []
    for kind, noise in NOISES.items():
        for family in training.HELDOUT_FAMILIES:
            tasks = grid_training.heldout_noisy_tasks(
                jax.random.PRNGKey(HELDOUT_SEED),
                family,
                HELDOUT_TASKS,
                HELDOUT_POINTS,
                noise=noise,
                prior=PRIOR,
            )
            mse, oracle = grid_training.grid_task_regret(params, tasks)
            mse_em, _ = grid_training.grid_task_regret(em_params, tasks)
            npmle, sure = [], []
            data = zip(
                np.asarray(tasks.x), np.asarray(tasks.sigma), np.asarray(tasks.z), strict=True
            )
            for x, s, z in data:
                fit = kiefer_wolfowitz.npmle(x, s)
                mean = np.asarray(em.posterior_mean(x, fit.atoms, fit.weights, s))
                npmle.append(np.mean((mean - z) ** 2))
                sure.append(np.mean((np.asarray(shrinkage.sure_shrinkage(x, s).z_hat) - z) ** 2))
            oracle = np.asarray(oracle)
            rows.append(
                (
                    kind,
                    family,
                    float(np.mean(np.asarray(mse) - oracle)),
                    float(np.mean(np.asarray(mse_em) - oracle)),
                    float(np.mean(np.asarray(npmle) - oracle)),
                    float(np.mean(np.asarray(sure) - oracle)),
                    float(np.mean(oracle)),
                )
            )
            print(f"{kind:16s} {family:13s} stack {rows[-1][2]:.4f} npmle {rows[-1][4]:.4f}")
    return rows


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=3000)
    parser.add_argument("--out", default=HERE)
    args = parser.parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, grid_stack.PRETRAINED_FILE)
    start = time.perf_counter()

    def progress(p: training.TrainProgress) -> None:
        grid_stack.save_grid_stack(path, p.params, {"step": p.step})
        print(
            f"step {p.step:5d}  train loss {p.train_loss:.4f}  held-out mse {p.heldout_loss:.4f}"
            f"  {time.perf_counter() - start:6.1f} s",
            flush=True,
        )

    result = grid_training.train_grid_stack(
        jax.random.PRNGKey(SEED),
        num_layers=NUM_LAYERS,
        prior=PRIOR,
        noise=NOISE,
        num_steps=args.steps,
        batch_size=BATCH_SIZE,
        learning_rate=LEARNING_RATE,
        callback=progress,
        callback_every=100,
    )
    seconds = time.perf_counter() - start
    rows = heldout_rows(result.params)
    metadata = {
        "seed": SEED,
        "num_layers": NUM_LAYERS,
        "num_steps": args.steps,
        "batch_size": BATCH_SIZE,
        "learning_rate": LEARNING_RATE,
        "train_seconds": round(seconds, 1),
        "min_points": PRIOR.min_points,
        "max_points": PRIOR.max_points,
        "homoscedastic_prob": NOISE.homoscedastic_prob,
        "max_ratio": NOISE.max_ratio,
        "grid_size": grid_stack.GRID_SIZE,
        "heldout_seed": HELDOUT_SEED,
        "heldout_tasks": HELDOUT_TASKS,
        "heldout_points": HELDOUT_POINTS,
    }
    metadata.update({f"regret.{kind}.{family}": r for kind, family, r, *_ in rows})
    grid_stack.save_grid_stack(path, result.params, metadata)
    with open(os.path.join(args.out, "MODEL_CARD_V2.md"), "w") as handle:
        handle.write(model_card(result.params, metadata, rows))
    print(f"wrote {path} after {seconds:.0f} s")
    return 0


def model_card(params, metadata, rows) -> str:
    table = "\n".join(
        f"| {k} | {f} | {r:.6f} | {e:.6f} | {n:.6f} | {s:.6f} | {o:.6f} |"
        for k, f, r, e, n, s, o in rows
    )
    ro = params.readout
    probs = ", ".join(f"{p:g}" for p in grid_stack.RHO_LADDER)
    return f"""# Model card: pretrained grid stack, version 2 (`pretrained_grid_stack()`)

Learned empirical Bayes for (x_i, s_i): {NUM_LAYERS} Kiefer-Wolfowitz-EM-like layers on a grid of
{metadata["grid_size"]} keys and a read-out that attends over priors from the NPMLE's to the normal
model's (`attnbayes.inference.deconvolution.learned.grid_stack`), started at heteroscedastic EM's
parameters and trained as amortised empirical Bayes on simulated tasks. Regenerate with
`python scripts/train_pretrained_grid_stack.py --steps {metadata["num_steps"]}`.

- **Inputs**: scalar x_i with a known standard error s_i each (or one for all); the stack
  standardises by the geometric mean of the s_i and is equivariant under x -> a x + b,
  s -> |a| s. Scalar data only (p = 1).
- **Classical inputs**: the NPMLE on the same grid (mix-SQP) and the normal hierarchical model's
  marginal MLE; learned trust in the NPMLE's start: {float(ro.npmle_trust):.3f}; gate of the
  read-out's mixture over priors (normal shares {probs}): {float(ro.gate):.3f}.
- **Task prior**: measures from `TaskPrior(min_points={metadata["min_points"]},
  max_points={metadata["max_points"]})` (families {training.FAMILIES} with probabilities
  {PRIOR.family_probs}), N ~ Uniform{{{metadata["min_points"]}..{metadata["max_points"]}}};
  standard errors from `NoisePrior(homoscedastic_prob={metadata["homoscedastic_prob"]},
  max_ratio={metadata["max_ratio"]})`: all equal with probability
  {metadata["homoscedastic_prob"]}, else log s_i ~ U(-h, h) with
  h ~ U(0, log({metadata["max_ratio"]:g}) / 2).
- **Training**: Adam, learning rate {metadata["learning_rate"]} (cosine decay), gradients clipped
  to norm 1, {metadata["num_steps"]} steps of {metadata["batch_size"]} tasks, seed
  {metadata["seed"]}, float64, {metadata["train_seconds"]} s on 2 CPU cores.
- **Loss**: squared error of the posterior mean to z, plus 0.1 x the squared error of the
  variance to (z - mean)^2.
- **Cost**: linear in N (one N x {metadata["grid_size"]} likelihood matrix); see BENCHMARKS.md
  for its time against the NPMLE's.

## Held-out regret

Mean over {metadata["heldout_tasks"]} tasks of N = {metadata["heldout_points"]} (key
`PRNGKey({metadata["heldout_seed"]})`, `heldout_noisy_tasks`) of MSE(method) - MSE(oracle Bayes
rule), in the tasks' units (geometric-mean standard error about 1). Heteroscedastic: standard
errors from the training `NoisePrior`. Families outside the training prior:
{training.OUTSIDE_PRIOR}. EM: {NUM_LAYERS} Kiefer-Wolfowitz EM steps on the grid (the start);
NPMLE: `npmle` (300-point grid) and its posterior mean; SURE: Xie-Kou-Brown's SURE shrinkage.

| noise | family | grid stack v2 | EM, {NUM_LAYERS} steps (the start) | NPMLE | SURE | oracle MSE |
|---|---|---|---|---|---|---|
{table}
"""


if __name__ == "__main__":
    sys.exit(main())
