"""Shared by the learned-attention tests: stacks away from EM's parameters."""

import jax
import pytest

from attnbayes.inference.deconvolution.learned import init_unrolled_em


@pytest.fixture
def perturbed():
    """``perturbed(num_layers, dim, seed=3, scale=0.2)``: parameters away from EM's (every leaf
    moved), to test the general stack."""

    def _perturbed(num_layers, dim, seed=3, scale=0.2):
        """Parameters away from EM's (every leaf moved), to test the general stack."""
        params = init_unrolled_em(num_layers, dim)
        leaves, tree = jax.tree_util.tree_flatten(params)
        keys = jax.random.split(jax.random.PRNGKey(seed), len(leaves))
        moved = [
            leaf + scale * jax.random.normal(k, leaf.shape)
            for leaf, k in zip(leaves, keys, strict=True)
        ]
        return jax.tree_util.tree_unflatten(tree, moved)

    return _perturbed
