"""The report's summary: from the rows of results.csv, who wins each measure by how much (a
NaN never, a method whose diagnostics failed only with the failure named), where the point
methods agree with full Bayes, whose intervals under-cover, every number linked to a section
the report writes. No JAX: the rows are written here."""

import io
import math
import re
from pathlib import Path

import pandas as pd
import pytest

from attnbayes.app import report
from attnbayes.app.report.summary import ANCHORS, summary_section

COLUMNS = ["section", "scenario", "method", "metric", "value"]


def frame(rows) -> pd.DataFrame:
    return pd.DataFrame(rows, columns=COLUMNS)


def methods_rows(scenario, metric, values):
    return [("methods", scenario, m, metric, v) for m, v in values.items()]


def row_of(page: str, measure: str) -> str:
    """The <tr> of the winners' table whose measure cell starts with ``measure``."""
    rows = [r for r in re.findall(r"<tr>.*?</tr>", page) if f"<td>{measure}" in r]
    assert len(rows) == 1, (measure, rows)
    return rows[0]


def item_of(page: str, start: str) -> str:
    items = [i for i in re.findall(r"<li>(.*?)</li>", page) if i.startswith(start)]
    assert len(items) == 1, (start, items)
    return items[0]


def cells(tr: str) -> list[str]:
    return re.findall(r"<t[hd]>(.*?)</t[hd]>", tr)


def table_rows(page: str) -> list[list[str]]:
    """The winners' table as rows of cells, each reading written on every row."""
    out, reading = [], None
    for tr in re.findall(r"<tr>.*?</tr>", page)[1:]:
        row = cells(tr)
        reading = row[0] or reading
        out.append([reading, *row[1:]])
    return out


LINK = '<a href="#methods-three-atoms">{}</a>'


def three_atoms(**overrides):
    """A deconvolution scenario whose winners are known: NUTS lowest MSE (0.400, Gibbs 0.420
    runner-up: 1.05x), Gibbs best held-out density, James-Stein fastest."""
    values = {
        "mse_z": {
            "attention-em": 0.43,
            "npmle": 0.52,
            "nuts": 0.40,
            "gibbs": 0.42,
            "james-stein": 0.9,
            "oracle": 0.35,
        },
        "heldout_lpd": {"attention-em": -1.83, "npmle": -1.84, "nuts": -1.81, "gibbs": -1.80},
        "wall_time_s": {"attention-em": 2.0, "npmle": 1.5, "nuts": 30.0, "james-stein": 0.01},
        "coverage_90": {"attention-em": 0.80, "npmle": 0.89, "nuts": 0.91, "oracle": 0.5},
        "max_rhat_invariant": {"nuts": 1.002, "gibbs": 1.004},
        "divergences": {"nuts": 0.0, "gibbs": 0.0},
        "converged": {"attention-em": 1.0},
        "iterations": {"attention-em": 120.0},
    }
    for metric, changes in overrides.items():
        values[metric] = {**values[metric], **changes}
    rows = [("data", "three-atoms", "data", "num_points", 200.0)]
    for metric, by_method in values.items():
        rows += methods_rows("three-atoms", metric, by_method)
    return rows


def test_the_winner_its_number_runner_up_margin_and_link():
    page = summary_section(frame(three_atoms()))
    assert page.startswith('<h2 id="summary">Summary</h2>')
    best, runner, margin, note = cells(row_of(page, "MSE of z"))[2:]
    assert best == "nuts " + LINK.format("0.400")
    assert runner == "gibbs " + LINK.format("0.420")
    assert margin == "1.05&times;"
    assert note == "reference: oracle " + LINK.format("0.350")  # knows nu: never the winner
    best, runner, margin, _ = cells(row_of(page, "held-out log predictive density"))[2:]
    assert (best, runner, margin) == (
        "gibbs " + LINK.format("-1.80"),
        "nuts " + LINK.format("-1.81"),
        "&Delta; 0.0100",
    )
    assert cells(row_of(page, "wall time"))[2] == "james-stein " + LINK.format("0.0100 s")
    # full Bayes against the point methods, within 10%
    agree = item_of(page, "three-atoms, MSE of z")
    assert "full Bayes nuts " + LINK.format("0.400") in agree
    assert "attention-em " + LINK.format("0.430") + " <b>agrees</b> (+7.5%)" in agree
    assert "npmle " + LINK.format("0.520") + " <b>differs</b> (+30.0%)" in agree
    # 90% intervals: se = sqrt(0.9 0.1 / 200) = 2.1%; EM's 80% is below 90% - 2 x 2.1%, the
    # NPMLE's 89% is not; the oracle is not checked
    under = item_of(page, "three-atoms, 1 of 3 intervals")
    assert "attention-em 90% " + LINK.format("80.0%") + " (se 2.1%)" in under
    assert "npmle" not in under and "oracle" not in under


def test_the_learned_stack_wins_or_loses_on_its_numbers_like_the_other_point_methods():
    """The learned stack is not a reference: with the lowest MSE it wins (the margin to NUTS),
    it is compared with full Bayes like attention-EM and the NPMLE, and its intervals are
    checked; with a high MSE it neither wins nor agrees."""
    page = summary_section(
        frame(three_atoms(mse_z={"learned": 0.38}, coverage_90={"learned": 0.70}))
    )
    best, runner, margin, _ = cells(row_of(page, "MSE of z"))[2:]
    assert best == "learned " + LINK.format("0.380")
    assert runner == "nuts " + LINK.format("0.400") and margin == "1.05&times;"
    agree = item_of(page, "three-atoms, MSE of z")
    assert "learned " + LINK.format("0.380") + " <b>agrees</b> (-5.0%)" in agree
    under = item_of(page, "three-atoms, 2 of 4 intervals")
    assert "learned 90% " + LINK.format("70.0%") + " (se 2.1%)" in under
    page = summary_section(frame(three_atoms(mse_z={"learned": 0.60})))
    best, runner, _, _ = cells(row_of(page, "MSE of z"))[2:]
    assert best.startswith("nuts ") and runner.startswith("gibbs ")
    agree = item_of(page, "three-atoms, MSE of z")
    assert "learned " + LINK.format("0.600") + " <b>differs</b> (+50.0%)" in agree


def test_nan_never_wins_a_failure_is_named_and_a_missing_reading_is_skipped():
    rows = three_atoms(
        mse_z={"npmle": math.nan, "attention-em": 0.30},  # NaN would sort anywhere
        converged={"attention-em": 0.0},
        iterations={"attention-em": 500.0},
        max_rhat_invariant={"nuts": 1.05},
        heldout_lpd={"nuts": math.nan},
    )
    page = summary_section(frame(rows))
    best, runner, _, note = cells(row_of(page, "MSE of z"))[2:]
    # attention-EM has the lowest MSE but hit its iteration cap: named with it, and the best
    # method without a failure beside it (NUTS is second but its R-hat failed)
    assert best == "attention-em " + LINK.format("0.300") + " (not converged after 500 iterations)"
    assert runner == "nuts " + LINK.format("0.400") + " (R-hat 1.050 &gt; 1.01)"
    assert note.startswith("best without a failure: gibbs " + LINK.format("0.420"))
    assert "npmle" not in row_of(page, "MSE of z")
    assert "nan" not in page.lower()
    assert cells(row_of(page, "held-out log predictive density"))[2].startswith("gibbs ")
    # agreement is read against the full-Bayes method that did not fail
    assert "full Bayes gibbs " + LINK.format("0.420") in item_of(page, "three-atoms, MSE")
    # no switching, learning, learned, calibration or kernel-regression rows: left out
    for absent in ("Switching", "Learning", "Learned", "Kernel", "calibration", "SBC"):
        assert absent not in page


def test_every_other_reading_is_summarised_from_its_rows():
    rows = [
        ("data", "maneuvering-target", "data", "num_steps", 60.0),
        *methods_rows(
            "maneuvering-target",
            "state_rmse",
            {"imm": 9.6, "gpb2": 8.0, "kim-imm": 6.1, "gibbs": 5.0, "known-modes": 4.0},
        ),
        *methods_rows("maneuvering-target", "coverage_50", {"imm": 0.30, "gibbs": 0.50}),
        *[
            ("learning", "1-d-switching-ar", m, "rmse_transition_matrix", v)
            for m, v in {"mle": 0.05, "em": 0.06, "nuts": 0.04, "gibbs": 0.045}.items()
        ],
        ("learning", "1-d-switching-ar", "nuts", "divergences", 3.0),
        *[
            ("learned", "regret-dp", m, "regret", v)
            for m, v in {"learned": 0.01, "em": 0.02, "npmle": -0.001}.items()
        ],
        # NUTS-DP ran on 2 of the stack's tasks: the stack's MSE on them is 0.40 + 0.10
        ("learned", "nuts-dp", "learned", "mse", 0.3),
        ("learned", "nuts-dp", "nuts-dp", "mse", 0.49),
        ("learned", "nuts-dp", "nuts-dp", "oracle_mse", 0.40),
        ("learned", "nuts-dp", "nuts-dp", "learned_regret_same_tasks", 0.10),
        ("learned", "nuts-dp", "nuts-dp", "num_tasks", 2.0),
        ("learned", "coverage", "dp/learned@0.9", "coverage", 0.85),
        ("learned", "coverage", "dp/learned@0.9", "se", 0.01),
        ("learned", "coverage", "dp/npmle@0.5", "coverage", 0.49),
        ("learned", "coverage", "dp/npmle@0.5", "se", 0.02),
        ("calibration", "prior", "attention-em", "coverage_z_90", 0.6),
        ("calibration", "prior", "attention-em", "se_z_90", 0.03),
        ("calibration", "prior", "oracle", "coverage_z_90", 0.5),
        ("calibration", "prior", "oracle", "se_z_90", 0.03),
        ("calibration", "prior", "gibbs", "min_p_adjusted", 0.4),
        ("calibration", "prior", "gibbs (sigma x 1.3)", "min_p_adjusted", 1e-6),
        ("kernel-regression", "sine", "gaussian", "ise", 0.02),
        ("kernel-regression", "sine", "epanechnikov", "ise", 0.025),
    ]
    page = summary_section(frame(rows))
    link = '<a href="#{}">{}</a>'.format
    # filters compete with filters; smoothers and samplers with each other; known-modes is a
    # reference
    best, runner, margin, note = cells(row_of(page, "state RMSE, filters"))[2:]
    assert best == "gpb2 " + link("methods-maneuvering-target", "8.00")
    assert (runner.split()[0], margin) == ("imm", "1.20&times;")
    assert note == ""  # known-modes is a smoother's floor, not a filter's
    best, _, _, note = cells(row_of(page, "state RMSE, smoothers"))[2:]
    assert best == "gibbs " + link("methods-maneuvering-target", "5.00")
    assert note == "reference: known-modes " + link("methods-maneuvering-target", "4.00")
    assert "kim-imm " + link("methods-maneuvering-target", "6.10") + " <b>differs</b> (+22.0%)" in (
        item_of(page, "maneuvering-target, state RMSE")
    )
    # learning: NUTS wins with its divergences named; the point methods are measured against
    # the full-Bayes method without a failure, Gibbs
    best = cells(row_of(page, "RMSE of the transition matrix"))[2]
    assert best == "nuts " + link("learning-methods", "0.0400") + " (3 divergent transitions)"
    learning = item_of(page, "learning, RMSE of the transition matrix")
    assert "full Bayes gibbs " + link("learning-methods", "0.0450") in learning
    assert "mle " + link("learning-methods", "0.0500") + " <b>differs</b> (+11.1%)" in learning
    # a negative regret: the margin is a difference
    best, _, margin, _ = cells(row_of(page, "regret (MSE above the oracle), dp tasks"))[2:]
    assert best == "npmle " + link("learned-regret", "-0.00100") and margin == "&Delta; 0.0110"
    stack = item_of(page, "learned stack under its training prior, MSE of z on NUTS-DP's 2 tasks")
    assert "learned " + link("learned-nuts", "0.500") in stack and "<b>agrees</b> (+2.0%)" in stack
    # under-coverage: T = 60 steps, se of a 50% interval 6.5%; the section's own se elsewhere
    assert "imm 50% " + link("methods-maneuvering-target", "30.0%") + " (se 6.5%)" in page
    assert "learned dp 90% " + link("learned-coverage", "85.0%") + " (se 1.0%)" in page
    assert "npmle 50%" not in page
    calibration = item_of(page, "calibration over the prior")
    assert "attention-em z 90% " + link("calibration-table", "60.0%") in calibration
    assert "oracle" not in calibration
    sbc = item_of(page, "SBC ranks")
    assert "gibbs passes (smallest adjusted p " + link("calibration-table", "0.400") in sbc
    assert "gibbs (sigma x 1.3) (deliberately wrong) <b>fails</b>" in sbc
    assert cells(row_of(page, "integrated squared error"))[2] == "gaussian " + link(
        "kernel-regression", "0.0200"
    )


def test_ties_and_under_coverage_follow_their_stated_rules():
    """A winner within its standard error of the runner-up ties with it (regret 0.0262 against
    0.0276, se 0.0125); within 1% on an error too; coverage 1.5 se below nominal is not
    under-coverage, 2.5 se is."""
    rows = [
        ("learned", "regret-dp", "learned", "regret", 0.0262),
        ("learned", "regret-dp", "learned", "regret_se", 0.0125),
        ("learned", "regret-dp", "npmle", "regret", 0.0276),
        ("learned", "regret-dp", "npmle", "regret_se", 0.0110),
        *methods_rows("three-atoms", "mse_z", {"nuts": 0.400, "gibbs": 0.402}),
        ("data", "three-atoms", "data", "num_points", 400.0),
        # se of a 90% interval over 400 points: 1.5%
        *methods_rows("three-atoms", "coverage_90", {"nuts": 0.9 - 0.0225, "gibbs": 0.9 - 0.0375}),
    ]
    page = summary_section(frame(rows))
    margin = cells(row_of(page, "regret (MSE above the oracle), dp tasks"))[4]
    assert margin.startswith("tie (within its standard error)")
    assert cells(row_of(page, "MSE of z"))[4] == "tie (within 1%): 1.00&times;"
    under = item_of(page, "three-atoms, 1 of 2 intervals")
    assert "gibbs 90%" in under and "nuts" not in under


def test_text_is_escaped_and_bad_input_refused():
    rows = methods_rows("a<b>", "mse_z", {"<script>alert(1)</script>": 0.1, "nuts": 0.2})
    page = summary_section(frame(rows))
    assert "<script" not in page and "&lt;script&gt;" in page
    assert '<a href="#methods-a&lt;b&gt;">' in page
    assert "nothing to summarise" in summary_section(frame([]))
    with pytest.raises(ValueError, match="results: missing columns \\['value'\\]"):
        summary_section(frame([]).drop(columns="value"))
    with pytest.raises(ValueError, match="results: expected a pandas DataFrame"):
        summary_section(COLUMNS)


# Rows of a real results.csv (`make run`, seed 0, 2026-11-28), trimmed to some the summary reads
# and a few it must ignore, values to 4 significant digits.
REAL = """section,scenario,method,metric,value
data,three-atoms,data,num_points,1000.0
methods,three-atoms,attention-em,converged,0.0
methods,three-atoms,npmle,converged,1.0
methods,three-atoms,attention-em,coverage_90,0.846
methods,three-atoms,gibbs,coverage_90,0.97
methods,three-atoms,james-stein,coverage_90,0.896
methods,three-atoms,npmle,coverage_90,0.572
methods,three-atoms,nuts,coverage_90,0.968
methods,three-atoms,oracle,coverage_90,0.984
methods,three-atoms,gibbs,divergences,0.0
methods,three-atoms,nuts,divergences,0.0
methods,three-atoms,attention-em,heldout_lpd,-2.094
methods,three-atoms,gibbs,heldout_lpd,-2.093
methods,three-atoms,james-stein,heldout_lpd,-2.185
methods,three-atoms,npmle,heldout_lpd,-2.093
methods,three-atoms,nuts,heldout_lpd,-2.093
methods,three-atoms,oracle,heldout_lpd,-2.09
methods,three-atoms,attention-em,iterations,500.0
methods,three-atoms,gibbs,max_rhat_invariant,1.015
methods,three-atoms,nuts,max_rhat_invariant,1.007
methods,three-atoms,attention-em,mse_z,0.6415
methods,three-atoms,gibbs,mse_z,0.6395
methods,three-atoms,james-stein,mse_z,0.8298
methods,three-atoms,npmle,mse_z,0.6405
methods,three-atoms,nuts,mse_z,0.6401
methods,three-atoms,oracle,mse_z,0.6401
methods,three-atoms,attention-em,wall_time_s,1.797
methods,three-atoms,gibbs,wall_time_s,8.481
methods,three-atoms,james-stein,wall_time_s,0.0004493
methods,three-atoms,npmle,wall_time_s,1.505
methods,three-atoms,nuts,wall_time_s,7.795
methods,three-atoms,oracle,wall_time_s,0.001541
model-comparison,three-atoms,finite (K = 3),elpd,-2105.0
model-comparison,three-atoms,DP (12 sticks),elpd,-2106.0
data,maneuvering-target,data,num_steps,200.0
methods,maneuvering-target,gibbs,coverage_50,0.5625
methods,maneuvering-target,gpb1,coverage_50,0.405
methods,maneuvering-target,gpb2,coverage_50,0.5312
methods,maneuvering-target,imm,coverage_50,0.535
methods,maneuvering-target,kim-imm,coverage_50,0.6475
methods,maneuvering-target,known-modes,coverage_50,0.5613
methods,maneuvering-target,gibbs,max_rhat_states,1.02
methods,maneuvering-target,gibbs,state_rmse,1.477
methods,maneuvering-target,gpb1,state_rmse,3.422
methods,maneuvering-target,gpb2,state_rmse,3.263
methods,maneuvering-target,imm,state_rmse,3.269
methods,maneuvering-target,kim-imm,state_rmse,5.634
methods,maneuvering-target,known-modes,state_rmse,1.326
learning,1-d-switching-ar,em,converged,0.0
learning,1-d-switching-ar,mle,converged,1.0
learning,1-d-switching-ar,nuts,divergences,0.0
learning,1-d-switching-ar,em,iterations,17.0
learning,1-d-switching-ar,mle,iterations,23.0
learning,1-d-switching-ar,gibbs,max_rhat_theta,1.066
learning,1-d-switching-ar,nuts,max_rhat_theta,1.009
learning,1-d-switching-ar,em,rmse_transition_matrix,0.07137
learning,1-d-switching-ar,gibbs,rmse_transition_matrix,0.04452
learning,1-d-switching-ar,mle,rmse_transition_matrix,0.1539
learning,1-d-switching-ar,nuts,rmse_transition_matrix,0.04736
learning,shift-T8,gpb2,max_rhat,1.015
kernel-regression,sine,gaussian,ise,0.0176
kernel-regression,sine,epanechnikov,ise,0.01738
kernel-regression,sine,tricube,ise,0.01736
kernel-regression,sine,boxcar,ise,0.01889
learned,regret-dp,learned,regret,0.03659
learned,regret-dp,em-steps,regret,0.04107
learned,regret-dp,em,regret,0.04892
learned,regret-dp,npmle,regret,0.04886
learned,regret-dp,james-stein,regret,0.2561
learned,nuts-dp,nuts-dp,mse,0.1556
learned,nuts-dp,nuts-dp,oracle_mse,0.1119
learned,nuts-dp,nuts-dp,num_tasks,1.0
learned,nuts-dp,nuts-dp,learned_regret_same_tasks,0.07767
learned,coverage,dp/learned@0.5,coverage,0.7692
learned,coverage,dp/learned@0.9,coverage,0.9483
learned,coverage,dp/npmle@0.5,coverage,0.0675
learned,coverage,dp/npmle@0.9,coverage,0.25
learned,coverage,dp/learned@0.5,se,0.01216
learned,coverage,dp/learned@0.9,se,0.00639
learned,coverage,dp/npmle@0.5,se,0.007242
learned,coverage,dp/npmle@0.9,se,0.0125
learned,batting,mle,sse_average,0.07549
learned,batting,learned,sse_average,0.02289
learned,batting,npmle,sse_average,0.02102
learned,batting,nuts-dp,sse_average,0.02017
calibration,prior,nuts,min_p_adjusted,0.6962
calibration,prior,attention-em,coverage_z_90,0.3461
calibration,prior,attention-em,se_z_90,0.02261
calibration,prior,oracle,coverage_z_90,0.9016
calibration,prior,oracle,se_z_90,0.003215
calibration,prior,nuts (sigma x 1.3),min_p_adjusted,6.055e-07
diagnostics,all,three-atoms: gibbs,max_rhat,1.015
"""


def written_ids() -> list[str]:
    """The ids the report's section builders write, ``{name}`` as a pattern."""
    folder = Path(report.__file__).parent
    ids = {sid for sid, _ in report.SECTIONS}
    for source in folder.glob("*.py"):
        if source.name != "summary.py":
            ids |= set(re.findall(r'id="([^"]+)"', source.read_text(encoding="utf-8")))
    return [re.escape(i).replace(r"\{name\}", "[a-z0-9-]+") for i in ids if "{sid}" not in i]


def test_a_real_results_csv_links_only_to_ids_the_report_writes():
    results = pd.read_csv(io.StringIO(REAL))
    page = summary_section(results)
    targets = set(re.findall(r'href="#([^"]+)"', page))
    assert targets
    patterns = written_ids()
    for target in targets:
        assert any(re.fullmatch(p, target) for p in patterns), target
        assert any(re.fullmatch(a.replace("{scenario}", "[a-z0-9-]+"), target) for a in ANCHORS)
    # the winners are those of the rows: lowest MSE of z among the non-references
    rows = {(r[0], r[1]): r for r in table_rows(page)}
    mse = results.query("section == 'methods' and metric == 'mse_z' and method != 'oracle'")
    for scenario, by_method in mse.groupby("scenario"):
        best = by_method.loc[by_method.value.idxmin()]
        cell = rows[f"Deconvolution, {scenario}", "MSE of z"][2]
        assert cell.startswith(f'{best.method} <a href="#methods-{scenario}">')
    # Gibbs has the lowest MSE on three-atoms but an R-hat of 1.015: said, with NUTS beside it;
    # attention-EM hit its 500-iteration cap; the NPMLE's 90% intervals cover 57.2%
    link = '<a href="#methods-three-atoms">{}</a>'.format
    _, _, best, runner, margin, note = rows["Deconvolution, three-atoms", "MSE of z"]
    assert best == "gibbs " + link("0.639") + " (R-hat 1.015 &gt; 1.01)"
    assert (runner, margin) == ("nuts " + link("0.640"), "tie (within 1%): 1.00&times;")
    assert note.startswith("best without a failure: nuts " + link("0.640"))
    agree = item_of(page, "three-atoms, MSE of z")
    assert "attention-em " + link("0.641") + " (not converged after 500 iterations)" in agree
    under = item_of(page, "three-atoms, 2 of 5 intervals")
    assert "npmle 90% " + link("57.2%") + " (se 0.9%)" in under
    assert "attention-em 90% " + link("84.6%") in under
    assert "<b>fails</b>" in item_of(page, "SBC ranks").split("nuts (sigma x 1.3)")[1]
    best = rows["Learning the switching parameters", "RMSE of the transition matrix"][2]
    assert best.endswith("(R-hat 1.066 &gt; 1.01)")
    # rows the summary does not read (model comparison, diagnostics) leave no trace
    assert "K = 3" not in page and "three-atoms: nuts" not in page
