"""Data and references of the Nadaraya-Watson tests (kernel regression and the kernel joint):
d2l's regression function, a 2-D surface, brute-force NumPy loops and statsmodels' KernelReg."""

import numpy as np
from statsmodels.nonparametric.kernel_regression import KernelReg


def d2l_function(x):
    """The regression function of d2l's Nadaraya-Watson section: 2 sin x + x^0.8."""
    return 2 * np.sin(x) + x**0.8


def d2l_data(n, seed, noise=0.5):
    rng = np.random.default_rng(seed)
    x = np.sort(rng.uniform(0, 5, n))
    return x, d2l_function(x) + noise * rng.normal(size=n)


def plane_data(n, seed, noise=0.3):
    """2-D keys on [0, 5] x [0, 10] (different scales), a smooth surface plus noise."""
    rng = np.random.default_rng(seed)
    x = rng.uniform(0, 1, (n, 2)) * np.array([5.0, 10.0])
    y = 2 * np.sin(x[:, 0]) + 0.3 * x[:, 1] + noise * rng.normal(size=n)
    return x, y


# 1-D kernels written out with their statsmodels (sandbox) normalising constants, which
# Nadaraya-Watson must not depend on.
NUMPY_KERNELS = {
    "gaussian": lambda u: np.exp(-(u**2) / 2) / np.sqrt(2 * np.pi),
    "boxcar": lambda u: 0.5 * (np.abs(u) <= 1),
    "epanechnikov": lambda u: 0.75 * (1 - u**2) * (np.abs(u) < 1),
    "triangular": lambda u: (1 - np.abs(u)) * (np.abs(u) < 1),
    "tricube": lambda u: 70 / 81 * (1 - np.abs(u) ** 3) ** 3 * (np.abs(u) < 1),
}


def brute_force_nw(keys, values, queries, kernel, bandwidth):
    """Loop over queries: product kernel weights, ratio, nearest key for an empty window."""
    k = np.asarray(keys, float).reshape(len(keys), -1)
    q = np.asarray(queries, float).reshape(len(queries), -1)
    v = np.asarray(values, float)
    h = np.broadcast_to(np.asarray(bandwidth, float), (k.shape[1],))
    out = []
    for query in q:
        u = (query - k) / h
        w = np.prod(NUMPY_KERNELS[kernel](u), axis=1) / np.prod(h)
        if w.sum() > 0:
            out.append(np.tensordot(w, v, axes=1) / w.sum())
        else:
            out.append(v[np.argmin(np.sum(u**2, axis=1))])
    return np.array(out)


def brute_force_loo(keys, values, kernel, bandwidth):
    """Explicit leave-one-out loop: refit without point i, predict at k_i."""
    k = np.asarray(keys, float).reshape(len(keys), -1)
    v = np.asarray(values, float)
    preds = []
    for i in range(len(k)):
        keep = np.arange(len(k)) != i
        preds.append(brute_force_nw(k[keep], v[keep], k[i : i + 1], kernel, bandwidth)[0])
    preds = np.array(preds)
    err = (v - preds) ** 2
    return np.mean(err if err.ndim == 1 else err.sum(1)), preds


def sm_kernel_reg(endog, exog, var_type, **kwargs):
    """statsmodels ``KernelReg`` with an explicit generator (silences its FutureWarning)."""
    return KernelReg(endog, exog, var_type, rng=np.random.default_rng(0), **kwargs)


# Shared query sets: the jitted kernels compile once per shape and are reused across tests.
QUERIES_1D = np.linspace(0.1, 4.9, 23)
H_2D = np.array([1.0, 2.5])


def queries_2d(x2):
    return x2[::7] + 0.05  # 15 queries


def vector_values(y2):
    return np.stack([y2, y2**2], axis=1)  # (n, 2)
