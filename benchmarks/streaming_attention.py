"""Peak memory and time of streamed attention against the dense path.

``attend(q, k, v, block_size=B)`` scans over blocks of B keys (and of B queries) with a running
log-sum-exp, so it never holds the Q x K score matrix; the dense path (``block_size=None``)
does, together with the Q x K weights it returns internally. Cases, with 2-D keys and queries
and 2-D values, float32 (``--x64`` for float64):

    20k x 20k   dense and streamed (outputs compared);
    100k x 100k streamed only (the dense score matrix would not fit: its size is printed).

Peak memory is measured honestly: each case runs in a fresh Python process, started by a
small intermediate process that waits for it and reads
``resource.getrusage(RUSAGE_CHILDREN).ru_maxrss`` (its only child, so this is the case's own
peak resident set). From it we subtract the peak of a baseline process that only imports JAX
and builds the same inputs. The first call includes XLA compilation (whose working memory is
part of the peak); the second call is timed again as the run time.

    python benchmarks/streaming_attention.py [--block-size 1024] [--x64] [--skip-100k]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def child(mode: str, n: int, block_size: int, x64: bool, out_path: str) -> None:
    """One case: build the inputs; unless ``mode == "baseline"`` run attend twice."""
    import jax

    jax.config.update("jax_enable_x64", x64)
    import numpy as np

    sys.path.insert(0, ROOT)
    from attnbayes.inference.attention import attend

    kq, kk, kv = jax.random.split(jax.random.PRNGKey(0), 3)
    q = jax.random.normal(kq, (n, 2))
    k = jax.random.normal(kk, (n, 2))
    v = jax.random.normal(kv, (n, 2))
    jax.block_until_ready((q, k, v))
    times = []
    if mode != "baseline":
        bs = None if mode == "dense" else block_size
        for _ in range(2):
            start = time.perf_counter()
            out = jax.block_until_ready(attend(q, k, v, block_size=bs))
            times.append(time.perf_counter() - start)
        np.save(out_path, np.asarray(out))
    self_peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(json.dumps({"times": times, "self_peak_kb": self_peak}))


def measure(mode: str, n: int, block_size: int, x64: bool, out_path: str) -> None:
    """Run one case as this process's only child and report its peak RSS."""
    cmd = [sys.executable, __file__, "--child", mode, str(n), str(block_size), out_path]
    if x64:
        cmd.append("--x64")
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        print(json.dumps({"error": proc.stderr[-2000:], "returncode": proc.returncode}))
        return
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    result["children_peak_kb"] = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    print(json.dumps(result))


def run_case(mode: str, n: int, block_size: int, x64: bool, out_path: str) -> dict:
    cmd = [sys.executable, __file__, "--measure", mode, str(n), str(block_size), out_path]
    if x64:
        cmd.append("--x64")
    proc = subprocess.run(cmd, capture_output=True, text=True, check=True)
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--block-size", type=int, default=1024)
    parser.add_argument("--x64", action="store_true")
    parser.add_argument("--skip-100k", action="store_true")
    parser.add_argument("--child", nargs=4, metavar=("MODE", "N", "B", "OUT"))
    parser.add_argument("--measure", nargs=4, metavar=("MODE", "N", "B", "OUT"))
    args = parser.parse_args()
    if args.child:
        mode, n, b, out = args.child
        return child(mode, int(n), int(b), args.x64, out)
    if args.measure:
        mode, n, b, out = args.measure
        return measure(mode, int(n), int(b), args.x64, out)

    itemsize = 8 if args.x64 else 4
    b = args.block_size
    print(
        f"attend(q, k, v): 2-D keys/queries, 2-D values, "
        f"{'float64' if args.x64 else 'float32'}, block_size = {b}, CPU, "
        f"{os.cpu_count()} cores; peak RSS above a baseline process (imports + inputs)"
    )
    header = f"{'case':>26} {'peak MB':>9} {'net MB':>9} {'1st call s':>11} {'2nd call s':>11}"
    sizes = [20_000] if args.skip_100k else [20_000, 100_000]
    with tempfile.TemporaryDirectory() as tmp:
        print(header)
        for n in sizes:
            base = run_case("baseline", n, b, args.x64, os.path.join(tmp, "base.npy"))
            base_mb = base["children_peak_kb"] / 1024
            print(f"{f'baseline {n:,} x {n:,}':>26} {base_mb:9.0f} {0:9.0f} {'':>11} {'':>11}")
            modes = ["dense", "streamed"] if n <= 20_000 else ["streamed"]
            outputs = {}
            for mode in modes:
                out_path = os.path.join(tmp, f"{mode}-{n}.npy")
                res = run_case(mode, n, b, args.x64, out_path)
                if "error" in res:
                    print(f"{mode} {n}: failed ({res['returncode']}): {res['error'][-300:]}")
                    continue
                peak_mb = res["children_peak_kb"] / 1024
                t1, t2 = res["times"]
                label = f"{mode} {n:,} x {n:,}"
                print(f"{label:>26} {peak_mb:9.0f} {peak_mb - base_mb:9.0f} {t1:11.2f} {t2:11.2f}")
                outputs[mode] = out_path
            if len(outputs) == 2:
                import numpy as np

                diff = np.max(np.abs(np.load(outputs["dense"]) - np.load(outputs["streamed"])))
                print(f"{'':>26} dense vs streamed outputs: max abs diff {diff:.2e}")
            matrix_gb = n * n * itemsize / 1e9
            print(
                f"{'':>26} one {n:,} x {n:,} score matrix: {matrix_gb:.1f} GB "
                f"(the dense path holds scores and weights: ~{2 * matrix_gb:.1f} GB)"
            )


if __name__ == "__main__":
    main()
