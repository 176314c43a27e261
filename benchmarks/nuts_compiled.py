"""``run_nuts`` compiled once (issue 14): repeat calls, plain NumPyro, and the import cost.

All timings in one process, so that ratios are meaningful on a shared machine; ArviZ's
``arviz_base`` and xarray are imported before the timed calls (the first DataTree would import
them; part (iii) gives import costs). float64, the "three-atoms" scenario (sigma = 1), K = 3
ordered atoms with the prior of ``compare_deconvolution`` (atom_loc = mean(x) and atom_scale =
2 sd(x) + sigma, passed as 0-d arrays so that new data do not make new constants).

(i) N = 100, one chain of 200 warmup + 200 draws: the first call (compilation included)
    against a second call on new data of the same shape (another simulated data set); target:
    second <= 0.1 x first.
(ii) N = 2000, 2 chains x (1000 warmup + 1000 draws), chains on 2 host devices: the whole
    ``run_nuts`` call (first call; then a second on new data) against plain NumPyro on the same
    data (``MCMC(NUTS(model), ...)``, ``.run``, ``get_samples``, a fresh ``MCMC`` as a script
    would make), in rounds (``--repeat``; the compiled-program cache is cleared before each
    first call), medians of the ratios printed; target: run_nuts within 1.2x of plain NumPyro.
    Both are first run once on other shapes (N = 50), so that neither pays the process's
    one-off costs for the other.
    "XLA compile s" is the XLA compilation reported by ``jax.monitoring`` during the call,
    summed over threads (run_nuts compiles its posterior predictive on a second thread while
    the sampler compiles, so it can exceed the wall time).
(iii) ``python -X importtime -c "import attnbayes.inference.mcmc"`` in a fresh interpreter:
    the module's cumulative import time and the wall time, against ``import jax`` and
    ``import numpyro``, and whether ArviZ, xarray or pandas were imported.

    python benchmarks/nuts_compiled.py [--skip-large] [--repeat 3]
"""

from __future__ import annotations

import argparse
import ast
import os
import re
import subprocess
import sys
import time

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=2")

import jax

jax.config.update("jax_enable_x64", True)

import jax.monitoring  # noqa: E402
import numpy as np  # noqa: E402

SIGMA = 1.0
HEAVY = ("arviz", "arviz_base", "arviz_stats", "xarray", "pandas")
_compile_seconds: list[float] = []


def _listener(event, duration, **_):
    if event == "/jax/core/compile/backend_compile_duration":
        _compile_seconds.append(duration)


def _data(seed: int, num_points: int):
    from attnbayes.models.deconvolution import simulate

    _, x = simulate(jax.random.PRNGKey(seed), "three-atoms", SIGMA, num_points)
    x = np.asarray(x, dtype=np.float64)
    prior = {"atom_loc": np.asarray(np.mean(x)), "atom_scale": np.asarray(2 * np.std(x) + SIGMA)}
    return x, prior


def _timed(fn, *args, **kwargs):
    del _compile_seconds[:]
    start = time.perf_counter()
    out = fn(*args, **kwargs)
    if isinstance(out, dict):  # NumPyro's samples (a DataTree holds NumPy arrays)
        jax.block_until_ready(out)
    return out, time.perf_counter() - start, sum(_compile_seconds)


def _run_nuts(seed, x, prior, sizes, **kwargs):
    from attnbayes.inference.mcmc import run_nuts
    from attnbayes.models.deconvolution import deconvolution_model, model_dims

    return run_nuts(
        jax.random.PRNGKey(seed),
        deconvolution_model,
        (x,),
        {"sigma": SIGMA, "num_atoms": 3, "ordered": True, **prior},
        dims=model_dims(True),
        **sizes,
        **kwargs,
    )


def _plain_numpyro(seed, x, prior, sizes, chain_method):
    from numpyro.infer import MCMC, NUTS

    from attnbayes.models.deconvolution import deconvolution_model

    mcmc = MCMC(
        NUTS(deconvolution_model),
        num_warmup=sizes["num_warmup"],
        num_samples=sizes["num_samples"],
        num_chains=sizes["num_chains"],
        chain_method=chain_method,
        progress_bar=False,
    )
    mcmc.run(jax.random.PRNGKey(seed), x, sigma=SIGMA, num_atoms=3, ordered=True, **prior)
    return mcmc.get_samples()


def part_i() -> None:
    from attnbayes.inference.mcmc import compiled_cache_info

    sizes = {"num_warmup": 200, "num_samples": 200, "num_chains": 1}
    x1, p1 = _data(1, 100)
    x2, p2 = _data(2, 100)
    _, first, c1 = _timed(_run_nuts, 0, x1, p1, sizes)
    _, second, c2 = _timed(_run_nuts, 0, x2, p2, sizes)
    info = compiled_cache_info()
    print("## (i) three-atoms, N = 100, 1 chain x (200 warmup + 200 draws), run_nuts whole call")
    print()
    print("| call | wall s | XLA compile s (summed over threads) |")
    print("|---|---|---|")
    print(f"| first (compiles) | {first:.2f} | {c1:.2f} |")
    print(f"| second, new data of the same shape | {second:.3f} | {c2:.2f} |")
    print(f"| second / first | {second / first:.3f} (target <= 0.1) | |")
    print()
    print(f"cache: {info['misses']} compilation(s) (misses), {info['hits']} hit(s)")
    print()


def part_ii(chain_method: str, repeat: int) -> None:
    from attnbayes.inference.mcmc import clear_compiled_cache

    sizes = {"num_warmup": 1000, "num_samples": 1000, "num_chains": 2}
    # Warm-up of both on other shapes (N = 50), so that neither first call below pays the
    # process's one-off costs (multi-device client, op-by-op primitives) for the other.
    xw, pw = _data(3, 50)
    small = {"num_warmup": 10, "num_samples": 10, "num_chains": 2}
    _plain_numpyro(0, xw, pw, small, chain_method)
    _run_nuts(0, xw, pw, small, chain_method=chain_method)
    x1, p1 = _data(20261122, 2000)
    x2, p2 = _data(7, 2000)
    print(
        f"## (ii) three-atoms, N = 2000, 2 chains x (1000 warmup + 1000 draws), chains "
        f"{chain_method}; {repeat} round(s), each: plain NumPyro and a first run_nuts call "
        "(compiled-program cache cleared) on data 1, then plain NumPyro and run_nuts on data 2"
    )
    print()
    print(
        "| round | call | wall s | XLA compile s (summed over threads) | sampler program s "
        "| / plain NumPyro on the same data |"
    )
    print("|---|---|---|---|---|---|")
    firsts, seconds, leans = [], [], []
    for r in range(repeat):
        clear_compiled_cache()  # a first call again (new programs, compiled anew)
        _, plain, plain_c = _timed(_plain_numpyro, r, x1, p1, sizes, chain_method)
        tree, first, first_c = _timed(_run_nuts, r, x1, p1, sizes, chain_method=chain_method)
        _, plain2, plain2_c = _timed(_plain_numpyro, r, x2, p2, sizes, chain_method)
        tree2, second, second_c = _timed(_run_nuts, r, x2, p2, sizes, chain_method=chain_method)
        lean, lean_t, lean_c = _timed(
            _run_nuts, r + 1, x2, p2, sizes, chain_method=chain_method, posterior_predictive=False
        )
        firsts.append(first / plain)
        seconds.append(second / plain2)
        leans.append(lean_t / plain2)
        rows = (
            ("plain NumPyro MCMC.run + get_samples, data 1", plain, plain_c, None, None),
            (
                "run_nuts first call, data 1 (log-lik, predictive, DataTree)",
                first,
                first_c,
                tree,
                firsts[-1],
            ),
            ("plain NumPyro MCMC.run + get_samples, data 2", plain2, plain2_c, None, None),
            ("run_nuts second call, data 2 (same shape)", second, second_c, tree2, seconds[-1]),
            (
                "run_nuts, data 2, posterior_predictive=False",
                lean_t,
                lean_c,
                lean,
                leans[-1],
            ),
        )
        for name, wall, comp, dt, ratio in rows:
            program = f"{float(dt['posterior'].attrs['sampling_time']):.2f}" if dt else ""
            rel = f"{ratio:.2f}x" if ratio is not None else "1"
            print(f"| {r + 1} | {name} | {wall:.2f} | {comp:.2f} | {program} | {rel} |")
    print()
    print(
        f"median over rounds: run_nuts first call / plain NumPyro {np.median(firsts):.2f}x "
        f"(target <= 1.2x; rounds {', '.join(f'{v:.2f}' for v in firsts)}); second call "
        f"{np.median(seconds):.2f}x; second call without the predictive {np.median(leans):.2f}x"
    )
    print()


def _importtime(statement: str) -> tuple[float, float, list[str]]:
    """(cumulative import seconds of the last module, wall seconds, heavy modules loaded)."""
    code = f"{statement}; import sys; print([m for m in {HEAVY!r} if m in sys.modules])"
    start = time.perf_counter()
    result = subprocess.run(
        [sys.executable, "-P", "-X", "importtime", "-c", code],
        capture_output=True,
        text=True,
        check=True,
    )
    wall = time.perf_counter() - start
    target = statement.split()[-1]
    cumulative = 0.0
    for line in result.stderr.splitlines():
        match = re.match(r"import time:\s+\d+ \|\s+(\d+) \|\s*(\S+)", line)
        if match and match.group(2) == target:
            cumulative = int(match.group(1)) / 1e6
    return cumulative, wall, ast.literal_eval(result.stdout.strip().splitlines()[-1])


def part_iii() -> None:
    print("## (iii) import cost in a fresh interpreter (python -X importtime)")
    print()
    print("| statement | cumulative import s | interpreter wall s | heavy modules loaded |")
    print("|---|---|---|---|")
    for statement in (
        "import jax",
        "import numpyro",
        "import attnbayes.inference.mcmc",
        "import attnbayes.inference.diagnostics",
        "import arviz",
    ):
        cumulative, wall, heavy = _importtime(statement)
        print(f"| `{statement}` | {cumulative:.2f} | {wall:.2f} | {', '.join(heavy) or '-'} |")
    print()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--skip-large", action="store_true", help="skip part (ii)")
    parser.add_argument("--repeat", type=int, default=3, help="rounds of part (ii)")
    args = parser.parse_args()
    jax.monitoring.register_event_duration_secs_listener(_listener)
    import arviz_base  # noqa: F401  (what the first DataTree would import)
    import xarray  # noqa: F401

    chain_method = "parallel" if jax.local_device_count() >= 2 else "sequential"
    print(f"jax {jax.__version__}, {jax.local_device_count()} host device(s), float64")
    print()
    part_i()
    if not args.skip_large:
        part_ii(chain_method, args.repeat)
    part_iii()


if __name__ == "__main__":
    main()
