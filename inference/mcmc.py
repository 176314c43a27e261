"""NUTS on NumPyro programs, compiled once per model and data shape, returned as an ArviZ 1.x
DataTree.

``run_nuts`` runs NumPyro's NUTS kernel (step-size and mass-matrix adaptation during warmup, as
``numpyro.infer.MCMC`` does) inside one jitted program that takes the data as arguments: init,
warmup and draws of every chain, the constrained samples and deterministic sites, the sampler
statistics and the pointwise log-likelihood. The program is cached, so a second call with new
data of the same shapes runs without compiling. The posterior predictive of the observed sites
(the model run with its observations removed, ``numpyro.handlers.uncondition``) is a second
cached program, compiled on another thread while the sampler compiles. The result carries
``posterior``, ``sample_stats``, ``log_likelihood``, ``posterior_predictive`` and
``observed_data`` groups with named dimensions, the layout of ``arviz.from_numpyro(mcmc,
log_likelihood=True)``, built from the arrays without tracing the model again, ready for
``az.loo`` and ``az.compare``.

ArviZ and xarray are imported when a DataTree is built, not when this module is imported.

The module is a little over 800 lines, on purpose: the runner, its cache of compiled programs
(``_Entry``: the sampler, the predictive, their placement and their compiling thread) and the
signature logic that decides which arguments are traced are one mechanism with private state;
split, that state would cross modules under plain names that no user should call.
"""

from __future__ import annotations

import collections
import inspect
import numbers
import sys
import threading
import time
import warnings
from collections.abc import Mapping
from typing import TYPE_CHECKING, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from .. import validation

if TYPE_CHECKING:
    import xarray as xr

__all__ = [
    "CHAIN_METHODS",
    "EXTRA_FIELDS",
    "MIN_CHAINS",
    "MIN_DRAWS_PER_CHAIN",
    "MIN_TOTAL_DRAWS_LOO",
    "NUTS_SETTINGS",
    "check_sampler_sizes",
    "clear_compiled_cache",
    "compiled_cache_info",
    "run_nuts",
    "run_nuts_unchecked",
    "sampler_sizes",
]

CHAIN_METHODS = ("parallel", "sequential", "vectorized")
# The NumPyro HMCState fields recorded per draw (names as in ``MCMC.get_extra_fields``).
EXTRA_FIELDS = (
    "potential_energy",
    "energy",
    "diverging",
    "num_steps",
    "accept_prob",
    "adapt_state.step_size",
)


# Smallest sampler sizes for which every diagnostic the comparisons report is defined (ArviZ 1.x;
# tests/inference/test_mcmc.py runs ArviZ at these bounds and one below):
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


# ----------------------------------------------------------------------------- model sites


class _Site(NamedTuple):
    """What the DataTree needs to know about a site, from one abstract trace of the model."""

    kind: str  # "sample" or "deterministic"
    observed: bool
    dims: tuple[str, ...]  # plate names (outermost first), then ``infer={"event_dims": ...}``


def _trace_model(model, args, kwargs):
    """NumPyro trace of ``model(*args, **kwargs)`` with latent sites at ``init_to_uniform``
    values (so an improper site, e.g. ``ImproperUniform``, traces too)."""
    from numpyro.handlers import seed, substitute, trace
    from numpyro.infer import init_to_uniform

    traced = substitute(seed(model, jax.random.PRNGKey(0)), substitute_fn=init_to_uniform)
    return trace(traced).get_trace(*args, **kwargs)


def _model_sites(model, args, kwargs) -> dict[str, _Site]:
    """Sites of the model, traced with the concrete arguments but without computing anything.

    The model sees the caller's arrays (its checks of concrete values run and raise their
    ``ValueError`` naming the argument, as in an eager run), while every JAX operation is only
    traced (``jax.eval_shape``): nothing is compiled or executed.
    """
    sites: dict[str, _Site] = {}

    def collect():
        for name, site in _trace_model(model, args, kwargs).items():
            if site["type"] not in ("sample", "deterministic"):
                continue
            frames = sorted(site.get("cond_indep_stack", ()), key=lambda frame: frame.dim)
            event_dims = (site.get("infer") or {}).get("event_dims", [])
            sites[name] = _Site(
                site["type"],
                bool(site.get("is_observed", False)),
                tuple(frame.name for frame in frames) + tuple(event_dims),
            )

    jax.eval_shape(collect)
    return sites


# ----------------------------------------------------------------------------- compiled programs


def _is_array(leaf) -> bool:
    return isinstance(leaf, np.ndarray | jax.Array)


def _static_token(leaf):
    """A hashable stand-in for a leaf compiled into the program as a constant."""
    if _is_array(leaf):
        arr = np.asarray(leaf)
        return ("array", arr.shape, arr.dtype.str, arr.tobytes())
    try:
        hash(leaf)
    except TypeError:
        return ("id", type(leaf), id(leaf))  # the cache entry keeps the object alive
    return ("value", type(leaf), leaf)


def _array_token(leaf):
    return (tuple(leaf.shape), np.dtype(leaf.dtype).str, bool(getattr(leaf, "weak_type", False)))


def _traces_abstractly(model, treedef, leaves, dynamic) -> bool:
    """Whether the model traces with the leaves marked ``dynamic`` as abstract arrays."""
    positions = [i for i, d in enumerate(dynamic) if d]
    shapes = [jax.ShapeDtypeStruct(np.shape(leaves[i]), leaves[i].dtype) for i in positions]

    def trial(values):
        filled = list(leaves)
        for i, v in zip(positions, values, strict=True):
            filled[i] = v
        args, kwargs, _ = jax.tree_util.tree_unflatten(treedef, filled)
        _trace_model(model, args, kwargs)

    try:
        jax.eval_shape(trial, shapes)
    except Exception:  # the concrete trace ran: this fails only because a leaf was abstract
        return False
    return True


# (model, treedef, array positions, static tokens, shapes, x64) -> which array leaves the model
# accepts as abstract arguments; decided once by abstract traces
_DYNAMIC_CHOICE: dict = {}


def _leaf_tokens(leaves, as_array) -> tuple:
    """A hashable token per leaf: shape and dtype where ``as_array``, else the value itself."""
    return tuple(
        _array_token(leaf) if a else _static_token(leaf)
        for leaf, a in zip(leaves, as_array, strict=True)
    )


def _choose_dynamic(model, treedef, leaves, top_level) -> tuple[bool, ...]:
    """Which array leaves become arguments of the compiled program (the rest are constants).

    Tried in turn, the first that traces wins: every array; the arrays passed directly as an
    argument (not inside a container such as a NamedTuple of parameters that the model checks
    with NumPy); none.
    """
    arrays = tuple(_is_array(leaf) for leaf in leaves)
    key = (
        model,
        treedef,
        _leaf_tokens(leaves, arrays),
        jax.config.read("jax_enable_x64"),
    )
    if key in _DYNAMIC_CHOICE:
        return _DYNAMIC_CHOICE[key]
    candidates = [arrays, tuple(a and t for a, t in zip(arrays, top_level, strict=True))]
    choice = tuple(False for _ in leaves)
    for candidate in candidates:
        if not any(candidate) or _traces_abstractly(model, treedef, leaves, candidate):
            choice = candidate
            break
    if len(_DYNAMIC_CHOICE) >= 256:  # a bound, like the cache of programs
        _DYNAMIC_CHOICE.clear()
    _DYNAMIC_CHOICE[key] = choice
    return choice


class _Settings(NamedTuple):
    num_warmup: int
    num_samples: int
    num_chains: int
    target_accept_prob: float
    max_tree_depth: int
    dense_mass: bool
    chain_method: str
    progress_bar: bool


def _nuts_chain(model, s, key, args, kwargs, init_values, log_likelihood_too=True):
    """Init, warmup and draws of one chain; constrained draws, statistics, log-likelihood."""
    from numpyro.infer import NUTS, init_to_uniform, init_to_value
    from numpyro.infer.util import log_likelihood

    kernel = NUTS(
        model,
        target_accept_prob=s.target_accept_prob,
        max_tree_depth=s.max_tree_depth,
        dense_mass=s.dense_mass,
        init_strategy=init_to_value(values=init_values) if init_values else init_to_uniform,
    )
    state = kernel.init(key, s.num_warmup, None, args, kwargs)

    def fields(st):
        return {
            "z": st.z,
            "potential_energy": st.potential_energy,
            "energy": st.energy,
            "diverging": st.diverging,
            "num_steps": st.num_steps,
            "accept_prob": st.accept_prob,
            "adapt_state.step_size": st.adapt_state.step_size,
        }

    buffers = jax.tree_util.tree_map(
        lambda v: jnp.zeros((s.num_samples, *jnp.shape(v)), jnp.result_type(v)),
        fields(state),
    )
    total = s.num_warmup + s.num_samples
    report_every = max(total // 10, 1)

    def body(i, carry):
        st, bufs = carry
        st = kernel.sample(st, args, kwargs)
        # warmup transitions write to slot 0, which the first draw overwrites: one loop
        # (one copy of the NUTS kernel in the program) for warmup and draws
        slot = jnp.maximum(i - s.num_warmup, 0)
        bufs = jax.tree_util.tree_map(
            lambda buf, v: jax.lax.dynamic_update_index_in_dim(buf, v, slot, 0),
            bufs,
            fields(st),
        )
        if s.progress_bar:
            jax.lax.cond(
                (i + 1) % report_every == 0,
                lambda: jax.debug.callback(_report_progress, i + 1, total),
                lambda: None,
            )
        return st, bufs

    _, draws = jax.lax.fori_loop(0, total, body, (state, buffers))
    z = draws.pop("z")
    samples = jax.vmap(kernel.postprocess_fn(args, kwargs))(z)
    if not log_likelihood_too:
        return samples, draws, None
    loglik = log_likelihood(model, samples, *args, parallel=True, **kwargs)
    return samples, draws, loglik


class _Entry:
    """A cache entry: the compiled sampler, the compiled predictive (when first asked for)
    and the model's sites."""

    def __init__(self, model, treedef, leaves, dynamic, settings: _Settings, sites):
        self.model = model
        self.treedef = treedef
        # the static leaves, compiled in as constants (the arrays' slots are filled per call)
        self.static = [None if d else leaf for leaf, d in zip(leaves, dynamic, strict=True)]
        self.positions = [i for i, d in enumerate(dynamic) if d]
        self.settings = settings
        self.sites = sites
        from jax.sharding import Mesh, NamedSharding, PartitionSpec, SingleDeviceSharding

        if settings.chain_method == "parallel":
            self.mesh = Mesh(np.asarray(jax.local_devices()[: settings.num_chains]), ("chain",))
            # the data replicated on the chains' devices; draws split over them
            self.placement = NamedSharding(self.mesh, PartitionSpec())
            out_shardings = (NamedSharding(self.mesh, PartitionSpec("chain")), self.placement)
        else:
            self.placement = out_shardings = SingleDeviceSharding(jax.local_devices()[0])
        # Output placements are fixed, so that the predictive can be compiled (on another
        # thread) while the sampler compiles, before any draw exists.
        self._sampler_jit = jax.jit(self._sampler, out_shardings=out_shardings)
        self._predictive_jit = jax.jit(self._predictive)
        self.sampler = self.predictive = self._draws_info = None  # compiled executables

    def prepare(self, key, values, predictive: bool) -> threading.Thread | None:
        """Compile what is missing: the sampler and, with ``predictive``, the predictive
        program (on a thread, while the sampler compiles; join the returned thread)."""
        traced = None
        if self.sampler is None:
            traced = self._sampler_jit.trace(key, values)
            self._draws_info = traced.out_info[0][0]
        thread = None
        if predictive and self.predictive is None:
            pred_traced = self._predictive_jit.trace(key, self._draws_info, values)
            if traced is None:
                self.predictive = pred_traced.lower().compile()
            else:
                errors = []

                def compile_predictive():
                    try:
                        self.predictive = pred_traced.lower().compile()
                    except BaseException as err:  # re-raised on the caller's thread
                        errors.append(err)

                thread = threading.Thread(target=compile_predictive, daemon=True)
                thread.errors = errors
                thread.start()
        if traced is not None:
            try:
                self.sampler = traced.lower().compile()
            finally:
                if thread is not None and self.sampler is None:
                    thread.join()
        return thread

    def unpack(self, values):
        leaves = list(self.static)
        for i, v in zip(self.positions, values, strict=True):
            leaves[i] = v
        return jax.tree_util.tree_unflatten(self.treedef, leaves)

    def _chain(self, key, args, kwargs, init_values):
        """Init, warmup and draws of one chain; constrained draws, statistics, log-likelihood."""
        return _nuts_chain(self.model, self.settings, key, args, kwargs, init_values)

    def _sampler(self, key, values):
        args, kwargs, init_values = self.unpack(values)
        s = self.settings
        keys = jax.random.split(key, s.num_chains)

        def chains(ks, vals):
            a, kw, iv = self.unpack(vals)
            return jax.lax.map(lambda k: self._chain(k, a, kw, iv), ks)

        if s.chain_method == "vectorized":
            out = jax.vmap(lambda k: self._chain(k, args, kwargs, init_values))(keys)
        elif s.chain_method == "parallel":  # one chain per device
            from jax.sharding import PartitionSpec

            out = jax.shard_map(
                chains,
                mesh=self.mesh,
                in_specs=(PartitionSpec("chain"), PartitionSpec()),
                out_specs=PartitionSpec("chain"),
                check_vma=False,
            )(keys, values)
        else:
            out = chains(keys, values)
        observed = {
            name: site["value"]
            for name, site in _trace_model(self.model, args, kwargs).items()
            if site["type"] == "sample" and site["is_observed"]
        }
        return out, observed

    def _predictive(self, key, samples, values):
        """One draw of every observed site (not named ``_...``) per posterior draw."""
        from numpyro.handlers import seed, substitute, trace, uncondition

        names = [n for n, site in self.sites.items() if site.observed and not n.startswith("_")]
        latent = [
            n for n, site in self.sites.items() if site.kind == "sample" and not site.observed
        ]
        s = self.settings
        keys = jnp.reshape(
            jax.random.split(key, s.num_chains * s.num_samples), (s.num_chains, s.num_samples, -1)
        )

        def one(draw, k, a, kw):
            model = seed(substitute(uncondition(self.model), data=draw), k)
            tr = trace(model).get_trace(*a, **kw)
            return {n: tr[n]["value"] for n in names}

        def chains(ks, draws, vals):  # (chains, draws, ...) -> (chains, draws, ...)
            # One vmap over chains x draws, not a vmap of a vmap: the same draws, but NumPyro's
            # key splits then compile as one batched loop (a DP mixture's predictive compiled
            # in 2.5 s instead of 9.6 s).
            a, kw, _ = self.unpack(vals)
            lead = ks.shape[:2]
            flat = jax.tree_util.tree_map(
                lambda v: jnp.reshape(v, (-1, *jnp.shape(v)[2:])),
                ({n: draws[n] for n in latent if n in draws}, ks),
            )
            out = jax.vmap(lambda d, k: one(d, k, a, kw))(*flat)
            return jax.tree_util.tree_map(lambda v: jnp.reshape(v, (*lead, *v.shape[1:])), out)

        if s.chain_method == "parallel":  # each device draws for its own chains
            from jax.sharding import PartitionSpec

            chain_spec = PartitionSpec("chain")
            return jax.shard_map(
                chains,
                mesh=self.mesh,
                in_specs=(chain_spec, chain_spec, PartitionSpec()),
                out_specs=chain_spec,
                check_vma=False,
            )(keys, samples, values)
        return chains(keys, samples, values)


def _report_progress(done, total) -> None:
    print(f"NUTS: {int(done)}/{int(total)} iterations", file=sys.stderr, flush=True)


_CACHE_SIZE = 32
_CACHE: collections.OrderedDict = collections.OrderedDict()
_CACHE_STATS = {"hits": 0, "misses": 0}


def compiled_cache_info() -> dict:
    """{"hits", "misses", "size", "maxsize"} of the cache of compiled samplers (a miss is a new
    compilation of the sampler)."""
    return {**_CACHE_STATS, "size": len(_CACHE), "maxsize": _CACHE_SIZE}


def clear_compiled_cache() -> None:
    """Forget every compiled sampler (and the counts of ``compiled_cache_info``)."""
    _CACHE.clear()
    _DYNAMIC_CHOICE.clear()
    _CACHE_STATS.update(hits=0, misses=0)


def _entry(model, args, kwargs, init_values, settings: _Settings, sites) -> tuple[_Entry, list]:
    """The cached compiled sampler for these settings and argument shapes, and its arguments."""
    tree = (tuple(args), dict(kwargs), init_values)
    leaves, treedef = jax.tree_util.tree_flatten(tree)

    # which leaves are the top-level arguments themselves (not inside a container), in the
    # order of ``leaves`` (a dict flattens in sorted key order)
    def flags(part, top: bool | None = None):
        sub = jax.tree_util.tree_leaves(part)
        is_top = (len(sub) == 1 and sub[0] is part) if top is None else top
        return jax.tree_util.tree_map(lambda _: is_top, part)

    top_level = jax.tree_util.tree_leaves(
        (
            tuple(flags(a) for a in args),
            {name: flags(v) for name, v in kwargs.items()},
            flags(init_values, top=True),
        )
    )
    assert len(top_level) == len(leaves)
    dynamic = _choose_dynamic(model, treedef, leaves, top_level)
    key = (
        model,
        treedef,
        _leaf_tokens(leaves, dynamic),
        settings,
        jax.config.read("jax_enable_x64"),
    )
    values = [leaf for leaf, d in zip(leaves, dynamic, strict=True) if d]
    if key in _CACHE:
        _CACHE.move_to_end(key)
        _CACHE_STATS["hits"] += 1
        return _CACHE[key], values
    _CACHE_STATS["misses"] += 1
    entry = _Entry(model, treedef, leaves, dynamic, settings, sites)
    _CACHE[key] = entry
    while len(_CACHE) > _CACHE_SIZE:
        _CACHE.popitem(last=False)
    return entry, values


# ----------------------------------------------------------------------------- DataTree


def _datatree(samples, stats, loglik, predictive, observed, dims, coords, max_tree_depth):
    """The layout of ``arviz.from_numpyro(mcmc, log_likelihood=True, posterior_predictive=...)``,
    built from arrays (no trace of the model)."""
    import numpyro
    import xarray as xr
    from arviz_base import dict_to_dataset, rc_context, rcParams

    with rc_context(rc={"data.sample_dims": ["chain", "draw"]}):
        index_origin = rcParams["data.index_origin"]

        def dataset(data, dims_, **kwargs):
            return dict_to_dataset(
                data,
                inference_library=numpyro,
                coords=coords,
                dims=dims_,
                index_origin=index_origin,
                **kwargs,
            )

        stat_names = {
            "potential_energy": "lp",
            "adapt_state.step_size": "step_size",
            "num_steps": "n_steps",
            "accept_prob": "acceptance_rate",
        }
        sample_stats = {}
        for field in EXTRA_FIELDS:
            value = stats[field]
            name = stat_names.get(field, field)
            sample_stats[name] = -value if field == "potential_energy" else value
            if field == "num_steps":
                depth = np.log2(value).astype(int) + 1
                sample_stats["tree_depth"] = depth
                sample_stats["reached_max_tree_depth"] = depth >= max_tree_depth
        groups = {
            "posterior": dataset(samples, dims),
            "sample_stats": dataset(sample_stats, None),
            "log_likelihood": dataset(loglik, dims, skip_event_dims=True),
            "posterior_predictive": None if predictive is None else dataset(predictive, dims),
            "observed_data": dataset(observed, dims, sample_dims=[]) if observed else None,
        }
    return xr.DataTree.from_dict({g: ds for g, ds in groups.items() if ds is not None})


# ----------------------------------------------------------------------------- run_nuts


def check_model_arguments(model_args, model_kwargs) -> tuple[tuple, dict]:
    """``model_args`` as a tuple and ``model_kwargs`` as a dict (``None``: empty), or a
    ValueError naming the one that is neither (a bare array passed as ``model_args`` is the
    usual slip: wrap it, ``(x,)``)."""
    if not isinstance(model_args, tuple | list):
        raise ValueError(
            "model_args: expected a tuple of the model's positional arguments, e.g. (x,); "
            f"got {type(model_args).__name__}"
        )
    if model_kwargs is None:
        model_kwargs = {}
    if not isinstance(model_kwargs, Mapping) or not all(isinstance(k, str) for k in model_kwargs):
        raise ValueError(
            "model_kwargs: expected a dict of the model's keyword arguments, "
            f"got {type(model_kwargs).__name__}"
        )
    return tuple(model_args), dict(model_kwargs)


def run_nuts(
    key: jax.Array,
    model,
    model_args: tuple = (),
    model_kwargs: dict | None = None,
    *,
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
) -> xr.DataTree:
    """Run NUTS on ``model(*model_args, **model_kwargs)`` and return an ArviZ DataTree.

    The model's arguments and the sampler's settings are apart (as NumPyro's
    ``MCMC(NUTS(model), num_warmup=...).run(key, *args, **kwargs)``): the model's go in
    ``model_args`` and ``model_kwargs``, the settings are keyword-only, so a model argument
    may have any name, ``num_samples`` included.

    NumPyro's NUTS kernel (``numpyro.infer.NUTS``: dual-averaging step size and windowed
    mass-matrix adaptation during warmup) runs every chain in one jitted program, which also
    computes the constrained draws, deterministic sites, sampler statistics and pointwise
    log-likelihood. The program is compiled once and cached (the 32 most recent): **a call with
    new data of the same shapes and dtypes reuses it** without compiling. A new compilation
    comes with a new model function (a new ``functools.partial`` is a new function), new
    shapes or dtypes of an array argument, a new value of a non-array argument (Python and
    NumPy scalars, strings, ``None``: e.g. ``sigma=1.0`` against ``sigma=2.0``, so pass a
    number that changes with the data as a 0-d array), new sampler settings (num_warmup,
    num_samples, num_chains, target_accept_prob, max_tree_depth, dense_mass, chain_method,
    progress_bar), new sites in ``init_values`` (their values are arguments), or a change of
    ``jax_enable_x64``. Array arguments are arguments of the program, except those the model
    cannot take abstract (the model fails to trace without their values, e.g. it checks them
    with NumPy; tried once per signature): those arrays are compiled in as constants, so new
    values of them compile anew. The posterior predictive is a second cached program, compiled
    when first asked for (on a second thread, while the sampler compiles).
    ``compiled_cache_info()`` counts the compilations (misses); ``clear_compiled_cache()``
    forgets them. Each call still traces the model once with its concrete arguments (no
    compiling): the model's own checks of them (e.g. non-finite data) raise as before.

    Args:
        key: a ``jax.random`` key (split for sampling and the posterior predictive); first
            and positional, as in ``MCMC.run(rng_key, ...)``.
        model: a NumPyro program with continuous latent sites.
        model_args: the model's positional arguments (a tuple).
        model_kwargs: the model's keyword arguments (a dict; default none).
        num_warmup, num_samples, num_chains: sampler sizes (per chain).
        target_accept_prob, max_tree_depth: NUTS settings.
        dense_mass: adapt a dense mass matrix (``True``) instead of a diagonal one.
        init_values: {site: value} to start every chain from (NumPyro's ``init_to_value``;
            sites not named start as NumPyro's default, uniform in (-2, 2) unconstrained).
        chain_method: "parallel" (one device per chain, ``jax.shard_map``), "sequential"
            (``lax.map`` over chains) or "vectorized" (``vmap``), all inside the one program;
            default parallel when ``jax.local_device_count() >= num_chains``, else sequential
            (also what "parallel" falls back to, with a warning, without enough devices).
        dims, coords: ArviZ dimension names and coordinates; default: inferred from plates.
        progress_bar: print the iteration count every 10% of the iterations (stderr).
        posterior_predictive: draw the observed sites under the posterior (one draw per
            posterior draw); ``False`` skips it (and its compilation).

    Returns:
        A DataTree with groups posterior, sample_stats (diverging, energy, lp, step_size,
        n_steps, tree_depth, reached_max_tree_depth, acceptance_rate), log_likelihood,
        posterior_predictive (unless switched off) and observed_data. ``posterior.attrs``:
        ``sampling_time``, the wall time in seconds of the sampling program (compilation
        included when it compiled; the log-likelihood included), ``chain_method`` (how the
        chains ran), ``num_warmup`` and ``target_accept_prob``.
    """
    if not callable(model):
        raise ValueError(f"model: expected a NumPyro program (a callable), got {model!r}")
    args, model_kwargs = check_model_arguments(model_args, model_kwargs)
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
    if chain_method == "parallel" and jax.local_device_count() < num_chains:
        warnings.warn(
            f"chain_method: 'parallel' needs {num_chains} devices, found "
            f"{jax.local_device_count()}; the chains run sequentially",
            stacklevel=2,
        )
        chain_method = "sequential"
    # the model's own checks of its concrete arguments (ValueErrors naming them), no compiling
    sites = _model_sites(model, args, model_kwargs)
    if init_values is not None and not isinstance(init_values, dict):
        raise ValueError(f"init_values: expected a dict of site -> value, got {init_values!r}")
    if not isinstance(dense_mass, bool):
        raise ValueError(f"dense_mass: expected True or False, got {dense_mass!r}")
    if progress_bar not in (True, False):
        raise ValueError(f"progress_bar: expected True or False, got {progress_bar!r}")
    if not isinstance(posterior_predictive, bool):
        raise ValueError(
            f"posterior_predictive: expected True or False, got {posterior_predictive!r}"
        )
    init = {name: np.asarray(v) for name, v in init_values.items()} if init_values else None

    if jax.dtypes.issubdtype(key.dtype, jax.dtypes.prng_key):
        key = jax.random.key_data(key)  # the same draws as for the raw key of the same seed
    settings = _Settings(
        num_warmup,
        num_samples,
        num_chains,
        float(target_accept_prob),
        max_tree_depth,
        dense_mass,
        chain_method,
        bool(progress_bar),
    )
    entry, values = _entry(model, args, model_kwargs, init, settings, sites)
    has_predictive = posterior_predictive and any(
        site.observed and not name.startswith("_") for name, site in sites.items()
    )
    # one placement whatever the caller passed (NumPy, or JAX arrays on some device): the
    # compiled programs take their arguments where they were compiled for
    values = jax.device_put(values, entry.placement)
    key_mcmc, key_pred = np.asarray(jax.random.split(key))

    start = time.perf_counter()
    compiling = entry.prepare(key_mcmc, values, has_predictive)
    (samples, stats, loglik), observed = entry.sampler(key_mcmc, values)  # runs asynchronously
    if compiling is not None:
        compiling.join()
        if compiling.errors:
            raise compiling.errors[0]
    jax.block_until_ready((samples, stats, loglik))
    elapsed = time.perf_counter() - start
    predictive = entry.predictive(key_pred, samples, values) if has_predictive else None
    samples, stats, loglik, predictive, observed = jax.device_get(
        (samples, stats, loglik, predictive, observed)
    )
    if dims is None:
        dims = {name: list(site.dims) for name, site in sites.items() if site.dims}
    datatree = _datatree(samples, stats, loglik, predictive, observed, dims, coords, max_tree_depth)
    datatree["posterior"].attrs.update(
        sampling_time=elapsed,
        chain_method=chain_method,
        num_warmup=num_warmup,
        target_accept_prob=float(target_accept_prob),
    )
    return datatree


# the sampler's settings ``run_nuts`` takes (its keyword-only arguments): what a caller holding
# settings and model options in one dict (a comparison's ``nuts_kwargs``) sends to each
NUTS_SETTINGS = tuple(
    name
    for name, parameter in inspect.signature(run_nuts).parameters.items()
    if parameter.kind is inspect.Parameter.KEYWORD_ONLY
)


def run_nuts_unchecked(
    key: jax.Array,
    model,
    model_args: tuple = (),
    model_kwargs: dict | None = None,
    *,
    num_warmup: int = 1000,
    num_samples: int = 1000,
    num_chains: int = 2,
    target_accept_prob: float = 0.8,
    max_tree_depth: int = 10,
    dense_mass: bool = False,
    chain_method: str = "sequential",
) -> tuple[dict, dict]:
    """The traceable kernel of ``run_nuts``: NumPyro's NUTS on
    ``model(*model_args, **model_kwargs)``, returning arrays rather than a DataTree.

    The same chains as ``run_nuts(..., chain_method=chain_method)`` (init uniform in (-2, 2)
    unconstrained, dual-averaging step size and windowed diagonal or dense mass adaptation
    during warmup), without checks, caching or a DataTree: a pure function of ``key`` and the
    model's arrays, to be ``jax.jit``-ted and ``jax.vmap``-ped over data sets (``sbc`` runs it
    for a chunk of replicates in one program). The sizes and settings are static.

    ``chain_method``: "sequential" (``lax.map`` over chains; the default) or "vectorized"
    (``vmap``). Under an outer ``vmap`` over data sets, sequential chains batch NUTS's nested
    while loops once rather than twice: for ``sbc``'s chunk of 24 replicates of a K = 2,
    N = 50 mixture this traced in 3.2 s instead of 10.4 s and compiled in 8.9 s instead of
    11.7 s, and ran as fast (each batched loop runs until its slowest lane).

    Returns:
        (samples, stats): ``samples`` maps every latent and deterministic site to an array
        (num_chains, num_samples, ...); ``stats`` has ``diverging``, ``num_steps``,
        ``accept_prob``, ``potential_energy``, ``energy`` and ``adapt_state.step_size``, each
        (num_chains, num_samples).
    """
    args, model_kwargs = check_model_arguments(model_args, model_kwargs)
    num_warmup = validation.check_positive_int("num_warmup", num_warmup, minimum=0)
    num_samples = validation.check_positive_int("num_samples", num_samples)
    num_chains = validation.check_positive_int("num_chains", num_chains)
    max_tree_depth = validation.check_positive_int("max_tree_depth", max_tree_depth)
    if chain_method not in ("sequential", "vectorized"):
        raise ValueError(
            f"chain_method: expected 'sequential' or 'vectorized', got {chain_method!r}"
        )
    settings = _Settings(
        num_warmup,
        num_samples,
        num_chains,
        float(target_accept_prob),
        max_tree_depth,
        bool(dense_mass),
        chain_method,
        False,
    )
    keys = jax.random.split(key, num_chains)

    def chain(k):
        return _nuts_chain(model, settings, k, args, model_kwargs, None, False)[:2]

    return jax.vmap(chain)(keys) if chain_method == "vectorized" else jax.lax.map(chain, keys)
