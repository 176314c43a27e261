"""The link-function conjecture of the note "Attention as approximate message passing in a
switching state-space model" (eq. (15), section 4.1), measured for the Poisson family.

Table 1: for rates on a geometric grid of K points in [lo, hi] with uniform prior weights, the
expected KL(exact attention || linear surrogate) over queries y from the marginal of the
counts: the identity surrogate (key = lambda, a = 1, c = -1), the chord of log over [lo, hi]
(the fit's start) and the best linear map (a, c), with the fitted key's largest error against
log lambda (shift-aligned, and after the best affine alignment; in units of log(hi / lo)), and
the time of each fit (first call: compile + run; warm: a second call).

Table 2: the skip connection eta <- eta + step (y - m(eta)) from eta0 = log y + 1, with the exact
mean map exp(eta) and with the linear link's (eta - b) / a (the [1, 10] fit): the smallest depth
at which A(eta_L) / A(log y) exceeds the threshold, per step size and count.

    python benchmarks/link_conjecture.py [--num-rates 40] [--max-depth 200] [--threshold 10]
"""

from __future__ import annotations

import argparse
import time

import jax

jax.config.update("jax_enable_x64", True)

import numpy as np  # noqa: E402

from attnbayes.inference.attention.link_conjecture import (  # noqa: E402
    fit_linear_link,
    normaliser_blowup,
)

RANGES = [(0.8, 1.25), (0.5, 2.0), (1.0, 10.0), (5.0, 50.0), (0.1, 100.0)]
COUNTS = [1, 2, 5, 10, 20, 40, 80]
STEPS = [0.02, 0.05, 0.1, 0.2, 0.3, 0.5, 1.0]


def timed(fn):
    start = time.perf_counter()
    out = jax.block_until_ready(fn())
    return out, time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--num-rates", type=int, default=40)
    parser.add_argument("--max-depth", type=int, default=200)
    parser.add_argument("--threshold", type=float, default=10.0)
    args = parser.parse_args()

    print(f"Table 1: KL(exact || linear surrogate), K = {args.num_rates} geometric rates, uniform")
    head = (
        f"{'range':>12} {'Y':>4} {'identity':>10} {'chord':>10} {'fitted':>10} {'a':>8} "
        f"{'c':>8} {'b':>7} {'key err':>8} {'affine':>7} {'it':>3} {'first s':>8} {'warm s':>7}"
    )
    print(head)
    fits = {}
    for lo, hi in RANGES:
        rates = np.geomspace(lo, hi, args.num_rates)
        fit, first = timed(lambda rates=rates: fit_linear_link(rates))
        _, warm = timed(lambda rates=rates: fit_linear_link(rates))
        fits[(lo, hi)] = (rates, fit)
        print(
            f"{f'[{lo:g}, {hi:g}]':>12} {int(fit.counts[-1]):>4} {float(fit.identity_kl):>10.3g} "
            f"{float(fit.start_kl):>10.3g} {float(fit.mean_kl):>10.3g} "
            f"{float(fit.link.key_slope):>8.4f} {float(fit.link.bias_slope):>8.4f} "
            f"{float(fit.link.key_offset):>7.3f} "
            f"{float(np.max(np.abs(fit.key_relative_error))):>8.3f} "
            f"{float(np.max(np.abs(fit.affine_relative_error))):>7.3f} "
            f"{int(fit.num_iterations):>3} {first:>8.2f} {warm:>7.3f}"
            + ("" if bool(fit.converged) else "  (not converged)")
        )
    print("KL in nats; key err: max_j |a lambda_j + b - log lambda_j| / log(hi / lo); affine: the")
    print("same after the best affine alignment; it: L-BFGS iterations; Y: largest query count.")

    rates, wide = fits[(0.1, 100.0)]
    picks = np.searchsorted(rates, [0.1, 0.3, 1.0, 3.0, 10.0, 30.0, 100.0]).clip(0, len(rates) - 1)
    print(
        "\nKL per rate, [0.1, 100] fit: "
        + ", ".join(f"{rates[j]:.3g}: {float(wide.kl_per_rate[j]):.3g}" for j in picks)
    )

    _, link_fit = fits[(1.0, 10.0)]
    a, b = float(link_fit.link.key_slope), float(link_fit.link.key_offset)
    depths = list(range(1, args.max_depth + 1))
    table, seconds = timed(
        lambda: normaliser_blowup(
            COUNTS, STEPS, depths, linear_params=link_fit, threshold=args.threshold
        )
    )
    print(
        f"\nTable 2: first depth with A(eta_L) / A(log y) > {args.threshold:g} (- = never within "
        f"{args.max_depth}); eta0 = log y + 1; linear link of the [1, 10] fit, a = {a:.4f}, "
        f"b = {b:.3f} (stable iff step < 2a = {2 * a:.3f}); {seconds:.2f} s"
    )
    print(f"{'step':>6} | {'exact link, y =':<36}| linear link, y =")
    print(
        f"{'':>6} | "
        + "".join(f"{y:>5}" for y in COUNTS)
        + " | "
        + "".join(f"{y:>5}" for y in COUNTS)
    )
    for i, step in enumerate(STEPS):

        def row(first, i=i):
            return "".join(f"{'-' if d < 0 else d:>5}" for d in np.asarray(first[i]).tolist())

        print(
            f"{step:>6g} | {row(table.exact_first_depth)} | {row(table.linear_first_depth)}"
            + ("" if bool(table.linear_stable[i]) else "  (linear unstable)")
        )
    print(
        "linear limit log(A / A(log y)) = a y + b - log y: "
        + ", ".join(
            f"{y}: {v:.2f}" for y, v in zip(COUNTS, np.asarray(table.linear_limit), strict=True)
        )
    )
    print(
        "exact link: stable iff step * y < 2; beyond, bounded by log(exp(r-1)/r), r = step * y, "
        f"which exceeds log {args.threshold:g} only for r > "
        f"{_ricker_crossing(np.log(args.threshold)):.3f}"
    )


def _ricker_crossing(log_threshold: float) -> float:
    """The r > 1 with r - 1 - log r = log_threshold (bisection)."""
    lo, hi = 1.0, 1.0 + 10.0 * (1.0 + log_threshold)
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if mid - 1 - np.log(mid) < log_threshold else (lo, mid)
    return 0.5 * (lo + hi)


if __name__ == "__main__":
    main()
