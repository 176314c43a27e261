"""The comparison report: simulate the built-in data, run every method, write one HTML page.

``write_report(out_dir)`` writes ``out_dir/<name>/`` with ``index.html`` (self-contained:
tables and PNG figures inlined), the figures as PNG files, ``results.csv`` (section, scenario,
method, metric, value) and the samplers' DataTrees as netCDF. Sections:

1. Data: the deconvolution scenarios and the maneuvering target.
2. Methods side by side: ``compare_deconvolution`` and ``compare_switching`` tables
   (accuracy, calibration, time) with their figures.
3. Posterior diagnostics: R-hat, bulk/tail ESS and divergences of every sampler; trace and
   rank plots on permutation-invariant quantities; posterior predictive checks.
4. Model comparison: PSIS-LOO (``az.compare``) across numbers of atoms and between the
   finite and Dirichlet-process mixtures; leave-future-out one-step-ahead log predictive
   density across numbers of switching modes.
5. Attention maps: softmax, sparsemax and entmax on the simplex; EM responsibilities.
6. Nadaraya-Watson: kernel regression as attention pooling, bandwidths by LOO-CV.

The folder is assembled under a temporary name and renamed into place, so a failed run never
leaves a half-written report.
"""

from __future__ import annotations

import html
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

import jax
import jax.numpy as jnp
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from inference import em
from inference.compare import (
    METHODS,
    DeconvolutionComparison,
    SwitchingComparison,
    compare_deconvolution,
    compare_switching,
)
from inference.invariants import measure_cdf
from inference.kernel_regression import leave_one_out, nadaraya_watson, select_bandwidth
from inference.model_comparison import compare_num_atoms, compare_num_modes, loo_compare
from inference.outputs import (
    MANIFEST,
    assembling,
    check_finite_table,
    computing,
    manifest_json,
    prepare_target,
    versions,
)
from inference.pages import img_tag, page, png_bytes, save_datatree, table_html
from inference.simplex import regularised_argmax
from models import _checks
from models.deconvolution import DiscreteMeasure, get_measure, simulate
from models.switching import SwitchingParams, maneuvering_target
from models.switching import simulate as simulate_switching

METHOD_COLORS = {
    "attention-em": "tab:blue",
    "npmle": "tab:purple",
    "nuts": "tab:orange",
    "nuts-dp": "tab:brown",
    "gibbs": "tab:red",
    "approx-gibbs": "tab:cyan",
    "james-stein": "tab:gray",
    "oracle": "tab:green",
}
NUM_ATOMS_DP = 12
REQUIRED_METHODS = ("attention-em", "nuts", "oracle")
SECTIONS = (
    ("data", "1. Data"),
    ("methods", "2. Methods side by side"),
    ("diagnostics", "3. Posterior diagnostics"),
    ("model-comparison", "4. Model comparison"),
    ("attention", "5. Attention maps"),
    ("kernel-regression", "6. Nadaraya-Watson kernel regression"),
)


class Scenario(NamedTuple):
    """A built-in deconvolution data set and its sizes (quick run, full run)."""

    name: str
    measure: str
    measure_kwargs: dict
    sigma: float
    num_points: tuple[int, int]
    nuts_draws: tuple[int, int]
    description: str
    quick: bool = True


SCENARIOS = (
    Scenario(
        "three-atoms",
        "three-atoms",
        {},
        1.0,
        (200, 1000),
        (250, 1000),
        "nu = 0.5 delta(-2) + 0.3 delta(0) + 0.2 delta(3) in 1-D, sigma = 1: the atoms overlap "
        "after noise, so recovering nu is a genuine deconvolution.",
    ),
    Scenario(
        "sparse-means",
        "sparse-means",
        {"num_nonzero": 50, "num_points": 1000, "mean": 4.0},
        1.0,
        (300, 1000),
        (300, 1000),
        "Johnstone-Silverman sparse normal means: 95% of the z_i are 0, 5% equal 4, sigma = 1.",
        quick=False,
    ),
    Scenario(
        "ring",
        "ring",
        {"num_atoms": 8, "radius": 3.0},
        0.5,
        (200, 500),
        (300, 800),
        "Eight equal atoms on the circle of radius 3 in 2-D, sigma = 0.5: the spherical case "
        "of seed 1, where the EM key bias is nearly constant and the E-step is plain softmax "
        "attention.",
        quick=False,
    ),
)


class SwitchingSettings(NamedTuple):
    """Sizes of the switching part (quick run, full run)."""

    num_steps: tuple[int, int] = (60, 200)
    gibbs_draws: tuple[int, int] = (200, 1000)
    gibbs_chains: int = 2
    heldout_fraction: float = 0.3
    mode_counts: tuple[tuple[int, ...], tuple[int, ...]] = ((1, 2), (1, 2, 3))


SWITCHING = SwitchingSettings()
ATOM_COUNTS = ((1, 2, 3), (1, 2, 3, 4, 5))


def _png(fig) -> bytes:
    return png_bytes(fig)


# ----------------------------------------------------------------------- deconvolution figures


def figure_data_and_measures(x, sigma, true_measure, comparison) -> bytes:
    """Data with the true and fitted mixing measures (1-D: histogram + CDFs; 2-D: plane)."""
    fits = comparison.fits
    x = np.asarray(x)
    if x.ndim == 1:
        fig, (ax0, ax1) = plt.subplots(1, 2, figsize=(12, 4), layout="constrained")
        ax0.hist(x, bins=60, density=True, color="0.85", label="data x (density)")
        ax0.set_ylabel("density of x")
        mass_ax = ax0.twinx()
        edges = np.linspace(x.min() - sigma, x.max() + sigma, 81)
        centers, width = 0.5 * (edges[1:] + edges[:-1]), edges[1] - edges[0]
        mass_ax.vlines(
            true_measure.atoms, 0, true_measure.weights, color="k", lw=4, label="true nu"
        )
        for offset, (method, fit) in zip(
            (-0.25, 0.25),
            ((m, fits[m]) for m in ("attention-em", "npmle") if m in fits),
            strict=False,
        ):
            mass, _ = np.histogram(
                np.asarray(fit.measure.atoms), edges, weights=np.asarray(fit.measure.weights)
            )
            keep = mass > 1e-3
            mass_ax.vlines(
                centers[keep] + offset * width,
                0,
                mass[keep],
                lw=2.5,
                color=METHOD_COLORS[method],
                label=f"{method} (mass per bin of width {width:.2f})",
            )
        mass_ax.set_ylabel("mass of nu")
        mass_ax.set_ylim(0, 1.05 * max(float(np.max(true_measure.weights)), 0.6))
        mass_ax.legend(fontsize=8, loc="upper right")
        ax0.set_xlabel("x, z")
        ax0.set_title("data and mixing measures")
        grid = np.linspace(x.min() - sigma, x.max() + sigma, 600)
        ax1.step(
            grid,
            measure_cdf(true_measure.atoms, true_measure.weights, grid),
            "k",
            where="post",
            label="truth",
        )
        for method, fit in fits.items():
            if method == "oracle" or fit.measure is None:
                continue
            if fit.datatree is not None:
                post = fit.datatree["posterior"]
                draws = np.asarray(
                    measure_cdf(
                        np.asarray(post["atoms"]).reshape(-1, post["atoms"].shape[-1]),
                        np.asarray(post["weights"]).reshape(-1, post["weights"].shape[-1]),
                        grid,
                    )
                )
                lo, hi = np.quantile(draws, [0.05, 0.95], axis=0)
                ax1.fill_between(
                    grid,
                    lo,
                    hi,
                    step="post",
                    color=METHOD_COLORS[method],
                    alpha=0.25,
                    label=f"{method} 90% band",
                )
                ax1.step(
                    grid,
                    draws.mean(0),
                    color=METHOD_COLORS[method],
                    where="post",
                    label=f"{method} posterior mean",
                )
            else:
                cdf = measure_cdf(fit.measure.atoms, fit.measure.weights, grid)
                ax1.step(grid, cdf, color=METHOD_COLORS[method], where="post", label=method)
        ax1.set_xlabel("t")
        ax1.set_ylabel("F(t)")
        ax1.set_title("CDF of the mixing measure nu")
        ax1.legend(fontsize=8)
        return _png(fig)
    fig, axes = plt.subplots(1, 2, figsize=(10, 4.6), sharex=True, sharey=True)
    for ax, method in zip(axes, ["attention-em", "nuts"], strict=True):
        ax.scatter(x[:, 0], x[:, 1], s=4, color="0.75", label="data x")
        fit = fits.get(method)
        if fit is not None:
            atoms = np.asarray(fit.measure.atoms)
            if fit.datatree is not None:
                keep = np.random.default_rng(0).choice(len(atoms), min(4000, len(atoms)), False)
                atoms = atoms[keep]
            ax.scatter(
                atoms[:, 0],
                atoms[:, 1],
                s=3,
                color=METHOD_COLORS[method],
                alpha=0.4,
                label="EM atoms" if method == "attention-em" else "NUTS atom draws",
            )
        t = np.asarray(true_measure.atoms)
        ax.scatter(t[:, 0], t[:, 1], marker="x", s=60, color="k", label="true atoms")
        ax.set_aspect("equal")
        ax.set_title(method)
        ax.legend(fontsize=8, loc="upper right")
    return _png(fig)


def figure_z_hat(z_true, comparison) -> bytes:
    """z_hat against the true z_i, one panel per method (first coordinate in p-D)."""
    fits = comparison.fits
    z = np.asarray(z_true).reshape(len(z_true), -1)[:, 0]
    cols = min(4, len(fits))
    rows = -(-len(fits) // cols)
    fig, axes = plt.subplots(
        rows,
        cols,
        figsize=(3.6 * cols, 3.6 * rows),
        sharey=True,
        squeeze=False,
        layout="constrained",
    )
    for ax in axes.ravel()[len(fits) :]:
        ax.set_visible(False)
    first_col = axes[:, 0]
    axes = axes.ravel()[: len(fits)]
    jitter = np.random.default_rng(0).uniform(-0.15, 0.15, size=z.shape)
    lim = [min(z.min(), -1) - 1, max(z.max(), 1) + 1]
    for ax, (method, fit) in zip(axes, fits.items(), strict=True):
        zh = np.asarray(fit.z_hat).reshape(len(z), -1)[:, 0]
        mse = float(
            np.mean(
                np.sum(
                    (np.asarray(fit.z_hat) - np.asarray(z_true)).reshape(len(z), -1) ** 2, axis=1
                )
            )
        )
        ax.scatter(z + jitter, zh, s=4, alpha=0.5, color=METHOD_COLORS.get(method, "C0"))
        ax.plot(lim, lim, "k--", lw=0.8)
        ax.set_title(f"{method}\nMSE {mse:.3f}")
        ax.set_xlabel("true z (jittered)")
    for ax in first_col:
        ax.set_ylabel("z_hat = E[z | x]")
    return _png(fig)


def figure_em_attention(x, sigma, fit, max_points: int = 150) -> bytes:
    """EM's responsibilities as an attention matrix, and its log-likelihood per iteration."""
    x = np.asarray(x)
    idx = np.linspace(0, len(x) - 1, min(max_points, len(x))).astype(int)
    sub = x[idx]
    order = np.argsort(sub if sub.ndim == 1 else np.arctan2(sub[:, 1], sub[:, 0]))
    sub = sub[order]
    resp = np.asarray(em.responsibilities(sub, fit.measure.atoms, fit.measure.weights, sigma))
    atoms = np.asarray(fit.measure.atoms)
    key_order = np.argsort(atoms if atoms.ndim == 1 else np.arctan2(atoms[:, 1], atoms[:, 0]))
    fig, (ax0, ax1) = plt.subplots(
        1, 2, figsize=(12, 4), gridspec_kw={"width_ratios": [1.2, 1]}, layout="constrained"
    )
    im = ax0.imshow(resp[:, key_order], aspect="auto", cmap="viridis", interpolation="nearest")
    fig.colorbar(im, ax=ax0, fraction=0.04)
    ax0.set_xlabel("key k (fitted atoms, sorted)")
    ax0.set_ylabel("query i (data, sorted)")
    ax0.set_title("E-step = softmax attention: A_ik")
    trace = np.asarray(fit.log_likelihood_trace)
    ax1.plot(np.arange(len(trace)), trace, color=METHOD_COLORS["attention-em"])
    ax1.set_xlabel("EM iteration (= attention layer with tied weights)")
    ax1.set_ylabel("log p(x)")
    ax1.set_title("log-likelihood never decreases")
    return _png(fig)


def _average_ranks(values: np.ndarray) -> np.ndarray:
    """Ranks 1..n with ties given their average rank (draws of a CDF repeat exactly)."""
    _, inverse, counts = np.unique(values, return_inverse=True, return_counts=True)
    return (np.cumsum(counts) - (counts - 1) / 2.0)[inverse]


def invariant_series(datatree) -> dict[str, np.ndarray]:
    """(chain, draw) series every labelling of the atoms agrees on: the total log-likelihood,
    the most variable E[z_i | x_i, nu] and (1-D) the CDF of nu where it varies most."""
    post = datatree["posterior"]
    series = {"log_lik_total": np.asarray(post["log_lik_total"])}
    z_mean = np.asarray(post["z_mean"])
    z_mean = z_mean.reshape(z_mean.shape[0], z_mean.shape[1], -1)
    worst = int(np.argmax(z_mean.std(axis=(0, 1))))
    series[f"z_mean[{worst}] (most variable)"] = z_mean[:, :, worst]
    if "nu_cdf" in post:
        cdf = np.asarray(post["nu_cdf"])
        flat = cdf.reshape(-1, cdf.shape[-1])
        j = int(np.argmax([np.unique(flat[:, g]).size for g in range(flat.shape[1])]))
        series[f"nu_cdf at t = {float(post['cdf_point'][j]):.2f}"] = cdf[:, :, j]
    return series


def figure_trace_rank(series: dict[str, np.ndarray], title: str = "") -> bytes:
    """Trace (top) and rank histograms per chain (bottom) of (chain, draw) series; uniform
    rank histograms (near the dashed line) mean the chains mix."""
    fig, axes = plt.subplots(
        2, len(series), figsize=(3.8 * len(series), 5.2), layout="constrained", squeeze=False
    )
    for col, (label, draws) in enumerate(series.items()):
        n_chain, n_draw = draws.shape
        ranks = _average_ranks(draws.ravel()).reshape(draws.shape)
        bins = np.linspace(0, n_chain * n_draw, 21)
        for c in range(n_chain):
            axes[0, col].plot(draws[c], lw=0.5, alpha=0.8, label=f"chain {c}")
            axes[1, col].hist(ranks[c], bins=bins, histtype="step", lw=1.5, label=f"chain {c}")
        axes[1, col].axhline(n_draw / 20, color="k", ls="--", lw=0.8)
        axes[0, col].set_title(label, fontsize=9)
        axes[1, col].set_xlabel("rank over all chains")
    axes[0, 0].set_ylabel("trace")
    axes[1, 0].set_ylabel("count")
    axes[0, 0].legend(fontsize=7)
    if title:
        fig.suptitle(title)
    return _png(fig)


def figure_deconvolution_data(x, sigma, measure: DiscreteMeasure) -> bytes:
    """The observations with the true mixing measure (1-D: histogram; 2-D: the plane)."""
    x = np.asarray(x)
    atoms, weights = np.asarray(measure.atoms), np.asarray(measure.weights)
    fig, ax = plt.subplots(figsize=(6, 3.6), layout="constrained")
    if x.ndim == 1:
        ax.hist(x, bins=50, density=True, color="0.8", label="x (density)")
        grid = np.linspace(x.min() - sigma, x.max() + sigma, 400)
        dens = (weights * np.exp(-0.5 * ((grid[:, None] - atoms) / sigma) ** 2)).sum(1)
        ax.plot(grid, dens / (sigma * np.sqrt(2 * np.pi)), "k", label="true density of x")
        mass = ax.twinx()
        mass.vlines(atoms, 0, weights, color="tab:green", lw=4, label="true nu (mass)")
        mass.set_ylim(0, 1.05 * max(weights.max(), 0.5))
        mass.set_ylabel("mass of nu")
        mass.legend(fontsize=8, loc="upper right")
        ax.legend(fontsize=8, loc="upper left")
        ax.set_xlabel("x")
    else:
        ax.scatter(x[:, 0], x[:, 1], s=4, color="0.6", label="x")
        ax.scatter(atoms[:, 0], atoms[:, 1], marker="x", s=70, color="tab:green", label="atoms")
        ax.set_aspect("equal")
        ax.legend(fontsize=8)
    return _png(fig)


def figure_deconvolution_ppc(datatree, num_replicates: int = 60) -> bytes:
    """Posterior predictive check: densities of replicated data sets against the observed one
    (1-D: x; p-D: |x|, which a ring's replicated data must reproduce)."""
    obs = np.asarray(datatree["observed_data"]["x"])
    rep = np.asarray(datatree["posterior_predictive"]["x"])
    rep = rep.reshape(-1, *obs.shape)
    if obs.ndim > 1:
        obs, rep = np.linalg.norm(obs, axis=-1), np.linalg.norm(rep, axis=-1)
        label = "|x|"
    else:
        label = "x"
    idx = np.random.default_rng(0).choice(len(rep), min(num_replicates, len(rep)), replace=False)
    edges = np.linspace(min(obs.min(), rep[idx].min()), max(obs.max(), rep[idx].max()), 50)
    centres = 0.5 * (edges[1:] + edges[:-1])
    fig, ax = plt.subplots(figsize=(6, 3.4), layout="constrained")
    for i, r in enumerate(rep[idx]):
        dens, _ = np.histogram(r, edges, density=True)
        ax.plot(centres, dens, color="tab:orange", alpha=0.15, lw=1, label="replicated" * (i == 0))
    dens, _ = np.histogram(obs, edges, density=True)
    ax.plot(centres, dens, color="k", lw=2, label="observed")
    ax.set_xlabel(label)
    ax.set_ylabel("density")
    ax.legend(fontsize=8)
    return _png(fig)


def figure_switching_data(states, y, modes) -> bytes:
    """The simulated maneuvering target: true path, observations coloured by mode."""
    states, y, modes = np.asarray(states), np.asarray(y), np.asarray(modes)
    fig, (ax0, ax1) = plt.subplots(
        1, 2, figsize=(12, 4), gridspec_kw={"width_ratios": [1.3, 1]}, layout="constrained"
    )
    ax0.plot(states[:, 0], states[:, 2], "k", lw=1, label="true position")
    for j, colour in zip(
        range(modes.max() + 1), ("tab:blue", "tab:red", "tab:green"), strict=False
    ):
        keep = modes == j
        ax0.scatter(y[keep, 0], y[keep, 1], s=8, color=colour, label=f"y_t in mode {j}")
    ax0.set_xlabel("p_x")
    ax0.set_ylabel("p_y")
    ax0.legend(fontsize=8)
    ax0.set_title("path and observations")
    ax1.step(np.arange(len(modes)), modes, where="mid", color="k")
    ax1.set_xlabel("t")
    ax1.set_yticks(range(modes.max() + 1))
    ax1.set_ylabel("mode s_t (0: constant velocity, 1: turn)")
    ax1.set_title("true modes")
    return _png(fig)


SWITCHING_COLORS = {
    "gpb1": "tab:gray",
    "gpb2": "tab:purple",
    "imm": "tab:blue",
    "rbpf": "tab:cyan",
    "kim-gpb2": "tab:pink",
    "kim-imm": "tab:orange",
    "gibbs": "tab:red",
    "known-modes": "tab:green",
}


def figure_switching_methods(comparison: SwitchingComparison, states, modes) -> bytes:
    """Position error per step and P(turn) per step, filters and smoothers against the truth."""
    states, modes = np.asarray(states), np.asarray(modes)
    fig, (ax0, ax1) = plt.subplots(2, 1, figsize=(11, 6.5), sharex=True, layout="constrained")
    t = np.arange(len(modes))
    for method, fit in comparison.fits.items():
        err = np.hypot(fit.mean[:, 0] - states[:, 0], fit.mean[:, 2] - states[:, 2])
        style = "-" if fit.target == "filter" else "--"
        colour = SWITCHING_COLORS.get(method, "k")
        ax0.plot(t, err, style, color=colour, lw=1, label=method)
        if fit.mode_probs is not None and method != "known-modes":
            ax1.plot(t, 1 - fit.mode_probs[:, 0], style, color=colour, lw=1, label=method)
    ax1.fill_between(t, 0, modes > 0, step="mid", color="0.85", label="true turn")
    ax0.set_ylabel("position error |E[p_t] - p_t|")
    ax0.legend(fontsize=7, ncol=4)
    ax1.set_ylabel("P(s_t != constant velocity)")
    ax1.set_xlabel("t (solid: filters, dashed: smoothers and samplers)")
    return _png(fig)


def switching_predictive_draws(params: SwitchingParams, datatree, key) -> np.ndarray:
    """Replicated observations y_rep_t = H_{s_t} x_t + R_{s_t}^{1/2} eps per posterior draw,
    (chain * draw, T, o)."""
    post = datatree["posterior"]
    states = np.asarray(post["states"]).reshape(-1, *post["states"].shape[2:])
    modes = np.asarray(post["modes"]).reshape(-1, post["modes"].shape[-1])
    h = np.asarray(params.emission_matrices)[modes]
    chol = np.linalg.cholesky(np.asarray(params.emission_covs))[modes]
    eps = np.asarray(jax.random.normal(key, (*modes.shape, h.shape[-2])))
    return np.einsum("ntod,ntd->nto", h, states) + np.einsum("ntoe,nte->nto", chol, eps)


def figure_switching_ppc(y, y_rep) -> tuple[bytes, float]:
    """Observed y_t against the 90% band of the posterior predictive, and the band's coverage."""
    y = np.asarray(y)
    lo, hi = np.quantile(y_rep, [0.05, 0.95], axis=0)
    inside = float(np.mean((lo <= y) & (y <= hi)))
    t = np.arange(len(y))
    fig, axes = plt.subplots(1, 2, figsize=(12, 3.6), layout="constrained")
    for k, ax in enumerate(axes):
        mid = np.median(y_rep[:, :, k], axis=0)
        ax.fill_between(
            t,
            lo[:, k] - mid,
            hi[:, k] - mid,
            color="tab:red",
            alpha=0.25,
            label="90% predictive band",
        )
        ax.scatter(t, y[:, k] - mid, s=6, color="k", label="observed")
        ax.set_xlabel("t")
        ax.set_ylabel(f"y_{k + 1} minus predictive median")
    axes[0].legend(fontsize=8)
    fig.suptitle(f"{100 * inside:.1f}% of observed coordinates inside the 90% band")
    return _png(fig), inside


def figure_elpd(frame: pd.DataFrame, x_label: str, elpd: str, title: str) -> bytes:
    """elpd +- se per model (a row per model, in the frame's order)."""
    fig, ax = plt.subplots(figsize=(5.5, 3.4), layout="constrained")
    pos = np.arange(len(frame))
    ax.errorbar(pos, frame[elpd], yerr=frame["se"], fmt="o", color="k", capsize=4)
    ax.set_xticks(pos, frame.index)
    ax.set_xlabel(x_label)
    ax.set_ylabel(f"{elpd} (+- se)")
    ax.set_title(title)
    return _png(fig)


def figure_lfo_pointwise(lfo: dict) -> bytes:
    """Cumulative one-step-ahead log predictive density of each model minus the first's."""
    names = list(lfo)
    base = np.asarray(lfo[names[0]].elpd_i)
    time_index = np.asarray(lfo[names[0]].elpd_i["time"])
    fig, ax = plt.subplots(figsize=(7, 3.6), layout="constrained")
    for name in names:
        ax.plot(time_index, np.cumsum(np.asarray(lfo[name].elpd_i) - base), label=name)
    ax.axhline(0, color="k", lw=0.6)
    ax.set_xlabel("held-out step t")
    ax.set_ylabel(f"cumulative elpd difference vs {names[0]}")
    ax.legend(fontsize=8)
    return _png(fig)


# ----------------------------------------------------------------------------- attention demos

SIMPLEX_MAPS = (
    ("softmax", "shannon", None),
    ("entmax 1.5", "tsallis", 1.5),
    ("sparsemax", "gini", None),
)


def _barycentric(p):
    p = np.asarray(p)
    return p[..., 1] + 0.5 * p[..., 2], np.sqrt(3) / 2 * p[..., 2]


def attention_demo(key) -> tuple[dict[str, bytes], pd.DataFrame]:
    """The three weight maps as regularised argmax: paths over the simplex as the temperature
    grows, sparsity against temperature, and the attention matrices of one query/key set."""
    scores = jnp.array([1.0, 0.6, -0.4])
    temps = np.geomspace(0.02, 20, 120)
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.4), layout="constrained")
    corners = np.array([[0, 0], [1, 0], [0.5, np.sqrt(3) / 2], [0, 0]])
    axes[0].plot(corners[:, 0], corners[:, 1], "k", lw=0.8)
    for (label, reg, alpha), colour in zip(SIMPLEX_MAPS, ("C0", "C1", "C3"), strict=True):
        path = np.stack(
            [np.asarray(regularised_argmax(scores, reg, alpha=alpha, temperature=t)) for t in temps]
        )
        axes[0].plot(*_barycentric(path), color=colour, lw=2, label=label)
    axes[0].scatter(*_barycentric(np.eye(3)[0]), color="k", zorder=3, label="LP vertex (tau = 0)")
    axes[0].scatter(
        *_barycentric(np.full(3, 1 / 3)), marker="+", s=80, color="k", label="uniform (tau -> inf)"
    )
    axes[0].set_aspect("equal")
    axes[0].axis("off")
    axes[0].legend(fontsize=8, loc="upper left")
    axes[0].set_title("argmax <p, s> - tau Omega(p), s = (1, 0.6, -0.4), tau from 0.02 to 20")
    many = jax.random.normal(key, (400, 16))
    rows = []
    for (label, reg, alpha), colour in zip(SIMPLEX_MAPS, ("C0", "C1", "C3"), strict=True):
        nonzero = [
            float(
                jnp.mean(jnp.sum(regularised_argmax(many, reg, alpha=alpha, temperature=t) > 0, -1))
            )
            for t in temps[::6]
        ]
        axes[1].semilogx(temps[::6], nonzero, color=colour, lw=2, label=label)
        rows.append((label, nonzero))
    axes[1].set_xlabel("temperature tau")
    axes[1].set_ylabel("mean number of nonzero weights (of 16)")
    axes[1].legend(fontsize=8)
    axes[1].set_title("sparsity: standard normal scores")
    paths = _png(fig)

    kq, kk = jax.random.split(jax.random.fold_in(key, 1))
    q = jax.random.normal(kq, (12, 4))
    k = jax.random.normal(kk, (16, 4))
    s = q @ k.T / 2.0
    fig, axes = plt.subplots(1, 3, figsize=(12, 3.6), layout="constrained", sharey=True)
    table = []
    for ax, (label, reg, alpha) in zip(axes, SIMPLEX_MAPS, strict=True):
        a = np.asarray(regularised_argmax(s, reg, alpha=alpha))
        im = ax.imshow(a, cmap="viridis", vmin=0, vmax=1, interpolation="nearest")
        zeros = float(np.mean(a == 0))
        ax.set_title(f"{label}: {100 * zeros:.0f}% exact zeros")
        ax.set_xlabel("key j")
        with np.errstate(divide="ignore", invalid="ignore"):
            entropy = float(np.mean(-np.sum(np.where(a > 0, a * np.log(a), 0.0), axis=1)))
        table.append(
            {
                "map": label,
                "share_exact_zeros": zeros,
                "mean_entropy": entropy,
                "mean_nonzero_at_tau_1": float(np.mean(np.sum(a > 0, axis=1))),
            }
        )
    axes[0].set_ylabel("query i")
    fig.colorbar(im, ax=axes, fraction=0.02)
    matrices = _png(fig)
    return {"simplex-paths": paths, "attention-matrices": matrices}, pd.DataFrame(table).set_index(
        "map"
    )


KERNELS_SHOWN = ("gaussian", "epanechnikov", "tricube", "boxcar")


def _nw_truth(x):
    return 2 * np.sin(x) + x**0.8


def kernel_regression_demo(key, num_points: int) -> tuple[dict[str, bytes], pd.DataFrame]:
    """Nadaraya-Watson with each kernel at its LOO-CV bandwidth; ISE against the truth."""
    kx, ke = jax.random.split(key)
    x = np.sort(np.asarray(jax.random.uniform(kx, (num_points,), maxval=5.0)))
    y = _nw_truth(x) + 0.5 * np.asarray(jax.random.normal(ke, (num_points,)))
    grid = np.linspace(0.25, 4.75, 200)
    fig, (ax0, ax1) = plt.subplots(1, 2, figsize=(12, 4), layout="constrained")
    ax0.scatter(x, y, s=4, color="0.7", label="data")
    ax0.plot(grid, _nw_truth(grid), "k", lw=2, label="truth")
    rows = []
    for kernel in KERNELS_SHOWN:
        start = time.perf_counter()
        bw = select_bandwidth(x, y, kernel=kernel)
        fit = np.asarray(nadaraya_watson(x, y, grid, kernel=kernel, bandwidth=bw.bandwidth))
        seconds = time.perf_counter() - start
        ise = float(np.mean((fit - _nw_truth(grid)) ** 2) * (grid[-1] - grid[0]))
        ax0.plot(grid, fit, lw=1.3, label=f"{kernel} (h = {float(bw.bandwidth):.3f})")
        rows.append(
            {
                "kernel": kernel,
                "bandwidth": float(bw.bandwidth),
                "loo_cv": float(bw.score),
                "ise": ise,
                "wall_time_s": seconds,
            }
        )
    ax0.legend(fontsize=8)
    ax0.set_xlabel("query / key x")
    ax0.set_ylabel("value y")
    ax0.set_title("f(q) = sum_j softmax_j(log K_h(q - k_j)) v_j")
    hs = np.geomspace(0.02, 2.0, 30)
    cv = [float(leave_one_out(x, y, kernel="gaussian", bandwidth=h).score) for h in hs]
    ax1.semilogx(hs, cv, "k")
    best = rows[0]["bandwidth"]
    ax1.axvline(best, color="C0", ls="--", label=f"selected h = {best:.3f}")
    ax1.set_xlabel("bandwidth h (gaussian kernel)")
    ax1.set_ylabel("LOO-CV squared error")
    ax1.legend(fontsize=8)
    ax1.set_title("under-smoothing (left) and over-smoothing (right)")
    return {"nadaraya-watson": _png(fig)}, pd.DataFrame(rows).set_index("kernel")


# ----------------------------------------------------------------------------- running


def run_scenario(
    scenario: Scenario,
    *,
    quick: bool,
    key: jax.Array,
    progress: Callable[[str], None],
    methods: tuple[str, ...] = METHODS,
) -> tuple[DeconvolutionComparison, np.ndarray, np.ndarray, DiscreteMeasure]:
    """Simulate one scenario (and as many held-out points) and run every method on it."""
    size = 0 if quick else 1
    measure = get_measure(scenario.measure, **scenario.measure_kwargs)
    key_data, key_fit, key_held = jax.random.split(key, 3)
    num_points = scenario.num_points[size]
    z, x = simulate(key_data, measure, scenario.sigma, num_points)
    _, x_heldout = simulate(key_held, measure, scenario.sigma, num_points)
    draws = scenario.nuts_draws[size]
    gibbs = {"num_warmup": 300, "num_samples": 600} if quick else {}
    # the DP mixture is the slowest geometry for NUTS: half the draws of the finite one
    dp = (
        {"num_warmup": draws, "num_samples": draws}
        if quick
        else {
            "num_warmup": draws // 2,
            "num_samples": draws // 2,
        }
    )
    extra = {"gibbs": gibbs, "nuts-dp": dp}
    comparison = compare_deconvolution(
        x,
        scenario.sigma,
        z_true=z,
        true_measure=measure,
        x_heldout=x_heldout,
        methods=methods,
        key=key_fit,
        num_atoms_dp=NUM_ATOMS_DP,
        nuts_kwargs={"num_warmup": draws, "num_samples": draws},
        method_kwargs={m: kw for m, kw in extra.items() if m in methods},
        progress=lambda msg: progress(f"{scenario.name}: {msg}"),
    )
    return comparison, np.asarray(x), np.asarray(z), measure


class SwitchingRun(NamedTuple):
    params: SwitchingParams
    modes: np.ndarray
    states: np.ndarray
    observations: np.ndarray
    comparison: SwitchingComparison
    modes_comparison: object
    min_observations: int


def run_switching(
    settings: SwitchingSettings, *, quick: bool, key, progress: Callable[[str], None]
) -> SwitchingRun:
    """The maneuvering target: every filter, smoother and sampler, then numbers of modes."""
    size = 0 if quick else 1
    key_data, key_cmp, key_modes = jax.random.split(key, 3)
    params = maneuvering_target()
    num_steps = settings.num_steps[size]
    modes, states, y = (np.asarray(a) for a in simulate_switching(key_data, params, num_steps))
    gibbs = {
        "num_warmup": settings.gibbs_draws[size] // 2,
        "num_samples": settings.gibbs_draws[size],
        "num_chains": settings.gibbs_chains,
    }
    comparison = compare_switching(
        params,
        y,
        states_true=states,
        modes_true=modes,
        key=key_cmp,
        gibbs_kwargs=gibbs,
        progress=lambda msg: progress(f"maneuvering-target: {msg}"),
    )
    candidates = {
        f"{m} mode{'s' * (m > 1)}": maneuvering_target(turn_rates_deg=(3.0, -3.0)[: m - 1])
        for m in settings.mode_counts[size]
    }
    min_obs = round(num_steps * (1 - settings.heldout_fraction))
    modes_comparison = compare_num_modes(
        candidates,
        y,
        key=key_modes,
        min_observations=min_obs,
        gibbs_kwargs=gibbs,
        progress=lambda msg: progress(f"numbers of modes: {msg}"),
    )
    return SwitchingRun(params, modes, states, y, comparison, modes_comparison, min_obs)


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


def _metrics_table(table: pd.DataFrame, explain: dict[str, str]) -> str:
    """Methods as columns, metrics as rows, with a column saying what each metric means."""
    wide = table.pivot(index="metric", columns="method", values="value")
    wide = wide[[m for m in dict.fromkeys(table.method) if m in wide.columns]]
    wide = wide.reindex([m for m in explain if m in wide.index])
    wide.index.name = "metric"
    wide["meaning"] = [explain[m] for m in wide.index]
    return table_html(wide)


def _fig(figures: dict, name: str, png: bytes, alt: str) -> str:
    figures[f"{name}.png"] = png
    return img_tag(png, alt)


def _p(text: str) -> str:
    return f'<p class="note">{text}</p>'


def _tidy(section: str, scenario: str, frame: pd.DataFrame, metrics=None) -> pd.DataFrame:
    """A wide frame (index = method / model) as tidy rows of results.csv."""
    cols = [c for c in frame.columns if metrics is None or c in metrics]
    numeric = frame[cols].apply(pd.to_numeric, errors="coerce")
    long = (
        numeric.rename_axis("method")
        .reset_index()
        .melt(id_vars="method", var_name="metric", value_name="value")
    )
    long = long.dropna(subset=["value"])
    long.insert(0, "scenario", scenario)
    long.insert(0, "section", section)
    return long


def _data_rows(scenario: str, values: dict) -> pd.DataFrame:
    return pd.DataFrame(
        [("data", scenario, "data", k, float(v)) for k, v in values.items()],
        columns=["section", "scenario", "method", "metric", "value"],
    )


# ----------------------------------------------------------------------------- the report


def _check_args(name, methods, seed, scenarios):
    if not isinstance(name, str) or not name or "/" in name or name.startswith("."):
        raise ValueError(f"name: must be a plain folder name, got {name!r}")
    methods = tuple(methods)
    unknown = [m for m in methods if m not in METHODS]
    missing = [m for m in REQUIRED_METHODS if m not in methods]
    if unknown or missing:
        raise ValueError(
            f"methods: unknown {unknown} / missing {missing}; the report needs "
            f"{list(REQUIRED_METHODS)} and takes any of {list(METHODS)}"
        )
    seed = _checks.check_positive_int("seed", seed, minimum=0)
    if not scenarios or not all(isinstance(s, Scenario) for s in scenarios):
        raise ValueError("scenarios: expected a non-empty tuple of report.Scenario")
    return methods, seed


def write_report(
    out_dir: str | os.PathLike = "reports",
    *,
    name: str = "attnbayes",
    quick: bool = False,
    seed: int = 0,
    scenarios: tuple[Scenario, ...] = SCENARIOS,
    methods: tuple[str, ...] = METHODS,
    switching: SwitchingSettings | None = SWITCHING,
    atom_counts: tuple[tuple[int, ...], tuple[int, ...]] = ATOM_COUNTS,
    progress: Callable[[str], None] | None = None,
) -> Path:
    """Run the built-in comparisons and write ``out_dir/name/index.html``; return its path.

    Args:
        out_dir: parent folder (created if missing).
        name: the report's folder inside ``out_dir``. An existing ``out_dir/name`` is replaced
            only if attnbayes wrote it (``inference.outputs.prepare_target``, checked before any
            computation); the report carries ``run.json`` as its marker.
        quick: small sizes and only the scenarios marked ``quick`` (about two minutes on two
            cores instead of about ten).
        seed: the random seed of every simulation and sampler.
        scenarios: the deconvolution scenarios (``SCENARIOS``).
        methods: ``compare_deconvolution`` methods; must include "attention-em", "nuts" and
            "oracle". The finite-vs-DP comparison needs "nuts-dp" as well.
        switching: sizes of the switching part; None leaves the switching model out.
        atom_counts: the K compared by PSIS-LOO (quick run, full run).
        progress: called with a message at every step (the CLI prints them).

    Raises:
        ValueError (``InputError`` for the folder): bad arguments, before any computation.
        RunFailed: a failure while computing (``NonFiniteResult`` when a number about to be
            written is not finite); nothing is written.
    """
    methods, seed = _check_args(name, methods, seed, scenarios)
    target = prepare_target(out_dir, name)
    chosen = tuple(s for s in scenarios if s.quick or not quick) or scenarios[:1]
    say = progress or (lambda message: None)
    started = time.perf_counter()
    size = 0 if quick else 1
    with assembling(target) as tmp, computing():
        key_dec, key_sw, key_k, key_att, key_nw = jax.random.split(jax.random.PRNGKey(seed), 5)
        blocks = {sid: [] for sid, _ in SECTIONS}
        figures: dict[str, bytes] = {}
        frames: list[pd.DataFrame] = []
        diag_rows = []
        first_data = None
        for scenario, key_s in zip(chosen, jax.random.split(key_dec, len(chosen)), strict=True):
            comparison, x, z, measure = run_scenario(
                scenario, quick=quick, key=key_s, progress=say, methods=methods
            )
            check_finite_table(f"{scenario.name}: compare_deconvolution", comparison.table)
            if first_data is None:
                first_data = (scenario, x)
            say(f"{scenario.name}: figures")
            _deconvolution_blocks(
                blocks, figures, scenario, x, z, measure, comparison, diag_rows, frames, tmp
            )
        if switching is not None:
            run = run_switching(switching, quick=quick, key=key_sw, progress=say)
            check_finite_table("maneuvering-target: compare_switching", run.comparison.table)
            say("maneuvering-target: figures")
            _switching_blocks(blocks, figures, run, diag_rows, frames, tmp, key_sw)
        scenario, x = first_data
        counts = atom_counts[size]
        say(f"numbers of atoms: Gibbs fits for K in {list(counts)} on {scenario.name}")
        draws = 300 if quick else 1000
        atoms = compare_num_atoms(
            x,
            scenario.sigma,
            counts,
            key=key_k,
            sampler_kwargs={"num_warmup": draws, "num_samples": draws},
            progress=lambda msg: say(f"numbers of atoms: {msg}"),
        )
        _atoms_block(blocks, figures, scenario, atoms, frames)
        say("attention maps and Nadaraya-Watson")
        att_figs, att_table = attention_demo(key_att)
        _attention_block(blocks, figures, att_figs, att_table, frames)
        nw_figs, nw_table = kernel_regression_demo(key_nw, 300 if quick else 1000)
        _kernel_block(blocks, figures, nw_figs, nw_table, frames)
        _diagnostics_summary(blocks, diag_rows, frames)
        results = pd.concat(frames, ignore_index=True)[
            ["section", "scenario", "method", "metric", "value"]
        ]
        check_finite_table("results.csv", results, label_columns=("scenario", "method", "metric"))
        results.to_csv(tmp / "results.csv", index=False)
        for file_name, png in figures.items():
            (tmp / file_name).write_bytes(png)
        elapsed = time.perf_counter() - started
        (tmp / "index.html").write_text(
            _page_html(blocks, chosen, switching, quick=quick, seed=seed, elapsed=elapsed),
            encoding="utf-8",
        )
        (tmp / MANIFEST).write_text(
            manifest_json(
                "report",
                quick=quick,
                seed=seed,
                scenarios=[s.name for s in chosen],
                methods=list(methods),
                switching=switching is not None,
                wall_time_s=round(elapsed, 3),
                versions=versions(),
                files=sorted([*(p.name for p in tmp.iterdir()), MANIFEST]),
            ),
            encoding="utf-8",
        )
    say(f"report written to {target / 'index.html'} in {elapsed:.0f} s")
    return target / "index.html"


def _deconvolution_blocks(blocks, figures, scenario, x, z, measure, comparison, diag, frames, tmp):
    name = scenario.name
    fits = comparison.fits
    shape = "x".join(str(s) for s in np.shape(x))
    blocks["data"].append(
        f'<h3 id="data-{name}">{html.escape(name)}</h3>'
        + _p(f"{html.escape(scenario.description)} {shape} observations, and as many held-out.")
        + _fig(
            figures,
            f"{name}-data",
            figure_deconvolution_data(x, scenario.sigma, measure),
            f"{name} data",
        )
    )
    frames.append(_data_rows(name, {"num_points": len(x), "sigma": scenario.sigma}))
    frames.append(
        _tidy(
            "methods",
            name,
            comparison.table.pivot(index="method", columns="metric", values="value"),
        )
    )
    nuts = fits["nuts"].datatree["posterior"]
    k = nuts.sizes["atom"]
    em_iters = fits["attention-em"].log_likelihood_trace.size - 1
    blocks["methods"].append(
        f'<h3 id="methods-{name}">Deconvolution: {html.escape(name)}</h3>'
        + _p(
            f"attention-EM: K = N atoms started at the data, {em_iters} iterations; its E-step is "
            "softmax attention with Q K<sup>T</sup> = I/sigma<sup>2</sup> and key bias "
            "-|mu_k|<sup>2</sup>/(2 sigma<sup>2</sup>). NPMLE: Kiefer-Wolfowitz weights on a "
            f"grid (GMLEB posterior). NUTS: finite Dirichlet mixture, K = {k} atoms, "
            f"{nuts.sizes['chain']} chains x {nuts.sizes['draw']} draws; NUTS-DP: truncated "
            f"stick-breaking DP ({NUM_ATOMS_DP} sticks{_draws_text(fits, 'nuts-dp')}). Gibbs: "
            "the conjugate blocked sampler of the same finite mixture"
            f"{_draws_text(fits, 'gibbs')}. "
            "Approx-Gibbs: each Gibbs draw replaced by its expectation. "
            "James-Stein: linear shrinkage. Oracle: the Bayes rule under the true nu. Intervals "
            "for z_i are equal-tailed posterior intervals; the true z_i sit on atoms, so a "
            "discrete posterior's interval either holds z_i exactly or misses it, and EM's "
            "plug-in intervals collapse to one atom wherever A_i. concentrates."
        )
        + _metrics_table(comparison.table, _EXPLAIN)
        + _fig(
            figures,
            f"{name}-data-and-measures",
            figure_data_and_measures(x, scenario.sigma, measure, comparison),
            f"{name} fitted measures",
        )
        + _fig(
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
            + _fig(
                figures,
                f"{name}-{method}-ranks",
                figure_trace_rank(invariant_series(fits[method].datatree)),
                f"{name} {method} rank plots",
            )
        )
    save_datatree(fits["nuts"].datatree, tmp / f"{name}-nuts.nc")
    parts.append(
        "<h4>Posterior predictive check (NUTS)</h4>"
        + _p(
            "Each orange line is the density of one data set drawn from the posterior "
            "predictive; the observed data (black) should look like one of them."
        )
        + _fig(
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
        frames.append(_tidy("model-comparison", name, dp, _LOO_COLUMNS))
        blocks["model-comparison"].append(
            f'<h3 id="dp-{name}">Finite mixture vs Dirichlet process: {html.escape(name)}</h3>'
            + table_html(_loo_columns(dp))
        )
    blocks["attention"].append(
        f"<h3>EM responsibilities on {html.escape(name)}</h3>"
        + _fig(
            figures,
            f"{name}-em-attention",
            figure_em_attention(x, scenario.sigma, fits["attention-em"]),
            f"{name} EM attention matrix",
        )
    )


def _draws_text(fits, method: str) -> str:
    if method not in fits:
        return ""
    post = fits[method].datatree["posterior"]
    return f", {post.sizes['chain']} chains x {post.sizes['draw']} draws"


_LOO_COLUMNS = ["rank", "elpd", "p", "elpd_diff", "se", "dse", "p_worse", "weight", "diag_diff"]


def _loo_columns(frame: pd.DataFrame) -> pd.DataFrame:
    """The columns of an ``az.compare`` table that the report shows, in a fixed order."""
    return frame[[c for c in _LOO_COLUMNS if c in frame.columns]]


def _switching_blocks(blocks, figures, run: SwitchingRun, diag, frames, tmp, key):
    name = "maneuvering-target"
    cmp = run.comparison
    t_max = len(run.modes)
    blocks["data"].append(
        f'<h3 id="data-{name}">Switching state space: {name}</h3>'
        + _p(
            f"A target on the plane (state [p_x, v_x, p_y, v_y]) switching between constant "
            f"velocity and a 3 deg/s coordinated turn, positions observed with sigma = 10, "
            f"T = {t_max} steps, {100 * np.mean(run.modes > 0):.0f}% of them in the turn."
        )
        + _fig(
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
        _tidy("methods", name, cmp.table.pivot(index="method", columns="metric", values="value"))
    )
    blocks["methods"].append(
        f'<h3 id="methods-{name}">Switching state space: {name}</h3>'
        + _p(
            "Filters target p(x_t, s_t | y_1:t): GPB1 and GPB2 collapse to 1 and M Gaussians, "
            "IMM mixes before predicting (seed 3: the mixing step is an attention step), the "
            "RBPF keeps particles over modes with a Kalman filter each. Smoothers and samplers "
            "target p(x_t, s_t | y_1:T): Kim's backward pass over GPB2 / IMM, the collapsed "
            "Gibbs sampler, and the Kalman smoother along the true modes (known-modes: the "
            "floor). With 2^T mode histories the exact posterior is out of reach, so the "
            f"reference for smoothers is {html.escape(cmp.references.get('smoother', '-'))} and "
            f"for filters {html.escape(cmp.references.get('filter', '-'))}. All use the true "
            "parameters. Kim's smoother passes later evidence back to s_t only through "
            "s_t+1: on this target (little constant-velocity noise, sigma = 10 measurements) it "
            "under-detects turns and carries the resulting heading error backward, so it can "
            "be worse than its own filter. That is the approximation, not a bug (a test checks "
            "the recursions against a loop implementation); the Gibbs sampler, which makes no "
            "such approximation, is close to the known-modes floor."
        )
        + _metrics_table(cmp.table, _EXPLAIN_SWITCHING)
        + _fig(
            figures,
            f"{name}-methods",
            figure_switching_methods(cmp, run.states, run.modes),
            "switching methods",
        )
    )
    gibbs = cmp.fits["gibbs"].result
    save_datatree(gibbs, tmp / f"{name}-gibbs.nc")
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
        + _fig(figures, f"{name}-gibbs-ranks", figure_trace_rank(series), "switching rank plots")
        + "<h4>Posterior predictive check</h4>"
        + _p(
            "y_rep_t = H x_t + R<sup>1/2</sup> eps_t for each posterior draw of (x, s); the "
            "band should hold about 90% of the observed coordinates."
        )
        + ppc_png_tag(figures, name, ppc_png)
    )
    mc = run.modes_comparison
    for model, tree in mc.datatrees.items():
        save_datatree(tree, tmp / f"{name}-gibbs-{model.replace(' ', '-')}.nc")
    frames.append(_tidy("model-comparison", name, mc.table, _LOO_COLUMNS))
    frames.append(_tidy("model-comparison", name, mc.summary.drop(columns="se")))
    fits_done = ", ".join(f"{k}: {int(v)}" for k, v in mc.summary["gibbs_fits"].items())
    blocks["model-comparison"].append(
        '<h3 id="modes">Numbers of switching modes (leave-future-out)</h3>'
        + _p(
            "A time series is not exchangeable, so PSIS-LOO does not apply. Each model is scored "
            "by sum<sub>t &gt; L</sub> log p(y_t | y_1:t-1) over the last "
            f"{t_max - run.min_observations} steps (L = {run.min_observations}), with "
            "p(y_t | y_1:t-1, theta) from the IMM filter and theta's posterior carried forward "
            "by Pareto-smoothed importance sampling (ArviZ <code>lfo_cv</code>), refitting the "
            f"Gibbs sampler when Pareto k &gt; 0.7 (fits per model, the full-data one included: "
            f"{fits_done}). Pi and the scales of Q_j and R_j get weakly informative priors. "
            "Candidates: constant velocity only; plus a left turn; plus a right turn."
        )
        + table_html(_loo_columns(mc.table))
        + table_html(mc.summary)
        + _fig(figures, "modes-lfo", figure_lfo_pointwise(mc.lfo), "LFO pointwise")
    )


def ppc_png_tag(figures, name, png) -> str:
    return _fig(figures, f"{name}-gibbs-ppc", png, "switching posterior predictive check")


def _atoms_block(blocks, figures, scenario, atoms, frames):
    frames.append(_tidy("model-comparison", scenario.name, atoms.table, _LOO_COLUMNS))
    frames.append(_tidy("model-comparison", scenario.name, atoms.summary.drop(columns="se")))
    blocks["model-comparison"].insert(
        0,
        f'<h3 id="atoms">Numbers of atoms on {html.escape(scenario.name)} (PSIS-LOO)</h3>'
        + _p(
            "The finite Dirichlet mixture fitted by the conjugate Gibbs sampler for each K; "
            "<code>az.compare</code> ranks them by PSIS-LOO elpd with stacking weights. dse is "
            "the standard error of the difference to the best model; R-hat and ESS are those "
            "of the total log-likelihood, which every labelling of the atoms agrees on."
        )
        + table_html(_loo_columns(atoms.table))
        + table_html(atoms.summary)
        + _fig(
            figures,
            "atoms-loo",
            figure_elpd(atoms.summary, "model", "elpd_loo", "PSIS-LOO across K"),
            "elpd vs K",
        ),
    )


def _attention_block(blocks, figures, att_figs, att_table, frames):
    frames.append(_tidy("attention", "random-scores", att_table))
    blocks["attention"].insert(
        0,
        _p(
            "Seed 2: attention weights solve argmax over the simplex of &lt;p, s&gt; - tau "
            "Omega(p). Omega = negative Shannon entropy gives softmax, the Gini term |p|^2/2 "
            "sparsemax (a Euclidean projection onto the simplex, with exact zeros), the Tsallis "
            "1.5-entropy entmax in between. As tau -> 0 every map tends to the LP vertex (the "
            "argmax); as tau grows to the uniform distribution."
        )
        + _fig(figures, "simplex-paths", att_figs["simplex-paths"], "paths on the simplex")
        + _fig(figures, "attention-matrices", att_figs["attention-matrices"], "attention matrices")
        + table_html(att_table),
    )


def _kernel_block(blocks, figures, nw_figs, nw_table, frames):
    frames.append(_tidy("kernel-regression", "sine", nw_table))
    blocks["kernel-regression"].append(
        _p(
            "Seed 4: Nadaraya-Watson f(q) = sum_j K_h(q - k_j) v_j / sum_j K_h(q - k_j) is "
            "softmax attention with scores log K_h(q - k_j). Data: y = 2 sin x + x<sup>0.8</sup> "
            "+ N(0, 0.25), x uniform on [0, 5]. Each kernel's bandwidth minimises the closed-form "
            "leave-one-out error; ISE is the integrated squared error against the truth."
        )
        + _fig(figures, "nadaraya-watson", nw_figs["nadaraya-watson"], "Nadaraya-Watson")
        + table_html(nw_table)
    )


def _diagnostics_summary(blocks, rows, frames):
    if not rows:
        return
    frame = pd.DataFrame(rows).set_index("method")
    frames.append(_tidy("diagnostics", "all", frame))
    blocks["diagnostics"].insert(
        0,
        _p(
            "Rank-normalised split R-hat and bulk / tail ESS (Vehtari et al. 2021), computed on "
            "quantities every labelling of the atoms agrees on (mixture atoms are exchangeable, "
            "so R-hat on the atoms themselves measures label switching, not mixing), and on the "
            "states for the switching sampler. Divergences are NUTS transitions after warmup."
        )
        + table_html(frame),
    )


def _page_html(blocks, scenarios, switching, *, quick, seed, elapsed) -> str:
    mode = "quick" if quick else "full"
    toc = "".join(f'<li><a href="#{sid}">{html.escape(title)}</a></li>' for sid, title in SECTIONS)
    names = ", ".join(s.name for s in scenarios)
    body = [
        "<h1>attnbayes: attention as inference, measured</h1>",
        _p(
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
            "<code>*.nc</code> files beside this page."
        ),
        f"<nav><ul>{toc}</ul></nav>",
    ]
    for sid, title in SECTIONS:
        body.append(f'<h2 id="{sid}">{html.escape(title)}</h2>')
        body.extend(blocks[sid])
    return page("attnbayes report", "\n".join(body))


__all__ = [
    "SCENARIOS",
    "SECTIONS",
    "SWITCHING",
    "Scenario",
    "SwitchingSettings",
    "run_scenario",
    "run_switching",
    "save_datatree",
    "write_report",
]
