"""``attnbayes filter``: filter and smooth a user's time series under a switching state-space
model and write the outputs.

``run_filter(table, params, ...)`` runs a filter the registry offers to ``filter`` (gpb1, gpb2,
imm, rbpf; each followed by Kim's smoother over its per-mode Gaussians) or a sampler of the
smoothing posterior (gibbs), optionally after learning the parameters (``--fit``:
``attnbayes.app.filter_fit``), and writes ``states.csv`` (one row per step: t, line, the
observations, filtered and smoothed means, sds and mode probabilities), ``metrics.csv``,
``params.json`` (the parameters used, in the format ``--params`` reads), ``index.html``,
``run.json`` and for a sampler ``posterior.nc`` and ``diagnostics.csv``. Publishing is
``attnbayes.app.runs``'s.

The model comes from a built-in scenario, a JSON file, or a named univariate template
(``template_params``: a switching local level or local linear trend with calm and volatile
modes, its starting values from the data), so a one-column series needs no JSON.
"""

from __future__ import annotations

import html
import json
import math
import time
from collections.abc import Callable
from pathlib import Path

import jax
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from ..inference.mcmc import check_sampler_sizes
from .filter_fit import check_fit, fit_section, run_fit
from .outputs import MANIFEST, check_finite_output, check_finite_table, computing, prepare_target
from .pages import (
    diagnostics_by_quantity,
    img_tag,
    png_bytes,
    sampler_verdict,
    settings_table,
    table_html,
)
from .parser import (
    FILTER_DEFAULT,
    FILTER_SAMPLERS,
    FIT_NUTS_SIZES,
    PARTICLE_METHODS,
    fit_likelihood,
    join_names,
)
from .runs import (
    SIZE_OPTIONS,
    check_columns_unique,
    check_count,
    datatree_writer,
    default_name,
    offered_method,
    publish_run,
    sizes_from_options,
)
from .user_data import InputError, Table, params_document

SCENARIO_LABELS = {
    "maneuvering-target": (("px", "vx", "py", "vy"), ("constant-velocity", "coordinated-turn")),
    "maneuvering-target-cwna": (
        ("px", "vx", "py", "vy"),
        ("constant-velocity", "coordinated-turn"),
    ),
}
TARGET_COLORS = {"filtered": "tab:blue", "smoothed": "tab:red"}
# the modes of a template: by increasing process noise tr Q_j (``template_mode_names``)
TEMPLATE_MODES = ("calm", "volatile")
TEMPLATE_STATES = {"local-level": ("level",), "local-linear-trend": ("level", "slope")}
# a template's transition matrix: each mode stays with this probability
TEMPLATE_STAY = 0.9


def template_params(name: str, table: Table, num_modes: int = 2):
    """A named univariate model (``FILTER_TEMPLATES``) with starting values from the data:
    (``SwitchingParams``, {"state_names", "mode_names"}).

    With s2 the variance of the first differences of the observed values (the variance of
    the values when the differences do not vary), v the larger of s2 and the variance of the
    values, y_1 the first observed value and g the mean first difference:

    - "local-level": x_t = x_{t-1} + w_t, w_t ~ N(0, q_j); y_t = x_t + v_t, v_t ~ N(0, r_j)
      (the local level model, Durbin and Koopman 2012, ch. 2, with switching noise):
      q = s2 / 20 (calm) and s2 (volatile: the level jumps), r = s2 / 4 in both (for a local
      level var(y_t - y_{t-1}) = q + 2 r), x_1 ~ N(y_1, v);
    - "local-linear-trend": the state (level, slope), level_t = level_{t-1} + slope_{t-1} +
      w1_t, slope_t = slope_{t-1} + w2_t, y_t = level_t + v_t: Q = diag(s2 / 20, s2 / 400)
      (calm) and diag(s2, s2 / 20) (volatile), r = s2 / 4, x_1 ~ N((y_1, g),
      diag(v, s2)).

    The modes stay with probability ``TEMPLATE_STAY`` and start equally likely; with
    ``num_modes`` = 1 the model is the calm mode alone (a Kalman filter's model), with more
    than 2 the process noise grows geometrically from calm to volatile. Raises
    ``InputError`` naming the file when the series has fewer than 3 observed values or is
    constant."""
    from ..models.switching import SwitchingParams

    if name not in TEMPLATE_STATES:
        raise InputError(f"--template: unknown {name!r}; choose from {list(TEMPLATE_STATES)}")
    y = np.asarray(table.values, np.float64)[:, 0]
    observed = y[~np.isnan(y)]
    if observed.size < 3:
        raise InputError(
            f"{table.path}: {observed.size} observed value(s); the template {name!r} needs at "
            "least 3 to take its starting values from the data"
        )
    diffs = np.diff(y)
    diffs = diffs[~np.isnan(diffs)]
    s2 = float(np.var(diffs)) if diffs.size > 1 else 0.0
    v = float(np.var(observed))
    if not s2 > 0:
        s2 = v
    if not s2 > 0:
        raise InputError(
            f'{table.path}: column "{table.columns[0]}" is constant ({observed[0]:g} at every '
            f"observed step): the template {name!r} has no noise scale to start from"
        )
    v = max(v, s2)
    m = int(num_modes)
    growth = np.geomspace(1.0, 20.0, m) if m > 1 else np.ones(1)  # calm ... volatile
    if name == "local-level":
        f, h = np.eye(1), np.ones((1, 1))
        q = np.stack([np.diag([s2 / 20 * g]) for g in growth])
        m0, p0 = np.array([observed[0]]), np.diag([v])
    else:
        f, h = np.array([[1.0, 1.0], [0.0, 1.0]]), np.array([[1.0, 0.0]])
        q = np.stack([np.diag([s2 / 20 * g, s2 / 400 * g]) for g in growth])
        slope = float(np.mean(diffs)) if diffs.size else 0.0
        m0, p0 = np.array([observed[0], slope]), np.diag([v, s2])
    d = f.shape[0]
    if m == 1:
        trans = np.ones((1, 1))
    else:
        trans = np.full((m, m), (1 - TEMPLATE_STAY) / (m - 1))
        np.fill_diagonal(trans, TEMPLATE_STAY)
    params = SwitchingParams(
        initial_probs=np.full(m, 1.0 / m),
        transition_matrix=trans,
        initial_means=np.tile(m0, (m, 1)),
        initial_covs=np.tile(p0, (m, 1, 1)),
        dynamics_matrices=np.tile(f, (m, 1, 1)),
        dynamics_biases=np.zeros((m, d)),
        dynamics_covs=q,
        emission_matrices=np.tile(h, (m, 1, 1)),
        emission_covs=np.full((m, 1, 1), s2 / 4),
    )
    modes = TEMPLATE_MODES if m == 2 else tuple(f"mode{j}" for j in range(m))
    return params, {"state_names": TEMPLATE_STATES[name], "mode_names": modes}


def template_mode_names(params) -> tuple[str, ...]:
    """The two modes of a template named by their process noise: "calm" the smaller tr Q_j
    (ties: the smaller tr R_j), "volatile" the other; a fit may reverse the start's order."""
    q = np.trace(np.asarray(params.dynamics_covs), axis1=-2, axis2=-1)
    r = np.trace(np.asarray(params.emission_covs), axis1=-2, axis2=-1)
    order = np.lexsort((r, q))
    names = [""] * len(order)
    for rank, mode in enumerate(order):
        names[mode] = TEMPLATE_MODES[rank]
    return tuple(names)


def scenario_labels(name: str | None, num_states: int, num_modes: int, labels=None):
    """State and mode names: from ``labels`` (JSON), the scenario, else x1..xd and mode0.."""
    labels = labels or {}
    states, modes = SCENARIO_LABELS.get(name, (None, None))
    states = labels.get("state_names", states)
    modes = labels.get("mode_names", modes)
    if states is None or len(states) != num_states:
        states = tuple(f"x{k + 1}" for k in range(num_states))
    if modes is None or len(modes) != num_modes:
        modes = tuple(f"mode{j}" for j in range(num_modes))
    return tuple(states), tuple(modes)


def filter_output_columns(method: str, obs_names, state_names, mode_names) -> list[str]:
    """The columns of states.csv of ``method`` (a name or alias the registry offers to
    ``filter``): a filter has filtered and smoothed columns, a sampler smoothed ones only."""
    entry = offered_method("filter", "switching", method)
    out = ["t", "line", *obs_names]
    targets = ("filtered", "smoothed") if entry.target == "filter" else ("smoothed",)
    for target in targets:
        out += [f"{target}_mean_{s}" for s in state_names]
        out += [f"{target}_sd_{s}" for s in state_names]
        out += [f"{target}_prob_{m}" for m in mode_names]
    return out


def _direct_observations(params) -> dict[int, int]:
    """{observation index i: state index k} where y_i = x_k in every mode."""
    h = np.asarray(params.emission_matrices)
    out = {}
    for i in range(h.shape[1]):
        row = h[0, i]
        if np.all(h[:, i] == row) and np.count_nonzero(row) == 1 and row.max() == 1.0:
            out[i] = int(np.argmax(row))
    return out


def figure_states(obs, obs_names, params, state_names, summaries) -> bytes:
    """One panel per state coordinate (at most 6): means with 95% bands, observations."""
    d = min(len(state_names), 6)
    t = np.arange(1, obs.shape[0] + 1)
    direct = _direct_observations(params)
    cols = 2 if d > 1 else 1
    rows = math.ceil(d / cols)
    fig, axes = plt.subplots(
        rows, cols, figsize=(6.2 * cols, 2.8 * rows), layout="constrained", squeeze=False
    )
    for k, ax in enumerate(axes.ravel()):
        if k >= d:
            ax.set_visible(False)
            continue
        for i, s in direct.items():
            if s == k:
                ax.scatter(t, obs[:, i], s=6, color="0.45", label=f"observed {obs_names[i]}")
        for label, mean, sd in summaries:
            color = TARGET_COLORS[label]
            ax.plot(t, mean[:, k], color=color, lw=1.2, label=f"{label} mean")
            ax.fill_between(
                t,
                mean[:, k] - 1.96 * sd[:, k],
                mean[:, k] + 1.96 * sd[:, k],
                color=color,
                alpha=0.2,
                lw=0,
            )
        missing = np.flatnonzero(np.isnan(obs).any(axis=1))
        if missing.size:
            ax.plot(
                t[missing],
                np.full(missing.size, ax.get_ylim()[0]),
                "|",
                color="k",
                ms=8,
                label="missing observation",
            )
        ax.set_ylabel(state_names[k])
        ax.set_xlabel("t")
        if k == 0:
            ax.legend(fontsize=8, loc="best")
    return png_bytes(fig)


def figure_modes(mode_names, probs) -> bytes:
    """P(s_t = j | ...) over t, one line per mode and target."""
    fig, ax = plt.subplots(figsize=(10, 3.2), layout="constrained")
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for label, p in probs:
        style = "--" if label == "filtered" else "-"
        t = np.arange(1, p.shape[0] + 1)
        for j, mode in enumerate(mode_names):
            ax.plot(
                t,
                p[:, j],
                style,
                color=colors[j % len(colors)],
                lw=1.2,
                label=f"{label} P(s_t = {mode})",
            )
    ax.set_ylim(-0.02, 1.02)
    ax.set_xlabel("t")
    ax.set_ylabel("mode probability")
    ax.legend(fontsize=8, ncol=2, loc="best")
    return png_bytes(fig)


def figure_track(obs, obs_names, params, state_names, summaries) -> bytes | None:
    """The plane of two directly observed coordinates: observations and the estimated path."""
    direct = _direct_observations(params)
    if len(direct) < 2:
        return None
    (i0, k0), (i1, k1) = list(direct.items())[:2]
    fig, ax = plt.subplots(figsize=(6.5, 6), layout="constrained")
    ax.scatter(obs[:, i0], obs[:, i1], s=8, color="0.5", label="observations")
    for label, mean, _ in summaries:
        ax.plot(mean[:, k0], mean[:, k1], color=TARGET_COLORS[label], lw=1.3, label=f"{label} mean")
    ax.set_xlabel(f"{state_names[k0]} ({obs_names[i0]})")
    ax.set_ylabel(f"{state_names[k1]} ({obs_names[i1]})")
    ax.set_aspect("equal", adjustable="datalim")
    ax.legend(fontsize=8)
    return png_bytes(fig)


def _gaussian_summary(result):
    """(mean (T, d), sd (T, d), mode_probs (T, M)) of a FilterResult / SmootherResult."""
    mean = np.asarray(result.mean)
    sd = np.sqrt(np.clip(np.diagonal(np.asarray(result.cov), axis1=-2, axis2=-1), 0.0, None))
    return mean, sd, np.asarray(result.mode_probs)


def _posterior_summary(datatree, num_modes: int):
    """(mean, sd, mode frequencies) of the switching Gibbs draws."""
    post = datatree["posterior"]
    draws = np.asarray(post["states"]).reshape(-1, *post["states"].shape[2:])
    modes = np.asarray(post["modes"]).reshape(-1, draws.shape[1])
    probs = np.stack([(modes == j).mean(axis=0) for j in range(num_modes)], axis=-1)
    return draws.mean(axis=0), draws.std(axis=0), probs


def _filter_diagnostics(datatree, sizes: dict) -> tuple[dict, list, str]:
    """posterior.nc, diagnostics.csv, the metrics and the HTML section of a sampler's run."""
    from ..inference.diagnostics import diagnostics

    diag = diagnostics(datatree, var_names=["states"])
    files = {
        "posterior.nc": datatree_writer(datatree),
        "diagnostics.csv": diag.table.rename_axis("element").reset_index().to_csv(index=False),
    }
    metrics = [
        ("max_rhat_states", diag.max_r_hat),
        ("min_ess_bulk_states", diag.min_ess_bulk),
        ("min_ess_tail_states", diag.min_ess_tail),
    ]
    section = f"""
<h2>Sampler diagnostics</h2>
<p class="note">R-hat (rank-normalised split) and bulk/tail ESS of every state coordinate
x_t[k] ({diag.num_chains} chains x {diag.num_draws} draws after {sizes["num_warmup"]} warmup
sweeps). The modes are labelled by the parameters, so no relabelling is involved. Every element
is in <code>diagnostics.csv</code>.</p>
{sampler_verdict(diag, diag.num_chains * diag.num_draws, False)}
{table_html(diagnostics_by_quantity(diag.table))}"""
    return files, metrics, section


def _states_csv(table: Table, state_names, mode_names, summaries: dict) -> str:
    """t, line, the observations, then per target: means, sds, mode probabilities."""
    cols = {"t": np.arange(1, table.values.shape[0] + 1), "line": table.lines}
    for j, col in enumerate(table.columns):
        cols[col] = table.values[:, j]
    for label, (mean, sd, mode_probs) in summaries.items():
        cols |= {f"{label}_mean_{s}": mean[:, k] for k, s in enumerate(state_names)}
        cols |= {f"{label}_sd_{s}": sd[:, k] for k, s in enumerate(state_names)}
        cols |= {f"{label}_prob_{m}": mode_probs[:, j] for j, m in enumerate(mode_names)}
    return pd.DataFrame(cols).to_csv(index=False)


def check_filter(table: Table, params, method: str, state_names, mode_names) -> None:
    """Argument checks of ``run_filter`` that need no JAX work."""
    offered_method("filter", "switching", method)
    o = np.shape(params.emission_matrices)[1]
    if table.values.shape[1] != o:
        raise InputError(
            f"{table.path}: {table.values.shape[1]} observation column(s) where the model "
            f"observes {o} values per step"
        )
    if np.any(np.isinf(table.values)):
        raise InputError(f"{table.path}: contains infinite values")
    _check_magnitude(table, "observation", 1.0)
    check_columns_unique(filter_output_columns(method, table.columns, state_names, mode_names))


def _check_magnitude(table: Table, what: str, scale) -> None:
    """Refuse a value that overflows the filter's squared residuals, naming its cell.

    A filter sums T x p squared residuals (T steps, p columns); with every value below
    ``attnbayes.validation.max_scaled_spread(float64, T, p)`` = sqrt(finfo.max / (4 T p)) the sum
    stays below overflow (the bound of ``attnbayes.validation.check_scaled_spread``). ``scale``
    (p,) is the largest weight a column is multiplied by when above 1 (the input weights B_j,
    D_j of u_t). Passing does not make a run finite (small noise variances can still make a
    filter overflow, which ``check_filter_result`` then reports): it refuses what would
    certainly overflow, before any work, naming the cell."""
    from ..validation import max_scaled_spread

    values = table.values
    t, p = values.shape
    limit = max_scaled_spread(np.float64, t, p)
    with np.errstate(over="ignore", invalid="ignore"):
        size = np.abs(values) * np.maximum(1.0, np.asarray(scale, np.float64))
    bad = np.argwhere(size > limit)
    if bad.size:
        i, j = (int(k) for k in bad[0])
        weighted = "" if np.all(np.asarray(scale) <= 1.0) else " x max(1, its largest input weight)"
        raise InputError(
            f"{table.where(i, j)}: {values[i, j]:.3g} is too large for the filter: |value|"
            f"{weighted} must stay below {limit:.2g} = sqrt(finfo.max / (4 T p)) (float64, T = "
            f"{t} steps, p = {p} {what} column(s)) for the squared residuals to be finite; "
            "rescale the column"
        )


def _check_observed_steps(table: Table, fit: str) -> None:
    """--fit needs observed steps: at least one to learn from, and for mle and em two (their BIC
    and HQIC use log T and log log T of the observed steps, ``information_criteria``)."""
    need = 1 if fit == "nuts" else 2
    observed = int(np.sum(~np.isnan(table.values).all(axis=1)))
    if observed >= need:
        return
    t = table.values.shape[0]
    what = (
        f"no observed value: every observation cell of its {t} rows is empty or NA"
        if observed == 0
        else f"only {observed} of its {t} rows has an observed value"
    )
    why = " (its BIC and HQIC use log T and log log T)" if need == 2 else ""
    raise InputError(
        f"{table.path}: {what}; --fit {fit} needs at least {need} observed step(s){why}"
    )


def _check_filter_inputs(table: Table, inputs: Table | None, params) -> np.ndarray | None:
    """The (T, k) inputs u_t, checked against the observations and the parameters' k."""
    k = int(np.shape(params.dynamics_input_weights)[-1])
    weights = "dynamics_input_weights (M, d, k) and/or emission_input_weights (M, o, k)"
    if inputs is None:
        if k:
            raise InputError(
                f"--inputs: the parameters have input weights for k = {k} input(s) "
                f"({weights}); name the {k} input column(s) of {table.path} with --inputs"
            )
        return None
    shared = sorted(set(inputs.columns) & set(table.columns))
    if shared:
        raise InputError(
            f"--inputs: column(s) {', '.join(shared)} are also observation columns (--columns)"
        )
    if inputs.values.shape[0] != table.values.shape[0]:  # the same file: cannot happen
        raise InputError(
            f"--inputs: {inputs.values.shape[0]} rows of inputs for {table.values.shape[0]} steps"
        )
    n = inputs.values.shape[1]
    if k != n:
        have = "no input weights (k = 0)" if k == 0 else f"input weights for k = {k} input(s)"
        raise InputError(
            f"--inputs: {n} column(s) ({', '.join(inputs.columns)}) but the parameters have "
            f"{have}: give {weights} with k = {n} in --params (zeros are a start for --fit "
            "with --free naming them)"
        )
    largest = [
        np.max(np.abs(np.asarray(w, np.float64)), axis=(0, 1))
        for w in (params.dynamics_input_weights, params.emission_input_weights)
        if np.size(w)
    ]
    _check_magnitude(inputs, "input", np.max(largest, axis=0) if largest else 1.0)
    return inputs.values


def run_filter(
    table: Table,
    params,
    *,
    method: str = FILTER_DEFAULT,
    scenario: str | None = None,
    params_path: str | None = None,
    template: str | None = None,
    labels: dict | None = None,
    out_dir="reports",
    name: str | None = None,
    seed: int = 0,
    num_particles: int | None = None,
    num_warmup: int | None = None,
    num_samples: int | None = None,
    num_chains: int | None = None,
    fit: str | None = None,
    free=None,
    num_starts: int | None = None,
    inputs: Table | None = None,
    progress: Callable[[str], None] | None = None,
    argv: list[str] | None = None,
) -> Path:
    """Run a switching-model filter (and Kim's smoother) or a sampler; write OUT/NAME/.

    Args:
        table: the observations, T rows of o columns, NaN rows missing.
        params: validated ``SwitchingParams`` (``attnbayes.models.switching.check_params``).
        method: a method the registry offers to ``filter`` (by name or alias): a filter,
            "gpb1", "gpb2", "imm", "rbpf" (each then Kim's smoother over its per-mode filtered
            Gaussians), or a sampler of the smoothing posterior, "gibbs".
        scenario, params_path, template: where ``params`` came from (recorded; the scenario
            also names the states and modes; a template's two modes are named calm and
            volatile by their process noise, after --fit too, ``template_mode_names``);
            labels: optional {"state_names", "mode_names"}.
        out_dir, name: the output folder OUT/NAME; NAME defaults to ``<stem>-filter-<method>``.
        seed: seed of the ``jax.random`` key (rbpf, gibbs, --fit).
        num_particles: particles of a particle filter (default the registry's: rbpf 1000).
        num_warmup, num_samples, num_chains: sampler sizes (default the registry's: gibbs
            4 x (300 + 1000)) and --fit nuts sizes (default 2 x (500 + 500)).
        fit: None (the parameters are known) or "mle", "em", "nuts": learn the free
            parameters of ``switching_state_space(params, ...)`` first (started at
            ``params``), then filter with the fitted ones (``attnbayes.app.filter_fit``); the
            likelihood is ``method``'s filter (``attnbayes.app.parser.fit_likelihood``: imm
            for rbpf and gibbs).
        free: names of the parameters to learn (default ``STATE_SPACE_FREE``).
        num_starts: optimiser starts of --fit mle (default 8).
        inputs: the input columns u_t (T rows of k columns, none missing), when ``params``
            has input weights.
        progress: called with short messages.
        argv: the command line, recorded in run.json.

    Returns:
        The path of OUT/NAME/index.html.
    """
    from ..inference.switching import check_filter_result, kim_smoother
    from ..models.switching import check_params

    params = check_params("params", params)
    m, d = params.initial_means.shape
    state_names, mode_names = scenario_labels(scenario, d, m, labels)
    check_filter(table, params, method, state_names, mode_names)
    entry = offered_method("filter", "switching", method)
    sampler = entry.returns == "draws"
    particles = "num_particles" in entry.defaults
    if not particles and num_particles is not None:
        with_particles = [f"--method {name}" for name in PARTICLE_METHODS]
        raise InputError(f"--particles applies to {join_names(with_particles)} only")
    if not (sampler or fit == "nuts") and any(
        v is not None for v in (num_warmup, num_samples, num_chains)
    ):
        with_sizes = [f"--method {name}" for name in FILTER_SAMPLERS]
        raise InputError(
            f"--draws, --warmup and --chains apply to {join_names([*with_sizes, '--fit nuts'])}"
        )
    if fit is None and (free is not None or num_starts is not None):
        raise InputError("--free and --starts apply with --fit only")
    options = dict(entry.defaults)  # the registry's settings: particles, sampler sizes
    if particles:
        options["num_particles"] = (
            check_count("--particles", num_particles, 1) or options["num_particles"]
        )
    sizes = sizes_from_options(
        {k: options[k] for k in SIZE_OPTIONS} if sampler else {},
        num_warmup,
        num_samples,
        num_chains,
    )
    if sampler:
        options |= sizes
    fit_sizes = sizes_from_options(FIT_NUTS_SIZES, num_warmup, num_samples, num_chains)
    seed = check_count("--seed", seed, 0)
    if sampler:
        check_sampler_sizes(
            sizes["num_samples"], sizes["num_chains"], names=("--draws", "--chains")
        )
    u = _check_filter_inputs(table, inputs, params)
    spec = None
    if fit is not None:
        _check_observed_steps(table, fit)
        try:
            spec, free = check_fit(params, table.values, u, fit, free, num_starts, fit_sizes)
        except ValueError as err:
            if isinstance(err, InputError):
                raise
            raise InputError(f"--fit: {err}") from None
    target = prepare_target(out_dir, name or default_name(table.path, "filter", method))
    say = progress or (lambda message: None)
    started = time.perf_counter()

    obs = table.values
    key = jax.random.PRNGKey(seed)
    settings = {
        "method": method,
        "scenario": scenario,
        "params_file": params_path,
        "template": template,
        "state_names": list(state_names),
        "mode_names": list(mode_names),
        "input_columns": None if inputs is None else list(inputs.columns),
    }
    metrics, files, body_diag, fit_table = [], {}, "", None
    with computing():
        if fit is not None:
            key, fit_key = jax.random.split(key)
            likelihood = fit_likelihood(entry)
            params, fit_table, fit_metrics, fit_files, fit_settings = run_fit(
                fit_key, spec, free, fit, likelihood, num_starts, fit_sizes, say
            )
            params = check_params("params", params)
            if template is not None and m == 2 and template_mode_names(params) != mode_names:
                mode_names = template_mode_names(params)
                reversed_ = (
                    "the fit reversed the modes' process noise: mode 0 is now the "
                    f"{mode_names[0]} one; the mode names follow the fit"
                )
                say(f"warning: {reversed_}")
                fit_settings["fit_warnings"] = [*fit_settings["fit_warnings"], reversed_]
                fit_settings["mode_names"] = list(mode_names)
            metrics += fit_metrics
            files |= fit_files
            settings |= fit_settings | {"seed": seed}
            files["fit.csv"] = fit_table.to_csv(index=False)
        say(f"{method}: running")
        if entry.needs_key:
            settings |= {"seed": seed, **options}
        keys = (key,) if entry.needs_key else ()
        if sampler:  # a sampler of the smoothing posterior: draws of the states and modes
            tree = entry.fit(*keys, params, obs, inputs=u, **options)
            check_finite_output("posterior states", tree["posterior"]["states"].values)
            filtered, smoothed = None, _posterior_summary(tree, m)
            sampler_files, sampler_metrics, body_diag = _filter_diagnostics(tree, sizes)
            files |= sampler_files
            metrics += sampler_metrics
        else:  # a filter, then Kim's smoother over its per-mode Gaussians
            result = entry.fit(*keys, params, obs, inputs=u, **options)
            check_filter_result(result, name=method, params=params)
            say(f"{method}: Kim's smoother")
            smooth = kim_smoother(params, obs, result, inputs=u)
            check_filter_result(smooth, name="Kim's smoother", params=params)
            filtered, smoothed = _gaussian_summary(result), _gaussian_summary(smooth)
            metrics.append(("log_likelihood", float(result.log_likelihood)))
        seconds = time.perf_counter() - started
        metrics.insert(0, ("wall_time_s", seconds))
        check_finite_table(
            "metrics", pd.DataFrame(metrics, columns=["metric", "value"]), label_columns=("metric",)
        )
    say(f"{method}: writing the outputs")

    summaries = {"filtered": filtered, "smoothed": smoothed}
    summaries = {label: value for label, value in summaries.items() if value is not None}
    files["states.csv"] = _states_csv(table, state_names, mode_names, summaries)
    metric_frame = pd.DataFrame(metrics, columns=["metric", "value"])
    files["metrics.csv"] = metric_frame.to_csv(index=False)
    files["params.json"] = (
        json.dumps(
            params_document(params, {"state_names": state_names, "mode_names": mode_names}),
            indent=1,
        )
        + "\n"
    )
    if argv is not None:
        settings["argv"] = list(argv)

    bands = [(label, mean, sd) for label, (mean, sd, _) in summaries.items()]
    fig_states = figure_states(obs, table.columns, params, state_names, bands)
    fig_modes = figure_modes(mode_names, [(label, p) for label, (*_, p) in summaries.items()])
    fig_track = figure_track(obs, table.columns, params, state_names, bands)
    elapsed = time.perf_counter() - started
    missing = int(np.isnan(obs).all(axis=1).sum())
    partly = int(np.isnan(obs).any(axis=1).sum()) - missing
    source = f"scenario {scenario}" if scenario else f"parameters from {params_path}"
    if template is not None:
        source = f"template {template} (starting values from the data)"
    if fit is not None:
        source = f"learned by --fit {fit} from the start {source}"
    summary_rows = {
        "input": table.path,
        "steps T": obs.shape[0],
        "missing steps": missing,
        "partly observed steps": partly,
        "observation columns": ", ".join(table.columns),
        "input columns": "none" if inputs is None else ", ".join(inputs.columns),
        "model": source,
        "modes M": f"{m}: " + ", ".join(f"mode {j} = {name}" for j, name in enumerate(mode_names)),
        "state dimension d": d,
        "method": method,
    }
    if particles:
        summary_rows |= {"particles": options["num_particles"]}
    if sampler:
        summary_rows |= {
            "chains": sizes["num_chains"],
            "warmup per chain": sizes["num_warmup"],
            "draws per chain": sizes["num_samples"],
        }
    if entry.needs_key or fit is not None:
        summary_rows["seed"] = seed
    if fit is not None:
        summary_rows |= {"fit": fit, "fit likelihood": settings["fit_likelihood"]}
        summary_rows["learned"] = ", ".join(free)
        if fit == "mle":
            summary_rows["starts"] = settings["fit_starts"]
        if fit == "nuts":
            summary_rows |= {
                "fit chains": fit_sizes["num_chains"],
                "fit warmup per chain": fit_sizes["num_warmup"],
                "fit draws per chain": fit_sizes["num_samples"],
            }
    summary_rows["total wall time (s)"] = round(elapsed, 1)
    if sampler:
        explain = (
            "The smoothed columns hold the posterior mean and sd of x_t and the posterior "
            "frequency of each mode, P(s_t = j | y_{1:T}); a sampler has no filtered columns."
        )
    else:
        explain = (
            "Filtered: p(x_t, s_t | y_{1:t}) from the filter, its mixture moment-matched to "
            "one mean and sd per coordinate. Smoothed: p(x_t, s_t | y_{1:T}) from Kim's "
            "backward pass over the filter's per-mode Gaussians (an approximation: it treats "
            "x_{t+1} as independent of s_t given s_{t+1} and y_{1:T})."
        )
    listing = ", ".join(f"<code>{f}</code>" for f in sorted([*files, "index.html", MANIFEST]))
    track = (
        ""
        if fig_track is None
        else f"<h2>Track</h2>\n{img_tag(fig_track, 'observations and estimated path')}"
    )
    body = f"""
<h1>attnbayes filter: {html.escape(Path(table.path).name)}</h1>
<p>Switching linear-Gaussian state-space model: s_t | s_{{t-1}} ~ Pi, x_t = F_s x_{{t-1}} +
b_s + B_s u_t + noise(Q_s), y_t = H_s x_t + d_s + D_s u_t + noise(R_s), with the parameters
{"learned" if fit else "known"} ({html.escape(source)}); method:
{html.escape(entry.description)}. A step with no observation is predict-only; a partly
observed step updates on its observed coordinates. {html.escape(explain)}</p>
{settings_table(summary_rows)}
{table_html(metric_frame.set_index("metric"))}
{fit_section(fit, fit_table, settings)}
{body_diag}
<h2>States</h2>
<p class="note">Means with 95% bands (mean &plusmn; 1.96 sd); observations drawn on the
coordinates they measure directly.</p>
{img_tag(fig_states, "state estimates")}
<h2>Mode probabilities</h2>
{img_tag(fig_modes, "mode probabilities")}
{track}
<p class="note">Files: {listing}.</p>
"""
    return publish_run(target, files, "filter", table, body, settings, elapsed, say)


__all__ = [
    "SCENARIO_LABELS",
    "TARGET_COLORS",
    "TEMPLATE_MODES",
    "TEMPLATE_STATES",
    "TEMPLATE_STAY",
    "check_filter",
    "figure_modes",
    "figure_states",
    "figure_track",
    "filter_output_columns",
    "run_filter",
    "scenario_labels",
    "template_mode_names",
    "template_params",
]
