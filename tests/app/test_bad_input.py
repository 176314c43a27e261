"""The bad-input catalogue of the ``attnbayes`` commands: every fault a user met, as a test.

Each case runs ``attnbayes.app.cli.main`` in-process (one real Ctrl-C in a subprocess) and asserts
the exit status, a one-line message naming the option or quantity, and that nothing was
written or deleted. The library's own catalogues are beside it: ``test_validation.py`` and
``test_bad_input_{attention,deconvolution,switching}.py``.

Exit statuses (README): 0 success; 2 bad usage or input, refused before any computation;
1 a failure while computing or writing; 130 Ctrl-C; 143 SIGTERM.
"""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import attnbayes.app.report
import attnbayes.app.report.runners
import attnbayes.inference.deconvolution.comparison
import attnbayes.inference.switching.comparison
import attnbayes.inference.switching.filters
import attnbayes.inference.switching.gibbs
import attnbayes.inference.switching.particle
from attnbayes.app import outputs
from attnbayes.app.cli import main
from attnbayes.app.user_data import InputError, params_document
from attnbayes.inference.deconvolution.comparison import (
    DeconvolutionComparison,
    compare_deconvolution,
)
from attnbayes.models.switching import get_scenario

ROOT = Path(__file__).resolve().parents[2]


# ----------------------------------------------------------------------------- helpers


def run(argv, capsys):
    """main(argv) -> (exit status, stdout, stderr); argparse exits count as statuses."""
    try:
        code = main([str(a) for a in argv])
    except SystemExit as exit_info:
        code = exit_info.code
    out, err = capsys.readouterr()
    return code, out, err


def listing(folder: Path):
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*")) if folder.exists() else []


def error_lines(err: str) -> list[str]:
    """stderr without the progress lines ('[   1.2s] ...')."""
    return [line for line in err.splitlines() if line and not line.startswith("[")]


def one_line(err: str) -> str:
    lines = error_lines(err)
    assert len(lines) == 1, err
    assert "Traceback" not in err
    return lines[0]


@pytest.fixture(scope="module")
def dec_csv(tmp_path_factory):
    rng = np.random.default_rng(5)
    x = rng.choice([-2.0, 0.0, 3.0], size=60, p=[0.5, 0.3, 0.2]) + rng.normal(size=60)
    path = tmp_path_factory.mktemp("data") / "scores.csv"
    pd.DataFrame({"score": x}).to_csv(path, index=False)
    return path


@pytest.fixture(scope="module")
def track_csv(tmp_path_factory):
    rng = np.random.default_rng(8)
    y = np.cumsum(rng.normal(0.0, 10.0, (30, 2)), axis=0)
    path = tmp_path_factory.mktemp("data") / "track.csv"
    pd.DataFrame(y, columns=["px", "py"]).to_csv(path, index=False)
    return path


@pytest.fixture
def out(tmp_path):
    """An output folder that already holds a user's file (which must survive every case)."""
    folder = tmp_path / "out"
    folder.mkdir()
    (folder / "keep.txt").write_text("a user's file")
    return folder


class Started(Exception):
    """Raised by a stub where computation would start."""


@pytest.fixture
def no_computation(refuse_methods, monkeypatch):
    """Any start of a method or of the report's simulations fails the test."""
    refuse = refuse_methods("computation started on input that should have been refused")
    monkeypatch.setattr(attnbayes.app.report.runners, "run_scenario", refuse)


def _raiser(exc):
    def stub(*args, **kwargs):
        raise exc

    return stub


def _explosive_params(path: Path) -> Path:
    """The maneuvering target with every dynamics matrix scaled by 10: valid, explosive."""
    params = get_scenario("maneuvering-target")
    params = params._replace(dynamics_matrices=10.0 * np.asarray(params.dynamics_matrices))
    path.write_text(json.dumps(params_document(params)))
    return path


# ----------------------------------------------------------------------------- 1. data loss

COMMANDS = {
    "report": lambda data: ["report", "--quick"],
    "deconvolve": lambda data: ["deconvolve", data["dec"], "--sigma", 1],
    "filter": lambda data: ["filter", data["track"], "--scenario", "maneuvering-target"],
}


@pytest.fixture
def data(dec_csv, track_csv):
    return {"dec": dec_csv, "track": track_csv}


@pytest.mark.parametrize("command", list(COMMANDS))
def test_no_command_replaces_a_folder_it_did_not_write(command, data, out, capsys, no_computation):
    (out / "mine").mkdir()
    (out / "mine" / "thesis.tex").write_text("precious")
    (out / "mine" / "index.html").write_text("<title>my page</title>")
    argv = [*COMMANDS[command](data), "--out", out, "--name", "mine"]
    code, stdout, err = run(argv, capsys)
    assert code == 2 and stdout == ""
    line = one_line(err)
    assert (
        line.startswith("attnbayes: error: --out/--name: ") and "not written by attnbayes" in line
    )
    assert listing(out) == ["keep.txt", "mine", "mine/index.html", "mine/thesis.tex"]


def test_the_guard_is_one_function_for_all_three_commands(out, monkeypatch, data, capsys):
    calls = []
    real = outputs.check_target

    def spy(out_dir, name):
        calls.append(name)
        return real(out_dir, name)

    monkeypatch.setattr(outputs, "check_target", spy)
    monkeypatch.setattr(attnbayes.app.report.runners, "run_scenario", _raiser(Started("report")))
    monkeypatch.setattr(
        attnbayes.inference.deconvolution.comparison,
        "compare_deconvolution",
        _raiser(Started("dec")),
    )
    monkeypatch.setattr(
        attnbayes.inference.switching.filters, "imm_filter", _raiser(Started("filter"))
    )
    for command, argv in COMMANDS.items():
        code, _, err = run([*argv(data), "--out", out, "--name", f"n-{command}"], capsys)
        assert code == 1 and "Started" in err  # the guard passed, then computation began
    assert calls == ["n-report", "n-deconvolve", "n-filter"]


def test_folders_of_ours_are_recognised(tmp_path):
    for command in ("report", "deconvolve", "filter"):
        folder = tmp_path / command
        folder.mkdir()
        (folder / "run.json").write_text(outputs.manifest_json(command))
        assert outputs.is_ours(folder)
        assert outputs.check_target(tmp_path, command) == folder
    legacy = tmp_path / "legacy"  # a report written before reports carried run.json
    legacy.mkdir()
    (legacy / "index.html").write_text("<!DOCTYPE html><html><head><title>attnbayes report")
    (legacy / "results.csv").write_text("section,scenario,method,metric,value\n")
    assert outputs.is_ours(legacy)
    older = tmp_path / "older"  # the first report's title and columns
    older.mkdir()
    (older / "index.html").write_text("<html><head><title>attnbayes: deconvolution report")
    (older / "results.csv").write_text("scenario,method,metric,value\n")
    assert outputs.is_ours(older)
    for name, page, results, manifest in (
        ("no-results", "<title>attnbayes report", None, None),
        ("other-page", "<title>my page", "section,scenario,method,metric,value\n", None),
        ("foreign-json", None, None, '{"tool": "other"}'),
        ("broken-json", None, None, "{"),
        ("json-list", None, None, "[1, 2]"),
    ):
        folder = tmp_path / name
        folder.mkdir()
        for file, text in (("index.html", page), ("results.csv", results), ("run.json", manifest)):
            if text is not None:
                (folder / file).write_text(text)
        assert not outputs.is_ours(folder), name
        with pytest.raises(InputError, match="^--out/--name: .* not written by attnbayes"):
            outputs.check_target(tmp_path, name)
    (tmp_path / "a-file").write_text("x")
    with pytest.raises(InputError, match="not written by attnbayes"):
        outputs.check_target(tmp_path, "a-file")


def test_the_report_replaces_a_legacy_report_after_the_guard(out, capsys, monkeypatch):
    legacy = out / "attnbayes"
    legacy.mkdir()
    (legacy / "index.html").write_text("<title>attnbayes report</title>")
    (legacy / "results.csv").write_text("section,scenario,method,metric,value\n")
    monkeypatch.setattr(
        attnbayes.app.report.runners, "run_scenario", _raiser(Started("simulating"))
    )
    code, _, err = run(["report", "--quick", "--out", out], capsys)
    assert code == 1 and "Started: simulating" in one_line(err)  # accepted, then computing
    assert listing(out) == [
        "attnbayes",
        "attnbayes/index.html",
        "attnbayes/results.csv",
        "keep.txt",
    ]


@pytest.mark.parametrize("name", ["..", ".", ".hidden", "a/b", ""])
def test_report_refuses_names_that_are_not_plain(name, out, capsys, no_computation):
    code, _, err = run(["report", "--out", out, "--name", name], capsys)
    assert code == 2 and one_line(err).startswith("attnbayes: error: name: ")
    assert listing(out) == ["keep.txt"]


# ----------------------------------------------------------------------------- 2. non-finite


def test_deconvolve_refuses_values_whose_squares_overflow(tmp_path, out, capsys, no_computation):
    path = tmp_path / "huge.csv"
    path.write_text("x\n0\n1\n1e160\n")  # (1e160 / sigma)^2 overflows float64
    code, _, err = run(["deconvolve", path, "--sigma", 1, "--out", out], capsys)
    assert code == 2
    line = one_line(err)  # the cell, not the library's argument name "x"
    assert line.startswith(f'attnbayes: error: {path} line 4, column "x": 1e+160 is too far ')
    assert "the squared distances overflow" in line
    assert listing(out) == ["keep.txt"]


def _nan_comparison(key, x, sigma, *, methods, **kwargs):
    """The real comparison with one z_hat made NaN (a library result gone bad)."""
    result = compare_deconvolution(key, x, sigma, methods=methods, **kwargs)
    fit = result.fits[methods[0]]
    z_hat = np.array(fit.z_hat, dtype=np.float64)
    z_hat[7] = np.nan
    return DeconvolutionComparison(result.table, {methods[0]: fit._replace(z_hat=z_hat)})


def test_deconvolve_publishes_nothing_that_is_not_finite(dec_csv, out, capsys, monkeypatch):
    monkeypatch.setattr(
        attnbayes.inference.deconvolution.comparison, "compare_deconvolution", _nan_comparison
    )
    code, stdout, err = run(["deconvolve", dec_csv, "--sigma", 1, "--out", out], capsys)
    assert code == 1 and stdout == ""
    assert one_line(err) == (
        "attnbayes: error: the deconvolve run failed: z_hat: 1 non-finite value(s), "
        "the first at row 8"
    )
    assert listing(out) == ["keep.txt"]


def test_finite_output_checks_name_the_quantity():
    outputs.check_finite_output("z", np.zeros((3, 2)))
    with pytest.raises(
        outputs.NonFiniteResult, match=r"^z: 2 non-finite value\(s\), the first at row 2$"
    ):
        outputs.check_finite_output("z", [[0.0, 1.0], [np.inf, 0.0], [np.nan, 1.0]])
    with pytest.raises(outputs.NonFiniteResult, match=r"^w: 1 non-finite value\(s\)$"):
        outputs.check_finite_output("w", np.nan)
    table = pd.DataFrame({"method": ["a", "b"], "metric": ["m", "n"], "value": [1.0, np.inf]})
    with pytest.raises(outputs.NonFiniteResult, match=r"^t: 1 non-finite .* method b, metric n"):
        outputs.check_finite_table("t", table)


def test_report_fails_on_a_non_finite_table(out, capsys, monkeypatch):
    """A NaN in a comparison table stops the report (exit 1) instead of vanishing from it."""
    table = pd.DataFrame(
        {"method": ["nuts", "nuts"], "metric": ["mse_z", "heldout_lpd"], "value": [0.5, np.nan]}
    )
    bad = (DeconvolutionComparison(table, {}), np.zeros(3), np.zeros(3), None, 1.0)
    monkeypatch.setattr(attnbayes.app.report.runners, "run_scenario", lambda *a, **k: bad)
    code, _, err = run(["report", "--quick", "--out", out], capsys)
    assert code == 1
    assert one_line(err) == (
        "attnbayes: error: the report run failed: three-atoms: compare_deconvolution: "
        "1 non-finite value(s), the first at method nuts, metric heldout_lpd (nan)"
    )
    assert listing(out) == ["keep.txt"]


def test_filter_on_explosive_dynamics_names_the_step_and_the_parameters(tmp_path, out, capsys):
    """Two observed steps, then 200 without observations: the covariances grow like 10^(2t)
    and overflow float64 (1.8e308) from step 155 on."""
    params = _explosive_params(tmp_path / "explosive.json")
    track = tmp_path / "lost.csv"
    track.write_text("px,py\n0,0\n1,1\n" + "NA,NA\n" * 200)
    code, stdout, err = run(["filter", track, "--params", params, "--out", out], capsys)
    assert code == 1 and stdout == ""
    line = one_line(err)
    assert line.startswith("attnbayes: error: the filter run failed: imm: ")
    assert "from step 15" in line and "dynamics_matrices" in line
    assert listing(out) == ["keep.txt"]


# ----------------------------------------------------------------------------- 3. sampler sizes

SIZE_CASES = {
    "one-draw": (["--draws", 1], "--draws/--chains: ", "at least 4 draws per chain"),
    "three-draws": (["--draws", 3], "--draws/--chains: ", "at least 4 draws per chain"),
    "one-chain": (["--chains", 1], "--draws/--chains: ", "at least 2 chains"),
    "loo-too-few": (["--draws", 12, "--chains", 2], "--draws/--chains: ", "--draws 13 or more"),
}


@pytest.mark.parametrize("method", ["nuts", "gibbs"])
@pytest.mark.parametrize("case", list(SIZE_CASES))
def test_deconvolve_refuses_sampler_sizes_its_diagnostics_cannot_use(
    case, method, dec_csv, out, capsys, no_computation
):
    extra, prefix, message = SIZE_CASES[case]
    argv = ["deconvolve", dec_csv, "--sigma", 1, "--method", method, *extra, "--out", out]
    code, _, err = run(argv, capsys)
    assert code == 2
    line = one_line(err)
    assert line.startswith(f"attnbayes: error: {prefix}") and message in line
    assert listing(out) == ["keep.txt"]


def test_filter_gibbs_refuses_too_few_draws(track_csv, out, capsys, no_computation):
    argv = ["filter", track_csv, "--scenario", "maneuvering-target", "--method", "gibbs"]
    code, _, err = run([*argv, "--draws", 2, "--out", out], capsys)
    assert code == 2 and "--draws/--chains: " in one_line(err)
    code, _, err = run([*argv, "--chains", 1, "--out", out], capsys)
    assert code == 2 and "at least 2 chains" in one_line(err)
    code, _, err = run([*argv, "--draws", 12, "--chains", 2, "--out", out], capsys)
    assert code == 1 and "computation started" in err  # no LOO here: 2 x 12 draws pass


# ----------------------------------------------------------------------------- 7. interrupts


@pytest.mark.parametrize("command", ["deconvolve", "filter", "report"])
def test_ctrl_c_prints_one_line_exits_130_and_leaves_nothing(
    command, data, out, capsys, monkeypatch
):
    stop = _raiser(KeyboardInterrupt())
    monkeypatch.setattr(attnbayes.inference.deconvolution.comparison, "compare_deconvolution", stop)
    monkeypatch.setattr(attnbayes.inference.switching.filters, "imm_filter", stop)
    monkeypatch.setattr(attnbayes.app.report.runners, "run_scenario", stop)
    code, stdout, err = run([*COMMANDS[command](data), "--out", out], capsys)
    assert (code, stdout) == (130, "")
    assert one_line(err) == "attnbayes: interrupted; nothing written"
    assert listing(out) == ["keep.txt"]


def test_debug_shows_the_traceback(dec_csv, out, capsys, monkeypatch):
    monkeypatch.setattr(
        attnbayes.inference.deconvolution.comparison,
        "compare_deconvolution",
        _raiser(TypeError("unexpected thing")),
    )
    argv = ["deconvolve", dec_csv, "--sigma", 1, "--out", out]
    code, _, err = run(argv, capsys)
    line = one_line(err)
    assert code == 1 and "internal error in deconvolve (TypeError: unexpected thing)" in line
    assert "--debug" in line
    code, _, err = run([*argv, "--debug"], capsys)
    assert code == 1 and "Traceback" in err and "unexpected thing" in err
    monkeypatch.setenv("ATTNBAYES_DEBUG", "1")
    code, _, err = run(argv, capsys)
    assert code == 1 and "Traceback" in err
    assert listing(out) == ["keep.txt"]


def test_a_real_sigint_mid_run_exits_130_and_leaves_nothing(dec_csv, tmp_path):
    out = tmp_path / "out"
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    # An ignored SIGINT is inherited (a background job of a non-interactive shell, as CI may run
    # the tests, ignores it), and Python then installs no KeyboardInterrupt handler: give the
    # child the handler a terminal's Python has.
    start = (
        "import runpy, signal; signal.signal(signal.SIGINT, signal.default_int_handler); "
        "runpy.run_module('attnbayes.app.cli', run_name='__main__', alter_sys=True)"
    )
    cmd = [sys.executable, "-c", start, "deconvolve", str(dec_csv), "--sigma", "1"]
    cmd += ["--method", "gibbs", "--draws", "100000", "--out", str(out)]
    proc = subprocess.Popen(cmd, cwd=ROOT, stderr=subprocess.PIPE, text=True, env=env)
    seen = []
    for line in proc.stderr:  # wait until the sampler is running
        seen.append(line)
        if "gibbs: fitting" in line:
            break
    time.sleep(1.0)
    proc.send_signal(signal.SIGINT)
    rest = proc.stderr.read()
    assert proc.wait(timeout=60) == 130, "".join(seen) + rest
    assert one_line(rest) == "attnbayes: interrupted; nothing written"
    assert listing(out) == []  # not even a hidden temporary folder


# ----------------------------------------------------------------------------- 9. late failures


def test_an_unwritable_out_is_found_before_computing(
    dec_csv, tmp_path, capsys, monkeypatch, no_computation
):
    def denied(*args, **kwargs):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(outputs.tempfile, "mkdtemp", denied)
    code, _, err = run(["deconvolve", dec_csv, "--sigma", 1, "--out", tmp_path / "ro"], capsys)
    assert code == 2
    assert (
        one_line(err) == f"attnbayes: error: --out: cannot write in {tmp_path}: Permission denied"
    )
    (tmp_path / "file").write_text("x")
    code, _, err = run(["deconvolve", dec_csv, "--sigma", 1, "--out", tmp_path / "file"], capsys)
    assert code == 2 and "--out: " in one_line(err) and "is not a folder" in err


def test_em_that_would_not_fit_in_memory_is_refused_with_the_alternatives(
    dec_csv, out, capsys, monkeypatch, no_computation
):
    monkeypatch.setenv("ATTNBAYES_MEMORY_LIMIT", "20000")
    code, _, err = run(["deconvolve", dec_csv, "--sigma", 1, "--out", out], capsys)
    assert code == 2
    line = one_line(err)
    assert line.startswith("attnbayes: error: --method em: the dense E-step on N = 60 rows")
    assert "--method npmle" in line and "--block-size 1024" in line and "s per EM step" in line
    code, _, err = run(
        ["deconvolve", dec_csv, "--sigma", 1, "--block-size", 16, "--out", out], capsys
    )
    assert code == 2 and one_line(err).startswith("attnbayes: error: --block-size: ")
    monkeypatch.setenv("ATTNBAYES_MEMORY_LIMIT", "lots")
    code, _, err = run(["deconvolve", dec_csv, "--sigma", 1, "--out", out], capsys)
    assert code == 2 and "ATTNBAYES_MEMORY_LIMIT: expected a number of bytes" in one_line(err)
    assert listing(out) == ["keep.txt"]


def test_memory_refusal_at_the_size_of_the_report(capsys):
    """40,000 rows (the size that died allocating 38 GB) under a 24 GB limit: refused."""
    from attnbayes.app.deconvolve import check_em_memory

    with pytest.raises(InputError, match=r"^--method em: .* N = 40000 rows .* needs about"):
        check_em_memory((40_000, 1), None, memory_limit=24 * 2**30)
    check_em_memory((40_000, 1), 1024, memory_limit=24 * 2**30)  # streamed: fits


def test_block_size_streams_em_to_the_dense_answer(dec_csv, tmp_path, capsys):
    dense, streamed = tmp_path / "dense", tmp_path / "streamed"
    assert run(["deconvolve", dec_csv, "--sigma", 1, "--out", dense], capsys)[0] == 0
    argv = ["deconvolve", dec_csv, "--sigma", 1, "--block-size", 16, "--out", streamed]
    assert run(argv, capsys)[0] == 0
    name = "scores-deconvolve-em"
    a = pd.read_csv(dense / name / "z_hat.csv")
    b = pd.read_csv(streamed / name / "z_hat.csv")
    np.testing.assert_allclose(b.to_numpy(), a.to_numpy(), rtol=1e-9, atol=1e-9)
    assert json.loads((streamed / name / "run.json").read_text())["block_size"] == 16


def test_stale_temporaries_of_killed_runs_are_removed_and_live_ones_kept(tmp_path):
    dead = 2**22 + 12345  # above the default pid_max: no such process
    while outputs._process_alive(dead):
        dead += 1
    old = time.time() - 2 * outputs.STALE_AFTER_S
    entries = {
        f".report.tmp-{dead}-abc": (old, True),  # killed long ago: removed
        f".report.old-{dead}": (old, True),
        f".report.tmp-{os.getpid()}-abc": (old, False),  # a live run (this one): kept
        f".report.tmp-{dead}-new": (time.time(), False),  # recent: kept
        ".notes": (old, False),  # not ours
        f"report.tmp-{dead}-abc": (old, False),  # not hidden: not ours
    }
    for name, (mtime, _) in entries.items():
        (tmp_path / name).mkdir()
        (tmp_path / name / "f").write_text("x")
        os.utime(tmp_path / name, (mtime, mtime))
    removed = outputs.remove_stale_temporaries(tmp_path)
    assert sorted(p.name for p in removed) == sorted(n for n, (_, gone) in entries.items() if gone)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        n for n, (_, gone) in entries.items() if not gone
    )


# ----------------------------------------------------------------------------- exit statuses


def _ok_report(out_dir, *, name="attnbayes", **kwargs):
    target = outputs.prepare_target(out_dir, name)
    with outputs.assembling(target) as tmp:
        (tmp / "index.html").write_text("<title>attnbayes report</title>")
        (tmp / "run.json").write_text(outputs.manifest_json("report"))
    return target / "index.html"


def _disk_full(tmp, target):
    raise OSError(28, "No space left on device")


EXIT_TABLE = [
    # (command, situation, patches {module: {name: stub}}, extra argv, exit status)
    ("report", "success", {attnbayes.app.report: {"write_report": _ok_report}}, [], 0),
    ("report", "bad input", {}, ["--name", "a/b"], 2),
    (
        "report",
        "fails computing",
        {attnbayes.app.report.runners: {"run_scenario": _raiser(ValueError("x"))}},
        [],
        1,
    ),
    (
        "report",
        "interrupted",
        {attnbayes.app.report.runners: {"run_scenario": _raiser(KeyboardInterrupt())}},
        [],
        130,
    ),
    ("deconvolve", "success", {}, [], 0),
    ("deconvolve", "bad input", {}, ["--method", "nuts", "--draws", 2], 2),
    (
        "deconvolve",
        "fails computing",
        {
            attnbayes.inference.deconvolution.comparison: {
                "compare_deconvolution": _raiser(ValueError("x"))
            }
        },
        [],
        1,
    ),
    ("deconvolve", "fails writing", {outputs: {"publish_folder": _disk_full}}, [], 1),
    (
        "deconvolve",
        "interrupted",
        {
            attnbayes.inference.deconvolution.comparison: {
                "compare_deconvolution": _raiser(KeyboardInterrupt())
            }
        },
        [],
        130,
    ),
    ("filter", "success", {}, [], 0),
    ("filter", "bad input", {}, ["--particles", 5], 2),
    (
        "filter",
        "fails computing",
        {attnbayes.inference.switching.filters: {"imm_filter": _raiser(FloatingPointError("x"))}},
        [],
        1,
    ),
    ("filter", "fails writing", {outputs: {"publish_folder": _disk_full}}, [], 1),
    (
        "filter",
        "interrupted",
        {attnbayes.inference.switching.filters: {"imm_filter": _raiser(KeyboardInterrupt())}},
        [],
        130,
    ),
]


@pytest.mark.parametrize(
    "command, situation, patches, extra, status",
    EXIT_TABLE,
    ids=[f"{c}-{s}" for c, s, *_ in EXIT_TABLE],
)
def test_exit_statuses(command, situation, patches, extra, status, data, out, capsys, monkeypatch):
    for module, stubs in patches.items():
        for name, stub in stubs.items():
            monkeypatch.setattr(module, name, stub)
    code, stdout, err = run([*COMMANDS[command](data), *extra, "--out", out], capsys)
    assert code == status, err
    if status == 0:
        assert stdout.strip().endswith("index.html") and Path(stdout.strip()).is_file()
        assert error_lines(err) == []
    else:
        assert stdout == ""
        one_line(err)
        assert listing(out) == ["keep.txt"]


def test_sigterm_exits_143_and_leaves_nothing(dec_csv, out, capsys, monkeypatch):
    def terminate(*args, **kwargs):
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(5)  # the handler raises before this ends
        raise AssertionError("SIGTERM was not handled")

    monkeypatch.setattr(
        attnbayes.inference.deconvolution.comparison, "compare_deconvolution", terminate
    )
    code, _, err = run(["deconvolve", dec_csv, "--sigma", 1, "--out", out], capsys)
    assert code == 143 and one_line(err) == "attnbayes: terminated; nothing written"
    assert listing(out) == ["keep.txt"]
    assert signal.getsignal(signal.SIGTERM) is not None


def test_a_signal_dropped_in_a_gc_callback_still_stops_the_run(dec_csv, out, capsys, monkeypatch):
    """A signal handler that raises inside a garbage-collector callback (JAX registers one) has
    its exception dropped by Python and reported as "Exception ignored". The command remembers
    the signal, raises it at its next progress step (before writing) and reports nothing else."""
    import gc

    real = attnbayes.inference.deconvolution.comparison.compare_deconvolution

    def signal_inside_gc(*args, **kwargs):
        def callback(phase, info):
            if phase == "start":
                gc.callbacks.remove(callback)
                signal.getsignal(signal.SIGTERM)(signal.SIGTERM, None)

        gc.callbacks.append(callback)
        gc.collect()
        assert callback not in gc.callbacks  # the handler ran, and its exception was dropped
        return real(*args, **kwargs)

    monkeypatch.setattr(
        attnbayes.inference.deconvolution.comparison, "compare_deconvolution", signal_inside_gc
    )
    code, _, err = run(["deconvolve", dec_csv, "--sigma", 1, "--out", out], capsys)
    assert code == 143 and one_line(err) == "attnbayes: terminated; nothing written"
    assert listing(out) == ["keep.txt"]
