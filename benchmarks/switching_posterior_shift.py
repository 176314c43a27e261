"""How far the GPB2 and IMM likelihoods move the posterior of theta, and NUTS over theta against
the Gibbs sampler in ESS per second.

theta = (Pi, c_j, r_j): the transition matrix and the scales of Q_j = c_j Q0_j and
R_j = r_j R0_j (the parameters the Gibbs sampler draws), priors Dirichlet(1 + 9 I) rows and
InverseGamma(3, 2) scales in both samplers (``study_priors``). Two models, each simulated once
(seed 0):

- "maneuvering-target-cwna" (M = 2, d = 4, o = 2; constant velocity / 3 deg/s turn, the
  full-rank continuous white-noise acceleration Q);
- a 1-D model (M = 2, d = o = 1): x_t = F_j x_{t-1} + N(0, Q_j), F = (0.95, 0.5),
  Q = (0.1, 1.0), y_t = x_t + N(0, 0.3), Pi = [[.95, .05], [.10, .90]].

For each, ``posterior_shift`` on

(a) the first T_short steps (8 for the target, 10 for the 1-D model): NUTS over theta with the
    GPB2 and IMM likelihoods and the Gibbs sampler, against NUTS with the exact likelihood (all
    2^T mode histories);
(b) T = 200 steps: NUTS with GPB2 and IMM against the Gibbs sampler (exact);

each reference twice (different seeds): the "-repeat" column is the Monte Carlo noise floor.
Per parameter: shift = (posterior mean - reference mean) / reference sd (+- its MCSE), sd ratio
(+- MCSE) and W1 (1-D Wasserstein distance between the draws, in reference sd). Then, at T = 200,
NUTS over theta (IMM likelihood) against Gibbs: min bulk ESS over theta per wall second, with
the first call (compilation included) and a second call of the same compiled sampler
(compilation excluded). float64, two host devices (NUTS runs its 2 chains in parallel; the
Gibbs chains are vectorised).

    python benchmarks/switching_posterior_shift.py [--short-steps 8] [--short-steps-1d 10]
        [--long-steps 200] [--nuts 300 400 2] [--gibbs-short 1000 5000 4]
        [--gibbs-long 1000 15000 4]

(--nuts and --gibbs-*: warmup, draws per chain, chains.) About 13 minutes on a shared 2-core
machine, a third of it NUTS with the exact likelihood of the target at T = 8 (2^8 Kalman
filters per gradient).
"""

from __future__ import annotations

import argparse
import os
import time

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=2")

import jax

jax.config.update("jax_enable_x64", True)

import numpy as np  # noqa: E402

from attnbayes.inference.diagnostics import diagnostics  # noqa: E402
from attnbayes.inference.switching.learning import (  # noqa: E402
    GIBBS_FREE,
    posterior_shift,
    sample_theta_posterior,
)
from attnbayes.models.switching import SwitchingParams, get_scenario, simulate  # noqa: E402

# Pi[i, i] is 1 - Pi[i, 1 - i] (M = 2): one entry per row is shown
SHOWN = (
    "transition_matrix[0,1]",
    "transition_matrix[1,0]",
    "dynamics_cov_scale[0]",
    "dynamics_cov_scale[1]",
    "emission_cov_scale[0]",
    "emission_cov_scale[1]",
)
SHORT_NAMES = {
    "transition_matrix[0,1]": "Pi[0,1]",
    "transition_matrix[1,0]": "Pi[1,0]",
    "dynamics_cov_scale[0]": "c[0]",
    "dynamics_cov_scale[1]": "c[1]",
    "emission_cov_scale[0]": "r[0]",
    "emission_cov_scale[1]": "r[1]",
}


def one_dimensional() -> SwitchingParams:
    """The small 1-D model (module docstring); s_1 from Pi's stationary law (2/3, 1/3)."""
    return SwitchingParams(
        initial_probs=np.array([2.0 / 3.0, 1.0 / 3.0]),
        transition_matrix=np.array([[0.95, 0.05], [0.10, 0.90]]),
        initial_means=np.zeros((2, 1)),
        initial_covs=np.ones((2, 1, 1)),
        dynamics_matrices=np.array([[[0.95]], [[0.5]]]),
        dynamics_biases=np.zeros((2, 1)),
        dynamics_covs=np.array([[[0.1]], [[1.0]]]),
        emission_matrices=np.ones((2, 1, 1)),
        emission_covs=np.full((2, 1, 1), 0.3),
    )


def _sizes(values):
    warmup, samples, chains = values
    return {"num_warmup": warmup, "num_samples": samples, "num_chains": chains}


def print_shift(title: str, out) -> None:
    print(f"\n{title}")
    runs = list(dict.fromkeys(out.table["method"]))
    width = 26
    print(f"{'':>8}{'reference':>16}" + "".join(f"{run:>{width}}" for run in runs))
    print(
        f"{'':>8}{'mean (sd)':>16}"
        + "".join(f"{'shift+-mcse  sdratio   W1':>{width}}" for _ in runs)
    )
    table = out.table.set_index(["method", "parameter"])
    for parameter in SHOWN:
        ref = table.loc[(runs[0], parameter)]
        cells = [f"{ref['ref_mean']:.3f} ({ref['ref_sd']:.3f})"]
        for run in runs:
            row = table.loc[(run, parameter)]
            cells.append(
                f"{row['shift']:+6.2f}+-{row['shift_mcse']:4.2f} {row['sd_ratio']:6.2f} "
                f"{row['w1']:5.2f}"
            )
        print(
            f"{SHORT_NAMES[parameter]:>8}{cells[0]:>16}"
            + "".join(f"{c:>{width}}" for c in cells[1:])
        )
    summary = out.summary.set_index("method")
    print(
        f"{'':>8}{'max |shift|':>12}{'max |shift|/mcse':>18}{'max |log sd ratio|':>20}"
        f"{'max W1':>8}{'seconds':>9}{'min ESS':>9}{'max R-hat':>10}"
    )
    for run, row in summary.iterrows():
        print(
            f"{run:>12}{row['max_abs_shift']:>8.3f}{row['max_shift_in_mcse']:>18.1f}"
            f"{row['max_abs_log_sd_ratio']:>20.3f}{row['max_w1']:>8.3f}{row['seconds']:>9.1f}"
            f"{row['min_ess_bulk']:>9.0f}{row['max_rhat']:>10.4f}"
        )


def ess_rate(name, params, y, long_out, args) -> list[tuple]:
    """(sampler, ESS cold, s cold, ESS/s cold, ESS warm, s warm, ESS/s warm): NUTS-IMM's cold
    run is the one in ``long_out``, its warm run a second call here; Gibbs's cold and warm
    runs are the reference and its repeat."""
    warm = sample_theta_posterior(
        jax.random.key(99), params, y, method="imm", nuts_kwargs=_sizes(args.nuts)
    )
    rows = []
    for label, cold_tree, cold_s, warm_tree, warm_s in (
        (
            "NUTS (IMM)",
            long_out.posteriors["imm"],
            long_out.seconds["imm"],
            warm.posterior,
            warm.seconds,
        ),
        (
            "Gibbs",
            long_out.posteriors["gibbs"],
            long_out.seconds["gibbs"],
            long_out.posteriors["gibbs-repeat"],
            long_out.seconds["gibbs-repeat"],
        ),
    ):
        ess_cold = diagnostics(cold_tree, list(GIBBS_FREE)).min_ess_bulk
        ess_warm = diagnostics(warm_tree, list(GIBBS_FREE)).min_ess_bulk
        rows.append(
            (name, label, ess_cold, cold_s, ess_cold / cold_s, ess_warm, warm_s, ess_warm / warm_s)
        )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--short-steps", type=int, default=8, help="T of (a), the target")
    parser.add_argument("--short-steps-1d", type=int, default=10, help="T of (a), 1-D model")
    parser.add_argument("--long-steps", type=int, default=200)
    parser.add_argument("--nuts", type=int, nargs=3, default=[300, 400, 2], metavar="W S C")
    parser.add_argument("--gibbs-short", type=int, nargs=3, default=[1000, 5000, 4])
    parser.add_argument("--gibbs-long", type=int, nargs=3, default=[1000, 15000, 4])
    args = parser.parse_args()
    began = time.perf_counter()
    nuts = _sizes(args.nuts)
    print(
        f"NUTS {args.nuts[2]} chains x ({args.nuts[0]} + {args.nuts[1]}); Gibbs "
        f"{args.gibbs_short[2]} x ({args.gibbs_short[0]} + {args.gibbs_short[1]}) at short T, "
        f"{args.gibbs_long[2]} x ({args.gibbs_long[0]} + {args.gibbs_long[1]}) at T = "
        f"{args.long_steps}; priors Dirichlet(1 + 9 I), InverseGamma(3, 2); float64"
    )
    rates = []
    models = (
        ("maneuvering-target-cwna", get_scenario("maneuvering-target-cwna"), args.short_steps),
        ("1-D model", one_dimensional(), args.short_steps_1d),
    )
    for m, (name, params, short) in enumerate(models):
        _, _, y = simulate(jax.random.key(0), params, args.long_steps)
        y = np.asarray(y)
        short_out = posterior_shift(
            jax.random.key(10 * m + 1),
            params,
            y[:short],
            methods=("gpb2", "imm", "gibbs"),
            reference="exact",
            nuts_kwargs=nuts,
            gibbs_kwargs=_sizes(args.gibbs_short),
        )
        print_shift(f"{name}, T = {short}: against NUTS with the exact likelihood", short_out)
        long_out = posterior_shift(
            jax.random.key(10 * m + 2),
            params,
            y,
            methods=("gpb2", "imm"),
            reference="gibbs",
            nuts_kwargs=nuts,
            gibbs_kwargs=_sizes(args.gibbs_long),
        )
        print_shift(f"{name}, T = {args.long_steps}: against the Gibbs sampler", long_out)
        rates += ess_rate(name, params, y, long_out, args)
        print(f"(elapsed {time.perf_counter() - began:.0f} s)", flush=True)

    print(f"\nNUTS over theta (IMM) against Gibbs at T = {args.long_steps}: min bulk ESS of theta")
    print(
        f"{'model':>24}{'sampler':>12}{'ESS 1st':>9}{'s 1st':>8}{'ESS/s':>8}"
        f"{'ESS 2nd':>9}{'s 2nd':>8}{'ESS/s':>8}"
    )
    for row in rates:
        print(
            f"{row[0]:>24}{row[1]:>12}"
            + "".join(
                f"{v:>{w}.{d}f}"
                for v, w, d in zip(row[2:], (9, 8, 8, 9, 8, 8), (0, 1, 1, 0, 1, 1), strict=True)
            )
        )
    for name in dict.fromkeys(r[0] for r in rates):
        nuts_row, gibbs_row = (r for r in rates if r[0] == name)
        print(
            f"{name}: NUTS / Gibbs ESS per second {nuts_row[4] / gibbs_row[4]:.2f} with "
            f"compilation, {nuts_row[7] / gibbs_row[7]:.2f} without"
        )
    print(f"total {time.perf_counter() - began:.0f} s")


if __name__ == "__main__":
    main()
