"""The table no anchor has: regret against the oracle Bayes rule versus N for the learned stacks
(v1, v2), EM, the NPMLE, James-Stein, SURE and NUTS, homoscedastic and heteroscedastic; the
issue-38 verdict; coverage; time per data set; the Xie-Kou-Brown settings and real data.

1. Regret (``learned.regret.regret_versus_n``) on every family of ``HELDOUT_FAMILIES``, both
   noise kinds (s_i = 1; s_i from ``NoisePrior()``), N in ``--sizes`` with
   ``--tasks`` tasks per cell (default 64 up to N = 500, 16 at 1,000-2,000, 8 at 10,000);
   NUTS under the training prior (the DP model, 2 chains x (``--nuts-draws`` warmup + draws))
   on the first 4 tasks of the training families (dp, sparse, normal, atoms) for N <= 1,000;
   EM with K = N to convergence for N <= ``--em-max-points`` (default 500: N^2 a step).
2. The verdict of issue 38, item 3, per training-prior family and N <= 500: the grid stack's
   regret at most 1.1x the best of {EM, NPMLE, James-Stein, SURE} or the paired difference
   within 2 SE; every miss elsewhere listed.
3. Coverage of the 50% / 90% intervals (mean over the families of the per-cell coverage, with
   its SE), and time per data set per method.
4. Time per data set, one process, warm, median of repeats: v2 (``grid_stack_moments``)
   against the NPMLE at default settings (``npmle`` + its posterior mean) at N = 100, 10^3,
   10^4, 10^5 (heteroscedastic and s_i = 1), and v1 (``unrolled_em_moments``, streamed from
   N = 2,000) up to 10^4 (O(N^2): about 100x that at 10^5, not run).
5. Xie-Kou-Brown settings a, b, c (MSE, not regret: the means may depend on s_i) and the
   Efron-Morris batting averages and eight schools.

    python benchmarks/learned_regret.py --out /tmp/learned_regret.md [--csv table.csv]
        [--quick] [--grid-stack path.npz | --init-layers 4]

Until the shipped v2 stack exists, ``--grid-stack`` or ``--init-layers`` stand in for it (the
output says which stack ran).
"""

from __future__ import annotations

import argparse
import sys
import time

import jax

jax.config.update("jax_enable_x64", True)

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from attnbayes.inference.deconvolution.kiefer_wolfowitz import (  # noqa: E402
    npmle,
    npmle_posterior,
)
from attnbayes.inference.deconvolution.learned import (  # noqa: E402
    FAMILIES,
    HELDOUT_FAMILIES,
    HOMOSCEDASTIC,
    NoisePrior,
    grid_stack_moments,
    heldout_noisy_tasks,
    init_grid_stack,
    inverse_arcsine_transform,
    load_grid_stack,
    pretrained_grid_stack,
    pretrained_unrolled_em,
    unrolled_em_moments,
)
from attnbayes.inference.deconvolution.learned import regret as rv  # noqa: E402

METHOD_ORDER = ("v2", "v1", "em", "npmle", "james-stein", "sure", "nuts")
FULL_SIZES = (100, 200, 500, 1000, 2000, 10_000)
FULL_TASKS = {100: 64, 200: 64, 500: 64, 1000: 16, 2000: 16, 10_000: 8}
TIMING_SIZES = (100, 1000, 10_000, 100_000)
TIMING_REPEATS = {100: 21, 1000: 11, 10_000: 5, 100_000: 3}
V1_TIMING_MAX = 10_000


def _fmt(mean, se, digits=4) -> str:
    if not np.isfinite(mean):
        return "-"
    if not np.isfinite(se):
        return f"{mean:.{digits}f}"
    return f"{mean:.{digits}f} ± {se:.{digits}f}"


def _md(frame: pd.DataFrame) -> str:
    """A pandas frame as a GitHub markdown table (no tabulate dependency)."""
    cols = [str(c) for c in frame.columns]
    lines = ["| " + " | ".join(cols) + " |", "|" + "|".join("---" for _ in cols) + "|"]
    for row in frame.itertuples(index=False):
        lines.append("| " + " | ".join(str(v) for v in row) + " |")
    return "\n".join(lines)


# ----------------------------------------------------------------------------- 1-3. regret


def regret_tables(table: pd.DataFrame, kind: str) -> str:
    """Markdown: per (family, N) the regret ± SE of each method, the best classical rule, and
    v2 against it (ratio, paired difference ± SE, verdict)."""
    rows = []
    sub = table[table.noise == kind]
    for (family, n), cell in sub.groupby(["family", "num_points"], sort=False):
        cell = cell.set_index("method")
        row = {"family": family, "N": n, "T": int(cell["num_tasks"].max())}
        for m in METHOD_ORDER:
            if m in cell.index:
                r = cell.loc[m]
                text = _fmt(r.regret, r.regret_se)
                if m == "nuts" and r.num_tasks:
                    text += f" ({int(r.num_tasks)}; v2 - nuts {_fmt(-r.diff_v2, r.diff_v2_se)})"
                row[m] = text
        if "v2" in cell.index and isinstance(cell.loc["v2"].best_classical, str):
            v2 = cell.loc["v2"]
            row["best classical"] = v2.best_classical
            row["v2 / best"] = f"{v2.ratio_best:.2f}"
            row["v2 - best"] = _fmt(v2.diff_best, v2.diff_best_se)
            row["meets"] = "yes" if bool(v2.meets_requirement) else "**no**"
        rows.append(row)
    return _md(pd.DataFrame(rows).fillna("-"))


def verdict(table: pd.DataFrame, min_tasks: int = 64) -> tuple[str, list[str]]:
    """The issue's requirement per training-prior family and N <= 500, and every miss."""
    lines, misses = [], []
    v2 = table[table.method == "v2"]
    for row in v2.itertuples(index=False):
        if not isinstance(row.best_classical, str):
            continue
        ok = bool(row.meets_requirement)
        text = (
            f"{row.noise}, {row.family}, N = {row.num_points} (T = {row.num_tasks}): v2 "
            f"{row.regret:.4f} against {row.best_classical} "
            f"{row.regret - row.diff_best:.4f}: ratio {row.ratio_best:.2f}, paired difference "
            f"{_fmt(row.diff_best, row.diff_best_se)} -> {'meets' if ok else 'MISSES'}"
        )
        required = row.family in FAMILIES and row.num_points <= 500
        if required:
            if row.num_tasks < min_tasks:
                text += f" (only {row.num_tasks} tasks: fewer than the required {min_tasks})"
            lines.append(text)
        elif not ok:
            misses.append(text)
    return "\n".join(f"- {t}" for t in lines), misses


def coverage_table(table: pd.DataFrame, kind: str) -> str:
    """Coverage per method and N: the mean over families of the per-cell coverage, with the SE
    sqrt(sum se^2) / k of that mean."""
    sub = table[(table.noise == kind) & (table.num_tasks > 0)]
    rows = []
    for method in ("oracle", *METHOD_ORDER):
        m = sub[sub.method == method]
        if m.empty or m.coverage_90.isna().all():
            continue
        row = {"method": method}
        for n, cell in m.groupby("num_points"):
            parts = []
            for p in (50, 90):
                c = cell[f"coverage_{p}"].to_numpy()
                se = cell[f"coverage_{p}_se"].to_numpy()
                k = np.isfinite(c).sum()
                if k:
                    mean = np.nanmean(c)
                    err = np.sqrt(np.nansum(se**2)) / k
                    parts.append(f"{100 * mean:.1f}±{100 * err:.1f}")
            row[f"N={n}"] = " / ".join(parts)
        rows.append(row)
    return _md(pd.DataFrame(rows).fillna("-"))


def time_table(table: pd.DataFrame, kind: str) -> str:
    """Seconds per data set (median over the families) per method and N."""
    sub = table[(table.noise == kind) & (table.num_tasks > 0)]
    wide = sub.pivot_table(
        index="method", columns="num_points", values="seconds_per_task", aggfunc="median"
    )
    wide = wide.reindex([m for m in METHOD_ORDER if m in wide.index])
    out = wide.map(lambda v: "-" if not np.isfinite(v) else f"{v:.2g}")
    out.columns = [f"N={c}" for c in out.columns]
    return _md(out.reset_index())


def _read(path) -> pd.DataFrame:
    """A CSV written by this script, with its types back (booleans, empty notes)."""
    frame = pd.read_csv(path)
    meets = frame["meets_requirement"].map({True: True, False: False, "True": True, "False": False})
    frame["meets_requirement"] = meets.astype("boolean")
    frame["note"] = frame["note"].fillna("")
    return frame


def _ordered(table: pd.DataFrame) -> pd.DataFrame:
    """Rows by noise kind, family (``HELDOUT_FAMILIES``' order), N, method."""
    keys = {
        "noise": {k: i for i, k in enumerate(rv.NOISE_KINDS)},
        "family": {f: i for i, f in enumerate(HELDOUT_FAMILIES)},
        "method": {m: i for i, m in enumerate(("oracle", *METHOD_ORDER))},
    }
    order = table.assign(**{f"_{c}": table[c].map(m) for c, m in keys.items()})
    order = order.sort_values(["_noise", "_family", "num_points", "_method"], kind="stable")
    return order.drop(columns=[f"_{c}" for c in keys]).reset_index(drop=True)


# ----------------------------------------------------------------------------- 4. timing


def _median_time(fn, repeats):
    jax.block_until_ready(fn())  # warm: compile
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        jax.block_until_ready(fn())
        times.append(time.perf_counter() - start)
    return float(np.median(times))


def timing(grid_params, v1_params, sizes, log) -> str:
    rows = []
    for n in sizes:
        reps = TIMING_REPEATS.get(n, 3)
        row = {"N": n, "repeats": reps}
        for kind, noise in (("hetero", NoisePrior()), ("homo", HOMOSCEDASTIC)):
            tasks = heldout_noisy_tasks(jax.random.PRNGKey(n), "three-atoms", 1, n, noise=noise)
            x = np.asarray(tasks.x[0])
            s = np.asarray(tasks.sigma[0]) if kind == "hetero" else 1.0

            def stack(x=x, s=s):
                return grid_stack_moments(grid_params, x, s).mean

            def classical(x=x, s=s):
                return npmle_posterior(x, s, npmle(x, s), probs=())[0]

            t_v2 = _median_time(stack, reps)
            t_np = _median_time(classical, reps)
            row[f"v2 {kind} (s)"] = f"{t_v2:.3g}"
            row[f"NPMLE {kind} (s)"] = f"{t_np:.3g}"
            row[f"v2/NPMLE {kind}"] = f"{t_v2 / t_np:.2f}"
            log(f"timing N = {n} {kind}: v2 {t_v2:.4f} s, NPMLE {t_np:.4f} s")
            if kind == "homo":
                if n <= V1_TIMING_MAX:
                    block = rv.V1_BLOCK_SIZE if n >= rv.V1_STREAM_FROM else None

                    def v1(x=x, block=block):
                        return unrolled_em_moments(v1_params, x, 1.0, block_size=block).mean

                    t_v1 = _median_time(v1, min(reps, 3) if n >= 10_000 else reps)
                    row["v1 homo (s)"] = f"{t_v1:.3g}"
                    log(f"timing N = {n}: v1 {t_v1:.4f} s")
                else:
                    row["v1 homo (s)"] = "not run (O(N^2))"
        rows.append(row)
    return _md(pd.DataFrame(rows))


# ----------------------------------------------------------------------------- 5. XKB, real data


def xkb_tables(frame: pd.DataFrame) -> str:
    rows = []
    for (setting, n), cell in frame.groupby(["setting", "num_points"], sort=False):
        cell = cell.set_index("method")
        row = {"setting": setting, "N": n, "reps": int(cell["num_tasks"].max())}
        for m in rv.XKB_METHODS:
            if m in cell.index:
                row[m] = _fmt(cell.loc[m].regret, cell.loc[m].regret_se)
        if "v2" in cell.index:
            v2 = cell.loc["v2"]
            row["v2 - best"] = f"{_fmt(v2.diff_best, v2.diff_best_se)} ({v2.best_classical})"
        rows.append(row)
    return _md(pd.DataFrame(rows).fillna("-"))


def real_tables(frame: pd.DataFrame) -> str:
    bat = frame[frame.dataset == "efron-morris"].copy()
    bat["avg"] = inverse_arcsine_transform(bat.estimate)
    bat["truth_avg"] = inverse_arcsine_transform(bat.truth)
    sse = (
        bat.assign(
            sse_transformed=(bat.estimate - bat.truth) ** 2,
            sse_average=(bat.avg - bat.truth_avg) ** 2,
        )
        .groupby("method", sort=False)[["sse_transformed", "sse_average"]]
        .sum(min_count=1)
        .round(4)
        .reset_index()
    )
    schools = frame[frame.dataset == "eight-schools"]
    wide = schools.pivot(index="unit", columns="method", values="estimate")
    wide = wide[[m for m in dict.fromkeys(schools.method)]].round(2)
    notes = sorted({n for n in frame.note if isinstance(n, str) and n})
    return (
        "Efron-Morris batting averages (sum of squared errors over the 18 players, arcsine "
        "scale and as averages):\n\n"
        + _md(sse)
        + "\n\nEight schools (estimates; no truth):\n\n"
        + _md(wide.reset_index())
        + ("\n\n" + "\n".join(f"- {n}" for n in notes) if notes else "")
    )


# ----------------------------------------------------------------------------- main


def _stack(args):
    if args.grid_stack:
        return load_grid_stack(args.grid_stack)[0], f"grid stack from {args.grid_stack}"
    if args.init_layers:
        return init_grid_stack(args.init_layers), (
            f"init_grid_stack({args.init_layers}) (heteroscedastic EM, untrained)"
        )
    return pretrained_grid_stack(), "pretrained_grid_stack()"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="markdown output file")
    parser.add_argument("--csv", help="the full tidy table (default: --out with .csv)")
    parser.add_argument("--quick", action="store_true", help="small sizes (checks the script)")
    parser.add_argument("--sizes", type=int, nargs="+")
    parser.add_argument("--families", nargs="+", default=list(HELDOUT_FAMILIES))
    parser.add_argument("--nuts-draws", type=int, default=300)
    parser.add_argument("--em-max-points", type=int, default=500)
    parser.add_argument("--noise", nargs="+", default=list(rv.NOISE_KINDS), choices=rv.NOISE_KINDS)
    parser.add_argument("--grid-stack", help="a grid stack .npz instead of the shipped one")
    parser.add_argument("--init-layers", type=int, help="init_grid_stack(L) instead")
    parser.add_argument("--skip", nargs="*", default=[], choices=("timing", "xkb", "real"))
    parser.add_argument(
        "--render", nargs="+", help="write the markdown from these CSVs (of earlier runs)"
    )
    parser.add_argument(
        "--timing-only", action="store_true", help="only section 4 (on an otherwise idle machine)"
    )
    args = parser.parse_args()
    start = time.perf_counter()

    def log(message):
        print(f"[{time.perf_counter() - start:7.1f} s] {message}", flush=True)

    grid_params, which = _stack(args)
    v1_params = pretrained_unrolled_em()
    if args.timing_only:
        sizes = (100, 1000) if args.quick else TIMING_SIZES
        text = timing(grid_params, v1_params, sizes, log)
        with open(args.out, "w") as f:
            f.write(
                "### Time per data set: v2 against the NPMLE (one run, warm, median of "
                f"repeats)\n\nv2 = {which}; `grid_stack_moments(params, x, s)` against "
                "`npmle(x, s)` + `npmle_posterior` (default settings); v1 = "
                "`unrolled_em_moments`.\n\n" + text + "\n"
            )
        log(f"written {args.out}")
        return
    if args.quick:
        sizes = tuple(args.sizes or (100, 300))
        tasks = dict.fromkeys(sizes, 8)
        nuts_max, timing_sizes, xkb_sizes, reps = 100, (100, 1000), (100,), 4
    else:
        sizes = tuple(args.sizes or FULL_SIZES)
        tasks = {n: FULL_TASKS.get(n, 16 if n <= 2000 else 8) for n in sizes}
        nuts_max, timing_sizes, xkb_sizes, reps = 1000, TIMING_SIZES, (100, 500), 32
    nuts_kwargs = dict(num_warmup=args.nuts_draws, num_samples=args.nuts_draws, num_chains=2)
    csv = args.csv or (args.out.rsplit(".", 1)[0] + ".csv")
    if args.render:
        table = _ordered(pd.concat([_read(path) for path in args.render], ignore_index=True))
        kinds = [k for k in rv.NOISE_KINDS if k in set(table.noise)]
        tasks = table.groupby("num_points")["num_tasks"].max().to_dict()
        log(f"rendering {args.render}")
    else:
        kinds = list(args.noise)
        log(f"v2 = {which}; sizes {sizes}, tasks {tasks}")
        parts_done = []
        for kind in kinds:
            for n in sizes:  # one call per (noise, N): the CSV grows as the run goes
                part = rv.regret_versus_n(
                    jax.random.PRNGKey(38),
                    families=tuple(args.families),
                    sizes=(n,),
                    num_tasks=tasks[n],
                    noise=kind,
                    methods=("oracle", *METHOD_ORDER),
                    grid_params=grid_params,
                    v1_params=v1_params,
                    nuts_tasks=4,
                    nuts_max_points=nuts_max,
                    nuts_kwargs=nuts_kwargs,
                    em_max_points=args.em_max_points,
                    progress=log,
                )
                ran = part[part.num_tasks > 0]
                if not np.all(np.isfinite(ran[["regret", "mse", "oracle_mse"]].to_numpy())):
                    sys.exit(f"learned_regret: non-finite regrets at {kind}, N = {n}; stopped")
                parts_done.append(part)
                pd.concat(parts_done, ignore_index=True).to_csv(csv, index=False)
                log(f"{kind}, N = {n} done; {csv} updated")
        table = _ordered(pd.concat(parts_done, ignore_index=True))
    required, misses = verdict(table)
    parts = [
        "## Learned empirical Bayes: regret against the oracle versus N (issue 38)",
        f"`python benchmarks/learned_regret.py --out ...` ({'quick' if args.quick else 'full'} "
        f"run; v2 = {which}; v1 = pretrained_unrolled_em(); tasks per cell {tasks}; NUTS-DP "
        f"under the training prior, 2 chains x ({args.nuts_draws} + {args.nuts_draws}), on "
        f"the first 4 tasks of {list(FAMILIES)} for N <= {nuts_max}; EM with K = N to "
        f"convergence (at most {rv.EM_MAX_ITERS} steps) for N <= {args.em_max_points} only "
        "(N^2 a step: about 0.5 s a fit at N = 500, 2 s at 1,000, 12 s at 2,000, mostly "
        "stopped by the step cap), the NPMLE at default settings). Regret = MSE - MSE "
        "of the oracle Bayes rule E[z | x, s, nu], per task, mean ± SE over tasks; 'best' is "
        "the best of EM, NPMLE, James-Stein, SURE in the cell; paired differences on the same "
        "tasks. Tasks: `grid_training.heldout_noisy_tasks`; heteroscedastic s_i from "
        "`NoisePrior()` (1 task in 4 homoscedastic, the others up to 10x apart).",
    ]
    for kind in kinds:
        parts += [f"### Regret, {kind}", regret_tables(table, kind)]
    parts += [
        "### Verdict: issue 38 item 3 (training-prior families, N <= 500)",
        "Required: v2's regret at most 1.1x the best classical rule's, or the paired "
        "difference within 2 SE.",
        required or "(no cell with N <= 500 in this run)",
        "Misses in the other cells (outside the training families or N > 500):",
        "\n".join(f"- {m}" for m in misses) or "- none",
    ]
    for kind in kinds:
        parts += [
            f"### Coverage of the 50% / 90% intervals (%), {kind}",
            "Mean over the families of the per-cell coverage ± its SE over tasks. The oracle's "
            "and the NPMLE's intervals are discrete posteriors (conservative, resp. too "
            "short when the fitted atoms miss z_i); the stacks', James-Stein's and SURE's are "
            "normal; NUTS's posterior quantiles.",
            coverage_table(table, kind),
            f"Seconds per data set, {kind} (median over families; warm):",
            time_table(table, kind),
        ]
    if "timing" not in args.skip:
        log("timing")
        parts += [
            "### Time per data set: v2 against the NPMLE (one run, warm, median of repeats)",
            "v2 = `grid_stack_moments(params, x, s)` (its NPMLE input included); NPMLE = "
            "`npmle(x, s)` at default settings + `npmle_posterior` (the posterior mean); "
            "three-atoms data, heteroscedastic s_i from `NoisePrior()` or s_i = 1. v1 = "
            f"`unrolled_em_moments` (streamed over blocks of {rv.V1_BLOCK_SIZE} from N = "
            f"{rv.V1_STREAM_FROM}).",
            timing(grid_params, v1_params, timing_sizes, log),
        ]
    if "xkb" not in args.skip:
        log("Xie-Kou-Brown")
        xkb = rv.xie_kou_brown_table(
            jax.random.PRNGKey(12),
            sizes=xkb_sizes,
            num_reps=reps,
            grid_params=grid_params,
            progress=log,
        )
        parts += [
            "### Xie-Kou-Brown settings (MSE, mean ± SE over replications)",
            "A_i ~ U(0.1, 1), x_i ~ N(theta_i, A_i); (a) theta ~ N(0, 1), (b) theta ~ U(0, 1), "
            "(c) theta_i = A_i (means depend on s_i: no oracle of the model; MSE as XKB "
            "report it). 'mle' is x itself.",
            xkb_tables(xkb),
        ]
    if "real" not in args.skip:
        log("real data")
        real = rv.real_data_estimates(
            jax.random.PRNGKey(75),
            grid_params=grid_params,
            v1_params=v1_params,
            nuts_kwargs=nuts_kwargs,
        )
        parts += ["### Real data", real_tables(real)]
    parts.append(f"Wall time of this run: {time.perf_counter() - start:.0f} s.")
    with open(args.out, "w") as f:
        f.write("\n\n".join(parts) + "\n")
    log(f"written {args.out}")


if __name__ == "__main__":
    main()
