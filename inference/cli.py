"""The ``attnbayes`` command.

    attnbayes report [--quick] [--out DIR] [--name NAME] [--seed N]

JAX is configured here, before it is first imported: float64, and as many host devices as
there are chains to run in parallel (two), unless ``XLA_FLAGS`` already sets a count.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

DEVICE_FLAG = "--xla_force_host_platform_device_count"


def _configure_jax(num_devices: int = 2) -> None:
    flags = os.environ.get("XLA_FLAGS", "")
    if DEVICE_FLAG not in flags:
        os.environ["XLA_FLAGS"] = f"{flags} {DEVICE_FLAG}={num_devices}".strip()
    import jax

    jax.config.update("jax_enable_x64", True)


def _seed(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
    if not 0 <= value < 2**32:
        raise argparse.ArgumentTypeError(f"must be in [0, 2**32), got {value}")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="attnbayes",
        description="Attention as statistical inference: run EM/attention and full-posterior "
        "MCMC side by side and report how they differ.",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    report = sub.add_parser(
        "report",
        help="simulate the built-in data, run every method, write an HTML report",
        description="Simulate the built-in deconvolution scenarios (three-atoms, sparse-means, "
        "ring), run attention-EM, NUTS and the oracle Bayes rule on each, and write "
        "OUT/NAME/index.html with results.csv, PNG figures and the NUTS DataTrees (netCDF).",
    )
    report.add_argument(
        "--quick", action="store_true", help="small sizes (about 75 s on 2 cores instead of 110 s)"
    )
    report.add_argument("--out", default="reports", metavar="DIR", help="output folder [reports]")
    report.add_argument(
        "--name", default="deconvolution", help="report folder name inside DIR [deconvolution]"
    )
    report.add_argument("--seed", type=_seed, default=0, help="random seed [0]")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    _configure_jax()
    from inference.report import write_report

    start = time.perf_counter()

    def progress(message: str) -> None:
        print(f"[{time.perf_counter() - start:6.1f}s] {message}", file=sys.stderr, flush=True)

    try:
        path = write_report(
            args.out, name=args.name, quick=args.quick, seed=args.seed, progress=progress
        )
    except ValueError as err:
        print(f"attnbayes: error: {err}", file=sys.stderr)
        return 2
    except OSError as err:
        print(f"attnbayes: error: cannot write the report: {err}", file=sys.stderr)
        return 1
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
