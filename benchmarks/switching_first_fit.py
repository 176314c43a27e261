"""The first fit of a Markov-switching model against statsmodels, in fresh processes.

A user fits, looks, changes the model and fits again: each new process and each new shape
pays JAX's tracing and compiling, which statsmodels (NumPy, no compilation) never pays. This
measures it side by side, each measurement in a FRESH Python process (``subprocess``), on
two of statsmodels' published cases:

- "fedfunds": the Fed funds rate regressed on its lag (``TestFedFundsConstL1``: endog
  fedfunds[1:], exog fedfunds[:-1], two regimes, switching intercept and coefficient, common
  variance; T = 225). Ours ``markov_switching_regression(ff[1:], ff[:-1],
  switching_variance=False)``; statsmodels ``MarkovRegression(ff[1:], 2, exog=ff[:-1])``.
- "msar4": Hamilton's (1989) MS-AR(4) of US real GNP growth (``rgnp``, T = 135, switching
  mean, common AR and variance). Ours ``markov_switching_ar(rgnp, 4)``; statsmodels
  ``MarkovAutoregression(rgnp, 2, order=4, switching_ar=False)``.

Ours is ``fit_switching(jax.random.key(0), spec)`` with its defaults, statsmodels ``.fit()``
with its defaults, both in float64 (``jax_enable_x64``). In each process, with times taken
inside it:

- start -> result: from just before the parent spawns the process to the end of the first fit
  (interpreter start-up, imports, building the model, the first fit);
- boot: from the spawn to the first line of the script (the interpreter's start-up);
- import: ``import jax`` and ours (``attnbayes``), or ``import statsmodels.api`` (which
  does not import JAX);
- 1st fit: building the model and fitting it (ours traces and compiles here);
- 2nd fit: the same again (same shapes: warm);
- +1 step: a series one step longer (the last observation repeated; a new shape);
- the maxima reached at T and T + 1: "same" when ours and statsmodels' agree to 1e-6, else
  which is higher and by how much (on the MS-AR(4) at T + 1 ours is higher: statsmodels'
  default fit stops at a lower optimum there).

Each case runs ours twice, first with an empty, fresh persistent compilation cache (a new
temporary folder in ``JAX_COMPILATION_CACHE_DIR`` and ``ATTNBAYES_CACHE_DIR``, every program
cached however short its compile) and then, in a second fresh process, with that cache warm;
statsmodels once per round (it has no cache). ``--repeats`` rounds interleave them so that
both see the same load; the table shows the medians over rounds and ours / statsmodels.

    python -P benchmarks/switching_first_fit.py [--repeats 3] [--quick] [--cases fedfunds msar4]

``--quick``: one round of "fedfunds" only. The data come from statsmodels' test modules
(``statsmodels.tsa.regime_switching.tests``), written to a temporary .npz file in the parent,
so the child processes import neither the tests nor pandas.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np

CASES = ("fedfunds", "msar4")
TOOLS = ("ours-cold", "ours-warm", "statsmodels")
MARK = "RESULT "


def _series(case: str, data: dict, longer: bool):
    """(endog, exog or None) of ``case``; ``longer``: the series with its last observation
    repeated (one step more)."""
    if case == "fedfunds":
        ff = data["fedfunds"]
        ff = np.append(ff, ff[-1]) if longer else ff
        return ff[1:], ff[:-1]
    rgnp = data["rgnp"]
    return (np.append(rgnp, rgnp[-1]) if longer else rgnp), None


def _worker(tool: str, case: str, data_file: str) -> None:
    """One process: imports, three fits, one JSON line on stdout."""
    t0 = time.perf_counter()
    wall0 = time.time()
    if tool == "statsmodels":
        import warnings

        import statsmodels.api as sm

        warnings.simplefilter("ignore")
    else:
        import jax

        jax.config.update("jax_enable_x64", True)
        from attnbayes.inference.switching import fit_switching
        from attnbayes.models.markov_switching import (
            markov_switching_ar,
            markov_switching_regression,
        )
    t_import = time.perf_counter()
    data = dict(np.load(data_file))

    def fit(longer: bool):
        endog, exog = _series(case, data, longer)
        if tool == "statsmodels":
            if case == "fedfunds":
                model = sm.tsa.MarkovRegression(endog, k_regimes=2, exog=exog)
            else:
                model = sm.tsa.MarkovAutoregression(endog, k_regimes=2, order=4, switching_ar=False)
            return float(model.fit().llf)
        if case == "fedfunds":
            spec = markov_switching_regression(endog, exog, switching_variance=False)
        else:
            spec = markov_switching_ar(endog, 4)
        return float(fit_switching(jax.random.key(0), spec).log_likelihood[-1])

    times, llfs = [], []
    for longer in (False, False, True):
        start = time.perf_counter()
        llfs.append(fit(longer))
        times.append(time.perf_counter() - start)
        if len(times) == 1:
            wall_first = time.time()
    out = {
        "wall_start": wall0,
        "wall_first": wall_first,
        "import": t_import - t0,
        "fit1": times[0],
        "fit2": times[1],
        "fit3": times[2],
        "llf": llfs[0],
        "llf2": llfs[1],
        "llf3": llfs[2],
    }
    print(MARK + json.dumps(out), flush=True)


def _spawn(tool: str, case: str, data_file: str, cache: str | None) -> dict:
    """Run one ``_worker`` in a fresh process; its figures, with start -> result from the
    parent's clock (both clocks are ``time.time`` on the same machine)."""
    env = dict(os.environ)
    if cache is not None:
        env["JAX_COMPILATION_CACHE_DIR"] = cache
        env["ATTNBAYES_CACHE_DIR"] = cache
        env["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"] = "0"
        env["JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES"] = "0"
    else:
        env["ATTNBAYES_CACHE_DIR"] = "off"
        env.pop("JAX_COMPILATION_CACHE_DIR", None)
    cmd = [sys.executable, "-P", os.path.abspath(__file__), "--worker", tool, case, data_file]
    spawned = time.time()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith(MARK)]
    if proc.returncode != 0 or not lines:
        raise RuntimeError(f"{tool} {case} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    out = json.loads(lines[-1][len(MARK) :])
    out["to_result"] = out["wall_first"] - spawned
    out["boot"] = out["wall_start"] - spawned
    return out


def _agree(ours: float, peer: float) -> str:
    """Same within 1e-6, else which side is higher and by how much."""
    diff = ours - peer
    if abs(diff) <= 1e-6:
        return "same"
    return f"ours {'higher' if diff > 0 else 'lower'} by {abs(diff):.2e}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--cases", nargs="+", choices=CASES, default=list(CASES))
    parser.add_argument("--quick", action="store_true", help="one round of fedfunds")
    parser.add_argument("--json", help="write every process's figures here")
    parser.add_argument("--worker", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        _worker(*args.worker)
        return
    if args.quick:
        args.repeats, args.cases = 1, ["fedfunds"]

    from statsmodels.tsa.regime_switching.tests import test_markov_autoregression as tar
    from statsmodels.tsa.regime_switching.tests import test_markov_regression as treg

    scratch = tempfile.mkdtemp(prefix="switching_first_fit_")
    data_file = os.path.join(scratch, "data.npz")
    np.savez(data_file, fedfunds=np.asarray(treg.fedfunds), rgnp=np.asarray(tar.rgnp))
    print(
        f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f} at start; "
        f"{args.repeats} round(s); medians over rounds (seconds)"
    )
    runs = {(case, tool): [] for case in args.cases for tool in TOOLS}
    try:
        for r in range(args.repeats):
            for case in args.cases:
                cache = tempfile.mkdtemp(prefix="cache_", dir=scratch)
                runs[case, "ours-cold"].append(_spawn("ours-cold", case, data_file, cache))
                runs[case, "ours-warm"].append(_spawn("ours-warm", case, data_file, cache))
                runs[case, "statsmodels"].append(_spawn("statsmodels", case, data_file, None))
                shutil.rmtree(cache, ignore_errors=True)
                print(f"  round {r + 1} {case} done", file=sys.stderr, flush=True)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({f"{c}/{t}": v for (c, t), v in runs.items()}, fh, indent=1)

    keys = ("to_result", "boot", "import", "fit1", "fit2", "fit3")
    head = ("start->result", "boot", "import", "1st fit", "2nd fit", "+1 step")
    print(f"{'case':<9}{'run':<13}" + "".join(f"{h:>14}" for h in head) + f"{'log L':>14}")
    for case in args.cases:
        med = {
            tool: {k: float(np.median([run[k] for run in runs[case, tool]])) for k in keys}
            for tool in TOOLS
        }
        peer = runs[case, "statsmodels"][0]
        for tool in TOOLS:
            row = med[tool]
            print(
                f"{case:<9}{tool:<13}"
                + "".join(f"{row[k]:>14.3f}" for k in keys)
                + f"{runs[case, tool][0]['llf']:>14.6f}"
            )
        for tool in ("ours-cold", "ours-warm"):
            ratio = {k: med[tool][k] / med["statsmodels"][k] for k in keys}
            print(f"{case:<9}{tool + '/sm':<13}" + "".join(f"{ratio[k]:>13.2f}x" for k in keys))
        for label, key in (("T", "llf"), ("T + 1", "llf3")):
            agree = {
                _agree(run[key], peer[key])
                for tool in ("ours-cold", "ours-warm")
                for run in runs[case, tool]
            }
            print(
                f"{case:<9}maximum at {label}: ours vs statsmodels {', '.join(sorted(agree))}"
                f" (statsmodels {peer[key]:.6f})"
            )


if __name__ == "__main__":
    main()
