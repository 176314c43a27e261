"""The regret-versus-N table: the oracle's regret is 0, the grid stack's rows are
``grid_task_regret`` on the same tasks, paired differences and coverage recomputed by hand, the
skipped methods say why, and bad arguments are refused by name before any computation."""

import jax
import numpy as np
import pytest

from attnbayes import sharding
from attnbayes.inference.deconvolution import em
from attnbayes.inference.deconvolution.kiefer_wolfowitz import npmle, npmle_posterior
from attnbayes.inference.deconvolution.learned import (
    HELDOUT_FAMILIES,
    HOMOSCEDASTIC,
    NoisePrior,
    grid_task_regret,
    heldout_noisy_tasks,
    init_grid_stack,
    init_unrolled_em,
    unrolled_em,
)
from attnbayes.inference.deconvolution.learned import regret as rv
from attnbayes.inference.deconvolution.shrinkage import sure_shrinkage

KEY = jax.random.PRNGKey(7)
FAMILIES = ("three-atoms", "sparse-means")
SIZES = (30,)  # one shape: the stack compiles once here, in grid_task_regret once more
TASKS = 4


@pytest.fixture(scope="module")
def params():
    """A grid stack away from EM's parameters (every leaf moved), to test the general stack."""
    base = init_grid_stack(2)
    leaves, tree = jax.tree_util.tree_flatten(base)
    keys = jax.random.split(jax.random.PRNGKey(3), len(leaves))
    moved = [x + 0.05 * jax.random.normal(k, x.shape) for x, k in zip(leaves, keys, strict=True)]
    return jax.tree_util.tree_unflatten(tree, moved)


@pytest.fixture(scope="module")
def table(params):
    return rv.regret_versus_n(
        KEY,
        families=FAMILIES,
        sizes=SIZES,
        num_tasks=TASKS,
        noise="heteroscedastic",
        methods=("oracle", "v2", "v1", "em", "james-stein", "nuts"),
        grid_params=params,
        v1_params=init_unrolled_em(2),
        nuts_families=("dp",),
        em_max_points=10,
    )


def _tasks(family, n, kind="heteroscedastic", num_tasks=TASKS):
    """The tasks of a cell, by the key rule of the docstring."""
    key = jax.random.fold_in(KEY, rv.NOISE_KINDS.index(kind))
    key = jax.random.fold_in(jax.random.fold_in(key, HELDOUT_FAMILIES.index(family)), n)
    noise = HOMOSCEDASTIC if kind == "homoscedastic" else NoisePrior()
    return heldout_noisy_tasks(key, family, num_tasks, n, noise=noise)


def _james_stein(x, s):
    """Positive-part James-Stein toward the precision-weighted mean, by hand: (mean, sd)."""
    w = 1.0 / s**2
    m = np.sum(w * x, 1, keepdims=True) / np.sum(w, 1, keepdims=True)
    c = x.shape[1] - 3.0
    quad = np.sum(w * (x - m) ** 2, 1, keepdims=True)
    b = np.where(quad > c, c / quad, 1.0)
    return m + (1.0 - b) * (x - m), np.sqrt((1.0 - b) * s**2)


def _row(table, family, n, method, kind="heteroscedastic"):
    rows = table[
        (table.noise == kind)
        & (table.family == family)
        & (table.num_points == n)
        & (table.method == method)
    ]
    assert len(rows) == 1
    return rows.iloc[0]


def test_rows_are_the_methods_on_the_same_tasks(table, params):
    assert len(table) == len(FAMILIES) * len(SIZES) * 6
    for family in FAMILIES:
        for n in SIZES:
            tasks = _tasks(family, n)
            mse, oracle_mse = (np.asarray(a) for a in grid_task_regret(params, tasks))
            v2_regret = mse - oracle_mse
            oracle = _row(table, family, n, "oracle")
            assert oracle.regret == 0.0 and oracle.regret_se == 0.0
            v2 = _row(table, family, n, "v2")
            assert v2.num_tasks == TASKS
            np.testing.assert_allclose(v2.regret, v2_regret.mean(), rtol=0, atol=1e-12)
            se = v2_regret.std(ddof=1) / np.sqrt(TASKS)
            np.testing.assert_allclose(v2.regret_se, se, rtol=1e-9)
            np.testing.assert_allclose(v2.mse, mse.mean(), rtol=0, atol=1e-12)
            np.testing.assert_allclose(v2.oracle_mse, oracle_mse.mean(), rtol=0, atol=1e-12)
            # paired against the only classical rule run, James-Stein, recomputed by hand
            x, s, z = (np.asarray(a) for a in (tasks.x, tasks.sigma, tasks.z))
            js_mean, js_sd = _james_stein(x, s)
            js_regret = np.mean((js_mean - z) ** 2, 1) - oracle_mse
            js = _row(table, family, n, "james-stein")
            np.testing.assert_allclose(js.regret, js_regret.mean(), rtol=0, atol=1e-12)
            assert js.best_classical == "james-stein" and js.diff_best == 0.0
            diff = v2_regret - js_regret
            assert v2.best_classical == "james-stein"
            np.testing.assert_allclose(v2.diff_best, diff.mean(), rtol=0, atol=1e-12)
            np.testing.assert_allclose(
                v2.diff_best_se, diff.std(ddof=1) / np.sqrt(TASKS), rtol=1e-9
            )
            np.testing.assert_allclose(v2.ratio_best, v2_regret.mean() / js_regret.mean())
            meets = v2.ratio_best <= 1.1 or v2.diff_best <= 2 * v2.diff_best_se
            assert bool(v2.meets_requirement) == meets
            np.testing.assert_allclose(js.diff_v2, -diff.mean(), rtol=0, atol=1e-12)
            inside = np.abs(z - js_mean) <= 1.6448536269514722 * js_sd
            per_task = inside.mean(1)
            np.testing.assert_allclose(js.coverage_90, per_task.mean(), rtol=0, atol=1e-12)
            np.testing.assert_allclose(
                js.coverage_90_se, per_task.std(ddof=1) / np.sqrt(TASKS), rtol=1e-9
            )


def test_skipped_methods_are_nan_rows_that_say_why(table):
    for method, words in (
        ("v1", "one sigma"),
        ("em", "not run above N = 10"),
        ("nuts", "families ['dp'] only"),
    ):
        rows = table[table.method == method]
        assert len(rows) == len(FAMILIES) * len(SIZES)
        assert rows.regret.isna().all() and (rows.num_tasks == 0).all(), method
        assert rows.note.str.contains(words, regex=False).all(), method


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"families": ("dp", "bimodal")}, "families"),
        ({"families": ()}, "families"),
        ({"methods": ("v2", "learned")}, "methods"),
        ({"sizes": (30, 1)}, "sizes"),
        ({"sizes": ()}, "sizes"),
        ({"noise": "gaussian"}, "noise"),
        ({"num_tasks": 0}, "num_tasks"),
        ({"num_tasks": {30: 4}, "sizes": (30, 60)}, "num_tasks"),
        ({"nuts_tasks": 0}, "nuts_tasks"),
        ({"nuts_families": ("nope",)}, "nuts_families"),
        ({"nuts_kwargs": 3}, "nuts_kwargs"),
        ({"em_max_points": 0}, "em_max_points"),
        ({"noise_prior": "wide"}, "noise"),
        ({"progress": 3}, "progress"),
        ({"grid_params": init_unrolled_em(2)}, "grid_params"),
    ],
)
def test_bad_arguments_are_refused_by_name(kwargs, name):
    with pytest.raises(ValueError, match=f"^{name}"):
        rv.regret_versus_n(KEY, **{"methods": ("v2",), **kwargs})


def test_bad_arguments_of_the_other_tables():
    with pytest.raises(ValueError, match="^key"):
        rv.regret_versus_n(3, methods=("james-stein",))
    with pytest.raises(ValueError, match="^settings"):
        rv.xie_kou_brown_table(KEY, settings=("d",), methods=("mle",))
    with pytest.raises(ValueError, match="^num_reps"):
        rv.xie_kou_brown_table(KEY, num_reps=1, methods=("mle",))
    with pytest.raises(ValueError, match="^methods"):
        rv.xie_kou_brown_table(KEY, methods=("v1",))
    with pytest.raises(ValueError, match="^methods"):
        rv.real_data_estimates(KEY, methods=("oracle",))


@pytest.mark.slow
def test_every_method_against_its_library_call_on_both_noise_kinds(params):
    """(About 2 minutes cold.) Both noise kinds, two sizes, every method but NUTS against the
    public library call on each task, NUTS run and paired on its first tasks."""
    sizes, tasks_n = (30, 60), 3
    nuts = {"num_warmup": 100, "num_samples": 100, "num_chains": 2}
    table = rv.regret_versus_n(
        KEY,
        families=("three-atoms",),
        sizes=sizes,
        num_tasks=tasks_n,
        methods=("oracle", "v2", "v1", "em", "npmle", "james-stein", "sure", "nuts"),
        grid_params=params,
        v1_params=init_unrolled_em(2),
        nuts_tasks=2,
        nuts_max_points=30,
        nuts_families=("three-atoms",),
        nuts_kwargs=nuts,
    )
    assert len(table) == 2 * len(sizes) * 8
    for kind in rv.NOISE_KINDS:
        for n in sizes:
            tasks = _tasks("three-atoms", n, kind, tasks_n)
            x, s, z = (np.asarray(a) for a in (tasks.x, tasks.sigma, tasks.z))
            _, oracle_mse = (np.asarray(a) for a in grid_task_regret(params, tasks))
            fits = {
                "em": [
                    em.posterior_mean(xi, f.atoms, f.weights, si)
                    for xi, si in zip(x, s, strict=True)
                    for f in [em.fit_em(xi, si, max_iters=rv.EM_MAX_ITERS, tol=1e-8)]
                ],
                "npmle": [
                    npmle_posterior(xi, si, npmle(xi, si))[0] for xi, si in zip(x, s, strict=True)
                ],
                "sure": [sure_shrinkage(xi, si).z_hat for xi, si in zip(x, s, strict=True)],
            }
            if kind == "homoscedastic":
                fits["v1"] = [unrolled_em(init_unrolled_em(2), xi, 1.0) for xi in x]
            regrets = {}
            for method, means in fits.items():
                r = np.mean((np.stack(means) - z) ** 2, 1) - oracle_mse
                regrets[method] = r
                row = _row(table, "three-atoms", n, method, kind)
                np.testing.assert_allclose(row.regret, r.mean(), rtol=0, atol=1e-9)
            best = min(("em", "npmle", "sure"), key=lambda m: regrets[m].mean())
            js = _row(table, "three-atoms", n, "james-stein", kind)
            if js.regret > regrets[best].mean():
                assert _row(table, "three-atoms", n, "v2", kind).best_classical == best
            row = _row(table, "three-atoms", n, "nuts", kind)
            if n <= 30:
                assert row.num_tasks == 2 and np.isfinite(row.regret) and "R-hat" in row.note
                assert 0 <= row.coverage_90 <= 1
            else:
                assert np.isnan(row.regret) and "above N = 30" in row.note
            if kind == "heteroscedastic":
                assert np.isnan(_row(table, "three-atoms", n, "v1", kind).regret)
    xkb = rv.xie_kou_brown_table(KEY, settings=("c",), sizes=(40,), num_reps=2, grid_params=params)
    mle = xkb.set_index("method").loc["mle"]
    draws = [
        rv.xie_kou_brown(
            jax.random.fold_in(jax.random.fold_in(jax.random.fold_in(KEY, 2), 40), r), 40, "c"
        )
        for r in range(2)
    ]
    np.testing.assert_allclose(
        mle.regret, np.mean([np.mean((d.x - d.z) ** 2) for d in draws]), rtol=1e-12
    )
    real = rv.real_data_estimates(
        KEY,
        methods=("mle", "v2", "v1", "james-stein"),
        grid_params=params,
        v1_params=init_unrolled_em(2),
    )
    schools = real[(real.dataset == "eight-schools") & (real.method == "v1")]
    assert schools.estimate.isna().all() and schools.note.str.contains("one sigma").all()
    batting = real[(real.dataset == "efron-morris") & (real.method == "mle")]
    np.testing.assert_allclose(batting.estimate, batting.x)


def test_a_cell_is_the_same_on_one_device_as_split_over_two(table, params):
    """The fixture's cells (4 tasks: two per device on the default mesh of two) on a mesh of
    one device: every number equal to 1e-12 (the times aside)."""
    one = rv.regret_versus_n(
        KEY,
        families=FAMILIES,
        sizes=SIZES,
        num_tasks=TASKS,
        noise="heteroscedastic",
        methods=("oracle", "v2", "james-stein"),
        grid_params=params,
        mesh=sharding.batch_mesh(jax.devices()[:1]),
    )
    split = table[table.method.isin(("oracle", "v2", "james-stein"))].reset_index(drop=True)
    assert len(split) == len(one) == 2 * 3
    numbers = [c for c in one.columns if one[c].dtype.kind == "f" and c != "seconds_per_task"]
    assert "regret" in numbers and "coverage_90" in numbers
    for column in numbers:
        np.testing.assert_allclose(one[column], split[column], rtol=1e-12, atol=0)


def test_a_bad_mesh_is_refused_by_name():
    with pytest.raises(TypeError, match="^mesh: expected a jax.sharding.Mesh"):
        rv.regret_versus_n(KEY, methods=("james-stein",), mesh=2)
    with pytest.raises(TypeError, match="^mesh: expected a jax.sharding.Mesh"):
        rv.xie_kou_brown_table(KEY, methods=("mle",), mesh=jax.devices())
