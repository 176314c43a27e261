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
# # 05 · Model comparison and posterior diagnostics
#
# The other notebooks fit one model at a time. Here the question is which model, and whether
# the sampler can be trusted to answer it.
#
# 1. **How many atoms?** The deconvolution model ("Attention as deconvolution") $x_i = z_i +
# \sigma\varepsilon_i$,    $z_i \sim \nu = \sum_{k=1}^K w_k \delta(\mu_k)$, fitted for $K = 1,
# \dots, 4$ and compared    by the expected log pointwise predictive density, estimated by
# Pareto-smoothed importance    sampling leave-one-out cross-validation (PSIS-LOO).
# 2. **Finite or Dirichlet-process prior?** The same comparison between the finite mixture
#    with $K = 3$ and a truncated Dirichlet process that has to find the number of atoms.
# 3. **Posterior diagnostics done right.** R-hat, bulk and tail ESS, divergences, trace and
#    rank plots, and why they must be computed on quantities that do not depend on how the
#    atoms are labelled; then a posterior predictive check.
# 4. **How many modes?** The switching state-space model ("Attention as GPB2/IMM message passing")
# with 1, 2 (and 3) modes, where    the data are a time series, LOO is the wrong question, and the
# comparison is by held-out    one-step-ahead predictions (leave-future-out).
#
# `N` (environment variable `ATTNBAYES_NB_N`) sets the number of deconvolution data points; the
# tests run it small, with shorter chains, a shorter time series and two switching models
# instead of three.

# %%
import os
import warnings

from attnbayes.app.devices import use_every_core

use_every_core()  # one host device per core, before JAX starts (a user's XLA_FLAGS count wins)
import jax
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import xarray as xr
from IPython.display import display

with warnings.catch_warnings():  # NumPyro imports tqdm.auto, which warns that ipywidgets is absent
    warnings.filterwarnings("ignore", message="IProgress not found")
    import arviz_plots as azp
    import arviz_stats as azs

    from attnbayes.app.cache import enable_compilation_cache
    from attnbayes.inference.deconvolution.gibbs import run_gibbs
    from attnbayes.inference.deconvolution.invariants import (
        INVARIANT_NAMES,
        add_invariants,
        measure_cdf,
    )
    from attnbayes.inference.diagnostics import diagnostics
    from attnbayes.inference.mcmc import run_nuts
    from attnbayes.inference.model_comparison import (
        compare_num_atoms,
        compare_num_modes,
        loo_compare,
    )
    from attnbayes.models import deconvolution, switching

jax.config.update("jax_enable_x64", True)
enable_compilation_cache()  # JAX's persistent cache: attnbayes.app.cache, ATTNBAYES_CACHE_DIR

N = int(os.environ.get("ATTNBAYES_NB_N", "400"))
SMALL = N < 400
NUTS_DRAWS = 1000  # per chain, after as many warmup steps (compilation dominates the cost)
GIBBS_DRAWS = 2000 if SMALL else 3000  # Gibbs sweeps are cheap but mix more slowly
SIGMA = 1.0
measure = deconvolution.get_measure("three-atoms")
z, x = deconvolution.simulate(jax.random.PRNGKey(1), measure, SIGMA, N)
x = np.asarray(x)
print(f"N = {N}, true atoms {measure.atoms}, weights {measure.weights}, sigma = {SIGMA}")

# %% [markdown]
# ## 1 · How many atoms? PSIS-LOO
#
# For exchangeable data the natural yardstick of a model $M$ is how well it predicts a new
# point, estimated by leaving each observed point out in turn:
#
# $$\widehat{\mathrm{elpd}}_{\text{loo}} = \sum_{i=1}^N \log p(x_i \mid x_{-i}), \qquad
# p(x_i \mid x_{-i}) = \frac{1}{\mathbb E_{\theta \sim p(\theta\mid x)}
# \big[1 / p(x_i \mid \theta)\big]} .$$
#
# The second identity holds because the $x_i$ are conditionally independent given
# $\theta = (w, \mu)$, so one posterior sample $\theta^{(s)}$, $s = 1..S$, gives all $N$
# leave-one-out predictive densities by importance sampling with ratios
# $r_i^{(s)} \propto 1/p(x_i \mid \theta^{(s)})$. Those ratios have a heavy right tail when
# the posterior without $x_i$ differs much from the posterior with it (an influential point);
# PSIS replaces the largest ratios by quantiles of a generalised Pareto fit to the tail. The
# fitted shape $\hat k_i$ is the diagnostic: the estimate is reliable for
# $\hat k_i < \min(1 - 1/\log_{10} S, 0.7)$ (Vehtari et al. 2024).
#
# Two models are compared by the difference of their $\widehat{\mathrm{elpd}}$ and its
# standard error computed from the *paired* pointwise differences,
# $\mathrm{dse} = \sqrt{N\,\widehat{\mathrm{var}}_i(\widehat{\mathrm{elpd}}_{A,i} -
# \widehat{\mathrm{elpd}}_{B,i})}$, far smaller than either model's own se because both models
# find the same points hard. Stacking weights $a$ maximise
# $\sum_i \log \sum_m a_m\, p(x_i \mid x_{-i}, M_m)$: the best predictive mixture of the
# candidates, which need not put weight on every good model.
#
# `compare_num_atoms` fits the finite Dirichlet mixture ($w \sim \mathrm{Dirichlet}(\mathbf
# 1_K)$, $\mu_k \sim \mathcal N(0, 5^2)$, atoms reported in increasing order) for each $K$ with
# the conjugate Gibbs sampler and passes the DataTrees, each with its `log_likelihood` group,
# to `az.compare`. Its summary adds the largest $\hat k$ and the sampler's R-hat and bulk ESS
# of $\sum_i \log p(x_i \mid \theta)$, which does not depend on the atoms' labels.

# %%
gibbs_kwargs = {"num_warmup": GIBBS_DRAWS, "num_samples": GIBBS_DRAWS, "num_chains": 2}
atoms_cmp = compare_num_atoms(
    jax.random.PRNGKey(2),
    x,
    SIGMA,
    (1, 2, 3, 4),
    sampler_kwargs=gibbs_kwargs | {"ordered": True},
)
table = atoms_cmp.table
display(table[["elpd", "se", "p", "elpd_diff", "dse", "weight"]].round(2))
display(atoms_cmp.summary.drop(columns="num_atoms").round(3))

# %% [markdown]
# The expected reading: one or two atoms cannot produce the three bumps, and are worse by many
# dse; from $K = 3$ on the models predict equally well. A fourth atom is absorbed (it duplicates
# a true atom or keeps a tiny weight) and costs almost nothing in effective parameters, so
# $K = 3$ and $K = 4$ are indistinguishable: their elpd difference is below 4, where
# Sivula et al. (2022) advise against reading anything into it (and where its normal
# approximation is also poor). The stacking weight splits arbitrarily between such
# near-duplicate models; it does not say that one is better.
#
# The difference between $K = 2$ and $K = 3$ grows like $N$ and its dse like $\sqrt N$, so
# the evidence against two atoms grows like $\sqrt N$: with 200 points it is about two dse,
# with 600 about four. The one-atom model is also badly misspecified,
# which shows in its $p_{\text{loo}}$: about 4 for a model with one parameter (for a
# well-specified model $p_{\text{loo}}$ is near the number of parameters).
#
# Checks: the best model has at least three atoms; $K = 1$ is worse by more than 4 and two dse,
# $K = 2$ by more than 4 and 1.5 dse; $K = 3, 4$ together take more than 90% of the stacking
# weight, differ by less than 4 in elpd and by less than 2 in effective parameters
# $p_{\text{loo}}$; $K = 1$ shows its misspecification ($p_{\text{loo}} > 2$ for one
# parameter); and every $\hat k$ is below 0.7.

# %%
k_of = {name: int(name.split("=")[1]) for name in table.index}
best = table.index[0]
print(f"best: {best}")
assert k_of[best] >= 3, table
for name, factor in (("K = 1", 2.0), ("K = 2", 1.5)):
    diff, dse = table.loc[name, ["elpd_diff", "dse"]]
    print(f"{name}: elpd_diff = {diff:.1f} = {diff / dse:.1f} dse")
    assert diff < -4 and diff < -factor * dse, (name, diff, dse)
weight_3_4 = table.loc[["K = 3", "K = 4"], "weight"].sum()
print(f"stacking weight of K = 3 and K = 4 together: {weight_3_4:.3f}")
assert weight_3_4 > 0.9
diff_34 = table.loc["K = 3", "elpd"] - table.loc["K = 4", "elpd"]
p_34 = table.loc["K = 4", "p"] - table.loc["K = 3", "p"]
print(f"K = 3 vs K = 4: elpd difference {diff_34:.2f}, p_loo difference {p_34:.2f}")
assert abs(diff_34) < 4 and p_34 < 2
assert table.loc["K = 1", "p"] > 2
assert (atoms_cmp.summary["pareto_k_max"] < 0.7).all(), atoms_cmp.summary

# %% [markdown]
# Left: $\widehat{\mathrm{elpd}}_{\text{loo}}$ against $K$ with its standard error. Middle: the
# difference from the best model with $\pm 2$ dse, the scale on which the models are actually
# compared ($K = 1$ is far below the frame). Right: the Pareto $\hat k_i$ of every point against
# $x_i$: all far below the threshold, since with a few parameters and hundreds of points no
# single point moves the posterior much.

# %%
loo_k = {name: azs.loo(tree, pointwise=True) for name, tree in atoms_cmp.datatrees.items()}
ks = np.array([k_of[name] for name in table.index])
order = np.argsort(ks)
fig, ax = plt.subplots(1, 3, figsize=(14, 3.8), layout="constrained")
ax[0].errorbar(ks[order], table["elpd"].to_numpy()[order], table["se"].to_numpy()[order], fmt="o-")
ax[0].set(xlabel="K (atoms)", ylabel="elpd_loo", title="PSIS-LOO by number of atoms")
ax[0].set_xticks(ks[order])
ax[1].errorbar(
    ks[order], table["elpd_diff"].to_numpy()[order], 2 * table["dse"].to_numpy()[order], fmt="o"
)
ax[1].axhline(0, color="k", lw=0.8)
ax[1].axhline(-4, color="grey", ls=":", lw=1, label="-4: a negligible difference")
ax[1].set(xlabel="K (atoms)", ylabel="elpd_diff ± 2 dse", title="difference from the best")
ax[1].set_xticks(ks[order])
ax[1].set_ylim(min(-10, 1.3 * table.loc["K = 2", "elpd_diff"]), 3)
ax[1].legend(loc="lower right")
for name, result in loo_k.items():
    ax[2].scatter(x, np.asarray(result.pareto_k), s=6, label=name)
ax[2].axhline(0.7, color="r", ls="--", lw=1, label="0.7")
ax[2].set(xlabel="x_i", ylabel="Pareto k", title="PSIS diagnostics per point")
ax[2].legend(markerscale=2, fontsize=8)
plt.show()

# %% [markdown]
# ## 2 · Finite mixture or Dirichlet process?
#
# The finite mixture above had to be told $K$. The truncated stick-breaking Dirichlet process
# (Sethuraman 1994; Ishwaran & James 2001) puts a prior on measures with infinitely many atoms
# and lets the data decide how many carry weight:
#
# $$\alpha \sim \mathrm{Gamma}(2, 2), \quad v_k \mid \alpha \sim \mathrm{Beta}(1, \alpha), \quad
# w_k = v_k \prod_{l<k} (1 - v_l), \quad \mu_k \sim \mathcal N(0, 5^2), \quad k = 1..12,$$
#
# with $w_{12}$ the rest of the stick. Both models run under NUTS with the assignments
# summed out; the finite one with ordered atoms (the `SortedNormal` prior, which removes the
# $K!$ relabelled copies of the posterior without changing any permutation-invariant
# quantity). `loo_compare` checks that the models share the observations and calls
# `az.compare`; the Gibbs fit of the same finite model from section 1 is added as a control,
# since two samplers of one posterior must give the same elpd up to Monte Carlo error.

# %%
nuts_kwargs = {"num_warmup": NUTS_DRAWS, "num_samples": NUTS_DRAWS, "posterior_predictive": False}
finite = run_nuts(
    jax.random.PRNGKey(3),
    deconvolution.deconvolution_model,
    (x,),
    {"sigma": SIGMA, "num_atoms": 3, "ordered": True},
    dims=deconvolution.model_dims(True),
    **nuts_kwargs,
)
dp = run_nuts(
    jax.random.PRNGKey(4),
    deconvolution.deconvolution_model,
    (x,),
    {"sigma": SIGMA, "num_atoms": 12, "prior": "dp"},
    dims=deconvolution.model_dims(True, "dp"),
    target_accept_prob=0.9,  # smaller steps for the funnel between alpha and the sticks
    **nuts_kwargs,
)
prior_cmp = loo_compare(
    {
        "finite K = 3 (NUTS)": finite,
        "DP, 12 sticks (NUTS)": dp,
        "finite K = 3 (Gibbs)": atoms_cmp.datatrees["K = 3"],
    }
)
display(prior_cmp[["elpd", "se", "p", "elpd_diff", "dse", "weight"]].round(2))

# %% [markdown]
# What the DP learned: the weights it puts on its atoms (sorted by size within each draw), the
# number of atoms that carry more than 1% of the mass, and two label-free summaries of each
# posterior draw $\nu^{(s)}$: the CDF $F^{(s)}(t) = \sum_k w_k^{(s)} 1[\mu_k^{(s)} \le t]$ and
# the density of $x$ it implies, $f^{(s)}(t) = \sum_k w_k^{(s)} \mathcal N(t; \mu_k^{(s)},
# \sigma^2)$, whose posterior mean is the posterior predictive density of a new point.


# %%
grid = np.linspace(x.min() - 1, x.max() + 1, 300)
step = grid[1] - grid[0]


def measure_draws(tree):
    """Atoms and weights of every posterior draw, as (S, K)."""
    post = tree["posterior"]
    k = post.sizes["atom"]
    return np.asarray(post["atoms"]).reshape(-1, k), np.asarray(post["weights"]).reshape(-1, k)


def density_of_x(atoms, weights):
    """(S, G): the density of x at the grid under each draw of nu."""
    resid = (grid[None, :, None] - atoms[:, None, :]) / SIGMA
    kernel = np.exp(-0.5 * resid**2) / (SIGMA * np.sqrt(2 * np.pi))
    return np.einsum("sgk,sk->sg", kernel, weights)


fits = {"finite K = 3": finite, "DP": dp}
cdf = {name: np.asarray(measure_cdf(*measure_draws(tree), grid)) for name, tree in fits.items()}
dens = {name: density_of_x(*measure_draws(tree)) for name, tree in fits.items()}
true_dens = density_of_x(np.asarray(measure.atoms)[None], np.asarray(measure.weights)[None])[0]
dp_weights = np.sort(measure_draws(dp)[1], axis=1)[:, ::-1]
num_big = (dp_weights > 0.01).sum(axis=1)
alpha = np.asarray(dp["posterior"]["dp_concentration"]).ravel()
colours = {"finite K = 3": "tab:orange", "DP": "tab:green"}
fig, ax = plt.subplots(1, 4, figsize=(17, 3.6), layout="constrained")
ax[0].boxplot(dp_weights[:, :6], showfliers=False)
ax[0].axhline(0.01, color="grey", ls=":", lw=1)
ax[0].set(xlabel="rank of the atom's weight", ylabel="w", title="DP: sorted weights")
values, counts = np.unique(num_big, return_counts=True)
ax[1].bar(values, counts / counts.sum())
ax[1].set(
    xlabel="atoms with w > 1%", title=f"DP: occupied atoms (E[alpha | x] = {alpha.mean():.2f})"
)
ax[2].step(
    grid, measure_cdf(measure.atoms, measure.weights, grid), "k", where="post", label="truth"
)
for name, draws in cdf.items():
    lo, hi = np.quantile(draws, [0.05, 0.95], axis=0)
    ax[2].fill_between(grid, lo, hi, step="post", alpha=0.35, color=colours[name], label=name)
ax[2].set(xlabel="t", ylabel="F(t)", title="CDF of the mixing measure, 90% bands")
ax[2].legend()
ax[3].hist(x, bins=40, density=True, color="lightgrey", label="data")
ax[3].plot(grid, true_dens, "k", lw=1, label="truth")
for name, draws in dens.items():
    ax[3].plot(grid, draws.mean(0), color=colours[name], lw=1.5, label=name)
ax[3].set(xlabel="x", title="posterior predictive density")
ax[3].legend(fontsize=8)
plt.show()

# %% [markdown]
# The DP spreads the mass over more atoms than the three of the truth: in most draws four to
# six atoms carry more than 1%. The posterior of a Dirichlet-process mixture on the number of
# components does not concentrate at the true number (Miller & Harrison 2013, 2014); it adds
# small atoms that split or smear the true ones. Prediction does not suffer, as the LOO table
# showed, but the number of occupied atoms of a DP fit is not an estimate of $K$.
#
# How close are the two posteriors? Measure the distance between their posterior means against
# each posterior's own spread, the average distance of a draw from its posterior mean: in $L^1$
# for the densities of $x$, and in the Wasserstein distance $W_1(\nu, \nu') = \int |F(t) -
# F'(t)|\,dt$ for the mixing measures.
#
# Checks: the three fits predict equally well (pairwise elpd differences below 4); the
# predictive densities under the two priors differ by less than half the posterior spread,
# and the mixing measures by less than the posterior spread (deconvolution is ill-posed: the
# data pin down the density of $x$ much better than $\nu$ itself, so the prior shows more in
# $\nu$); and most DP draws put more than 1% of the mass on at least three atoms (a DP may split
# an atom into two nearby ones, so the count is not expected to be exactly three).


# %%
def gap_and_spread(draws):
    """L1 distance between the two posterior means, and each posterior's mean L1 spread."""
    means = {name: d.mean(0) for name, d in draws.items()}
    gap = np.sum(np.abs(means["finite K = 3"] - means["DP"])) * step
    spread = {
        name: np.mean(np.sum(np.abs(d - means[name]), axis=1)) * step for name, d in draws.items()
    }
    return gap, min(spread.values())


dens_gap, dens_spread = gap_and_spread(dens)
w1_gap, w1_spread = gap_and_spread(cdf)
elpd_range = prior_cmp["elpd"].max() - prior_cmp["elpd"].min()
print(f"largest elpd difference between the three fits: {elpd_range:.2f}")
print(f"density of x: L1 between the posterior means {dens_gap:.3f}, spread {dens_spread:.3f}")
print(f"mixing measure: W1 between the posterior means {w1_gap:.3f}, spread {w1_spread:.3f}")
print(f"P(at least 3 atoms above 1% | x) under the DP: {np.mean(num_big >= 3):.3f}")
assert elpd_range < 4, prior_cmp
assert dens_gap < 0.5 * dens_spread
assert w1_gap < w1_spread
assert np.mean(num_big >= 3) > 0.9

# %% [markdown]
# ## 3 · Posterior diagnostics done right
#
# ### The label-switching lesson
#
# The likelihood and the iid prior of an unordered mixture are invariant under the $K!$
# permutations of $(\mu, w)$, so the posterior has $K!$ copies of every mode. A chain that
# finds one copy seldom crosses to another, and two chains started at random usually land in
# different copies. Then "atom 1" means the atom near $-2$ in one chain and the atom near 3 in
# the other: per-atom R-hat explodes although every chain samples the posterior correctly.
#
# The Gibbs sampler below runs the unordered model with two chains deliberately started in
# opposite labellings (what random starts do with probability $1 - 1/K!$ per pair of chains).
# `add_invariants` adds what every labelling agrees on: the denoised $E[z_i \mid x_i, \nu]$
# (`z_mean`, the attention output), the CDF of $\nu$ on a grid (`nu_cdf`) and
# $\sum_i \log p(x_i \mid \nu)$ (`log_lik_total`). `diagnostics` computes the rank-normalised
# split R-hat and bulk/tail ESS (Vehtari et al. 2021) of every scalar element.

# %%
start = np.quantile(x, [0.1, 0.5, 0.9])
unordered = run_gibbs(
    jax.random.PRNGKey(5),
    x,
    SIGMA,
    num_atoms=3,
    init=np.stack([start, start[::-1]]),
    **gibbs_kwargs,
)
unordered = add_invariants(jax.random.PRNGKey(6), unordered, x, SIGMA)
raw = diagnostics(unordered, var_names=["atoms", "weights"])
invariant = diagnostics(unordered, var_names=list(INVARIANT_NAMES))
relabelled = unordered.copy()
post = unordered["posterior"].to_dataset()
order_draws = np.argsort(np.asarray(post["atoms"]), axis=-1)
for name in ("atoms", "weights"):
    sorted_values = np.take_along_axis(np.asarray(post[name]), order_draws, axis=-1)
    post[name] = post[name].copy(data=sorted_values)
relabelled["posterior"] = post
sorted_diag = diagnostics(relabelled, var_names=["atoms", "weights"])
display(raw.table.round(3))
summary = pd.DataFrame(
    {
        name: {
            "max R-hat": d.max_r_hat,
            "min ESS bulk": d.min_ess_bulk,
            "min ESS tail": d.min_ess_tail,
        }
        for name, d in {
            "raw atoms, weights": raw,
            "invariants": invariant,
            "atoms, weights sorted per draw": sorted_diag,
        }.items()
    }
).T
display(summary.round(3))

# %% [markdown]
# Each chain on its own is fine; the chains disagree about names. The trace of the raw atoms
# shows two stable but differently labelled chains; the total log-likelihood, which does not
# care about labels, mixes. In one dimension sorting the atoms in every draw is a complete
# relabelling (it is what `ordered=True` does inside the model); in $p$ dimensions there is no
# such canonical order, and the invariant quantities are the safe choice.

# %%
fig, ax = plt.subplots(1, 3, figsize=(14, 3.4), layout="constrained")
for c, colour in enumerate(("tab:blue", "tab:orange")):
    raw_atoms = np.asarray(unordered["posterior"]["atoms"].isel(chain=c))
    ax[0].plot(raw_atoms[:, 0], color=colour, lw=0.5, label=f"chain {c}")
    ax[1].plot(np.asarray(post["atoms"].isel(chain=c)), color=colour, lw=0.5)
    ax[2].plot(
        np.asarray(unordered["posterior"]["log_lik_total"].isel(chain=c)), color=colour, lw=0.5
    )
ax[0].set(title=f"raw atoms[0]: R-hat {raw.table.loc['atoms[0]', 'r_hat']:.2f}", xlabel="draw")
ax[0].legend()
ax[1].set(title="atoms sorted per draw", xlabel="draw")
ax[2].set(
    title=f"log_lik_total: R-hat {invariant.table.loc['log_lik_total', 'r_hat']:.3f}",
    xlabel="draw",
)
plt.show()

# %% [markdown]
# Checks: the raw per-atom R-hat flags a failure that is not there (above 1.5), while every
# invariant quantity and the relabelled atoms pass (R-hat below 1.05).

# %%
print(
    f"max R-hat: raw {raw.max_r_hat:.2f}, invariants {invariant.max_r_hat:.3f}, "
    f"sorted per draw {sorted_diag.max_r_hat:.3f}"
)
assert raw.max_r_hat > 1.5
assert invariant.max_r_hat < 1.05, invariant.table["r_hat"].nlargest(3)
assert sorted_diag.max_r_hat < 1.05

# %% [markdown]
# ### R-hat, ESS, divergences
#
# For the two NUTS fits: R-hat compares the chains' rank-normalised split halves (above 1.01
# the chains do not yet agree); bulk ESS is the effective number of independent draws for the
# centre of the distribution (means, medians), tail ESS for its 5% and 95% quantiles
# (intervals); Vehtari et al. (2021) ask for at least 100 per chain. A divergent transition
# means the leapfrog integrator met curvature it could not follow, and the draws may be biased
# away from that region; hitting the maximum tree depth means the sampler was cut short. The
# finite model's atoms are ordered, so its raw parameters are identified. The DP's are not
# (empty atoms wander with the prior, and atoms can exchange roles), so it is judged on
# $\alpha$ and on two invariants computed from the draws: $\log p(x \mid \nu)$ and the CDF of
# $\nu$ on a grid (what `add_invariants` adds, without the per-point $E[z_i\mid x_i, \nu]$).
# The concentration $\alpha$ is the DP's slowest quantity: the data inform it only through
# how many sticks are occupied, and it moves together with all the sticks (a mild funnel). Its
# ESS is checked against 100 in total, the invariants against 100 per chain.

# %%
finite_diag = diagnostics(finite, var_names=["atoms", "weights"])
dp_ll = dp["log_likelihood"]["x"].sum("point")
dp_cdf = cdf["DP"].reshape(dp_ll.shape + grid.shape)[..., ::10]  # every 10th grid point
dp_inv = dp.copy()
dp_post = dp["posterior"].to_dataset()
dp_post["log_lik_total"] = dp_ll
dp_post["nu_cdf"] = (("chain", "draw", "cdf_point"), dp_cdf)
dp_inv["posterior"] = dp_post
dp_diag = diagnostics(dp_inv, var_names=["dp_concentration", "log_lik_total", "nu_cdf"])
dp_raw = diagnostics(dp, var_names=["atoms"])
stats = {
    name: {
        "max R-hat": d.max_r_hat,
        "min ESS bulk": d.min_ess_bulk,
        "min ESS tail": d.min_ess_tail,
        "divergences": d.num_divergences,
        "max tree depth hit": int((np.asarray(tree["sample_stats"]["tree_depth"]) >= 10).sum()),
    }
    for name, d, tree in (
        ("finite: atoms, weights", finite_diag, finite),
        ("DP: alpha, invariants", dp_diag, dp),
        ("DP: raw atoms", dp_raw, dp),
    )
}
display(pd.DataFrame(stats).T.round(3))

# %%
print(finite_diag.table.round(3))
assert finite_diag.num_divergences == 0 and dp_diag.num_divergences == 0
assert finite_diag.max_r_hat < 1.01
assert min(finite_diag.min_ess_bulk, finite_diag.min_ess_tail) > 100 * finite_diag.num_chains
assert dp_diag.max_r_hat < 1.02
dp_invariants = dp_diag.table.drop(index="dp_concentration")
print(dp_diag.table.loc["dp_concentration"].round(3))
assert dp_invariants[["ess_bulk", "ess_tail"]].min().min() > 100 * dp_diag.num_chains
assert dp_diag.table.loc["dp_concentration", ["ess_bulk", "ess_tail"]].min() > 100
assert stats["finite: atoms, weights"]["max tree depth hit"] == 0

# %% [markdown]
# Trace plots of the finite model (ArviZ 1.x, `arviz_plots`): each chain's density on the
# left (solid and dashed lines), its trace on the right. Then rank plots: the draws of all
# chains are ranked together; if the chains sample the same distribution, each chain's ranks
# are uniform. The plot shows, per chain, the ECDF of its fractional ranks minus the uniform
# CDF, and the p-value of ArviZ's simultaneous test of uniformity across chains (small p: the
# chains disagree). First the ordered atoms of the NUTS fit, then the raw atoms of the
# unordered Gibbs fit from the label-switching lesson, where each chain's ranks fill one half
# of the range (the draws that drive the test are drawn thick).

# %%
azp.plot_trace_dist(finite, var_names=["atoms", "weights"])
plt.gcf().set_size_inches(11, 6)

# %%
for tree, title in (
    (finite, "NUTS, ordered atoms"),
    (unordered, "Gibbs, unordered atoms, chains in different labellings"),
):
    azp.plot_rank(tree, var_names=["atoms"])
    plt.gcf().set_size_inches(11, 2.8)
    plt.gcf().suptitle(title, y=1.12)
plt.show()

# %% [markdown]
# ### Posterior predictive check
#
# A model can win a comparison and still be wrong (the comparison is among the candidates).
# The posterior predictive distribution draws replicate data sets $x^{\text{rep}} \sim
# p(x^{\text{rep}} \mid \theta^{(s)})$, one per posterior draw; the Gibbs DataTrees carry them
# in their `posterior_predictive` group. Overlaid densities (`azp.plot_ppc_dist`) for $K = 1$
# and $K = 3$, and posterior predictive p-values $P(T(x^{\text{rep}}) \ge T(x) \mid x)$ of a
# few statistics $T$: values near 0 or 1 mean that the model cannot reproduce that feature of
# the data.

# %%
for name in ("K = 1", "K = 3"):
    azp.plot_ppc_dist(atoms_cmp.datatrees[name], num_samples=60)
    plt.gcf().set_size_inches(6, 3)
    plt.gcf().axes[0].set_title(f"posterior predictive, {name}: 60 replicates (blue), x (black)")


def skew(a):
    c = a - a.mean(axis=-1, keepdims=True)
    return (c**3).mean(axis=-1) / (c**2).mean(axis=-1) ** 1.5


STATS = {
    "sd": lambda a: a.std(axis=-1),
    "skewness": skew,
    "share in (-1, 1)": lambda a: ((a > -1) & (a < 1)).mean(axis=-1),
    "share below -3": lambda a: (a < -3).mean(axis=-1),
}
pvalues = {}
for name in ("K = 1", "K = 2", "K = 3"):
    x_rep = np.asarray(atoms_cmp.datatrees[name]["posterior_predictive"]["x"]).reshape(-1, N)
    pvalues[name] = {s: float(np.mean(f(x_rep) >= f(x))) for s, f in STATS.items()}
pvalues = pd.DataFrame(pvalues)
display(pvalues.round(3))

# %% [markdown]
# Checks: $K = 3$ passes every statistic (p-values in $(0.01, 0.99)$); $K = 1$, a single
# normal with variance $\sigma^2$, cannot produce the spread of the data.

# %%
assert ((pvalues["K = 3"] > 0.01) & (pvalues["K = 3"] < 0.99)).all(), pvalues
assert pvalues.loc["sd", "K = 1"] < 0.01

# %% [markdown]
# ## 4 · How many modes? Leave-future-out for a time series
#
# The switching linear-Gaussian state-space model: a target on the plane with state
# $x_t = (p_x, v_x, p_y, v_y)$, a mode $s_t$ following a Markov chain, and
#
# $$x_t = F_{s_t} x_{t-1} + w_t,\ w_t \sim \mathcal N(0, c_{s_t} Q_{s_t}), \qquad
# y_t = H x_t + v_t,\ v_t \sim \mathcal N(0, r_{s_t} R),$$
#
# mode 0 constant velocity, the others coordinated turns at fixed rates. The candidates have
# 1 mode (constant velocity only), 2 modes (plus a 3°/step left turn, the model that
# generated the data) and 3 modes (plus a right turn). The Gibbs sampler draws the modes, the
# states and the unknown parameters: the transition matrix (sticky Dirichlet rows) and the
# scales $c_j, r_j$ (inverse-gamma).
#
# **Why not LOO.** PSIS-LOO as used above rests on $p(y \mid \theta) = \prod_i p(y_i \mid
# \theta)$, which is false here: the $y_t$ are dependent given the parameters. Putting the
# states into $\theta$ restores the product, but then leaving $y_t$ out still conditions on
# $y_{t+1}$, which pins $x_t$ down from the future: it scores interpolation by a smoother, not
# prediction. For a forecasting model the question is how well it predicts the next
# observation from the past,
#
# $$\mathrm{elpd}_{\text{LFO}} = \sum_{t=L+1}^{T} \log p(y_t \mid y_{1:t-1}), \qquad
# p(y_t \mid y_{1:t-1}) = \mathbb E_{\theta \sim p(\theta\mid y_{1:t-1})}
# \big[p(y_t \mid y_{1:t-1}, \theta)\big],$$
#
# with $p(y_t \mid y_{1:t-1}, \theta)$ from the IMM filter (states and modes summed out; exact
# for one mode). Refitting at every $t$ would cost $T - L$ Gibbs runs. Approximate LFO
# (Bürkner, Gabry & Vehtari 2020; ArviZ `lfo_cv`) fits once on $y_{1:L}$ and moves the posterior
# forward by importance sampling with ratios $\prod_{u} p(y_u \mid y_{1:u-1}, \theta)$ over the
# steps since the last fit, Pareto-smoothed; when the Pareto $\hat k$ of these ratios exceeds
# 0.7, it refits on $y_{1:t-1}$ (`SwitchingGibbsWrapper` masks the future as missing, so a refit
# reuses the compiled sampler).

# %%
T_STEPS, MIN_OBS = (60, 45) if SMALL else (120, 80)
SWITCH_DRAWS = 2000  # per chain, after 1000 warmup sweeps; compilation dominates the cost
rates = {"1 mode": (), "2 modes": (3.0,), "3 modes": (3.0, -3.0)}
if SMALL:  # each number of modes compiles its own sampler
    rates.pop("3 modes")
true_modes, true_states, y = switching.simulate(
    jax.random.PRNGKey(3), switching.maneuvering_target(), T_STEPS
)
true_modes, y = np.asarray(true_modes), np.asarray(y)
candidates = {name: switching.maneuvering_target(turn_rates_deg=r) for name, r in rates.items()}
modes_cmp = compare_num_modes(
    jax.random.PRNGKey(7),
    candidates,
    y,
    min_observations=MIN_OBS,
    gibbs_kwargs={"num_warmup": 1000, "num_samples": SWITCH_DRAWS, "num_chains": 2},
)
display(modes_cmp.table[["elpd", "se", "elpd_diff", "dse", "weight"]].round(2))
display(modes_cmp.summary.round(3))

# %% [markdown]
# Left: the measurements, coloured by the true mode. Middle: the cumulative pointwise
# difference $\sum_{u \le t} [\log p(y_u \mid y_{1:u-1}, M) - \log p(y_u \mid y_{1:u-1},
# M_1)]$ over the held-out steps, with the true turns shaded; refits marked. Right: the
# Pareto $\hat k$ at each forecast origin (empty at the first origin and at refits, where the
# posterior is exact).

# %%
lfo = modes_cmp.lfo
held = np.arange(MIN_OBS, T_STEPS)
elpd_t = {name: np.asarray(result.elpd_i) for name, result in lfo.items()}
fig, ax = plt.subplots(1, 3, figsize=(15, 4), layout="constrained")
ax[0].plot(y[:, 0], y[:, 1], color="grey", lw=0.6)
ax[0].scatter(y[:, 0], y[:, 1], c=true_modes, cmap="coolwarm", s=10)
ax[0].scatter(
    *y[MIN_OBS], marker="x", color="k", s=60, label=f"first held-out step (t = {MIN_OBS + 1})"
)
ax[0].set(xlabel="y_1", ylabel="y_2", title="measurements (red: turning)")
ax[0].legend(fontsize=8)
turning = true_modes[held] > 0
for t, turn in zip(held, turning, strict=True):
    if turn:
        ax[1].axvspan(t + 0.5, t + 1.5, color="tab:red", alpha=0.12, lw=0)
for name in list(lfo)[1:]:
    ax[1].plot(held + 1, np.cumsum(elpd_t[name] - elpd_t["1 mode"]), "o-", ms=3, label=name)
    ax[1].vlines(np.asarray(lfo[name].refits) + 1, -1, 1, color="k", lw=0.8)
ax[1].axhline(0, color="k", lw=0.8)
ax[1].set(
    xlabel="t", ylabel="cumulative elpd difference vs 1 mode", title="cumulative gain over 1 mode"
)
ax[1].legend()
for name, result in lfo.items():
    ax[2].plot(held + 1, np.asarray(result.pareto_k), "o", ms=4, label=name)
ax[2].axhline(0.7, color="r", ls="--", lw=1, label="refit threshold")
ax[2].set(xlabel="t (forecast origin + 1)", ylabel="Pareto k", title="PSIS between refits")
ax[2].legend(fontsize=8)
plt.show()

# %% [markdown]
# Where the gain comes from. With one mode, the only way to follow a turn is to call it process
# noise, so the posterior inflates the scale $c$ of the constant-velocity $Q$, and the one-step
# predictive is wider at every step. With a turn mode, the straight-flight scale $c_0$ stays
# near the value that generated the data (1) and the turns go to their own mode. So the
# switching model earns its advantage on *straight* flight, where its predictive is sharper,
# and gives some of it back at the onset of a turn, when it still predicts a straight line
# until the filter's mode probabilities catch up; the one-mode model, wide everywhere, is hurt
# less by the surprise. The measurement noise (sd 10 per coordinate) dominates the one-step
# predictive, so the gain per step is small, and with a few dozen held-out steps the evidence
# for the second mode is modest (compare elpd_diff with dse above); the third mode, a right
# turn the target never makes, neither helps nor costs much.
#
# Convergence of the Gibbs fits: `compare_num_modes` reports R-hat and bulk ESS of the sampled
# parameters; the slowest is $c_0$, which is tied to the sampled states (a variance parameter
# of a latent process, updated given that process, mixes slowly; Frühwirth-Schnatter 1994).
# The quantity the comparison uses is the one-step log predictive density at each draw, and
# its sum over time is checked separately.
#
# Checks: every model is scored on the same $T - L$ held-out steps and its pointwise terms add
# up to its elpd; importance sampling never ran past its threshold; the chains agree (R-hat of
# the parameters below 1.1, of the summed log predictive density below 1.02); the two-mode
# model that generated the data ranks above the one-mode model; the one-mode model's
# process-noise scale is several times the two-mode model's straight-flight scale; and the
# two-mode model's mean pointwise gain is larger on straight steps than on turning steps.

# %%
for name, result in lfo.items():
    assert result.n_data_points == T_STEPS - MIN_OBS
    assert np.isclose(elpd_t[name].sum(), result.elpd)
    k = np.asarray(result.pareto_k)
    assert np.all(k[np.isfinite(k)] <= 0.7)
log_pred_rhat = {}
for name, tree in modes_cmp.datatrees.items():
    total = tree["log_likelihood"]["observations"].sum("time")
    log_pred = xr.DataTree.from_dict({"posterior": xr.Dataset({"log_pred_total": total})})
    log_pred_rhat[name] = diagnostics(log_pred).max_r_hat
print(
    "R-hat of sum_t log p(y_t | y_1:t-1, theta):",
    {n: round(float(v), 3) for n, v in log_pred_rhat.items()},
)
assert (modes_cmp.summary["max_rhat"] < 1.1).all(), modes_cmp.summary
assert max(log_pred_rhat.values()) < 1.02
assert modes_cmp.table.loc["2 modes", "elpd"] > modes_cmp.table.loc["1 mode", "elpd"]
scale = {
    name: np.median(np.asarray(tree["posterior"]["dynamics_cov_scale"])[..., 0])
    for name, tree in modes_cmp.datatrees.items()
}
print(
    "posterior median of the constant-velocity scale c_0:",
    {n: round(float(v), 2) for n, v in scale.items()},
)
assert scale["1 mode"] > 3 * scale["2 modes"]
gain = elpd_t["2 modes"] - elpd_t["1 mode"]
turning = true_modes[held] > 0
print(
    f"2 modes vs 1, mean gain per step: {gain[~turning].mean():.3f} on {(~turning).sum()} "
    f"straight steps, {gain[turning].mean():.3f} on {turning.sum()} turning steps"
)
assert turning.any() and (~turning).any()
assert gain[~turning].mean() > gain[turning].mean()

# %% [markdown]
# ## What this shows
#
# * PSIS-LOO orders the finite mixtures as it should: one atom is worse by many standard errors
#   of the paired difference, two atoms by a margin that grows like $\sqrt N$, and three and four
#   predict equally well; the Pareto $\hat k$ certify the importance-sampling estimate for every
#   point. Read an elpd difference against its dse, not against each model's se, read a
#   difference below 4 as none, and do not read stacking weights among near-identical models
#   as a ranking.
# * The Dirichlet-process prior, which was not told the number of atoms, predicts as well as the
#   finite mixture that was. The two posteriors give nearly the same predictive density of $x$
#   and mixing measures that differ by less than their own uncertainty, which is much larger:
#   deconvolution is ill-posed, and the data say more about the density of $x$ than about
#   $\nu$. Two samplers of the finite posterior (NUTS and Gibbs) agree on elpd.
# * Diagnostics must be computed on what the model identifies. Per-atom R-hat of an unordered
#   mixture flags chains that are merely labelled differently; R-hat and ESS of $E[z_i\mid
#   x_i,\nu]$, the CDF of $\nu$ and $\log p(x \mid \nu)$ are the honest ones (and, in one
#   dimension, the sorted atoms). With them, no divergences, R-hat near 1, bulk and tail ESS
#   above 100 per chain, rank plots inside their envelopes and a passing posterior predictive
#   check, the fit can be used. The DP's concentration $\alpha$ is its slowest quantity; the
#   DP runs with a higher target acceptance rate as a guard against its funnel.
# * For a time series LOO answers the wrong question. Leave-future-out scores the one-step-ahead
#   predictions a forecaster would make, and the approximate version needs a refit only when
#   the Pareto $\hat k$ of the importance ratios crosses 0.7; the posterior of a few parameters
#   moves little with each new observation, so the $\hat k$ stay low. The cumulative pointwise
#   difference shows when a model earns its advantage, and the answer is not the obvious one:
#   the turn mode pays off on straight flight, because without it the one-mode model must
#   inflate its process noise to follow the turns and predicts too widely everywhere. The
#   advantage is modest here, since measurement noise dominates the one-step predictive. The
#   switching Gibbs sampler mixes slowly on the noise scales, so its diagnostics matter as much
#   as the mixture's.
#
# To adapt: replace `x` and `SIGMA` (or `y` and the candidate `SwitchingParams`), compare models
# on paired differences with their dse, keep the $\hat k$ checks, and diagnose
# permutation-invariant quantities.
