"""The constraints and laws that label the regimes of a switching model, and the covariance
prior of a multivariate one.

Regimes are exchangeable: permuting their labels leaves the likelihood unchanged, so a fit
labels them by the increasing value of one named parameter (``regime_ordering`` in
``attnbayes.models.markov_switching``). For a vector parameter (regime intercepts or means)
that is NumPyro's ``ordered_vector``; for a matrix parameter with one row per regime (the
slopes of a regression without intercept, the intercepts of an MS-VAR, one column per series)
it is ``ordered_first_column``: the first column increases down the rows, the other entries are
free. The laws here are the priors that go with them.

- ``OrderedIID``, ``OrderedNormal``: the order statistics of M iid draws (support
  ``ordered_vector`` or ``positive_ordered_vector``);
- ``ordered_first_column``, ``OrderedFirstColumnTransform`` (registered with NumPyro's
  ``biject_to``), and the law ``OrderedFirstColumn`` of a matrix whose first column follows an
  ordered law and whose other columns an independent one;
- ``InverseWishart``: the conjugate law of a Gaussian covariance matrix.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import numpyro.distributions as dist
from jax.scipy.special import multigammaln
from numpyro.distributions import constraints
from numpyro.distributions.transforms import OrderedTransform, Transform, biject_to

from .. import validation


class OrderedIID(dist.Distribution):
    """The order statistics of M independent draws of a univariate ``base`` law: the law of
    sort(z), z_j iid ~ base, with density

        M! prod_j f(x_j)   on x_1 < ... < x_M,

    the exchangeable prior prod_j f(x_j) restricted to one ordering of the labels (Jasra,
    Holmes and Stephens 2005, sec. 6, on label switching): its posterior is the
    label-identified one (regime 0 has the smallest value). Support: ``ordered_vector`` for a
    base on the reals, ``positive_ordered_vector`` for a base on the positive reals (e.g. the
    noise scales of ``regime_ordering``)."""

    arg_constraints = {}
    pytree_data_fields = ("base",)
    pytree_aux_fields = ("size",)

    def __init__(self, base, size: int, *, validate_args=None):
        if not isinstance(base, dist.Distribution) or base.event_shape != ():
            raise ValueError(f"base: expected a univariate NumPyro distribution, got {base!r}")
        if base.support not in (constraints.real, constraints.positive):
            raise ValueError(f"base: expected support real or positive, got {base.support}")
        self.base = base
        self.size = validation.check_positive_int("size", size)
        super().__init__(
            batch_shape=base.batch_shape, event_shape=(self.size,), validate_args=validate_args
        )

    @property
    def support(self):
        if self.base.support is constraints.positive:
            return constraints.positive_ordered_vector
        return constraints.ordered_vector

    @property
    def reparametrized_params(self):
        return self.base.reparametrized_params

    def sample(self, key, sample_shape=()):
        z = self.base.sample(key, (self.size, *sample_shape))  # (M, *sample, *batch)
        return jnp.sort(jnp.moveaxis(z, 0, -1), axis=-1)

    def log_prob(self, value):
        each = self.base.log_prob(jnp.moveaxis(jnp.asarray(value), -1, 0))
        return jnp.sum(each, axis=0) + jax.scipy.special.gammaln(self.size + 1.0)


class OrderedNormal(OrderedIID):
    """The order statistics of M independent N(loc, scale^2) draws (``OrderedIID`` of a
    normal): density M! prod_j N(x_j; loc, scale) on x_1 < ... < x_M. The prior of regime
    means that fixes the labels (regime 0 has the smallest mean)."""

    def __init__(self, loc, scale, size: int, *, validate_args=None):
        super().__init__(dist.Normal(loc, scale), size, validate_args=validate_args)

    @property
    def loc(self):
        return self.base.loc

    @property
    def scale(self):
        return self.base.scale


class _OrderedFirstColumn(constraints._SingletonConstraint):
    """(..., M, k) matrices whose first column increases down the rows, x[0, 0] < ... <
    x[M-1, 0]; the other columns are free (the labels of M regimes, one row each)."""

    event_dim = 2

    def __call__(self, x):
        first = x[..., :, 0]
        return (first[..., 1:] > first[..., :-1]).all(axis=-1)

    def feasible_like(self, prototype):
        rows = jnp.arange(float(prototype.shape[-2]))[:, None]
        return jnp.broadcast_to(rows, prototype.shape)

    def __repr__(self):
        return "OrderedFirstColumn()"


ordered_first_column = _OrderedFirstColumn()


class OrderedFirstColumnTransform(Transform):
    """The reals (..., M, k) to ``ordered_first_column``: the first column by NumPyro's
    ``OrderedTransform`` (y_0 = x_0, y_j = y_{j-1} + exp(x_j); Stan Reference Manual, sec.
    10.6), the other columns unchanged; log |det J| = sum_{j >= 1} x[j, 0]."""

    domain = constraints.independent(constraints.real, 2)
    codomain = ordered_first_column

    def __call__(self, x):
        first = OrderedTransform()(x[..., :, 0])
        return jnp.concatenate([first[..., None], x[..., :, 1:]], axis=-1)

    def _inverse(self, y):
        first = OrderedTransform().inv(y[..., :, 0])
        return jnp.concatenate([first[..., None], y[..., :, 1:]], axis=-1)

    def log_abs_det_jacobian(self, x, y, intermediates=None):
        return jnp.sum(x[..., 1:, 0], axis=-1)

    def tree_flatten(self):
        return (), ((), dict())

    def eq(self, other, static=False):
        return isinstance(other, type(self))


@biject_to.register(ordered_first_column)
def _transform_to_ordered_first_column(constraint):
    return OrderedFirstColumnTransform()


class OrderedFirstColumn(dist.Distribution):
    """The law of an (M, k) matrix whose first column follows ``first`` (an ordered law on
    (M,), e.g. ``OrderedNormal``) and whose other columns, independently, ``rest`` (a law with
    event shape (M, k - 1), or None when k = 1):

        p(X) = first(X[:, 0]) rest(X[:, 1:]),   support ``ordered_first_column``.

    The prior of per-regime rows labelled by their first entry (the MS-VAR intercepts, one
    column per series; the slopes of a regression without intercept)."""

    arg_constraints = {}
    support = ordered_first_column
    pytree_data_fields = ("first", "rest")

    def __init__(self, first, rest=None, *, validate_args=None):
        if not isinstance(first, dist.Distribution) or len(first.event_shape) != 1:
            raise ValueError(f"first: expected a law of an ordered vector, got {first!r}")
        m = first.event_shape[0]
        if rest is not None and (
            not isinstance(rest, dist.Distribution)
            or len(rest.event_shape) != 2
            or rest.event_shape[0] != m
            or rest.batch_shape != first.batch_shape
        ):
            raise ValueError(
                f"rest: expected a law with event shape ({m}, k - 1) and the batch shape of "
                f"first, {first.batch_shape}, got {rest!r}"
            )
        self.first, self.rest = first, rest
        k = 1 if rest is None else 1 + rest.event_shape[1]
        super().__init__(
            batch_shape=first.batch_shape, event_shape=(m, k), validate_args=validate_args
        )

    def sample(self, key, sample_shape=()):
        key_first, key_rest = jax.random.split(key)
        first = self.first.sample(key_first, sample_shape)[..., None]
        if self.rest is None:
            return first
        return jnp.concatenate([first, self.rest.sample(key_rest, sample_shape)], axis=-1)

    def log_prob(self, value):
        value = jnp.asarray(value)
        out = self.first.log_prob(value[..., :, 0])
        return out if self.rest is None else out + self.rest.log_prob(value[..., :, 1:])


class InverseWishart(dist.Distribution):
    """The inverse Wishart law IW(nu, Psi) of a d x d covariance matrix S, nu > d - 1:

        log p(S) = (nu/2) log|Psi| - (nu d/2) log 2 - log Gamma_d(nu/2)
                   - ((nu + d + 1)/2) log|S| - tr(Psi S^{-1}) / 2,

    E[S] = Psi / (nu - d - 1) for nu > d + 1 (Gelman et al. 2013, BDA3, sec. 3.6 and A.1);
    S ~ IW(nu, Psi) iff S^{-1} ~ Wishart(nu, Psi^{-1}). ``scale`` Psi may carry batch axes
    (one per regime)."""

    arg_constraints = {"df": constraints.positive, "scale": constraints.positive_definite}
    support = constraints.positive_definite
    pytree_data_fields = ("df", "scale")

    def __init__(self, df, scale, *, validate_args=None):
        self.scale = jnp.asarray(scale)
        if self.scale.ndim < 2 or self.scale.shape[-1] != self.scale.shape[-2]:
            raise ValueError(f"scale: expected (..., d, d) matrices, got {self.scale.shape}")
        d = self.scale.shape[-1]
        if not validation.is_traced(df) and not np.all(np.asarray(df, dtype=float) > d - 1):
            raise ValueError(f"df: expected > d - 1 = {d - 1} (a proper law), got {df!r}")
        self.df = jnp.asarray(df, self.scale.dtype)
        batch = jnp.broadcast_shapes(jnp.shape(self.df), self.scale.shape[:-2])
        super().__init__(
            batch_shape=batch, event_shape=self.scale.shape[-2:], validate_args=validate_args
        )

    def sample(self, key, sample_shape=()):
        precision = dist.Wishart(
            jnp.broadcast_to(self.df, self.batch_shape),
            scale_matrix=jnp.broadcast_to(
                jnp.linalg.inv(self.scale), self.batch_shape + self.event_shape
            ),
            validate_args=False,
        ).sample(key, sample_shape)  # (*sample, *batch, d, d)
        return jnp.linalg.inv(precision)

    def log_prob(self, value):
        d = self.scale.shape[-1]
        _, log_det_scale = jnp.linalg.slogdet(self.scale)
        _, log_det = jnp.linalg.slogdet(value)
        trace = jnp.trace(jnp.linalg.solve(value, self.scale), axis1=-2, axis2=-1)
        return (
            0.5 * self.df * log_det_scale
            - 0.5 * self.df * d * jnp.log(2.0)
            - multigammaln(0.5 * self.df, d)
            - 0.5 * (self.df + d + 1.0) * log_det
            - 0.5 * trace
        )

    @property
    def mean(self):
        d = self.scale.shape[-1]
        return self.scale / (self.df - d - 1.0)[..., None, None]


__all__ = [
    "InverseWishart",
    "OrderedFirstColumn",
    "OrderedFirstColumnTransform",
    "OrderedIID",
    "OrderedNormal",
    "ordered_first_column",
]
