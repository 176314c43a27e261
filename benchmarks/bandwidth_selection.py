"""Leave-one-out CV bandwidth selection against statsmodels ``KernelReg(bw="cv_ls")``.

Both minimise the same criterion, CV(h) = (1/n) sum_i (v_i - f_{-i}(k_i))^2 for the
local-constant (Nadaraya-Watson) estimator with a Gaussian product kernel: statsmodels with
Nelder-Mead from the normal-reference h0 and a Python loop over the n leave-one-out fits per
evaluation; ``select_bandwidth`` with a coarse grid in log h, then bounded Brent (scalar h) or
L-BFGS-B with a jitted gradient (per-coordinate h), each evaluation one jitted n x n pass.

Prints, for the d2l data (f(x) = 2 sin x + x^0.8, x ~ U(0, 5), noise 0.5; n = 2000) and a 2-D
variant with per-coordinate h, both bandwidths, CV at both, and the times: ours "cold" (the
first call in the process, so it includes JIT compilation), ours "warm" (best of --repeats
later calls) and statsmodels, with the ratios, all measured in one run. float64, CPU.

    python benchmarks/bandwidth_selection.py [--n 2000] [--repeats 3] [--skip-2d]
"""

from __future__ import annotations

import argparse
import time

import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from statsmodels.nonparametric.kernel_regression import KernelReg  # noqa: E402

from attnbayes.inference.kernel_regression import leave_one_out, select_bandwidth  # noqa: E402


def d2l_data(n: int, seed: int):
    rng = np.random.default_rng(seed)
    x = rng.uniform(0, 5, n)
    return x, 2 * np.sin(x) + x**0.8 + 0.5 * rng.normal(size=n)


def plane_data(n: int, seed: int):
    rng = np.random.default_rng(seed)
    x = rng.uniform(0, 1, (n, 2)) * np.array([5.0, 10.0])
    return x, 2 * np.sin(x[:, 0]) + 0.3 * x[:, 1] + 0.3 * rng.normal(size=n)


def timed(fn):
    start = time.perf_counter()
    out = fn()
    jax.block_until_ready(out)
    return out, time.perf_counter() - start


def compare(label: str, x, y, var_type: str, per_coordinate: bool, repeats: int) -> None:
    ours, t_cold = timed(lambda: select_bandwidth(x, y, per_coordinate=per_coordinate))
    t_warm = min(
        timed(lambda: select_bandwidth(x, y, per_coordinate=per_coordinate))[1]
        for _ in range(repeats)
    )
    sm, t_sm = timed(
        lambda: (
            KernelReg(y, x, var_type, reg_type="lc", bw="cv_ls", rng=np.random.default_rng(0)).bw
        )
    )
    h_ours = np.atleast_1d(np.asarray(ours.bandwidth))
    h_sm = np.abs(np.atleast_1d(sm))  # the Gaussian kernel depends on h^2 only
    cv_sm = float(leave_one_out(x, y, bandwidth=h_sm if per_coordinate else h_sm[0]).score)
    rel = np.max(np.abs(h_ours / h_sm - 1))
    print(f"--- {label}")
    print(
        f"  bandwidth  ours {np.array2string(h_ours, precision=6)}"
        f"  statsmodels {np.array2string(h_sm, precision=6)}  max rel diff {rel:.2e}"
    )
    print(f"  CV(h)      ours {float(ours.score):.10f}  statsmodels {cv_sm:.10f}")
    print(
        f"  time       ours cold {t_cold:.3f} s (incl. JIT)  ours warm {t_warm:.3f} s"
        f"  statsmodels {t_sm:.2f} s"
    )
    print(
        f"  speed-up   statsmodels / ours cold = {t_sm / t_cold:.1f}x,"
        f"  statsmodels / ours warm = {t_sm / t_warm:.1f}x"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--skip-2d", action="store_true")
    args = parser.parse_args()
    jnp.zeros(1).block_until_ready()  # start the JAX runtime outside the timings
    print(
        f"LOO-CV bandwidth, Gaussian kernel, local constant, n = {args.n}, float64, "
        f"{jax.device_count()} CPU device(s)"
    )
    x, y = d2l_data(args.n, seed=0)
    compare("1-D (d2l data), scalar h", x, y, "c", False, args.repeats)
    if not args.skip_2d:
        x2, y2 = plane_data(args.n, seed=1)
        compare("2-D, per-coordinate h", x2, y2, "cc", True, args.repeats)


if __name__ == "__main__":
    main()
