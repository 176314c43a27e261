"""Tracking accuracy of the switching-model filters on the maneuvering target, over many seeds.

The "maneuvering-target" scenario (``attnbayes.models.switching.maneuvering_target``: constant
velocity and a 3 deg/s coordinated turn, state [px, vx, py, vy], position measured with sigma = 10),
float64. For each seed s = 0..S-1, ``simulate(jax.random.key(s), params, T)`` draws the modes,
the states and the observations; every filter runs with the true parameters (the model's own
initial distribution, so no filter has an advantage in its start). The filters:

- ``gpb1_filter``, ``gpb2_filter``, ``imm_filter`` (``attnbayes.inference.switching.filters``);
- ``rbpf`` (``attnbayes.inference.switching.particle``, locally optimal proposal, systematic
  resampling at ESS < N/2) with each of ``--particles``, keyed by ``fold_in(key(s), 1)``; skipped,
  with a message, when the module is absent;
- the known-mode Kalman filter: a Kalman filter along the true mode sequence (written here from
  ``kalman_predict``/``kalman_update`` in a ``lax.scan``), the lower bound for the error of
  any filter that does not know the modes.

Per series: position RMSE = sqrt(mean_t |(px, py)_t - filtered mean|^2) (Euclidean, over all T
steps), velocity RMSE likewise on (vx, vy), and mode accuracy = the fraction of steps where the
argmax of the filtered mode probabilities is the true mode. The table gives mean +- standard
error (sd / sqrt(S)) over the S series, and the paired difference of position RMSE against IMM
(same series, so its standard error is much smaller than that of the RMSE itself). Each
filter runs as ``jax.jit(jax.vmap(...))`` over the S series; "ms/series" is the batch time
after compilation (median of ``--repeats`` calls; one call for the RBPF) divided by S, and
the compile time is given separately.

    python benchmarks/switching_rmse.py [--num-seeds 100] [--num-steps 200] \
        [--particles 100 1000] [--repeats 3]
"""

from __future__ import annotations

import argparse
import importlib.util
import time

import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

from attnbayes.inference.switching.filters import gpb1_filter, gpb2_filter, imm_filter  # noqa: E402
from attnbayes.inference.switching.kalman import kalman_predict, kalman_update  # noqa: E402
from attnbayes.models.switching import SwitchingParams, maneuvering_target, simulate  # noqa: E402

POS, VEL = np.array([0, 2]), np.array([1, 3])


def known_mode_kalman(params, modes, observations):
    """Kalman filter along the true modes: step 1 updates N(m0_{s_1}, P0_{s_1}) with y_1,
    then x_t is predicted with (F, b, Q)_{s_t} and updated with (H, R)_{s_t}. Filtered means
    (T, d)."""

    def update(mean, cov, y, s):
        return kalman_update(mean, cov, y, params.emission_matrices[s], params.emission_covs[s])

    s1 = modes[0]
    mean, cov, _ = update(params.initial_means[s1], params.initial_covs[s1], observations[0], s1)

    def step(carry, inp):
        y, s = inp
        pred = kalman_predict(
            *carry, params.dynamics_matrices[s], params.dynamics_biases[s], params.dynamics_covs[s]
        )
        mean, cov, _ = update(*pred, y, s)
        return (mean, cov), mean

    _, rest = jax.lax.scan(step, (mean, cov), (observations[1:], modes[1:]))
    return jnp.concatenate([mean[None], rest])


def median_time(fn, repeats):
    times = []
    for _ in range(repeats):
        tic = time.perf_counter()
        out = jax.block_until_ready(fn())
        times.append(time.perf_counter() - tic)
    return out, float(np.median(times))


def metrics(mean, mode_probs, states, modes):
    """Per-series position RMSE, velocity RMSE, mode accuracy (NaN without mode_probs)."""
    err = np.asarray(mean) - states
    pos = np.sqrt(np.mean(np.sum(err[..., POS] ** 2, axis=-1), axis=-1))
    vel = np.sqrt(np.mean(np.sum(err[..., VEL] ** 2, axis=-1), axis=-1))
    if mode_probs is None:
        acc = np.full(pos.shape, np.nan)
    else:
        acc = np.mean(np.argmax(np.asarray(mode_probs), axis=-1) == modes, axis=-1)
    return pos, vel, acc


def fmt(values, digits):
    """mean +- standard error in 19 characters ("-" when not defined)."""
    if np.all(np.isnan(values)) or np.all(values == 0):
        return f"{'-':^19}"
    se = np.std(values, ddof=1) / np.sqrt(values.shape[0])
    return f"{np.mean(values):>8.{digits}f} +- {se:<7.{digits}f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--num-seeds", type=int, default=100)
    parser.add_argument("--num-steps", type=int, default=200)
    parser.add_argument("--particles", type=int, nargs="*", default=[100, 1000])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    s, t_max = args.num_seeds, args.num_steps

    params = maneuvering_target()
    keys = jnp.stack([jax.random.key(i) for i in range(s)])
    modes, states, ys = (
        np.asarray(a) for a in jax.jit(jax.vmap(lambda k: simulate(k, params, t_max)))(keys)
    )
    filter_keys = jax.vmap(lambda k: jax.random.fold_in(k, 1))(keys)
    print(
        f"maneuvering-target, float64, T = {t_max}, {s} seeds (series); fraction of steps in "
        f"the turn mode: {np.mean(modes == 1):.3f}; jax {jax.__version__} on "
        f"{jax.devices()[0].platform}"
    )

    # name -> (batched function of (filter keys, modes, observations) -> (mean, mode_probs), reps)
    runs = {}
    for name, f in (("GPB1", gpb1_filter), ("GPB2", gpb2_filter), ("IMM", imm_filter)):
        runs[name] = (lambda k, m, y, f=f: (lambda r: (r.mean, r.mode_probs))(f(params, y)), 0)
    if importlib.util.find_spec("attnbayes.inference.switching.particle") is not None:
        from attnbayes.inference.switching.particle import rbpf

        for n in args.particles:
            runs[f"RBPF N={n}"] = (
                lambda k, m, y, n=n: (lambda r: (r.mean, r.mode_probs))(rbpf(k, params, y, n)),
                1,
            )
    else:
        print("RBPF skipped: attnbayes.inference.switching.particle is not there")
    kf_params = SwitchingParams(*(jnp.asarray(a, jnp.float64) for a in params))
    runs["known-mode KF"] = (lambda k, m, y: (known_mode_kalman(kf_params, m, y), None), 0)

    inputs = (filter_keys, jnp.asarray(modes), jnp.asarray(ys))
    rows = []
    for name, (fn, single) in runs.items():
        tic = time.perf_counter()
        compiled = jax.jit(jax.vmap(fn)).lower(*inputs).compile()
        t_compile = time.perf_counter() - tic
        if not single:
            jax.block_until_ready(compiled(*inputs))  # first call
        (mean, mode_probs), t_run = median_time(
            lambda compiled=compiled: compiled(*inputs), 1 if single else args.repeats
        )
        rows.append((name, *metrics(mean, mode_probs, states, modes), t_run / s, t_compile))
        print(f"  done: {name} ({t_run:.2f} s for the batch)", flush=True)

    imm_pos = next(r[1] for r in rows if r[0] == "IMM")
    print(
        f"\nmean +- standard error over {s} series of T = {t_max}; "
        "'pos - IMM': the paired difference of position RMSE, series by series"
    )
    print(
        f"{'filter':>14} {'position RMSE':^19} {'pos - IMM':^19} {'velocity RMSE':^19} "
        f"{'mode accuracy':^19} {'ms/series':>10} {'compile s':>10}"
    )
    for name, pos, vel, acc, t_series, t_compile in rows:
        print(
            f"{name:>14} {fmt(pos, 2)} {fmt(pos - imm_pos, 3)} {fmt(vel, 3)} {fmt(acc, 3)} "
            f"{1e3 * t_series:10.2f} {t_compile:10.2f}"
        )
    print(
        f"(always guessing the constant-velocity mode would give mode accuracy "
        f"{np.mean(modes == 0):.3f})"
    )


if __name__ == "__main__":
    main()
