"""Bad versions of array and scalar arguments, for the bad-input catalogues of attention,
the weight maps and kernel regression (each beside the module it tests)."""

import jax
import numpy as np

HUGE = 1e200  # finite, but its square (a product of two such numbers) overflows float64


def with_value(arr, value, index=0):
    """A float copy of ``arr`` with entry ``index`` (flat) set to ``value``."""
    out = np.array(arr, dtype=float)
    out.flat[index] = value
    return out


def with_object(arr):
    """An object-dtype copy of ``arr`` whose first entry is None."""
    out = np.array(arr, dtype=object)
    out.flat[0] = None
    return out


def bad_arrays(good, *, wrong_rank, neg_inf_allowed=False):
    """Bad versions of one array argument: {label: value}."""
    good = np.asarray(good, dtype=float)
    bad = {
        "nan": with_value(good, np.nan),
        "inf": with_value(good, np.inf),
        "complex": good + 1j,
        "str": good.astype(str),
        "object": with_object(good),
        "empty": np.zeros((0, *good.shape[1:])),
        "rank": wrong_rank,
    }
    if not neg_inf_allowed:
        bad["neginf"] = with_value(good, -np.inf)
    if good.ndim == 2:
        bad["ragged"] = [list(good[0]), list(good[1, :-1])]
    return bad


# bad scalars, by kind
BAD_TEMPERATURES = {
    "nan": np.nan,
    "inf": np.inf,
    "negative": -1.0,
    "str": "1",
    "none": None,
    "complex": 1j,
    "bool": True,
    "vector": np.ones(2),
}
BAD_SCALES = {
    "nan": np.nan,
    "inf": np.inf,
    "str": "a",
    "complex": 1j,
    "bool": True,
    "vector": np.ones(2),
}
BAD_ALPHAS = {
    "one": 1.0,
    "half": 0.5,
    "nan": np.nan,
    "inf": np.inf,
    "str": "2",
    "bool": True,
    "complex": 1.5j,
    "vector": np.ones(2),
}
BAD_BANDWIDTHS = {
    "zero": 0.0,
    "negative": -1.0,
    "nan": np.nan,
    "inf": np.inf,
    "str": "wide",
    "complex": 1j,
    "none": None,
    "bool": True,
    "shape": np.ones(3),
    "matrix": np.ones((2, 2)),
    "tiny": 1e-200,  # 1 / h^2 overflows
}
BAD_BLOCK_SIZES = {"zero": 0, "negative": -1, "float": 2.5, "bool": True, "str": "4"}
BAD_NAMES = {"unknown": "bogus", "none": None, "int": 3}


def all_finite(tree) -> bool:
    """Every numeric leaf finite (method names and flags skipped)."""
    leaves = [np.asarray(leaf) for leaf in jax.tree.leaves(tree)]
    return all(np.all(np.isfinite(a)) for a in leaves if np.issubdtype(a.dtype, np.number))


def spread_limit_problem(dtype, dim, max_spread):
    """Four points spread to ``max_spread`` (0.9 times the limit sqrt(finfo.max / (4 N p)) in
    the tests), every point far from the one ``far_atom``: (x, far_atom, bulk, atoms, w),
    scalar when ``dim`` is 1."""
    n = 4
    x = np.zeros((n, dim), dtype)
    x[:, 0] = [0.0, 0.5, 1.0, max_spread]
    far_atom = np.full((1, dim), 0.0, dtype)
    far_atom[0, 0] = max_spread
    bulk = x[:3]
    atoms = x[[0, 3]]
    if dim == 1:
        x, far_atom, bulk, atoms = x[:, 0], far_atom[:, 0], bulk[:, 0], atoms[:, 0]
    return x, far_atom, bulk, atoms, np.array([0.5, 0.5], dtype)
