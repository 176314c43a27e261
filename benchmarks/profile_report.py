"""Where the wall time of ``attnbayes report`` goes (issue 17, part 3).

Runs ``attnbayes.app.report.write_report`` in this process, with one worker (``workers=1``: every
part in order, where the timers see it; ``make run`` runs the parts on one worker process per
core), full sizes unless ``--quick``,
configured as the CLI configures it (float64, two host devices, JAX's persistent compilation
cache in ``--cache-dir`` via ``attnbayes.app.cache.enable_compilation_cache``, matplotlib's Agg
backend), and splits the wall time of every report step (a step runs from one ``progress``
message to the next) into exclusive parts:

  trace     JAX tracing to a jaxpr      ('/jax/core/compile/jaxpr_trace_duration')
  lower     jaxpr -> MLIR module        ('/jax/core/compile/jaxpr_to_mlir_module_duration')
  compile   XLA backend compile         ('/jax/core/compile/backend_compile_duration', less
            the cache parts below that run inside it)
  c-read    persistent-cache reads      (``jax._src.compiler._cache_read``: look-up and
            deserialisation of the executable, hit or miss)
  c-key/wr  cache key (hashing the module, ``_get_cache_key``) and cache writes (``_cache_write``)
  plot      matplotlib: the report's ``figure_*`` functions, ``plt.subplots``/``plt.figure`` and
            ``Figure.savefig`` (JAX work inside them is counted in its own column)
  files     writing: ``save_report_tree`` (netCDF), ``Path.write_bytes/write_text`` (PNG, HTML,
            run.json), ``DataFrame.to_csv``, publishing the folder
  other     the rest: executing the compiled programs, NumPy/pandas/ArviZ and Python overhead

Every part is measured on the main thread with a stack of regions, so nested regions are never
counted twice (a compile inside a figure function counts as compile). Start and end of the three
JAX phases come from ``jax.monitoring`` (a scalar event at the start, a duration event at the
end, both with ``fun_name``); cache reads, keys and writes and the plotting and writing
functions are wrapped with timers. Work on other threads (``run_nuts`` compiles its posterior
predictive on a second thread while the sampler compiles) overlaps the main thread; it is shown
apart ("bg compile") and not in the wall-time split. "comp" counts backend compiles per step
(main + background), "hits" persistent-cache hits.

Also printed: the distinct ``jax.monitoring`` event names seen (with counts and summed
durations), the 15 largest single XLA compiles (function name, step, seconds) and the functions
with the most trace + lower + compile time in total.

    python -P benchmarks/profile_report.py --cache-dir DIR [--out DIR] [--quick] [--json FILE]
                                           [--label TEXT] [--all-sections]

Sections 1-8 only: an optional section after them (``write_report(calibration=...)``, when the
report has it) is left out unless ``--all-sections``. If the report fails, the tables up to the
failure are printed and the error is raised again. Each step also shows the process's CPU time
(all threads) and the 1-minute load average, since wall times on a shared machine depend on
the other jobs.

Cold cache: an empty ``--cache-dir``; warm: run it again with the same folder (a new process).
``--analyze-profile FILE.prof`` instead reads a cProfile of a run,

    python -P -m cProfile -o warm.prof benchmarks/profile_report.py --cache-dir DIR ...
    python -P benchmarks/profile_report.py --analyze-profile warm.prof

and lists the functions of attnbayes, numpyro, arviz, xarray and matplotlib with the most
cumulative time outside JAX's compile pipeline (their time below ``trace_to_jaxpr``,
``lower_jaxpr_to_module`` and ``compile_or_get_cached`` is estimated through the call graph,
sharing each callee's time among its callers in proportion to their cumulative time, and
subtracted).

Timings are wall times on whatever machine runs this; the numbers in the issue come from a
shared machine with two cores, so they vary by several percent between runs.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import threading
import time

STARTED = time.perf_counter()
LOAD_AT_START = os.getloadavg()

PHASES = {
    "/jax/core/compile/jaxpr_trace_duration": "trace",
    "/jax/core/compile/jaxpr_to_mlir_module_duration": "lower",
    "/jax/core/compile/backend_compile_duration": "compile",
}
MAIN_COLUMNS = ("trace", "lower", "compile", "cache_read", "cache_key_write", "plot", "files")
CATEGORY_COLUMN = {
    "trace": "trace",
    "lower": "lower",
    "compile": "compile",
    "cache_read": "cache_read",
    "cache_key": "cache_key_write",
    "cache_write": "cache_key_write",
    "plot": "plot",
    "files": "files",
}


# ----------------------------------------------------------------------------- bookkeeping


class _Frame:
    __slots__ = ("category", "children", "hit", "name", "start")

    def __init__(self, category: str, name: str = ""):
        self.category = category
        self.name = name
        self.start = time.perf_counter()
        self.children = 0.0
        self.hit = False


class Profile:
    """Per-step exclusive time of each category, on the main thread and on other threads."""

    def __init__(self):
        self.main = threading.main_thread()
        self.local = threading.local()
        self.lock = threading.Lock()
        self.steps: list[dict] = []
        self.new_step("(start of write_report)")
        self.events: dict[str, list] = {}  # name -> [kind, count, summed duration]
        self.compiles: list[dict] = []  # one per backend compile
        self.by_function: dict[str, dict[str, float]] = {}

    # steps
    def new_step(self, message: str) -> None:
        now, cpu = time.perf_counter(), time.process_time()
        with self.lock:
            if self.steps:
                self._finish(now, cpu)
            step = {"step": message, "start": now, "end": None, "compiles": 0, "hits": 0}
            step["cpu_start"] = cpu
            step.update(dict.fromkeys(MAIN_COLUMNS, 0.0))
            step.update({"bg_compile": 0.0, "misses": 0})
            self.steps.append(step)

    def _finish(self, now: float, cpu: float) -> None:
        step = self.steps[-1]
        step["end"] = now
        step["cpu"] = cpu - step["cpu_start"]
        step["load"] = os.getloadavg()[0]

    def close(self) -> None:
        self._finish(time.perf_counter(), time.process_time())

    # regions
    def _stack(self) -> list[_Frame]:
        stack = getattr(self.local, "stack", None)
        if stack is None:
            stack = self.local.stack = []
        return stack

    def push(self, category: str, name: str = "") -> _Frame:
        frame = _Frame(category, name)
        self._stack().append(frame)
        return frame

    def inside(self, *categories: str) -> bool:
        return any(f.category in categories for f in self._stack())

    def pop(self, category: str) -> tuple[_Frame, float, float] | None:
        stack = self._stack()
        if not any(f.category == category for f in stack):
            return None
        now = time.perf_counter()
        while True:  # unwinds frames left open by an exception (none expected)
            frame = stack.pop()
            total = now - frame.start
            own = max(total - frame.children, 0.0)
            if stack:
                stack[-1].children += total
            self._add(frame.category, own)
            if frame.category == category:
                return frame, total, own

    def _add(self, category: str, seconds: float) -> None:
        column = CATEGORY_COLUMN[category]
        with self.lock:
            step = self.steps[-1]
            if threading.current_thread() is self.main:
                step[column] += seconds
            else:
                step["bg_compile"] += seconds

    def region(self, category: str, function):
        """``function`` wrapped in a region (the same wrapper for the same function)."""
        if getattr(function, "_profiled", None) == category:
            return function
        profile = self

        def wrapper(*args, **kwargs):
            if category == "files" and profile.inside("cache_write", "cache_read"):
                return function(*args, **kwargs)
            frame = profile.push(category, getattr(function, "__qualname__", ""))
            try:
                result = function(*args, **kwargs)
            finally:
                profile.pop(category)
            if category == "cache_read" and result is not None and result[0] is not None:
                parent = next(
                    (f for f in reversed(profile._stack()) if f.category == "compile"), None
                )
                if parent is not None:
                    parent.hit = True
            del frame
            return result

        wrapper._profiled = category
        wrapper.__wrapped__ = function
        wrapper.__name__ = getattr(function, "__name__", "wrapper")
        wrapper.__qualname__ = getattr(function, "__qualname__", "wrapper")
        return wrapper

    # jax.monitoring listeners
    def _seen(self, kind: str, event: str, duration: float = 0.0) -> None:
        with self.lock:
            entry = self.events.setdefault(f"{event} [{kind}]", [kind, 0, 0.0])
            entry[1] += 1
            entry[2] += duration

    def on_event(self, event: str, **kwargs) -> None:
        self._seen("event", event)
        if event == "/jax/compilation_cache/cache_hits":
            with self.lock:
                self.steps[-1]["hits"] += 1
        elif event == "/jax/compilation_cache/cache_misses":
            with self.lock:
                self.steps[-1]["misses"] += 1

    def on_scalar(self, event: str, value, **kwargs) -> None:
        self._seen("scalar", event)
        if event in PHASES:
            self.push(PHASES[event], str(kwargs.get("fun_name", "")))

    def on_span(self, event: str, start: float, end: float, **kwargs) -> None:
        self._seen("time span", event, end - start)

    def on_duration(self, event: str, duration: float, **kwargs) -> None:
        self._seen("duration", event, duration)
        if event not in PHASES:
            return
        category = PHASES[event]
        popped = self.pop(category)
        name = str(kwargs.get("fun_name", ""))
        base = _base_name(name)
        with self.lock:
            totals = self.by_function.setdefault(
                base, {"trace": 0.0, "lower": 0.0, "compile": 0.0, "count": 0}
            )
            own = popped[2] if popped else duration
            totals[category] += own
            if category == "compile":
                totals["count"] += 1
                self.steps[-1]["compiles"] += 1
                self.compiles.append(
                    {
                        "function": name,
                        "step": self.steps[-1]["step"],
                        "xla_s": own,
                        "total_s": duration,
                        "cache_hit": bool(popped and popped[0].hit),
                        "thread": "main"
                        if threading.current_thread() is self.main
                        else "background",
                    }
                )


def _base_name(name: str) -> str:
    """'jit(_sampler)' and 'jit__sampler' (module names) -> '_sampler' (the traced function)."""
    if name.startswith("jit(") and name.endswith(")"):
        return name[4:-1]
    return name[4:] if name.startswith("jit_") else name


# ----------------------------------------------------------------------------- instrumenting


def instrument(profile: Profile) -> None:
    """Listeners on ``jax.monitoring`` and timers around cache, plotting and writing."""
    import matplotlib.figure
    import matplotlib.pyplot as plt
    import pandas as pd
    from jax import monitoring
    from jax._src import compiler

    from attnbayes.app import outputs
    from attnbayes.app.report import build, figures, html, learned, pieces

    monitoring.register_event_listener(profile.on_event)
    monitoring.register_event_duration_secs_listener(profile.on_duration)
    monitoring.register_event_time_span_listener(profile.on_span)
    monitoring.register_scalar_listener(profile.on_scalar)

    compiler._cache_read = profile.region("cache_read", compiler._cache_read)
    compiler._cache_write = profile.region("cache_write", compiler._cache_write)
    compiler._get_cache_key = profile.region("cache_key", compiler._get_cache_key)

    matplotlib.figure.Figure.savefig = profile.region("plot", matplotlib.figure.Figure.savefig)
    plt.subplots = profile.region("plot", plt.subplots)
    plt.figure = profile.region("plot", plt.figure)
    wrapped: dict[int, object] = {}
    for module in (figures, learned, html, build):
        for name in dir(module):
            if name.startswith("figure_") or name in ("_png", "png_bytes"):
                original = getattr(module, name)
                if callable(original):
                    wrapper = wrapped.setdefault(id(original), profile.region("plot", original))
                    setattr(module, name, wrapper)

    saver = profile.region("files", pieces.save_report_tree)
    for module in (pieces, html):
        module.save_report_tree = saver
    outputs.publish_folder = profile.region("files", outputs.publish_folder)
    import pathlib

    pathlib.Path.write_bytes = profile.region("files", pathlib.Path.write_bytes)
    pathlib.Path.write_text = profile.region("files", pathlib.Path.write_text)
    pd.DataFrame.to_csv = profile.region("files", pd.DataFrame.to_csv)


# (module, attribute path): functions timed inclusively with --hotspots (outermost calls only)
HOTSPOTS = (
    ("attnbayes.inference.mcmc", "run_nuts"),
    ("attnbayes.inference.mcmc", "_model_sites"),
    ("attnbayes.inference.mcmc", "_choose_dynamic"),
    ("attnbayes.inference.mcmc", "_Entry.prepare"),
    ("attnbayes.inference.mcmc", "_datatree"),
    ("attnbayes.inference.deconvolution.gibbs", "run_gibbs"),
    ("attnbayes.inference.switching.gibbs", "run_switching_gibbs"),
    ("attnbayes.inference.deconvolution.invariants", "add_invariants"),
    ("attnbayes.inference.deconvolution.comparison", "_sampler_fit"),
    ("attnbayes.inference.diagnostics.convergence", "diagnostics"),
    ("arviz_stats", "loo"),
    ("arviz_stats", "compare"),
    ("arviz_stats", "rhat"),
    ("arviz_stats", "ess"),
    ("attnbayes.inference.model_comparison", "loo_compare"),
    ("attnbayes.inference.model_comparison", "switching_lfo"),
    ("attnbayes.inference.model_comparison", "with_log_likelihood"),
    ("xarray", "DataArray.quantile"),
    ("xarray", "merge"),
    ("jax", "block_until_ready"),
    ("jax", "device_get"),
    ("attnbayes.app.report.figures", "invariant_series"),
    ("attnbayes.app.report.figures", "switching_predictive_draws"),
    ("attnbayes.app.report.figures", "attention_demo"),
    ("attnbayes.app.report.figures", "kernel_regression_demo"),
    ("attnbayes.app.pages", "png_bytes"),
    ("attnbayes.app.pages", "save_datatree"),
    ("attnbayes.app.report.pieces", "save_report_tree"),
    ("matplotlib.figure", "Figure.savefig"),
)


def instrument_hotspots(profile: Profile) -> dict:
    """Inclusive timers (outermost calls only) around ``HOTSPOTS``, installed wherever the
    function is referenced: its class, and every loaded module's globals that hold it."""
    import importlib

    timings: dict[str, list] = {}
    for module_name, path in HOTSPOTS:
        try:
            owner = importlib.import_module(module_name)
            *parents, attr = path.split(".")
            for part in parents:
                owner = getattr(owner, part)
            original = getattr(owner, attr)
        except (ImportError, AttributeError):
            continue
        original = getattr(original, "__wrapped_hotspot__", original)
        label = f"{module_name}.{path}"
        record = timings.setdefault(label, [0, 0.0, 0])  # calls, seconds, depth

        def make(function, record=record):
            def timed(*args, **kwargs):
                record[2] += 1
                start = time.perf_counter() if record[2] == 1 else None
                try:
                    return function(*args, **kwargs)
                finally:
                    record[2] -= 1
                    if start is not None:
                        record[0] += 1
                        record[1] += time.perf_counter() - start

            timed.__wrapped_hotspot__ = function
            timed.__wrapped__ = function  # inspect.signature sees the function's own
            timed.__module__ = getattr(function, "__module__", None)
            timed.__name__ = getattr(function, "__name__", "timed")
            timed.__qualname__ = getattr(function, "__qualname__", "timed")
            timed.__doc__ = getattr(function, "__doc__", None)
            return timed

        wrapper = make(original)
        if parents:  # a method: replace it on its class
            setattr(owner, attr, wrapper)
        for module in list(sys.modules.values()):
            namespace = getattr(module, "__dict__", None)
            if not isinstance(namespace, dict):
                continue
            for key, value in list(namespace.items()):
                if value is original:
                    namespace[key] = wrapper
                elif getattr(value, "__wrapped__", None) is original and not hasattr(
                    value, "__wrapped_hotspot__"
                ):  # a timer of ``instrument`` around it: keep it, time it too
                    namespace[key] = make(value)
    return timings


def print_hotspots(timings: dict, total_wall: float) -> None:
    print("\n== hot spots: inclusive wall s of selected functions (outermost calls; they nest)")
    print(f"   {'wall s':>7} {'share':>6} {'calls':>6}  function")
    for label, (calls, seconds, _) in sorted(timings.items(), key=lambda kv: -kv[1][1]):
        if calls:
            share = 100 * seconds / max(total_wall, 1e-9)
            print(f"   {seconds:7.1f} {share:5.1f}% {calls:6d}  {label}")


# ----------------------------------------------------------------------------- printing

HEADER = (
    f"{'#':>2} {'step':<46} {'wall s':>7} {'cpu s':>6} {'load':>4} {'trace':>6} {'lower':>6} "
    f"{'compile':>7} {'c-read':>6} {'key/wr':>6} {'plot':>6} {'files':>6} {'other':>7} {'comp':>5} "
    f"{'hits':>5} {'bg-comp':>7}"
)


def _row(i, label, wall, parts, compiles, hits, bg) -> str:
    other = wall - sum(parts[c] for c in MAIN_COLUMNS)
    return (
        f"{i:>2} {label[:46]:<46} {wall:7.1f} {parts['cpu']:6.1f} {parts.get('load', 0):4.1f} "
        f"{parts['trace']:6.1f} {parts['lower']:6.1f} "
        f"{parts['compile']:7.1f} {parts['cache_read']:6.1f} {parts['cache_key_write']:6.1f} "
        f"{parts['plot']:6.1f} {parts['files']:6.1f} {other:7.1f} {compiles:5d} {hits:5d} "
        f"{bg:7.1f}"
    )


def _group(message: str) -> str:
    head = message.split(":", 1)[0] if ":" in message else message
    return head[:46]


def print_tables(profile: Profile, setup_s: float, label: str) -> dict:
    rows = []
    for step in profile.steps:
        wall = step["end"] - step["start"]
        rows.append({**step, "wall": wall, "other": wall - sum(step[c] for c in MAIN_COLUMNS)})
    summed = (*MAIN_COLUMNS, "wall", "cpu", "other", "bg_compile")
    total = {c: sum(r[c] for r in rows) for c in summed}
    total["load"] = sum(r["load"] * r["wall"] for r in rows) / max(total["wall"], 1e-9)
    total.update({c: sum(r[c] for r in rows) for c in ("compiles", "hits", "misses")})

    print(
        f"\nload average at the start {LOAD_AT_START[0]:.1f}, at the end {os.getloadavg()[0]:.1f}"
    )
    print(f"\n== {label}: wall time per report step (seconds; exclusive parts, main thread)")
    print(HEADER)
    for i, r in enumerate(rows):
        print(_row(i, r["step"], r["wall"], r, r["compiles"], r["hits"], r["bg_compile"]))
    print("-" * len(HEADER))
    print(
        _row(
            0,
            "TOTAL write_report",
            total["wall"],
            total,
            total["compiles"],
            total["hits"],
            total["bg_compile"],
        ).replace(" 0 TOTAL", "   TOTAL", 1)
    )
    share = "  ".join(
        f"{c} {100 * total[c] / total['wall']:.0f}%" for c in (*MAIN_COLUMNS, "other")
    )
    print(f"   shares of write_report: {share}")
    print(
        "   cpu s: CPU time of the whole process (all threads) in the step; load: the 1-minute "
        f"load average at its end ({os.cpu_count()} CPUs; wall-weighted mean {total['load']:.1f})"
    )
    print(
        f"   setup before write_report (imports, JAX start): {setup_s:.1f} s; "
        f"process so far: {time.perf_counter() - STARTED:.1f} s; "
        f"cache misses {total['misses']}"
    )

    groups: dict[str, dict] = {}
    for r in rows:
        g = groups.setdefault(
            _group(r["step"]),
            {c: 0.0 for c in (*MAIN_COLUMNS, "wall", "cpu", "bg_compile")}
            | {"compiles": 0, "hits": 0, "load_wall": 0.0},
        )
        for c in (*MAIN_COLUMNS, "wall", "cpu", "bg_compile", "compiles", "hits"):
            g[c] += r[c]
        g["load_wall"] += r["load"] * r["wall"]
        g["load"] = g["load_wall"] / max(g["wall"], 1e-9)
    print(f"\n== {label}: the same, grouped by the step's prefix (before ':')")
    print(HEADER)
    for i, (name, g) in enumerate(groups.items()):
        print(_row(i, name, g["wall"], g, g["compiles"], g["hits"], g["bg_compile"]))

    print("\n== jax.monitoring events seen (kind, count, summed duration s)")
    for name, (kind, count, seconds) in sorted(profile.events.items()):
        extra = f" {seconds:9.2f}" if kind in ("duration", "time span") else ""
        print(f"   {name.rsplit(' [', 1)[0]:<58} {kind:<9} {count:6d}{extra}")

    print("\n== 15 largest single XLA compiles (compile s excluding cache key/read/write)")
    top = sorted(profile.compiles, key=lambda c: -c["xla_s"])[:15]
    for c in top:
        print(
            f"   {c['xla_s']:6.2f} s (total {c['total_s']:6.2f}, {c['thread']:<10}, "
            f"{'hit ' if c['cache_hit'] else 'miss'}) {c['function'][:40]:<40} in "
            f"{c['step'][:60]}"
        )
    print("\n== 15 functions with the most trace + lower + compile in total (all threads)")

    def jax_total(item) -> float:
        return -(item[1]["trace"] + item[1]["lower"] + item[1]["compile"])

    fns = sorted(profile.by_function.items(), key=jax_total)[:15]
    print(f"   {'function':<44} {'trace':>7} {'lower':>7} {'compile':>7} {'compiles':>8}")
    for name, t in fns:
        print(
            f"   {name[:44]:<44} {t['trace']:7.2f} {t['lower']:7.2f} {t['compile']:7.2f} "
            f"{t['count']:8d}"
        )
    return {
        "label": label,
        "setup_s": setup_s,
        "steps": [{k: v for k, v in r.items() if k not in ("start", "end")} for r in rows],
        "total": total,
        "events": profile.events,
        "compiles": sorted(profile.compiles, key=lambda c: -c["xla_s"]),
        "by_function": profile.by_function,
    }


# ----------------------------------------------------------------------------- cProfile


def analyze_profile(path: str, top: int) -> None:
    """Functions of the libraries of interest by cumulative time outside JAX's compile pipeline."""
    import pstats

    stats = pstats.Stats(path).stats  # key -> (cc, nc, tt, ct, callers)
    callees: dict = {}
    for fn, (_, _, _, _, callers) in stats.items():
        for caller, edge in callers.items():
            callees.setdefault(caller, {})[fn] = edge[3]
    sinks = {
        "jax": [
            ("partial_eval.py", "trace_to_jaxpr"),
            ("mlir.py", "lower_jaxpr_to_module"),
            ("compiler.py", "compile_or_get_cached"),
        ]
    }

    def sink_kind(fn) -> bool:
        file, _, name = fn
        return any(file.endswith(f) and name == n for f, n in sinks["jax"])

    memo: dict = {}

    def below(fn, active: set) -> float:
        """Estimated seconds of ``fn``'s cumulative time spent in the sinks."""
        if fn in memo:
            return memo[fn]
        ct = stats[fn][3]
        if sink_kind(fn):
            memo[fn] = ct
            return ct
        if fn in active:
            return 0.0
        active.add(fn)
        total = 0.0
        for callee, edge_ct in callees.get(fn, {}).items():
            callee_ct = stats[callee][3]
            if callee_ct <= 0 or callee in active:
                continue
            total += min(edge_ct / callee_ct, 1.0) * below(callee, active)
        active.discard(fn)
        memo[fn] = min(total, ct)
        return memo[fn]

    sys.setrecursionlimit(100000)
    marks = (
        "/app/",
        "/inference/",
        "/models/",
        "attnbayes",
        "numpyro",
        "arviz",
        "xarray",
        "matplotlib",
    )

    def ours(fn) -> bool:
        file = fn[0]
        return any(m in file for m in marks) and "benchmarks/profile_report" not in file

    rows = []
    for fn, (_, nc, tt, ct, _) in stats.items():
        if ours(fn):
            jax_s = below(fn, set())
            rows.append((ct - jax_s, ct, jax_s, tt, nc, fn))
    total_ct = max(v[3] for v in stats.values())
    print(f"== {path}: profile total {total_ct:.1f} s (cProfile overhead included)")
    print(f"\n== top {top} cumulative, outside JAX trace/lower/compile (estimated)")
    print(f"   {'net s':>7} {'cum s':>7} {'jax s':>7} {'self s':>7} {'calls':>7}  function")
    for net, ct, jax_s, tt, nc, fn in sorted(rows, key=lambda r: -r[0])[:top]:
        print(f"   {net:7.1f} {ct:7.1f} {jax_s:7.1f} {tt:7.1f} {nc:7d}  {_where(fn)}")
    print(f"\n== top {top} by self time (same libraries)")
    for _, ct, _, tt, nc, fn in sorted(rows, key=lambda r: -r[3])[:top]:
        print(f"   {tt:7.1f} self {ct:7.1f} cum {nc:7d} calls  {_where(fn)}")


def _where(fn) -> str:
    file, line, name = fn
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
    for mark in ("site-packages/", repo):
        if mark in file:
            file = file.split(mark, 1)[1]
    return f"{name} ({file}:{line})"


# ----------------------------------------------------------------------------- main


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cache-dir", help="JAX persistent compilation cache folder")
    parser.add_argument(
        "--out", default=None, help="report parent folder (default: a new temporary folder)"
    )
    parser.add_argument("--name", default="attnbayes", help="report folder name inside --out")
    parser.add_argument("--quick", action="store_true", help="the quick report (small sizes)")
    parser.add_argument("--json", help="also write the tables as JSON to this file")
    parser.add_argument("--label", default=None, help="a label for the tables (cold/warm)")
    parser.add_argument(
        "--hotspots",
        action="store_true",
        help="also time selected functions (ArviZ, DataTree building, sampling...) inclusively",
    )
    parser.add_argument(
        "--all-sections",
        action="store_true",
        help="also run optional sections after section 8 (left out by default)",
    )
    parser.add_argument("--analyze-profile", metavar="FILE.prof", help="read a cProfile output")
    parser.add_argument("--top", type=int, default=25)
    args = parser.parse_args(argv)
    if args.analyze_profile:
        analyze_profile(args.analyze_profile, args.top)
        return 0
    if not args.cache_dir:
        parser.error("--cache-dir is required (an empty folder for a cold run)")

    cache_dir = os.path.abspath(args.cache_dir)
    os.environ["ATTNBAYES_CACHE_DIR"] = cache_dir
    flag = "--xla_force_host_platform_device_count"
    if flag not in os.environ.get("XLA_FLAGS", ""):
        os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} {flag}=2".strip()
    had_entries = os.path.isdir(cache_dir) and any(
        not n.startswith(".") for n in os.listdir(cache_dir)
    )
    import matplotlib

    matplotlib.use("Agg")
    import jax

    jax.config.update("jax_enable_x64", True)
    from attnbayes.app.cache import enable_compilation_cache

    if enable_compilation_cache(cache_dir) is None:
        print(f"cannot use {cache_dir} as the compilation cache", file=sys.stderr)
        return 1
    profile = Profile()
    instrument(profile)
    from attnbayes.app.report import write_report

    timings = instrument_hotspots(profile) if args.hotspots else None

    label = args.label or ("warm cache" if had_entries else "cold cache")
    label += f" ({'quick' if args.quick else 'full'} sizes, {os.cpu_count()} CPUs)"
    setup_s = time.perf_counter() - STARTED

    def progress(message: str) -> None:
        print(f"[{time.perf_counter() - STARTED:7.1f}s] {message}", file=sys.stderr, flush=True)
        profile.new_step(message)

    profile.new_step("(start of write_report)")
    profile.steps.pop(0)  # the placeholder made before write_report
    # sections 1-8 (the report as profiled for issue 17); a later optional section (e.g.
    # ``calibration``) is left out unless --all-sections
    import inspect

    optional = {}
    if not args.all_sections:
        for name in ("calibration",):
            if name in inspect.signature(write_report).parameters:
                optional[name] = None
                label += f", without {name}"
    failed = None
    try:
        # one worker: the parts run here, in order, where the timers see them
        out = args.out or tempfile.mkdtemp(prefix="attnbayes-profile-")
        path = write_report(
            out, name=args.name, quick=args.quick, progress=progress, workers=1, **optional
        )
        print(f"report: {path}; cache: {cache_dir}", file=sys.stderr)
    except Exception as err:  # the tables up to the failure are still printed
        failed = err
        profile.new_step(f"FAILED: {type(err).__name__}: {err}"[:200])
        label += ", FAILED"
    profile.close()
    result = print_tables(profile, setup_s, label)
    if timings is not None:
        print_hotspots(timings, result["total"]["wall"])
        result["hotspots"] = {k: v[:2] for k, v in timings.items()}
    entries = sum(1 for n in os.listdir(cache_dir) if not n.startswith("."))
    print(f"   cache folder {cache_dir}: {entries} entries after the run")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump(result, fh, indent=1, default=str)
    if failed is not None:
        raise failed
    return 0


if __name__ == "__main__":
    sys.exit(main())
