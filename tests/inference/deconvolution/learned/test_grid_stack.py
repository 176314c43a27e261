"""The grid stack (version 2): EM at its start, masks, equivariance, its classical inputs against
the suite's own solvers, tracing, saving and loading, the shipped stack, and bad input."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from attnbayes.inference.deconvolution import em, kiefer_wolfowitz, shrinkage
from attnbayes.inference.deconvolution.learned import (
    HELDOUT_FAMILIES,
    HOMOSCEDASTIC,
    RHO_LADDER,
    grid_stack_fit,
    grid_stack_mean,
    grid_stack_moments,
    grid_task_regret,
    heldout_noisy_tasks,
    init_grid_stack,
    init_unrolled_em,
    load_grid_stack,
    load_unrolled_em,
    pretrained_grid_stack,
    save_grid_stack,
    save_unrolled_em,
)
from attnbayes.inference.deconvolution.learned.grid_stack import GRID_SIZE

N = 60


def _data(seed=0, n=N, hetero=True):
    rng = np.random.default_rng(seed)
    z = rng.choice([-2.0, 0.0, 3.0], size=n, p=[0.5, 0.3, 0.2])
    s = np.exp(rng.uniform(np.log(0.5), np.log(3.0), n)) if hetero else np.ones(n)
    return z + s * rng.normal(size=n), s


def _moved(params, **readout):
    """A stack away from EM: every layer's parameters moved, the read-out opened."""
    layers = params.layers._replace(
        mass_weight=params.layers.mass_weight * 0.8,
        pseudo_count=params.layers.pseudo_count + 0.5,
        step=params.layers.step * 1.2,
    )
    defaults = {
        "npmle_trust": jnp.asarray(0.7),
        "gate": jnp.asarray(0.6),
        "candidate_bias": jnp.linspace(-0.5, 0.5, len(RHO_LADDER)),
        "extra_variance": jnp.asarray(0.05),
    }
    defaults.update(readout)
    return params._replace(layers=layers, readout=params.readout._replace(**defaults))


@pytest.mark.parametrize("hetero", [True, False])
def test_initialisation_is_heteroscedastic_em_then_the_posterior(hetero):
    """At init_grid_stack(L): L Kiefer-Wolfowitz EM steps on the grid from uniform weights
    (npmle(method="em"), the suite's own EM on the weights) and the posterior moments under
    that measure (em.posterior), to 1e-10."""
    x, s = _data(hetero=hetero)
    sigma = s if hetero else 1.0
    moments = grid_stack_moments(init_grid_stack(5), x, sigma)
    grid = np.linspace(x.min(), x.max(), GRID_SIZE)
    fit = kiefer_wolfowitz.npmle(x, sigma, grid=grid, method="em", max_iters=5, tol=1e-300)
    assert int(fit.num_iters) == 5
    mean, resp = em.posterior(x, grid, fit.weights, sigma)
    var = np.asarray(resp) @ grid**2 - np.asarray(mean) ** 2
    np.testing.assert_allclose(moments.mean, mean, rtol=0, atol=1e-10)
    np.testing.assert_allclose(moments.variance, var, rtol=0, atol=1e-10)


def test_classical_inputs_match_the_suites_solvers():
    """The NPMLE input reaches npmle's optimum on the same grid (log-likelihood to 1e-7 N) and
    the normal model's fixed point is normal_eb's marginal MLE (to 1e-6)."""
    x, s = _data(1)
    out = grid_stack_fit(init_grid_stack(1), x, s)
    ref = kiefer_wolfowitz.npmle(x, s, grid=np.asarray(out.grid))
    ll = em.log_likelihood(x, out.grid, out.npmle_weights, s)
    assert abs(float(ll) - float(ref.log_likelihood)) < 1e-7 * N
    eb = shrinkage.normal_eb(x, s)
    np.testing.assert_allclose(out.normal_location, eb.location, atol=1e-6)
    np.testing.assert_allclose(out.normal_variance, eb.prior_variance, atol=1e-6)


def test_the_normal_rung_is_the_normal_models_posterior():
    """With the read-out on rho = 1 alone, the output is the normal model's posterior mean and
    variance (closed form, normal_eb's z_hat and posterior_sd)."""
    x, s = _data(2)
    params = init_grid_stack(2)
    bias = jnp.where(jnp.asarray(RHO_LADDER) == 1.0, 0.0, -1e4)
    params = _moved(params, gate=jnp.asarray(1.0), candidate_bias=bias)
    params = params._replace(
        readout=params.readout._replace(score_weights=jnp.zeros(5), extra_variance=jnp.zeros(()))
    )
    out = grid_stack_fit(params, x, s)
    eb = shrinkage.normal_eb(x, s)
    np.testing.assert_allclose(out.mean, eb.z_hat, atol=1e-6)
    np.testing.assert_allclose(out.variance, eb.posterior_sd**2, atol=1e-6)
    assert abs(float(out.candidate_probs[-1]) - 1.0) < 1e-12


def test_padded_task_equals_the_task_and_equivariance():
    """A padded task gives the task's answer on its real points: to 1e-10 when the NPMLE input
    is unused (gamma = 0), to mix-SQP's tolerance when it is used (the padded rows change its
    iterates, not its optimum); (a x + b, |a| s) gives a mean + b and a^2 variance (1e-8)."""
    x, s = _data(3)
    xp = np.concatenate([x, np.full(9, 40.0)])
    sp = np.concatenate([s, np.full(9, 0.01)])
    mask = np.arange(N + 9) < N
    for trust, tol in ((0.0, 1e-10), (0.7, 1e-6)):
        params = _moved(init_grid_stack(3), npmle_trust=jnp.asarray(trust))
        base = grid_stack_moments(params, x, s)
        padded = grid_stack_moments(params, xp, sp, mask=mask)
        np.testing.assert_allclose(padded.mean[:N], base.mean, rtol=0, atol=tol)
        np.testing.assert_allclose(padded.variance[:N], base.variance, rtol=0, atol=tol)
    moved = grid_stack_moments(params, -3.0 * x + 7.0, 3.0 * s)
    np.testing.assert_allclose(moved.mean, -3.0 * base.mean + 7.0, rtol=0, atol=1e-8)
    np.testing.assert_allclose(moved.variance, 9.0 * base.variance, rtol=1e-8, atol=1e-10)


def test_jit_vmap_grad():
    """vmap over data sets equals the loop; the gradient in every parameter is finite and
    some are non-zero; the output's prior is a measure."""
    from attnbayes.inference.deconvolution.learned.grid_stack import grid_stack_fit_unchecked

    params = _moved(init_grid_stack(3))
    xs = np.stack([_data(k)[0] for k in range(2)])
    ss = np.stack([_data(k)[1] for k in range(2)])
    mask = jnp.ones(N, bool)
    batched = jax.vmap(lambda x, s: grid_stack_fit_unchecked(params, x, s, mask))(xs, ss)
    for k in range(2):
        single = grid_stack_moments(params, xs[k], ss[k])
        np.testing.assert_allclose(batched.mean[k], single.mean, rtol=0, atol=1e-12)
        assert abs(float(jnp.sum(batched.prior_weights[k])) - 1.0) < 1e-12

    def loss(p):
        out = grid_stack_fit_unchecked(p, jnp.asarray(xs[0]), jnp.asarray(ss[0]), mask)
        return jnp.sum(out.mean**2) + jnp.sum(out.variance)

    grads = jax.grad(loss)(params)
    leaves = jax.tree_util.tree_leaves(grads)
    assert all(bool(jnp.all(jnp.isfinite(g))) for g in leaves)
    assert float(jnp.abs(grads.readout.gate)) > 0
    assert float(jnp.max(jnp.abs(grads.layers.pseudo_count))) > 0


def test_save_load_round_trip_and_versions(tmp_path):
    """A grid stack saves and loads bit for bit; each loader names the other's file."""
    params = _moved(init_grid_stack(2))
    path = tmp_path / "v2.npz"
    save_grid_stack(path, params, {"note": "x", "step": 3})
    loaded, meta = load_grid_stack(path)
    assert meta == {"note": "x", "step": 3}
    for a, b in zip(
        jax.tree_util.tree_leaves(params), jax.tree_util.tree_leaves(loaded), strict=True
    ):
        np.testing.assert_array_equal(a, b)
    with pytest.raises(ValueError, match=r"path: format version 2 .*grid stack.*load_grid_stack"):
        load_unrolled_em(path)
    v1 = tmp_path / "v1.npz"
    save_unrolled_em(v1, init_unrolled_em(2))
    with pytest.raises(ValueError, match=r"path: format version 1 .*load_unrolled_em"):
        load_grid_stack(v1)


X, S = _data(4, n=8)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"sigma": S[:5]}, r"sigma: .*shape"),
        ({"sigma": np.where(np.arange(8) == 2, 0.0, S)}, "sigma"),
        ({"sigma": -1.0}, "sigma"),
        ({"params": init_unrolled_em(2)}, r"params: a version-1 unrolled-EM stack"),
        ({"params": "stack"}, "params: expected GridStackParams"),
        ({"x": np.stack([X, X], axis=1)}, r"x: the grid stack is for scalar data \(p = 1\)"),
        ({"x": X[:1], "sigma": 1.0}, "x: the grid stack needs at least two points"),
        ({"x": np.ones(8)}, "x: all real points are equal"),
        ({"mask": np.ones(8)}, "mask: expected a boolean array"),
        ({"mask": np.arange(8) < 1}, "mask: marks fewer than two points"),
        ({"grid_size": 1}, "grid_size"),
        ({"x": np.where(np.arange(8) == 3, np.nan, X)}, "x"),
    ],
)
def test_bad_input_is_refused_by_name(kwargs, match):
    args = {"params": init_grid_stack(1), "x": X, "sigma": S}
    args.update(kwargs)
    params, x, sigma = args.pop("params"), args.pop("x"), args.pop("sigma")
    with pytest.raises(ValueError, match=match):
        grid_stack_mean(params, x, sigma, **args)


def test_bad_parameter_shapes_are_named():
    params = init_grid_stack(2)
    bad = params._replace(layers=params.layers._replace(step=jnp.ones(3)))
    with pytest.raises(ValueError, match=r"params.layers.step: expected shape \(2,\)"):
        grid_stack_mean(bad, X, S)
    bad = params._replace(readout=params.readout._replace(gate=jnp.asarray(jnp.nan)))
    with pytest.raises(ValueError, match="params.readout.gate.*NaN"):
        grid_stack_mean(bad, X, S)


def _check_recorded_regrets(kind, families):
    """The shipped v2 stack's held-out regret on ``families`` equals its metadata's (1e-6)."""
    from attnbayes.inference.deconvolution.learned.grid_training import NoisePrior
    from attnbayes.inference.deconvolution.learned.training import TaskPrior

    params, meta = pretrained_grid_stack(metadata=True)
    noise = (
        HOMOSCEDASTIC
        if kind == "homoscedastic"
        else NoisePrior(meta["homoscedastic_prob"], meta["max_ratio"])
    )
    prior = TaskPrior(min_points=meta["min_points"], max_points=meta["max_points"])
    for family in families:
        tasks = heldout_noisy_tasks(
            jax.random.PRNGKey(meta["heldout_seed"]),
            family,
            meta["heldout_tasks"],
            meta["heldout_points"],
            noise=noise,
            prior=prior,
        )
        mse, oracle = grid_task_regret(params, tasks)
        recorded = meta[f"regret.{kind}.{family}"]
        assert abs(float(jnp.mean(mse - oracle)) - recorded) < 1e-6, family


@pytest.mark.parametrize("kind", ["homoscedastic", "heteroscedastic"])
def test_shipped_stack_reproduces_its_recorded_regret(kind):
    """The shipped v2 stack reproduces the held-out regrets its model card records (1e-6), on
    one family per kind here; every family under ``-m slow``."""
    _check_recorded_regrets(
        kind, {"homoscedastic": ("dp",), "heteroscedastic": ("sparse-means",)}[kind]
    )


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["homoscedastic", "heteroscedastic"])
def test_shipped_stack_reproduces_every_recorded_regret(kind):
    """(About a minute per kind.) Every held-out family of the model card (nine per kind)."""
    _check_recorded_regrets(kind, HELDOUT_FAMILIES)


def test_one_unit_carrying_the_whole_weight_stays_finite():
    """A unit with a standard error 1e9 times smaller than the rest, and a normal model at
    A = 0: its leave-one-out normal mean would divide 0 by 0 (reviewed: all-NaN output)."""
    x = np.r_[0.3, 0.5 * np.sin(np.arange(1.0, 20.0))]
    s = np.r_[1e-9, np.ones(19)]
    with pytest.raises(ValueError, match="grid_size: the grid's spacing"):
        grid_stack_moments(pretrained_grid_stack(), x, s)  # too fine a unit for 128 keys
    needed = int(np.ceil(np.ptp(x) / 1e-9)) + 1
    assert needed > 10**8  # so run the kernel itself: the check is the public boundary's
    from attnbayes.inference.deconvolution.learned.grid_stack import grid_stack_fit_unchecked

    out = grid_stack_fit_unchecked(
        pretrained_grid_stack(), jnp.asarray(x), jnp.asarray(s), jnp.ones(20, bool)
    )
    assert bool(jnp.all(jnp.isfinite(out.mean))) and bool(jnp.all(jnp.isfinite(out.variance)))


def test_an_outlier_that_stretches_the_grid_is_refused_by_name():
    x = np.r_[np.linspace(-1.0, 1.0, 30), 1e4]
    with pytest.raises(ValueError, match=r"grid_size: .*exceeds the smallest standard error"):
        grid_stack_mean(init_grid_stack(1), x, 1.0)


def test_derivatives_in_x_and_sigma_match_finite_differences():
    """At init (EM on the grid, no classical input used) the derivative of the posterior mean in
    x_i and s_i is the rule's own (central differences, 1e-6)."""
    from attnbayes.inference.deconvolution.learned.grid_stack import grid_stack_fit_unchecked

    x, s = _data(5, n=20)
    params, mask = init_grid_stack(2), jnp.ones(20, bool)

    def mean5(x, s):
        return grid_stack_fit_unchecked(params, x, s, mask).mean[5]

    gx, gs_ = jax.grad(mean5, argnums=(0, 1))(jnp.asarray(x), jnp.asarray(s))
    h = 1e-6
    e = np.eye(20)[5]
    fd_x = (mean5(x + h * e, s) - mean5(x - h * e, s)) / (2 * h)
    fd_s = (mean5(x, s + h * e) - mean5(x, s - h * e)) / (2 * h)
    assert abs(float(gx[5]) - float(fd_x)) < 1e-6 and abs(float(fd_x)) > 1e-3
    assert abs(float(gs_[5]) - float(fd_s)) < 1e-6 and abs(float(fd_s)) > 1e-3


def test_the_widened_variance_never_exceeds_the_larger_of_the_posterior_and_prior_variance():
    """g t_i^2 widens the intervals, capped: z in {0, 1}, half the units at s = 0.1, half at 10."""
    rng = np.random.default_rng(6)
    z = rng.integers(0, 2, 200).astype(float)
    s = np.where(np.arange(200) < 100, 0.1, 10.0)
    x = z + s * rng.normal(size=200)
    params = pretrained_grid_stack()
    out = grid_stack_fit(params, x, s, grid_size=2000)
    no_widening = grid_stack_fit(
        params._replace(readout=params.readout._replace(extra_variance=jnp.zeros(()))),
        x,
        s,
        grid_size=2000,
    )
    g, w = np.asarray(out.grid), np.asarray(out.prior_weights)
    prior_var = w @ g**2 - (w @ g) ** 2  # the normal part's A within the discretisation
    cap = np.maximum(np.asarray(no_widening.variance), prior_var + 1e-3)
    assert np.all(np.asarray(out.variance) <= cap)
    assert np.all(np.asarray(out.variance) >= np.asarray(no_widening.variance) - 1e-12)
