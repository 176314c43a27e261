"""Bad input to the attention functions (issue 12): refused before any JAX tracing.

The project's standard: a ``ValueError`` raised before tracing whose message starts with the
argument's name; never a cryptic traceback, a silent NaN or a wrong answer. This catalogue
covers every public function of ``attnbayes.inference.attention.simplex``,
``attnbayes.inference.attention`` and ``attnbayes.inference.kernel_regression`` against NaN / inf,
empty, wrong-rank, complex and non-numeric arrays, bad scalars and names, and scores that overflow.
Every array is tiny and every case raises before JAX runs, so each takes milliseconds.

Also here, the regression tests of issue 12:

- finding 4: ``attend`` refuses scores that overflow (it gave NaN with softmax and the wrong key
  with sparsemax), complex inputs (it returned complex output) and a bad temperature with the
  argument's name; a fully masked row gets zero weights at temperature 0 as at temperature > 0;
  ``regularised_argmax`` refuses empty and complex scores by name;
- finding 6: ``select_bandwidth`` scales its grid by a robust spread, so one outlying key does
  not inflate the selected bandwidth, and warns when the selected bandwidth exceeds the keys'
  range.
"""

import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from raising import jax_frames

from attnbayes.inference.attention import (
    additive_scores,
    attend,
    dot_product_scores,
    key_moments,
    log_partition,
    neg_sq_distance_scores,
    scored_attention,
    softmax_attention,
)
from attnbayes.inference.attention.scores import _dot_product
from attnbayes.inference.attention.simplex import (
    entmax15,
    entmax_bisect,
    regularised_argmax,
    regularised_objective,
    regulariser_value,
    softmax,
    sparsemax,
)
from attnbayes.inference.kernel_regression import (
    kernel_scores,
    leave_one_out,
    nadaraya_watson,
    select_bandwidth,
)

# ----------------------------------------------------------------------------- tiny inputs

S = np.array([-2.0, 0.0, 0.5])  # scores (K,) = (3,)
P3 = np.array([0.2, 0.3, 0.5])  # a point of the simplex
Q = np.array([[0.5, -1.0], [1.0, 0.0]])  # queries (Q, d) = (2, 2)
K = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])  # keys (K, d) = (3, 2)
V = np.array([[1.0], [2.0], [3.0]])  # values (K, dv) = (3, 1)
B = np.array([0.0, -1.0, -np.inf])  # key bias (-inf removes a key)
W = np.array([[1.0, 0.5], [-0.5, 1.0]])  # additive: W (h, dq), U (h, dk), v (h,)
U = np.array([[0.5, 0.5], [1.0, -1.0]])
VA = np.array([1.0, -1.0])
Q1 = np.array([0.5, -1.0])  # one query (d,)
XK = np.array([0.0, 1.0, 2.5, 3.0, 4.2])  # kernel regression: keys (n,), values (n,)
YK = np.array([0.0, 1.0, 1.5, 2.0, 1.0])
XQ = np.array([0.5, 1.5])
PRNG = jax.random.PRNGKey(0)
HUGE = 1e200  # finite, but its square (a product of two such numbers) overflows float64


def _with(arr, value, index=0):
    out = np.array(arr, dtype=float)
    out.flat[index] = value
    return out


def _object(arr):
    out = np.array(arr, dtype=object)
    out.flat[0] = None
    return out


def bad_arrays(good, *, wrong_rank, neg_inf_allowed=False):
    """Bad versions of one array argument: {label: value}."""
    good = np.asarray(good, dtype=float)
    bad = {
        "nan": _with(good, np.nan),
        "inf": _with(good, np.inf),
        "complex": good + 1j,
        "str": good.astype(str),
        "object": _object(good),
        "empty": np.zeros((0, *good.shape[1:])),
        "rank": wrong_rank,
    }
    if not neg_inf_allowed:
        bad["neginf"] = _with(good, -np.inf)
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


def _simplex_maps():
    """Every weight map of attnbayes.inference.attention.simplex, as f(scores, temperature=...,
    axis=...)."""
    return {
        "softmax": softmax,
        "sparsemax": sparsemax,
        "entmax15": entmax15,
        "entmax_bisect": lambda s, **kw: entmax_bisect(s, 1.3, **kw),
        "regularised_argmax-shannon": lambda s, **kw: regularised_argmax(s, "shannon", **kw),
        "regularised_argmax-gini": lambda s, **kw: regularised_argmax(s, "gini", **kw),
        "regularised_argmax-tsallis": lambda s, **kw: regularised_argmax(s, "tsallis", 1.5, **kw),
        "regularised_argmax-t0": lambda s, **kw: regularised_argmax(
            s, "gini", **{"temperature": 0.0, **kw}
        ),
    }


def _attend_calls(q=Q, k=K, v=V, **kw):
    """attend on one problem, with every weight map and streamed."""
    return {
        "attend": lambda: attend(q, k, v, **kw),
        "attend-sparsemax": lambda: attend(q, k, v, weights="sparsemax", **kw),
        "attend-entmax15": lambda: attend(q, k, v, weights="entmax15", **kw),
        "attend-streamed": lambda: attend(q, k, v, block_size=2, **kw),
    }


def _qk_calls(q=Q, k=K, **kw):
    """Every function that takes (queries (Q, d), keys (K, d)) and builds scores from them."""
    v = kw.pop("values", V)
    return {
        **_attend_calls(q, k, v, **kw),
        "dot_product_scores": lambda: dot_product_scores(q, k, **kw),
        "softmax_attention": lambda: softmax_attention(q, k, v, **kw),
        "additive_scores": lambda: additive_scores(q, k, W, U, VA, **kw),
        "neg_sq_distance_scores": lambda: neg_sq_distance_scores(q, k, 1.0, **kw),
        "scored_attention": lambda: scored_attention(_dot_product, 0.5, q, k, v, **kw),
    }


def _kr_calls(keys=XK, values=YK, queries=XQ, **kw):
    """Every public function of attnbayes.inference.kernel_regression on one problem."""
    bandwidth = kw.pop("bandwidth", 0.7)
    return {
        "kernel_scores": lambda: kernel_scores(queries, keys, bandwidth=bandwidth, **kw),
        "nadaraya_watson": lambda: nadaraya_watson(
            keys, values, queries, bandwidth=bandwidth, **kw
        ),
        "nadaraya_watson-streamed": lambda: nadaraya_watson(
            keys, values, queries, bandwidth=bandwidth, block_size=2, **kw
        ),
        "leave_one_out": lambda: leave_one_out(keys, values, bandwidth=bandwidth, **kw),
        "leave_one_out-streamed": lambda: leave_one_out(
            keys, values, bandwidth=bandwidth, block_size=2, **kw
        ),
    }


def _cases():
    """(id, callable, anchored pattern)."""
    cases = []

    def add(label, call, pattern):
        cases.append((label, call, pattern))

    # -------------------------------------------------------- attnbayes.inference.attention.simplex
    for fn_name, fn in _simplex_maps().items():
        for label, s in bad_arrays(S, wrong_rank=np.float64(1.0), neg_inf_allowed=True).items():
            if label == "ragged":
                continue
            add(f"{fn_name}-scores-{label}", lambda fn=fn, s=s: fn(s), "^scores: ")
        for label, t in BAD_TEMPERATURES.items():
            add(
                f"{fn_name}-temperature-{label}",
                lambda fn=fn, t=t: fn(S, temperature=t),
                "^temperature: ",
            )
        add(f"{fn_name}-axis-range", lambda fn=fn: fn(S, axis=3), "^axis: ")
        add(f"{fn_name}-axis-float", lambda fn=fn: fn(S, axis=0.5), "^axis: ")
        add(f"{fn_name}-axis-none", lambda fn=fn: fn(S, axis=None), "^axis: ")
        if fn_name != "regularised_argmax-t0":
            # float32 scores whose division by the temperature overflows float32
            big = np.array([3e38, 0.0], np.float32)
            add(
                f"{fn_name}-temperature-overflow",
                lambda fn=fn, big=big: fn(big, temperature=0.5),
                "^temperature: .*float32",
            )
            # a temperature below the smallest normal number is flushed to zero by XLA
            add(
                f"{fn_name}-temperature-subnormal",
                lambda fn=fn: fn(np.zeros(3), temperature=1e-320),
                "^temperature: ",
            )
    for fn_name in ("softmax", "sparsemax", "entmax15", "entmax_bisect"):
        fn = _simplex_maps()[fn_name]
        add(f"{fn_name}-temperature-zero", lambda fn=fn: fn(S, temperature=0.0), "^temperature: ")
    for label, a in BAD_ALPHAS.items():
        add(f"entmax_bisect-alpha-{label}", lambda a=a: entmax_bisect(S, a), "^alpha: ")
        add(
            f"regularised_argmax-alpha-{label}",
            lambda a=a: regularised_argmax(S, "tsallis", a),
            "^alpha: ",
        )
        add(
            f"regularised_objective-alpha-{label}",
            lambda a=a: regularised_objective(P3, S, "tsallis", a),
            "^alpha: ",
        )
        add(
            f"regulariser_value-alpha-{label}",
            lambda a=a: regulariser_value(P3, "tsallis", a),
            "^alpha: ",
        )
    add("regularised_argmax-alpha-missing", lambda: regularised_argmax(S, "tsallis"), "^alpha: ")
    add(
        "regularised_argmax-alpha-unused",
        lambda: regularised_argmax(S, "shannon", alpha=2.0),
        "^alpha: ",
    )
    for label, n in {"zero": 0, "negative": -2, "float": 2.5, "bool": True, "str": "5"}.items():
        add(
            f"entmax_bisect-num_iters-{label}",
            lambda n=n: entmax_bisect(S, 1.5, num_iters=n),
            "^num_iters: ",
        )
    for label, name in BAD_NAMES.items():
        add(
            f"regularised_argmax-regulariser-{label}",
            lambda name=name: regularised_argmax(S, name),
            "^regulariser: ",
        )
        add(
            f"regularised_argmax-regulariser-{label}-t0",
            lambda name=name: regularised_argmax(S, name, temperature=0.0),
            "^regulariser: ",
        )
        add(
            f"regularised_objective-regulariser-{label}",
            lambda name=name: regularised_objective(P3, S, name),
            "^regulariser: ",
        )
        add(
            f"regularised_objective-regulariser-{label}-t0",
            lambda name=name: regularised_objective(P3, S, name, temperature=0.0),
            "^regulariser: ",
        )
        add(
            f"regulariser_value-regulariser-{label}",
            lambda name=name: regulariser_value(P3, name),
            "^regulariser: ",
        )
    for label, p in bad_arrays(P3, wrong_rank=np.float64(0.5)).items():
        if label == "ragged":
            continue
        add(f"regularised_objective-p-{label}", lambda p=p: regularised_objective(p, S), "^p: ")
        add(f"regulariser_value-p-{label}", lambda p=p: regulariser_value(p), "^p: ")
    add("regularised_objective-p-shape", lambda: regularised_objective(P3[:2], S), "^p: ")
    for label, s in bad_arrays(S, wrong_rank=np.float64(1.0), neg_inf_allowed=True).items():
        if label == "ragged":
            continue
        add(
            f"regularised_objective-scores-{label}",
            lambda s=s: regularised_objective(P3, s),
            "^scores: ",
        )
    for label, t in BAD_TEMPERATURES.items():
        add(
            f"regularised_objective-temperature-{label}",
            lambda t=t: regularised_objective(P3, S, temperature=t),
            "^temperature: ",
        )
    add("regulariser_value-axis", lambda: regulariser_value(P3, axis=2), "^axis: ")

    # --------------------------------------------------------------- attnbayes.inference.attention
    for label, q in bad_arrays(Q, wrong_rank=Q[0]).items():
        for fn, call in _qk_calls(q=q).items():
            add(f"{fn}-queries-{label}", call, "^queries: ")
    for label, k in bad_arrays(K, wrong_rank=K[0]).items():
        for fn, call in _qk_calls(k=k).items():
            add(f"{fn}-keys-{label}", call, "^keys: ")
    for label, v in bad_arrays(V, wrong_rank=V[None]).items():
        for fn, call in {
            **_attend_calls(v=v),
            "softmax_attention": lambda v=v: softmax_attention(Q, K, v),
            "scored_attention": lambda v=v: scored_attention(_dot_product, 0.5, Q, K, v),
        }.items():
            add(f"{fn}-values-{label}", call, "^values: ")
    bad_bias = bad_arrays(B[:2], wrong_rank=np.float64(0.0), neg_inf_allowed=True)
    bad_bias.pop("ragged", None)
    bad_bias["empty"] = np.zeros(0)
    bad_bias["shape"] = np.zeros(2)  # 2 entries for 3 keys
    for label, b in bad_bias.items():
        if label == "nan" or label == "inf" or label == "complex":
            b = np.append(b, 0.0)  # the right length: only the values are bad
        for fn, call in {
            **_attend_calls(bias=b),
            "dot_product_scores": lambda b=b: dot_product_scores(Q, K, bias=b),
            "additive_scores": lambda b=b: additive_scores(Q, K, W, U, VA, bias=b),
            "neg_sq_distance_scores": lambda b=b: neg_sq_distance_scores(Q, K, 1.0, bias=b),
            "scored_attention": lambda b=b: scored_attention(_dot_product, 0.5, Q, K, V, bias=b),
        }.items():
            add(f"{fn}-bias-{label}", call, "^bias: ")
        add(
            f"softmax_attention-key_bias-{label}",
            lambda b=b: softmax_attention(Q, K, V, key_bias=b),
            "^key_bias: ",
        )
    for label, m in {
        "shape": np.ones((3, 3), bool),
        "float": np.full((2, 3), 0.5),
        "str": np.full((2, 3), "yes"),
    }.items():
        for fn, call in {
            "dot_product_scores": lambda m=m: dot_product_scores(Q, K, mask=m),
            "softmax_attention": lambda m=m: softmax_attention(Q, K, V, mask=m),
            "additive_scores": lambda m=m: additive_scores(Q, K, W, U, VA, mask=m),
            "neg_sq_distance_scores": lambda m=m: neg_sq_distance_scores(Q, K, 1.0, mask=m),
        }.items():
            add(f"{fn}-mask-{label}", call, "^mask: ")
    for label, scale in BAD_SCALES.items():
        for fn, call in {
            **_attend_calls(scale=scale),
            "dot_product_scores": lambda s=scale: dot_product_scores(Q, K, s),
            "softmax_attention": lambda s=scale: softmax_attention(Q, K, V, scale=s),
        }.items():
            add(f"{fn}-scale-{label}", call, "^scale: ")
    for label, t in {**BAD_TEMPERATURES, "zero": 0.0, "subnormal": 1e-320}.items():
        for fn, call in _attend_calls(temperature=t).items():
            add(f"{fn}-temperature-{label}", call, "^temperature: ")
    for label, name in BAD_NAMES.items():
        add(f"attend-weights-{label}", lambda n=name: attend(Q, K, V, weights=n), "^weights: ")
    for label, bs in BAD_BLOCK_SIZES.items():
        add(
            f"attend-block_size-{label}",
            lambda b=bs: attend(Q, K, V, block_size=b),
            "^block_size: ",
        )
        add(
            f"scored_attention-block_size-{label}",
            lambda b=bs: scored_attention(_dot_product, 0.5, Q, K, V, block_size=b),
            "^block_size: ",
        )
    add(
        "attend-block_size-sparsemax",
        lambda: attend(Q, K, V, weights="sparsemax", block_size=2),
        "^block_size: ",
    )
    add(
        "scored_attention-score_fn",
        lambda: scored_attention("dot", 0.5, Q, K, V),
        "^score_fn: ",
    )
    add(
        "scored_attention-return_weights",
        lambda: scored_attention(_dot_product, 0.5, Q, K, V, return_weights="yes"),
        "^return_weights: ",
    )
    # mismatched shapes
    for fn, call in _qk_calls(k=K[:, :1]).items():
        if fn != "additive_scores":  # its keys may have their own dimension (U's columns)
            add(f"{fn}-keys-dimension", call, "^keys: ")
    for fn, call in {
        **_attend_calls(v=V[:2]),
        "softmax_attention": lambda: softmax_attention(Q, K, V[:2]),
        "scored_attention": lambda: scored_attention(_dot_product, 0.5, Q, K, V[:2]),
    }.items():
        add(f"{fn}-values-rows", call, "^values: ")
    # additive weights
    for arg, good, rank in (("W", W, W[0]), ("U", U, U[0]), ("v", VA, W)):
        for label, bad in bad_arrays(good, wrong_rank=rank).items():
            args = {"W": W, "U": U, "v": VA, arg: bad}
            add(
                f"additive_scores-{arg}-{label}",
                lambda a=args: additive_scores(Q, K, a["W"], a["U"], a["v"]),
                f"^{arg}: ",
            )
    add("additive_scores-U-shape", lambda: additive_scores(Q, K, W, U[:, :1], VA), "^U: ")
    for label, h in BAD_BANDWIDTHS.items():
        add(
            f"neg_sq_distance_scores-bandwidth-{label}",
            lambda h=h: neg_sq_distance_scores(Q, K, h),
            "^bandwidth: ",
        )
    # log_partition and key_moments: query (d,), keys (K, d)
    for fn_name, fn in (("log_partition", log_partition), ("key_moments", key_moments)):
        for label, q in bad_arrays(Q1, wrong_rank=Q).items():
            add(f"{fn_name}-query-{label}", lambda fn=fn, q=q: fn(q, K), "^query: ")
        for label, k in bad_arrays(K, wrong_rank=K[0]).items():
            add(f"{fn_name}-keys-{label}", lambda fn=fn, k=k: fn(Q1, k), "^keys: ")
        add(f"{fn_name}-keys-dimension", lambda fn=fn: fn(Q1, K[:, :1]), "^keys: ")

    # --------------------------------------------------------------- overflowing scores
    q_huge, k_huge = np.array([[HUGE, 0.0]]), np.array([[HUGE, 0.0], [0.0, 1.0]])
    v2 = np.array([[1.0], [2.0]])
    for fn, call in {
        **_attend_calls(q_huge, k_huge, v2),
        "dot_product_scores": lambda: dot_product_scores(q_huge, k_huge),
        "softmax_attention": lambda: softmax_attention(q_huge, k_huge, v2),
    }.items():
        add(f"{fn}-overflow", call, r"^queries: .*float64")
    q32 = np.array([[1e20, 0.0]], np.float32)
    k32 = np.array([[1e20, 0.0], [0.0, 1.0]], np.float32)
    for fn, call in _attend_calls(q32, k32, v2.astype(np.float32)).items():
        add(f"{fn}-overflow-float32", call, r"^queries: .*float32")
    q_big, k_big = np.array([[1e100, 0.0]]), np.array([[1e100, 0.0], [0.0, 1.0]])
    for fn, call in _attend_calls(q_big, k_big, v2, scale=1e200).items():
        add(f"{fn}-overflow-scale", call, "^scale: ")
    for fn, call in _attend_calls(q_big, k_big, v2, temperature=1e-200).items():
        add(f"{fn}-overflow-temperature", call, "^temperature: ")
    q_edge, k_edge = np.array([[1e154]]), np.array([[1e154], [0.0]])
    for fn, call in _attend_calls(q_edge, k_edge, v2, scale=1.0, bias=[1e308, 0.0]).items():
        add(f"{fn}-overflow-bias", call, "^bias: ")
    add(
        "dot_product_scores-overflow-scale",
        lambda: dot_product_scores(q_big, k_big, 1e200),
        "^scale: ",
    )
    add(
        "softmax_attention-overflow-key_bias",
        lambda: softmax_attention(q_edge, k_edge, v2, scale=1.0, key_bias=[1e308, 0.0]),
        "^key_bias: ",
    )
    add(
        "additive_scores-overflow-W",
        lambda: additive_scores(np.ones((1, 2)), K, np.full((2, 2), 1e308), U, VA),
        "^W: ",
    )
    add(
        "additive_scores-overflow-v",
        lambda: additive_scores(np.ones((1, 2)), K, np.full((2, 2), 100.0), U * 0, [1e308, 1e308]),
        "^v: ",
    )
    add(
        "neg_sq_distance_scores-overflow",
        lambda: neg_sq_distance_scores(np.array([[HUGE]]), np.array([[-HUGE], [0.0]]), 1.0),
        "^queries: ",
    )
    add(
        "log_partition-overflow",
        lambda: log_partition(np.array([HUGE, 0.0]), k_huge),
        "^query: ",
    )
    add("key_moments-overflow", lambda: key_moments(np.array([HUGE, 0.0]), k_huge), "^query: ")

    # -------------------------------------------------------- attnbayes.inference.kernel_regression
    for label, k in bad_arrays(XK, wrong_rank=np.zeros((5, 1, 1))).items():
        for fn, call in _kr_calls(keys=k).items():
            add(f"{fn}-keys-{label}", call, "^keys: ")
        add(f"select_bandwidth-keys-{label}", lambda k=k: select_bandwidth(k, YK), "^keys: ")
    for label, v in bad_arrays(YK, wrong_rank=np.zeros((5, 1, 1))).items():
        for fn, call in _kr_calls(values=v).items():
            if fn != "kernel_scores":
                add(f"{fn}-values-{label}", call, "^values: ")
        add(f"select_bandwidth-values-{label}", lambda v=v: select_bandwidth(XK, v), "^values: ")
    for label, q in bad_arrays(XQ, wrong_rank=np.zeros((2, 1, 1))).items():
        for fn in ("kernel_scores", "nadaraya_watson", "nadaraya_watson-streamed"):
            add(f"{fn}-queries-{label}", _kr_calls(queries=q)[fn], "^queries: ")
    for label, h in BAD_BANDWIDTHS.items():
        if label == "shape":
            h = np.ones(2)  # (2,) bandwidths for 1-D keys
        for fn, call in _kr_calls(bandwidth=h).items():
            add(f"{fn}-bandwidth-{label}", call, "^bandwidth: ")
    for label, name in BAD_NAMES.items():
        for fn, call in _kr_calls(kernel=name).items():
            add(f"{fn}-kernel-{label}", call, "^kernel: ")
        add(
            f"select_bandwidth-kernel-{label}",
            lambda n=name: select_bandwidth(XK, YK, kernel=n),
            "^kernel: ",
        )
        add(
            f"select_bandwidth-method-{label}",
            lambda n=name: select_bandwidth(XK, YK, method=n),
            "^method: ",
        )
    for label, bs in BAD_BLOCK_SIZES.items():
        add(
            f"nadaraya_watson-block_size-{label}",
            lambda b=bs: nadaraya_watson(XK, YK, XQ, bandwidth=0.7, block_size=b),
            "^block_size: ",
        )
        add(
            f"leave_one_out-block_size-{label}",
            lambda b=bs: leave_one_out(XK, YK, bandwidth=0.7, block_size=b),
            "^block_size: ",
        )
        add(
            f"select_bandwidth-block_size-{label}",
            lambda b=bs: select_bandwidth(XK, YK, block_size=b),
            "^block_size: ",
        )
    add(
        "nadaraya_watson-values-rows",
        lambda: nadaraya_watson(XK, YK[:4], XQ, bandwidth=1.0),
        "^values: ",
    )
    add(
        "nadaraya_watson-queries-dimension",
        lambda: nadaraya_watson(XK, YK, np.ones((2, 2)), bandwidth=1.0),
        "^queries: ",
    )
    add("leave_one_out-keys-one", lambda: leave_one_out([1.0], [1.0], bandwidth=1.0), "^keys: ")
    add("select_bandwidth-keys-one", lambda: select_bandwidth([1.0], [1.0]), "^keys: ")
    add("select_bandwidth-keys-constant", lambda: select_bandwidth(np.ones(5), YK), "^keys: ")
    for label, bounds in {
        "reversed": (2.0, 1.0),
        "zero": (0.0, 1.0),
        "nan": (np.nan, 1.0),
        "inf": (0.1, np.inf),
        "scalar": 3.0,
        "three": (0.1, 1.0, 2.0),
        "str": ("a", "b"),
    }.items():
        add(
            f"select_bandwidth-bounds-{label}",
            lambda b=bounds: select_bandwidth(XK, YK, bounds=b),
            "^bounds: ",
        )
    for label, n in {"two": 2, "float": 4.5, "bool": True, "str": "12"}.items():
        add(
            f"select_bandwidth-num_grid-{label}",
            lambda n=n: select_bandwidth(XK, YK, num_grid=n),
            "^num_grid: ",
        )
    add(
        "select_bandwidth-per_coordinate",
        lambda: select_bandwidth(XK, YK, per_coordinate="yes"),
        "^per_coordinate: ",
    )
    grad = {"method": "gradient", "key": PRNG}
    for label, kw, name in (
        ("key-missing", {"method": "gradient"}, "key"),
        ("key-int", {"method": "gradient", "key": 3}, "key"),
        ("kernel-boxcar", {**grad, "kernel": "boxcar"}, "kernel"),
        ("holdout-one", {**grad, "holdout": 1.0}, "holdout"),
        ("holdout-nan", {**grad, "holdout": np.nan}, "holdout"),
        ("holdout-str", {**grad, "holdout": "0.2"}, "holdout"),
        ("learning_rate-nan", {**grad, "learning_rate": np.nan}, "learning_rate"),
        ("learning_rate-zero", {**grad, "learning_rate": 0.0}, "learning_rate"),
        ("num_steps-zero", {**grad, "num_steps": 0}, "num_steps"),
        ("num_steps-float", {**grad, "num_steps": 2.5}, "num_steps"),
        ("init-nan", {**grad, "init": np.nan}, "init"),
        ("init-zero", {**grad, "init": 0.0}, "init"),
        ("init-complex", {**grad, "init": 1j}, "init"),
        ("init-shape", {**grad, "init": np.ones(3)}, "init"),
    ):
        add(
            f"select_bandwidth-gradient-{label}",
            lambda kw=kw: select_bandwidth(XK, YK, **kw),
            f"^{name}: ",
        )
    # keys so far apart that their squared distances overflow float64
    far = np.array([0.0, 1.0, 2.0, HUGE, -HUGE])
    for fn, call in _kr_calls(keys=far).items():
        if fn != "kernel_scores":  # scores of -inf are its right answer (the kernel is 0)
            add(f"{fn}-keys-overflow", call, "^keys: ")
    add("select_bandwidth-keys-overflow", lambda: select_bandwidth(far, YK), "^keys: ")
    add(
        "nadaraya_watson-queries-overflow",
        lambda: nadaraya_watson(XK, YK, np.array([HUGE]), bandwidth=1.0),
        "^queries: ",
    )
    return cases


CASES = _cases()


@pytest.mark.usefixtures("full_tracebacks")
@pytest.mark.parametrize(("call", "pattern"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_input_is_refused_before_jax(call, pattern):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # NumPy's ComplexWarning and the like: not the point
        with pytest.raises(ValueError, match=pattern) as excinfo:
            call()
    # A plain ValueError (not one of JAX's subclasses), raised before JAX ran.
    assert type(excinfo.value) is ValueError
    assert not jax_frames(excinfo)


def test_case_ids_are_unique():
    ids = [c[0] for c in CASES]
    assert len(ids) == len(set(ids))


# ----------------------------------------------------------------------------- finding 4


@pytest.mark.parametrize("weights", ["softmax", "sparsemax", "entmax15"])
def test_attend_overflowing_scores_are_refused_not_nan_or_the_wrong_key(weights):
    """s = <q, k> = 1e400 for the first key: softmax gave NaN (inf - inf) and sparsemax took
    the infinite score for a masked one and put all the weight on the other key."""
    q, k, v = [[HUGE, 0.0]], [[HUGE, 0.0], [0.0, 1.0]], [[1.0], [2.0]]
    with pytest.raises(ValueError, match=r"^queries: .*1\.8e\+308") as excinfo:
        attend(q, k, v, weights=weights, scale=1.0)
    assert type(excinfo.value) is ValueError


@pytest.mark.parametrize(
    ("weights", "block_size"),
    [("softmax", None), ("softmax", 2), ("sparsemax", None), ("entmax15", None)],
)
def test_attend_scores_just_inside_the_limit_give_the_exact_answer(weights, block_size):
    """|s| = 1e300 (within float64) for both keys: all weight on the first key, exactly."""
    q, k, v = [[1e150]], [[1e150], [-1e150]], [[1.0, -2.0], [3.0, 4.0]]
    out = attend(q, k, v, weights=weights, scale=1.0, block_size=block_size)
    np.testing.assert_array_equal(np.asarray(out), [[1.0, -2.0]])


@pytest.mark.parametrize(
    ("arg", "pattern"),
    [("queries", "^queries: "), ("keys", "^keys: "), ("values", "^values: "), ("bias", "^bias: ")],
)
def test_attend_refuses_complex_inputs(arg, pattern):
    args = {"queries": Q, "keys": K, "values": V, "bias": np.zeros(3)}
    args[arg] = args[arg] + 0.5j
    with pytest.raises(ValueError, match=pattern) as excinfo:
        attend(args["queries"], args["keys"], args["values"], bias=args["bias"])
    assert type(excinfo.value) is ValueError


@pytest.mark.parametrize("temperature", ["0.5", None, np.ones(2), 1j])
def test_attend_bad_temperature_names_it(temperature):
    with pytest.raises(ValueError, match="^temperature: ") as excinfo:
        attend(Q, K, V, temperature=temperature)
    assert type(excinfo.value) is ValueError


@pytest.mark.parametrize(
    ("regulariser", "alpha"),
    [("shannon", None), ("gini", None), ("tsallis", 1.5), ("tsallis", 1.3)],
)
def test_fully_masked_row_gets_zero_weights_at_every_temperature(regulariser, alpha):
    """All zeros, as the maps document for temperature > 0 (at 0 the vertex was e_0)."""
    s = np.array([[-np.inf, -np.inf, -np.inf], [0.0, -np.inf, 1.0], [2.0, 2.0, -np.inf]])
    expected = np.array([[0.0, 0.0, 0.0], [0.0, 0.0, 1.0], [1.0, 0.0, 0.0]])
    vertex = np.asarray(regularised_argmax(s, regulariser, alpha, temperature=0.0))
    np.testing.assert_array_equal(vertex, expected)
    warm = np.asarray(regularised_argmax(s, regulariser, alpha, temperature=0.7))
    np.testing.assert_array_equal(warm[0], vertex[0])
    # along another axis too
    vertex_t = np.asarray(regularised_argmax(s.T, regulariser, alpha, temperature=0.0, axis=0))
    np.testing.assert_array_equal(vertex_t, expected.T)


@pytest.mark.parametrize(
    ("scores", "pattern"),
    [
        (np.zeros(0), "^scores: "),
        (np.zeros((2, 0)), "^scores: "),
        (np.array([1.0 + 1j, 0.0]), "^scores: "),
    ],
)
@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_regularised_argmax_refuses_empty_and_complex_scores(scores, pattern, temperature):
    with pytest.raises(ValueError, match=pattern) as excinfo:
        regularised_argmax(scores, "gini", temperature=temperature)
    assert type(excinfo.value) is ValueError


def test_jit_and_grad_still_work_and_skip_the_value_checks():
    """Under jax.jit the arguments are tracers: only the static checks run."""
    s = jnp.array([0.3, 1.2, -0.5])
    jitted = jax.jit(lambda t: regularised_argmax(s, "tsallis", 1.5, temperature=t))
    np.testing.assert_allclose(jitted(0.7), regularised_argmax(s, "tsallis", 1.5, temperature=0.7))
    got = jax.jit(lambda q, t: attend(q, K, V, temperature=t))(jnp.asarray(Q), 0.5)
    np.testing.assert_allclose(got, attend(Q, K, V, temperature=0.5), atol=1e-14)
    grad = jax.grad(lambda q: jnp.sum(attend(q, K, V, weights="sparsemax")))(jnp.asarray(Q))
    assert np.all(np.isfinite(np.asarray(grad)))
    np.testing.assert_allclose(
        jax.grad(log_partition)(Q1, K), attend(Q1[None], K, K, scale=1.0)[0], atol=1e-14
    )
    # overflow is not checked on tracers: it shows as NaN, as the docstring says
    huge = jax.jit(lambda q: attend(q, [[HUGE, 0.0], [0.0, 1.0]], [[1.0], [2.0]]))
    assert np.isnan(np.asarray(huge(jnp.array([[HUGE, 0.0]])))).all()
    # the static checks still run on tracers
    with pytest.raises(ValueError, match="^queries: "):
        jax.jit(lambda q: attend(q, K, V))(jnp.ones((2, 2, 2)))


# ----------------------------------------------------------------------------- finding 6


def _d2l(n, seed):
    rng = np.random.default_rng(seed)
    x = np.sort(rng.uniform(0, 5, n))
    return x, 2 * np.sin(x) + x**0.8 + 0.5 * rng.normal(size=n)


def test_select_bandwidth_is_not_inflated_by_one_outlying_key():
    """200 keys on [0, 5] and one at 1e6: the sd grid started at 1e-3 sd = 70 (14 times the
    bulk's range) and selected h = 70.5 against 0.207 without the outlier; the robust spread
    keeps the grid where the bulk is."""
    x, y = _d2l(200, seed=3)
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)  # no warning on clean data
        clean = float(select_bandwidth(x, y).bandwidth)
    x_out, y_out = np.append(x, 1e6), np.append(y, y[-1])
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        h = float(select_bandwidth(x_out, y_out).bandwidth)
    assert 0.05 < clean < 1.0
    # the outlier's own leave-one-out error does not depend on h (its nearest key is 1e6 away)
    assert h == pytest.approx(clean, rel=0.02)


def test_select_bandwidth_warns_when_the_bandwidth_exceeds_the_keys_range():
    """Values that alternate in sign: any local average is worse than the global mean, so CV
    decreases in h and the selected h is wider than the keys' range (a constant fit)."""
    x = np.linspace(0.0, 1.0, 8)
    y = np.array([1.0, -1.0] * 4)
    pattern = r"^bandwidth: .* exceeds the keys' range \(max - min\) 1 "
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # the minimum is on the grid's edge
        with pytest.warns(UserWarning, match=pattern):
            res = select_bandwidth(x, y)
        assert float(res.bandwidth) > 1.0
        with pytest.warns(UserWarning, match=pattern):
            select_bandwidth(x, y, method="gradient", key=PRNG, init=5.0, num_steps=5)
