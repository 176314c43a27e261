"""The table no anchor has: regret against the oracle Bayes rule versus N, by family and noise.

For each noise kind (``NOISE_KINDS``: "homoscedastic", every s_i = 1, ``HOMOSCEDASTIC``; or
"heteroscedastic", s_i from ``NoisePrior()``: 1 task in 4 homoscedastic, the others with log
s_i uniform, up to 10x apart), each family of ``training.HELDOUT_FAMILIES`` and each N,
``regret_versus_n`` draws tasks
(``grid_training.heldout_noisy_tasks``: nu from the family, z_i ~ nu, x_i = z_i + s_i eps_i)
and runs every method (``REGRET_METHODS``) on the same tasks. On a task with true measure nu
the oracle Bayes rule E[z_i | x_i, s_i, nu] has the least mean squared error of any estimator
that knows nu; a method's regret on the task is

    R = (1/N) sum_i (z_hat_i - z_i)^2 - (1/N) sum_i (E[z_i | x_i, s_i, nu] - z_i)^2,

averaged over the tasks of the cell with its standard error over tasks, sd(R_t) / sqrt(T).
Paired comparisons: the "best classical" rule of a cell is the one of ``CLASSICAL_METHODS``
(EM to convergence, the NPMLE, James-Stein, SURE) with the least mean regret there; a method's
paired difference to it is the mean over tasks of R_t(method) - R_t(best) with the standard
error of those differences (the same tasks, so the task-to-task spread cancels), and its ratio
is mean R(method) / mean R(best) on the same tasks. Issue 38's requirement for the grid stack:
a ratio <= 1.1 or a paired difference within 2 standard errors (``meets_requirement``).

Methods:

- ``"v2"``: the grid stack (``grid_stack``; default ``pretrained_grid_stack()``), batched over
  the tasks (``jax.lax.map``, one compiled program per shape);
- ``"v1"``: the unrolled-EM stack (``unrolled``; default ``pretrained_unrolled_em()``): one
  sigma only, so heteroscedastic tasks get a row of NaN with a note; dense (K = N: N^2 per
  layer) below N = ``V1_STREAM_FROM``, streamed over blocks of ``V1_BLOCK_SIZE`` from there;
- ``"em"``: EM with K = N atoms at the data, weights 1/N, to convergence (``em.fit_em``,
  at most ``EM_MAX_ITERS`` steps, tol 1e-8), then the posterior mean; N^2 per step, so not
  run above N = ``em_max_points`` (default ``EM_MAX_POINTS``; a row of NaN says so); fits
  that hit the cap are counted in the note;
- ``"npmle"``: the Kiefer-Wolfowitz NPMLE (``kiefer_wolfowitz.npmle``, default settings) and
  its posterior (``npmle_posterior``: GMLEB); fits that did not converge are counted;
- ``"james-stein"``: the positive-part James-Stein rule toward the precision-weighted mean
  (``shrinkage.james_stein``, heteroscedastic form);
- ``"sure"``: Xie-Kou-Brown SURE-G shrinkage (``shrinkage.sure_shrinkage``);
- ``"nuts"``: NUTS on the deconvolution model with the truncated DP prior of the *training*
  prior (``models.deconvolution.deconvolution_model(prior="dp")``, concentration
  Gamma(dp_shape, dp_rate), base N(0, base_scale^2), ``truncation`` atoms, each unit its own
  s_i), through ``compare_deconvolution``'s "nuts-dp" (``mcmc.run_nuts``), as
  ``learned.comparison`` runs it; only on the first ``nuts_tasks`` tasks of the families in
  ``nuts_families`` with N <= ``nuts_max_points``; its paired differences are on those tasks;
  the worst R-hat and the divergences are in the note;
- ``"oracle"``: the oracle Bayes rule itself (regret 0 by definition; its discrete-posterior
  intervals are the coverage reference).

Coverage: the share of a task's points whose z_i lies in the method's central 50% / 90%
interval, averaged over tasks with the standard error over tasks: the stacks' normal intervals
mean -+ q sd from their posterior variance, the NPMLE's and the oracle's discrete-posterior
intervals, James-Stein's and SURE's plug-in normal posterior N(z_hat_i, posterior_sd_i^2),
NUTS's posterior quantiles of z_i. EM to convergence gets none.

Time per data set (``seconds_per_task``), warm: the batched methods (v2, v1, james-stein,
sure, oracle) are timed on a second call over the cell's tasks divided by T (the first call
of a shape compiles); the methods run one task at a time (em, npmle, nuts) report the median
over the cell's tasks of each task's wall time (the first task of a shape compiles).

``xie_kou_brown_table``: the heteroscedastic settings (a, b, c) of Xie, Kou and Brown (2012,
JASA 107, Section 7; ``models.deconvolution.xie_kou_brown``). In setting (c) the means
depend on the standard errors (theta_i = s_i^2), so no prior independent of s_i describes the
data and no oracle of this model exists: as XKB do, the table reports the mean squared error
(1/N) sum_i (theta_hat_i - theta_i)^2, averaged over replications, not a regret.

Where the work runs. ``regret_versus_n`` and ``xie_kou_brown_table`` take ``mesh=None`` (a
one-axis ``jax.sharding.Mesh``; default every device, ``attnbayes.sharding``): the batched
methods (v2, v1, james-stein, sure and the oracle) split a cell's T tasks over its devices,
each device running its T / D tasks (``lax.map`` within it), T padded with copies of the last
task to a multiple of D and the padding dropped; nothing is reduced across devices, so the
only traffic is the tasks in (T N numbers) and the estimates out, against N x K (oracle), N x
``GRID_SIZE`` (v2) or N^2 (v1) work per task and layer. A task's estimate is the same program
on any mesh: equal to round-off on 1, 2 or 4 devices. The tasks are drawn per cell from the
cell's key, not per device. Not split: "em", "npmle" and "nuts" are Python loops over one fit
per task (data-dependent iteration counts, NUTS's own chains), run one after another on
every process; NUTS's key for task t is ``fold_in(fold_in(cell key, 1), t)`` whatever the
mesh.

``real_data_estimates``: the Efron-Morris batting averages (``learned.comparison``: 18
players, arcsine scale, sigma = 1, the rest-of-season average as truth) and the eight schools
(ArviZ's example data "centered_eight": y and sigma; estimates only, no truth).

Over 800 lines: three studies (``regret_versus_n``, ``xie_kou_brown_table``,
``real_data_estimates``) share one private runner of every estimator on a batch of tasks (the
learned stacks, EM, the NPMLE, SURE and James-Stein shrinkage, NUTS, the oracle), with its
warm timing, intervals and coverage; split per study, that runner would become public with no
other user.
"""

from __future__ import annotations

import functools
import statistics
import time
import warnings
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from .... import sharding, validation
from ....models.deconvolution import xie_kou_brown
from .. import em
from ..comparison import compare_deconvolution
from ..estep import posterior_unchecked
from ..intervals import discrete_posterior_intervals
from ..kiefer_wolfowitz import npmle, npmle_posterior
from ..shrinkage import james_stein_unchecked, sure_shrinkage_unchecked
from .comparison import (
    EFRON_MORRIS_AT_BATS,
    EFRON_MORRIS_HITS,
    EFRON_MORRIS_PLAYERS,
    EFRON_MORRIS_REST_OF_SEASON,
    arcsine_transform,
)
from .grid_stack import (
    GRID_SIZE,
    check_grid_params,
    grid_stack_moments_unchecked,
    pretrained_grid_stack,
)
from .grid_training import HOMOSCEDASTIC, NoisePrior, check_noise_prior, heldout_noisy_tasks
from .training import FAMILIES, HELDOUT_FAMILIES, TaskPrior, check_task_prior
from .unrolled import check_params, pretrained_unrolled_em
from .unrolled import forward as v1_forward

if TYPE_CHECKING:
    import pandas as pd

REGRET_METHODS = ("oracle", "v2", "v1", "em", "npmle", "james-stein", "sure", "nuts")
DEFAULT_METHODS = ("v2", "v1", "em", "npmle", "james-stein", "sure", "nuts")
CLASSICAL_METHODS = ("em", "npmle", "james-stein", "sure")
XKB_METHODS = ("mle", "v2", "em", "npmle", "james-stein", "sure")
NOISE_KINDS = ("homoscedastic", "heteroscedastic")
COVERAGE_PROBS = (0.5, 0.9)
EM_MAX_POINTS = 2000
EM_MAX_ITERS = 500
V1_STREAM_FROM = 2000
V1_BLOCK_SIZE = 1024
REQUIRED_RATIO = 1.1
REQUIRED_SES = 2.0
# elements of the per-task matrices one batch of lax.map may hold (float64: 256 MB)
_BATCH_ELEMENTS = 2**25
_Z = {p: statistics.NormalDist().inv_cdf((1 + p) / 2) for p in COVERAGE_PROBS}
_COLUMNS = (
    "noise",
    "family",
    "num_points",
    "method",
    "num_tasks",
    "regret",
    "regret_se",
    "mse",
    "oracle_mse",
    "best_classical",
    "diff_best",
    "diff_best_se",
    "ratio_best",
    "meets_requirement",
    "diff_v2",
    "diff_v2_se",
    "coverage_50",
    "coverage_50_se",
    "coverage_90",
    "coverage_90_se",
    "seconds_per_task",
    "note",
)


class _Batch(NamedTuple):
    """Tasks of one cell as NumPy arrays: x, sigma, z (T, N); atoms, weights (T, K) or None."""

    x: np.ndarray
    sigma: np.ndarray
    z: np.ndarray
    atoms: np.ndarray | None = None
    weights: np.ndarray | None = None


class _Estimate(NamedTuple):
    """A method on the first ``mean.shape[0]`` tasks of a batch: means (n, N), intervals
    {prob: (lower, upper)} each (n, N) or None, seconds per data set, a note."""

    mean: np.ndarray
    intervals: dict | None
    seconds: float
    note: str = ""


class _Context(NamedTuple):
    """What the estimators share within one call."""

    grid_params: object
    v1_params: object
    prior: TaskPrior
    nuts_tasks: int
    nuts_kwargs: dict
    em_max_points: int
    warm: set
    mesh: object


# ----------------------------------------------------------------------------- kernels


def _batch_size(num_tasks: int, per_task: int) -> int:
    return int(max(1, min(num_tasks, _BATCH_ELEMENTS // max(per_task, 1))))


@functools.partial(jax.jit, static_argnames=("grid_size", "batch_size", "mesh"))
def _v2_batched(params, x, s, grid_size, batch_size, mesh):
    def local(params, x, s):
        mask = jnp.ones(x.shape[1:], bool)
        return jax.lax.map(
            lambda xs: grid_stack_moments_unchecked(params, xs[0], xs[1], mask, grid_size),
            (x, s),
            batch_size=batch_size,
        )

    return sharding.shard_batch(local, mesh, (False, True, True), True)(params, x, s)


@functools.partial(jax.jit, static_argnames=("block_size", "batch_size", "mesh"))
def _v1_batched(params, x, scale, block_size, batch_size, mesh):
    def local(params, x, scale):
        mask = jnp.ones(x.shape[1:], bool)

        def one(args):
            xi, si = args
            mean, var = v1_forward(params, (xi / si)[:, None], mask, block_size)
            return mean[:, 0] * si, var[:, 0] * si**2

        return jax.lax.map(one, (x, scale), batch_size=batch_size)

    return sharding.shard_batch(local, mesh, (False, True, True), True)(params, x, scale)


@functools.partial(jax.jit, static_argnames=("batch_size", "mesh"))
def _oracle_batched(x, s, atoms, weights, batch_size, mesh):
    def one(args):
        xi, si, a, w = args
        mean, resp = posterior_unchecked(xi[:, None], a[:, None], w, si[:, None])
        ends = discrete_posterior_intervals(resp, a[:, None], COVERAGE_PROBS)
        return mean[:, 0], {p: (lo[:, 0], hi[:, 0]) for p, (lo, hi) in ends.items()}

    def local(*args):
        return jax.lax.map(one, args, batch_size=batch_size)

    return sharding.shard_batch(local, mesh, (True,) * 4, True)(x, s, atoms, weights)


@functools.partial(jax.jit, static_argnames=("kind", "mesh"))
def _shrinkage_batched(x, s, kind, mesh):
    rule = james_stein_unchecked if kind == "james-stein" else sure_shrinkage_unchecked

    def one(xi, si):
        out = rule(xi[:, None], si[:, None])
        return out.z_hat[:, 0], out.posterior_sd[:, 0]

    return sharding.shard_batch(jax.vmap(one), mesh, (True, True), True)(x, s)


def _tasks_run(ctx: _Context, name, kernel, shared, tasks):
    """(output of ``kernel(*shared, *tasks)`` on the T tasks, seconds per task): the tasks
    (NumPy, leading axis T) padded with copies of the last to a multiple of the mesh size and
    split over ``ctx.mesh`` (outputs gathered, padding dropped); host (NumPy) values in.
    ``kernel`` also receives the number of tasks per device, from which it sizes its
    ``lax.map`` batches."""
    shared = sharding.gather(shared)  # host values: every process passes the same ones
    t = tasks[0].shape[0]
    size = sharding.padded_size(t, ctx.mesh)
    padded = tuple(np.concatenate([a, np.repeat(a[-1:], size - t, axis=0)]) for a in tasks)
    per_device = size // sharding.mesh_size(ctx.mesh)
    out, sec = _warm_timed(ctx, name, lambda *a: kernel(per_device, *a), *shared, *padded)
    return jax.tree.map(lambda a: a[:t], sharding.gather(out)), sec / t


def _normal_intervals(mean, sd):
    mean, sd = np.asarray(mean, np.float64), np.asarray(sd, np.float64)
    return {p: (mean - _Z[p] * sd, mean + _Z[p] * sd) for p in COVERAGE_PROBS}


def _warm_timed(ctx: _Context, name, fn, *args):
    """(output, seconds per task): a second call when this (name, shapes) is new (compiled)."""
    signature = (name, *(tuple(np.shape(a)) for a in jax.tree.leaves(args)))
    if signature not in ctx.warm:
        jax.block_until_ready(fn(*args))
        ctx.warm.add(signature)
    start = time.perf_counter()
    out = jax.block_until_ready(fn(*args))
    return out, time.perf_counter() - start


def _sigma_arg(s):
    """One task's sigma for the classical fits: a number when every s_i is the same."""
    s = np.asarray(s, np.float64)
    return float(s[0]) if np.all(s == s[0]) else s


# ----------------------------------------------------------------------------- estimators


def _v2(batch: _Batch, ctx: _Context) -> _Estimate:
    n = batch.x.shape[1]

    def kernel(per_device, params, x, s):
        b = _batch_size(per_device, n * GRID_SIZE)
        return _v2_batched(params, x, s, GRID_SIZE, b, ctx.mesh)

    (mean, var), sec = _tasks_run(ctx, "v2", kernel, (ctx.grid_params,), (batch.x, batch.sigma))
    return _Estimate(mean, _normal_intervals(mean, np.sqrt(var)), sec)


def _v1(batch: _Batch, ctx: _Context) -> _Estimate | str:
    if not np.all(batch.sigma == batch.sigma[:, :1]):
        return "v1 takes one sigma per data set: not run on heteroscedastic tasks"
    n = batch.x.shape[1]
    block = V1_BLOCK_SIZE if n >= V1_STREAM_FROM else None

    def kernel(per_device, params, x, scale):
        b = 1 if block is not None else _batch_size(per_device, 2 * n * n)
        return _v1_batched(params, x, scale, block, b, ctx.mesh)

    tasks = (batch.x, batch.sigma[:, 0])
    (mean, var), sec = _tasks_run(ctx, "v1", kernel, (ctx.v1_params,), tasks)
    note = f"streamed over blocks of {block}" if block is not None else ""
    return _Estimate(mean, _normal_intervals(mean, np.sqrt(var)), sec, note)


def _oracle(batch: _Batch, ctx: _Context) -> _Estimate:
    per_task = 2 * batch.x.shape[1] * batch.atoms.shape[1]

    def kernel(per_device, *tasks):
        return _oracle_batched(*tasks, _batch_size(per_device, per_task), ctx.mesh)

    tasks = (batch.x, batch.sigma, batch.atoms, batch.weights)
    (mean, intervals), sec = _tasks_run(ctx, "oracle", kernel, (), tasks)
    return _Estimate(mean, intervals, sec)


def _shrinkage(kind):
    def run(batch: _Batch, ctx: _Context) -> _Estimate:
        def kernel(per_device, x, s):
            return _shrinkage_batched(x, s, kind, ctx.mesh)

        (mean, sd), sec = _tasks_run(ctx, kind, kernel, (), (batch.x, batch.sigma))
        return _Estimate(mean, _normal_intervals(mean, sd), sec)

    return run


def _em(batch: _Batch, ctx: _Context) -> _Estimate | str:
    n = batch.x.shape[1]
    if n > ctx.em_max_points:
        return f"EM with K = N atoms not run above N = {ctx.em_max_points} (N^2 per step)"
    means, times, capped = [], [], 0
    for xi, si in zip(batch.x, batch.sigma, strict=True):
        sig = _sigma_arg(si)
        start = time.perf_counter()
        fit = em.fit_em(xi, sig, max_iters=EM_MAX_ITERS, tol=1e-8)
        mean = np.asarray(em.posterior_mean(xi, fit.atoms, fit.weights, sig))
        times.append(time.perf_counter() - start)
        means.append(mean)
        capped += not bool(fit.converged)
    note = (
        f"{capped} of {len(means)} fits stopped at {EM_MAX_ITERS} steps unconverged"
        if capped
        else ""
    )
    return _Estimate(np.stack(means), None, float(np.median(times)), note)


def _npmle(batch: _Batch, ctx: _Context) -> _Estimate:
    means, lows, highs, times, failed = [], {}, {}, [], 0
    for xi, si in zip(batch.x, batch.sigma, strict=True):
        sig = _sigma_arg(si)
        start = time.perf_counter()
        fit = npmle(xi, sig)
        mean, ends = npmle_posterior(xi, sig, fit, probs=COVERAGE_PROBS)
        mean = np.asarray(mean)
        times.append(time.perf_counter() - start)
        means.append(mean)
        failed += not bool(fit.converged)
        for p, (lo, hi) in ends.items():
            lows.setdefault(p, []).append(np.asarray(lo))
            highs.setdefault(p, []).append(np.asarray(hi))
    intervals = {p: (np.stack(lows[p]), np.stack(highs[p])) for p in COVERAGE_PROBS}
    note = f"{failed} of {len(means)} NPMLE fits did not converge" if failed else ""
    return _Estimate(np.stack(means), intervals, float(np.median(times)), note)


def _nuts_settings(prior: TaskPrior, nuts_kwargs: dict) -> dict:
    settings = dict(
        atom_loc=0.0,
        atom_scale=prior.base_scale,
        dp_shape=prior.dp_shape,
        dp_rate=prior.dp_rate,
        posterior_predictive=False,  # only z_hat and the intervals are read
    )
    settings.update(nuts_kwargs)
    return settings


def _nuts_one(key, x, sigma, prior: TaskPrior, nuts_kwargs: dict, scale: float = 1.0):
    """(mean, {prob: (lo, hi)}, max R-hat, divergences) of NUTS-DP on one data set, run on
    x / scale and sigma / scale (the training prior's units) and returned in x's units."""
    sig = _sigma_arg(np.asarray(sigma) / scale)
    with warnings.catch_warnings():
        # compare_deconvolution's PSIS-LOO (not read here) warns on large Pareto k
        warnings.filterwarnings("ignore", message="Estimated shape parameter of Pareto")
        result = compare_deconvolution(
            key,
            np.asarray(x) / scale,
            sig,
            methods=("nuts-dp",),
            num_atoms_dp=prior.truncation,
            method_kwargs={"nuts-dp": _nuts_settings(prior, nuts_kwargs)},
        )
    fit = result.fits["nuts-dp"]
    table = result.table.set_index("metric")["value"]
    intervals = {
        p: (np.asarray(lo) * scale, np.asarray(hi) * scale)
        for p, (lo, hi) in fit.intervals.items()
        if p in COVERAGE_PROBS
    }
    rhat = float(table.get("max_rhat_invariant", np.nan))
    return np.asarray(fit.z_hat) * scale, intervals, rhat, float(table.get("divergences", 0.0))


def _nuts_note(count, nuts_kwargs, rhats, divergences) -> str:
    sizes = {"num_chains": 2, "num_warmup": 500, "num_samples": 500, **nuts_kwargs}
    where = f" on the first {count} tasks" if count > 1 else ""
    note = (
        f"NUTS-DP{where}, {sizes['num_chains']} chains x "
        f"({sizes['num_warmup']} warmup + {sizes['num_samples']} draws); worst R-hat "
        f"{np.nanmax(rhats):.3f}, {int(np.sum(divergences))} divergences"
    )
    if np.nanmax(rhats) > 1.01 or np.sum(divergences) > 0:
        note += " (R-hat above 1.01 or divergences: the chains may not have converged)"
    return note


def _nuts(key):
    def run(batch: _Batch, ctx: _Context) -> _Estimate:
        count = min(ctx.nuts_tasks, batch.x.shape[0])
        means, lows, highs, times, rhats, divs = [], {}, {}, [], [], []
        for t in range(count):
            start = time.perf_counter()
            mean, ends, rhat, div = _nuts_one(
                jax.random.fold_in(key, t), batch.x[t], batch.sigma[t], ctx.prior, ctx.nuts_kwargs
            )
            times.append(time.perf_counter() - start)
            means.append(mean)
            rhats.append(rhat)
            divs.append(div)
            for p, (lo, hi) in ends.items():
                lows.setdefault(p, []).append(lo)
                highs.setdefault(p, []).append(hi)
        intervals = {p: (np.stack(lows[p]), np.stack(highs[p])) for p in COVERAGE_PROBS}
        note = _nuts_note(count, ctx.nuts_kwargs, rhats, divs)
        return _Estimate(np.stack(means), intervals, float(np.median(times)), note)

    return run


# ----------------------------------------------------------------------------- summaries


def _mean_se(values):
    values = np.asarray(values, np.float64)
    n = values.shape[0]
    se = float(values.std(ddof=1) / np.sqrt(n)) if n > 1 else float("nan")
    return float(values.mean()), se


def _coverage(est: _Estimate, z):
    out = {}
    for p in COVERAGE_PROBS:
        if est.intervals is None:
            out[f"coverage_{round(100 * p)}"] = out[f"coverage_{round(100 * p)}_se"] = np.nan
            continue
        lo, hi = est.intervals[p]
        zz = z[: lo.shape[0]]
        per_task = np.mean((lo <= zz) & (zz <= hi), axis=1)
        mean, se = _mean_se(per_task)
        out[f"coverage_{round(100 * p)}"], out[f"coverage_{round(100 * p)}_se"] = mean, se
    return out


def _paired(loss, reference):
    """(mean difference, its SE, ratio of means) of loss - reference[:len(loss)]."""
    if reference is None:
        return np.nan, np.nan, np.nan
    ref = reference[: loss.shape[0]]
    diff, se = _mean_se(loss - ref)
    denominator = float(ref.mean())
    ratio = float(loss.mean()) / denominator if denominator != 0 else np.nan
    return diff, se, ratio


def _meets(diff, se, ratio):
    if not np.isfinite(diff):
        return None
    return bool(ratio <= REQUIRED_RATIO or diff <= REQUIRED_SES * se)


def _cell_rows(batch: _Batch, estimates: dict, reference_mse) -> list[dict]:
    """One row per method of a cell (``estimates``: method -> _Estimate or a skip note).

    ``reference_mse`` (T,): the oracle's MSE per task (regret), or zeros (plain MSE)."""
    losses, mses = {}, {}
    for method, est in estimates.items():
        if isinstance(est, _Estimate):
            n = est.mean.shape[0]
            mses[method] = np.mean((est.mean - batch.z[:n]) ** 2, axis=1)
            losses[method] = mses[method] - reference_mse[:n]
    full = batch.x.shape[0]
    classical = [m for m in CLASSICAL_METHODS if m in losses and losses[m].shape[0] == full]
    best = min(classical, key=lambda m: losses[m].mean()) if classical else None
    best_loss = losses[best] if best is not None else None
    v2_loss = losses.get("v2")
    rows = []
    for method, est in estimates.items():
        if not isinstance(est, _Estimate):
            rows.append(dict(method=method, num_tasks=0, best_classical=best, note=est))
            continue
        loss = losses[method]
        regret, regret_se = _mean_se(loss)
        diff, diff_se, ratio = _paired(loss, best_loss)
        diff_v2, diff_v2_se, _ = _paired(loss, v2_loss)
        rows.append(
            dict(
                method=method,
                num_tasks=loss.shape[0],
                regret=regret,
                regret_se=regret_se,
                mse=float(mses[method].mean()),
                oracle_mse=float(reference_mse[: loss.shape[0]].mean()),
                best_classical=best,
                diff_best=diff,
                diff_best_se=diff_se,
                ratio_best=ratio,
                meets_requirement=_meets(diff, diff_se, ratio),
                diff_v2=diff_v2,
                diff_v2_se=diff_v2_se,
                **_coverage(est, batch.z),
                seconds_per_task=est.seconds,
                note=est.note,
            )
        )
    return rows


def _frame(rows, leading):
    import pandas as pd

    columns = list(leading) + [c for c in _COLUMNS if c not in ("noise", "family", "num_points")]
    frame = pd.DataFrame(rows).reindex(columns=columns)
    frame["num_tasks"] = frame["num_tasks"].fillna(0).astype(int)
    frame["meets_requirement"] = frame["meets_requirement"].astype("boolean")
    frame["note"] = frame["note"].fillna("")
    return frame


# ----------------------------------------------------------------------------- checks


def _names(name: str, value, known) -> tuple:
    values = (value,) if isinstance(value, str) else tuple(value)
    unknown = [v for v in values if v not in known]
    if unknown or not values:
        raise ValueError(f"{name}: unknown {unknown or values}; choose from {list(known)}")
    return tuple(dict.fromkeys(values))


def _sizes(sizes) -> tuple:
    sizes = (sizes,) if isinstance(sizes, int | np.integer) else tuple(sizes)
    if not sizes:
        raise ValueError("sizes: expected at least one N")
    return tuple(validation.check_positive_int("sizes", n, minimum=2) for n in sizes)


def _tasks_per_size(num_tasks, sizes) -> dict:
    if isinstance(num_tasks, Mapping):
        missing = [n for n in sizes if n not in num_tasks]
        if missing:
            raise ValueError(f"num_tasks: no number of tasks for N = {missing}")
        return {n: validation.check_positive_int("num_tasks", num_tasks[n]) for n in sizes}
    count = validation.check_positive_int("num_tasks", num_tasks)
    return dict.fromkeys(sizes, count)


def _check_progress(progress):
    if progress is not None and not callable(progress):
        raise ValueError(f"progress: expected a callable, got {progress!r}")
    return progress or (lambda message: None)


def _check_nuts_kwargs(nuts_kwargs) -> dict:
    if nuts_kwargs is None:
        return {}
    if not isinstance(nuts_kwargs, Mapping):
        raise ValueError(f"nuts_kwargs: expected a dict, got {type(nuts_kwargs).__name__}")
    return dict(nuts_kwargs)


def _stacks(methods, grid_params, v1_params):
    grid = v1 = None
    if "v2" in methods:
        grid = pretrained_grid_stack() if grid_params is None else grid_params
        grid = check_grid_params("grid_params", grid, dtype=jnp.zeros(()).dtype)
    if "v1" in methods:
        v1 = pretrained_unrolled_em() if v1_params is None else v1_params
        v1 = check_params("v1_params", v1, 1)
        v1 = jax.tree.map(lambda a: jnp.asarray(a, jnp.zeros(()).dtype), v1)
    return grid, v1


# ----------------------------------------------------------------------------- public API


def regret_versus_n(
    key,
    *,
    families=HELDOUT_FAMILIES,
    sizes=(100, 500),
    num_tasks=64,
    noise=NOISE_KINDS,
    methods=DEFAULT_METHODS,
    grid_params=None,
    v1_params=None,
    nuts_tasks: int = 4,
    nuts_max_points: int = 1000,
    nuts_families=FAMILIES,
    nuts_kwargs: dict | None = None,
    em_max_points: int = EM_MAX_POINTS,
    prior: TaskPrior | None = None,
    noise_prior: NoisePrior | None = None,
    progress: Callable[[str], None] | None = None,
    mesh=None,
) -> pd.DataFrame:
    """Regret against the oracle Bayes rule of every method, by noise kind, family and N
    (module docstring; "Where the work runs" for what ``mesh`` splits).

    Args:
        key: ``jax.random`` key (first). The tasks of (noise kind i, family f, N) come from
            ``heldout_noisy_tasks(fold_in(fold_in(fold_in(key, i), HELDOUT_FAMILIES.index(f)),
            N), f, T, N, noise=..., prior=prior)``, i the index in ``NOISE_KINDS``; NUTS's
            key for task t is ``fold_in(fold_in(that key, 1), t)``.
        families: names from ``HELDOUT_FAMILIES``.
        sizes: the N of the tasks, each >= 2.
        num_tasks: T, tasks per cell: a number, or a mapping N -> T (fewer tasks at large N).
        noise: "homoscedastic", "heteroscedastic" or both (``NOISE_KINDS``).
        methods: from ``REGRET_METHODS``.
        grid_params: the grid stack for "v2" (default ``pretrained_grid_stack()``).
        v1_params: the unrolled-EM stack for "v1" (default ``pretrained_unrolled_em()``).
        nuts_tasks: "nuts" runs on the first ``nuts_tasks`` tasks of a cell only.
        nuts_max_points: and only for N <= this.
        nuts_families: and only on these families (default the training prior's ``FAMILIES``).
        nuts_kwargs: ``compare_deconvolution``'s NUTS settings (e.g. num_warmup, num_samples;
            default the registry's 2 chains x (500 + 500)).
        em_max_points: "em" (N^2 per step) runs for N <= this only; above, its row is NaN
            with a note (default ``EM_MAX_POINTS``).
        prior: the ``TaskPrior`` of the random families and of NUTS's DP prior (default
            ``TaskPrior()``, the stacks' training prior).
        noise_prior: the ``NoisePrior`` of the heteroscedastic tasks (default ``NoisePrior()``;
            the shipped grid stack was trained with homoscedastic_prob 0.4, see its card).
        progress: called with a short message before each cell (e.g. ``print``).
        mesh: a one-axis ``jax.sharding.Mesh`` the batched methods split a cell's tasks over;
            default ``sharding.batch_mesh()`` (every device).

    Returns:
        A pandas DataFrame, one row per (noise, family, num_points, method): num_tasks,
        regret and regret_se, mse, oracle_mse, best_classical, diff_best and diff_best_se
        (paired, on the row's tasks), ratio_best, meets_requirement (ratio <= 1.1 or
        diff_best <= 2 SE), diff_v2 and diff_v2_se (paired against the grid stack),
        coverage_50 / coverage_90 with their SEs over tasks, seconds_per_task (warm), and a
        note (a skipped method: NaN numbers and the reason). Eager; not traceable.
    """
    validation.check_key("key", key)
    families = _names("families", families, HELDOUT_FAMILIES)
    sizes = _sizes(sizes)
    tasks_at = _tasks_per_size(num_tasks, sizes)
    kinds = _names("noise", noise, NOISE_KINDS)
    methods = _names("methods", methods, REGRET_METHODS)
    nuts_tasks = validation.check_positive_int("nuts_tasks", nuts_tasks)
    nuts_max_points = validation.check_positive_int("nuts_max_points", nuts_max_points)
    nuts_families = _names("nuts_families", nuts_families, HELDOUT_FAMILIES)
    nuts_kwargs = _check_nuts_kwargs(nuts_kwargs)
    em_max_points = validation.check_positive_int("em_max_points", em_max_points)
    prior = check_task_prior(TaskPrior() if prior is None else prior)
    noise_prior = check_noise_prior(NoisePrior() if noise_prior is None else noise_prior)
    progress = _check_progress(progress)
    mesh = sharding.check_mesh(mesh)
    grid, v1 = _stacks(methods, grid_params, v1_params)
    ctx = _Context(grid, v1, prior, nuts_tasks, nuts_kwargs, em_max_points, set(), mesh)
    rows = []
    for kind in kinds:
        noise_i = NOISE_KINDS.index(kind)
        task_noise = HOMOSCEDASTIC if kind == "homoscedastic" else noise_prior
        for family in families:
            for n in sizes:
                t = tasks_at[n]
                progress(f"regret: {kind}, {family}, N = {n}, {t} tasks")
                cell_key = jax.random.fold_in(
                    jax.random.fold_in(
                        jax.random.fold_in(key, noise_i), HELDOUT_FAMILIES.index(family)
                    ),
                    n,
                )
                tasks = heldout_noisy_tasks(cell_key, family, t, n, noise=task_noise, prior=prior)
                batch = _Batch(
                    *(np.asarray(a) for a in (tasks.x, tasks.sigma, tasks.z)),
                    np.asarray(tasks.atoms),
                    np.asarray(tasks.weights),
                )
                oracle = _oracle(batch, ctx)
                oracle_mse = np.mean((oracle.mean - batch.z) ** 2, axis=1)
                estimates = {}
                for method in methods:
                    if method == "oracle":
                        estimates[method] = oracle
                    elif method == "nuts":
                        if family not in nuts_families:
                            estimates[method] = (
                                f"NUTS run on the families {list(nuts_families)} only"
                            )
                        elif n > nuts_max_points:
                            estimates[method] = f"NUTS not run above N = {nuts_max_points}"
                        else:
                            nkey = jax.random.fold_in(cell_key, 1)
                            estimates[method] = _nuts(nkey)(batch, ctx)
                    else:
                        estimates[method] = _ESTIMATORS[method](batch, ctx)
                for row in _cell_rows(batch, estimates, oracle_mse):
                    rows.append(dict(noise=kind, family=family, num_points=n, **row))
    return _frame(rows, ("noise", "family", "num_points"))


_ESTIMATORS = {
    "oracle": _oracle,
    "v2": _v2,
    "v1": _v1,
    "em": _em,
    "npmle": _npmle,
    "james-stein": _shrinkage("james-stein"),
    "sure": _shrinkage("sure"),
}


def xie_kou_brown_table(
    key,
    *,
    settings=("a", "b", "c"),
    sizes=(100, 500),
    num_reps: int = 16,
    methods=XKB_METHODS,
    grid_params=None,
    progress: Callable[[str], None] | None = None,
    mesh=None,
) -> pd.DataFrame:
    """Mean squared error of each method on the Xie-Kou-Brown settings (module docstring).

    Args:
        key: ``jax.random`` key (first): replication r of (setting, N) uses
            ``xie_kou_brown(fold_in(fold_in(fold_in(key, index of setting), N), r), N,
            setting)``.
        settings: from "a", "b", "c".
        sizes: the N, each >= 3 (James-Stein toward the mean needs N > 3... N - 1 > 2).
        num_reps: replications per (setting, N), >= 2.
        methods: from ``XKB_METHODS`` ("mle": x itself; "v2" the grid stack; no "v1": the
            standard errors differ).
        grid_params: the grid stack (default ``pretrained_grid_stack()``).
        progress: called before each (setting, N).
        mesh: the mesh the batched methods ("v2", "james-stein", "sure") split the
            replications over, as in ``regret_versus_n``; default every device.

    Returns:
        A pandas DataFrame, one row per (setting, num_points, method), the columns of
        ``regret_versus_n`` with ``regret`` the MSE itself (``oracle_mse`` 0; no oracle
        exists in setting c) and ``num_tasks`` the replications.
    """
    validation.check_key("key", key)
    settings = _names("settings", settings, ("a", "b", "c"))
    sizes = tuple(validation.check_positive_int("sizes", n, minimum=4) for n in _sizes(sizes))
    num_reps = validation.check_positive_int("num_reps", num_reps, minimum=2)
    methods = _names("methods", methods, XKB_METHODS)
    progress = _check_progress(progress)
    mesh = sharding.check_mesh(mesh)
    grid, _ = _stacks(methods, grid_params, None)
    ctx = _Context(grid, None, TaskPrior(), 0, {}, EM_MAX_POINTS, set(), mesh)
    rows = []
    for setting in settings:
        for n in sizes:
            progress(f"Xie-Kou-Brown: setting {setting}, N = {n}, {num_reps} replications")
            cell_key = jax.random.fold_in(jax.random.fold_in(key, "abc".index(setting)), n)
            draws = [
                xie_kou_brown(jax.random.fold_in(cell_key, r), n, setting) for r in range(num_reps)
            ]
            batch = _Batch(
                *(np.stack([np.asarray(getattr(d, f)) for d in draws]) for f in ("x", "sigma", "z"))
            )
            estimates = {}
            for method in methods:
                if method == "mle":
                    estimates[method] = _Estimate(
                        batch.x, _normal_intervals(batch.x, batch.sigma), 0.0
                    )
                else:
                    estimates[method] = _ESTIMATORS[method](batch, ctx)
            zeros = np.zeros(num_reps)
            for row in _cell_rows(batch, estimates, zeros):
                rows.append(dict(setting=setting, num_points=n, **row))
    return _frame(rows, ("setting", "num_points"))


REAL_DATA_METHODS = ("mle", "v2", "v1", "em", "npmle", "james-stein", "sure", "nuts")


def _eight_schools():
    from arviz_base import load_arviz_data

    data = load_arviz_data("centered_eight")
    names = [str(s) for s in data["observed_data"]["school"].values]
    y = np.asarray(data["observed_data"]["obs"].values, np.float64)
    sigma = np.asarray(data["constant_data"]["sigma"].values, np.float64)
    return names, y, sigma


def real_data_estimates(
    key,
    *,
    methods=REAL_DATA_METHODS,
    grid_params=None,
    v1_params=None,
    nuts_kwargs: dict | None = None,
    prior: TaskPrior | None = None,
) -> pd.DataFrame:
    """Every method on the Efron-Morris batting averages and the eight schools.

    Batting averages: x_i = sqrt(45) arcsin(2 y_i - 1), sigma = 1, truth the same transform of
    the rest-of-season average (``learned.comparison``). Eight schools: y_i and sigma_i of
    ArviZ's "centered_eight" (no truth). "v1" takes one sigma: NaN on the eight schools.
    NUTS (the training prior's DP, as in ``regret_versus_n``) runs on x and sigma divided by
    the geometric mean of the sigma_i (the stacks' units) and is returned in the data's units.
    One data set at a time: nothing is split over devices (no ``mesh``); under
    ``jax.distributed`` every process computes the same table on a device of its own.

    Returns:
        A pandas DataFrame, one row per (dataset, unit, method): x, sigma, estimate, truth
        (NaN for the schools), lower_90, upper_90 (NaN for "em"), note.
    """
    import pandas as pd

    validation.check_key("key", key)
    methods = _names("methods", methods, REAL_DATA_METHODS)
    nuts_kwargs = _check_nuts_kwargs(nuts_kwargs)
    prior = check_task_prior(TaskPrior() if prior is None else prior)
    grid, v1 = _stacks(methods, grid_params, v1_params)
    # one data set per batch: nothing to split, so each process runs it on a device of its own
    one_device = sharding.batch_mesh(jax.local_devices()[:1])
    ctx = _Context(grid, v1, prior, 1, nuts_kwargs, EM_MAX_POINTS, set(), one_device)
    hits = np.asarray(EFRON_MORRIS_HITS, np.float64) / EFRON_MORRIS_AT_BATS
    x_b = arcsine_transform(hits)
    schools, y, s = _eight_schools()
    datasets = (
        (
            "efron-morris",
            list(EFRON_MORRIS_PLAYERS),
            x_b,
            np.ones_like(x_b),
            arcsine_transform(EFRON_MORRIS_REST_OF_SEASON),
        ),
        ("eight-schools", schools, y, s, np.full_like(y, np.nan)),
    )
    rows = []
    for d_i, (name, units, x, sigma, truth) in enumerate(datasets):
        batch = _Batch(x[None], sigma[None], np.nan_to_num(truth)[None])
        for method in methods:
            if method == "mle":
                est = _Estimate(batch.x, _normal_intervals(batch.x, batch.sigma), 0.0)
            elif method == "nuts":
                scale = float(np.exp(np.mean(np.log(sigma))))
                mean, ends, rhat, div = _nuts_one(
                    jax.random.fold_in(key, d_i), x, sigma, prior, nuts_kwargs, scale
                )
                est = _Estimate(
                    mean[None],
                    {p: (lo[None], hi[None]) for p, (lo, hi) in ends.items()},
                    0.0,
                    _nuts_note(1, nuts_kwargs, [rhat], [div]),
                )
            else:
                est = _ESTIMATORS[method](batch, ctx)
            for i, unit in enumerate(units):
                row = dict(dataset=name, unit=unit, method=method, x=x[i], sigma=sigma[i])
                row["truth"] = truth[i]
                if isinstance(est, str):
                    rows.append({**row, "estimate": np.nan, "note": est})
                    continue
                lo, hi = est.intervals[0.9] if est.intervals is not None else (None, None)
                rows.append(
                    {
                        **row,
                        "estimate": float(est.mean[0, i]),
                        "lower_90": np.nan if lo is None else float(lo[0, i]),
                        "upper_90": np.nan if hi is None else float(hi[0, i]),
                        "note": est.note,
                    }
                )
    columns = [
        "dataset",
        "unit",
        "method",
        "x",
        "sigma",
        "estimate",
        "truth",
        "lower_90",
        "upper_90",
        "note",
    ]
    return pd.DataFrame(rows).reindex(columns=columns)


__all__ = [
    "CLASSICAL_METHODS",
    "DEFAULT_METHODS",
    "NOISE_KINDS",
    "REAL_DATA_METHODS",
    "REGRET_METHODS",
    "XKB_METHODS",
    "real_data_estimates",
    "regret_versus_n",
    "xie_kou_brown_table",
]
