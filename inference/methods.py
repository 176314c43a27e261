"""The method registry: every method the comparisons, the report and the CLI can run.

A ``Method`` names the algorithm it runs (``fit``), the settings it runs with unless told
otherwise (``defaults``: the one set of defaults, which ``compare_deconvolution``,
``compare_switching``, the report and ``attnbayes deconvolve | filter`` all read), a label for
tables and figures, and what it returns:

- ``"draws"``: posterior draws (MCMC), summarised by quantiles; rank statistics apply;
- ``"intervals"``: a point estimate with intervals (plug-in empirical Bayes, Gaussian moments
  of a filter or smoother); coverage applies.

Methods are looked up by reading and name, ``get_method("deconvolution", "nuts")``: the two
readings share the names "nuts" and "gibbs" for different samplers.
"""

from __future__ import annotations

import importlib
import types
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

READINGS = ("deconvolution", "switching")
RETURNS = ("draws", "intervals")


class Method(NamedTuple):
    """One runnable method.

    Attributes:
        name: its name in the comparisons' tables and the CLI's ``--method`` (per reading).
        reading: "deconvolution" or "switching".
        label: a short human label for tables and figures.
        function: where the algorithm it runs lives, "module:name" under
            ``attnbayes.inference`` (None for James-Stein, computed in closed form by the
            comparison); ``fit`` is that function, looked up when asked for (so the registry
            imports no algorithm, and a patched module attribute is what runs).
        defaults: keyword settings used unless the caller gives others (read-only).
        returns: "draws" (posterior draws) or "intervals" (point estimate and intervals).
        needs_key: whether it needs a ``jax.random`` key.
        target: what it estimates: "prior-posterior" (deconvolution: z_i | x under a fitted or
            sampled nu), "filter" (p(x_t, s_t | y_{1:t})) or "smoother" (p(x_t, s_t | y_{1:T})).
    """

    name: str
    reading: str
    label: str
    function: str | None
    defaults: Mapping[str, Any]
    returns: str
    needs_key: bool
    target: str

    @property
    def fit(self) -> Callable | None:
        """The algorithm's function (imported on first use)."""
        if self.function is None:
            return None
        module, name = self.function.split(":")
        return getattr(importlib.import_module(f"attnbayes.inference.{module}"), name)


def _method(name, reading, label, function, defaults, returns, needs_key, target) -> Method:
    assert reading in READINGS and returns in RETURNS
    defaults = types.MappingProxyType(dict(defaults))
    return Method(name, reading, label, function, defaults, returns, needs_key, target)


# Sampler sizes of the methods (a direct call of run_nuts, run_gibbs or run_switching_gibbs
# keeps its own signature's defaults). Conjugate Gibbs sweeps are cheap but mix about 4x worse
# per draw than NUTS on these models, so the Gibbs methods run more, longer chains.
_NUTS_SIZES = {"num_warmup": 500, "num_samples": 500, "num_chains": 2}
_DECONVOLUTION_GIBBS_SIZES = {"num_warmup": 1000, "num_samples": 2000, "num_chains": 4}
_SWITCHING_GIBBS_SIZES = {"num_warmup": 300, "num_samples": 1000, "num_chains": 4}

_DECONVOLUTION = (
    _method(
        "attention-em",
        "deconvolution",
        "attention-EM (K = N)",
        "deconvolution.em:fit_em",
        {"max_iters": 500},
        "intervals",
        False,
        "prior-posterior",
    ),
    _method(
        "npmle",
        "deconvolution",
        "NPMLE (GMLEB)",
        "deconvolution.kiefer_wolfowitz:npmle",
        {},
        "intervals",
        False,
        "prior-posterior",
    ),
    _method(
        "nuts",
        "deconvolution",
        "NUTS (finite mixture)",
        "mcmc:run_nuts",
        {**_NUTS_SIZES, "prior": "dirichlet"},
        "draws",
        True,
        "prior-posterior",
    ),
    _method(
        "nuts-dp",
        "deconvolution",
        "NUTS (Dirichlet process)",
        "mcmc:run_nuts",
        {**_NUTS_SIZES, "prior": "dp"},
        "draws",
        True,
        "prior-posterior",
    ),
    _method(
        "gibbs",
        "deconvolution",
        "Gibbs (conjugate)",
        "deconvolution.gibbs:run_gibbs",
        _DECONVOLUTION_GIBBS_SIZES,
        "draws",
        True,
        "prior-posterior",
    ),
    _method(
        "approx-gibbs",
        "deconvolution",
        "approximate Gibbs",
        "deconvolution.gibbs:approximate_gibbs",
        {"num_iters": 500, "step_size": 1.0, "update_weights": True},
        "intervals",
        False,
        "prior-posterior",
    ),
    _method(
        "james-stein",
        "deconvolution",
        "James-Stein",
        None,
        {},
        "intervals",
        False,
        "prior-posterior",
    ),
    _method(
        "oracle",
        "deconvolution",
        "oracle Bayes (true nu)",
        "deconvolution.em:posterior",
        {},
        "intervals",
        False,
        "prior-posterior",
    ),
)

_SWITCHING = (
    _method(
        "gpb1",
        "switching",
        "GPB1",
        "switching.filters:gpb1_filter",
        {},
        "intervals",
        False,
        "filter",
    ),
    _method(
        "gpb2",
        "switching",
        "GPB2",
        "switching.filters:gpb2_filter",
        {},
        "intervals",
        False,
        "filter",
    ),
    _method(
        "imm", "switching", "IMM", "switching.filters:imm_filter", {}, "intervals", False, "filter"
    ),
    _method(
        "rbpf",
        "switching",
        "RBPF",
        "switching.particle:rbpf",
        {"num_particles": 1000},
        "intervals",
        True,
        "filter",
    ),
    _method(
        "exact",
        "switching",
        "exact filter",
        "switching.filters:exact_filter",
        {},
        "intervals",
        False,
        "filter",
    ),
    _method(
        "kim-gpb2",
        "switching",
        "Kim-GPB2",
        "switching.smoothers:kim_smoother",
        {},
        "intervals",
        False,
        "smoother",
    ),
    _method(
        "kim-imm",
        "switching",
        "Kim-IMM",
        "switching.smoothers:kim_smoother",
        {},
        "intervals",
        False,
        "smoother",
    ),
    _method(
        "exact-smoother",
        "switching",
        "exact smoother",
        "switching.smoothers:exact_smoother",
        {},
        "intervals",
        False,
        "smoother",
    ),
    _method(
        "known-modes",
        "switching",
        "known modes (Kalman smoother)",
        "switching.smoothers:fixed_modes_smoother",
        {},
        "intervals",
        False,
        "smoother",
    ),
    _method(
        "gibbs",
        "switching",
        "Gibbs (blocked)",
        "switching.gibbs:run_switching_gibbs",
        _SWITCHING_GIBBS_SIZES,
        "draws",
        True,
        "smoother",
    ),
    _method(
        "nuts",
        "switching",
        "NUTS (modes marginalised)",
        "mcmc:run_nuts",
        {**_NUTS_SIZES, "dense_mass": True},
        "draws",
        True,
        "smoother",
    ),
)

REGISTRY: Mapping[str, Mapping[str, Method]] = types.MappingProxyType(
    {
        "deconvolution": types.MappingProxyType({m.name: m for m in _DECONVOLUTION}),
        "switching": types.MappingProxyType({m.name: m for m in _SWITCHING}),
    }
)


def method_names(reading: str) -> tuple[str, ...]:
    """The names of a reading's methods, in the registry's order."""
    return tuple(_reading(reading))


def get_method(reading: str, name: str) -> Method:
    """The method ``name`` of ``reading``; a ValueError naming ``method`` if there is none."""
    methods = _reading(reading)
    if not isinstance(name, str) or name not in methods:
        raise ValueError(f"method: unknown {name!r}; choose from {list(methods)}")
    return methods[name]


def settings(reading: str, name: str, overrides: Mapping[str, Any] | None = None) -> dict:
    """The method's defaults updated with ``overrides`` (a new dict)."""
    return {**get_method(reading, name).defaults, **(overrides or {})}


def _reading(reading: str) -> Mapping[str, Method]:
    if not isinstance(reading, str) or reading not in REGISTRY:
        raise ValueError(f"reading: unknown {reading!r}; choose from {list(REGISTRY)}")
    return REGISTRY[reading]


__all__ = [
    "READINGS",
    "REGISTRY",
    "RETURNS",
    "Method",
    "get_method",
    "method_names",
    "settings",
]
