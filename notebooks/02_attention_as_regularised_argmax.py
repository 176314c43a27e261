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
# # 02 · Attention as a regularised argmax
#
# The note "Attention as a regularised argmax". An attention layer returns a context vector, the
# mean of a value function under a probability vector on the positions,
#
# $$c = \mathbb E_{T \sim p}[V(T)] = \sum_{t=1}^K p_t\, v_t, \qquad
# p \in \Delta^{K-1} = \{p \in \mathbb R^K : p_t \ge 0,\ \textstyle\sum_t p_t = 1\}.$$
#
# Which $p$? Given scores $s \in \mathbb R^K$ (a summary of the data: $s_t = \langle q, k_t\rangle
# / \sqrt d$, or Bahdanau's $w^\top \tanh(Wq + Uk_t)$), the naive choice maximises the alignment
# $\langle p, s\rangle$ over the simplex. That is a linear programme, solved at a vertex: the
# one-hot $e_{j}$, $j = \arg\max_t s_t$. Adding a strictly convex regulariser $\Omega$ with
# temperature $\tau > 0$ gives a unique, smooth solution,
#
# $$p^\star(s) = \arg\max_{p \in \Delta^{K-1}}\ \langle p, s\rangle - \tau\, \Omega(p),$$
#
# and each regulariser gives a familiar map:
#
# * negative Shannon entropy, $\Omega(p) = \sum_t p_t \log p_t$:
#   $\ p^\star = \mathrm{softmax}(s/\tau)$, $\ p^\star_t = e^{s_t/\tau} / \sum_u e^{s_u/\tau}$;
# * Gini, $\Omega(p) = \tfrac12 (\lVert p\rVert^2 - 1)$:
#   $\ p^\star = \mathrm{sparsemax}(s/\tau) = \arg\min_{p\in\Delta} \lVert p - s/\tau\rVert^2$;
# * negative Tsallis, $\Omega(p) = \big(\sum_t p_t^\alpha - 1\big) / \big(\alpha(\alpha-1)\big)$,
#   $\alpha > 1$: $\ p^\star_t = \alpha\text{-entmax}(s/\tau)_t
#   = [(\alpha-1)s_t/\tau - \theta]_+^{1/(\alpha-1)}$.
#
# The KKT conditions give these maps. For Shannon, $s_t - \tau(\log p_t + 1) - \lambda = 0$, so
# $p_t \propto e^{s_t/\tau}$ and no coordinate is ever zero. For Tsallis,
# $s_t - \tau p_t^{\alpha-1}/(\alpha-1) - \lambda + \mu_t = 0$ with $\mu_t \ge 0$,
# $\mu_t p_t = 0$, which gives the thresholded power with $\theta$ fixed by
# $\sum_t p_t = 1$: coordinates below the threshold are **exactly** zero. $\alpha = 2$ is
# sparsemax (the Euclidean projection of $s/\tau$ onto the simplex), $\alpha = 1.5$ the
# common middle, and $\alpha \to 1$ recovers softmax.
#
# This notebook checks each of these statements against closed forms or brute force, draws
# the geometry on the 2-simplex, follows the temperature and $\alpha$ paths, checks the
# Jacobians, and uses the maps as attention weights.
#
# `N` (environment variable `ATTNBAYES_NB_N`) sets the resolution of the simplex grid used
# for the brute-force check and of the score-plane images; the tests run it small.

# %%
import os

from attnbayes.app.devices import use_every_core

use_every_core()  # one host device per core, before JAX starts (a user's XLA_FLAGS count wins)
import jax
import matplotlib.pyplot as plt
import numpy as np
from matplotlib.colors import ListedColormap

from attnbayes.app.cache import enable_compilation_cache
from attnbayes.inference.attention import (
    additive_scores,
    attend,
    dot_product_scores,
    key_moments,
    log_partition,
    scored_attention,
)
from attnbayes.inference.attention.simplex import (
    entmax15,
    entmax_bisect,
    regularised_argmax,
    regularised_objective,
    softmax,
    sparsemax,
)

jax.config.update("jax_enable_x64", True)
enable_compilation_cache()  # JAX's persistent cache: attnbayes.app.cache, ATTNBAYES_CACHE_DIR

N = int(os.environ.get("ATTNBAYES_NB_N", "600"))
rng = np.random.default_rng(2)
# the three maps above, as regularised_argmax calls: (label, regulariser, alpha)
MAPS = [("softmax", "shannon", None), ("1.5-entmax", "tsallis", 1.5), ("sparsemax", "gini", None)]
print(f"N = {N}")

# %% [markdown]
# ## The closed forms
#
# First the maps themselves: softmax against $e^{s/\tau}$ normalised by hand; sparsemax against
# an independent NumPy projection onto the simplex (sort, cumulative sums, threshold
# $\theta = (\sum_{t \le k} s_{(t)} - 1)/k$); $\alpha$-entmax against a NumPy bisection on
# $\theta$ written here from the formula above. The library's `regularised_argmax`
# dispatches to the same maps; every map is invariant to adding a constant to the scores
# and depends on $(s, \tau)$ only through $s/\tau$.


# %%
def project_simplex(z):
    """Euclidean projection of each row of z onto the simplex (NumPy, by sorting)."""
    z_sorted = -np.sort(-z, axis=-1)
    k = np.arange(1, z.shape[-1] + 1)
    cumsum = np.cumsum(z_sorted, axis=-1)
    support = np.sum(1 + k * z_sorted > cumsum, axis=-1, keepdims=True)
    theta = (np.take_along_axis(cumsum, support - 1, axis=-1) - 1) / support
    return np.maximum(z - theta, 0.0)


def entmax_reference(s, alpha, temperature=1.0, num_iters=200):
    """alpha-entmax by bisection on theta, vectorised over rows of s and an array of alphas.

    s: (..., K); alpha: scalar or array broadcasting against s[..., :1]. Returns (..., K).
    """
    alpha = np.asarray(alpha, float)
    z = (alpha - 1) * np.asarray(s, float) / temperature
    z = z - z.max(axis=-1, keepdims=True)
    lo, hi = np.full(z[..., :1].shape, -1.0), np.zeros(z[..., :1].shape)
    for _ in range(num_iters):  # total mass is >= 1 at theta = -1 and 0 at theta = 0
        mid = 0.5 * (lo + hi)
        mass = np.sum(np.maximum(z - mid, 0.0) ** (1 / (alpha - 1)), axis=-1, keepdims=True)
        lo, hi = np.where(mass >= 1, mid, lo), np.where(mass >= 1, hi, mid)
    p = np.maximum(z - 0.5 * (lo + hi), 0.0) ** (1 / (alpha - 1))
    return p / p.sum(axis=-1, keepdims=True)


S = rng.normal(size=(241, 8)) * 2.0  # the shape of the temperature sweep below: one compile
TAU = 0.8
by_hand = np.exp(S / TAU - np.max(S / TAU, axis=1, keepdims=True))
by_hand /= by_hand.sum(axis=1, keepdims=True)
errors = {
    "softmax vs exp(s/tau) / sum": np.abs(softmax(S, temperature=TAU) - by_hand).max(),
    "sparsemax vs NumPy projection": np.abs(
        sparsemax(S, temperature=TAU) - project_simplex(S / TAU)
    ).max(),
    "1.5-entmax vs NumPy bisection": np.abs(
        entmax15(S, temperature=TAU) - entmax_reference(S, 1.5, TAU)
    ).max(),
    "entmax_bisect(alpha=1.5) vs entmax15": np.abs(
        entmax_bisect(S, 1.5, temperature=TAU) - entmax15(S, temperature=TAU)
    ).max(),
    "entmax_bisect(alpha=2) vs sparsemax": np.abs(
        entmax_bisect(S, 2.0, temperature=TAU) - sparsemax(S, temperature=TAU)
    ).max(),
}
for label, reg, alpha in MAPS:
    p = regularised_argmax(S, reg, alpha=alpha, temperature=TAU)
    errors[f"{label}: shift and scale invariance"] = max(
        np.abs(regularised_argmax(S + 3.7, reg, alpha=alpha, temperature=TAU) - p).max(),
        np.abs(regularised_argmax(S / TAU, reg, alpha=alpha) - p).max(),
    )
    errors[f"{label}: rows sum to one"] = np.abs(p.sum(axis=1) - 1).max()
for name, err in errors.items():
    print(f"{name:42s} max abs error {err:.1e}")
assert max(errors.values()) < 1e-12

# %% [markdown]
# ## Brute force: no point of the simplex does better
#
# The maps are claimed to be the maximisers of $\langle p, s\rangle - \tau\Omega(p)$. On the
# 2-simplex ($K = 3$) take every point of the grid $\{(i, j, N - i - j)/N\}$ and evaluate the
# objective there (in NumPy, $0 \log 0 = 0$; the library's `regularised_objective` agrees at the
# solutions). For random scores and temperatures the map's value must be at least the best grid
# value, and the best grid point must sit next to the map's solution (the objective is
# strictly concave). For Shannon the
# optimal value has a closed form, the convex conjugate of $\tau\Omega$:
# $\max_p \langle p, s\rangle - \tau\sum_t p_t\log p_t = \tau \log\sum_t e^{s_t/\tau}$.

# %%
i, j = np.meshgrid(np.arange(N + 1), np.arange(N + 1), indexing="ij")
keep = i + j <= N
simplex_grid = np.stack([i[keep], j[keep], N - i[keep] - j[keep]], axis=1) / N
print(f"{len(simplex_grid)} grid points on the 2-simplex (spacing 1/{N})")


def objective(p, s, regulariser, alpha, tau):
    """<p, s> - tau Omega(p) along the last axis, in NumPy."""
    if regulariser == "shannon":
        omega = np.sum(np.where(p > 0, p * np.log(np.where(p > 0, p, 1.0)), 0.0), axis=-1)
    elif regulariser == "gini":
        omega = 0.5 * (np.sum(p**2, axis=-1) - 1)
    else:
        omega = (np.sum(p**alpha, axis=-1) - 1) / (alpha * (alpha - 1))
    return np.sum(p * s, axis=-1) - tau * omega


# 12 random problems at once: scores (12, 3), temperatures (12,)
s_bf = rng.normal(size=(12, 3)) * 1.5
tau_bf = rng.uniform(0.2, 2.0, size=12)
worst_gap, worst_dist = {}, {}
for label, reg, alpha in [*MAPS, ("3-entmax", "tsallis", 3.0)]:
    # p*(s, tau) = p*(s / tau, 1): one call for the 12 problems
    p_star = np.asarray(regularised_argmax(s_bf / tau_bf[:, None], reg, alpha=alpha))
    # objective at the map's solution (row 0) and at every grid point (rows 1..), per problem
    candidates = np.concatenate(
        [p_star[:, None, :], np.broadcast_to(simplex_grid, (12, *simplex_grid.shape))], axis=1
    )
    values_bf = objective(candidates, s_bf[:, None, :], reg, alpha, tau_bf[:, None])
    # the library's objective (scalar temperature): tau * objective(p, s / tau) at tau = 1
    library = tau_bf * regularised_objective(p_star, s_bf / tau_bf[:, None], reg, alpha=alpha)
    assert np.allclose(library, values_bf[:, 0], rtol=0, atol=1e-12)
    best = 1 + np.argmax(values_bf[:, 1:], axis=1)
    gaps = values_bf[np.arange(12), best] - values_bf[:, 0]
    dists = np.abs(candidates[np.arange(12), best] - p_star).max(axis=1)
    if reg == "shannon":  # the optimal value is the convex conjugate tau logsumexp(s / tau)
        conjugate = tau_bf * np.log(np.sum(np.exp(s_bf / tau_bf[:, None]), axis=1))
        assert np.allclose(values_bf[:, 0], conjugate, rtol=0, atol=1e-12)
    worst_gap[label], worst_dist[label] = gaps.max(), dists.max()
    print(
        f"{label:11s} best grid value - map's value <= {gaps.max():+.1e};"
        f"  |grid argmax - map|_inf <= {dists.max():.4f}"
    )
assert max(worst_gap.values()) <= 1e-12  # nothing on the grid beats the map
assert max(worst_dist.values()) < 10 / N  # and the grid's best point is a neighbour of it

# %% [markdown]
# ## Geometry on the 2-simplex
#
# Scores are only defined up to a constant, so for $K = 3$ the score space is the plane
# $(s_1 - s_3,\ s_2 - s_3)$. Each map partitions it by the **support** of $p^\star$. For
# $\alpha$-entmax the support is always the top-$k$ scores, and sorting
# $s_{(1)} \ge s_{(2)} \ge \dots$, the $(k+1)$-th score enters when the temperature passes
#
# $$\tau_k = (\alpha - 1)
# \Big[\sum_{t \le k}\big(s_{(t)} - s_{(k+1)}\big)^{1/(\alpha-1)}\Big]^{\alpha-1},
# \qquad |\mathrm{supp}\, p^\star| = 1 + \#\{k : \tau_k < \tau\}.$$
#
# (At $\tau = \tau_k$ the entering coordinate has $p = 0$ and $\theta = (\alpha-1)s_{(k+1)}/\tau$;
# solving $\sum_{t\le k} p_t = 1$ for $\tau$ gives the formula.) For sparsemax $\tau_1 = s_{(1)} -
# s_{(2)}$: $p^\star$ is one-hot exactly when the top score leads by at least $\tau$; for
# 1.5-entmax the lead must be $2\tau$; for softmax ($\alpha \to 1$) every $\tau_k \to 0$ and the
# support is always full. The top row colours the score plane by the support size the library
# returns, the bottom row shows where a grid of scores lands on the triangle.


# %%
def breakpoints(s, alpha):
    """tau_k, k = 1..K-1, at which the (k+1)-th largest score enters the alpha-entmax support."""
    s_sorted = -np.sort(-np.asarray(s, float), axis=-1)
    am1 = np.asarray(alpha, float)[..., None] - 1  # alpha: scalar or one per row of s
    taus = []
    for k in range(1, s_sorted.shape[-1]):
        lead = s_sorted[..., :k] - s_sorted[..., k : k + 1]
        taus.append(am1 * np.sum(lead ** (1 / am1), axis=-1, keepdims=True) ** am1)
    return np.concatenate(taus, axis=-1)


def support_size(s, alpha, tau):
    """Closed-form |supp alpha-entmax(s / tau)| and the distance of tau to the nearest tau_k.

    s: (..., K); alpha and tau: scalars or one per row of s.
    """
    b = breakpoints(s, alpha)
    tau = np.asarray(tau, float)[..., None]
    return 1 + np.sum(b < tau, axis=-1), np.min(np.abs(b - tau), axis=-1)


def to_xy(p):
    """Barycentric (p1, p2, p3) -> the plane: e1 at (0, 0), e2 at (1, 0), e3 at (1/2, sqrt3/2)."""
    p = np.asarray(p)
    return p[..., 1] + 0.5 * p[..., 2], np.sqrt(3) / 2 * p[..., 2]


LIM = 3.0
axis_values = np.linspace(-LIM, LIM, N)
d1, d2 = np.meshgrid(axis_values, axis_values, indexing="xy")
plane_scores = np.stack([d1, d2, np.zeros_like(d1)], axis=-1).reshape(-1, 3)
plane_p = {
    label: np.asarray(regularised_argmax(plane_scores, reg, alpha=alpha))
    for label, reg, alpha in MAPS
}
for label, alpha in [("1.5-entmax", 1.5), ("sparsemax", 2.0)]:
    nnz = np.sum(plane_p[label] > 0, axis=1)
    closed_form, margin = support_size(plane_scores, alpha, 1.0)
    clear = margin > 1e-9  # pixels exactly on a boundary may go either way
    mismatches = int(np.sum(nnz[clear] != closed_form[clear]))
    shares = [np.mean(nnz == k) for k in (1, 2, 3)]
    print(
        f"{label:10s} support sizes 1/2/3 on {shares[0]:.1%}/{shares[1]:.1%}/{shares[2]:.1%} of"
        f" the plane; {mismatches} disagreements with tau_k ({np.sum(~clear)} pixels on a boundary)"
    )
    assert mismatches == 0
assert np.all(plane_p["softmax"] > 0)

support_cmap = ListedColormap(["#d62728", "#ff9f40", "#9ecae1"])
triangle = np.array([[0, 0], [1, 0], [0.5, np.sqrt(3) / 2], [0, 0]])
stride = max(1, N // 35)
coarse = (slice(None, None, stride), slice(None, None, stride))
fig, axes = plt.subplots(2, 3, figsize=(13, 8.4), layout="constrained")
for col, (label, _, _) in enumerate(MAPS):
    p = plane_p[label]
    nnz = np.sum(p > 0, axis=1).reshape(d1.shape)
    ax = axes[0, col]
    im = ax.imshow(
        nnz,
        origin="lower",
        extent=(-LIM, LIM, -LIM, LIM),
        cmap=support_cmap,
        vmin=0.5,
        vmax=3.5,
        interpolation="nearest",
    )
    ax.set(xlabel="$s_1 - s_3$", ylabel="$s_2 - s_3$", title=f"{label}: support size, $\\tau = 1$")
    ax = axes[1, col]
    ax.plot(*triangle.T, "k", lw=1)
    x, y = to_xy(p.reshape(*d1.shape, 3)[coarse])
    ax.scatter(x, y, c=nnz[coarse], cmap=support_cmap, vmin=0.5, vmax=3.5, s=6)
    shares = [np.mean(nnz == k) for k in (1, 2, 3)]
    ax.text(
        0.5,
        -0.12,
        f"on a vertex {shares[0]:.0%}, on an edge {shares[1]:.0%}, inside {shares[2]:.0%}",
        ha="center",
    )
    for name, (vx, vy) in zip(["$e_1$", "$e_2$", "$e_3$"], triangle[:3], strict=True):
        ax.annotate(name, (vx, vy), xytext=(vx - 0.04, vy + 0.02 if vy else vy - 0.07))
    ax.set(title=f"{label}: $p^\\star$ of a score grid", aspect="equal", xticks=[], yticks=[])
    ax.axis("off")
fig.colorbar(im, ax=axes[0, :], ticks=[1, 2, 3], label="number of nonzero weights", shrink=0.8)
plt.show()

# %% [markdown]
# Softmax fills the open triangle and never reaches its boundary. Sparsemax sends whole regions
# of the score plane to the three vertices (red: one-hot) and whole strips to the edges
# (orange: one weight exactly zero); only a bounded triangle around
# $s_1 = s_2 = s_3$ maps to the interior. 1.5-entmax sits between the two: its one-hot regions
# start twice as far out ($s_{(1)} - s_{(2)} \ge 2\tau$) and its boundaries are curved.
#
# ## Temperature: from the linear programme to the uniform distribution
#
# As $\tau \to 0$ the regulariser vanishes and $p^\star$ tends to the LP vertex $e_{\arg\max s}$
# (`temperature=0` returns it); as $\tau \to \infty$ the regulariser dominates and $p^\star$
# tends to its maximiser over the simplex, the uniform distribution. Softmax reaches neither
# end at finite $\tau$. The $\alpha$-entmax maps reach the vertex exactly: $p^\star$ is one-hot
# for $\tau \le \tau_1 = (\alpha-1)(s_{(1)} - s_{(2)})$, and the number of nonzeros steps up by
# one at each breakpoint $\tau_k$ until the support is full for $\tau > \tau_{K-1}$. From there
# on sparsemax is affine in $1/\tau$, $p_t = 1/K + (s_t - \bar s)/\tau$ exactly, while softmax
# approaches the uniform distribution $K$ times more closely,
# $p_t = 1/K + (s_t - \bar s)/(K\tau) + O(\tau^{-2})$. (In the softmax panel the count of
# nonzeros drops below $K$ for $\tau < 10^{-2}$: that is floating-point underflow of
# $e^{-(s_{(1)} - s_t)/\tau}$, not sparsity.)

# %%
K_T = 8
s_t = np.sort(rng.normal(size=K_T) * 1.5)[::-1]
taus = np.geomspace(1e-3, 1e3, 241)
scaled = s_t[None, :] / taus[:, None]  # one batched call per map: p*(s, tau) = p*(s / tau, 1)
paths = {label: np.asarray(regularised_argmax(scaled, reg, alpha=a)) for label, reg, a in MAPS}
vertex = np.asarray(regularised_argmax(s_t, "gini", temperature=0))
assert np.array_equal(vertex, np.eye(K_T)[np.argmax(s_t)])
for label, reg, alpha in MAPS:
    p0 = np.asarray(regularised_argmax(s_t, reg, alpha=alpha, temperature=0))
    assert np.array_equal(p0, vertex)  # tau = 0 is the LP solution for every regulariser
    assert np.abs(paths[label][0] - vertex).max() < 1e-12  # tau = 1e-3 is already there
    assert np.abs(paths[label][-1] - 1 / K_T).max() < 0.01  # tau = 1e3 is nearly uniform

for label, alpha in [("1.5-entmax", 1.5), ("sparsemax", 2.0)]:
    nnz = np.sum(paths[label] > 0, axis=1)
    closed_form, margin = support_size(np.broadcast_to(s_t, scaled.shape), alpha, taus)
    assert np.array_equal(nnz[margin > 1e-9], closed_form[margin > 1e-9])
    assert np.all(np.diff(nnz) >= 0)  # sparsity only decreases with the temperature
    print(f"{label:10s} breakpoints tau_k:", np.round(breakpoints(s_t, alpha), 3))
# softmax is never sparse; its zeros at tiny tau are floating-point underflow, e^(-745) = 0
no_underflow = (s_t.max() - s_t.min()) / taus < 700
assert np.all(paths["softmax"][no_underflow] > 0)
# sparsemax on the full support: p_t = 1/K + (s_t - mean s) / tau, exactly
full = taus > breakpoints(s_t, 2.0)[-1]
expected = 1 / K_T + (s_t - s_t.mean())[None, :] / taus[full, None]
assert np.abs(paths["sparsemax"][full] - expected).max() < 1e-12
softmax_tail = 1 / K_T + (s_t - s_t.mean()) / (K_T * taus[-1])
assert np.abs(paths["softmax"][-1] - softmax_tail).max() < 10 / taus[-1] ** 2

fig, axes = plt.subplots(2, 3, figsize=(13, 6.5), layout="constrained", sharex=True)
for col, (label, _, alpha) in enumerate(MAPS):
    ax = axes[0, col]
    ax.semilogx(taus, paths[label])
    ax.set(title=f"{label}: $p^\\star_t(s / \\tau)$", ylim=(-0.02, 1.02))
    ax = axes[1, col]
    ax.semilogx(taus, np.sum(paths[label] > 0, axis=1), "k", drawstyle="steps-post")
    if label != "softmax":
        for b in breakpoints(s_t, 2.0 if alpha is None else alpha):
            ax.axvline(b, color="tab:red", lw=0.6, ls="--")
    ax.set(xlabel="temperature $\\tau$", ylabel="nonzero weights", ylim=(0.5, K_T + 0.5))
axes[1, 2].plot([], [], color="tab:red", lw=0.6, ls="--", label="closed-form $\\tau_k$")
axes[1, 2].legend(loc="lower right")
plt.show()

# %% [markdown]
# ## Jacobians
#
# All three maps are differentiable almost everywhere, and their Jacobians have closed forms.
# With $J = \partial p^\star / \partial s$:
#
# $$J_{\text{softmax}} = \tfrac1\tau\big(\mathrm{diag}(p) - pp^\top\big), \qquad
# J_{\alpha\text{-entmax}} = \tfrac1\tau\Big(\mathrm{diag}(g) - \frac{gg^\top}{\sum_t g_t}\Big),
# \quad g_t = \mathbb 1[p_t > 0]\, p_t^{2-\alpha}.$$
#
# For sparsemax ($\alpha = 2$) $g = \mathbb 1_S$, the indicator of the support, and
# $\tau J = \mathrm{diag}(\mathbb 1_S) - \mathbb 1_S\mathbb 1_S^\top/|S|$ is the orthogonal
# projection onto $\{x : \mathrm{supp}\,x \subseteq S,\ \sum x_t = 0\}$: symmetric, idempotent,
# zero outside the support. The library differentiates sparsemax and entmax through custom
# JVPs built from these formulas, so `jax.jacobian` is held both against the closed forms and
# against central finite differences, which do not use the custom rule. Softmax's Jacobian is
# also the covariance of the one-hot vector $e_T$, $T \sim p$: `key_moments` with the identity
# as keys returns it.

# %%
K_J, TAU_J, EPS = 6, 0.7, 1e-6
s_j = rng.normal(size=K_J) * 1.5
jac_maps = [*MAPS, ("1.3-entmax", "tsallis", 1.3)]
# rows: s, then s + eps e_l and s - eps e_l for l = 1..K (one batched call per map)
offsets = np.concatenate([np.zeros((1, K_J)), np.eye(K_J), -np.eye(K_J)])
jacobians = {}
for label, reg, alpha in jac_maps:
    a = {"softmax": 1.0, "sparsemax": 2.0}.get(label, alpha)

    def fn(s, reg=reg, alpha=alpha):
        return regularised_argmax(s, reg, alpha=alpha, temperature=TAU_J)

    def map_and_jacobian(s, fn=fn):  # forward mode through the custom JVP; one compile
        return fn(s + EPS * offsets), jax.jacfwd(fn)(s)

    out, J = (np.asarray(x) for x in jax.jit(map_and_jacobian)(s_j))
    p, plus, minus = out[0], out[1 : K_J + 1], out[K_J + 1 :]
    if label == "softmax":
        closed = (np.diag(p) - np.outer(p, p)) / TAU_J
    else:
        g = np.where(p > 0, p ** (2 - a), 0.0)
        closed = (np.diag(g) - np.outer(g, g) / g.sum()) / TAU_J
    finite_diff = (plus - minus).T / (2 * EPS)  # column l: d p / d s_l
    err_closed, err_fd = np.abs(J - closed).max(), np.abs(J - finite_diff).max()
    print(
        f"{label:10s} support {int(np.sum(p > 0))}/{K_J}:  |J - closed form| {err_closed:.1e},"
        f"  |J - finite differences| {err_fd:.1e}"
    )
    assert err_closed < 1e-12 and err_fd < 1e-6
    assert np.allclose(J, J.T, atol=1e-12) and np.allclose(J.sum(axis=0), 0, atol=1e-12)
    assert np.linalg.eigvalsh(J).min() > -1e-12  # positive semi-definite
    jacobians[label] = J
P_sp = TAU_J * jacobians["sparsemax"]
assert np.allclose(P_sp @ P_sp, P_sp, atol=1e-12)  # a projection
_, cov = jax.jit(key_moments)(s_j / TAU_J, np.eye(K_J))
assert np.allclose(jacobians["softmax"], np.asarray(cov) / TAU_J, atol=1e-12)

fig, axes = plt.subplots(1, 4, figsize=(14, 3.4), layout="constrained")
vmax = max(np.abs(J).max() for J in jacobians.values())
for ax, (label, J) in zip(axes, jacobians.items(), strict=True):
    im = ax.imshow(J, cmap="RdBu_r", vmin=-vmax, vmax=vmax)
    ax.set(title=f"$\\partial p^\\star / \\partial s$: {label}", xticks=[], yticks=[])
fig.colorbar(im, ax=axes, shrink=0.8)
plt.show()

# %% [markdown]
# The sparse maps' Jacobians are zero in the rows and columns of the positions outside the
# support: a score that did not make it into the support gets no gradient, which is what makes
# sparse attention's gradients sparse too.
#
# ## The $\alpha$-entmax family
#
# $\alpha$ moves continuously between softmax ($\alpha \to 1$) and sparsemax ($\alpha = 2$) and
# beyond (larger $\alpha$, sparser). The library's `entmax_bisect` (bisection on $\theta$, $\alpha$
# compiled in) is checked at a few $\alpha$ against the NumPy bisection above; the dense path
# over $\alpha$ in the figure is the NumPy one. The one-hot threshold $\tau_1 =
# (\alpha-1)(s_{(1)} - s_{(2)})$ grows with $\alpha$, so at a fixed temperature larger $\alpha$
# means fewer nonzeros; as $\alpha \to 1$ the weights approach softmax's.

# %%
alphas = np.linspace(1.0, 3.0, 161)[1:]
family = entmax_reference(np.broadcast_to(s_t, (alphas.size, K_T)), alphas[:, None])
checked = {}
for alpha in (1.25, 3.0):
    checked[alpha] = np.abs(np.asarray(entmax_bisect(s_t, alpha)) - entmax_reference(s_t, alpha))
    checked[alpha] = checked[alpha].max()
print("entmax_bisect vs NumPy bisection:", {a: f"{e:.1e}" for a, e in checked.items()})
assert max(checked.values()) < 1e-10
gaps = [np.abs(entmax_reference(s_t, a) - softmax(s_t)).max() for a in (1.1, 1.01, 1.001)]
print("max |alpha-entmax - softmax| at alpha = 1.1, 1.01, 1.001:", np.round(gaps, 5))
assert gaps[0] > gaps[1] > gaps[2] and gaps[2] < 1e-3
nnz_alpha = np.sum(family > 0, axis=1)
expected_nnz, margin = support_size(np.broadcast_to(s_t, family.shape), alphas, 1.0)
assert np.all(np.diff(nnz_alpha) <= 0)  # sparser as alpha grows (here, at tau = 1)
assert np.array_equal(nnz_alpha[margin > 1e-9], expected_nnz[margin > 1e-9])

fig, axes = plt.subplots(1, 2, figsize=(12, 3.8), layout="constrained")
axes[0].plot(alphas, family)
axes[0].scatter(np.ones(K_T), softmax(s_t), color="k", zorder=3, s=15, label="softmax")
for alpha, name in [(1.5, "1.5-entmax"), (2.0, "sparsemax")]:
    axes[0].axvline(alpha, color="grey", lw=0.8, ls=":")
    axes[0].annotate(name, (alpha, 0.95), xytext=(4, 0), textcoords="offset points")
axes[0].set(xlabel="$\\alpha$", ylabel="$p^\\star_t$", title="$\\alpha$-entmax(s), $\\tau = 1$")
axes[0].legend(loc="center right")
axes[1].plot(alphas, nnz_alpha, "k", drawstyle="steps-post")
axes[1].set(xlabel="$\\alpha$", ylabel="nonzero weights", title=f"support size (K = {K_T})")
plt.show()

# %% [markdown]
# ## The maps as attention weights
#
# Now the scores are a summary of data: $s_{ij} = \langle q_i, k_j\rangle/\sqrt d$ for queries
# $q_i$ and keys $k_j$, and the output is $o_i = \sum_j A_{ij} v_j$ with $A_{i\cdot} =
# p^\star(s_{i\cdot}/\tau)$. `attend` returns only the outputs; with the identity as values,
# $o_i = \sum_j A_{ij} e_j = A_{i\cdot}$, so the attention matrix itself comes out of the same
# call. It is checked against the maps applied to `dot_product_scores`, and the outputs
# against $AV$.
#
# The exponential-family reading of softmax attention ("Attention as GPB2/IMM message passing",
# section 2): on the finite set of keys, $p(k_j \mid q) = \exp(\langle k_j, q\rangle - \log G(q))$
# with $\log G = \mathrm{logsumexp}$; then $\nabla_q \log G$ is the attention output with values $=$
# keys and $\nabla^2_q \log G$ the covariance of the keys under $A$ (`log_partition`,
# `key_moments`). Finally the score need not be a dot product: `scored_attention` takes any score
# function, here Bahdanau's additive one.

# %%
NQ, NK, D = 8, 14, 4
queries = rng.normal(size=(NQ, D)) * 1.4
keys = rng.normal(size=(NK, D))
values = rng.normal(size=(NK, 2))
scores = np.asarray(dot_product_scores(queries, keys))
assert np.allclose(scores, queries @ keys.T / np.sqrt(D), atol=1e-12)


def softmax_np(z):
    e = np.exp(z - z.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


# the NumPy references of the first section, applied to the scores
REFERENCE = {
    "softmax": softmax_np,
    "entmax15": lambda z: entmax_reference(z, 1.5),
    "sparsemax": project_simplex,
}
# values [I | V | K]: one call returns A, A V and (with scale 1, softmax) the key mean A K
augmented = np.concatenate([np.eye(NK), values, keys], axis=1)
weights = {}
for name, reference in REFERENCE.items():
    out = np.asarray(attend(queries, keys, augmented, weights=name))
    A, AV = out[:, :NK], out[:, NK : NK + 2]
    assert np.allclose(A, reference(scores), atol=1e-12)
    assert np.allclose(AV, A @ values, atol=1e-12)
    A_hot = np.asarray(attend(queries, keys, augmented, weights=name, temperature=0.5))[:, :NK]
    assert np.allclose(A_hot, reference(scores / 0.5), atol=1e-12)
    assert np.all(A >= 0) and np.allclose(A.sum(axis=1), 1, atol=1e-12)
    weights[name] = A
    print(f"{name:9s} nonzero weights per query: {np.sum(A > 0, axis=1)}")
streamed = attend(queries, keys, augmented, block_size=4)  # online log-sum-exp over key blocks
assert np.allclose(streamed[:, NK : NK + 2], weights["softmax"] @ values, atol=1e-12)


# exponential family: gradient and Hessian of log G(q) = logsumexp_j <k_j, q>
@jax.jit
def log_partition_derivatives(q, k):
    return jax.grad(log_partition)(q, k), jax.hessian(log_partition)(q, k), key_moments(q, k)


grad, hess, (mean, cov) = log_partition_derivatives(queries[0], keys)
assert np.allclose(grad, mean, atol=1e-12) and np.allclose(hess, cov, atol=1e-12)
key_mean = np.asarray(attend(queries, keys, augmented, scale=1.0))[0, NK + 2 :]
assert np.allclose(key_mean, mean, atol=1e-12)  # the attention output with values = keys

# additive (Bahdanau) scores w^T tanh(W q + U k) through scored_attention
H = 5
W, U, w = rng.normal(size=(H, D)), rng.normal(size=(H, D)), rng.normal(size=H)


def bahdanau(q, k, params):
    return additive_scores(q, k, *params)


additive = scored_attention(bahdanau, (W, U, w), queries, keys, values)
by_hand = np.tanh((queries @ W.T)[:, None, :] + (keys @ U.T)[None, :, :]) @ w
A_additive = np.exp(by_hand) / np.exp(by_hand).sum(axis=1, keepdims=True)
assert np.allclose(additive.weights, A_additive, atol=1e-12)
assert np.allclose(additive.output, A_additive @ values, atol=1e-12)
print("attention checks passed")

# %%
fig = plt.figure(figsize=(14, 6.8), layout="constrained")
grid = fig.add_gridspec(2, 3, height_ratios=[1, 1.15])
for col, (name, A) in enumerate(weights.items()):
    ax = fig.add_subplot(grid[0, col])
    im = ax.imshow(np.ma.masked_equal(A, 0), cmap="viridis", vmin=0, vmax=1)
    ax.set_facecolor("white")
    ax.set(title=f"{name}: A (zeros blank)", xlabel="key j", ylabel="query i")
fig.colorbar(im, ax=fig.axes, shrink=0.6, location="right")
bottom = [fig.add_subplot(grid[1, col]) for col in range(3)]
for ax, (name, A) in zip(bottom, weights.items(), strict=True):
    ax.scatter(*values.T, c="lightgrey", s=25, label="values $v_j$")
    out = A @ values
    for i in range(NQ):
        for jj in np.flatnonzero(A[i] > 0.05):
            ax.plot(*np.stack([out[i], values[jj]]).T, color=f"C{i}", lw=2.5 * A[i, jj], alpha=0.6)
    ax.scatter(*out.T, c=[f"C{i}" for i in range(NQ)], s=45, edgecolor="k", zorder=3)
    ax.set(title=f"{name}: outputs $o_i$ and the values they mix", aspect="equal")
bottom[0].legend(loc="lower left")
plt.show()

# %% [markdown]
# ## What this shows
#
# * The familiar normalisers are one optimisation problem with three regularisers: for random
#   scores no point of a $1/N$ grid of the simplex beats the maps' objective, softmax's optimum
#   equals $\tau\,\mathrm{logsumexp}(s/\tau)$, and every map agrees with an independent NumPy
#   implementation to round-off.
# * The regulariser decides the geometry. Shannon entropy's gradient is infinite on the
#   boundary, so softmax stays inside the simplex. Gini and Tsallis ($\alpha > 1$) have finite
#   gradients there, so whole regions of score space map to faces and vertices: exact zeros,
#   with the support predicted exactly by the breakpoints $\tau_k$.
# * The temperature interpolates between the linear programme ($\tau \to 0$, the argmax vertex,
#   reached at finite $\tau$ by the sparse maps) and the regulariser's own maximiser
#   ($\tau \to \infty$, uniform). $\alpha$ interpolates between softmax and sparsemax.
# * The Jacobians have closed forms: a covariance for softmax, a projection onto the support
#   for sparsemax. Gradients flow only through the support.
# * As attention weights the maps change only *which* values are mixed: sparsemax and
#   1.5-entmax outputs are convex combinations of a few values (faces of their hull), softmax
#   mixes all of them. A statistician can read $A_{i\cdot}$ as a posterior over positions
#   under a regularised (not necessarily Bayesian) criterion; only Shannon gives the Gibbs
#   posterior $p(k_j \mid q) \propto e^{\langle q, k_j \rangle}$ of the exponential-family view.
