"""``run_nuts`` compiles once per model, settings and data shape (issue 14).

Compilations are counted two ways: the cache misses of ``run_nuts`` and the XLA compilations
that JAX reports through ``jax.monitoring`` (``/jax/core/compile/backend_compile_duration``,
or ``/jax/compilation_cache/cache_hits`` when a persistent cache answers instead). No timings.
Correctness: a conjugate normal mean against its closed form under every chain method, and
the three-atoms deconvolution model against plain NumPyro ``MCMC`` (posterior means, the
DataTree layout of ``az.from_numpyro`` and its pointwise log-likelihood).
"""

import contextlib
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
import pytest
from numpyro.handlers import uncondition
from numpyro.infer import MCMC, NUTS, Predictive
from numpyro.infer.util import log_likelihood

from attnbayes.inference import mcmc
from attnbayes.inference.mcmc import EXTRA_FIELDS, compiled_cache_info, run_nuts
from attnbayes.models.deconvolution import deconvolution_model, model_dims, simulate

PRIOR_SCALE, NOISE = 2.0, 1.5


@contextlib.contextmanager
def count_compilations():
    """Counts XLA compilations (and persistent-cache retrievals) and run_nuts's cache misses."""
    events = []

    def listener(event, *_, **__):
        # one XLA compilation, or one program read from a persistent compilation cache
        if event in (
            "/jax/core/compile/backend_compile_duration",
            "/jax/compilation_cache/cache_hits",
        ):
            events.append(event)

    jax.monitoring.register_event_duration_secs_listener(listener)
    jax.monitoring.register_event_listener(listener)
    counts = {"misses": compiled_cache_info()["misses"]}
    try:
        yield counts
    finally:
        jax.monitoring.unregister_event_duration_listener(listener)
        jax.monitoring.unregister_event_listener(listener)
        counts["misses"] = compiled_cache_info()["misses"] - counts["misses"]
        counts["xla"] = len(events)


def counted_model(y=None):
    """A model of this file only, so no other test has compiled it."""
    mu = numpyro.sample("mu", dist.Normal(0.0, PRIOR_SCALE))
    with numpyro.plate("obs", y.shape[0]):
        numpyro.sample("y", dist.Normal(mu, NOISE), obs=y)


def normal_mean_model(y=None):
    mu = numpyro.sample("mu", dist.Normal(0.0, PRIOR_SCALE))
    with numpyro.plate("obs", y.shape[0]):
        numpyro.sample("y", dist.Normal(mu, NOISE), obs=y)


def closed_form(y):
    prec = 1 / PRIOR_SCALE**2 + y.shape[0] / NOISE**2
    return float(np.sum(y) / NOISE**2 / prec), float(prec**-0.5)


def data(seed, n=40):
    return np.asarray(1.0 + NOISE * jax.random.normal(jax.random.PRNGKey(seed), (n,)))


# (the posterior predictive is a second program: off where it is not the point, to save its
# compilations)
SMALL = {"num_warmup": 100, "num_samples": 100, "num_chains": 2, "posterior_predictive": False}


@pytest.mark.usefixtures("empty_compilation_cache")  # it counts compilations
def test_second_call_on_new_data_does_not_compile():
    y1, y2, y3 = data(1), data(2), data(3, n=41)
    with count_compilations() as first:
        dt1 = run_nuts(jax.random.PRNGKey(0), counted_model, (y1,), **SMALL)
    assert first["misses"] == 1 and first["xla"] >= 1
    with count_compilations() as second:
        dt2 = run_nuts(jax.random.PRNGKey(0), counted_model, (y2,), **SMALL)
    assert second == {"misses": 0, "xla": 0}
    # the new data were used: observed data, and a posterior centred near their own mean
    np.testing.assert_array_equal(dt2["observed_data"]["y"], y2)
    assert abs(float(dt2["posterior"]["mu"].mean()) - closed_form(y2)[0]) < 0.2
    assert not np.allclose(dt1["posterior"]["mu"], dt2["posterior"]["mu"])
    # a jax array of the same shape and dtype is the same signature as a NumPy one
    y1_jax = jnp.asarray(y1)
    with count_compilations() as again:
        run_nuts(jax.random.PRNGKey(1), counted_model, (y1_jax,), **SMALL)
    assert again == {"misses": 0, "xla": 0}
    # a new shape compiles, and so does a new static setting
    with count_compilations() as shape:
        run_nuts(jax.random.PRNGKey(0), counted_model, (y3,), **SMALL)
    assert shape["misses"] == 1 and shape["xla"] >= 1
    with count_compilations() as setting:
        run_nuts(jax.random.PRNGKey(0), counted_model, (y1,), target_accept_prob=0.9, **SMALL)
    assert setting["misses"] == 1 and setting["xla"] >= 1


@pytest.mark.usefixtures("empty_compilation_cache")  # it counts compilations
def test_posterior_predictive_is_compiled_separately():
    """Switching the predictive on or off does not recompile the sampler."""
    y1, y2 = data(4), data(5)
    sizes = {**SMALL, "num_samples": 60}  # settings no other test uses
    run_nuts(jax.random.PRNGKey(0), counted_model, (y1,), **sizes)
    with count_compilations() as counts:
        dt = run_nuts(
            jax.random.PRNGKey(0), counted_model, (y2,), **{**sizes, "posterior_predictive": True}
        )
    assert counts["misses"] == 0 and counts["xla"] == 1  # the predictive only
    assert dt["posterior_predictive"]["y"].shape == (2, 60, 40)


class Params(NamedTuple):
    scale: np.ndarray


def numpy_checked_model(y=None, *, params: Params):
    """Checks ``params`` with NumPy, so it cannot be traced: ``params`` is compiled in."""
    scale = float(np.asarray(params.scale))
    if scale <= 0:
        raise ValueError("params.scale: must be > 0")
    mu = numpyro.sample("mu", dist.Normal(0.0, scale))
    with numpyro.plate("obs", y.shape[0]):
        numpyro.sample("y", dist.Normal(mu, NOISE), obs=y)


@pytest.mark.usefixtures("empty_compilation_cache")  # it counts compilations
def test_arrays_the_model_needs_concrete_are_compiled_in():
    params = Params(np.asarray(PRIOR_SCALE))
    y1, y2 = data(6), data(7)
    with count_compilations() as first:
        run_nuts(jax.random.PRNGKey(0), numpy_checked_model, (y1,), {"params": params}, **SMALL)
    assert first["misses"] == 1
    with count_compilations() as second:  # y stays an argument
        dt = run_nuts(
            jax.random.PRNGKey(0), numpy_checked_model, (y2,), {"params": params}, **SMALL
        )
    assert second == {"misses": 0, "xla": 0}
    assert abs(float(dt["posterior"]["mu"].mean()) - closed_form(y2)[0]) < 0.2
    with count_compilations() as third:  # new values of params: a new program
        run_nuts(
            jax.random.PRNGKey(0),
            numpy_checked_model,
            (y2,),
            {"params": Params(np.asarray(3.0))},
            **SMALL,
        )
    assert third["misses"] == 1
    with pytest.raises(ValueError, match="^params.scale"):
        run_nuts(
            jax.random.PRNGKey(0), numpy_checked_model, (y2,), {"params": Params(np.asarray(-1.0))}
        )


@pytest.mark.usefixtures("empty_compilation_cache")  # it counts compilations
def test_model_checks_run_before_compiling():
    x = np.linspace(-2.0, 2.0, 30)
    x[3] = np.nan
    with count_compilations() as counts, pytest.raises(ValueError, match="^x: "):
        run_nuts(jax.random.PRNGKey(0), deconvolution_model, (x,), {"sigma": 1.0, "num_atoms": 3})
    assert counts == {"misses": 0, "xla": 0}
    with pytest.raises(ValueError, match="^init_values"):
        run_nuts(jax.random.PRNGKey(0), counted_model, (data(1),), init_values=[1.0])
    with pytest.raises(ValueError, match="^dense_mass"):
        run_nuts(jax.random.PRNGKey(0), counted_model, (data(1),), dense_mass=1)


@pytest.mark.parametrize("chain_method", ["sequential", "vectorized", "parallel"])
def test_every_chain_method_matches_the_closed_form(chain_method):
    if chain_method == "parallel" and jax.local_device_count() < 2:
        pytest.skip("needs 2 devices (tests/conftest.py sets XLA_FLAGS for 2 host devices)")
    y = data(8)
    dt = run_nuts(
        jax.random.PRNGKey(9),
        normal_mean_model,
        (y,),
        num_warmup=300,
        num_samples=1000,
        chain_method=chain_method,
        posterior_predictive=False,
    )
    assert dt["posterior"].attrs["chain_method"] == chain_method
    mean, sd = closed_form(y)
    draws = np.asarray(dt["posterior"]["mu"])
    assert draws.shape == (2, 1000)
    import arviz as az

    ess = float(az.ess(dt, var_names=["mu"])["mu"])
    assert ess > 300
    assert abs(draws.mean() - mean) < 4 * sd / np.sqrt(ess)
    assert abs(draws.std() - sd) < 0.1 * sd
    # the chains differ (each its own key) and both adapted a step size
    assert not np.allclose(draws[0], draws[1])
    assert np.all(np.asarray(dt["sample_stats"]["step_size"]) > 0)


@pytest.mark.usefixtures("empty_compilation_cache")  # it counts compilations
def test_init_values_and_dense_mass():
    y = data(10)
    dt = run_nuts(
        jax.random.PRNGKey(11),
        normal_mean_model,
        (y,),
        num_warmup=0,
        num_samples=3,
        num_chains=2,
        init_values={"mu": 25.0},
        dense_mass=True,
        posterior_predictive=False,
    )
    with count_compilations() as counts:  # init values are arguments: a new value, no compiling
        other = run_nuts(
            jax.random.PRNGKey(11),
            normal_mean_model,
            (y,),
            num_warmup=0,
            num_samples=3,
            num_chains=2,
            init_values={"mu": -25.0},
            dense_mass=True,
            posterior_predictive=False,
        )
    assert counts == {"misses": 0, "xla": 0}
    # one transition from mu = +25 or -25 (same key): the start was used
    assert not np.allclose(dt["posterior"]["mu"], other["posterior"]["mu"])


# ----------------------------------------------------------------------------- three atoms


THREE_ATOMS = {"num_warmup": 500, "num_samples": 500, "num_chains": 2}


@pytest.fixture(scope="module")
def three_atoms_runs():
    """run_nuts and plain NumPyro MCMC on the same N = 300 three-atoms data, as
    ``compare_deconvolution`` calls run_nuts (K = 3, ordered, model_dims)."""
    _, x = simulate(jax.random.PRNGKey(12), "three-atoms", 1.0, 300)
    x = np.asarray(x)
    kwargs = {
        "sigma": 1.0,
        "num_atoms": 3,
        "ordered": True,
        "atom_loc": np.asarray(np.mean(x)),
        "atom_scale": np.asarray(2.0 * np.std(x) + 1.0),
    }
    tree = run_nuts(
        jax.random.PRNGKey(13),
        deconvolution_model,
        (x,),
        kwargs,
        dims=model_dims(True),
        **THREE_ATOMS,
    )
    plain = MCMC(
        NUTS(deconvolution_model),
        num_warmup=THREE_ATOMS["num_warmup"],
        num_samples=THREE_ATOMS["num_samples"],
        num_chains=THREE_ATOMS["num_chains"],
        chain_method=tree["posterior"].attrs["chain_method"],
        progress_bar=False,
    )
    plain.run(jax.random.PRNGKey(14), x, extra_fields=EXTRA_FIELDS, **kwargs)
    return x, kwargs, tree, plain


def test_three_atoms_agrees_with_plain_numpyro(three_atoms_runs):
    import arviz as az

    _, _, tree, plain = three_atoms_runs
    reference = az.from_dict(
        {
            "posterior": {
                k: np.asarray(v) for k, v in plain.get_samples(group_by_chain=True).items()
            }
        },
        dims=model_dims(True),
    )
    for name in ("atoms", "weights"):
        ours, ref = tree["posterior"][name], reference["posterior"][name]
        se = np.hypot(
            np.asarray(az.mcse(tree, var_names=[name])[name]),
            np.asarray(az.mcse(reference, var_names=[name])[name]),
        )
        err = np.abs(ours.mean(("chain", "draw")).values - ref.mean(("chain", "draw")).values)
        assert np.all(err < 4 * se), (name, err / se)
    assert int(tree["sample_stats"]["diverging"].sum()) == 0


def _layout(tree):
    return {
        group: {
            name: (tree[group][name].dims, tree[group][name].dtype)
            for name in tree[group].data_vars
        }
        for group in tree.children
    }


def test_three_atoms_datatree_is_that_of_from_numpyro(three_atoms_runs, monkeypatch):
    import arviz as az

    x, kwargs, tree, plain = three_atoms_runs
    predictive = Predictive(
        uncondition(deconvolution_model), plain.get_samples(), return_sites=["x"]
    )
    reference = az.from_numpyro(
        plain,
        log_likelihood=True,
        posterior_predictive=predictive(jax.random.PRNGKey(15), x, **kwargs),
        dims=model_dims(True),
    )
    assert set(tree.children) == set(reference.children)
    assert _layout(tree) == _layout(reference)
    for group in tree.children:
        for coord in reference[group].coords:
            np.testing.assert_array_equal(tree[group][coord], reference[group][coord])
        assert set(reference[group].attrs) <= set(tree[group].attrs)
    post = tree["posterior"]
    assert {"sampling_time", "chain_method", "num_warmup", "target_accept_prob"} <= set(post.attrs)
    assert post.attrs["num_warmup"] == THREE_ATOMS["num_warmup"]
    np.testing.assert_array_equal(tree["observed_data"]["x"], x)
    # the pointwise log-likelihood is NumPyro's at the posterior draws
    draws = {name: jnp.asarray(post[name].values) for name in ("atoms", "weights")}
    expected = log_likelihood(deconvolution_model, draws, x, batch_ndims=2, **kwargs)["x"]
    np.testing.assert_allclose(tree["log_likelihood"]["x"].values, expected, rtol=1e-10)
    # sample stats as from_numpyro derives them
    stats = tree["sample_stats"]
    np.testing.assert_array_equal(
        stats["tree_depth"], np.log2(stats["n_steps"].values).astype(int) + 1
    )
    assert float(stats["acceptance_rate"].mean()) > 0.6
    # built from arrays: a second call never goes through from_numpyro (no re-tracing)
    monkeypatch.setattr(az, "from_numpyro", None)
    import arviz_base

    monkeypatch.setattr(arviz_base, "from_numpyro", None)
    again = run_nuts(
        jax.random.PRNGKey(16),
        deconvolution_model,
        (x,),
        kwargs,
        dims=model_dims(True),
        **THREE_ATOMS,
    )
    assert _layout(again) == _layout(tree)


def test_inferred_dims_are_the_plates():
    y = data(17)
    sizes = {**SMALL, "num_samples": 60, "posterior_predictive": True}  # as compiled above
    tree = run_nuts(jax.random.PRNGKey(18), counted_model, (y,), **sizes)
    assert tree["log_likelihood"]["y"].dims == ("chain", "draw", "obs")
    assert tree["posterior_predictive"]["y"].dims == ("chain", "draw", "obs")
    assert tree["observed_data"]["y"].dims == ("obs",)


def test_lean_import():
    """Neither ArviZ nor xarray nor pandas at import (a fresh interpreter)."""
    import subprocess
    import sys

    code = (
        "import sys; import attnbayes.inference.mcmc, attnbayes.inference.diagnostics; "
        "heavy = [m for m in ('arviz', 'arviz_base', 'arviz_stats', 'xarray', 'pandas') "
        "if m in sys.modules]; print(heavy); sys.exit(bool(heavy))"
    )
    result = subprocess.run(
        [sys.executable, "-P", "-c", code], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert mcmc.__name__ == "attnbayes.inference.mcmc"


@pytest.mark.parametrize("chain_method", ["sequential", "vectorized"])
def test_run_nuts_unchecked_draws_the_chains_of_run_nuts(chain_method):
    """``run_nuts_unchecked`` (the traceable kernel ``sbc`` vmaps) runs the chains ``run_nuts``
    runs with the same chain method, from ``run_nuts``'s sampling key."""
    y = data(12)
    key = jax.random.PRNGKey(13)
    sizes = {"num_warmup": 100, "num_samples": 100, "num_chains": 2}
    tree = run_nuts(
        key,
        normal_mean_model,
        (y,),
        chain_method=chain_method,
        posterior_predictive=False,
        **sizes,
    )
    key_mcmc = jax.random.split(key)[0]
    samples, stats = jax.jit(
        lambda k, obs: mcmc.run_nuts_unchecked(
            k, normal_mean_model, (obs,), chain_method=chain_method, **sizes
        )
    )(key_mcmc, y)
    np.testing.assert_allclose(
        np.asarray(samples["mu"]), np.asarray(tree["posterior"]["mu"]), rtol=1e-12
    )
    np.testing.assert_array_equal(
        np.asarray(stats["num_steps"]), np.asarray(tree["sample_stats"]["n_steps"])
    )
    with pytest.raises(ValueError, match="^chain_method"):
        mcmc.run_nuts_unchecked(key, normal_mean_model, (y,), chain_method="parallel", **sizes)
