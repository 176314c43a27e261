"""Section 8's regret-versus-N block: the verdict sentence and the results.csv rows, from a
hand-made table (no JAX): the sentence counts and names what the rows say."""

import numpy as np
import pandas as pd

from attnbayes.app.report import learned


def _table():
    """Two cells: v2 meets in one by the ratio, in the other misses; v1 ran in one."""
    rows = []
    for noise, family, n, v2, best, diff, se, v1 in (
        ("homoscedastic", "dp", 100, 0.050, 0.046, 0.004, 0.003, 0.060),
        ("heteroscedastic", "sparse", 500, 0.030, 0.020, 0.010, 0.002, None),
    ):
        ratio = v2 / best
        rows.append(
            dict(
                noise=noise,
                family=family,
                num_points=n,
                method="v2",
                num_tasks=4,
                regret=v2,
                best_classical="npmle",
                diff_best=diff,
                diff_best_se=se,
                ratio_best=ratio,
                meets_requirement=bool(ratio <= 1.1 or diff <= 2 * se),
                coverage_50=0.5,
                coverage_90=0.9,
                seconds_per_task=0.01,
                note="",
            )
        )
        rows.append(
            dict(
                noise=noise,
                family=family,
                num_points=n,
                method="npmle",
                num_tasks=4,
                regret=best,
                best_classical="npmle",
                diff_best=0.0,
                diff_best_se=0.0,
                ratio_best=1.0,
                meets_requirement=True,
                coverage_50=0.2,
                coverage_90=0.4,
                seconds_per_task=0.02,
                note="",
            )
        )
        rows.append(
            dict(
                noise=noise,
                family=family,
                num_points=n,
                method="v1",
                num_tasks=0 if v1 is None else 4,
                regret=np.nan if v1 is None else v1,
                best_classical="npmle",
                note="v1 takes one sigma" if v1 is None else "",
            )
        )
    frame = pd.DataFrame(rows)
    frame["meets_requirement"] = frame["meets_requirement"].astype("boolean")
    return frame


def test_the_verdict_counts_and_names_the_cells():
    text = learned.regret_verdict(_table())
    assert "here it holds in 1 of 2 cells" in text
    # 0.050 / 0.046 = 1.087 <= 1.1: by the ratio, not by the SE alone
    assert "only because" not in text
    assert "it misses in heteroscedastic sparse N = 500 (ratio 1.50 to npmle" in text
    assert "difference 0.0100 ± 0.0020" in text
    assert "Each cell averages 4 tasks, not the 64" in text
    assert "lower regret in 1 of 1 homoscedastic cells" in text


def test_the_verdict_says_when_the_se_alone_passes():
    table = _table()
    v2 = (table.method == "v2") & (table.family == "sparse")
    table.loc[v2, ["diff_best_se", "meets_requirement"]] = [0.006, True]
    text = learned.regret_verdict(table)
    assert "holds in 2 of 2 cells (1 of them only because the difference is within 2 SE)" in text
    assert "misses" not in text


def test_the_block_writes_one_scenario_per_cell():
    blocks, frames = {"learned": []}, []
    learned._table_block(blocks, _table(), frames)
    (html,) = blocks["learned"]
    assert 'id="learned-table"' in html and "v1 takes one sigma" in html
    rows = pd.concat(frames)
    assert set(rows.scenario) == {
        "table-homoscedastic-dp-N100",
        "table-heteroscedastic-sparse-N500",
    }
    v2 = rows[(rows.scenario == "table-heteroscedastic-sparse-N500") & (rows.method == "v2")]
    assert v2.set_index("metric").value["meets"] == 0.0
    skipped = rows[(rows.scenario == "table-heteroscedastic-sparse-N500") & (rows.method == "v1")]
    assert "regret" not in set(skipped.metric)  # NaN numbers of a skipped method: no row
    assert skipped.set_index("metric").value["num_tasks"] == 0
