"""Gaussian deconvolution: z_i ~ nu iid, x_i | z_i ~ N(z_i, diag(s_i^2)), the noise known.

The mixing measure is discrete, nu = sum_k w_k delta(mu_k). Integrating z out gives the
location mixture p(x_i) = sum_k w_k N(x_i; mu_k, diag(s_i^2)), which is what the NumPyro
program below observes, so NUTS sees only continuous sites: ``weights`` and ``atoms``, plus
``dp_concentration`` and ``sticks`` under the truncated Dirichlet-process prior.

Shape convention: scalar data travel as ``(N,)`` with atoms ``(K,)``; p-dimensional data as
``(N, p)`` with atoms ``(K, p)``. Everything here returns arrays in the convention it was given.
The noise scale ``sigma`` is a number (one for all, s_ic = sigma), an ``(N,)`` array (one per
observation, x_i ~ N(z_i, s_i^2 I_p)) or, for ``(N, p)`` data, an ``(N, p)`` array (one per
observation and coordinate, x_ic ~ N(z_ic, s_ic^2)); ``check_noise_scales`` checks it.

Heteroscedastic data sets (issue 35): ``noise_scales`` (s_i log-uniform), ``log_uniform_noise``
(means from a named measure, independent of s_i), ``xie_kou_brown`` (the settings of Xie, Kou
and Brown 2012, Section 7, where the means may depend on s_i), and the named scenarios
``HETEROSCEDASTIC_SCENARIOS`` / ``heteroscedastic_scenario`` built from them.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
from jax.scipy.special import gammaln
from numpyro.distributions import constraints

from .. import validation

PRIORS = ("dirichlet", "dp", "uniform-weights")


class DiscreteMeasure(NamedTuple):
    """A discrete probability measure nu = sum_k weights[k] delta(atoms[k]).

    Attributes:
        atoms: (K,) for scalar data or (K, p) for p-dimensional data.
        weights: (K,) non-negative, summing to one.
    """

    atoms: jax.Array
    weights: jax.Array


def check_measure(name: str, measure: DiscreteMeasure) -> DiscreteMeasure:
    """Validate a ``DiscreteMeasure`` (shapes, finiteness, weights on the simplex)."""
    if not isinstance(measure, DiscreteMeasure):
        raise ValueError(f"{name}: expected a DiscreteMeasure or a measure name, got {measure!r}")
    atoms = validation.as_float_array(f"{name}.atoms", measure.atoms)
    if atoms.ndim not in (1, 2) or atoms.shape[0] == 0:
        raise ValueError(f"{name}.atoms: expected shape (K,) or (K, p), got {tuple(atoms.shape)}")
    validation.check_finite(f"{name}.atoms", atoms)
    weights = validation.check_weights(f"{name}.weights", measure.weights, size=atoms.shape[0])
    return DiscreteMeasure(jnp.asarray(atoms), jnp.asarray(weights))


# ----------------------------------------------------------------------------- named measures


def three_atoms() -> DiscreteMeasure:
    """The 1-D benchmark measure 0.5 delta(-2) + 0.3 delta(0) + 0.2 delta(3)."""
    return DiscreteMeasure(jnp.array([-2.0, 0.0, 3.0]), jnp.array([0.5, 0.3, 0.2]))


def sparse_means(
    num_nonzero: int = 50, num_points: int = 1000, mean: float = 4.0
) -> DiscreteMeasure:
    """Johnstone-Silverman sparse normal means: (1 - k/n) delta(0) + (k/n) delta(mean).

    In the design of Johnstone & Silverman (2004), used by Koenker & Mizera (2014), k of n
    means equal ``mean`` and the rest are zero; drawing z_i iid from this measure gives k
    nonzero means on average.
    """
    num_points = validation.check_positive_int("num_points", num_points)
    num_nonzero = validation.check_positive_int("num_nonzero", num_nonzero, minimum=0)
    if num_nonzero > num_points:
        raise ValueError(f"num_nonzero: must be <= num_points ({num_points}), got {num_nonzero}")
    mean_arr = validation.as_float_array("mean", mean)
    if mean_arr.ndim != 0:
        raise ValueError(f"mean: expected a number, got shape {tuple(mean_arr.shape)}")
    validation.check_finite("mean", mean_arr)
    frac = num_nonzero / num_points
    return DiscreteMeasure(jnp.array([0.0, float(mean_arr)]), jnp.array([1.0 - frac, frac]))


def ring(num_atoms: int = 8, radius: float = 3.0) -> DiscreteMeasure:
    """Equal-weight atoms on the circle of radius R in 2-D (the spherical case of
    the note "Attention as deconvolution", where the E-step is plain softmax attention).

    With |x| and |mu| both near R the EM key bias -|mu|^2 / (2 sigma^2) is (nearly) constant
    and the E-step is plain softmax attention.
    """
    num_atoms = validation.check_positive_int("num_atoms", num_atoms)
    radius = validation.check_positive_scalar("radius", radius)
    angles = 2.0 * jnp.pi * jnp.arange(num_atoms) / num_atoms
    atoms = radius * jnp.stack([jnp.cos(angles), jnp.sin(angles)], axis=-1)
    return DiscreteMeasure(atoms, jnp.full((num_atoms,), 1.0 / num_atoms))


MEASURES: dict[str, Callable[..., DiscreteMeasure]] = {
    "three-atoms": three_atoms,
    "sparse-means": sparse_means,
    "ring": ring,
}


def get_measure(name: str, **kwargs) -> DiscreteMeasure:
    """The named ground-truth measure (see ``MEASURES``), with optional keyword settings."""
    if not isinstance(name, str) or name not in MEASURES:
        raise ValueError(f"measure: unknown measure {name!r}; known: {sorted(MEASURES)}")
    settings = inspect.signature(MEASURES[name]).parameters
    for setting in kwargs:
        if setting not in settings:
            raise ValueError(
                f"{setting}: not a setting of the measure {name!r}; its settings: "
                f"{list(settings) or 'none'}"
            )
    return MEASURES[name](**kwargs)


# ----------------------------------------------------------------------------- noise scales


def check_noise_scales(sigma, num_points: int | None, dim: int | None):
    """Check a noise scale ``sigma`` in the module's convention; return ``(sigma, N)``.

    ``sigma`` is a number (returned as a float, N = ``num_points``), an (N,) array (one s_i per
    observation) or an (N, p) array (one s_ic per observation and coordinate; p-dimensional
    data only, ``dim`` = p). Concrete arrays are returned as NumPy float arrays, every entry
    finite and > 0; a traced sigma gets its shape checked only and is returned unchanged.
    ``num_points`` is the N of the data (``None``: taken from a per-unit sigma); ``dim`` is p,
    ``None`` for scalar data. Errors name ``sigma``.
    """
    if validation.is_traced(sigma):
        if not jnp.issubdtype(sigma.dtype, jnp.floating):
            raise ValueError(f"sigma: expected real numbers, got a traced array {sigma.aval}")
        shape = tuple(sigma.shape)
        if not shape:
            return sigma, num_points
        arr = None
    else:
        if isinstance(sigma, bool | np.bool_ | str | bytes) or sigma is None:
            raise ValueError(
                f"sigma: expected a positive number or an array of them, got {sigma!r}"
            )
        arr = validation.as_scale_array("sigma", sigma)
        if arr.ndim == 0:
            return validation.check_positive_scalar("sigma", arr), num_points
        shape = tuple(arr.shape)
    if len(shape) == 2 and dim is None:
        raise ValueError(
            f"sigma: shape {shape} is one scale per observation and coordinate, for (N, p) "
            "data; the data are scalar (shape (N,)): pass one scale per observation, shape (N,)"
        )
    if len(shape) not in (1, 2):
        expected = "a number or shape (N,)" + ("" if dim is None else " or (N, p)")
        raise ValueError(f"sigma: expected {expected}, got shape {shape}")
    if shape[0] == 0:
        raise ValueError("sigma: is empty (N = 0)")
    if num_points is not None and shape[0] != num_points:
        raise ValueError(
            f"sigma: has {shape[0]} rows (one per observation) but there are {num_points} "
            "observations"
        )
    if len(shape) == 2 and shape[1] != dim:
        raise ValueError(f"sigma: has {shape[1]} columns but the data have {dim} coordinates")
    if arr is None:
        return sigma, shape[0]
    validation.check_finite("sigma", arr)
    if np.any(arr <= 0):
        index = tuple(int(i) for i in np.argwhere(arr <= 0)[0])
        where = index[0] if len(index) == 1 else index
        raise ValueError(f"sigma: must be > 0, entry {where} is {float(arr[index])}")
    return arr, shape[0]


def _row_scales(sigma, x_ndim: int):
    """sigma (N,) against (N, p) data as (N, 1); otherwise unchanged (a number, (N,), (N, p))."""
    if jnp.ndim(sigma) == 1 and x_ndim == 2:
        return sigma[:, None]
    return sigma


# ----------------------------------------------------------------------------- simulator


# |eps| of a standard normal draw never reaches 10 in float64 or float32 sampling (the inverse-CDF
# method used by jax.random.normal gives at most about 8.3)
NOISE_REACH = 10.0


def simulate(
    key: jax.Array, measure: DiscreteMeasure | str, sigma, num_points: int
) -> tuple[jax.Array, jax.Array]:
    """Draw z_i ~ nu and x_i = z_i + s_i * eps_i, eps_i ~ N(0, I_p), for i = 1..N.

    Args:
        key: a ``jax.random`` key.
        measure: a ``DiscreteMeasure`` or the name of one in ``MEASURES``.
        sigma: the known noise scale: a number (s_i = sigma), (N,) (one per observation) or,
            for (K, p) atoms, (N, p) (one per observation and coordinate); > 0.
        num_points: N (a per-unit sigma must have N rows).

    Returns:
        ``(z, x)``, each (N,) if the atoms are (K,), else (N, p). The noise draws eps do not
        depend on sigma: the same key gives x - z = s_i eps_i with the same eps_i for every
        sigma (a scalar sigma and ``np.full(N, sigma)`` give the same x).
    """
    validation.check_key("key", key)
    if isinstance(measure, str):
        measure = get_measure(measure)
    measure = check_measure("measure", measure)
    num_points = validation.check_positive_int("num_points", num_points)
    dim = None if measure.atoms.ndim == 1 else measure.atoms.shape[1]
    sigma, rows = check_noise_scales(sigma, None, dim)
    if rows is not None and rows != num_points:
        raise ValueError(
            f"sigma: has {rows} rows (one per observation) but num_points is {num_points}"
        )
    if not validation.is_traced(sigma):
        largest = float(np.max(sigma))
        limit = float(jnp.finfo(measure.atoms.dtype).max)
        reach = float(jnp.max(jnp.abs(measure.atoms))) + NOISE_REACH * largest
        if not reach <= limit:
            raise ValueError(
                f"sigma: {largest} is too large for {measure.atoms.dtype}: x = z + sigma eps "
                f"would overflow (|z| + {NOISE_REACH:g} sigma = {reach:.3g} > {limit:.3g})"
            )
    key_c, key_e = jax.random.split(key)
    labels = jax.random.categorical(key_c, jnp.log(measure.weights), shape=(num_points,))
    z = measure.atoms[labels]
    if rows is not None:
        sigma = _row_scales(jnp.asarray(sigma, z.dtype), z.ndim)
    x = z + sigma * jax.random.normal(key_e, z.shape, dtype=z.dtype)
    return z, x


# ----------------------------------------------------------------------------- heteroscedastic


class NoisySample(NamedTuple):
    """A heteroscedastic data set: x_i = z_i + s_i eps_i.

    Attributes:
        z: (N,) the true means.
        x: (N,) the observations.
        sigma: (N,) the known noise scales s_i.
    """

    z: jax.Array
    x: jax.Array
    sigma: jax.Array


def _check_interval(low, high):
    low = validation.check_positive_scalar("low", low)
    high = validation.check_positive_scalar("high", high)
    if not high >= low:
        raise ValueError(f"high: must be >= low = {low}, got {high}")
    return low, high


def noise_scales(key: jax.Array, num_points: int, low: float = 0.5, high: float = 3.0):
    """(N,) noise scales s_i log-uniform on [low, high]: log s_i ~ U(log low, log high) iid.

    The heteroscedastic setting of issue 35 (s_i between 0.5 and 3 by default: a six-fold
    range of standard errors, a 36-fold range of precisions).
    """
    validation.check_key("key", key)
    num_points = validation.check_positive_int("num_points", num_points)
    low, high = _check_interval(low, high)
    u = jax.random.uniform(key, (num_points,))
    return jnp.exp(np.log(low) + (np.log(high) - np.log(low)) * u)


def log_uniform_noise(
    key: jax.Array,
    num_points: int,
    measure: DiscreteMeasure | str = "three-atoms",
    low: float = 0.5,
    high: float = 3.0,
) -> NoisySample:
    """z_i ~ nu and s_i log-uniform on [low, high] independently; x_i = z_i + s_i eps_i.

    The means do not depend on the noise scales (nu is the same for every s_i): the
    setting in which the deconvolution model with per-unit sigma is the true model. Scalar
    measures only (``three-atoms``, ``sparse-means`` or a (K,) ``DiscreteMeasure``).
    """
    validation.check_key("key", key)
    if isinstance(measure, str):
        measure = get_measure(measure)
    measure = check_measure("measure", measure)
    if measure.atoms.ndim != 1:
        raise ValueError(
            f"measure: expected scalar atoms (K,), got shape {tuple(measure.atoms.shape)}"
        )
    num_points = validation.check_positive_int("num_points", num_points)
    low, high = _check_interval(low, high)
    key_s, key_x = jax.random.split(key)
    sigma = noise_scales(key_s, num_points, low, high)
    z, x = simulate(key_x, measure, sigma, num_points)
    return NoisySample(z, x, sigma)


XIE_KOU_BROWN_SETTINGS = ("a", "b", "c")


def xie_kou_brown(key: jax.Array, num_points: int, setting: str = "c") -> NoisySample:
    """The heteroscedastic normal-means settings of Xie, Kou and Brown (2012, "SURE estimates
    for a heteroscedastic hierarchical model", JASA 107, Section 7), normal noise.

    With A_i = s_i^2 the known variances and theta_i the means (z_i here),

        A_i ~ U(0.1, 1) iid,   x_i = theta_i + sqrt(A_i) eps_i,   eps_i ~ N(0, 1), and
        (a) theta_i ~ N(0, 1), independent of A_i (the normal hierarchical model holds);
        (b) theta_i ~ U(0, 1), independent of A_i (a non-normal prior);
        (c) theta_i = A_i (the means depend on the variances: no prior independent of s_i
            describes them, the case where shrinkage that ignores the link fails).

    Only these three settings are implemented; the paper's further settings (non-normal
    noise, two-point variances) are not.

    Returns:
        ``NoisySample(z=theta, x, sigma=sqrt(A))``, each (N,).
    """
    validation.check_key("key", key)
    num_points = validation.check_positive_int("num_points", num_points)
    if setting not in XIE_KOU_BROWN_SETTINGS:
        raise ValueError(
            f"setting: unknown Xie-Kou-Brown setting {setting!r}; known: "
            f"{list(XIE_KOU_BROWN_SETTINGS)}"
        )
    key_a, key_t, key_e = jax.random.split(key, 3)
    variance = jax.random.uniform(key_a, (num_points,), minval=0.1, maxval=1.0)
    if setting == "a":
        theta = jax.random.normal(key_t, (num_points,))
    elif setting == "b":
        theta = jax.random.uniform(key_t, (num_points,))
    else:
        theta = variance
    sigma = jnp.sqrt(variance)
    x = theta + sigma * jax.random.normal(key_e, (num_points,))
    return NoisySample(theta, x, sigma)


HETEROSCEDASTIC_SCENARIOS: dict[str, str] = {
    "log-uniform-noise": (
        "nu = 0.5 delta(-2) + 0.3 delta(0) + 0.2 delta(3) in 1-D, each observation its own "
        "noise scale s_i log-uniform on [0.5, 3], independent of its mean."
    ),
    "xie-kou-brown": (
        "Xie, Kou and Brown (2012), setting (c): variances A_i ~ U(0.1, 1) and means "
        "theta_i = A_i, so the means depend on the noise scales s_i = sqrt(A_i)."
    ),
}


def heteroscedastic_scenario(key: jax.Array, name: str, num_points: int) -> NoisySample:
    """The named heteroscedastic data set (``HETEROSCEDASTIC_SCENARIOS``, name -> description):

    "log-uniform-noise": ``log_uniform_noise(key, num_points)`` (three atoms, s_i log-uniform
    on [0.5, 3]); "xie-kou-brown": ``xie_kou_brown(key, num_points, "c")``.
    """
    if not isinstance(name, str) or name not in HETEROSCEDASTIC_SCENARIOS:
        raise ValueError(
            f"name: unknown heteroscedastic scenario {name!r}; known: "
            f"{list(HETEROSCEDASTIC_SCENARIOS)}"
        )
    if name == "log-uniform-noise":
        return log_uniform_noise(key, num_points)
    return xie_kou_brown(key, num_points, "c")


# ----------------------------------------------------------------------------- NumPyro program


def _check_sigma_for(sigma, points, dtype) -> None:
    """sigma against concrete data: 1 / sigma^2 finite in the dtype, and the spread of the
    data in units of sigma small enough that the Gaussian log densities do not overflow
    (``validation.check_scaled_spread``)."""
    validation.check_sigma_range("sigma", sigma, dtype)
    validation.check_scaled_spread("x", points, sigma, dtype)


class SortedNormal(dist.Distribution):
    """Order statistics of K iid N(loc, scale^2) draws.

    Density K! prod_k N(u_k; loc, scale^2) on u_1 < ... < u_K: the iid normal prior on the
    atoms restricted to one labelling, which removes the K! label-switching modes of a 1-D
    mixture without changing the prior of any permutation-invariant quantity.
    """

    arg_constraints = {"loc": constraints.real, "scale": constraints.positive}
    support = constraints.ordered_vector
    reparametrized_params = ("loc", "scale")

    def __init__(self, loc, scale, num, *, validate_args=None):
        self.loc, self.scale, self.num = loc, scale, num
        super().__init__(batch_shape=(), event_shape=(num,), validate_args=validate_args)

    def sample(self, key, sample_shape=()):
        eps = jax.random.normal(key, tuple(sample_shape) + self.event_shape)
        return jnp.sort(self.loc + self.scale * eps, axis=-1)

    def log_prob(self, value):
        base = dist.Normal(self.loc, self.scale).log_prob(value).sum(-1)
        return base + gammaln(self.num + 1.0)


def stick_breaking_log_weights(sticks: jax.Array) -> jax.Array:
    """Log weights of the truncated stick-breaking construction.

    With sticks v_1..v_{K-1} in (0, 1): w_k = v_k prod_{l<k} (1 - v_l) for k < K and
    w_K = prod_{l<K} (1 - v_l), the rest of the stick, so the K weights sum to one by
    construction (Ishwaran & James 2001: the truncation sets v_K = 1). Computed in log space,
    log w_k = log v_k + sum_{l<k} log1p(-v_l), so that small late weights neither underflow
    to zero nor give infinite gradients.

    Args:
        sticks: (..., K - 1).

    Returns:
        (..., K) log weights.
    """
    sticks = jnp.asarray(sticks)
    log_rest = jnp.cumsum(jnp.log1p(-sticks), axis=-1)  # log prod_{l<=k} (1 - v_l)
    zero = jnp.zeros((*sticks.shape[:-1], 1), dtype=log_rest.dtype)
    log_v = jnp.concatenate([jnp.log(sticks), zero], axis=-1)  # v_K = 1
    return log_v + jnp.concatenate([zero, log_rest], axis=-1)


def stick_breaking(sticks: jax.Array) -> jax.Array:
    """Weights (..., K) of the truncated stick-breaking construction; see the log version."""
    return jnp.exp(stick_breaking_log_weights(sticks))


def deconvolution_model(
    x=None,
    *,
    sigma,
    num_atoms: int,
    dim: int | None = None,
    num_points: int | None = None,
    prior: str = "dirichlet",
    concentration: float = 1.0,
    atom_loc=0.0,
    atom_scale: float = 5.0,
    ordered: bool = False,
    dp_shape: float = 2.0,
    dp_rate: float = 2.0,
):
    """NumPyro program of the finite-mixture deconvolution model with z marginalised.

        w ~ Dirichlet(concentration * 1_K)            (prior="dirichlet")
        alpha ~ Gamma(dp_shape, dp_rate)              (prior="dp", truncated stick-breaking)
        v_k ~ Beta(1, alpha), k = 1..K-1;  w = stick_breaking(v)
        w = 1_K / K                                   (prior="uniform-weights", the EM model)
        mu_k ~ N(atom_loc, atom_scale^2 I_p) iid      (sorted when ``ordered``; p = 1 only)
        x_i ~ sum_k w_k N(mu_k, diag(s_i^2))          i = 1..N, plate "points"

    with s_ic = sigma (a number), sigma_i ((N,) sigma) or sigma_ic ((N, p) sigma): each
    observation's own noise scale enters its own mixture density, which broadcasts over the
    plate (a per-unit sigma gives the components batch shape (N, K)).

    ``prior="dp"`` is Sethuraman's (1994) stick-breaking Dirichlet process DP(alpha, G_0),
    G_0 = N(atom_loc, atom_scale^2 I_p), truncated at K atoms as in Ishwaran & James (2001,
    "Gibbs sampling methods for stick-breaking priors", JASA 96): the last weight takes the
    rest of the stick, w_K = prod_{l<K} (1 - v_l). The concentration gets a Gamma prior as in
    Escobar & West (1995, "Bayesian density estimation and inference using mixtures",
    JASA 90). The default Gamma(2, 2) has mean 1 and vanishes at alpha = 0, where every stick
    would pile up at 1 and the sampler would face a funnel. The truncation leaves on average
    E[w_K] = E[(alpha / (1 + alpha))^(K-1)] of the mass to the last atom, so K should leave
    a few atoms beyond those one expects to be occupied. The weights are not
    exchangeable (E[w_k] decreases in k), so ``ordered=True``, which would pair the largest
    expected weight with the smallest atom and thereby change the model, is refused.

    Args:
        x: observations, (N,) or (N, p); ``None`` to sample from the prior predictive.
        sigma: known noise scale: a number, (N,) (one per observation) or (N, p) (one per
            observation and coordinate, p-dimensional data only); see ``check_noise_scales``.
        num_atoms: K (at least 2 with ``prior="dp"``).
        dim: p. ``None`` infers it from ``x``, else from an (N, p) ``sigma`` (scalar
            convention when both are silent).
        num_points: N when ``x`` is ``None``; a per-unit ``sigma`` fixes it (``num_points``
            may then be left out, and must agree when given).
        prior: "dirichlet", "dp" or "uniform-weights".
        concentration: Dirichlet concentration per atom (< 1 favours few occupied atoms);
            used by ``prior="dirichlet"`` only.
        atom_loc, atom_scale: location (scalar or (p,)) and scale of the atoms' prior.
        ordered: impose mu_1 < ... < mu_K (scalar data only, not with ``prior="dp"``); see
            ``SortedNormal``.
        dp_shape, dp_rate: shape and rate of the Gamma prior on the DP concentration alpha
            (mean dp_shape / dp_rate); used by ``prior="dp"`` only.

    Sites: ``weights`` (K,), ``atoms`` (K,) or (K, p), observed ``x`` (N,) or (N, p); with
    ``prior="dp"`` also ``dp_concentration`` () and ``sticks`` (K - 1,), and ``weights`` is
    then a deterministic site (as it is with ``prior="uniform-weights"``).
    """
    num_atoms = validation.check_positive_int("num_atoms", num_atoms)
    if prior not in PRIORS:
        raise ValueError(f"prior: unknown prior {prior!r}; known: {list(PRIORS)}")
    validation.check_positive_scalar("concentration", concentration)
    validation.check_positive_scalar("dp_shape", dp_shape)
    validation.check_positive_scalar("dp_rate", dp_rate)
    if prior == "dp":
        if num_atoms < 2:
            raise ValueError(f"num_atoms: prior='dp' needs at least 2 atoms, got {num_atoms}")
        if ordered:
            raise ValueError(
                "ordered: not available with prior='dp' (stick-breaking weights are not "
                "exchangeable, so sorting the atoms would change the model)"
            )
    if x is not None:
        points = None
        if not validation.is_traced(x):
            points, _ = validation.as_points("x", x)
            x = jnp.asarray(x)
        if x.ndim not in (1, 2):
            raise ValueError(f"x: expected shape (N,) or (N, p), got {tuple(x.shape)}")
        data_dim = None if x.ndim == 1 else x.shape[1]
        if dim is not None and data_dim is not None and dim != data_dim:
            raise ValueError(f"dim: {dim} does not match x with {data_dim} columns")
        if dim is not None and data_dim is None and dim != 1:
            raise ValueError(f"dim: {dim} given but x has shape (N,) (scalar data)")
        if num_points is not None and num_points != x.shape[0]:
            raise ValueError(f"num_points: {num_points} does not match x with {x.shape[0]} rows")
        dim, num_points = data_dim, x.shape[0]
        sigma, _ = check_noise_scales(sigma, num_points, dim)
        if points is not None:
            _check_sigma_for(sigma, points, x.dtype)
    else:
        if dim is not None:
            dim = validation.check_positive_int("dim", dim)
        elif np.ndim(sigma) == 2:  # one scale per observation and coordinate: p from sigma
            dim = np.shape(sigma)[1]
        sigma, rows = check_noise_scales(sigma, None, dim)
        if num_points is None and rows is None:
            raise ValueError("num_points: required when x is None and sigma is a number")
        if num_points is not None:
            num_points = validation.check_positive_int("num_points", num_points)
            if rows is not None and num_points != rows:
                raise ValueError(
                    f"num_points: {num_points} does not match sigma with {rows} rows (one per "
                    "observation)"
                )
        num_points = rows if num_points is None else num_points
    if ordered and dim is not None:
        raise ValueError("ordered: only available for scalar data passed as shape (N,)")
    atom_scale = validation.check_positive_scalar("atom_scale", atom_scale)
    if not validation.is_traced(atom_loc):
        loc = validation.as_float_array("atom_loc", atom_loc)
        validation.check_finite("atom_loc", loc)
        allowed = [()] if dim is None else [(), (dim,)]
        if tuple(loc.shape) not in allowed:
            raise ValueError(
                f"atom_loc: expected a scalar{'' if dim is None else f' or shape ({dim},)'}, "
                f"got shape {tuple(loc.shape)}"
            )

    log_weights = None
    if prior == "dirichlet":
        weights = numpyro.sample("weights", dist.Dirichlet(jnp.full((num_atoms,), concentration)))
    elif prior == "dp":
        alpha = numpyro.sample("dp_concentration", dist.Gamma(dp_shape, dp_rate))
        sticks = numpyro.sample("sticks", dist.Beta(1.0, alpha).expand([num_atoms - 1]).to_event(1))
        log_weights = stick_breaking_log_weights(sticks)
        weights = numpyro.deterministic("weights", jnp.exp(log_weights))
    else:
        weights = numpyro.deterministic("weights", jnp.full((num_atoms,), 1.0 / num_atoms))

    if dim is None:
        if ordered:
            atoms = numpyro.sample("atoms", SortedNormal(atom_loc, atom_scale, num_atoms))
        else:
            atoms = numpyro.sample(
                "atoms", dist.Normal(atom_loc, atom_scale).expand([num_atoms]).to_event(1)
            )
        # one scale for all: batch (K,); per unit: batch (N, K), broadcast over the plate
        component = dist.Normal(atoms, sigma if jnp.ndim(sigma) == 0 else sigma[:, None])
    else:
        loc = jnp.broadcast_to(jnp.asarray(atom_loc), (dim,))
        atoms = numpyro.sample(
            "atoms", dist.Normal(loc, atom_scale).expand([num_atoms, dim]).to_event(2)
        )
        scale = sigma if jnp.ndim(sigma) == 0 else _row_scales(sigma, 2)[:, None, :]
        component = dist.Normal(atoms, scale).to_event(1)
    mixing = (
        dist.Categorical(probs=weights)
        if log_weights is None
        else dist.Categorical(logits=log_weights)
    )
    mixture = dist.MixtureSameFamily(mixing, component)
    with numpyro.plate("points", num_points):
        numpyro.sample("x", mixture, obs=x)


def model_dims(scalar: bool, prior: str = "dirichlet") -> dict[str, list[str]]:
    """ArviZ dimension names of the sites of ``deconvolution_model(..., prior=prior)``.

    ``sticks`` (K - 1 of them) get their own dimension "stick"; ``dp_concentration`` is a
    scalar.
    """
    if prior not in PRIORS:
        raise ValueError(f"prior: unknown prior {prior!r}; known: {list(PRIORS)}")
    if scalar:
        dims = {"weights": ["atom"], "atoms": ["atom"], "x": ["point"]}
    else:
        dims = {"weights": ["atom"], "atoms": ["atom", "coord"], "x": ["point", "coord"]}
    if prior == "dp":
        dims |= {"dp_concentration": [], "sticks": ["stick"]}
    return dims


__all__ = [
    "HETEROSCEDASTIC_SCENARIOS",
    "MEASURES",
    "PRIORS",
    "XIE_KOU_BROWN_SETTINGS",
    "DiscreteMeasure",
    "NoisySample",
    "SortedNormal",
    "check_measure",
    "check_noise_scales",
    "deconvolution_model",
    "get_measure",
    "heteroscedastic_scenario",
    "log_uniform_noise",
    "model_dims",
    "noise_scales",
    "ring",
    "simulate",
    "sparse_means",
    "stick_breaking",
    "stick_breaking_log_weights",
    "three_atoms",
    "xie_kou_brown",
]
