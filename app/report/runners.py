"""Simulate a scenario and run every method on it (deconvolution and switching).

The warnings raised while a method runs (ArviZ's: Pareto k, R-hat, ESS) are said once each on
one line naming the scenario and the method (``pieces.named_warnings``), and kept in
``warned`` for the page.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import jax
import numpy as np
import pandas as pd

from ...inference.deconvolution.comparison import (
    METHODS,
    DeconvolutionComparison,
    compare_deconvolution,
)
from ...inference.model_comparison import compare_num_modes
from ...inference.switching import (
    PosteriorShift,
    SwitchingComparison,
    SwitchingLearningComparison,
    compare_switching,
    compare_switching_learning,
    posterior_shift,
)
from ...models.deconvolution import DiscreteMeasure, get_measure, noise_scales, simulate
from ...models.switching import SwitchingParams, maneuvering_target
from ...models.switching import simulate as simulate_switching
from .pieces import named_warnings
from .scenarios import NUM_ATOMS_DP, SCALAR_ONLY, Scenario, SwitchingSettings

# ----------------------------------------------------------------------------- running


def data_dim(scenario: Scenario) -> int:
    """The dimension p of the scenario's data (1: scalar)."""
    atoms = np.asarray(get_measure(scenario.measure, **scenario.measure_kwargs).atoms)
    return 1 if atoms.ndim == 1 else atoms.shape[1]


def scenario_methods(
    scenario: Scenario, methods: tuple[str, ...]
) -> tuple[tuple[str, ...], dict[str, str]]:
    """The methods that run on the scenario, and those of ``methods`` left out with the
    sentence the page says for each: a method for scalar data only (``SCALAR_ONLY``) on a
    scenario of p-D data, e.g. "learned is left out here: the grid stack is for scalar data;
    the ring scenario is 2-D." """
    p = data_dim(scenario)
    left_out = {
        m: f"{m} is left out here: {SCALAR_ONLY[m]}; the {scenario.name} scenario is {p}-D."
        for m in methods
        if m in SCALAR_ONLY and p > 1
    }
    return tuple(m for m in methods if m not in left_out), left_out


class ScenarioData(NamedTuple):
    """A scenario's simulated data: its measure, the latent z and data x with their noise
    scale sigma (a float, or (N,) per observation), and as many held-out points with theirs."""

    measure: DiscreteMeasure
    z: np.ndarray
    x: np.ndarray
    sigma: float | np.ndarray
    x_heldout: np.ndarray
    sigma_heldout: float | np.ndarray


def scenario_data(scenario: Scenario, *, quick: bool, key: jax.Array) -> ScenarioData:
    """The scenario's measure, its latent z and data x, and as many held-out points: what
    ``run_scenario`` fits with the same ``key``. A per-unit scenario draws each point's s_i
    (``noise_scales``) from a key of its own, independent of z and the noise."""
    measure = get_measure(scenario.measure, **scenario.measure_kwargs)
    key_data, _, key_held = jax.random.split(key, 3)
    num_points = scenario.num_points[0 if quick else 1]
    sigma = sigma_heldout = scenario.sigma
    if scenario.per_unit:
        # a key of their own: split(key, 4)[:3] are the three keys above, and a key folded
        # from key_data (fold_in(k, 1) == split(k)[1]) is the one ``simulate`` draws the noise
        # from, which would tie eps_i to s_i
        low, high = scenario.sigma
        key_scales = jax.random.split(jax.random.split(key, 4)[3])
        sigma, sigma_heldout = (
            np.asarray(noise_scales(k, num_points, low, high)) for k in key_scales
        )
    z, x = simulate(key_data, measure, sigma, num_points)
    _, x_heldout = simulate(key_held, measure, sigma_heldout, num_points)
    return ScenarioData(
        measure, np.asarray(z), np.asarray(x), sigma, np.asarray(x_heldout), sigma_heldout
    )


def run_scenario(
    scenario: Scenario,
    *,
    quick: bool,
    key: jax.Array,
    progress: Callable[[str], None],
    methods: tuple[str, ...] = METHODS,
    warned: list[str] | None = None,
) -> tuple[DeconvolutionComparison, np.ndarray, np.ndarray, DiscreteMeasure, float | np.ndarray]:
    """Simulate one scenario (and as many held-out points) and run every method on it (a
    per-unit scenario: each with the points' own s_i, ``scenario_data``); returns the
    comparison, x, z, the true measure and sigma (a float, or (N,) per point). A method for
    scalar data only is left out of a p-D scenario (``scenario_methods``).

    Each method runs in its own ``compare_deconvolution`` call (the same fits and rows as one
    call with every method: each sampler's key depends on its name only), so that a warning
    names its method: ``progress("warning: <scenario>, <method>: ...")``, and the line is
    appended to ``warned``."""
    size = 0 if quick else 1
    methods, _ = scenario_methods(scenario, methods)
    data = scenario_data(scenario, quick=quick, key=key)
    measure, z, x = data.measure, data.z, data.x
    # held-out points with their own standard errors (a per-unit scenario's only)
    heldout = {"x_heldout": data.x_heldout}
    if scenario.per_unit:
        heldout["sigma_heldout"] = data.sigma_heldout
    key_fit = jax.random.split(key, 3)[1]
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
    # the report checks the finite mixture's posterior predictive only: NUTS-DP skips compiling
    # its own (the draws are the same either way)
    extra = {"gibbs": gibbs, "nuts-dp": {**dp, "posterior_predictive": False}}
    tables, fits = [], {}
    for method in methods:
        with named_warnings(f"{scenario.name}, {method}", progress, warned):
            one = compare_deconvolution(
                key_fit,
                x,
                data.sigma,
                z_true=z,
                true_measure=measure,
                **heldout,
                methods=(method,),
                num_atoms_dp=NUM_ATOMS_DP,
                nuts_kwargs={"num_warmup": draws, "num_samples": draws},
                method_kwargs={m: kw for m, kw in extra.items() if m == method},
                progress=lambda msg: progress(f"{scenario.name}: {msg}"),
            )
        tables.append(one.table)
        fits.update(one.fits)
    comparison = DeconvolutionComparison(table=pd.concat(tables, ignore_index=True), fits=fits)
    return comparison, x, z, measure, data.sigma


class SwitchingRun(NamedTuple):
    params: SwitchingParams
    modes: np.ndarray
    states: np.ndarray
    observations: np.ndarray
    comparison: SwitchingComparison
    modes_comparison: object
    min_observations: int


def run_switching(
    settings: SwitchingSettings,
    *,
    quick: bool,
    key,
    progress: Callable[[str], None],
    warned: list[str] | None = None,
) -> SwitchingRun:
    """The maneuvering target: every filter, smoother and sampler, then numbers of modes.
    Warnings are said naming the target and the step (``warned`` keeps them)."""
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
    # one call (the reference rows compare methods with each other); of its methods only the
    # samplers' diagnostics call ArviZ
    with named_warnings("maneuvering-target, compare_switching", progress, warned):
        comparison = compare_switching(
            key_cmp,
            params,
            y,
            states_true=states,
            modes_true=modes,
            gibbs_kwargs=gibbs,
            progress=lambda msg: progress(f"maneuvering-target: {msg}"),
        )
    candidates = {
        f"{m} mode{'s' * (m > 1)}": maneuvering_target(turn_rates_deg=(3.0, -3.0)[: m - 1])
        for m in settings.mode_counts[size]
    }
    min_obs = round(num_steps * (1 - settings.heldout_fraction))
    with named_warnings(
        "maneuvering-target, gibbs on 1-3 modes (leave-future-out)", progress, warned
    ):
        modes_comparison = compare_num_modes(
            key_modes,
            candidates,
            y,
            min_observations=min_obs,
            gibbs_kwargs=gibbs,
            progress=lambda msg: progress(f"numbers of modes: {msg}"),
        )
    return SwitchingRun(params, modes, states, y, comparison, modes_comparison, min_obs)


# EM's iteration limit in ``run_switching_learning``
LEARNING_EM_ITERATIONS = 300


class LearningRun(NamedTuple):
    params: SwitchingParams
    num_steps: int
    num_heldout: int
    comparison: SwitchingLearningComparison
    shift_params: SwitchingParams
    shift_steps: int
    shift: PosteriorShift


def shift_model() -> SwitchingParams:
    """The 1-D model of the posterior-shift table: an AR(1) state (F = 0.9 in both modes, so
    the collapsed filters are approximations) whose process noise switches between a calm and
    a volatile mode, observed with noise."""
    return SwitchingParams(
        initial_probs=np.array([0.5, 0.5]),
        transition_matrix=np.array([[0.9, 0.1], [0.2, 0.8]]),
        initial_means=np.zeros((2, 1)),
        initial_covs=np.ones((2, 1, 1)),
        dynamics_matrices=np.full((2, 1, 1), 0.9),
        dynamics_biases=np.zeros((2, 1)),
        dynamics_covs=np.array([[[0.05]], [[1.5]]]),
        emission_matrices=np.ones((2, 1, 1)),
        emission_covs=np.full((2, 1, 1), 0.3),
    )


def run_switching_learning(
    settings: SwitchingSettings,
    *,
    quick: bool,
    key,
    progress: Callable[[str], None],
    warned: list[str] | None = None,
) -> LearningRun:
    """Learn the 1-D model's (``shift_model``) transition matrix and noise scales by MLE, EM,
    NUTS and Gibbs (``compare_switching_learning``), and measure how far GPB2 and IMM move the
    posterior of theta from the exact one on a short series of it (``posterior_shift``). The
    maneuvering target (d = 4) costs about three times as much compilation, too much for the
    report: ``benchmarks/switching_posterior_shift.py`` runs it."""
    size = 0 if quick else 1
    key_data, key_cmp, key_shift_data, key_shift = jax.random.split(key, 4)
    params = shift_model()
    num_steps, heldout = settings.learning_steps[size], settings.learning_heldout
    _, _, y = simulate_switching(key_data, params, num_steps + heldout)
    y = np.asarray(y)
    draws = settings.learning_draws[size]
    sizes = {"num_warmup": draws, "num_samples": draws, "num_chains": 2}
    progress(f"learning: MLE, EM, NUTS and Gibbs on T = {num_steps} steps")
    with named_warnings("1-d-switching-ar, mle/em/nuts/gibbs", progress, warned):
        comparison = compare_switching_learning(
            key_cmp,
            params,
            y[:num_steps],
            y[num_steps:],
            mle_kwargs={"num_starts": 4},
            em_kwargs={"max_iterations": LEARNING_EM_ITERATIONS},
            nuts_kwargs=sizes,
            gibbs_kwargs={**sizes, "num_warmup": 4 * draws, "num_samples": 4 * draws},
        )
    small = shift_model()
    steps = settings.shift_steps[size]
    progress(f"learning: NUTS over theta with the exact, GPB2 and IMM likelihoods, T = {steps}")
    _, _, y_short = simulate_switching(key_shift_data, small, steps)
    draws = settings.shift_draws[size]
    with named_warnings(f"shift-T{steps}, nuts with exact/gpb2/imm", progress, warned):
        shift = posterior_shift(
            key_shift,
            small,
            np.asarray(y_short),
            methods=("gpb2", "imm"),
            reference="exact",
            nuts_kwargs={"num_warmup": draws, "num_samples": draws, "num_chains": 2},
        )
    return LearningRun(params, num_steps, heldout, comparison, small, steps, shift)
