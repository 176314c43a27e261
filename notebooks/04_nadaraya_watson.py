# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#       jupytext_version: 1.19.6
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 04 · Nadaraya-Watson regression as attention pooling
#
# The note "Attention and Transformers" (Nitin 2023). Observe pairs $(k_i, v_i)$, $i = 1, \dots, n$,
# with $v_i = f(k_i) + \varepsilon_i$. The Nadaraya-Watson (local-constant) estimator of $f$ at a
# query $q$ is
#
# $$\hat f_h(q) = \sum_{i=1}^n \frac{K_h(q - k_i)}{\sum_j K_h(q - k_j)}\, v_i
# = \sum_i \mathrm{softmax}_i\big(\log K_h(q - k_i)\big)\, v_i,
# \qquad K_h(u) = K(u/h),$$
#
# attention pooling with the query $q$, keys $k_i$, values $v_i$ and scores
# $s_i = \log K_h(q - k_i)$ (normalising constants of $K$ cancel in the ratio). For the Gaussian
# kernel the score is $-(q - k_i)^2/(2h^2) = q k_i/h^2 - k_i^2/(2h^2) - q^2/(2h^2)$: dot-product
# attention with scale $1/h^2$ and key bias $b_i = -k_i^2/(2h^2)$ (the last term is the same for
# every key and drops out). Compact kernels give scores $-\infty$ outside the window, i.e.
# exact zeros in the attention map, as sparsemax does in notebook 02. The kernels, up to
# constants:
#
# $$K(u) = e^{-u^2/2}\ \text{(gaussian)},\quad \mathbb 1\{|u| \le 1\}\ \text{(boxcar)},\quad
# (1 - u^2)_+\ \text{(epanechnikov)},\quad (1 - |u|)_+\ \text{(triangular)},\quad
# (1 - |u|^3)_+^3\ \text{(tricube)}.$$
#
# The estimator needs no training, but its bandwidth $h$ sets the bias-variance trade-off:
# for a second-order kernel and interior $q$, $\mathrm{bias} \approx \tfrac12 h^2 \mu_2(K)
# \big(f'' + 2f'p'/p\big)$ and $\mathrm{var} \approx \sigma^2 R(K)/(n h\, p(q))$, with design
# density $p$, $\mu_2(K) = \int u^2 K$ and $R(K) = \int K^2$ ($K$ normalised). The integrated
# squared error is minimised at $h \propto n^{-1/5}$ and is then of order $n^{-4/5}$.
#
# This notebook checks the attention identities, selects $h$ by leave-one-out
# cross-validation (against brute force and statsmodels), follows the error as $n$ grows, and
# reads $\hat f_h$ as the conditional mean of a kernel-density joint law
# (`attnbayes.models.kernel_joint`).
#
# Data: $k_i \sim U(0, 1)$, $f(x) = \cos(2\pi x) + \tfrac12\cos(6\pi x)$, $\sigma = 0.4$; $f$ has
# zero slope at both ends, so the local-constant estimator's $O(h)$ boundary bias
# ($\propto f'$) does not spoil the $n^{-4/5}$ rate on the whole interval. `N` (environment
# variable `ATTNBAYES_NB_N`) is the sample size; the consistency study uses sizes up to $4N$.

# %%
import os

from attnbayes.app.devices import use_every_core

use_every_core()  # one host device per core, before JAX starts (a user's XLA_FLAGS count wins)
import time
import warnings

import jax
import matplotlib.pyplot as plt
import numpy as np
from scipy.special import logsumexp
from statsmodels.nonparametric.kernel_regression import KernelReg

from attnbayes.app.cache import enable_compilation_cache
from attnbayes.inference.attention import attend, neg_sq_distance_scores
from attnbayes.inference.attention.simplex import softmax
from attnbayes.inference.kernel_regression import (
    KERNELS,
    EmptyWindowWarning,
    kernel_scores,
    leave_one_out,
    nadaraya_watson,
    select_bandwidth,
)

with warnings.catch_warnings():  # numpyro imports tqdm.auto, which warns that ipywidgets is absent
    warnings.filterwarnings("ignore", message="IProgress not found")
    from numpyro.infer import Predictive
    from numpyro.infer.util import log_likelihood

    from attnbayes.models.kernel_joint import (
        component_posterior,
        conditional_mean,
        conditional_moments,
        kernel_conditional_model,
        kernel_joint_model,
    )

jax.config.update("jax_enable_x64", True)
enable_compilation_cache()  # JAX's persistent cache: attnbayes.app.cache, ATTNBAYES_CACHE_DIR

N = int(os.environ.get("ATTNBAYES_NB_N", "1000"))
SIGMA = 0.4


def f(x):
    return np.cos(2 * np.pi * x) + 0.5 * np.cos(6 * np.pi * x)


def simulate(n, seed):
    rng = np.random.default_rng(seed)
    x = rng.uniform(0.0, 1.0, n)
    return x, f(x) + SIGMA * rng.normal(size=n)


k, v = simulate(N, seed=4)
grid = np.linspace(0.0, 1.0, 401)  # queries, and the quadrature grid for integrated errors
print(f"n = {N} pairs (k_i, v_i)")

# %% [markdown]
# ## Nadaraya-Watson is softmax attention
#
# Four computations of the same Gaussian-kernel estimate at $h = 0.05$: the library's
# `nadaraya_watson` (attention with log-kernel scores), the kernel weights normalised by hand
# in NumPy, dot-product `attend` with scale $1/h^2$ and key bias $-k_i^2/(2h^2)$, and softmax of
# `neg_sq_distance_scores`. Then every kernel: the library's scores `kernel_scores` are
# $\log K_h(q - k)$ for the formulas above, and their softmax pools the values into the NW
# estimate by hand. (`nadaraya_watson(..., block_size=B)` streams over blocks of keys with a
# running log-sum-exp and never forms the $Q \times n$ matrix; the unit tests hold it against
# the dense path.)

# %%
H = 0.05
PROFILES = {  # K(u) up to constants, written out in NumPy
    "gaussian": lambda u: np.exp(-0.5 * u**2),
    "boxcar": lambda u: (np.abs(u) <= 1).astype(float),
    "epanechnikov": lambda u: np.clip(1 - u**2, 0, None),
    "triangular": lambda u: np.clip(1 - np.abs(u), 0, None),
    "tricube": lambda u: np.clip(1 - np.abs(u) ** 3, 0, None) ** 3,
}


def nw_by_hand(keys, values, queries, kernel, h):
    weights = PROFILES[kernel]((queries[:, None] - keys[None, :]) / h)
    return weights @ values / weights.sum(axis=1)


fit = np.asarray(nadaraya_watson(k, v, grid, bandwidth=H))
as_attention = np.asarray(
    attend(grid[:, None], k[:, None], v, scale=1 / H**2, bias=-(k**2) / (2 * H**2))
)
gaussian_scores = neg_sq_distance_scores(grid[:, None], k[:, None], H)
errors = {
    "NW vs by hand": np.abs(fit - nw_by_hand(k, v, grid, "gaussian", H)).max(),
    "NW vs attend(scale=1/h^2, bias)": np.abs(fit - as_attention).max(),
    "NW vs softmax(neg_sq_distance)": np.abs(fit - np.asarray(softmax(gaussian_scores)) @ v).max(),
}
order = np.argsort(k)  # keys sorted by position, for the pictures below
attention_maps = {}
for kernel in KERNELS:
    scores = np.asarray(kernel_scores(grid, k[order], kernel=kernel, bandwidth=H))  # log K_h
    u_qi = (grid[:, None] - k[order][None, :]) / H
    errors[f"{kernel}: exp(scores) vs K(u)"] = np.abs(np.exp(scores) - PROFILES[kernel](u_qi)).max()
    A = np.asarray(softmax(scores))
    errors[f"{kernel}: softmax(scores) v vs by hand"] = np.abs(
        A @ v[order] - nw_by_hand(k, v, grid, kernel, H)
    ).max()
    attention_maps[kernel] = A
fit_box = np.asarray(nadaraya_watson(k, v, grid, kernel="boxcar", bandwidth=H))
errors["boxcar: NW vs softmax(scores) v"] = np.abs(
    fit_box - attention_maps["boxcar"] @ v[order]
).max()
for name, err in errors.items():
    print(f"{name:42s} max abs difference {err:.1e}")
assert max(errors.values()) < 1e-10

# %% [markdown]
# The attention maps themselves, for keys sorted by position: a band around the diagonal.
# The Gaussian map is dense (every weight positive, most negligible); the Epanechnikov map has
# exact zeros outside $|q - k| < h$.

# %%
fig, axes = plt.subplots(1, 2, figsize=(11, 3.6), layout="constrained")
for ax, kernel in zip(axes, ["gaussian", "epanechnikov"], strict=True):
    A = attention_maps[kernel]
    im = ax.imshow(
        np.ma.masked_equal(A, 0),
        aspect="auto",
        cmap="viridis",
        extent=(-0.5, N - 0.5, grid[-1], grid[0]),
        interpolation="nearest",
    )
    zeros = np.mean(A == 0)
    ax.set(
        xlabel="key index (sorted by $k_i$)",
        ylabel="query $q$",
        title=f"{kernel}, h = {H}: weights $A_{{qi}}$\n{zeros:.0%} exactly zero (blank)",
    )
fig.colorbar(im, ax=axes, label="attention weight")
plt.show()

# %% [markdown]
# ## Bandwidth by leave-one-out cross-validation
#
# $$\mathrm{CV}(h) = \frac1n \sum_{i=1}^n \big(v_i - \hat f_{h,-i}(k_i)\big)^2, \qquad
# \hat f_{h,-i}(k_i) = \frac{\sum_{j \ne i} K_h(k_i - k_j)\, v_j}{\sum_{j \ne i} K_h(k_i - k_j)}.$$
#
# The leave-one-out fit needs no refitting: it is the $n \times n$ kernel matrix with its
# diagonal set to zero (`leave_one_out`). That closed form is checked against explicit refits
# without point $i$. `select_bandwidth` minimises CV over $\log h$ (coarse grid, then Brent);
# its minimiser must be at least as good as every point of a fine grid of the curve, and it is
# held against statsmodels' `KernelReg(reg_type="lc", bw="cv_ls")`, which minimises the same
# criterion with a Python loop over the $n$ deletions (so it runs on a subsample of at most 300
# points here).

# %%
h_cv = select_bandwidth(k, v)  # Gaussian kernel, scalar h
H_CV = float(h_cv.bandwidth)
loo = leave_one_out(k, v, bandwidth=H_CV)
rng = np.random.default_rng(0)
deleted = rng.choice(N, size=25, replace=False)
refits = np.array(
    [
        float(nadaraya_watson(np.delete(k, i), np.delete(v, i), k[i : i + 1], bandwidth=H_CV)[0])
        for i in deleted
    ]
)
print(
    f"closed-form LOO vs 25 explicit refits: {np.abs(refits - loo.predictions[deleted]).max():.1e}"
)
assert np.allclose(refits, loo.predictions[deleted], rtol=0, atol=1e-12)
assert abs(float(loo.score) - float(h_cv.score)) < 1e-12 * float(loo.score)

hs = np.geomspace(H_CV / 8, H_CV * 8, 61)
cv_curve = {
    kernel: np.array([float(leave_one_out(k, v, kernel=kernel, bandwidth=h).score) for h in hs])
    for kernel in ("gaussian", "epanechnikov")
}
print(f"h_CV = {H_CV:.4f}, CV(h_CV) = {float(h_cv.score):.5f}; best on the fine grid:")
print(f"  {cv_curve['gaussian'].min():.5f} at h = {hs[np.argmin(cv_curve['gaussian'])]:.4f}")
assert float(h_cv.score) <= cv_curve["gaussian"].min() * (1 + 1e-9)

m = min(N, 300)
start = time.perf_counter()
sm_bw = abs(
    KernelReg(v[:m], k[:m], "c", reg_type="lc", bw="cv_ls", rng=np.random.default_rng(0)).bw[0]
)
sm_seconds = time.perf_counter() - start
ours_sub = select_bandwidth(k[:m], v[:m])
cv_at_sm = float(leave_one_out(k[:m], v[:m], bandwidth=sm_bw).score)
print(
    f"subsample n = {m}: statsmodels cv_ls h = {sm_bw:.5f} ({sm_seconds:.2f} s), "
    f"select_bandwidth h = {float(ours_sub.bandwidth):.5f}; CV {cv_at_sm:.6f} vs "
    f"{float(ours_sub.score):.6f}"
)
assert abs(float(ours_sub.bandwidth) / sm_bw - 1) < 0.02
assert float(ours_sub.score) <= cv_at_sm * (1 + 1e-7)

fig, ax = plt.subplots(figsize=(8, 3.8), layout="constrained")
for kernel, curve in cv_curve.items():
    ax.semilogx(hs, curve, label=kernel)
    ax.plot(hs[np.argmin(curve)], curve.min(), "o", color="k", ms=4)
ax.axvline(H_CV, color="tab:blue", ls=":", label="select_bandwidth (gaussian)")
ax.axhline(SIGMA**2, color="grey", lw=0.8, ls="--", label="noise variance $\\sigma^2$")
ax.set(xlabel="bandwidth h", ylabel="CV(h)", title="leave-one-out cross-validation")
ax.legend()
plt.show()

# %% [markdown]
# ### Kernels are nearly interchangeable once $h$ is chosen
#
# The asymptotically optimal bandwidth for kernel $K$ is proportional to its canonical
# bandwidth $\delta_0(K) = \big(R(K)/\mu_2(K)^2\big)^{1/5}$ (Marron & Nolan), so the CV bandwidths
# of two kernels on the same data should have ratio close to $\delta_0(K)/\delta_0(\phi)$, and
# their minimal CV should nearly agree (asserted: ratios within 25%, minimal CV within 5%; the
# boxcar is excepted from the first, as its CV is piecewise constant in $h$ and its minimiser
# jumps between plateaus). $R$ and $\mu_2$ are computed by quadrature of the kernels, checked
# against the library's `kernel_scores` above.

# %%
u = np.linspace(-8, 8, 32001)
profiles, canonical, selected = {}, {}, {}
for kernel in KERNELS:
    K_u = PROFILES[kernel](u)  # the library's kernels (checked against kernel_scores above)
    K_u = K_u / np.trapezoid(K_u, u)
    profiles[kernel] = K_u
    mu2, R = np.trapezoid(u**2 * K_u, u), np.trapezoid(K_u**2, u)
    canonical[kernel] = (R / mu2**2) ** 0.2
    selected[kernel] = select_bandwidth(k, v, kernel=kernel)
print(f"{'kernel':13s} {'delta0':>7s} {'theory ratio':>12s} {'h_CV':>7s} {'CV ratio':>8s} CV(h)")
for kernel in KERNELS:
    theory = canonical[kernel] / canonical["gaussian"]
    ratio = float(selected[kernel].bandwidth) / float(selected["gaussian"].bandwidth)
    print(
        f"{kernel:13s} {canonical[kernel]:7.4f} {theory:12.3f} "
        f"{float(selected[kernel].bandwidth):7.4f} {ratio:8.3f} {float(selected[kernel].score):.5f}"
    )
    if kernel != "boxcar":  # the boxcar's CV is piecewise constant in h, its minimiser erratic
        assert abs(ratio / theory - 1) < 0.25
cv_min = np.array([float(r.score) for r in selected.values()])
assert cv_min.max() / cv_min.min() < 1.05
assert abs(canonical["gaussian"] - (1 / (2 * np.sqrt(np.pi))) ** 0.2) < 1e-6
assert abs(canonical["epanechnikov"] - 15**0.2) < 1e-4

# %% [markdown]
# ## What the bandwidth does
#
# Below $h_{CV}$ the estimate follows the noise (variance); above it, it flattens the peaks
# and troughs of $f$ (bias $\approx \tfrac12 h^2\mu_2 f''$). The left panel shows the kernels
# (normalised to integrate to one); the right the Gaussian fit at $h_{CV}/5$, $h_{CV}$ and
# $5h_{CV}$. A compact kernel with a window that holds no key is not an error: the query gets
# the value of its nearest key, with an `EmptyWindowWarning` (checked last).

# %%
fig, axes = plt.subplots(1, 2, figsize=(13, 4), layout="constrained", width_ratios=[1, 2])
for kernel, K_u in profiles.items():
    axes[0].plot(u, K_u, label=kernel)
axes[0].set(xlim=(-3, 3), xlabel="u", ylabel="K(u)", title="kernels (unit mass)")
axes[0].legend(fontsize=8)
axes[1].scatter(k, v, s=4, color="lightgrey", label="data")
axes[1].plot(grid, f(grid), "k", lw=1.5, label="f")
ise = {}
for factor, color in [(1 / 5, "tab:orange"), (1, "tab:blue"), (5, "tab:green")]:
    h = factor * H_CV
    fit_h = np.asarray(nadaraya_watson(k, v, grid, bandwidth=h))
    ise[factor] = np.trapezoid((fit_h - f(grid)) ** 2, grid)
    axes[1].plot(grid, fit_h, color=color, label=f"h = {h:.3f}: ISE {ise[factor]:.4f}")
axes[1].set(xlabel="k", ylabel="v", title="under-smoothed, CV-selected, over-smoothed")
axes[1].legend(fontsize=8, ncol=2)
plt.show()
assert ise[1] < ise[1 / 5] and ise[1] < ise[5]

# empty windows: boxcar with h = 0.01, queries running beyond the data on both sides
wide = np.linspace(-0.3, 1.3, grid.size)
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    boxcar_fit = np.asarray(nadaraya_watson(k, v, wide, kernel="boxcar", bandwidth=0.01))
assert any(issubclass(w.category, EmptyWindowWarning) for w in caught)
empty = np.all(np.abs(wide[:, None] - k[None, :]) > 0.01, axis=1)
nearest = v[np.argmin(np.abs(wide[:, None] - k[None, :]), axis=1)]
assert np.all(np.isfinite(boxcar_fit)) and np.array_equal(boxcar_fit[empty], nearest[empty])
print(f"EmptyWindowWarning: {caught[0].message}")

# %% [markdown]
# ## Consistency: the error against $n$
#
# With $h$ chosen by LOO-CV on each data set, the integrated squared error
# $\mathrm{ISE} = \int_0^1 (\hat f_h - f)^2$ should fall like $n^{-4/5}$, and $h_{CV}$ like
# $n^{-1/5}$. For sizes from 50 to $4N$, six data sets each, the slope of $\log \mathrm{ISE}$ on
# $\log n$ (least squares over every data set, with its standard error) is compared with
# $-4/5$. The oracle bandwidth, which minimises the ISE using the unknown $f$ over a grid
# around $h_{CV}$, shows how much CV loses to it.

# %%
sizes = np.unique(np.round(np.geomspace(50, 4 * N, 6)).astype(int))
REPS = 6
records = []  # (n, h_CV, ISE at h_CV, oracle ISE)
for n in sizes:
    for rep in range(REPS):
        x_n, y_n = simulate(int(n), seed=10_000 + 101 * rep + int(n))
        h_n = float(select_bandwidth(x_n, y_n).bandwidth)
        # NW by hand in NumPy (equal to the library's above): no compilation per size
        ises = [
            np.trapezoid((nw_by_hand(x_n, y_n, grid, "gaussian", h) - f(grid)) ** 2, grid)
            for h in h_n * np.geomspace(1 / 3, 3, 13)
        ]
        records.append((n, h_n, ises[6], min(ises)))  # ises[6] is at h_CV itself
records = np.array(records)
log_n = np.log(records[:, 0])
design = np.stack([np.ones_like(log_n), log_n], axis=1)


def slope_and_se(y):
    coef, res, *_ = np.linalg.lstsq(design, y, rcond=None)
    sigma2 = res[0] / (len(y) - 2)
    return coef, np.sqrt(sigma2 * np.linalg.inv(design.T @ design)[1, 1])


(ise_intercept, ise_slope), ise_se = slope_and_se(np.log(records[:, 2]))
(h_intercept, h_slope), h_se = slope_and_se(np.log(records[:, 1]))
mise = np.array([records[records[:, 0] == n, 2].mean() for n in sizes])
oracle = np.array([records[records[:, 0] == n, 3].mean() for n in sizes])
for n, e, o in zip(sizes, mise, oracle, strict=True):
    print(f"n = {n:5d}: mean ISE at h_CV {e:.5f}, at the oracle h {o:.5f} (ratio {e / o:.2f})")
print(f"slope of log ISE on log n: {ise_slope:.3f} +- {ise_se:.3f} (theory -0.8)")
print(f"slope of log h_CV on log n: {h_slope:.3f} +- {h_se:.3f} (theory -0.2)")
assert -1.1 < ise_slope < -0.6
assert -0.45 < h_slope < 0.0
assert mise[-1] < mise[0] / 5

fig, axes = plt.subplots(1, 2, figsize=(12, 4), layout="constrained")
ax = axes[0]
ax.loglog(records[:, 0], records[:, 2], ".", color="tab:blue", alpha=0.4, label="ISE, one data set")
ax.loglog(sizes, mise, "o-", color="tab:blue", label="mean ISE at $h_{CV}$")
ax.loglog(sizes, oracle, "s--", color="tab:grey", ms=4, label="mean ISE at the oracle h")
ax.loglog(
    sizes,
    np.exp(ise_intercept) * sizes**ise_slope,
    color="k",
    lw=0.8,
    label=f"fit: slope {ise_slope:.2f} $\\pm$ {ise_se:.2f}",
)
middle = np.exp(np.mean(np.log(sizes)))  # references drawn through the fit at the middle n
ax.loglog(
    sizes,
    np.exp(ise_intercept) * middle**ise_slope * (sizes / middle) ** -0.8,
    color="tab:red",
    ls=":",
    label="$n^{-4/5}$",
)
ax.set(xlabel="n", ylabel="integrated squared error", title="consistency of NW attention")
ax.legend(fontsize=8)
ax = axes[1]
ax.loglog(records[:, 0], records[:, 1], ".", color="tab:blue", alpha=0.5, label="$h_{CV}$")
ax.loglog(sizes, np.exp(h_intercept) * sizes**h_slope, "k", lw=0.8, label="fit")
h_middle = np.exp(h_intercept) * middle**h_slope
ax.loglog(sizes, h_middle * (sizes / middle) ** -0.2, "tab:red", ls=":", label="$n^{-1/5}$")
ax.set(xlabel="n", ylabel="selected bandwidth", title=f"$h_{{CV}}$: slope {h_slope:.2f}")
ax.legend(fontsize=8)
plt.show()

# %% [markdown]
# ## The kernel-density joint: NW is a conditional mean
#
# Put a Gaussian kernel density estimate on the *joint* law of $(k, v)$, one component per
# pair, with bandwidth $h$ in $k$ and $s$ in $v$:
#
# $$p(k, v) = \frac1n\sum_{i=1}^n \mathcal N(k; k_i, h^2)\,\mathcal N(v; v_i, s^2),
# \qquad c \sim \mathrm{Cat}(1/n),\ k \mid c \sim \mathcal N(k_c, h^2),\ v \mid c \sim
# \mathcal N(v_c, s^2).$$
#
# Bayes' rule on the component gives $p(c = i \mid k = q) = \mathrm{softmax}_i\big(-(q -
# k_i)^2/(2h^2)\big)$, the attention weights, hence
#
# $$E[v \mid k = q] = \sum_i p(c = i \mid q)\, v_i = \hat f_h(q), \qquad
# \mathrm{Var}[v \mid k = q] = s^2 + \sum_i p(c = i \mid q)\big(v_i - \hat f_h(q)\big)^2 .$$
#
# The value bandwidth $s$ widens the conditional law but never moves its mean. Three checks:
# the library's closed forms (`conditional_moments`) against NW; the same moments by
# quadrature of $p(q, v)$ over $v$, where the density comes from the NumPyro program
# `kernel_joint_model` itself (per-draw log-likelihoods of the observed sites, the component
# summed out by log-sum-exp); and Monte Carlo draws from `kernel_conditional_model`.

# %%
S = 0.15
moments = conditional_moments(k, v, grid, bandwidth=H_CV, value_scale=S)
nw = np.asarray(nadaraya_watson(k, v, grid, bandwidth=H_CV))
assert np.allclose(moments.mean, nw, rtol=0, atol=1e-12)
assert np.allclose(conditional_mean(k, v, grid, bandwidth=H_CV), nw, rtol=0, atol=1e-12)
posterior = np.asarray(component_posterior(k, grid, bandwidth=H_CV))
attention = np.asarray(softmax(neg_sq_distance_scores(grid[:, None], k[:, None], H_CV)))
assert np.allclose(posterior, attention, rtol=0, atol=1e-12)
wider = conditional_moments(k, v, grid, bandwidth=H_CV, value_scale=3 * S)
assert np.allclose(wider.mean, moments.mean, rtol=0, atol=1e-14)
assert np.allclose(wider.covariance - moments.covariance, 8 * S**2, rtol=0, atol=1e-12)

# quadrature of the NumPyro joint density over v, at three queries
at = np.array([40, 148, 320])  # queries on the grid: q = 0.1, 0.37, 0.8
queries = grid[at]
v_grid = np.arange(v.min() - 10 * S, v.max() + 10 * S, S / 12)
Q, n_v = len(queries), len(v_grid)
component = np.broadcast_to(np.arange(N)[None, :, None], (Q, N, n_v)).ravel()
k_obs = np.broadcast_to(queries[:, None, None], (Q, N, n_v)).ravel()
v_obs = np.broadcast_to(v_grid[None, None, :], (Q, N, n_v)).ravel()
per_draw = jax.jit(
    lambda c, k_o, v_o: log_likelihood(
        kernel_joint_model,
        {"component": c},
        k,
        v,
        bandwidth=H_CV,
        value_scale=S,
        k=k_o,
        v=v_o,
        batch_ndims=0,
    )
)(component, k_obs, v_obs)
log_joint = logsumexp(
    (np.asarray(per_draw["k"]) + np.asarray(per_draw["v"])).reshape(Q, N, n_v), axis=1
) - np.log(N)
density = np.exp(log_joint)
marginal = np.trapezoid(density, v_grid, axis=1)  # p(k = q), the KDE of the keys
cond_mean = np.trapezoid(density * v_grid, v_grid, axis=1) / marginal
cond_var = np.trapezoid(density * v_grid**2, v_grid, axis=1) / marginal - cond_mean**2
closed = type(moments)(moments.mean[at], moments.covariance[at])
print("E[v | q] by quadrature :", np.round(cond_mean, 6), " NW:", np.round(closed.mean, 6))
print(
    "Var[v | q] quadrature  :",
    np.round(cond_var, 6),
    " closed form:",
    np.round(closed.covariance, 6),
)
assert np.allclose(cond_mean, closed.mean, rtol=0, atol=1e-8)
assert np.allclose(cond_var, closed.covariance, rtol=0, atol=1e-8)
kde_keys = np.mean(np.exp(-0.5 * ((queries[:, None] - k) / H_CV) ** 2), axis=1)
assert np.allclose(marginal, kde_keys / (np.sqrt(2 * np.pi) * H_CV), rtol=1e-10)

# Monte Carlo from the conditional program at q = 0.37
D = 20_000
draw = jax.jit(
    lambda key: Predictive(kernel_conditional_model, num_samples=1)(
        key, k, v, queries[1], bandwidth=H_CV, value_scale=S, num_draws=D
    )
)
mc = np.asarray(draw(jax.random.PRNGKey(7))["v"][0])
se = mc.std() / np.sqrt(D)
print(f"Monte Carlo at q = {queries[1]}: mean {mc.mean():.4f} +- {se:.4f}, var {mc.var():.4f}")
assert abs(mc.mean() - float(closed.mean[1])) < 4 * se
assert abs(mc.var() / float(closed.covariance[1]) - 1) < 0.05

# %%
k_axis = np.linspace(0, 1, 200)
v_axis = np.linspace(v.min() - 0.5, v.max() + 0.5, 200)
phi_k = np.exp(-0.5 * ((k_axis[None, :] - k[:, None]) / H_CV) ** 2) / (np.sqrt(2 * np.pi) * H_CV)
phi_v = np.exp(-0.5 * ((v_axis[None, :] - v[:, None]) / S) ** 2) / (np.sqrt(2 * np.pi) * S)
joint = phi_v.T @ phi_k / N  # (v, k): a sum of n product Gaussians, by one matrix product
sd = np.sqrt(np.asarray(moments.covariance))

fig, axes = plt.subplots(1, 2, figsize=(13, 4.4), layout="constrained", width_ratios=[2, 1])
ax = axes[0]
ax.imshow(
    joint,
    origin="lower",
    aspect="auto",
    extent=(0, 1, v_axis[0], v_axis[-1]),
    cmap="Greys",
)
ax.plot(grid, nw, color="tab:blue", label="E[v | k] = NW")
ax.fill_between(grid, nw - 2 * sd, nw + 2 * sd, color="tab:blue", alpha=0.15, label="$\\pm$2 sd")
ax.plot(grid, f(grid), "k--", lw=1, label="f")
for i, q in enumerate(queries):
    ax.axvline(q, color=f"C{i}", lw=0.8)
ax.set(xlabel="k", ylabel="v", title=f"kernel-density joint p(k, v), h = {H_CV:.3f}, s = {S}")
ax.legend(loc="lower left", fontsize=8)
ax = axes[1]
for i, q in enumerate(queries):
    ax.plot(v_grid, density[i] / marginal[i], label=f"q = {q}")
    ax.axvline(closed.mean[i], color=f"C{i}", ls=":", lw=1)
ax.hist(mc, bins=80, density=True, color="C1", alpha=0.25, label="draws, q = 0.37")
ax.set(
    xlabel="v",
    ylabel="p(v | k = q)",
    title="conditional laws (dotted: NW)",
    xlim=(v_axis[0], v_axis[-1]),
)
ax.legend(fontsize=8)
plt.show()

# %% [markdown]
# ## What this shows
#
# * Nadaraya-Watson *is* attention: the library's estimator, dot-product attention with scale
#   $1/h^2$ and key bias $-k^2/(2h^2)$, softmax of negative squared distances and the kernel
#   formulas by hand agree to round-off, for every kernel, dense or streamed. Compact kernels
#   are sparse attention maps.
# * The bandwidth is the one thing to estimate, and the closed-form leave-one-out criterion
#   (drop the diagonal of the attention matrix) chooses it well: it matches explicit refits and
#   statsmodels' `cv_ls`, and its error is close to that of the oracle bandwidth that knows
#   $f$. (`select_bandwidth(method="gradient")`, Adam on a held-out split, is the "learned
#   attention temperature" alternative; it uses only part of the data for the criterion.)
# * Once $h$ is chosen the kernel hardly matters: CV bandwidths across kernels follow the
#   canonical-bandwidth ratios and reach nearly the same CV.
# * The estimator is consistent: with a CV bandwidth its error falls at close to the
#   $n^{-4/5}$ nonparametric rate (steeper at these sizes, a common pre-asymptotic effect), and
#   $h_{CV}$ shrinks roughly like $n^{-1/5}$. An attention layer with a fixed temperature, by
#   contrast, is a NW estimator with a fixed bandwidth: its bias does not vanish as the
#   context grows.
# * The attention weights are a posterior over which stored pair generated the query, under a
#   kernel-density model of the joint law; the attention output is that model's conditional
#   mean, and the same model supplies a conditional variance (and draws) that attention alone
#   does not report.
