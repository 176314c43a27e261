"""The method registry: every method the comparisons, the report and the CLI can run.

A ``Method`` names the algorithm it runs (``fit``), the settings it runs with unless told
otherwise (``defaults``: the one set of defaults, which ``compare_deconvolution``,
``compare_switching``, the report and ``attnbayes deconvolve | filter`` all read), a label for
tables and figures, and what it returns:

- ``"draws"``: posterior draws (MCMC), summarised by quantiles; rank statistics apply;
- ``"intervals"``: a point estimate with intervals (plug-in empirical Bayes, Gaussian moments
  of a filter or smoother); coverage applies.

Methods are looked up by reading and name, ``get_method("deconvolution", "nuts")``: the two
readings share the names "nuts" and "gibbs" for different samplers. A method may have
aliases, other names it answers to (``get_method("deconvolution", "em")`` is attention-EM).

The registry is also the command line's list of methods: ``commands`` says which ``attnbayes``
commands offer a method (``deconvolve`` or ``filter`` on a user's data, ``calibrate`` for a
calibration study over a fixed prior), ``command_choices`` lists the names and aliases a
command's ``--method`` takes, ``description`` is what its help and its run's page say, and
``CALIBRATE_DEFAULT`` the methods ``attnbayes calibrate`` runs unless told. Adding a method
touches its algorithm, this registry and their tests. This module imports no JAX, so
``attnbayes --help`` stays fast.
"""

from __future__ import annotations

import importlib
import types
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

READINGS = ("deconvolution", "switching")
RETURNS = ("draws", "intervals")
# the ``attnbayes`` commands that run a registry method, and the readings each one serves
COMMANDS = types.MappingProxyType(
    {"deconvolve": ("deconvolution",), "filter": ("switching",), "calibrate": READINGS}
)


class Method(NamedTuple):
    """One runnable method.

    Attributes:
        name: its name in the comparisons' tables and the CLI's ``--method`` (per reading).
        reading: "deconvolution" or "switching".
        label: a short human label for tables and figures.
        function: where the algorithm it runs lives, "module:name" under
            ``attnbayes.inference``; ``fit`` is that function, looked up when asked for (so the
            registry imports no algorithm, and a patched module attribute is what runs).
        defaults: keyword settings used unless the caller gives others (read-only).
        returns: "draws" (posterior draws) or "intervals" (point estimate and intervals).
        needs_key: whether it needs a ``jax.random`` key.
        target: what it estimates: "prior-posterior" (deconvolution: z_i | x under a fitted or
            sampled nu), "filter" (p(x_t, s_t | y_{1:t})) or "smoother" (p(x_t, s_t | y_{1:T})).
        aliases: other names ``get_method`` and the CLI's ``--method`` take for it.
        commands: the ``attnbayes`` commands whose ``--method`` offers it (``COMMANDS``).
        description: a sentence or two on what it does and what its intervals mean, for the
            help of the commands offering it and the pages their runs write.
        pretrained: for a learned method, where the function returning its shipped parameters
            lives ("module:name" under ``attnbayes.inference``, called by
            ``load_pretrained``), else None.
    """

    name: str
    reading: str
    label: str
    function: str | None
    defaults: Mapping[str, Any]
    returns: str
    needs_key: bool
    target: str
    aliases: tuple[str, ...] = ()
    commands: tuple[str, ...] = ()
    description: str = ""
    pretrained: str | None = None

    @property
    def fit(self) -> Callable | None:
        """The algorithm's function (imported on first use)."""
        return None if self.function is None else _lookup(self.function)

    def load_pretrained(self, **options):
        """A learned method's shipped parameters: ``pretrained`` (imported on first use) called
        with ``options`` (e.g. ``metadata=True``); None for a method without any."""
        return None if self.pretrained is None else _lookup(self.pretrained)(**options)


def _lookup(reference: str):
    """The object at "module:name" under ``attnbayes.inference``."""
    module, name = reference.split(":")
    return getattr(importlib.import_module(f"attnbayes.inference.{module}"), name)


def _method(
    name,
    reading,
    label,
    function,
    defaults,
    returns,
    needs_key,
    target,
    *,
    aliases=(),
    commands=(),
    description="",
    pretrained=None,
) -> Method:
    assert reading in READINGS and returns in RETURNS
    assert all(reading in COMMANDS[c] for c in commands), (name, commands)
    assert description or not set(commands) - {"calibrate"}, f"{name}: a command needs a text"
    defaults = types.MappingProxyType(dict(defaults))
    return Method(
        name,
        reading,
        label,
        function,
        defaults,
        returns,
        needs_key,
        target,
        tuple(aliases),
        tuple(commands),
        " ".join(description.split()),
        pretrained,
    )


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
        aliases=("em",),
        commands=("deconvolve", "calibrate"),
        description="""attention-EM: K = N atoms started at the data with weights 1/N, moved by
        EM steps whose E-step is softmax attention (at most 500); z_hat is one more attention
        step, the empirical-Bayes posterior mean under the fitted nu. The intervals come from
        the discrete posterior over the fitted atoms: a plug-in that ignores the uncertainty in
        nu, so they are too narrow where it matters.""",
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
        commands=("deconvolve", "calibrate"),
        description="""NPMLE: the Kiefer-Wolfowitz maximum-likelihood nu on a fixed grid of 300
        points (mix-SQP), then its empirical-Bayes posterior (GMLEB): z_hat is the posterior
        mean and the intervals come from the discrete posterior over the grid (plug-in, like
        EM's).""",
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
        commands=("deconvolve", "calibrate"),
        description="""NUTS on a finite Dirichlet mixture of K atoms (weights ~ Dirichlet(1),
        atoms ~ N(mean x, (2 sd x + sigma)^2), sorted in 1-D): z_hat is the posterior mean of
        E[z_i | x_i, nu], the intervals are posterior quantiles of z_i with nu integrated
        out.""",
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
        commands=("calibrate",),
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
        commands=("deconvolve", "calibrate"),
        description="""blocked conjugate Gibbs on the same finite Dirichlet mixture as NUTS
        (labels, weights, atoms in turn): z_hat is the posterior mean of E[z_i | x_i, nu], the
        intervals are posterior quantiles of z_i with nu integrated out.""",
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
        commands=("calibrate",),
    ),
    _method(
        "james-stein",
        "deconvolution",
        "James-Stein",
        "deconvolution.shrinkage:james_stein",
        {},
        "intervals",
        False,
        "prior-posterior",
        commands=("calibrate",),
    ),
    _method(
        "sure",
        "deconvolution",
        "SURE (Xie-Kou-Brown)",
        "deconvolution.shrinkage:sure_shrinkage",
        {},
        "intervals",
        False,
        "prior-posterior",
        commands=("deconvolve",),
        description="""SURE shrinkage (Xie, Kou and Brown 2012, SURE-G): z_hat_i = xbar + (1 -
        b_i)(x_i - xbar) with b_i = s_i^2 / (s_i^2 + A), A chosen to minimise Stein's unbiased
        estimate of the squared-error risk; noisier units are shrunk more. The intervals are
        those of the normal prior N(xbar, A) it is the Bayes rule of: a plug-in that ignores
        the uncertainty in A and xbar, and assumes a normal prior.""",
    ),
    _method(
        "normal-eb",
        "deconvolution",
        "normal hierarchical (EB)",
        "deconvolution.shrinkage:normal_eb",
        {},
        "intervals",
        False,
        "prior-posterior",
        commands=("deconvolve",),
        description="""the normal hierarchical model (eight schools) by empirical Bayes: z_i ~
        N(mu, tau^2) with mu and tau^2 maximising the marginal likelihood of x_i ~ N(mu, tau^2
        + s_i^2) (tau = 0, complete pooling, is possible and is reported); z_hat and intervals
        from the normal posterior given those values: a plug-in that ignores their
        uncertainty, so the intervals are too narrow (zero width when tau = 0).""",
    ),
    _method(
        "normal-nuts",
        "deconvolution",
        "normal hierarchical (NUTS)",
        "mcmc:run_nuts",
        # non-centred eight-schools posteriors have a few divergences at NumPyro's 0.8; the
        # comparison uses the draws only, so the posterior predictive is not compiled
        {**_NUTS_SIZES, "target_accept_prob": 0.9, "posterior_predictive": False},
        "draws",
        True,
        "prior-posterior",
        description="""the normal hierarchical model (eight schools; Rubin 1981, Gelman et al.
        BDA3 section 5.5) by NUTS, non-centred (theta_i = mu + tau theta_t_i, theta_t_i ~
        N(0, 1)): mu ~ N(mean x, (2 sd x + s)^2), tau ~ half-Cauchy(2 sd x + s), x_i ~
        N(theta_i, s_i^2); z_hat is the posterior mean of E[theta_i | x_i, mu, tau], the
        intervals are posterior quantiles of theta_i with mu and tau integrated out (unlike
        normal-eb's plug-in). With p coordinates, one such model per coordinate.""",
    ),
    _method(
        "learned",
        "deconvolution",
        "learned EB (grid stack v2)",
        "deconvolution.learned.grid_stack:grid_stack_fit",
        {"grid_size": 128},
        "intervals",
        False,
        "prior-posterior",
        commands=("deconvolve", "calibrate"),
        pretrained="deconvolution.learned.grid_stack:pretrained_grid_stack",
        description="""learned empirical Bayes, version 2 (the grid stack,
        pretrained_grid_stack): attention layers keyed on a grid of 128 points, trained as an
        amortised EB estimator on simulated tasks (mixing measures of four families; standard
        errors all equal, or up to 10 times apart; its model card has the details); it reads
        the NPMLE on the grid and the normal model as inputs and returns each z_i's posterior
        mean and variance. Scalar data only (p = 1), one sigma or a standard error per row. The
        intervals are normal, z_hat -+ q sd: approximate, and a plug-in like EM's; nu is its
        effective prior on the grid. The version-1 stack (one sigma, K = N atoms) stays a
        library function, unrolled_em_moments.""",
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
        commands=("calibrate",),
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
        commands=("filter", "calibrate"),
        description="GPB1 filter (collapse to one Gaussian, then one Kalman step per mode)",
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
        commands=("filter", "calibrate"),
        description="GPB2 filter (M^2 Kalman steps, collapsed per new mode)",
    ),
    _method(
        "imm",
        "switching",
        "IMM",
        "switching.filters:imm_filter",
        {},
        "intervals",
        False,
        "filter",
        commands=("filter", "calibrate"),
        description="""IMM filter (mix, then one Kalman step per mode; Blom and Bar-Shalom
        1988)""",
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
        commands=("filter",),
        description="""Rao-Blackwellised particle filter (particles over the modes, a Kalman
        filter each)""",
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
        commands=("calibrate",),
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
        commands=("calibrate",),
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
        commands=("calibrate",),
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
        commands=("calibrate",),
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
        commands=("filter",),
        description="""Gibbs sampler of the smoothing posterior (modes by Gerlach-Carter-Kohn
        with the states integrated out, states by Kalman forward filtering, backward
        sampling)""",
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


# the methods ``attnbayes calibrate`` runs unless --method names others, in this order (the
# order seeds each study: its key is folded in with the method's position)
CALIBRATE_DEFAULT: Mapping[str, tuple[str, ...]] = types.MappingProxyType(
    {
        "deconvolution": ("nuts", "gibbs", "attention-em", "npmle", "oracle"),
        "switching": ("gpb2", "imm", "kim-imm"),
    }
)


def method_names(reading: str) -> tuple[str, ...]:
    """The names of a reading's methods, in the registry's order."""
    return tuple(_reading(reading))


def get_method(reading: str, name: str) -> Method:
    """The method ``name`` (or an alias of it) of ``reading``; a ValueError naming ``method``
    if there is none."""
    methods = _reading(reading)
    name = _ALIASES[reading].get(name, name) if isinstance(name, str) else name
    if not isinstance(name, str) or name not in methods:
        raise ValueError(f"method: unknown {name!r}; choose from {list(methods)}")
    return methods[name]


def settings(reading: str, name: str, overrides: Mapping[str, Any] | None = None) -> dict:
    """The method's defaults updated with ``overrides`` (a new dict)."""
    return {**get_method(reading, name).defaults, **(overrides or {})}


def command_methods(command: str, reading: str) -> tuple[Method, ...]:
    """The methods of ``reading`` that ``attnbayes <command> --method`` offers, in the
    registry's order."""
    if command not in COMMANDS:
        raise ValueError(f"command: unknown {command!r}; choose from {list(COMMANDS)}")
    return tuple(m for m in _reading(reading).values() if command in m.commands)


def command_choices(command: str, reading: str) -> tuple[str, ...]:
    """What ``attnbayes <command> --method`` takes for ``reading``: each offered method's name
    followed by its aliases."""
    return tuple(n for m in command_methods(command, reading) for n in (m.name, *m.aliases))


def _reading(reading: str) -> Mapping[str, Method]:
    if not isinstance(reading, str) or reading not in REGISTRY:
        raise ValueError(f"reading: unknown {reading!r}; choose from {list(REGISTRY)}")
    return REGISTRY[reading]


def _aliases(methods: Mapping[str, Method]) -> Mapping[str, str]:
    """{alias: name} of a reading; an alias never shadows a name or another alias."""
    table = {}
    for method in methods.values():
        for alias in method.aliases:
            assert alias not in methods and alias not in table, alias
            table[alias] = method.name
    return types.MappingProxyType(table)


_ALIASES = {reading: _aliases(methods) for reading, methods in REGISTRY.items()}


__all__ = [
    "CALIBRATE_DEFAULT",
    "COMMANDS",
    "READINGS",
    "REGISTRY",
    "RETURNS",
    "Method",
    "command_choices",
    "command_methods",
    "get_method",
    "method_names",
    "settings",
]
