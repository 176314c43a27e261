"""``compare_deconvolution`` with the method "learned" (the version-2 grid stack): its table
against the library's ``grid_stack_fit`` on the same data, the shipped stack as the default,
and its refusals (p > 1, bad settings) before any method runs."""

import statistics

import numpy as np
import pytest

from attnbayes.inference.deconvolution import comparison as comparison_module
from attnbayes.inference.deconvolution import em
from attnbayes.inference.deconvolution.comparison import compare_deconvolution, wasserstein1
from attnbayes.inference.deconvolution.learned import grid_stack
from attnbayes.inference.deconvolution.learned.unrolled import init_unrolled_em
from attnbayes.models.deconvolution import DiscreteMeasure

MEASURE = DiscreteMeasure(np.array([-2.0, 0.0, 3.0]), np.array([0.5, 0.3, 0.2]))


@pytest.fixture(scope="module")
def problem():
    """N = 60 heteroscedastic draws of three atoms (s_i log-uniform on [0.5, 3]) and 20
    held-out points with their own s_i (NumPy draws: no compilation for the data)."""
    rng = np.random.default_rng(3)
    s = np.exp(rng.uniform(np.log(0.5), np.log(3.0), size=60))
    z = rng.choice(MEASURE.atoms, size=60, p=MEASURE.weights)
    s_held = np.exp(rng.uniform(np.log(0.5), np.log(3.0), size=20))
    x_held = rng.choice(MEASURE.atoms, size=20, p=MEASURE.weights) + s_held * rng.normal(size=20)
    return z + s * rng.normal(size=60), s, z, x_held, s_held


def test_learned_fills_the_table_from_the_grid_stack(problem, monkeypatch):
    """mse_z, coverage, W1 and the held-out lpd are those of ``grid_stack_fit`` (the shipped
    stack by default: patched here to EM's start, a stack of 4 layers) on the same data."""
    x, s, z, x_held, s_held = problem
    params = grid_stack.init_grid_stack(4)
    monkeypatch.setattr(grid_stack, "pretrained_grid_stack", lambda: params)
    result = compare_deconvolution(
        None,
        x,
        s,
        z_true=z,
        true_measure=MEASURE,
        x_heldout=x_held,
        sigma_heldout=s_held,
        methods=("learned",),
    )
    value = result.table.set_index(["method", "metric"]).value["learned"]
    assert np.isfinite(value).all()
    assert "converged" not in value.index
    fit = grid_stack.grid_stack_fit(params, x, s)
    mean, sd = np.asarray(fit.mean), np.sqrt(np.asarray(fit.variance))
    assert value["mse_z"] == np.mean((mean - z) ** 2)  # the same function on the same data
    for prob in (0.5, 0.9):
        q = statistics.NormalDist().inv_cdf((1 + prob) / 2)
        covered = np.mean((mean - q * sd <= z) & (z <= mean + q * sd))
        assert value[f"coverage_{round(100 * prob)}"] == covered
    weights = np.asarray(fit.prior_weights)
    np.testing.assert_allclose(weights.sum(), 1.0, rtol=1e-12)
    w1 = wasserstein1(np.asarray(fit.grid), weights, MEASURE.atoms, MEASURE.weights)
    assert value["wasserstein1_nu"] == pytest.approx(w1, rel=1e-12, abs=1e-12)
    # held-out lpd: the mean log density under the effective prior on the grid, by brute force
    dens = np.exp(-0.5 * ((x_held[:, None] - np.asarray(fit.grid)[None, :]) / s_held[:, None]) ** 2)
    dens = dens @ weights / (s_held * np.sqrt(2 * np.pi))
    assert value["heldout_lpd"] == pytest.approx(np.mean(np.log(dens)), rel=1e-10)
    # an explicit stack is what runs (the same stack here: the same numbers)
    given = compare_deconvolution(
        None, x, s, z_true=z, methods="learned", method_kwargs={"learned": {"params": params}}
    )
    np.testing.assert_array_equal(given.fits["learned"].z_hat, result.fits["learned"].z_hat)


def test_learned_refuses_two_dimensional_data_before_any_method_runs(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("a method ran on data the grid stack refuses")

    monkeypatch.setattr(em, "fit_em", refuse)
    monkeypatch.setattr(comparison_module, "_RUNNERS", {})
    x = np.random.default_rng(0).normal(size=(30, 2))
    with pytest.raises(ValueError, match=r"^x: the grid stack \('learned'\) is for scalar data "):
        compare_deconvolution(None, x, 1.0, methods=("attention-em", "learned"))
    with pytest.raises(ValueError, match=r"got p = 2 coordinates per point"):
        compare_deconvolution(None, x, np.ones((30, 2)), methods=("learned",))


@pytest.mark.parametrize(
    ("x", "settings", "message"),
    [
        (None, {"block_size": 8}, r"method_kwargs\['learned'\]: unknown settings \['block_size'\]"),
        (None, {"grid_size": 1}, r"method_kwargs\['learned'\]\['grid_size'\]: must be >= 2"),
        (None, {"grid_size": 2.5}, r"method_kwargs\['learned'\]\['grid_size'\]: expected an"),
        (np.full(10, 2.0), {}, r"x: all points are equal; the grid stack \('learned'\)"),
        (np.array([2.0]), {}, r"x: the grid stack \('learned'\) needs at least two points, got 1"),
    ],
)
def test_learned_refuses_bad_settings_before_any_method_runs(x, settings, message, monkeypatch):
    monkeypatch.setattr(comparison_module, "_RUNNERS", {})  # nothing may run
    x = np.linspace(-1.0, 1.0, 10) if x is None else x
    kwargs = {"learned": {"params": grid_stack.init_grid_stack(2), **settings}}
    with pytest.raises(ValueError, match=message):
        compare_deconvolution(None, x, 1.0, methods=("npmle", "learned"), method_kwargs=kwargs)


def test_learned_refuses_a_version_1_stack_by_name():
    """The library's refusal (before tracing), named as the argument the caller gave."""
    with pytest.raises(ValueError, match=r"method_kwargs\['learned'\]\['params'\]: a version-1"):
        compare_deconvolution(
            None,
            np.linspace(-1.0, 1.0, 10),
            1.0,
            methods="learned",
            method_kwargs={"learned": {"params": init_unrolled_em(2)}},
        )
