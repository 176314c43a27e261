"""Attention inside a prediction model: pooling forecasters against classical one-step forecasts.

``compare_pooling_forecasters`` on real series shipped by statsmodels: yearly sunspots (309
values, window 20), the Nile's yearly flow (100 values, window 10) and the El Nino monthly sea
surface temperatures flattened to one series (732 values, window 24). The last 20% of each series
is the test part (one-step-ahead forecasts with the true past); every method fits on the rest.

Prints, per series, the table (RMSE, MAE on the test part, in-sample train RMSE, mean number of
non-zero attention weights), the training time per weight map (cold: the first call in the
process, compilation included; warm: a second call), the held-out loss at the end and at its
minimum over the Adam steps (overfitting), and for sunspots the learned prior importance and the
mean test weights, the test RMSE over --seeds starts, and the ablation with no basis functions
(weights independent of the data: a learned convex linear filter). float64, CPU.

    python benchmarks/attention_prediction.py [--steps 1000] [--seeds 5] [--skip-extra]
"""

from __future__ import annotations

import argparse
import time

import jax

jax.config.update("jax_enable_x64", True)

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import statsmodels.api as sm  # noqa: E402

from attnbayes.inference.attention import WEIGHT_MAPS  # noqa: E402
from attnbayes.inference.attention_prediction import (  # noqa: E402
    compare_pooling_forecasters,
    train_pooling_forecaster,
)

pd.set_option("display.width", 160)
pd.set_option("display.precision", 3)


def series_data():
    sunspots = sm.datasets.sunspots.load_pandas().data["SUNACTIVITY"].to_numpy(np.float64)
    nile = sm.datasets.nile.load_pandas().data["volume"].to_numpy(np.float64)
    elnino = sm.datasets.elnino.load_pandas().data.drop(columns="YEAR").to_numpy(np.float64)
    return {
        "sunspots (yearly)": (sunspots, 20, (1, 3, 6, 11)),
        "nile (yearly flow)": (nile, 10, (1, 3, 6, 11)),
        "elnino (monthly SST)": (elnino.ravel(), 24, (1, 3, 6, 12)),
    }


def report(name, x, window, ma_orders, steps, seeds):
    print(f"\n=== {name}: n = {len(x)}, window W = {window}, test = last {round(0.2 * len(x))}")
    start = time.perf_counter()
    r = compare_pooling_forecasters(x, window=window, seed=0, num_steps=steps, ma_orders=ma_orders)
    print(f"comparison: {time.perf_counter() - start:.1f} s in all")
    print(r.table.to_string(index=False))
    print(f"NW bandwidth (standardised units, {r.nw_lags} lags): {r.bandwidth:.3f};"
          f" AR order by AIC: {r.ar_order}")  # fmt: skip
    n_train = r.test_index[0]
    first = max(window, r.nw_lags, max(ma_orders), 12)
    for m in WEIGHT_MAPS:
        held = r.heldout_traces[m]
        line = (
            f"{m:>9}: train MSE {r.loss_traces[m][0]:.3f} -> {r.loss_traces[m][-1]:.3f}, "
            f"held-out MSE {held[0]:.3f} -> {held[-1]:.3f} (min {held.min():.3f} at step "
            f"{int(held.argmin())}), support {r.sparsity[m]:.2f} of {window}, "
            f"cold {r.fit_seconds[m]:.2f} s"
        )
        if first == window:  # the trainer's targets are the comparison's: compiled already
            t0 = time.perf_counter()
            jax.block_until_ready(
                train_pooling_forecaster(
                    jax.random.PRNGKey(0), x, window=window, weight_map=m, num_steps=steps
                )
            )
            line += f", warm {time.perf_counter() - t0:.2f} s ({steps} steps)"
        print(line)
    assert n_train == len(x) - round(0.2 * len(x))
    return r


def sunspot_details(x, r, window, steps, seeds):
    np.set_printoptions(precision=2, suppress=True, linewidth=150)
    for m in WEIGHT_MAPS:
        print(f"{m:>9} prior b (lag 1..{window}): {r.prior_importance[m]}")
        print(f"{'':>9} mean test weights:       {r.mean_weights[m]}")
        print(f"{'':>9} basis weights (value, slope, similarity, analog): "
              f"{np.asarray(r.params[m].basis_weights)}, head a, c, d = "
              f"{float(r.params[m].intercept):.2f}, {float(r.params[m].gain):.2f}, "
              f"{float(r.params[m].skip):.2f}")  # fmt: skip
    rows = []
    for seed in range(seeds):
        rs = compare_pooling_forecasters(x, window=window, seed=seed, num_steps=steps)
        rmse = rs.table.set_index("method").test_rmse
        rows.append({m: rmse[f"{m} pooling"] for m in WEIGHT_MAPS})
    seeds_table = pd.DataFrame(rows)
    print(f"\ntest RMSE of the pooling forecasters over {seeds} seeds (start of w):")
    print(seeds_table.describe().loc[["mean", "std", "min", "max"]].to_string())
    ablation = compare_pooling_forecasters(x, window=window, seed=0, num_steps=steps, num_basis=0)
    print("\nablation, num_basis = 0 (weights = weight_map(b): no data in the scores):")
    table = ablation.table[ablation.table.kind == "attention"]
    print(table.to_string(index=False))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--skip-extra", action="store_true", help="sunspots only")
    args = parser.parse_args()
    print(f"jax {jax.__version__}, {jax.devices()[0].platform}, Adam lr 0.02, {args.steps} steps")
    data = series_data()
    for name, (x, window, ma_orders) in data.items():
        r = report(name, x, window, ma_orders, args.steps, args.seeds)
        if name.startswith("sunspots"):
            sunspot_details(x, r, window, args.steps, args.seeds)
            if args.skip_extra:
                break


if __name__ == "__main__":
    main()
