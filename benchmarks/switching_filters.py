"""The switching-model filters (IMM, GPB2, GPB1; JAX) against filterpy's IMMEstimator.

The "maneuvering-target" scenario (``attnbayes.models.switching.maneuvering_target``: M = 2 modes, d
= 4, o = 2), float64. filterpy starts from a prior (x0, P0, mu0) at time 0 and predicts first; our
filters update first, so they are started from filterpy's first prediction (pi0 = mu0 Pi,
m0_j = F_j x0 + b_j, P0_j = F_j P0 F_j^T + Q_j), which makes ``imm_filter`` and filterpy's
IMMEstimator the same filter. Their filtered means are checked to agree to 1e-8 before any
timing (the maximum difference is printed). GPB2 and GPB1 are timed against the same filterpy
IMM, the only switching filter filterpy has.

Timings, all in one run so that the ratios are meaningful on a shared machine:

- one series of T steps: the public call (``imm_filter(params, y)``, which validates its
  inputs in NumPy before the jitted scan) and the jitted scan alone, after compilation, median
  of ``--inner`` calls with ``block_until_ready``; filterpy's ``predict(); update(y_t)`` loop
  over the same series (copying the filtered mean at each step), one call. ``--repeats``
  rounds interleave filterpy and ours, so both see the same load; the medians over rounds are
  reported per step and as filterpy / ours. The time of ``check_inputs`` alone is printed.
- a batch of ``--num-series`` series of T steps: ``jax.jit(jax.vmap(filter))`` compiled once
  (compile time reported separately: ``lower().compile()``), then the median of ``--repeats``
  calls; filterpy loops over the series one by one, timed on the first ``--filterpy-series``
  of them, and its median time per series is scaled linearly to the whole batch (filterpy's
  time per series does not depend on the data or the batch; the median resists bursts of load
  from other processes, and the plain total, scaled, is printed as well). Reported as
  throughput in steps per second (series x T / time) and as ours / filterpy.

    python benchmarks/switching_filters.py [--num-series 1000] [--num-steps 200] \
        [--filterpy-series 50] [--repeats 5] [--inner 10] [--seed 0]

Needs ``filterpy`` (in the ``bench`` and ``dev`` extras).
"""

from __future__ import annotations

import argparse
import time

import jax

jax.config.update("jax_enable_x64", True)

import numpy as np  # noqa: E402
from filterpy.kalman import IMMEstimator, KalmanFilter  # noqa: E402

from attnbayes.inference.switching import filters  # noqa: E402
from attnbayes.inference.switching.kalman import check_inputs  # noqa: E402
from attnbayes.models.switching import maneuvering_target, simulate  # noqa: E402

# filterpy's prior at time 0 (the target starts near the origin at 10 per step along x)
X0 = np.array([0.0, 10.0, 0.0, 0.0])
P0 = np.diag([100.0, 1.0, 100.0, 1.0])
MU0 = np.array([0.5, 0.5])

# public filter, and its jitted core (the same scan without the NumPy input validation)
FILTERS = {
    "imm": (filters.imm_filter, filters.imm_filter_unchecked),
    "gpb2": (filters.gpb2_filter, filters.gpb2_filter_unchecked),
    "gpb1": (filters.gpb1_filter, filters.gpb1_filter_unchecked),
}


def filterpy_start(params):
    """Our initial distribution = filterpy's first prediction from (X0, P0, MU0)."""
    f = np.asarray(params.dynamics_matrices)
    return params._replace(
        initial_probs=MU0 @ np.asarray(params.transition_matrix),
        initial_means=f @ X0 + np.asarray(params.dynamics_biases),
        initial_covs=f @ P0 @ np.swapaxes(f, 1, 2) + np.asarray(params.dynamics_covs),
    )


def filterpy_imm(params, y):
    """filterpy's IMMEstimator over one series: filtered means (T, d)."""
    kfs = []
    for j in range(MU0.shape[0]):
        kf = KalmanFilter(dim_x=X0.shape[0], dim_z=y.shape[1])
        kf.F = np.asarray(params.dynamics_matrices[j])
        kf.Q = np.asarray(params.dynamics_covs[j])
        kf.H = np.asarray(params.emission_matrices[j])
        kf.R = np.asarray(params.emission_covs[j])
        kf.x = X0.copy()
        kf.P = P0.copy()
        kfs.append(kf)
    imm = IMMEstimator(kfs, MU0.copy(), np.asarray(params.transition_matrix))
    out = np.empty((y.shape[0], X0.shape[0]))
    for t, obs in enumerate(y):
        imm.predict()
        imm.update(obs)
        out[t] = imm.x
    return out


def timed(fn, repeats, reduce=np.median):
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        jax.block_until_ready(fn())
        times.append(time.perf_counter() - start)
    return float(reduce(times))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--num-series", type=int, default=1000)
    parser.add_argument("--num-steps", type=int, default=200)
    parser.add_argument("--filterpy-series", type=int, default=50)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--inner", type=int, default=10)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    n, t_max = args.num_series, args.num_steps
    n_fp = min(args.filterpy_series, n)

    model = maneuvering_target()
    start = filterpy_start(model)
    keys = jax.random.split(jax.random.key(args.seed), n)
    sim = jax.jit(jax.vmap(lambda k: simulate(k, model, t_max)[2]))
    ys = np.asarray(sim(keys))  # (n, T, 2)
    y = ys[0]
    params, y_jax, _ = check_inputs(start, y)
    print(
        f"maneuvering-target, float64, T = {t_max}, batch {n} series; "
        f"jax {jax.__version__} on {jax.devices()[0].platform}"
    )

    # ------------------------------------------------------------------ agreement
    ref = filterpy_imm(model, y)
    ours = np.asarray(filters.imm_filter(start, y).mean)
    diff = np.max(np.abs(ours - ref))
    print(f"max |imm_filter mean - filterpy IMMEstimator mean| over T x d: {diff:.2e}")
    if not diff <= 1e-8:
        raise SystemExit(f"the two IMM filters disagree by {diff:.2e} > 1e-8")
    batch_ref = np.stack([filterpy_imm(model, ys[i]) for i in range(min(n_fp, 5))])

    # ------------------------------------------------------------------ one series
    # rounds interleave filterpy and ours, so that both see the same load on the machine
    for public, core in FILTERS.values():
        jax.block_until_ready(public(start, y))  # compile
        jax.block_until_ready(core(params, y_jax))
    single = {name: ([], []) for name in FILTERS}
    t_fp, t_check = [], []
    for _ in range(args.repeats):
        t_fp.append(timed(lambda: filterpy_imm(model, y), 1))
        t_check.append(timed(lambda: check_inputs(start, y), args.inner))
        for name, (public, core) in FILTERS.items():
            single[name][0].append(timed(lambda public=public: public(start, y), args.inner))
            single[name][1].append(timed(lambda core=core: core(params, y_jax), args.inner))
    t_fp, t_check = float(np.median(t_fp)), float(np.median(t_check))

    # ------------------------------------------------------------------ batch
    rows = []
    for name, (public, _) in FILTERS.items():
        batched = jax.jit(jax.vmap(lambda yy, public=public: public(start, yy).mean))
        tic = time.perf_counter()
        compiled = batched.lower(ys).compile()
        t_compile = time.perf_counter() - tic
        means = np.asarray(compiled(ys))
        if name == "imm":
            bdiff = np.max(np.abs(means[: batch_ref.shape[0]] - batch_ref))
            if not bdiff <= 1e-8:
                raise SystemExit(f"batched imm disagrees with filterpy by {bdiff:.2e}")
        t_batch = timed(lambda compiled=compiled: compiled(ys), args.repeats)
        t_pub, t_core = (float(np.median(v)) for v in single[name])
        rows.append((name, t_pub, t_core, t_batch, t_compile))

    per_series = []
    for i in range(n_fp):
        tic = time.perf_counter()
        filterpy_imm(model, ys[i])
        per_series.append(time.perf_counter() - tic)
    t_fp_batch = float(np.median(per_series)) * n
    t_fp_sum = float(np.sum(per_series)) * n / n_fp
    fp_rate = n * t_max / t_fp_batch

    us = 1e6 / t_max
    print(
        f"\none series, T = {t_max}, after compile, median over {args.repeats} interleaved rounds: "
        "time per step in us, ratio filterpy / ours"
    )
    print(f"{'filter':>18} {'call us/step':>13} {'ratio':>7} {'jit-core us/step':>17} {'ratio':>7}")
    print(f"{'filterpy IMM':>18} {us * t_fp:13.2f} {1.0:7.1f} {'':>17} {'':>7}")
    for name, t_pub, t_core, _, _ in rows:
        print(
            f"{name:>18} {us * t_pub:13.2f} {t_fp / t_pub:7.1f} "
            f"{us * t_core:17.2f} {t_fp / t_core:7.1f}"
        )
    print(
        f"(call = public filter incl. check_inputs, which alone takes {1e3 * t_check:.2f} ms "
        f"= {us * t_check:.2f} us/step; jit-core = the jitted scan on validated device arrays)"
    )

    print(
        f"\nbatch of {n} series x {t_max} steps: jit(vmap(filter)) after compile (median of "
        f"{args.repeats} calls); filterpy: median time per series over {n_fp} series x {n} "
        f"(their total scaled x{n / n_fp:g} would be {t_fp_sum:.1f} s)"
    )
    print(f"{'filter':>18} {'time s':>9} {'steps/s':>11} {'ratio':>7} {'compile s':>10}")
    print(f"{'filterpy IMM':>18} {t_fp_batch:9.3f} {fp_rate:11.3g} {1.0:7.1f} {'':>10}")
    for name, _, _, t_batch, t_compile in rows:
        rate = n * t_max / t_batch
        print(f"{name:>18} {t_batch:9.3f} {rate:11.3g} {rate / fp_rate:7.0f} {t_compile:10.2f}")


if __name__ == "__main__":
    main()
