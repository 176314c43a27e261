"""The learned stack against EM, the NPMLE, James-Stein and full Bayes, on the same data.

Regret. On a task with true measure nu, the oracle Bayes rule E[z_i | x_i, nu] has the least
mean squared error of any estimator that knows nu; a method's regret on the task is

    R = (1/N) sum_i |z_hat_i - z_i|^2 - (1/N) sum_i |E[z_i | x_i, nu] - z_i|^2,

in units of sigma^2, averaged over tasks (with its standard error over tasks). Methods
(``LEARNED_METHODS``):

- ``"learned"``: the trained stack's posterior mean (``unrolled_em``);
- ``"em-steps"``: tied EM with the same number of steps (the stack at ``init_unrolled_em``);
- ``"em"``: tied EM (K = N atoms at the data, weights 1/N) to convergence, then one attention
  step: the note's estimator;
- ``"npmle"``: the Kiefer-Wolfowitz NPMLE's posterior mean (GMLEB; Jiang and Zhang 2009);
- ``"james-stein"``: positive-part James-Stein toward the grand mean;
- ``"nuts-dp"``: the NUTS posterior mean of z_i under the deconvolution model's truncated DP
  prior with the *training* prior's settings (concentration Gamma(dp_shape, dp_rate), base
  measure N(0, base_scale^2), truncation), on the first ``nuts_tasks`` tasks of each family only.

Coverage. The stack's normal intervals mean -+ z sd (``unrolled_em_intervals``) against the
NPMLE's discrete-posterior intervals and NUTS's posterior quantiles, at 50% and 90%, with the
binomial standard error sqrt(c (1 - c) / n) over the n = tasks x points intervals (the points of
a task are not independent, so this understates the error).

Real data: the batting averages of Efron and Morris (1975, "Data analysis using Stein's
estimator and its generalizations", JASA 70, Table 1): 18 players' hits in their first 45 at-bats
of 1970, and their average over the rest of the season as the truth. The arcsine transform
x_i = sqrt(45) arcsin(2 y_i - 1) makes x_i approximately N(theta_i, 1) (sigma = 1), as in the
paper; errors are reported on that scale and as batting averages (the inverse transform).
"""

from __future__ import annotations

import functools
import time
from typing import TYPE_CHECKING, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from .... import sharding, validation
from .. import em
from ..comparison import compare_deconvolution
from ..estep import posterior_mean_unchecked, posterior_unchecked
from ..kiefer_wolfowitz import npmle, npmle_posterior
from .training import (
    HELDOUT_FAMILIES,
    TaskPrior,
    Tasks,
    check_task_prior,
    heldout_tasks,
    oracle_posterior_mean,
    task_mse,
)
from .unrolled import (
    UnrolledEMParams,
    check_params,
    forward,
    init_unrolled_em,
    pretrained_unrolled_em,
)

if TYPE_CHECKING:
    import pandas as pd

LEARNED_METHODS = ("learned", "em-steps", "em", "npmle", "james-stein", "nuts-dp")
COVERAGE_PROBS = (0.5, 0.9)
_Z = {0.5: 0.6744897501960817, 0.9: 1.6448536269514722}


class LearnedComparison(NamedTuple):
    """``regret`` (family, method, regret, regret_se, mse, oracle_mse, num_tasks,
    learned_regret_same_tasks, seconds_per_task) and ``coverage`` (family, method, prob,
    coverage, se, width). ``learned_regret_same_tasks`` is the stack's regret on the row's
    tasks (NUTS runs on a subset), for a paired comparison."""

    regret: pd.DataFrame
    coverage: pd.DataFrame


# ----------------------------------------------------------------------------- estimators


@functools.partial(jax.jit, static_argnames=("mesh",))
def _stack_on_tasks(params, x, mask, mesh):
    def local(params, x, mask):
        return jax.vmap(lambda xi, mi: forward(params, xi, mi))(x, mask)

    return sharding.shard_batch(local, mesh, (False, True, True), True)(params, x, mask)


_forward_jit = jax.jit(forward, static_argnums=3)


def _stack_streamed(params, x, block_size):
    return _forward_jit(params, x, jnp.ones(x.shape[:1], bool), block_size)


@functools.partial(jax.jit, static_argnames=("mesh",))
def _em_converged(x, mesh):
    def one(xi):
        fit = em.fit_em(xi, 1.0, max_iters=500, tol=1e-8)
        return posterior_unchecked(xi, fit.atoms, fit.weights, jnp.ones((), xi.dtype))[0]

    return sharding.shard_batch(jax.vmap(one), mesh, (True,), True)(x)


@functools.partial(jax.jit, static_argnames=("mesh",))
def _regret_on_tasks(params, tasks: Tasks, mesh):
    """Per task (the stack's MSE, the oracle's MSE), as ``training.task_regret``."""

    def local(params, tasks):
        mean = jax.vmap(lambda xi, mi: forward(params, xi, mi)[0])(tasks.x, tasks.mask)
        return task_mse(mean, tasks), task_mse(oracle_posterior_mean(tasks), tasks)

    return sharding.shard_batch(local, mesh, (False, True), True)(params, tasks)


@functools.partial(jax.jit, static_argnames=("mesh",))
def _oracle_on_tasks(tasks: Tasks, mesh):
    return sharding.shard_batch(oracle_posterior_mean, mesh, (True,), True)(tasks)


def _split_tasks(kernel, mesh, shared, tasks):
    """``kernel(*shared, *tasks, mesh)`` with the tasks (pytrees, leading axis T) padded
    with copies of the last to a multiple of the mesh size, split over ``mesh``, and the
    outputs gathered with the padding dropped. Host (NumPy) values in: every process passes
    the same ones."""
    shared, tasks = sharding.gather((shared, tasks))
    t = jax.tree.leaves(tasks)[0].shape[0]
    extra = sharding.padded_size(t, mesh) - t
    padded = jax.tree.map(lambda a: np.concatenate([a, np.repeat(a[-1:], extra, axis=0)]), tasks)
    out = kernel(*shared, *padded, mesh)
    return jax.tree.map(lambda a: a[:t], sharding.gather(out))


def _james_stein(x):
    """(B, N, p) positive-part James-Stein toward each task's grand mean (sigma = 1)."""
    x = np.asarray(x, np.float64)
    n, p = x.shape[1], x.shape[2]
    centre = x.mean(axis=1, keepdims=True)
    spread = np.sum((x - centre) ** 2, axis=(1, 2), keepdims=True)
    shrink = np.minimum(1.0, (n * p - p - 2) / np.maximum(spread, 1e-300))
    return centre + (1.0 - shrink) * (x - centre)


def _npmle_estimates(x):
    """Per task: (posterior mean (N, p), {prob: (lo, hi)}) of the NPMLE (GMLEB)."""
    out = []
    for xi in np.asarray(x):
        pts = xi[:, 0] if xi.shape[1] == 1 else xi
        fit = npmle(pts, 1.0)
        mean, intervals = npmle_posterior(pts, 1.0, fit, probs=COVERAGE_PROBS)
        mean = np.asarray(mean).reshape(xi.shape)
        intervals = {
            p: (np.asarray(lo).reshape(xi.shape), np.asarray(hi).reshape(xi.shape))
            for p, (lo, hi) in intervals.items()
        }
        out.append((mean, intervals))
    return out


def _nuts_estimates(key, x, prior: TaskPrior, nuts_kwargs):
    """Per task: (posterior mean, intervals) of NUTS under the training prior's DP."""
    settings = dict(
        atom_loc=0.0,
        atom_scale=prior.base_scale,
        dp_shape=prior.dp_shape,
        dp_rate=prior.dp_rate,
        posterior_predictive=False,  # only z_hat and intervals are read: no predictive program
    )
    settings.update(nuts_kwargs or {})
    out = []
    for i, xi in enumerate(np.asarray(x)):
        pts = xi[:, 0] if xi.shape[1] == 1 else xi
        fit = compare_deconvolution(
            jax.random.fold_in(key, i),
            pts,
            1.0,
            methods=("nuts-dp",),
            num_atoms_dp=prior.truncation,
            method_kwargs={"nuts-dp": settings},
        ).fits["nuts-dp"]
        intervals = {
            p: (np.reshape(lo, xi.shape), np.reshape(hi, xi.shape))
            for p, (lo, hi) in fit.intervals.items()
        }
        out.append((np.reshape(fit.z_hat, xi.shape), intervals))
    return out


# ----------------------------------------------------------------------------- tables


def _regret_row(family, method, estimate, tasks: Tasks, oracle_mse, seconds, learned=None):
    mse = np.asarray(task_mse(jnp.asarray(estimate), tasks))
    oracle_mse = np.asarray(oracle_mse)[: mse.shape[0]]
    regret = mse - oracle_mse
    n = regret.shape[0]
    paired = float("nan") if learned is None else float(np.mean(learned[:n]))
    return dict(
        family=family,
        method=method,
        regret=float(regret.mean()),
        regret_se=float(regret.std(ddof=1) / np.sqrt(n)) if n > 1 else float("nan"),
        mse=float(mse.mean()),
        oracle_mse=float(oracle_mse.mean()),
        num_tasks=n,
        learned_regret_same_tasks=paired,
        seconds_per_task=seconds / n,
    )


def _coverage_rows(family, method, intervals_per_task, z):
    rows = []
    z = np.asarray(z)[: len(intervals_per_task)]
    for prob in COVERAGE_PROBS:
        lo = np.stack([iv[prob][0] for iv in intervals_per_task])
        hi = np.stack([iv[prob][1] for iv in intervals_per_task])
        inside = (lo <= z) & (z <= hi)
        c, n = float(inside.mean()), inside.size
        rows.append(
            dict(
                family=family,
                method=method,
                prob=prob,
                coverage=c,
                se=float(np.sqrt(c * (1 - c) / n)),
                width=float(np.mean(hi - lo)),
            )
        )
    return rows


def _stack_intervals(mean, var):
    sd = np.sqrt(np.asarray(var))
    mean = np.asarray(mean)
    return [
        {p: (mean[t] - _Z[p] * sd[t], mean[t] + _Z[p] * sd[t]) for p in COVERAGE_PROBS}
        for t in range(mean.shape[0])
    ]


def _check_methods(methods):
    methods = (methods,) if isinstance(methods, str) else tuple(methods)
    unknown = [m for m in methods if m not in LEARNED_METHODS]
    if unknown or not methods:
        raise ValueError(f"methods: unknown {unknown}; choose from {list(LEARNED_METHODS)}")
    return methods


def _timed(fn, *args):
    start = time.perf_counter()
    out = jax.block_until_ready(fn(*args))
    return out, time.perf_counter() - start


def compare_learned_attention(
    key,
    params: UnrolledEMParams | None = None,
    *,
    families=HELDOUT_FAMILIES,
    num_tasks: int = 32,
    num_points: int = 100,
    methods=LEARNED_METHODS,
    nuts_tasks: int = 4,
    nuts_kwargs: dict | None = None,
    prior: TaskPrior | None = None,
    mesh=None,
) -> LearnedComparison:
    """Regret and coverage of every method on held-out tasks of each family (module docstring).

    Where the work runs: a family's ``num_tasks`` tasks are split over ``mesh`` for the
    batched methods ("learned", "em-steps", "em") and the oracle (padded with copies of the
    last task to a multiple of the mesh size; each device runs its tasks, nothing is reduced
    across devices: the tasks go in and the estimates come out, against N^2 work per task and
    layer). Not split: "npmle" and "nuts-dp", Python loops over one fit per task (NUTS's key
    for task i of family f is ``fold_in(fold_in(fold_in(key, index of f), 1000 + position of
    f in families), i)`` on any mesh), and James-Stein (NumPy).

    Args:
        key: ``jax.random`` key (first): tasks of family f use ``fold_in(key, index of f)``.
        params: the stack; default ``pretrained_unrolled_em()``.
        families: names from ``HELDOUT_FAMILIES``.
        num_tasks, num_points: tasks per family and N per task.
        methods: from ``LEARNED_METHODS``.
        nuts_tasks: tasks per family given to "nuts-dp" (the first ones; its regret row is over
            those, with the oracle on the same tasks).
        nuts_kwargs: sampler sizes etc. for "nuts-dp" (default: the registry's).
        prior: the task prior the random families are drawn from and NUTS's DP prior
            (default ``TaskPrior()``, the pretrained stack's).
        mesh: a one-axis ``jax.sharding.Mesh``; default ``sharding.batch_mesh()`` (every
            device).

    Returns:
        ``LearnedComparison``. Eager (NumPy, pandas); not traceable. ``seconds_per_task`` of
        the JAX methods includes their first compilation when it happens here.
    """
    import pandas as pd

    validation.check_key("key", key)
    params = pretrained_unrolled_em() if params is None else check_params("params", params, 1)
    prior = check_task_prior(TaskPrior() if prior is None else prior)
    methods = _check_methods(methods)
    families = (families,) if isinstance(families, str) else tuple(families)
    bad = [f for f in families if f not in HELDOUT_FAMILIES]
    if bad or not families:
        raise ValueError(f"families: unknown {bad}; choose from {list(HELDOUT_FAMILIES)}")
    num_tasks = validation.check_positive_int("num_tasks", num_tasks, minimum=2)
    num_points = validation.check_positive_int("num_points", num_points, minimum=4)
    nuts_tasks = validation.check_positive_int("nuts_tasks", nuts_tasks)
    mesh = sharding.check_mesh(mesh)
    params = jax.tree_util.tree_map(lambda a: jnp.asarray(a, jnp.zeros(()).dtype), params)
    em_params = init_unrolled_em(params.num_layers, 1)
    regret_rows, coverage_rows = [], []
    for f_index, family in enumerate(families):
        fkey = jax.random.fold_in(key, HELDOUT_FAMILIES.index(family))
        tasks = heldout_tasks(fkey, family, num_tasks, num_points, prior)
        learned_mse, oracle_mse = _split_tasks(_regret_on_tasks, mesh, (params,), (tasks,))
        learned = learned_mse - oracle_mse
        for method in methods:
            if method in ("learned", "em-steps"):
                p = params if method == "learned" else em_params
                (mean, var), sec = _timed(
                    _split_tasks, _stack_on_tasks, mesh, (p,), (tasks.x, tasks.mask)
                )
                regret_rows.append(
                    _regret_row(family, method, mean, tasks, oracle_mse, sec, learned)
                )
                if method == "learned":
                    coverage_rows += _coverage_rows(
                        family, method, _stack_intervals(mean, var), tasks.z
                    )
            elif method == "em":
                mean, sec = _timed(_split_tasks, _em_converged, mesh, (), (tasks.x,))
                regret_rows.append(
                    _regret_row(family, method, mean, tasks, oracle_mse, sec, learned)
                )
            elif method == "james-stein":
                mean, sec = _timed(_james_stein, tasks.x)
                regret_rows.append(
                    _regret_row(family, method, mean, tasks, oracle_mse, sec, learned)
                )
            else:
                if method == "npmle":
                    fits, sec = _timed(_npmle_estimates, tasks.x)
                else:
                    sub = jax.tree_util.tree_map(lambda a: a[:nuts_tasks], tasks)
                    nkey = jax.random.fold_in(fkey, 1_000 + f_index)
                    fits, sec = _timed(_nuts_estimates, nkey, sub.x, prior, nuts_kwargs)
                    tasks_m = sub
                mean = np.stack([m for m, _ in fits])
                tasks_m = tasks if method == "npmle" else tasks_m
                regret_rows.append(
                    _regret_row(family, method, mean, tasks_m, oracle_mse, sec, learned)
                )
                coverage_rows += _coverage_rows(family, method, [iv for _, iv in fits], tasks_m.z)
    return LearnedComparison(pd.DataFrame(regret_rows), pd.DataFrame(coverage_rows))


def length_generalisation(
    key,
    params: UnrolledEMParams | None = None,
    *,
    family: str = "dp",
    sizes=(50, 200, 1000, 10_000),
    num_tasks: int = 8,
    block_size: int = 1024,
    stream_from: int = 2000,
    methods=("learned", "em-steps", "npmle", "james-stein"),
    prior: TaskPrior | None = None,
    mesh=None,
) -> pd.DataFrame:
    """Regret of the stack (trained at N <= 200) and of the references across N.

    Sizes from ``stream_from`` on run the stack streamed over blocks of ``block_size``.
    Returns a table (family, num_points, method, regret, regret_se, mse, oracle_mse,
    num_tasks, seconds_per_task). "em" and "nuts-dp" are not offered (N x N iterations).

    Where the work runs: below ``stream_from`` the tasks of a size are split over ``mesh``
    (a one-axis ``jax.sharding.Mesh``, default every device) for the stack and the oracle,
    as in ``compare_learned_attention``; from ``stream_from`` on, the streamed stack and
    oracle, the NPMLE and James-Stein run one task at a time (not split).
    """
    import pandas as pd

    validation.check_key("key", key)
    params = pretrained_unrolled_em() if params is None else check_params("params", params, 1)
    prior = check_task_prior(TaskPrior() if prior is None else prior)
    methods = _check_methods(methods)
    if any(m in ("em", "nuts-dp") for m in methods):
        raise ValueError("methods: 'em' and 'nuts-dp' are not offered across sizes")
    if family not in HELDOUT_FAMILIES:
        raise ValueError(f"family: unknown {family!r}; choose from {list(HELDOUT_FAMILIES)}")
    sizes = tuple(validation.check_positive_int("sizes", s, minimum=4) for s in sizes)
    num_tasks = validation.check_positive_int("num_tasks", num_tasks, minimum=2)
    block_size = validation.check_positive_int("block_size", block_size)
    mesh = sharding.check_mesh(mesh)
    params = jax.tree_util.tree_map(lambda a: jnp.asarray(a, jnp.zeros(()).dtype), params)
    em_params = init_unrolled_em(params.num_layers, 1)
    rows = []
    for n in sizes:
        tasks = heldout_tasks(jax.random.fold_in(key, n), family, num_tasks, n, prior)
        if n < stream_from:
            oracle = _split_tasks(_oracle_on_tasks, mesh, (), (tasks,))
        else:
            oracle = _streamed_oracle(tasks)
        oracle_mse = task_mse(oracle, tasks)
        for method in methods:
            if method in ("learned", "em-steps"):
                p = params if method == "learned" else em_params
                if n < stream_from:
                    (mean, _), sec = _timed(
                        _split_tasks, _stack_on_tasks, mesh, (p,), (tasks.x, tasks.mask)
                    )
                else:
                    start = time.perf_counter()
                    mean = jnp.stack(
                        [_stack_streamed(p, xi, block_size)[0] for xi in tasks.x]
                    ).block_until_ready()
                    sec = time.perf_counter() - start
            elif method == "james-stein":
                mean, sec = _timed(_james_stein, tasks.x)
            else:
                fits, sec = _timed(_npmle_estimates, tasks.x)
                mean = np.stack([m for m, _ in fits])
            row = _regret_row(family, method, mean, tasks, oracle_mse, sec)
            rows.append({"num_points": n, **row})
    return pd.DataFrame(rows)


def _streamed_oracle(tasks: Tasks):
    return jnp.stack(
        [
            posterior_mean_unchecked(x, a, w, jnp.ones((), x.dtype), 1024)
            for x, a, w in zip(tasks.x, tasks.atoms, tasks.weights, strict=True)
        ]
    )


# ----------------------------------------------------------------------------- real data

# Efron and Morris (1975), Table 1: hits in the first 45 at-bats of 1970, and the batting
# average over the remainder of the season.
EFRON_MORRIS_PLAYERS = (
    "Clemente",
    "F. Robinson",
    "F. Howard",
    "Johnstone",
    "Berry",
    "Spencer",
    "Kessinger",
    "L. Alvarado",
    "Santo",
    "Swoboda",
    "Unser",
    "Williams",
    "Scott",
    "Petrocelli",
    "E. Rodriguez",
    "Campaneris",
    "Munson",
    "Alvis",
)
EFRON_MORRIS_HITS = (18, 17, 16, 15, 14, 14, 13, 12, 11, 11, 10, 10, 10, 10, 10, 9, 8, 7)
EFRON_MORRIS_REST_OF_SEASON = (
    0.346,
    0.298,
    0.276,
    0.222,
    0.273,
    0.270,
    0.263,
    0.210,
    0.269,
    0.230,
    0.264,
    0.256,
    0.303,
    0.264,
    0.226,
    0.286,
    0.316,
    0.200,
)
EFRON_MORRIS_AT_BATS = 45


def arcsine_transform(average, at_bats: int = EFRON_MORRIS_AT_BATS):
    """x = sqrt(n) arcsin(2 y - 1): approximately N(sqrt(n) arcsin(2 p - 1), 1)."""
    return np.sqrt(at_bats) * np.arcsin(2.0 * np.asarray(average, np.float64) - 1.0)


def inverse_arcsine_transform(x, at_bats: int = EFRON_MORRIS_AT_BATS):
    """The batting average (sin(x / sqrt(n)) + 1) / 2."""
    return 0.5 * (np.sin(np.asarray(x, np.float64) / np.sqrt(at_bats)) + 1.0)


def batting_averages_comparison(
    key,
    params: UnrolledEMParams | None = None,
    *,
    methods=LEARNED_METHODS,
    nuts_kwargs: dict | None = None,
    prior: TaskPrior | None = None,
) -> pd.DataFrame:
    """Every method on the Efron-Morris batting averages (module docstring), sigma = 1.

    Returns a table (method, sse_transformed, sse_average, estimates as batting averages in
    player order) with the maximum likelihood estimate x_i itself as "mle". The truth is the
    rest-of-season average; the sums are over the 18 players.
    """
    import pandas as pd

    validation.check_key("key", key)
    params = pretrained_unrolled_em() if params is None else check_params("params", params, 1)
    prior = check_task_prior(TaskPrior() if prior is None else prior)
    methods = _check_methods(methods)
    params = jax.tree_util.tree_map(lambda a: jnp.asarray(a, jnp.zeros(()).dtype), params)
    y = np.asarray(EFRON_MORRIS_HITS, np.float64) / EFRON_MORRIS_AT_BATS
    x = arcsine_transform(y)
    theta = arcsine_transform(EFRON_MORRIS_REST_OF_SEASON)
    xs = jnp.asarray(x)[None, :, None]
    mask = jnp.ones((1, x.shape[0]), bool)
    estimates = {"mle": x}
    one_device = sharding.batch_mesh(jax.local_devices()[:1])  # one data set: nothing to split
    for method in methods:
        if method in ("learned", "em-steps"):
            p = params if method == "learned" else init_unrolled_em(params.num_layers, 1)
            estimates[method] = np.asarray(_stack_on_tasks(p, xs, mask, one_device)[0])[0, :, 0]
        elif method == "em":
            estimates[method] = np.asarray(_em_converged(xs, one_device))[0, :, 0]
        elif method == "james-stein":
            estimates[method] = _james_stein(xs)[0, :, 0]
        elif method == "npmle":
            estimates[method] = _npmle_estimates(xs)[0][0][:, 0]
        else:
            estimates[method] = _nuts_estimates(key, xs, prior, nuts_kwargs)[0][0][:, 0]
    truth_avg = np.asarray(EFRON_MORRIS_REST_OF_SEASON)
    rows = []
    for method, est in estimates.items():
        avg = inverse_arcsine_transform(est)
        rows.append(
            dict(
                method=method,
                sse_transformed=float(np.sum((est - theta) ** 2)),
                sse_average=float(np.sum((avg - truth_avg) ** 2)),
                **{name: float(a) for name, a in zip(EFRON_MORRIS_PLAYERS, avg, strict=True)},
            )
        )
    return pd.DataFrame(rows)
