"""``diagnostics`` (vectorised R-hat and bulk/tail ESS) against arviz_stats' per-element loop.

One variable of E elements (a random walk plus noise), C chains x S draws, float64; the same
numbers (tests/inference/diagnostics/test_convergence.py); best of ``--repeats`` in one process.

    python benchmarks/diagnostics.py [--elements 1000] [--chains 2] [--draws 1000] [--repeats 3]
"""

from __future__ import annotations

import argparse
import time
import warnings

import arviz_stats as azs
import numpy as np
import xarray as xr

from attnbayes.inference.diagnostics import diagnostics


def best(fn, repeats):
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--elements", type=int, default=1000)
    parser.add_argument("--chains", type=int, default=2)
    parser.add_argument("--draws", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    shape = (args.chains, args.draws, args.elements)
    values = rng.normal(size=shape).cumsum(1) * 0.05 + rng.normal(size=shape)
    dt = xr.DataTree.from_dict({"posterior": xr.Dataset({"z": (("chain", "draw", "i"), values)})})

    def reference():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            azs.rhat(dt)
            azs.ess(dt, method="bulk")
            azs.ess(dt, method="tail")

    ours = best(lambda: diagnostics(dt), args.repeats)
    theirs = best(reference, args.repeats)
    print(f"{args.elements} elements, {args.chains} chains x {args.draws} draws")
    print(
        f"diagnostics (vectorised): {ours:.2f} s; arviz_stats rhat + ess bulk + ess tail: "
        f"{theirs:.2f} s; ratio {theirs / ours:.1f}"
    )


if __name__ == "__main__":
    main()
