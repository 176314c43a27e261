"""Calibration of the "learned" method (the version-2 grid stack): its refusals before any
JAX work, and (``-m slow``) the PIT of its normal posterior against the library's moments on
the same simulated replicate."""

import jax
import numpy as np
import pytest
from scipy.stats import norm

from attnbayes.inference import calibration as cal
from attnbayes.inference.deconvolution.learned import grid_stack
from attnbayes.inference.deconvolution.learned.unrolled import init_unrolled_em

KEY = jax.random.PRNGKey(38)
STUDY = cal.DeconvolutionStudy(num_atoms=2, num_points=20, noise_range=(0.5, 3.0))


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"data_fraction": 0.5}, r"overrides: data_fraction does not apply to 'learned'"),
        ({"num_iters": 3}, r"overrides: unknown settings \['num_iters'\] for 'learned'"),
        ({"grid_size": 1}, r"overrides\['grid_size'\]: must be >= 2"),
        ({"params": init_unrolled_em(2)}, r"overrides\['params'\]: a version-1 unrolled-EM"),
        ({"params": "stack.npz"}, r"overrides\['params'\]: expected GridStackParams"),
    ],
)
def test_calibrate_learned_refuses(overrides, message, monkeypatch):
    from attnbayes.inference import diagnostics

    def refuse(*args, **kwargs):
        raise AssertionError("a replicate ran on refused settings")

    monkeypatch.setattr(cal, "interval_coverage", refuse)
    monkeypatch.setattr(diagnostics, "interval_coverage", refuse)
    overrides = {"params": grid_stack.init_grid_stack(2), **overrides}
    with pytest.raises(ValueError, match=message):
        cal.calibrate(KEY, "deconvolution", "learned", study=STUDY, overrides=overrides)


@pytest.mark.slow  # compiles the stack inside the replicates' program (about 7 s)
def test_calibrate_learned_pit_is_its_normal_posterior(monkeypatch):
    """Replicate r's PIT of z_i is Phi((z_i - m_i) / sqrt(v_i)) with (m_i, v_i) the library's
    ``grid_stack_moments`` on that replicate's (x, s) (the shipped stack by default: patched
    here to EM's start, 4 layers), so its coverage is that of z_hat -+ q sd."""
    params = grid_stack.init_grid_stack(4)
    monkeypatch.setattr(grid_stack, "pretrained_grid_stack", lambda: params)
    tree = cal.calibrate(KEY, "deconvolution", "learned", study=STUDY, num_replicates=4)
    assert tree.attrs["num_failed"] == 0 and tree.attrs["method"] == "learned"
    pit = np.asarray(tree["z"]["pit"].values)
    simulate = cal.deconvolution_simulator(STUDY)
    for r in range(2):
        k_sim = jax.random.split(jax.random.fold_in(KEY, r), 3)[0]
        truth, data = simulate(k_sim)
        moments = grid_stack.grid_stack_moments(params, data["x"], data["sigma"])
        expected = norm.cdf(
            (np.asarray(truth["z"]) - np.asarray(moments.mean)) / np.sqrt(moments.variance)
        )
        np.testing.assert_allclose(pit[r], expected, rtol=1e-8, atol=1e-12)
    table = cal.calibration_table({"learned": tree})
    assert np.isfinite(table[["coverage_z_50", "coverage_z_90"]].to_numpy()).all()
