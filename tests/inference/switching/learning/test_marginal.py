"""The switching model as a NumPyro program over theta (states and modes integrated out by a
filter): its log density, gradients, prior predictive, and NUTS with approximate likelihoods
where the collapse is exact."""

import subprocess
import sys

import arviz_stats
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from numpyro.infer import Predictive
from numpyro.infer.util import initialize_model, log_density, potential_energy

from attnbayes.inference.mcmc import run_nuts
from attnbayes.inference.switching.learning.marginal import switching_marginal_model
from attnbayes.models.markov_switching import (
    default_priors,
    markov_switching_ar,
    switching_state_space,
)
from attnbayes.models.regime_laws import OrderedNormal
from attnbayes.models.switching import SwitchingParams, simulate


def _potential(spec, likelihood, observations=None, inputs=None):
    """The program's potential energy (minus the log density in unconstrained coordinates)
    and a start point, by NumPyro's own machinery."""
    obs = spec.observations if observations is None else observations
    u = spec.inputs if inputs is None else inputs
    info = initialize_model(
        jax.random.key(0),
        switching_marginal_model,
        model_args=(obs,),
        model_kwargs={"spec": spec, "likelihood": likelihood, "inputs": u},
    )
    return jax.jit(jax.value_and_grad(info.potential_fn)), info.param_info.z


def _static_state_model():
    """M = 2, d = 2, o = 2 with F_j = 0: x_t = b_j + noise forgets the past, so every collapse
    (GPB1, GPB2, IMM) is exact. Partly missing and inputs included."""
    rng = np.random.default_rng(3)
    params = SwitchingParams(
        initial_probs=np.array([0.5, 0.5]),
        transition_matrix=np.array([[0.8, 0.2], [0.3, 0.7]]),
        initial_means=np.zeros((2, 2)),
        initial_covs=np.stack([np.eye(2), 2 * np.eye(2)]),
        dynamics_matrices=np.zeros((2, 2, 2)),
        dynamics_biases=np.array([[1.0, -1.0], [-1.0, 2.0]]),
        dynamics_covs=np.stack([0.5 * np.eye(2), np.diag([1.0, 0.3])]),
        emission_matrices=np.stack([np.eye(2), np.array([[1.0, 0.5], [0.0, 1.0]])]),
        emission_covs=np.stack([0.4 * np.eye(2), 0.2 * np.eye(2)]),
        emission_biases=np.array([[0.0, 0.5], [0.3, 0.0]]),
        dynamics_input_weights=np.array([[[0.5], [0.0]], [[0.0], [-0.4]]]),
        emission_input_weights=np.zeros((2, 2, 1)),
    )
    u = rng.normal(size=(6, 1))
    _, _, y = simulate(jax.random.key(2), params, 6, inputs=u)
    y = np.array(y)
    y[2, 1] = np.nan
    return switching_state_space(params, y, inputs=u)


def test_log_density_gradient_matches_finite_differences():
    """The gradient of the program's log density (MS-AR(2), Hamilton's exact likelihood,
    through the priors' bijections: stick-breaking rows, the ordered transform, log
    variances) against central differences in the unconstrained coordinates. (The IMM
    likelihood's gradient is checked in test_learning.py.)"""
    rng = np.random.default_rng(0)
    y = np.cumsum(rng.normal(size=50)) * 0.1 + rng.normal(size=50)
    spec = markov_switching_ar(y, 2)
    potential, z = _potential(spec, "exact")
    flat, unravel = jax.flatten_util.ravel_pytree(z)
    flat = flat + 0.1 * jnp.asarray(rng.normal(size=flat.shape))
    value, grad = potential(unravel(flat))
    grad = jax.flatten_util.ravel_pytree(grad)[0]
    assert np.isfinite(float(value)) and np.all(np.isfinite(grad))
    eps = 1e-6
    for i in range(flat.shape[0]):
        step = jnp.zeros_like(flat).at[i].set(eps)
        fd = (potential(unravel(flat + step))[0] - potential(unravel(flat - step))[0]) / (2 * eps)
        np.testing.assert_allclose(grad[i], fd, rtol=1e-5, atol=1e-6)


def test_approximate_likelihoods_equal_the_exact_one_where_the_collapse_is_exact():
    """F = 0: GPB1, GPB2 and IMM give the exact filter's log density (the enumeration of all
    2^6 histories) at random points of theta and at small steps around them (so their
    gradients agree too; the filters' gradients themselves are checked against finite
    differences in tests/inference/switching/test_traceable.py)."""
    spec = _static_state_model()
    rng = np.random.default_rng(1)
    kwargs = {"spec": spec, "likelihood": "exact", "inputs": spec.inputs}
    # the unconstrained parameters are the same for every likelihood: initialise once
    info = initialize_model(
        jax.random.key(0),
        switching_marginal_model,
        model_args=(spec.observations,),
        model_kwargs=kwargs,
    )
    flat, unravel = jax.flatten_util.ravel_pytree(info.param_info.z)
    centres = flat + 0.3 * jnp.asarray(rng.normal(size=(3, flat.shape[0])))
    steps = 1e-4 * jnp.asarray(rng.normal(size=(4, flat.shape[0])))
    points = (centres[:, None] + jnp.concatenate([0 * steps[:1], steps])).reshape(-1, flat.shape[0])
    values = {}
    for lik in ("exact", "gpb2", "imm", "gpb1"):

        def potential(f, lik=lik):
            model_kwargs = {**kwargs, "likelihood": lik}
            return potential_energy(
                switching_marginal_model, (spec.observations,), model_kwargs, unravel(f)
            )

        values[lik] = np.asarray(jax.jit(jax.vmap(potential))(points))
    assert np.all(np.isfinite(values["exact"]))
    for lik in ("gpb2", "imm", "gpb1"):
        np.testing.assert_allclose(values[lik], values["exact"], rtol=1e-11, err_msg=lik)


def test_prior_predictive_and_priors():
    rng = np.random.default_rng(2)
    spec = markov_switching_ar(rng.normal(size=40), 1)
    draws = Predictive(switching_marginal_model, num_samples=5)(jax.random.key(1), None, spec=spec)
    assert draws["observations"].shape == (5, 39, 1)
    assert draws["modes"].shape == (5, 39)
    assert np.all(np.diff(draws["means"], axis=-1) > 0)  # ordered: the labels are fixed
    np.testing.assert_allclose(draws["transition_matrix"].sum(-1), 1.0, rtol=1e-12)
    # OrderedNormal is the law of sorted normals: M! times the product density
    ordered = OrderedNormal(0.0, 1.0, 3)
    x = jnp.array([-0.5, 0.1, 2.0])
    want = np.sum(-0.5 * np.asarray(x) ** 2 - 0.5 * np.log(2 * np.pi)) + np.log(6.0)
    np.testing.assert_allclose(float(ordered.log_prob(x)), want, rtol=1e-12)
    # a pytree: rebuilt from placeholder leaves (run_nuts maps keyword arguments to bools)
    leaves, treedef = jax.tree.flatten(ordered)
    assert isinstance(jax.tree.unflatten(treedef, [False] * len(leaves)), OrderedNormal)
    again = jax.tree.unflatten(treedef, leaves)
    assert again.event_shape == (3,)
    np.testing.assert_allclose(float(again.log_prob(x)), want, rtol=1e-12)
    static = _static_state_model()
    with pytest.raises(
        ValueError, match=r"^priors: no prior for the free parameter\(s\) \['initial_covs'\]"
    ):
        log_density(
            switching_marginal_model,
            (static.observations,),
            {"spec": static, "inputs": static.inputs, "free": ["initial_covs"]},
            {},
        )
    with pytest.raises(ValueError, match=r"^free: unknown"):
        log_density(
            switching_marginal_model, (spec.observations,), {"spec": spec, "free": ["x"]}, {}
        )


def test_default_priors_cover_the_free_parameters():
    spec = _static_state_model()
    priors = default_priors(spec)
    assert set(spec.free) <= set(priors)


@pytest.mark.slow
def test_nuts_with_an_approximate_likelihood_agrees_with_exact_nuts():
    """Where the collapse is exact (F = 0), NUTS over theta with the GPB2 likelihood and with
    the exact one (all 2^6 histories) target the same posterior: posterior means agree within
    5 Monte Carlo standard errors."""
    spec = _static_state_model()
    out = {}
    for lik in ("exact", "gpb2"):
        tree = run_nuts(
            jax.random.key(7),
            switching_marginal_model,
            (spec.observations,),
            {"spec": spec, "likelihood": lik, "inputs": spec.inputs},
            num_warmup=500,
            num_samples=1500,
            num_chains=2,
            posterior_predictive=False,
        )
        out[lik] = tree["posterior"]
    for name in spec.free:
        a, b = (np.asarray(out[k][name]) for k in ("exact", "gpb2"))
        mean_a, mean_b = a.mean(axis=(0, 1)), b.mean(axis=(0, 1))
        flat_a = a.reshape(a.shape[0], a.shape[1], -1)
        flat_b = b.reshape(b.shape[0], b.shape[1], -1)
        for i in range(flat_a.shape[-1]):
            mcse = np.hypot(
                float(arviz_stats.mcse(flat_a[..., i])), float(arviz_stats.mcse(flat_b[..., i]))
            )
            assert abs(mean_a.ravel()[i] - mean_b.ravel()[i]) < 5 * mcse + 1e-12, name


def test_numpyro_factor_works_after_arviz_is_imported_first():
    """``import arviz`` and then ``import numpyro.distributions`` (before attnbayes) left
    ``numpyro.distributions.distribution`` unbound, so ``numpyro.factor`` failed inside the
    marginal program; ``attnbayes.models`` binds it. Run in a fresh interpreter (import order)."""
    code = (
        "import arviz, numpyro.distributions, jax, numpy as np\n"
        "from numpyro.infer.util import log_density\n"
        "from attnbayes.inference.switching import switching_marginal_model\n"
        "from attnbayes.models.markov_switching import markov_switching_ar\n"
        "spec = markov_switching_ar(np.sin(np.arange(30.0)), 1)\n"
        "value = log_density(switching_marginal_model, (spec.observations,), {'spec': spec, "
        "'likelihood': 'exact'}, dict(spec.theta))[0]\n"
        "assert np.isfinite(float(value)), value\n"
    )
    out = subprocess.run([sys.executable, "-P", "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-2000:]
