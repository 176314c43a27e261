"""Bad input to the calibration functions (issue 17): refused before any JAX work, naming the
argument. ``sbc``, ``interval_coverage`` and ``calibrate`` are checked with tiny studies; no case
compiles a replicate (each raises while checking or while tracing shapes abstractly)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from attnbayes.inference import calibration as cal
from attnbayes.inference.diagnostics import PosteriorDraws, interval_coverage, sbc

KEY = jax.random.PRNGKey(0)


def simulate(key):
    mu = jax.random.normal(key)
    return {"mu": mu}, {"y": mu + jnp.zeros(3)}


def posterior(key, data):
    return PosteriorDraws({"mu": jnp.zeros((2, 10))}, jnp.zeros((), jnp.int32))


def quantities(values, data):
    return {"mu": values["mu"]}


def cdf(key, data, target):
    return {"mu": (target["mu"] * 0, target["mu"] * 0)}


def targets(truth, data):
    return {"mu": truth["mu"]}


SBC_CASES = {
    "num_replicates": ({"num_replicates": 0}, "num_replicates"),
    "chunk_size": ({"chunk_size": -1}, "chunk_size"),
    "thin": ({"thin": 0}, "thin"),
    "thin-word": ({"thin": "often"}, "thin"),
    "tie_tolerance": ({"tie_tolerance": -1.0}, "tie_tolerance"),
    "checkpoint-suffix": ({"checkpoint": "study.txt"}, "checkpoint: expected a .npz"),
    "checkpoint-folder": ({"checkpoint": "no/such/folder/s.npz"}, "checkpoint: folder"),
    "study-not-json": ({"study": {"f": object()}}, "study: must be JSON-serialisable"),
    "simulate": ({"simulate": 3}, "simulate: expected a callable"),
    "posterior-type": (
        {"posterior": lambda k, d: {"mu": jnp.zeros((2, 10))}},
        "posterior: must return a PosteriorDraws",
    ),
    "posterior-axes": (
        {"posterior": lambda k, d: PosteriorDraws({"mu": jnp.zeros(10)}, 0)},
        "posterior: every leaf of draws needs (num_chains, num_draws)",
    ),
    "quantities-not-dict": (
        {"quantities": lambda v, d: v["mu"]},
        "quantities: expected a non-empty dict",
    ),
    "quantities-bad-name": (
        {"quantities": lambda v, d: {"my mu": v["mu"]}},
        "quantities: names must be identifiers",
    ),
    "key": ({"key": 3}, "key"),
}


@pytest.mark.parametrize("case", list(SBC_CASES))
def test_sbc_refuses(case):
    changes, message = SBC_CASES[case]
    kwargs = {
        "key": KEY,
        "simulate": simulate,
        "posterior": posterior,
        "quantities": quantities,
        "num_replicates": 4,
        **changes,
    }
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        sbc(
            kwargs.pop("key"),
            kwargs.pop("simulate"),
            kwargs.pop("posterior"),
            kwargs.pop("quantities"),
            **kwargs,
        )


COVERAGE_CASES = {
    "levels-outside": ({"levels": (0.5, 1.0)}, "levels: expected probabilities in"),
    "levels-empty": ({"levels": ()}, "levels"),
    "cdf-missing-target": (
        {"posterior_cdf": lambda k, d, t: {"other": (t["mu"], t["mu"])}},
        "posterior_cdf: must return",
    ),
    "cdf-shape": (
        {"posterior_cdf": lambda k, d, t: {"mu": (jnp.zeros(2), jnp.zeros(2))}},
        "posterior_cdf: 'mu' has shape",
    ),
    "targets": ({"targets": lambda t, d: []}, "quantities: expected a non-empty dict"),
}


@pytest.mark.parametrize("case", list(COVERAGE_CASES))
def test_interval_coverage_refuses(case):
    changes, message = COVERAGE_CASES[case]
    kwargs = {"posterior_cdf": cdf, "targets": targets, "num_replicates": 4, **changes}
    with pytest.raises(ValueError, match=message):
        interval_coverage(
            KEY, simulate, kwargs.pop("posterior_cdf"), kwargs.pop("targets"), **kwargs
        )


CALIBRATE_CASES = {
    "reading": (("filters", "nuts"), {}, "reading: unknown"),
    "method": (("deconvolution", "kalman"), {}, "method: unknown"),
    "not-calibrated": (("switching", "rbpf"), {}, "method: 'rbpf' cannot be calibrated"),
    "study-type": (
        ("deconvolution", "oracle"),
        {"study": cal.SwitchingStudy()},
        "study: expected a DeconvolutionStudy",
    ),
    "study-points": (
        ("deconvolution", "oracle"),
        {"study": cal.DeconvolutionStudy(num_points=0)},
        "study.num_points",
    ),
    "study-prior": (
        ("deconvolution", "oracle"),
        {"study": cal.DeconvolutionStudy(prior="uniform")},
        "study.prior",
    ),
    "study-cdf-points": (
        ("deconvolution", "oracle"),
        {"study": cal.DeconvolutionStudy(cdf_points=(float("nan"),))},
        "study.cdf_points",
    ),
    # issue 35: per-unit noise in the study
    "study-sigma-length": (
        ("deconvolution", "oracle"),
        {"study": cal.DeconvolutionStudy(sigma=(1.0, 2.0))},
        r"study\.sigma: expected a number or 50 numbers",
    ),
    "study-sigma-entry": (
        ("deconvolution", "oracle"),
        {"study": cal.DeconvolutionStudy(num_points=3, sigma=(1.0, 0.0, 2.0))},
        r"study\.sigma: every entry",
    ),
    "study-sigma-nan": (
        ("deconvolution", "nuts"),
        {"study": cal.DeconvolutionStudy(num_points=2, sigma=(1.0, float("nan")))},
        r"study\.sigma: every entry",
    ),
    "study-noise-range-low": (
        ("deconvolution", "oracle"),
        {"study": cal.DeconvolutionStudy(noise_range=(0.0, 3.0))},
        r"study\.noise_range\[0\]",
    ),
    "study-noise-range-order": (
        ("deconvolution", "gibbs"),
        {"study": cal.DeconvolutionStudy(noise_range=(3.0, 0.5))},
        r"study\.noise_range: high 0.5 is below low 3.0",
    ),
    "study-noise-range-shape": (
        ("deconvolution", "oracle"),
        {"study": cal.DeconvolutionStudy(noise_range=(1.0,))},
        r"study\.noise_range: expected \(low, high\)",
    ),
    "james-stein-heteroscedastic": (
        ("deconvolution", "james-stein"),
        {"study": cal.DeconvolutionStudy(noise_range=(0.5, 3.0))},
        "method: 'james-stein' here assumes one sigma",
    ),
    "gibbs-dp": (
        ("deconvolution", "gibbs"),
        {"study": cal.DeconvolutionStudy(prior="dp")},
        "method: 'gibbs' samples the Dirichlet prior",
    ),
    "switching-scenario": (
        ("switching", "imm"),
        {"study": cal.SwitchingStudy(scenario="tank")},
        "name: unknown scenario",
    ),
    "switching-steps": (
        ("switching", "imm"),
        {"study": cal.SwitchingStudy(num_steps=0)},
        "study.num_steps",
    ),
    "exact-too-long": (
        ("switching", "exact"),
        {"study": cal.SwitchingStudy(num_steps=40)},
        "observations: the exact filter needs",
    ),
    "data-fraction": (
        ("deconvolution", "oracle"),
        {"overrides": {"data_fraction": 1.5}},
        r"overrides\['data_fraction'\]",
    ),
    "sigma-factor": (
        ("deconvolution", "nuts"),
        {"overrides": {"sigma_factor": -1.0}},
        r"overrides\['sigma_factor'\]",
    ),
    "wrong-for-switching": (
        ("switching", "imm"),
        {"overrides": {"sigma_factor": 1.3}},
        "overrides: sigma_factor applies to the deconvolution reading only",
    ),
    "alpha": (("deconvolution", "oracle"), {"alpha": 2.0}, "alpha"),
}


@pytest.mark.parametrize("case", list(CALIBRATE_CASES))
def test_calibrate_refuses(case):
    args, kwargs, message = CALIBRATE_CASES[case]
    with pytest.raises(ValueError, match=message):
        cal.calibrate(KEY, *args, num_replicates=4, **kwargs)


# a mesh with two axes, and something that is not a mesh (issue 39: ``mesh`` replaced
# ``num_devices``)
BAD_MESHES = {
    "two-axes": (
        jax.sharding.Mesh(np.asarray(jax.devices()[:1]).reshape(1, 1), ("a", "b")),
        ValueError,
        "^mesh: expected a mesh with one axis",
    ),
    "not-a-mesh": ("cpu", TypeError, "^mesh: expected a jax.sharding.Mesh"),
    "devices": (jax.devices(), TypeError, "^mesh: expected a jax.sharding.Mesh"),
}
ENTRY_POINTS = {
    "sbc": lambda **kw: sbc(KEY, simulate, posterior, quantities, num_replicates=4, **kw),
    "interval_coverage": lambda **kw: interval_coverage(
        KEY, simulate, cdf, targets, num_replicates=4, **kw
    ),
    "calibrate": lambda **kw: cal.calibrate(KEY, "deconvolution", "oracle", num_replicates=4, **kw),
}


@pytest.mark.parametrize("entry", list(ENTRY_POINTS))
@pytest.mark.parametrize("case", list(BAD_MESHES))
def test_a_bad_mesh_is_refused(entry, case):
    mesh, error, message = BAD_MESHES[case]
    with pytest.raises(error, match=message):
        ENTRY_POINTS[entry](mesh=mesh)
