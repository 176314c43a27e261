"""Regenerate the pretrained unrolled-EM stack shipped with attnbayes, and its model card.

    python scripts/train_pretrained_unrolled_em.py [--steps 3000] [--out DIR]

Trains ``train_unrolled_em`` from EM's parameters on the default ``TaskPrior`` (float64, seed
below), writes ``unrolled_em_v1.npz`` (atomically, with a checkpoint after every chunk) and
``MODEL_CARD.md`` with the held-out regret per family, which
``tests/inference/deconvolution/learned/test_unrolled.py`` reproduces from the shipped file.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import jax

jax.config.update("jax_enable_x64", True)

import numpy as np  # noqa: E402

from attnbayes.inference.deconvolution.learned import training, unrolled  # noqa: E402

SEED = 20261126
NUM_LAYERS = 6
BATCH_SIZE = 16
LEARNING_RATE = 1e-2
HELDOUT_SEED = 7
HELDOUT_TASKS = 64
HELDOUT_POINTS = 100
HERE = os.path.join(
    os.path.dirname(__file__), "..", "inference", "deconvolution", "learned", "pretrained"
)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=3000)
    parser.add_argument("--out", default=HERE)
    args = parser.parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, "unrolled_em_v1.npz")
    prior = training.TaskPrior()
    start = time.perf_counter()

    def progress(p: training.TrainProgress) -> None:
        unrolled.save_unrolled_em(path, p.params, {"step": p.step})
        print(
            f"step {p.step:5d}  train loss {p.train_loss:.4f}  held-out mse {p.heldout_loss:.4f}"
            f"  {time.perf_counter() - start:6.1f} s",
            flush=True,
        )

    result = training.train_unrolled_em(
        jax.random.PRNGKey(SEED),
        num_layers=NUM_LAYERS,
        prior=prior,
        num_steps=args.steps,
        batch_size=BATCH_SIZE,
        learning_rate=LEARNING_RATE,
        callback=progress,
    )
    seconds = time.perf_counter() - start
    rows = []
    em_params = unrolled.init_unrolled_em(NUM_LAYERS)
    for family in training.HELDOUT_FAMILIES:
        tasks = training.heldout_tasks(
            jax.random.PRNGKey(HELDOUT_SEED), family, HELDOUT_TASKS, HELDOUT_POINTS, prior
        )
        mse, oracle = training.task_regret(result.params, tasks)
        mse_em, _ = training.task_regret(em_params, tasks)
        rows.append(
            (
                family,
                float(np.mean(mse - oracle)),
                float(np.mean(mse_em - oracle)),
                float(np.mean(oracle)),
            )
        )
    metadata = {
        "seed": SEED,
        "num_steps": args.steps,
        "batch_size": BATCH_SIZE,
        "learning_rate": LEARNING_RATE,
        "train_seconds": round(seconds, 1),
        "heldout_seed": HELDOUT_SEED,
        "heldout_tasks": HELDOUT_TASKS,
        "heldout_points": HELDOUT_POINTS,
    }
    metadata.update({f"regret.{f}": r for f, r, _, _ in rows})
    unrolled.save_unrolled_em(path, result.params, metadata)
    with open(os.path.join(args.out, "MODEL_CARD.md"), "w") as handle:
        handle.write(model_card(prior, metadata, rows))
    print(f"wrote {path} after {seconds:.0f} s")
    return 0


def model_card(prior, metadata, rows) -> str:
    table = "\n".join(f"| {f} | {r:.6f} | {e:.6f} | {o:.6f} |" for f, r, e, o in rows)
    return f"""# Model card: pretrained unrolled-EM stack (`pretrained_unrolled_em()`)

An attention stack of {NUM_LAYERS} EM-like layers and a read-out
(`attnbayes.inference.deconvolution.learned.unrolled`), started at EM's parameters and trained as
amortised empirical Bayes on simulated deconvolution tasks. Regenerate with
`python scripts/train_pretrained_unrolled_em.py --steps {metadata["num_steps"]}`.

- **Units**: standardised by sigma: the stack sees x / sigma and returns the posterior mean and
  variance of z in x's units (sigma known).
- **Dimension**: scalar data (p = 1).
- **Task prior** (`TaskPrior()`): families {training.FAMILIES} with probabilities
  {prior.family_probs}; the DP family is the deconvolution model's truncated stick-breaking
  prior, alpha ~ Gamma({prior.dp_shape}, {prior.dp_rate}), G_0 = N(0, {prior.base_scale}^2),
  {prior.truncation} atoms.
- **N range**: {prior.min_points} to {prior.max_points} points per task in training (padded
  and masked); it runs at any N (streamed with `block_size`).
- **Training**: Adam, learning rate {metadata["learning_rate"]}, gradients clipped to norm 1,
  {metadata["num_steps"]} steps of {metadata["batch_size"]} tasks, seed {metadata["seed"]},
  float64, {metadata["train_seconds"]} s on 2 CPU cores.
- **Loss**: squared error of the posterior mean to z, plus 0.1 x the squared error of the
  variance to (z - mean)^2.

## Held-out regret

Mean over {metadata["heldout_tasks"]} tasks of N = {metadata["heldout_points"]} (key
`PRNGKey({metadata["heldout_seed"]})`, `heldout_tasks`) of MSE(method) - MSE(oracle Bayes rule),
in units of sigma^2. Families outside the training prior: {training.OUTSIDE_PRIOR}.

| family | learned stack | EM, {NUM_LAYERS} steps (the start) | oracle MSE |
|---|---|---|---|
{table}
"""


if __name__ == "__main__":
    sys.exit(main())
