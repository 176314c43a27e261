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
# # 03 · Switching state space: GPB2, IMM, and attention as an IMM step
#
# The note "Attention as GPB2/IMM message passing" reads the attention sublayer as one step of
# approximate message passing in a switching linear-Gaussian state-space model (SLDS). This notebook
# builds that model, runs the approximate filters and smoothers against the exact posterior where it
# can be enumerated and against a Gibbs sampler where it cannot, and checks that one IMM
# mixing-and-collapse step with the attention kernel in place of the transition matrix is the
# attention sublayer.
#
# **The model.** $M$ modes, state $x_t \in \mathbb R^d$, observation $y_t \in \mathbb R^o$,
# $t = 1, \dots, T$:
#
# $$s_1 \sim \mathrm{Cat}(\pi_0), \qquad s_t \mid s_{t-1} = i \sim \mathrm{Cat}(\Pi_{i\cdot}),$$
# $$x_1 \mid s_1 = j \sim \mathcal N(m_{0j}, P_{0j}), \qquad
#   x_t \mid x_{t-1}, s_t = j \sim \mathcal N(F_j x_{t-1} + b_j, Q_j), \qquad
#   y_t \mid x_t, s_t = j \sim \mathcal N(H_j x_t, R_j).$$
#
# **The exact filter** $p(x_t, s_t \mid y_{1:t})$ is a mixture of $M^t$ Gaussians, one per mode
# history, each a Kalman filter along that history. The approximate filters keep $M$ of them by
# *moment matching* (the M-projection onto Gaussians):
#
# $$\mathrm{collapse}\{w_k, m_k, P_k\} = \Big(\textstyle\sum_k w_k m_k,\
#   \sum_k w_k \big(P_k + (m_k - \bar m)(m_k - \bar m)^\top\big)\Big).$$
#
# * **GPB1** collapses everything to one Gaussian, then predicts and updates under each new
#   mode $j$.
# * **GPB2** runs the $M^2$ Kalman updates from each previous component $i$ under each new mode
#   $j$, weights them by $w_{ij} \propto \pi_i \Pi_{ij} \mathcal N(y_t; \hat y_{ij}, S_{ij})$ and
#   collapses over $i$ for each $j$.
# * **IMM** mixes *first*, with $\mu_{i\mid j} = \Pi_{ij}\pi_i / c_j$,
#   $c_j = \sum_i \Pi_{ij}\pi_i$ (the posterior of the previous mode given the new one),
#   collapses over $i$, then runs $M$ Kalman updates: GPB2's accuracy at GPB1's cost.
# * **RBPF** samples mode histories (particles) and keeps an exact Kalman filter in each.
#
# **Smoothers** target $p(x_t, s_t \mid y_{1:T})$: the exact smoother enumerates the histories,
# Kim's (1994) smoother is a backward pass over the per-mode filtered Gaussians, and a Gibbs
# sampler draws from the smoothing posterior of any length.
#
# `T_LONG` (environment variable `ATTNBAYES_NB_N`) is the length of the long series; the tests
# run it small.

# %%
import os
import warnings

from attnbayes.app.devices import use_every_core

use_every_core()  # one host device per core, before JAX starts (a user's XLA_FLAGS count wins)
import arviz as az
import jax
import jax.numpy as jnp
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from IPython.display import display

with warnings.catch_warnings():  # NumPyro imports tqdm.auto, which warns that ipywidgets is absent
    warnings.filterwarnings("ignore", message="IProgress not found")
    from attnbayes.app.cache import enable_compilation_cache
    from attnbayes.inference.attention import softmax_attention
    from attnbayes.inference.switching import (
        attention_as_imm_step,
        compare_switching,
        exact_filter,
        exact_smoother,
        gpb1_filter,
        gpb2_filter,
        imm_filter,
        imm_mixing,
        kim_smoother,
        rbpf,
    )
    from attnbayes.inference.switching.gibbs import run_switching_gibbs
    from attnbayes.models.switching import get_scenario, simulate

jax.config.update("jax_enable_x64", True)
enable_compilation_cache()  # JAX's persistent cache: attnbayes.app.cache, ATTNBAYES_CACHE_DIR
pd.set_option("display.width", 120)

T_LONG = int(os.environ.get("ATTNBAYES_NB_N", "400"))
T_SHORT = 12  # 2^12 = 4096 mode histories: the exact filter and smoother enumerate them
SMALL = T_LONG < 300  # the test size: fewer short series, shorter Gibbs runs, same checks
NUM_SERIES = 4 if SMALL else 8  # short series for the filter comparison
NUM_PARTICLES = 500
GIBBS = {"num_warmup": 300, "num_samples": 500 if SMALL else 1000, "num_chains": 2 if SMALL else 4}
params = get_scenario("maneuvering-target")
print("Pi =", np.asarray(params.transition_matrix).tolist())
turn = np.degrees(np.arcsin(np.asarray(params.dynamics_matrices)[1, 3, 1]))
print(f"mode 1 turns the velocity by {turn:.1f} degrees per step")

# %% [markdown]
# ## The maneuvering target
#
# State $x = (p_x, v_x, p_y, v_y)$ on the plane, position measured with $\sigma = 10$. Mode 0
# is constant velocity (white-noise acceleration $\sigma_a = 0.1$), mode 1 a coordinated turn
# at 3°/step ($\sigma_a = 0.5$); $\Pi = \begin{pmatrix} .95 & .05 \\ .10 & .90\end{pmatrix}$.
# The process noise $Q_j = \sigma_a^2\, G G^\top$ per axis, $G = (\tfrac12, 1)^\top$, has rank
# 2 in 4-D: given the modes, the state moves on a lower-dimensional set, which rules out the
# textbook "modes given states" Gibbs step (see below).
#
# `NUM_SERIES` series of length `T_LONG` are simulated; their first 12 steps are the short
# series (the simulator is causal, so a prefix is a draw of the shorter model), and series 0 is
# the long series.

# %%
sims = [
    tuple(np.asarray(a) for a in simulate(jax.random.PRNGKey(3 + s), params, T_LONG))
    for s in range(NUM_SERIES)
]
modes, states, y = sims[0]
print(f"T = {T_LONG}: {np.sum(np.diff(modes) != 0)} switches, {modes.mean():.0%} of steps turning")
print("short series 0, modes:", modes[:T_SHORT])

fig, ax = plt.subplots(figsize=(7, 5.5), layout="constrained")
ax.plot(states[:, 0], states[:, 2], color="0.7", lw=1, zorder=1)
for j, colour in ((0, "tab:blue"), (1, "tab:red")):
    on = modes == j
    name = ("constant velocity", "turning")[j]
    ax.scatter(states[on, 0], states[on, 2], s=8, color=colour, label=f"mode {j}: {name}")
ax.scatter(y[:, 0], y[:, 1], s=4, color="k", alpha=0.3, label="measurements")
ax.plot(*states[0, [0, 2]], "k*", ms=12, label="start")
ax.set(xlabel="$p_x$", ylabel="$p_y$", title="simulated target", aspect="equal")
ax.legend(fontsize=8)
plt.show()
# %% [markdown]
# ## Approximate filters against the exact filter
#
# On a 12-step series all $2^{12}$ histories can be enumerated. The approximate filters are run
# on the long array with $y_{13:T}$ blanked out (a `NaN` row is a missing observation, a
# predict-only step): the filters are causal, so their first 12 steps are exactly the filters
# of $y_{1:12}$, and each filter is compiled once for the whole notebook.
#
# Two checks of the enumeration itself first: at $t = T$ filtering and smoothing coincide, and
# the exact filter (one forward pass over all histories) and the exact smoother (a Kalman filter
# and RTS pass per history) must give the same $\log p(y_{1:12})$.

# %%
FILTERS = {"gpb1": gpb1_filter, "gpb2": gpb2_filter, "imm": imm_filter}


def blank_after(obs, t):
    """The series with every observation after step t missing."""
    out = obs.copy()
    out[t:] = np.nan
    return out


def first(result, t=T_SHORT):
    """The first t steps of a FilterResult / SmootherResult (log-likelihood kept)."""
    return jax.tree.map(lambda a: np.asarray(a)[:t] if np.ndim(a) else float(a), result)


def rms(a, b):
    return float(np.sqrt(np.mean((np.asarray(a) - np.asarray(b)) ** 2)))


short = []  # per series: exact filter, exact smoother, approximate filters, Kim smoothers
for _, _, obs in sims:
    y12, y_blank = obs[:T_SHORT], blank_after(obs, T_SHORT)
    run = {"exact": exact_filter(params, y12), "exact-smoother": exact_smoother(params, y12)}
    run |= {name: first(f(params, y_blank)) for name, f in FILTERS.items()}
    run["kim-gpb2"] = kim_smoother(params, y12, run["gpb2"])
    run["kim-imm"] = kim_smoother(params, y12, run["imm"])
    short.append(run)
    ex, sm = run["exact"], run["exact-smoother"]
    np.testing.assert_allclose(float(ex.log_likelihood), float(sm.log_likelihood), rtol=1e-10)
    np.testing.assert_allclose(ex.mode_probs[-1], sm.mode_probs[-1], atol=1e-10)
    np.testing.assert_allclose(ex.mean[-1], sm.mean[-1], rtol=1e-8, atol=1e-8)

filter_table = pd.DataFrame(
    {
        name: {
            "rms(mean - exact)": np.mean([rms(r[name].mean, r["exact"].mean) for r in short]),
            "max |P(s_t) - exact|": np.mean(
                [np.abs(r[name].mode_probs - r["exact"].mode_probs).max() for r in short]
            ),
            "log p(y) - exact": np.mean(
                [float(r[name].log_likelihood - r["exact"].log_likelihood) for r in short]
            ),
            "worst |log p(y) - exact|": np.max(
                [abs(float(r[name].log_likelihood - r["exact"].log_likelihood)) for r in short]
            ),
        }
        for name in FILTERS
    }
).T
print(f"means over {NUM_SERIES} series of T = {T_SHORT} steps")
display(filter_table.round(4))

ft = filter_table
assert (
    ft.loc["gpb1", "rms(mean - exact)"] > 1.5 * ft.loc[["gpb2", "imm"], "rms(mean - exact)"].max()
)
assert (
    ft.loc["gpb1", "max |P(s_t) - exact|"] > ft.loc[["gpb2", "imm"], "max |P(s_t) - exact|"].max()
)
assert ft.loc[["gpb2", "imm"], "max |P(s_t) - exact|"].max() < 0.05
worst_gap = ft["worst |log p(y) - exact|"]
assert worst_gap[["gpb2", "imm"]].max() < 0.25  # log p(y_{1:12}) within a quarter of a nat
assert worst_gap["gpb1"] > worst_gap[["gpb2", "imm"]].max()

# %% [markdown]
# GPB2 and IMM, which keep one Gaussian *per mode*, stay within a few hundredths of the exact
# mode probabilities and a fraction of a unit of the exact mean (measurement noise: 10 units);
# GPB1, which keeps one Gaussian in all, is several times farther off.
#
# ## Filters, Kim's smoother and the exact smoother
#
# Kim's smoother runs backward over the per-mode filtered Gaussians $\mathcal N(m_t^j, P_t^j)$:
#
# $$U_t(j, k) = \frac{p_t(j)\Pi_{jk}}{\sum_{j'} p_t(j')\Pi_{j'k}}, \qquad
#   P(s_t = j \mid y_{1:T}) = \sum_k U_t(j,k)\, P(s_{t+1} = k \mid y_{1:T}),$$
#
# and for each pair $(j, k)$ an RTS step from $\mathcal N(m_t^j, P_t^j)$ through the dynamics of
# mode $k$ toward the smoothed $\mathcal N(m_{t+1|T}^k, P_{t+1|T}^k)$, collapsed over $k$. The
# approximation is $p(x_{t+1} \mid s_t, s_{t+1}, y_{1:T}) \approx p(x_{t+1} \mid s_{t+1},
# y_{1:T})$. On the short series everything is held against the exact smoother.

# %%
compared = ["gpb1", "gpb2", "imm", "exact", "kim-gpb2", "kim-imm"]
smoother_table = pd.DataFrame(
    {
        name: {
            "rms(mean - exact smoother)": np.mean(
                [rms(r[name].mean, r["exact-smoother"].mean) for r in short]
            ),
            "max |P(s_t) - exact smoother|": np.mean(
                [np.abs(r[name].mode_probs - r["exact-smoother"].mode_probs).max() for r in short]
            ),
        }
        for name in compared
    }
).T
display(smoother_table.round(4))
st = smoother_table["rms(mean - exact smoother)"]
assert st["kim-gpb2"] < 0.5 * st["gpb2"] and st["kim-imm"] < 0.5 * st["imm"]
assert st["kim-imm"] < st["exact"]  # Kim's approximate smoother beats even the exact filter

# %% [markdown]
# ## The collapsed Gibbs sampler against the exact smoother
#
# `run_switching_gibbs` sweeps
#
# 1. each $s_t$ from $p(s_t \mid s_{-t}, y)$ with the states integrated out (Gerlach, Carter and
#    Kohn 2000): a backward pass of information-form messages
#    $B_t(x) = p(y_{t+1:T} \mid x_t = x, s_{t+1:T})$ and a forward pass of $M$ candidate Kalman
#    updates score every value of $s_t$ in closed form;
# 2. $x_{1:T} \mid s, y$ by forward filtering, backward sampling.
#
# Step 1 integrates the states out on purpose: the textbook step $s \mid x, y$ cannot move
# here, because with a rank-2 $Q_j$ the increment $x_t - F_j x_{t-1}$ lies in the range of
# $Q_j$ for one $j$ only, so the states pin the modes.
#
# Run on the first short series (again blanked after step 12, so that the sampler compiled for
# the long series is reused), the posterior means of every $x_t$ coordinate and of
# $P(s_t = 1 \mid y_{1:12})$ must lie within a few Monte Carlo standard errors of the exact
# smoother, and the posterior standard deviations close to the exact ones.

# %%
exact_sm = short[0]["exact-smoother"]
gibbs_short = run_switching_gibbs(jax.random.PRNGKey(10), params, blank_after(y, T_SHORT), **GIBBS)
post = gibbs_short["posterior"].isel(time=slice(0, T_SHORT))
draws = np.asarray(post["states"])  # (chain, draw, time, state_dim)
turning = (np.asarray(post["modes"]) == 1).astype(float)
z_states = (draws.mean(axis=(0, 1)) - exact_sm.mean) / np.asarray(
    az.mcse(draws, chain_axis=0, draw_axis=1)
)
p_turn = turning.mean(axis=(0, 1))
se_turn = np.asarray(az.mcse(turning, chain_axis=0, draw_axis=1)) + 1e-3
z_modes = (p_turn - exact_sm.mode_probs[:, 1]) / se_turn
exact_sd = np.sqrt(np.diagonal(exact_sm.cov, axis1=1, axis2=2))
sd_ratio = draws.std(axis=(0, 1)) / exact_sd
print(f"states: max |z| = {np.abs(z_states).max():.2f} over {z_states.size} coordinates")
print(f"P(s_t = 1): max |z| = {np.abs(z_modes).max():.2f} over {T_SHORT} steps")
print(f"posterior sd / exact sd: {sd_ratio.min():.3f} .. {sd_ratio.max():.3f}")
assert np.abs(z_states).max() < 4.5 and np.abs(z_modes).max() < 4.5
assert np.all(np.abs(sd_ratio - 1) < 0.2)

fig, axes = plt.subplots(1, 2, figsize=(12, 3.5), layout="constrained", sharey=True)
steps = np.arange(1, T_SHORT + 1)
for ax, names in zip(axes, (("gpb1", "gpb2", "imm"), ("kim-gpb2", "kim-imm")), strict=True):
    ax.fill_between(steps, 0, modes[:T_SHORT], step="mid", color="0.85", label="true mode = 1")
    for name in names:
        ax.plot(steps, short[0][name].mode_probs[:, 1], "o-", ms=3, label=name)
axes[0].plot(steps, short[0]["exact"].mode_probs[:, 1], "k--", lw=2, label="exact filter")
axes[1].plot(steps, exact_sm.mode_probs[:, 1], "k--", lw=2, label="exact smoother")
axes[1].errorbar(steps, p_turn, 2 * se_turn, fmt="s", ms=4, color="tab:purple", label="Gibbs")
axes[0].set(
    title=r"filters: $P(s_t = 1 \mid y_{1:t})$", xlabel="t", ylabel="probability of turning"
)
axes[1].set(title=r"smoothers: $P(s_t = 1 \mid y_{1:12})$", xlabel="t")
for ax in axes:
    ax.legend(fontsize=8)
plt.show()

# %% [markdown]
# ## The Rao-Blackwellised particle filter
#
# Particles carry a mode history and, given it, the exact Kalman filter; the proposal for the
# next mode is the locally optimal one, $q(s_t = j) \propto \Pi_{s_{t-1} j}\, p(y_t \mid
# y_{1:t-1}, s_{1:t-1}, s_t = j)$, and $\exp$ of its log-likelihood estimate is unbiased for
# $p(y_{1:T})$. On the short series its error is Monte Carlo error only.

# %%
pf = first(rbpf(jax.random.PRNGKey(11), params, blank_after(y, T_SHORT), NUM_PARTICLES))
ex = short[0]["exact"]
pf_dev = {
    "rms(mean - exact)": rms(pf.mean, ex.mean),
    "max |P(s_t) - exact|": float(np.abs(pf.mode_probs - ex.mode_probs).max()),
    "log p(y) - exact": pf.log_likelihood - float(ex.log_likelihood),
}
print({k: round(v, 4) for k, v in pf_dev.items()})
assert pf_dev["max |P(s_t) - exact|"] < 0.05 and abs(pf_dev["log p(y) - exact"]) < 0.1

# %% [markdown]
# ## The long series: filters, smoothers and samplers side by side
#
# With $T$ = `T_LONG` steps nothing can be enumerated; the Gibbs sampler (4 chains, 2 at the
# test size) is the reference for the smoothers, and the truth is known because the series is
# simulated.
# `known-modes` is the Kalman smoother along the true mode sequence: the floor for any method
# that has to infer the modes. Metrics: state RMSE against the truth, mode accuracy, coverage
# of 50% / 90% marginal intervals, deviation from the reference, $\log p(y)$ of each filter
# (Kim's smoothers carry their filter's), R-hat and ESS of the sampler, wall time (compilation
# included).

# %%
comparison = compare_switching(
    jax.random.PRNGKey(12),
    params,
    y,
    states_true=states,
    modes_true=modes,
    methods=("gpb1", "gpb2", "imm", "rbpf", "kim-gpb2", "kim-imm", "gibbs", "known-modes"),
    num_particles=NUM_PARTICLES,
    gibbs_kwargs=GIBBS,
)
long_table = comparison.table.pivot(index="metric", columns="method", values="value")
print("reference for the smoothers:", comparison.references["smoother"])
display(long_table.round(3))

lt = long_table
filters_rmse = lt.loc["state_rmse", ["gpb1", "gpb2", "imm", "rbpf"]]
assert lt.loc["max_rhat_states", "gibbs"] < 1.05
assert lt.loc["state_rmse", "gibbs"] < filters_rmse.min()  # smoothing uses the future
assert lt.loc["state_rmse", "known-modes"] < filters_rmse.min()
assert lt.loc["mode_accuracy", "gibbs"] > lt.loc["mode_accuracy", ["gpb1", "gpb2", "imm"]].max()

# %% [markdown]
# The sampler uses the whole series and is the most accurate method that has to infer the
# modes, close to the known-modes floor. Kim's smoothers, so much better than their filters on
# 12 steps, can be *worse* than the filters in position over a long series (compare `kim-imm`
# with `imm` above). The dynamics are nearly deterministic (small $\sigma_a$), so an error in
# velocity made by the collapse over the next mode at one manoeuvre is carried back by the RTS
# gains through many steps of almost noiseless motion, growing in position as it goes. The
# sampler makes no such approximation.
#
# Is it the approximation or the code? Below, Kim's recursion written out in NumPy, loop by
# loop, from the same IMM filter output: it must reproduce the library's smoothed means.


# %%
def kim_by_hand(p, filtered):
    """Kim's (1994) backward pass in NumPy: the smoothed means E[x_t | y_{1:T}], (T, d)."""
    F, b, Q, Pi = (
        np.asarray(a)
        for a in (p.dynamics_matrices, p.dynamics_biases, p.dynamics_covs, p.transition_matrix)
    )
    fm, fc, fp = (np.asarray(a) for a in (filtered.means, filtered.covs, filtered.mode_probs))
    T, M, d = fm.shape
    sm, sc, sp = fm[-1], fc[-1], fp[-1]  # smoothed per-mode moments and mode probabilities
    out = np.empty((T, d))
    out[-1] = sp @ sm
    for t in range(T - 2, -1, -1):
        U = fp[t][:, None] * Pi  # U[j, k] = P(s_t = j | s_{t+1} = k, y_{1:t})
        U /= U.sum(axis=0)
        joint = U * sp  # P(s_t = j, s_{t+1} = k | y_{1:T})
        sp_new = joint.sum(axis=1)
        W = joint / sp_new[:, None]  # W[j, k] = P(s_{t+1} = k | s_t = j, y_{1:T})
        new_m, new_c = np.empty((M, d)), np.empty((M, d, d))
        for j in range(M):
            ms, cs = [], []
            for k in range(M):  # RTS from N(m_t^j, P_t^j) through the dynamics of mode k
                pred_m, pred_c = F[k] @ fm[t, j] + b[k], F[k] @ fc[t, j] @ F[k].T + Q[k]
                G = fc[t, j] @ F[k].T @ np.linalg.pinv(pred_c, hermitian=True)
                ms.append(fm[t, j] + G @ (sm[k] - pred_m))
                cs.append(fc[t, j] + G @ (sc[k] - pred_c) @ G.T)
            ms, cs = np.array(ms), np.array(cs)
            new_m[j] = W[j] @ ms  # collapse over k
            dev = ms - new_m[j]
            new_c[j] = np.einsum("k,kab->ab", W[j], cs + dev[:, :, None] * dev[:, None, :])
        sm, sc, sp = new_m, new_c, sp_new
        out[t] = sp @ sm
    return out


kim_numpy = kim_by_hand(params, comparison.fits["imm"].result)
kim_gap = np.abs(kim_numpy - comparison.fits["kim-imm"].mean).max()
print(f"max |Kim in NumPy - library Kim| over {T_LONG} steps: {kim_gap:.2e}")
assert kim_gap < 1e-6

# %%
gibbs_tree = comparison.fits["gibbs"].result
imm_long = comparison.fits["imm"]
kim_long = comparison.fits["kim-imm"]
gibbs_fit = comparison.fits["gibbs"]
fig, axes = plt.subplots(
    2, 1, figsize=(12, 7), layout="constrained", gridspec_kw={"height_ratios": [3, 2]}
)
ax = axes[0]
ax.plot(states[:, 0], states[:, 2], "k", lw=2, label="truth")
ax.scatter(y[:, 0], y[:, 1], s=4, color="0.5", alpha=0.5, label="measurements")
ax.plot(imm_long.mean[:, 0], imm_long.mean[:, 2], lw=1, label="IMM filter")
ax.plot(kim_long.mean[:, 0], kim_long.mean[:, 2], lw=1, label="Kim smoother (IMM)")
ax.plot(gibbs_fit.mean[:, 0], gibbs_fit.mean[:, 2], lw=1.2, label="Gibbs posterior mean")
ax.set(xlabel="$p_x$", ylabel="$p_y$", title="trajectory and estimates", aspect="equal")
ax.legend(fontsize=8)
ax = axes[1]
t_all = np.arange(1, T_LONG + 1)
ax.fill_between(t_all, 0, modes, step="mid", color="0.85", label="true mode = 1")
ax.plot(t_all, imm_long.mode_probs[:, 1], lw=1, label="IMM filter")
ax.plot(t_all, kim_long.mode_probs[:, 1], lw=1, label="Kim smoother (IMM)")
ax.plot(t_all, gibbs_fit.mode_probs[:, 1], lw=1.2, label="Gibbs")
ax.set(xlabel="t", ylabel="$P(s_t = 1)$", title="mode probabilities over time", xlim=(1, T_LONG))
ax.legend(fontsize=8, ncols=4)
plt.show()
# %% [markdown]
# ## Attention as an IMM step
#
# Take $M$ tokens with hidden states $H_i \in \mathbb R^{d}$ (rows of $H$) and read them as the
# $M$ modes of a switching model, with
#
# * uniform mode probabilities $\pi_i = 1/M$ and the state of mode $i$ known exactly,
#   $x \mid s = i = H_i$ (a point mass: the message is its mean, the *expected sufficient
#   statistic*);
# * the transition kernel $\Pi_{ij} = \mathrm{softmax}_i(\langle H_i W_q, H_j W_k\rangle)$,
#   normalised over the previous mode $i$ (the note's eqs. 2 and 12), so each column sums to one
#   and the predicted mode probabilities stay $1/M$;
# * deterministic value dynamics $x \mapsto x W_v$, no noise and no observation.
#
# The IMM mixing weights are then $\mu_{i\mid j} = \Pi_{ij}\pi_i / \sum_{i'}\Pi_{i'j}\pi_{i'} =
# A_{ij}$, and the collapse followed by the prediction is
#
# $$H'_j = \sum_i A_{ij}\, H_i W_v ,$$
#
# the attention sublayer (scale 1, queries from $H W_k$, keys from $H W_q$).
# `attention_as_imm_step` builds that problem and runs the mixing (`imm_mixing`) and collapse
# code of `imm_filter`; it must equal attention computed by hand to round-off.
#
# **The exponential-family reading.** For a fixed query $q$, $A_{\cdot j}$ is the distribution
# $p(k_i \mid q) = \exp(\langle k_i, q\rangle - \log G(q)) / M$ on the discrete set of keys,
# with log-partition $\log G(q) = \log \frac1M\sum_i e^{\langle k_i, q\rangle}$. Its mean is
# $\nabla_q \log G(q) = \sum_i A_i k_i$ (attention with $V = K$) and its covariance the
# Hessian: the attention output is the mean parameter of an exponential family whose natural
# parameter is the query, exactly the moment-matched message of GPB/IMM. The note goes further:
# attention differs from GPB2/IMM in that the "transition" depends on the continuous messages
# themselves, and alternating between computing the kernel (a distribution over natural
# parameters given the current means) and the new means reads like a *deterministic* Gibbs
# sweep, each draw replaced by its expectation; stacking layers iterates it.

# %%
rng = np.random.default_rng(3)
num_tokens, d, d_k, d_v = 6, 4, 3, 5
H = rng.normal(size=(num_tokens, d))
Wq, Wk, Wv = rng.normal(size=(d, d_k)), rng.normal(size=(d, d_k)), rng.normal(size=(d, d_v))

H_new = np.asarray(attention_as_imm_step(H, Wq, Wk, Wv))
scores = (H @ Wq) @ (H @ Wk).T  # [i, j] = <H_i Wq, H_j Wk>
A = np.exp(scores - scores.max(axis=0))
A /= A.sum(axis=0)  # each column j a distribution over the previous mode i
by_hand = A.T @ (H @ Wv)  # H'_j = sum_i A_ij H_i Wv
library_attention = softmax_attention(H @ Wk, H @ Wq, H @ Wv, scale=1.0)
err_hand = np.abs(H_new - by_hand).max()
err_attention = np.abs(H_new - np.asarray(library_attention.output)).max()
print(f"max |IMM step - attention by hand|      = {err_hand:.2e}")
print(f"max |IMM step - softmax_attention(...)| = {err_attention:.2e}")
assert err_hand < 1e-12 and err_attention < 1e-12

# the mixing weights mu_{i|j} of imm_mixing are the attention matrix
_, log_mixing = imm_mixing(jnp.full(num_tokens, -np.log(num_tokens)), jax.nn.log_softmax(scores, 0))
err_mixing = np.abs(np.exp(np.asarray(log_mixing)) - A).max()
assert err_mixing < 1e-12

# exponential family: grad_q log G(q) = sum_i A_i k_i, the attention output with V = K
keys, query = H @ Wq, (H @ Wk)[0]


def log_g(q):
    return jax.scipy.special.logsumexp(keys @ q) - np.log(num_tokens)


err_grad = np.abs(np.asarray(jax.grad(log_g)(query)) - A[:, 0] @ keys).max()
print(f"max |mu_(i|j) - A_ij| = {err_mixing:.2e}, max |grad log G - attention| = {err_grad:.2e}")
assert err_grad < 1e-12

# %% [markdown]
# Left: the attention matrix $A$ (column $j$: the posterior of the "previous mode" $i$ given the
# new mode $j$). Right: the same object in the tracking filter, the IMM mixing weights
# $\mu_{i\mid j} = \pi_i \Pi_{ij} / c_j$ at each step of the long series, from the IMM filter's
# mode probabilities and $\Pi$ (checked against `imm_mixing` at the first manoeuvre): a
# two-token attention whose kernel is fixed ($\Pi$) and whose prior ($\pi_{t-1}$) moves with
# the data.

# %%
Pi = np.asarray(params.transition_matrix)
prev = imm_long.mode_probs[:-1]  # P(s_{t-1} = i | y_{1:t-1}), t = 2..T
joint = prev[:, :, None] * Pi[None]  # [t, i, j] = pi_i Pi_ij
mu = joint / joint.sum(axis=1, keepdims=True)  # mu_{i|j} = pi_i Pi_ij / c_j
t_check = int(np.argmax(modes[1:] != modes[:-1]))  # at the first manoeuvre
_, log_mu = imm_mixing(jnp.log(jnp.asarray(prev[t_check])), jnp.log(jnp.asarray(Pi)))
assert np.allclose(np.exp(np.asarray(log_mu)), mu[t_check], rtol=1e-12, atol=1e-15)

fig, axes = plt.subplots(
    1, 2, figsize=(12, 3.8), layout="constrained", gridspec_kw={"width_ratios": [1, 2.2]}
)
im = axes[0].imshow(A, cmap="viridis", vmin=0, vmax=1)
axes[0].set(
    xlabel="new mode / query token j",
    ylabel="previous mode / key token i",
    title="attention = IMM mixing weights",
    xticks=range(num_tokens),
    yticks=range(num_tokens),
)
fig.colorbar(im, ax=axes[0], shrink=0.8)
t_mix = np.arange(2, T_LONG + 1)
axes[1].fill_between(t_all, 0, modes, step="mid", color="0.85", label="true mode = 1")
axes[1].plot(t_mix, mu[:, 1, 0], lw=1, label=r"$\mu_{1|0}$: was turning, given now straight")
axes[1].plot(t_mix, mu[:, 0, 1], lw=1, label=r"$\mu_{0|1}$: was straight, given now turning")
axes[1].set(xlabel="t", ylabel="mixing weight", title="IMM mixing on the long series")
axes[1].set_xlim(1, T_LONG)
axes[1].legend(fontsize=8)
plt.show()

# %% [markdown]
# ## What this shows
#
# * On series short enough to enumerate, GPB2 and IMM (one Gaussian per mode) track the exact
#   filter closely, in mode probabilities, means and $\log p(y)$; GPB1 (one Gaussian in all)
#   is several times farther off. IMM gets GPB2's accuracy with $M$ instead of $M^2$ Kalman
#   updates by mixing before it predicts.
# * Kim's smoother cuts the distance to the exact smoother severalfold on short series, but its
#   collapse errors travel far back through stiff dynamics: on the long series it can lose to
#   the filter it starts from (a NumPy transcription of the recursion gives the same numbers:
#   the approximation, not the code). The collapsed Gibbs sampler matches the exact smoothing
#   posterior within Monte Carlo error where that can be checked, and on the long series it is
#   the most accurate method that infers the modes. The RBPF matches the exact filter up to
#   Monte Carlo error.
# * The IMM step is attention: with point-mass messages $H_i$, uniform mode probabilities, the
#   softmax kernel as transition and $W_v$ as dynamics, mixing and collapse give
#   $H'_j = \sum_i A_{ij} H_i W_v$ to round-off. The moment-matched message is the mean
#   parameter of the exponential family over keys, $\nabla_q \log G$.
# * What attention drops from IMM: the observation update (there is no $y_t$), the covariances
#   (messages are means only), and a fixed transition matrix; its kernel is computed from the
#   messages themselves, which is what makes a stack of layers an iterated, deterministic,
#   Gibbs-like sweep rather than a filter.
#
# To adapt: put your model in `SwitchingParams` (any $M$, $d$, $o$; $Q_j$ may be singular),
# check your approximate filter against `exact_filter` on short prefixes of your data, and use
# `run_switching_gibbs` as the reference on long series.
