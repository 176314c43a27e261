"""The report's figures (matplotlib), each returned as PNG bytes, and the demos
that compute what they show (attention maps on the simplex, Nadaraya-Watson fits)."""

from __future__ import annotations

import time

import jax
import jax.numpy as jnp
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from ...inference.attention.simplex import regularised_argmax
from ...inference.deconvolution import em
from ...inference.deconvolution.invariants import measure_cdf
from ...inference.kernel_regression import leave_one_out, nadaraya_watson, select_bandwidth
from ...inference.switching import SwitchingComparison
from ...models.deconvolution import DiscreteMeasure
from ...models.switching import SwitchingParams
from ..pages import png_bytes
from .scenarios import METHOD_COLORS

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
        return png_bytes(fig)
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
    return png_bytes(fig)


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
    return png_bytes(fig)


def figure_em_attention(x, sigma, fit, max_points: int = 150) -> bytes:
    """EM's responsibilities as an attention matrix, and its log-likelihood per iteration;
    ``sigma`` a number or (N,), one per point (each query its own temperature)."""
    x = np.asarray(x)
    idx = np.linspace(0, len(x) - 1, min(max_points, len(x))).astype(int)
    sub = x[idx]
    order = np.argsort(sub if sub.ndim == 1 else np.arctan2(sub[:, 1], sub[:, 0]))
    sub = sub[order]
    if np.ndim(sigma) > 0:
        sigma = np.asarray(sigma)[idx][order]
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
    return png_bytes(fig)


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
    return png_bytes(fig)


def true_density(grid, sigma, measure: DiscreteMeasure) -> np.ndarray:
    """The density of one of the observations x_i drawn at random, on a 1-D grid:
    sum_k w_k N(t; mu_k, sigma^2) for one sigma, and the average over the points of
    sum_k w_k N(t; mu_k, s_i^2) when each has its own s_i (sigma (N,))."""
    atoms, weights = np.asarray(measure.atoms), np.asarray(measure.weights)
    scales = np.reshape(np.asarray(sigma, np.float64), (-1, 1, 1))  # (N or 1, 1, 1)
    t = np.asarray(grid, np.float64)[None, :, None] - atoms[None, None, :]
    dens = np.exp(-0.5 * (t / scales) ** 2) / (scales * np.sqrt(2 * np.pi))
    return (dens @ weights).mean(axis=0)


def figure_deconvolution_data(x, sigma, measure: DiscreteMeasure) -> bytes:
    """The observations with the true mixing measure (1-D: histogram and the true density of
    x, averaged over the points' own s_i when they differ; 2-D: the plane)."""
    x = np.asarray(x)
    atoms, weights = np.asarray(measure.atoms), np.asarray(measure.weights)
    fig, ax = plt.subplots(figsize=(6, 3.6), layout="constrained")
    if x.ndim == 1:
        ax.hist(x, bins=50, density=True, color="0.8", label="x (density)")
        margin = float(np.max(sigma))
        grid = np.linspace(x.min() - margin, x.max() + margin, 400)
        label = "true density of x" if np.ndim(sigma) == 0 else "true density of x (avg over s_i)"
        ax.plot(grid, true_density(grid, sigma, measure), "k", label=label)
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
    return png_bytes(fig)


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
    return png_bytes(fig)


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
    return png_bytes(fig)


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
    return png_bytes(fig)


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
    return png_bytes(fig), inside


def figure_elpd(frame: pd.DataFrame, x_label: str, elpd: str, title: str) -> bytes:
    """elpd +- se per model (a row per model, in the frame's order)."""
    fig, ax = plt.subplots(figsize=(5.5, 3.4), layout="constrained")
    pos = np.arange(len(frame))
    ax.errorbar(pos, frame[elpd], yerr=frame["se"], fmt="o", color="k", capsize=4)
    ax.set_xticks(pos, frame.index)
    ax.set_xlabel(x_label)
    ax.set_ylabel(f"{elpd} (+- se)")
    ax.set_title(title)
    return png_bytes(fig)


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
    return png_bytes(fig)


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
    paths = png_bytes(fig)

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
    matrices = png_bytes(fig)
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
    return {"nadaraya-watson": png_bytes(fig)}, pd.DataFrame(rows).set_index("kernel")
