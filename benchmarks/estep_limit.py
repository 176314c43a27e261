"""The streamed EM step against the machine's own rate for the step's irreducible work.

One streamed EM step (``em_step(..., block_size=B)``) on N points and K = N atoms in 2-D makes
two passes over the N x K row-atom pairs. Pass 1 forms each score from the differences,
s_ik = log w_k - |x_i - mu_k|^2 / (2 sigma^2), and sums exp(s_ik - m_i) over the atoms into the
row log-sum-exp lse_i (``em_step`` drops the posterior means that pass 1 can also accumulate).
Pass 2 forms the score again and sums A_ik = exp(s_ik - lse_i) over the rows into the mass
sum_i A_ik and the p shift terms sum_i A_ik (x_ic - mu_kc) of every atom. Per pair that is two
exponentials and a few multiply-adds, and this script measures, in one run:

    limit     that per-pair work as a tight JAX kernel on one block of b x b pairs (the first b
              points of a 2b-point ring against the other b as atoms, with the rows' true
              log-sum-exp over all 2b atoms, so that the exponentials see the step's arguments),
              reused R times inside a ``lax.fori_loop``. Each round shifts the points by a
              round-off-sized amount that XLA cannot see through, so nothing is hoisted out of
              the loop, and each pass gets its own shift, so the two score computations are not
              merged. Two forms, of which the faster is "the limit":
              - fused: each exponential feeds one reduction (pass-2 work laid out atoms by rows,
                its p + 1 sums folded into one multiply-add chain): XLA fuses score,
                exponential and sum into one kernel, and no b x b array is stored;
              - blocked: the step's own structure, the exponentials stored in the b x b block
                (in cache for b = 256) and summed by vector-matrix products.
              Neither counts the step's other work (pass 1's running row maximum, padding,
              loop overhead), so the limit is a floor the step can approach but not reach.
    np.exp    NumPy's ``np.exp`` on an in-cache array of the same arguments, twice per pair
              (single-threaded): a second reference for what an exponential costs here;
    streamed  ``em_step(x, x, w, sigma, block_size=B, num_devices=1)`` at N = K = ``--n``;
    dense     ``em_step(x, x, w, sigma)`` at N = K = ``--dense-n`` (two N x K arrays:
              16 N^2 bytes in float64).

Every case runs in float64 and float32 on 2-D ring data (sigma = 0.5). After a first
(compiling) call of each, ``--repeats`` rounds call every case once in turn, and each case keeps
its minimum, so that all see the same share of a busy machine. Printed per case: ns per pair
of wall time, and of process CPU time (all threads; XLA runs its elementwise loops on both
cores when it can, so on an idle 2-core machine the wall time is up to half the CPU time, and on
a busy one the CPU time is the steadier measure), and the ratio of each step to the limit, in
wall time and in CPU time. The machine is shared: compare the ratios of one run.

    python benchmarks/estep_limit.py [--n 20000] [--block-size 1024] [--dense-n 8000]
        [--limit-block 256] [--repeats 3]
"""

from __future__ import annotations

import argparse
import os
import time

import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

from attnbayes.inference.deconvolution.em import em_step  # noqa: E402
from attnbayes.models.deconvolution import simulate  # noqa: E402

SIGMA = 0.5
DTYPES = (np.float64, np.float32)
# pairs per timed call of a limit kernel (about 0.5 s in float64)
LIMIT_PAIRS = 100_000_000


def measure(cases: list, repeats: int) -> dict:
    """{key: (wall, cpu) ns per pair} for ``cases`` = [(key, fn, pairs)]: one first (compiling)
    call each, then ``repeats`` rounds over all the cases in turn (so that every case sees the
    same share of a busy machine), keeping each case's minimum."""
    for _, fn, _ in cases:
        jax.block_until_ready(fn())
    best = {key: (np.inf, np.inf) for key, _, _ in cases}
    for _ in range(repeats):
        for key, fn, pairs in cases:
            w0, c0 = time.perf_counter(), time.process_time()
            jax.block_until_ready(fn())
            wall, cpu = time.perf_counter() - w0, time.process_time() - c0
            best[key] = (
                min(best[key][0], wall / pairs * 1e9),
                min(best[key][1], cpu / pairs * 1e9),
            )
    return best


def ring(n: int) -> np.ndarray:
    _, x = simulate(jax.random.PRNGKey(0), "ring", SIGMA, n)
    return np.asarray(x, np.float64)


def limit_block(b: int):
    """Rows x (b, 2), atoms mu (b, 2), log weights, the rows' log-sum-exp over all N atoms and
    their max over this block of atoms (float64), from ``ring(2 b)`` with K = N = 2 b."""
    data = ring(2 * b)
    x, mu = data[:b], data[b:]
    log_w = -np.log(2 * b)
    scores = log_w - ((x[:, None, :] - data[None, :, :]) ** 2).sum(-1) / (2 * SIGMA**2)
    top = scores.max(1)
    lse = top + np.log(np.exp(scores - top[:, None]).sum(1))
    block = scores[:, b:]
    return x, mu, np.full(b, log_w), lse, block.max(1), block - lse[:, None]


def limit_kernel(form: str, b: int, rounds: int, dtype):
    """One jitted call: ``rounds`` rounds of both passes' per-pair work on one b x b block."""
    inv2 = 0.5 / SIGMA**2
    tiny = 1e-300 if dtype == np.float64 else 1e-30

    def scores(xs, mu, bias):  # (b, b) rows x atoms
        return bias[None, :] - inv2 * sum(
            (xs[:, c, None] - mu[None, :, c]) ** 2 for c in range(xs.shape[1])
        )

    def one_round(i, carry, x, mu, bias, lse, top):
        r1, r2 = carry
        shift = (i * tiny).astype(dtype)
        x1, x2 = x + shift, x + 2 * shift  # a shift per pass: two separate score computations
        p = x.shape[1]
        if form == "fused":
            r1 = r1 + jnp.sum(jnp.exp(scores(x1, mu, bias) - top[:, None]), axis=1)
            d = [x2[None, :, c] - mu[:, c, None] for c in range(p)]  # (atoms, rows)
            t = bias[:, None] - lse[None, :] - inv2 * sum(dc * dc for dc in d)
            r2 = r2 + jnp.sum(jnp.exp(t) * (1.0 + sum(d)), axis=1)
        else:  # blocked
            ones = jnp.ones((x.shape[0],), dtype)
            r1 = r1 + jnp.exp(scores(x1, mu, bias) - top[:, None]) @ ones
            a = jnp.exp(scores(x2, mu, bias) - lse[:, None])
            sums = [ones @ a] + [ones @ (a * (x2[:, c, None] - mu[None, :, c])) for c in range(p)]
            r2 = r2 + sum(sums)
        return r1, r2

    @jax.jit
    def run(x, mu, bias, lse, top):
        zero = jnp.zeros((x.shape[0],), dtype)
        body = lambda i, c: one_round(i, c, x, mu, bias, lse, top)  # noqa: E731
        return jax.lax.fori_loop(0, rounds, body, (zero, zero))

    return run


def limit_cases(b: int) -> list:
    """[(key, fn, pairs)] of the limit kernels and the np.exp reference, in both dtypes."""
    x, mu, bias, lse, top, args = limit_block(b)
    rounds = max(1, LIMIT_PAIRS // (b * b))
    cases = []
    for dtype in DTYPES:
        inputs = [jnp.asarray(a, dtype) for a in (x, mu, bias, lse, top)]
        for form in ("fused", "blocked"):
            run = limit_kernel(form, b, rounds, dtype)
            cases.append(((form, dtype), lambda run=run, a=inputs: run(*a), rounds * b * b))
        # NumPy: exp of the block's own pass-2 arguments (in cache: 16,384 of them), twice a pair
        arr = np.ascontiguousarray(args.ravel()[: 1 << 14], dtype)
        res = np.empty_like(arr)
        calls = max(1, LIMIT_PAIRS // 20 // arr.size)

        def numpy_exp(arr=arr, res=res, calls=calls):
            for _ in range(calls):
                np.exp(arr, out=res)
            return res

        cases.append((("np.exp", dtype), numpy_exp, calls * arr.size / 2))
    return cases


def step_cases(n: int, dense_n: int, block_size: int, step=None) -> list:
    """[(key, fn, pairs)] of ``em_step`` (or ``step``, same signature) streamed at N = K = n
    and dense at N = K = dense_n (skipped when 0), in both dtypes."""
    step = em_step if step is None else step
    cases = []
    for name, size, block in (("streamed", n, block_size), ("dense", dense_n, None)):
        if size <= 0:
            continue
        x = ring(size)
        for dtype in DTYPES:
            xs, w = x.astype(dtype), np.full(size, 1.0 / size, dtype)
            kw = {} if block is None else {"block_size": block, "num_devices": 1}
            fn = lambda xs=xs, w=w, kw=kw: step(xs, xs, w, SIGMA, **kw)  # noqa: E731
            cases.append(((name, dtype), fn, size**2))
    return cases


def print_table(times: dict, labels: dict, steps: tuple = ("streamed", "dense")) -> None:
    """One row per case and dtype: ns per pair (wall, CPU), and the ratios to the limit."""
    head = f"{'case':<36} {'dtype':>7} {'wall ns':>8} {'cpu ns':>7} {'cpu/wall':>8}"
    print(head + f" {'wall/limit':>10} {'cpu/limit':>9}")
    for dtype in DTYPES:
        best = min(("fused", "blocked"), key=lambda f: times[(f, dtype)][0])
        limit = times[(best, dtype)]
        rows = [(f"limit ({best})", limit)]
        rows += [(labels[f], times[(f, dtype)]) for f in ("fused", "blocked", "np.exp")]
        rows += [(labels[s], times[(s, dtype)]) for s in steps if (s, dtype) in times]
        for label, (wall, cpu) in rows:
            ratios = f" {wall / limit[0]:>10.2f} {cpu / limit[1]:>9.2f}"
            print(
                f"{label:<36} {np.dtype(dtype).name:>7} {wall:>8.2f} {cpu:>7.2f} "
                f"{cpu / wall:>8.2f}" + ratios
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=20_000, help="N = K of the streamed step")
    parser.add_argument("--block-size", type=int, default=1024)
    parser.add_argument(
        "--dense-n", type=int, default=8_000, help="N = K of the dense step (0: skip)"
    )
    parser.add_argument("--limit-block", type=int, default=256, help="b of the limit kernels")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    b = args.limit_block
    print(
        f"ns per row-atom pair, 2-D ring (sigma = {SIGMA}), {os.cpu_count()} cores, "
        f"jax {jax.__version__}; minimum of {args.repeats} rounds; ratios to the limit "
        "(the faster of the fused and blocked kernels)",
        flush=True,
    )
    load = os.getloadavg()[0]
    cases = limit_cases(b) + step_cases(args.n, args.dense_n, args.block_size)
    times = measure(cases, args.repeats)
    print(f"load average (1 min): {load:.2f} before, {os.getloadavg()[0]:.2f} after")
    labels = {
        "fused": f"  fused kernel, b = {b}",
        "blocked": f"  blocked kernel, b = {b}",
        "np.exp": "  np.exp x 2 (1 thread)",
        "streamed": f"streamed step N = {args.n}, B = {args.block_size}",
        "dense": f"dense step N = {args.dense_n}",
    }
    print_table(times, labels)


if __name__ == "__main__":
    main()
