"""NUTS on NumPyro programs, returned as an ArviZ 1.x DataTree, and its diagnostics.

``run_nuts`` is a thin, opinionated front to ``numpyro.infer.MCMC``: chains run in parallel
over JAX devices when there are enough of them (``XLA_FLAGS=--xla_force_host_platform_device_
count=N`` on a CPU), the posterior predictive is drawn for every observed site by running the
model with its observations removed (``numpyro.handlers.uncondition``), and the result carries
``posterior``, ``sample_stats``, ``log_likelihood``, ``posterior_predictive`` and
``observed_data`` groups with named dimensions, ready for ``az.loo`` and ``az.compare``.
"""

from __future__ import annotations

import inspect
import numbers
import time

import arviz as az
import jax
import xarray as xr
from numpyro.handlers import seed, substitute, trace, uncondition
from numpyro.infer import MCMC, NUTS, Predictive, init_to_uniform, init_to_value

from .. import validation

__all__ = [
    "CHAIN_METHODS",
    "EXTRA_FIELDS",
    "MIN_CHAINS",
    "MIN_DRAWS_PER_CHAIN",
    "MIN_TOTAL_DRAWS_LOO",
    "check_sampler_sizes",
    "run_nuts",
    "sampler_sizes",
]

CHAIN_METHODS = ("parallel", "sequential", "vectorized")
EXTRA_FIELDS = (
    "potential_energy",
    "energy",
    "diverging",
    "num_steps",
    "accept_prob",
    "adapt_state.step_size",
)


# Smallest sampler sizes for which every diagnostic the comparisons report is defined (ArviZ 1.x;
# tests/test_bad_input.py runs ArviZ at these bounds and one below):
MIN_CHAINS = 2  # rank-normalised R-hat compares chains: NaN with one chain
MIN_DRAWS_PER_CHAIN = 4  # split R-hat and bulk/tail ESS: NaN below 4 draws per chain
# PSIS-LOO fits a generalised Pareto to the largest floor(S / 5) importance ratios (S draws in
# all, S <= 225) and needs at least 5 of them (Vehtari et al. 2024, "Pareto smoothed importance
# sampling", JMLR; ArviZ refuses fewer): S >= 25.
MIN_TOTAL_DRAWS_LOO = 25


def sampler_sizes(sampler, kwargs: dict | None = None) -> dict:
    """The num_warmup, num_samples and num_chains that ``sampler(..., **kwargs)`` will use:
    ``kwargs`` over the defaults in the sampler's signature."""
    params = inspect.signature(sampler).parameters
    sizes = {
        name: params[name].default
        for name in ("num_warmup", "num_samples", "num_chains")
        if name in params and params[name].default is not inspect.Parameter.empty
    }
    sizes.update({k: v for k, v in (kwargs or {}).items() if k in sizes})
    return sizes


def check_sampler_sizes(
    num_samples: int,
    num_chains: int,
    *,
    loo: bool = False,
    names: tuple[str, str] = ("num_samples", "num_chains"),
    what: str = "",
) -> None:
    """Refuse sampler sizes for which R-hat, ESS (and with ``loo``, PSIS-LOO) are undefined.

    Run before sampling, so that a run is not wasted on sizes its diagnostics cannot use. The
    message names both options (``names``, e.g. ``("--draws", "--chains")``).
    """
    draws_name, chains_name = names
    num_samples = validation.check_positive_int(draws_name, num_samples)
    num_chains = validation.check_positive_int(chains_name, num_chains)
    prefix = f"{draws_name}/{chains_name}: {what + ': ' if what else ''}"
    sizes = f"{num_chains} chain(s) x {num_samples} draws"
    if num_chains < MIN_CHAINS:
        raise ValueError(
            f"{prefix}{sizes}: R-hat needs at least {MIN_CHAINS} chains (pass {chains_name} "
            f"{MIN_CHAINS} or more)"
        )
    if num_samples < MIN_DRAWS_PER_CHAIN:
        raise ValueError(
            f"{prefix}{sizes}: R-hat and ESS need at least {MIN_DRAWS_PER_CHAIN} draws per "
            f"chain (pass {draws_name} {MIN_DRAWS_PER_CHAIN} or more)"
        )
    if loo and num_samples * num_chains < MIN_TOTAL_DRAWS_LOO:
        need = -(-MIN_TOTAL_DRAWS_LOO // num_chains)
        raise ValueError(
            f"{prefix}{sizes}: PSIS-LOO needs at least {MIN_TOTAL_DRAWS_LOO} draws in all "
            f"(pass {draws_name} {need} or more with {num_chains} chains)"
        )


def _observed_sites(model, args, kwargs) -> list[str]:
    # latent sites take init_to_uniform values, so an improper site (ImproperUniform) traces too
    traced = substitute(seed(model, jax.random.PRNGKey(0)), substitute_fn=init_to_uniform)
    tr = trace(traced).get_trace(*args, **kwargs)
    return [
        name
        for name, site in tr.items()
        if site["type"] == "sample" and site["is_observed"] and not name.startswith("_")
    ]


def run_nuts(
    model,
    key: jax.Array,
    *args,
    num_warmup: int = 1000,
    num_samples: int = 1000,
    num_chains: int = 2,
    target_accept_prob: float = 0.8,
    max_tree_depth: int = 10,
    dense_mass: bool = False,
    init_values: dict | None = None,
    chain_method: str | None = None,
    dims: dict[str, list[str]] | None = None,
    coords: dict | None = None,
    progress_bar: bool = False,
    posterior_predictive: bool = True,
    **model_kwargs,
) -> xr.DataTree:
    """Run NUTS on ``model(*args, **model_kwargs)`` and return an ArviZ DataTree.

    Args:
        model: a NumPyro program with continuous latent sites.
        key: a ``jax.random`` key (split for sampling and the posterior predictive).
        *args, **model_kwargs: passed to the model.
        num_warmup, num_samples, num_chains: sampler sizes (per chain).
        target_accept_prob, max_tree_depth: NUTS settings.
        dense_mass: adapt a dense mass matrix (``True``) instead of a diagonal one.
        init_values: {site: value} to start every chain from (NumPyro's ``init_to_value``;
            sites not named start as NumPyro's default, uniform in (-2, 2) unconstrained).
        chain_method: "parallel" (one device per chain), "sequential" or "vectorized";
            default parallel when ``jax.local_device_count() >= num_chains``, else sequential.
        dims, coords: ArviZ dimension names and coordinates; default: inferred from plates.
        progress_bar: show NumPyro's progress bar.
        posterior_predictive: draw the observed sites under the posterior (one draw per
            posterior draw); ``False`` skips it (it costs a few seconds of compilation).

    Returns:
        A DataTree with groups posterior, sample_stats (diverging, energy, lp, step_size,
        n_steps, tree_depth, acceptance_rate), log_likelihood, posterior_predictive (unless
        switched off) and observed_data. ``posterior.attrs["sampling_time"]`` holds the wall
        time in seconds (compilation included) and ``attrs["chain_method"]`` how the chains ran.
    """
    if not callable(model):
        raise ValueError(f"model: expected a NumPyro program (a callable), got {model!r}")
    num_warmup = validation.check_positive_int("num_warmup", num_warmup, minimum=0)
    num_samples = validation.check_positive_int("num_samples", num_samples)
    num_chains = validation.check_positive_int("num_chains", num_chains)
    max_tree_depth = validation.check_positive_int("max_tree_depth", max_tree_depth)
    validation.check_key("key", key)
    if (
        isinstance(target_accept_prob, bool)
        or not isinstance(target_accept_prob, numbers.Real)
        or not 0 < float(target_accept_prob) < 1
    ):
        raise ValueError(
            f"target_accept_prob: must be a number in (0, 1), got {target_accept_prob!r}"
        )
    if chain_method is None:
        chain_method = "parallel" if jax.local_device_count() >= num_chains else "sequential"
    if chain_method not in CHAIN_METHODS:
        raise ValueError(f"chain_method: unknown {chain_method!r}; known: {list(CHAIN_METHODS)}")
    if num_chains == 1:
        chain_method = "sequential"
    observed = _observed_sites(model, args, model_kwargs)

    key_mcmc, key_pred = jax.random.split(key)
    if init_values is not None and not isinstance(init_values, dict):
        raise ValueError(f"init_values: expected a dict of site -> value, got {init_values!r}")
    if not isinstance(dense_mass, bool):
        raise ValueError(f"dense_mass: expected True or False, got {dense_mass!r}")
    kernel = NUTS(
        model,
        target_accept_prob=target_accept_prob,
        max_tree_depth=max_tree_depth,
        dense_mass=dense_mass,
        init_strategy=init_to_value(values=init_values) if init_values else init_to_uniform,
    )
    mcmc = MCMC(
        kernel,
        num_warmup=num_warmup,
        num_samples=num_samples,
        num_chains=num_chains,
        chain_method=chain_method,
        progress_bar=progress_bar,
    )
    start = time.perf_counter()
    mcmc.run(key_mcmc, *args, extra_fields=EXTRA_FIELDS, **model_kwargs)
    samples = mcmc.get_samples()
    jax.block_until_ready(samples)
    elapsed = time.perf_counter() - start

    predictive_draws = None
    if observed and posterior_predictive:
        predictive = Predictive(uncondition(model), samples, return_sites=observed)
        predictive_draws = predictive(key_pred, *args, **model_kwargs)
    datatree = az.from_numpyro(
        mcmc,
        log_likelihood=True,
        posterior_predictive=predictive_draws,
        dims=dims,
        coords=coords,
    )
    datatree["posterior"].attrs.update(
        sampling_time=elapsed,
        chain_method=chain_method,
        num_warmup=num_warmup,
        target_accept_prob=float(target_accept_prob),
    )
    return datatree
