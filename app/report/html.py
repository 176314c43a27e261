"""The HTML of the report's sections 1-7: metric explanations, tables, and the blocks of each
section (``deconvolution_blocks``, ``switching_blocks``, ``learning_blocks``, ``atoms_block``,
``attention_block``, ``kernel_block``, ``diagnostics_summary``), and the page (``page_html``)."""

from __future__ import annotations

import html

import jax
import numpy as np
import pandas as pd

from ...inference import methods as registry
from ...inference.model_comparison import loo_compare
from ..pages import page
from .figures import (
    figure_data_and_measures,
    figure_deconvolution_data,
    figure_deconvolution_ppc,
    figure_elpd,
    figure_em_attention,
    figure_lfo_pointwise,
    figure_switching_data,
    figure_switching_methods,
    figure_switching_ppc,
    figure_trace_rank,
    figure_z_hat,
    invariant_series,
    switching_predictive_draws,
)
from .pieces import (
    figure_tag,
    iteration_cap_note,
    note,
    number_table,
    save_report_tree,
    tidy_rows,
)
from .runners import LEARNING_EM_ITERATIONS, LearningRun, SwitchingRun
from .scenarios import NUM_ATOMS_DP, SECTIONS

# ----------------------------------------------------------------------------- HTML pieces

_EXPLAIN = {
    "mse_z": "mean over i of |z_hat_i - z_i|^2 (smaller is better)",
    "coverage_50": "share of true z_i inside the 50% interval (per coordinate in p-D)",
    "coverage_90": "share of true z_i inside the 90% interval (per coordinate in p-D)",
    "wasserstein1_nu": "W1 distance between the estimated and the true nu (1-D)",
    "log_likelihood": "log p(x): at the estimate, or its posterior mean (samplers)",
    "heldout_lpd": "mean log predictive density of fresh data from the same nu (larger is better)",
    "elpd_loo": "PSIS-LOO expected log predictive density (samplers)",
    "wall_time_s": "wall time in seconds, JIT compilation included",
    "iterations": "iterations run (EM, approx-Gibbs)",
    "converged": "1 if the iterative fit met its tolerance",
    "pareto_k_max": "largest PSIS Pareto k (above 0.7: LOO unreliable)",
    "max_rhat_invariant": "worst R-hat over invariant quantities (z_mean, nu_cdf, log-lik)",
    "min_ess_bulk_invariant": "smallest bulk ESS over the invariant quantities",
    "min_ess_tail_invariant": "smallest tail ESS over the invariant quantities",
    "divergences": "divergent NUTS transitions after warmup (Gibbs: none by construction)",
}

_EXPLAIN_SWITCHING = {
    "state_rmse": "root mean square of E[x_t] - x_t over steps and coordinates",
    "mode_accuracy": "share of steps where the most probable mode is the true one",
    "coverage_50": "share of true (t, coordinate) states inside the 50% marginal interval",
    "coverage_90": "share of true (t, coordinate) states inside the 90% marginal interval",
    "reference_rms": "RMS distance of E[x_t] from the reference posterior of the same target",
    "reference_mode_dev": "largest |P(s_t = j) - reference| over steps and modes",
    "log_likelihood": "the filter's log p(y_1:T) (smoothers carry their filter's)",
    "max_rhat_states": "worst R-hat over the state means (samplers)",
    "min_ess_bulk_states": "smallest bulk ESS over the states",
    "min_ess_tail_states": "smallest tail ESS over the states",
    "wall_time_s": "wall time in seconds, JIT compilation included",
}


_EXPLAIN_LEARNING = {
    "rmse_transition_matrix": "RMS error of the estimated transition matrix against the truth",
    "rmse_dynamics_cov_scale": "RMS error of the process-noise scales c_j (truth 1)",
    "rmse_emission_cov_scale": "RMS error of the measurement-noise scales r_j (truth 1)",
    "heldout_lpd_per_step": "log p(y_held-out | y_train) per held-out step (larger is better); "
    "samplers: the posterior predictive",
    "heldout_lpd_plugin_per_step": "the same at the posterior mean (samplers)",
    "train_log_likelihood": "the IMM log-likelihood of the training series at the estimate",
    "max_rhat_theta": "worst R-hat over the entries of theta (samplers)",
    "min_ess_bulk_theta": "smallest bulk ESS over the entries of theta",
    "ess_bulk_per_s": "smallest bulk ESS per second of wall time",
    "divergences": "divergent NUTS transitions after warmup",
    "iterations": "EM iterations run",
    "converged": "1 if EM met its tolerance",
    "wall_time_s": "wall time in seconds, JIT compilation included",
}

# The iteration limits of the iterative methods (the registry's, as compare_deconvolution uses)
_DECONVOLUTION_CAPS = {
    name: settings["max_iters"]
    for name in registry.method_names("deconvolution")
    if "max_iters" in (settings := registry.settings("deconvolution", name))
}


def _metrics_table(
    table: pd.DataFrame, explain: dict[str, str], caps: dict[str, int] | None = None
) -> str:
    """Methods as columns, metrics as rows (one number format per metric), with a column saying
    what each metric means, and a note on any method that did not converge (``caps``: the
    iteration limits, ``pieces.iteration_cap_note``)."""
    wide = table.pivot(index="metric", columns="method", values="value")
    wide = wide[[m for m in dict.fromkeys(table.method) if m in wide.columns]]
    wide = wide.reindex([m for m in explain if m in wide.index])
    wide.index.name = "metric"
    wide["meaning"] = [explain[m] for m in wide.index]
    return number_table(wide, by_row=True) + iteration_cap_note(table, caps)


# Method names as the headings of the report print them.
_DISPLAY = {
    "mle": "MLE",
    "em": "EM",
    "nuts": "NUTS",
    "gibbs": "Gibbs",
    "gpb1": "GPB1",
    "gpb2": "GPB2",
    "imm": "IMM",
}


def _named(methods) -> str:
    """Methods as a heading names them: "MLE, EM and NUTS"."""
    names = [_DISPLAY.get(m, m) for m in dict.fromkeys(methods)]
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


def _data_rows(scenario: str, values: dict) -> pd.DataFrame:
    return pd.DataFrame(
        [("data", scenario, "data", k, float(v)) for k, v in values.items()],
        columns=["section", "scenario", "method", "metric", "value"],
    )


def deconvolution_blocks(
    blocks,
    figures,
    scenario,
    x,
    z,
    measure,
    comparison,
    diag,
    frames,
    tmp,
    *,
    sigma=None,
    keep_trees=False,
    left_out=None,
):
    """The scenario's blocks in every section; ``sigma`` the noise scale of the data (a float
    or (N,) per point; None: ``scenario.sigma``, a number); ``left_out`` ({method: sentence},
    ``runners.scenario_methods``): the methods not run on the scenario, each sentence said in
    its methods note."""
    name = scenario.name
    fits = comparison.fits
    sigma = scenario.sigma if sigma is None else sigma
    per_unit = np.ndim(sigma) > 0
    # the scale of the figures' margins: the median s_i when the points have their own
    scale = float(np.median(sigma))
    shape = "x".join(str(s) for s in np.shape(x))
    blocks["data"].append(
        f'<h3 id="data-{name}">{html.escape(name)}</h3>'
        + note(f"{html.escape(scenario.description)} {shape} observations, and as many held-out.")
        + figure_tag(
            figures,
            f"{name}-data",
            figure_deconvolution_data(x, sigma, measure),
            f"{name} data",
        )
    )
    if per_unit:
        noise = {"sigma_min": np.min(sigma), "sigma_median": scale, "sigma_max": np.max(sigma)}
    else:
        noise = {"sigma": sigma}
    frames.append(_data_rows(name, {"num_points": len(x), **noise}))
    frames.append(
        tidy_rows(
            "methods",
            name,
            comparison.table.pivot(index="method", columns="metric", values="value"),
        )
    )
    nuts = fits["nuts"].datatree["posterior"]
    k = nuts.sizes["atom"]
    em_iters = fits["attention-em"].log_likelihood_trace.size - 1
    if per_unit:
        estep = (
            "softmax attention with a per-query temperature: scores log w<sub>k</sub> + "
            "(&lt;x<sub>i</sub>, mu<sub>k</sub>&gt; - |mu<sub>k</sub>|<sup>2</sup>/2) / "
            "s<sub>i</sub><sup>2</sup>, each point's own s<sub>i</sub> "
            f"({np.min(sigma):.2f} to {np.max(sigma):.2f}) known to every method"
        )
    else:
        estep = (
            "softmax attention with Q K<sup>T</sup> = I/sigma<sup>2</sup> and key bias "
            "-|mu_k|<sup>2</sup>/(2 sigma<sup>2</sup>)"
        )
    blocks["methods"].append(
        f'<h3 id="methods-{name}">Deconvolution: {html.escape(name)}</h3>'
        + note(
            f"attention-EM: K = N atoms started at the data, {em_iters} iterations; its E-step is "
            f"{estep}. NPMLE: Kiefer-Wolfowitz weights on a "
            f"grid (GMLEB posterior). NUTS: finite Dirichlet mixture, K = {k} atoms, "
            f"{nuts.sizes['chain']} chains x {nuts.sizes['draw']} draws; NUTS-DP: truncated "
            f"stick-breaking DP ({NUM_ATOMS_DP} sticks{_draws_text(fits, 'nuts-dp')}). Gibbs: "
            "the conjugate blocked sampler of the same finite mixture"
            f"{_draws_text(fits, 'gibbs')}. "
            "Approx-Gibbs: each Gibbs draw replaced by its expectation. "
            "James-Stein: linear shrinkage. "
            + _learned_text(fits)
            + "Oracle: the Bayes rule under the true nu. Intervals "
            "for z_i are equal-tailed posterior intervals; the true z_i sit on atoms, so a "
            "discrete posterior's interval either holds z_i exactly or misses it, and EM's "
            "plug-in intervals collapse to one atom wherever A_i. concentrates."
            + "".join(f" {html.escape(sentence)}" for sentence in (left_out or {}).values())
        )
        + _metrics_table(comparison.table, _EXPLAIN, _DECONVOLUTION_CAPS)
        + figure_tag(
            figures,
            f"{name}-data-and-measures",
            figure_data_and_measures(x, scale, measure, comparison),
            f"{name} fitted measures",
        )
        + figure_tag(
            figures, f"{name}-z-hat-vs-truth", figure_z_hat(z, comparison), f"{name} z_hat vs truth"
        )
    )
    parts = [f'<h3 id="diagnostics-{name}">Samplers on {html.escape(name)}</h3>']
    value = comparison.table.set_index(["method", "metric"]).value
    for method in ("nuts", "nuts-dp", "gibbs"):
        if method not in fits:
            continue
        post = fits[method].datatree["posterior"]
        diag.append(
            {
                "method": f"{name}: {method}",
                "draws": f"{post.sizes['chain']} x {post.sizes['draw']}",
                "max_rhat": value[method, "max_rhat_invariant"],
                "min_ess_bulk": value[method, "min_ess_bulk_invariant"],
                "min_ess_tail": value[method, "min_ess_tail_invariant"],
                "divergences": value.get((method, "divergences"), 0.0),
                "wall_time_s": value[method, "wall_time_s"],
            }
        )
        parts.append(
            f"<h4>{method}: trace and rank plots</h4>"
            + figure_tag(
                figures,
                f"{name}-{method}-ranks",
                figure_trace_rank(invariant_series(fits[method].datatree)),
                f"{name} {method} rank plots",
            )
        )
    save_report_tree(fits["nuts"].datatree, tmp / f"{name}-nuts.nc", keep=keep_trees)
    parts.append(
        "<h4>Posterior predictive check (NUTS)</h4>"
        + note(
            "Each orange line is the density of one data set drawn from the posterior "
            "predictive; the observed data (black) should look like one of them."
        )
        + figure_tag(
            figures,
            f"{name}-nuts-ppc",
            figure_deconvolution_ppc(fits["nuts"].datatree),
            f"{name} posterior predictive check",
        )
    )
    blocks["diagnostics"].append("".join(parts))
    if "nuts-dp" in fits:
        dp = loo_compare(
            {
                f"finite (K = {k})": fits["nuts"].datatree,
                f"DP ({NUM_ATOMS_DP} sticks)": fits["nuts-dp"].datatree,
            }
        )
        frames.append(tidy_rows("model-comparison", name, dp, _LOO_COLUMNS))
        blocks["model-comparison"].append(
            f'<h3 id="dp-{name}">Finite mixture vs Dirichlet process: {html.escape(name)}</h3>'
            + number_table(_loo_columns(dp))
        )
    blocks["attention"].append(
        f"<h3>EM responsibilities on {html.escape(name)}</h3>"
        + figure_tag(
            figures,
            f"{name}-em-attention",
            figure_em_attention(x, sigma, fits["attention-em"]),
            f"{name} EM attention matrix",
        )
    )


def _learned_text(fits) -> str:
    """The methods note's sentence on the learned stack, when it ran."""
    if "learned" not in fits:
        return ""
    return (
        "Learned: the grid stack, version 2 of the learned empirical-Bayes estimator "
        "(the shipped <code>pretrained_grid_stack</code>, trained once on simulated tasks): "
        "attention layers keyed on a grid of 128 points, given each point's s<sub>i</sub>; "
        "z_hat its posterior mean, normal intervals z_hat &plusmn; q sd "
        "from its posterior variance, and as nu its effective prior on the grid. "
    )


def _draws_text(fits, method: str) -> str:
    if method not in fits:
        return ""
    post = fits[method].datatree["posterior"]
    return f", {post.sizes['chain']} chains x {post.sizes['draw']} draws"


_LOO_COLUMNS = ["rank", "elpd", "p", "elpd_diff", "se", "dse", "p_worse", "weight", "diag_diff"]


def _loo_columns(frame: pd.DataFrame) -> pd.DataFrame:
    """The columns of an ``az.compare`` table that the report shows, in a fixed order, its rows
    named "model"."""
    return frame[[c for c in _LOO_COLUMNS if c in frame.columns]].rename_axis("model")


def _references_text(references: dict[str, str]) -> str:
    """What the reference_* rows compare with: the reference of each target that has one."""
    smoother, filter_ = references.get("smoother"), references.get("filter")
    if smoother and filter_:
        return (
            f"so the reference for smoothers is {html.escape(smoother)} and for filters "
            f"{html.escape(filter_)}."
        )
    if smoother or filter_:
        has, lacks = ("smoothers", "filters") if smoother else ("filters", "smoothers")
        return (
            f"so the reference for {has} is {html.escape(smoother or filter_)}; {lacks} have "
            "none (no reference_* rows)."
        )
    return "so there is no reference posterior (no reference_* rows)."


def switching_blocks(
    blocks, figures, run: SwitchingRun, diag, frames, tmp, key, *, keep_trees=False
):
    name = "maneuvering-target"
    cmp = run.comparison
    t_max = len(run.modes)
    blocks["data"].append(
        f'<h3 id="data-{name}">Switching state space: {name}</h3>'
        + note(
            f"A target on the plane (state [p_x, v_x, p_y, v_y]) switching between constant "
            f"velocity and a 3 deg/s coordinated turn, positions observed with sigma = 10, "
            f"T = {t_max} steps, {100 * np.mean(run.modes > 0):.0f}% of them in the turn."
        )
        + figure_tag(
            figures,
            f"{name}-data",
            figure_switching_data(run.states, run.observations, run.modes),
            "maneuvering target",
        )
    )
    frames.append(
        _data_rows(name, {"num_steps": t_max, "share_turn_steps": float(np.mean(run.modes > 0))})
    )
    frames.append(
        tidy_rows(
            "methods", name, cmp.table.pivot(index="method", columns="metric", values="value")
        )
    )
    blocks["methods"].append(
        f'<h3 id="methods-{name}">Switching state space: {name}</h3>'
        + note(
            "Filters target p(x_t, s_t | y_1:t): GPB1 and GPB2 collapse to 1 and M Gaussians, "
            "IMM mixes before predicting (in the note 'Attention as GPB2/IMM message passing' "
            "the mixing step is an attention step), the "
            "RBPF keeps particles over modes with a Kalman filter each. Smoothers and samplers "
            "target p(x_t, s_t | y_1:T): Kim's backward pass over GPB2 / IMM, the collapsed "
            "Gibbs sampler, and the Kalman smoother along the true modes (known-modes: the "
            "floor). With 2^T mode histories the exact posterior is out of reach, "
            f"{_references_text(cmp.references)} All use the true parameters. Kim's smoother "
            "passes later evidence back to s_t only through "
            "s_t+1: on this target (little constant-velocity noise, sigma = 10 measurements) it "
            "under-detects turns and carries the resulting heading error backward, so it can "
            "be worse than its own filter. That is the approximation, not a bug (a test checks "
            "the recursions against a loop implementation); the Gibbs sampler, which makes no "
            "such approximation, is close to the known-modes floor."
        )
        + _metrics_table(cmp.table, _EXPLAIN_SWITCHING)
        + figure_tag(
            figures,
            f"{name}-methods",
            figure_switching_methods(cmp, run.states, run.modes),
            "switching methods",
        )
    )
    gibbs = cmp.fits["gibbs"].result
    save_report_tree(gibbs, tmp / f"{name}-gibbs.nc", keep=keep_trees)
    value = cmp.table.set_index(["method", "metric"]).value
    post = gibbs["posterior"]
    diag.append(
        {
            "method": f"{name}: gibbs (states)",
            "draws": f"{post.sizes['chain']} x {post.sizes['draw']}",
            "max_rhat": value["gibbs", "max_rhat_states"],
            "min_ess_bulk": value["gibbs", "min_ess_bulk_states"],
            "min_ess_tail": value["gibbs", "min_ess_tail_states"],
            "divergences": 0.0,
            "wall_time_s": value["gibbs", "wall_time_s"],
        }
    )
    states = np.asarray(post["states"])
    series = {"lp": np.asarray(gibbs["sample_stats"]["lp"])}
    for t in (t_max // 4, t_max // 2, 3 * t_max // 4):
        series[f"p_x at t = {t}"] = states[:, :, t, 0]
    y_rep = switching_predictive_draws(run.params, gibbs, jax.random.fold_in(key, 7))
    ppc_png, inside = figure_switching_ppc(run.observations, y_rep)
    frames.append(
        pd.DataFrame(
            [
                {
                    "section": "diagnostics",
                    "scenario": name,
                    "method": "gibbs",
                    "metric": "ppc_coverage_90",
                    "value": inside,
                }
            ]
        )
    )
    blocks["diagnostics"].append(
        f'<h3 id="diagnostics-{name}">Gibbs sampler on {name}</h3>'
        + figure_tag(
            figures, f"{name}-gibbs-ranks", figure_trace_rank(series), "switching rank plots"
        )
        + "<h4>Posterior predictive check</h4>"
        + note(
            "y_rep_t = H x_t + R<sup>1/2</sup> eps_t for each posterior draw of (x, s); the "
            "band should hold about 90% of the observed coordinates."
        )
        + ppc_png_tag(figures, name, ppc_png)
    )
    mc = run.modes_comparison
    for model, tree in mc.datatrees.items():
        save_report_tree(tree, tmp / f"{name}-gibbs-{model.replace(' ', '-')}.nc", keep=keep_trees)
    frames.append(tidy_rows("model-comparison", name, mc.table, _LOO_COLUMNS))
    frames.append(tidy_rows("model-comparison", name, mc.summary.drop(columns="se")))
    fits_done = ", ".join(f"{k}: {int(v)}" for k, v in mc.summary["gibbs_fits"].items())
    blocks["model-comparison"].append(
        '<h3 id="modes">Numbers of switching modes (leave-future-out)</h3>'
        + note(
            "A time series is not exchangeable, so PSIS-LOO does not apply. Each model is scored "
            "by sum<sub>t &gt; L</sub> log p(y_t | y_1:t-1) over the last "
            f"{t_max - run.min_observations} steps (L = {run.min_observations}), with "
            "p(y_t | y_1:t-1, theta) from the IMM filter and theta's posterior carried forward "
            "by Pareto-smoothed importance sampling (ArviZ <code>lfo_cv</code>), refitting the "
            f"Gibbs sampler when Pareto k &gt; 0.7 (fits per model, the full-data one included: "
            f"{fits_done}). Pi and the scales of Q_j and R_j get weakly informative priors. "
            "Candidates: constant velocity only; plus a left turn; plus a right turn."
        )
        + number_table(_loo_columns(mc.table))
        + number_table(mc.summary)
        + figure_tag(figures, "modes-lfo", figure_lfo_pointwise(mc.lfo), "LFO pointwise")
    )


def learning_blocks(blocks, run: LearningRun, frames):
    cmp, shift = run.comparison, run.shift
    frames.append(
        tidy_rows(
            "learning",
            "1-d-switching-ar",
            cmp.table.pivot(index="method", columns="metric", values="value"),
        )
    )
    summary = shift.summary.set_index("method")
    frames.append(tidy_rows("learning", f"shift-T{run.shift_steps}", summary))
    rows = shift.table[shift.table["method"] != shift.reference]
    wide = rows.pivot(index="parameter", columns="method", values="shift")
    moved = [m for m in dict.fromkeys(rows["method"]) if not m.startswith(shift.reference)]
    learners = list(dict.fromkeys(cmp.table["method"]))
    blocks["learning"].append(
        f'<h3 id="learning-methods">{_named(learners)} learn a switching model</h3>'
        + note(
            "A 1-D switching AR(1): x_t = 0.9 x_t-1 + noise whose variance switches between a "
            "calm mode (0.05) and a volatile one (1.5), observed with noise 0.3, simulated for "
            f"{run.num_steps} training and {run.num_heldout} held-out steps. Learned: the "
            "transition matrix and the scales c_j, r_j of Q_j = c_j Q0_j and R_j = r_j R0_j "
            "(truth: the matrix [[0.9, 0.1], [0.2, 0.8]], scales 1), the set the conjugate "
            f"Gibbs sampler draws, so all {len(learners)} learn the same thing. MLE (L-BFGS "
            "from 4 starts) "
            "and EM (Kim's smoother in the E-step) maximise the IMM filter's log-likelihood; "
            "NUTS samples theta with the states and modes integrated out by the same filter; "
            "Gibbs samples (s, x, theta) exactly, with no filter approximation, but moves "
            "theta only through the sampled states, so it needs far more sweeps per effective "
            "draw (it runs 4 times as many here; compare R-hat and ESS; per second of a long "
            "run it can still win, see BENCHMARKS.md). The samplers share the priors "
            "Dirichlet(1 + 9 I) rows and InverseGamma(3, 2) scales; their point estimate is "
            "the posterior mean. With an approximate E-step EM stops at the last iterate that "
            "raised the log-likelihood."
        )
        + _metrics_table(cmp.table, _EXPLAIN_LEARNING, {"em": LEARNING_EM_ITERATIONS})
    )
    blocks["learning"].append(
        f'<h3 id="learning-shift">How far {_named(moved)} move the posterior of theta</h3>'
        + note(
            f"The same model, T = {run.shift_steps} steps: NUTS over theta (transition matrix "
            "and noise scales, the priors above) with each filter's likelihood against the exact "
            f"likelihood (all 2^{run.shift_steps} mode histories). Per entry of theta: the "
            "shift of the posterior mean in units of the exact posterior sd. The exact run "
            "repeated with another seed (exact-repeat) is the Monte Carlo noise floor; "
            "max_shift_in_mcse is the largest shift in units of its Monte Carlo error. The "
            "larger study (the maneuvering target, and T = 200 against the Gibbs sampler) is "
            "benchmarks/switching_posterior_shift.py, recorded in BENCHMARKS.md."
        )
        + number_table(wide)
        + number_table(summary)
    )


def ppc_png_tag(figures, name, png) -> str:
    return figure_tag(figures, f"{name}-gibbs-ppc", png, "switching posterior predictive check")


def atoms_block(blocks, figures, scenario, atoms, frames):
    frames.append(tidy_rows("model-comparison", scenario.name, atoms.table, _LOO_COLUMNS))
    frames.append(tidy_rows("model-comparison", scenario.name, atoms.summary.drop(columns="se")))
    blocks["model-comparison"].insert(
        0,
        f'<h3 id="atoms">Numbers of atoms on {html.escape(scenario.name)} (PSIS-LOO)</h3>'
        + note(
            "The finite Dirichlet mixture fitted by the conjugate Gibbs sampler for each K; "
            "<code>az.compare</code> ranks them by PSIS-LOO elpd with stacking weights. dse is "
            "the standard error of the difference to the best model; R-hat and ESS are those "
            "of the total log-likelihood, which every labelling of the atoms agrees on."
        )
        + number_table(_loo_columns(atoms.table))
        + number_table(atoms.summary)
        + figure_tag(
            figures,
            "atoms-loo",
            figure_elpd(atoms.summary, "model", "elpd_loo", "PSIS-LOO across K"),
            "elpd vs K",
        ),
    )


def attention_block(blocks, figures, att_figs, att_table, frames):
    frames.append(tidy_rows("attention", "random-scores", att_table))
    blocks["attention"].insert(
        0,
        note(
            "As in the note 'Attention as a regularised argmax', attention weights solve argmax "
            "over the simplex of &lt;p, s&gt; - tau "
            "Omega(p). Omega = negative Shannon entropy gives softmax, the Gini term |p|^2/2 "
            "sparsemax (a Euclidean projection onto the simplex, with exact zeros), the Tsallis "
            "1.5-entropy entmax in between. As tau -> 0 every map tends to the LP vertex (the "
            "argmax); as tau grows to the uniform distribution."
        )
        + figure_tag(figures, "simplex-paths", att_figs["simplex-paths"], "paths on the simplex")
        + figure_tag(
            figures, "attention-matrices", att_figs["attention-matrices"], "attention matrices"
        )
        + number_table(att_table),
    )


def kernel_block(blocks, figures, nw_figs, nw_table, frames):
    frames.append(tidy_rows("kernel-regression", "sine", nw_table))
    blocks["kernel-regression"].append(
        note(
            "As in the note 'Attention and Transformers' (Nitin 2023), Nadaraya-Watson "
            "f(q) = sum_j K_h(q - k_j) v_j / sum_j K_h(q - k_j) is "
            "softmax attention with scores log K_h(q - k_j). Data: y = 2 sin x + x<sup>0.8</sup> "
            "+ N(0, 0.25), x uniform on [0, 5]. Each kernel's bandwidth minimises the closed-form "
            "leave-one-out error; ISE is the integrated squared error against the truth."
        )
        + figure_tag(figures, "nadaraya-watson", nw_figs["nadaraya-watson"], "Nadaraya-Watson")
        + number_table(nw_table)
    )


def diagnostics_summary(blocks, rows, frames):
    if not rows:
        return
    frame = pd.DataFrame(rows).set_index("method")
    frames.append(tidy_rows("diagnostics", "all", frame))
    blocks["diagnostics"].insert(
        0,
        note(
            "Rank-normalised split R-hat and bulk / tail ESS (Vehtari et al. 2021), computed on "
            "quantities every labelling of the atoms agrees on (mixture atoms are exchangeable, "
            "so R-hat on the atoms themselves measures label switching, not mixing), and on the "
            "states for the switching sampler. Divergences are NUTS transitions after warmup."
        )
        + number_table(frame),
    )


def page_html(
    blocks, scenarios, switching, *, quick, seed, elapsed, summary="", trees_note=""
) -> str:
    """The page: a title and introduction, the table of contents, ``summary`` (the HTML of the
    opening "Summary" section, ``<h2 id="summary">`` first), then the sections in order.
    ``trees_note`` says what the ``*.nc`` files hold."""
    mode = "quick" if quick else "full"
    entries = ((("summary", "Summary"),) if summary else ()) + SECTIONS
    toc = "".join(f'<li><a href="#{sid}">{html.escape(title)}</a></li>' for sid, title in entries)
    names = ", ".join(s.name for s in scenarios)
    body = [
        "<h1>attnbayes: attention as inference, measured</h1>",
        note(
            "Four readings of attention, each run beside full-posterior inference on the same "
            "simulated data: EM for Gaussian deconvolution (its E-step is softmax attention) "
            f"against NUTS, Gibbs and empirical Bayes on {html.escape(names)}; "
            + (
                "the switching state-space filters (IMM's mixing step is an attention step) "
                "against Kim's smoother and a collapsed Gibbs sampler; "
                if switching
                else ""
            )
            + "attention weights as regularised argmax; and Nadaraya-Watson kernel regression "
            f"as attention pooling. Run: {mode}, seed {seed}, {elapsed:.0f} s in all. Every "
            "number is also in <code>results.csv</code>; the samplers' DataTrees are the "
            f"<code>*.nc</code> files beside this page{trees_note}."
        ),
        f"<nav><ul>{toc}</ul></nav>",
        summary,
    ]
    for sid, title in SECTIONS:
        body.append(f'<h2 id="{sid}">{html.escape(title)}</h2>')
        body.extend(blocks[sid])
    return page("attnbayes report", "\n".join(body))
