"""The report's opening section: who wins, where full Bayes and the point methods agree, and
whose intervals under-cover, read off the rows of ``results.csv`` (``summary_section``).

The rules, stated on the page as well:

- *wins*: the best finite value of a measure (lowest error or time, highest log predictive
  density) among the methods that do not know the truth, with the margin runner-up / winner,
  or their difference where a ratio means nothing (log densities, errors that can be
  negative). ``REFERENCES`` (the oracle Bayes rule knows nu, ``known-modes`` the modes, the
  exact filter and smoother are their tables' references) are shown beside the winner, never
  as winners. A method whose diagnostics failed (R-hat above ``RHAT_OK``, divergent
  transitions, ``converged`` 0, failed replicates) carries the failure beside its name, and a
  failed winner the best method without one.
  A winner whose positive error or time is within ``TIE_WITHIN`` of the runner-up's, or
  within their combined standard errors
  where results.csv has a ``<metric>_se``, ties with it (said in the margin column).
- *agree*: a point method's error is within ``AGREE_WITHIN`` (relative) of the best full-Bayes
  method's error without failed diagnostics (else the best) on the same data,
  |e_point - e_Bayes| <= ``AGREE_WITHIN`` e_Bayes.
- *under-covers*: an interval's coverage is below its nominal level by more than
  ``UNDERCOVER_SES`` standard errors: the one its section reports (calibration, learned
  attention), else the binomial sqrt(p (1 - p) / n) at the nominal p over the n points or
  steps of the data set (the coordinates of one point counted once, which errs towards a
  larger error; the steps of a series treated as independent).

Every number links to the sub-section whose table holds it (``ANCHORS``).
"""

from __future__ import annotations

import html
import math
import re
from collections.abc import Iterable
from typing import NamedTuple

import pandas as pd

from ...inference import methods as registry
from ..pages import RHAT_OK

AGREE_WITHIN = 0.10
# a winner within this relative margin of the runner-up (or within the measure's standard error,
# where results.csv has one: "<metric>_se") ties with it
TIE_WITHIN = 0.01
# an interval under-covers when its coverage is below the nominal level by more than this many
# of its standard errors (about 1 in 40 calibrated intervals is flagged, one-sided)
UNDERCOVER_SES = 2.0
SBC_ALPHA = 0.01
REFERENCES = frozenset({"oracle", "known-modes", "exact", "exact-smoother", "exact-repeat"})
# the point methods measured against full Bayes: attention-EM, the NPMLE and the learned
# stack (v2, the grid stack); Kim's smoother over GPB2 / IMM (the smoothing posterior, the
# Gibbs sampler's target); MLE and EM
POINT_METHODS = {
    "deconvolution": ("attention-em", "npmle", "learned"),
    "switching": ("kim-gpb2", "kim-imm"),
    "learning": ("mle", "em"),
}
LEARNING_SAMPLERS = ("nuts", "gibbs")
COLUMNS = ("section", "scenario", "method", "metric", "value")


def _anchor(section: str, scenario: str) -> str:
    """The id of the sub-section of the page that holds the table of (section, scenario)."""
    if section == "methods":
        return f"methods-{scenario}"
    if section == "learning":
        return "learning-shift" if scenario.startswith("shift-") else "learning-methods"
    if section == "learned":
        if scenario.startswith("regret-"):
            return "learned-regret"
        return {
            "nuts-dp": "learned-nuts",
            "coverage": "learned-coverage",
            "length": "learned-coverage",
            "batting": "learned-batting",
            "link": "learned-link",
            "sunspots": "learned-pooling",
        }.get(scenario, "learned")
    if section == "calibration":
        return "calibration-table"
    return section


# the ids ``summary_section`` links to (``{scenario}``: a deconvolution scenario's name, or
# maneuvering-target); a test checks that the report's sections write each of them
ANCHORS = (
    "methods-{scenario}",
    "learning-methods",
    "learned-regret",
    "learned-nuts",
    "learned-coverage",
    "learned-batting",
    "learned-pooling",
    "calibration-table",
    "kernel-regression",
)


class _Measure(NamedTuple):
    """A metric of results.csv as the summary ranks it.

    Attributes:
        metric: its name in results.csv.
        label: how the summary names it.
        kind: "error" (lower is better; margin a ratio when both are positive, else a
            difference), "time" (the same, in seconds), "score" (a log density, higher is
            better, margin a difference).
    """

    metric: str
    label: str
    kind: str


_DECONVOLUTION = (
    _Measure("mse_z", "MSE of z", "error"),
    _Measure("heldout_lpd", "held-out log predictive density", "score"),
    _Measure("wall_time_s", "wall time", "time"),
)
_LEARNING = (
    _Measure("rmse_transition_matrix", "RMSE of the transition matrix", "error"),
    _Measure("heldout_lpd_per_step", "held-out log predictive density per step", "score"),
    _Measure("wall_time_s", "wall time", "time"),
)
_STATE_RMSE = _Measure("state_rmse", "state RMSE", "error")
_WALL_TIME = _Measure("wall_time_s", "wall time", "time")

# ----------------------------------------------------------------------------- numbers


def _sig3(value: float) -> str:
    """3 significant digits, positional between 0.001 and 10^6."""
    if value == 0:
        return "0"
    if not 1e-3 <= abs(value) < 1e6:
        return f"{value:.2e}"
    rounded = float(f"{value:.3g}")
    return f"{rounded:.{max(0, 2 - math.floor(math.log10(abs(rounded))))}f}"


def _number(value: float, kind: str) -> str:
    if kind == "share":
        return f"{100 * value:.1f}%"
    if kind == "time":
        return f"{_sig3(value)} s"
    return _sig3(value)


def _link(text: str, anchor: str) -> str:
    return f'<a href="#{html.escape(anchor)}">{html.escape(text)}</a>'


def _margin(best: float, runner: float, kind: str) -> str:
    """runner-up / winner (x) for positive errors and times, else |winner - runner-up| (D)."""
    if kind in ("error", "time") and best > 0 and runner > 0:
        return f"{_sig3(runner / best)}&times;"
    return f"&Delta; {_sig3(abs(best - runner))}"


# ----------------------------------------------------------------------------- reading rows


class _Group(NamedTuple):
    """The rows of one (section, scenario) of results.csv: value[method][metric]."""

    section: str
    scenario: str
    values: dict
    anchor: str

    def metric(self, name: str, methods: Iterable[str] | None = None) -> dict[str, float]:
        """{method: value} of one metric, finite values only, in the table's order."""
        chosen = self.values if methods is None else [m for m in methods if m in self.values]
        out = {}
        for m in chosen:
            v = self.values[m].get(name)
            if v is not None and math.isfinite(v):
                out[m] = v
        return out


def _groups(results: pd.DataFrame) -> dict[tuple[str, str], _Group]:
    frame = results.loc[:, list(COLUMNS)].copy()
    frame["value"] = pd.to_numeric(frame["value"], errors="coerce")
    for c in ("section", "scenario", "method", "metric"):
        frame[c] = frame[c].astype(str)
    frame = frame.drop_duplicates(subset=["section", "scenario", "method", "metric"])
    groups = {}
    for (section, scenario), rows in frame.groupby(["section", "scenario"], sort=False):
        values: dict[str, dict[str, float]] = {}
        for method, metric, value in zip(rows.method, rows.metric, rows.value, strict=True):
            values.setdefault(method, {})[metric] = float(value)
        groups[section, scenario] = _Group(section, scenario, values, _anchor(section, scenario))
    return groups


def _problems(group: _Group, method: str) -> list[str]:
    """What failed in ``method``'s diagnostics in its group (empty when nothing did)."""
    values = group.values.get(method, {})
    out = []
    for metric, v in values.items():
        if metric.startswith("max_rhat") and v > RHAT_OK:
            out.append(f"R-hat {v:.3f} > {RHAT_OK}")
    if values.get("divergences", 0) > 0:
        out.append(f"{values['divergences']:.0f} divergent transitions")
    if values.get("converged", 1) == 0:
        iterations = values.get("iterations")
        out.append(
            "not converged"
            + (f" after {iterations:.0f} iterations" if iterations is not None else "")
        )
    if values.get("num_failed", 0) > 0:
        out.append(f"{values['num_failed']:.0f} failed replicates")
    if values.get("num_divergent_replicates", 0) > 0:
        out.append(f"divergences in {values['num_divergent_replicates']:.0f} replicates")
    return out


def _named(group: _Group, method: str, value: float, kind: str) -> str:
    """``method value`` with the value linked to its table and any failure beside it."""
    failed = _problems(group, method)
    note = f" ({html.escape('; '.join(failed))})" if failed else ""
    return f"{html.escape(method)} {_link(_number(value, kind), group.anchor)}{note}"


_HEADERS = ("reading", "measure", "best", "runner-up", "margin", "note")


class _Row(NamedTuple):
    reading: str
    measure: str
    best: str
    runner_up: str
    margin: str
    note: str


def _ranked(
    group: _Group, measure: _Measure, reading: str, candidates=None, kinds=None
) -> _Row | None:
    """The winner of ``measure`` in ``group`` (``candidates``: the methods that compete, default
    all but the references), or None when no method has a finite value. ``kinds`` ({method:
    "filter" | "smoother"}): the references shown are those of the winner's kind only."""
    pool = [m for m in (group.values if candidates is None else candidates) if m not in REFERENCES]
    values = group.metric(measure.metric, pool)
    if not values:
        return None
    order = sorted(values, key=lambda m: -values[m] if measure.kind == "score" else values[m])
    kind = measure.kind

    best = order[0]
    runner = order[1] if len(order) > 1 else None
    notes = []
    margin = "" if runner is None else _margin(values[best], values[runner], kind)
    if runner is not None:
        gap = abs(values[best] - values[runner])
        ses = group.metric(f"{measure.metric}_se", [best, runner])
        within_se = len(ses) == 2 and gap <= math.hypot(*ses.values())
        relative = kind in ("error", "time") and values[best] > 0
        if (relative and gap <= TIE_WITHIN * values[best]) or within_se:
            why = "within its standard error" if within_se else f"within {TIE_WITHIN:.0%}"
            margin = f"tie ({why}): {margin}"
    if _problems(group, best):
        clean = next((m for m in order[1:] if not _problems(group, m)), None)
        notes.append(
            "no winner without a failure"
            if clean is None
            else f"best without a failure: {_named(group, clean, values[clean], kind)}"
        )
    if kind != "time":
        # a reference of the winner's kind only (a smoother's floor is not a filter's)
        same = [
            m
            for m in group.values
            if m in REFERENCES and (kinds is None or kinds.get(m) == kinds.get(best))
        ]
        refs = group.metric(measure.metric, same)
        notes += [f"reference: {_named(group, m, v, kind)}" for m, v in refs.items()]
    return _Row(
        reading,
        measure.label + (" (compilation included)" if kind == "time" else ""),
        _named(group, best, values[best], kind),
        "" if runner is None else _named(group, runner, values[runner], kind),
        margin,
        "; ".join(notes),
    )


def _switching_kinds() -> dict[str, str]:
    """{name: "filter" | "smoother"} of the registry's switching methods."""
    return {
        m: registry.get_method("switching", m).target for m in registry.method_names("switching")
    }


def _samplers(reading: str) -> tuple[str, ...]:
    return tuple(
        m
        for m in registry.method_names(reading)
        if registry.get_method(reading, m).returns == "draws"
    )


def _reading_rows(groups: dict[tuple[str, str], _Group]) -> list[_Row]:
    rows: list[_Row | None] = []
    for (section, scenario), group in groups.items():
        if section != "methods":
            continue
        if any("mse_z" in v for v in group.values.values()):
            rows += [_ranked(group, m, f"Deconvolution, {scenario}") for m in _DECONVOLUTION]
        elif any("state_rmse" in v for v in group.values.values()):
            kinds = _switching_kinds()
            reading = f"Switching, {scenario}"
            filters = [m for m in group.values if kinds.get(m) == "filter"]
            others = [m for m in group.values if kinds.get(m) != "filter"]
            rows.append(
                _ranked(
                    group,
                    _STATE_RMSE._replace(label="state RMSE, filters"),
                    reading,
                    filters,
                    kinds,
                )
            )
            rows.append(
                _ranked(
                    group,
                    _STATE_RMSE._replace(label="state RMSE, smoothers and samplers"),
                    reading,
                    others,
                    kinds,
                )
            )
            rows.append(_ranked(group, _WALL_TIME, reading))
    learning = groups.get(("learning", "1-d-switching-ar"))
    if learning is not None:
        reading = "Learning the switching parameters"
        rows += [_ranked(learning, m, reading) for m in _LEARNING]
    for (section, scenario), group in groups.items():
        if section == "learned" and scenario.startswith("regret-"):
            family = scenario.removeprefix("regret-")
            regret = _Measure("regret", f"regret (MSE above the oracle), {family} tasks", "error")
            rows.append(_ranked(group, regret, "Learned attention stack"))
    for scenario, measure in (
        ("batting", _Measure("sse_average", "batting averages, sum of squared errors", "error")),
        ("sunspots", _Measure("test_rmse", "sunspots, test RMSE", "error")),
    ):
        group = groups.get(("learned", scenario))
        if group is not None:
            rows.append(_ranked(group, measure, "Learned attention stack"))
    for (section, scenario), group in groups.items():
        if section == "kernel-regression":
            ise = _Measure("ise", "integrated squared error (kernels)", "error")
            rows.append(_ranked(group, ise, f"Kernel regression, {scenario}"))
    return [r for r in rows if r is not None]


# ----------------------------------------------------------------------------- agreement


def _relative(point: float, ref: float) -> str:
    """(point - ref) / |ref| as a signed percentage."""
    if ref == 0:
        return "+0.0%" if point == 0 else "against 0"
    return f"{'+' if point >= ref else '-'}{100 * abs(point - ref) / abs(ref):.1f}%"


def _agreement(group: _Group, metric: str, full, points, what: str) -> str | None:
    """One sentence: each point method's error against the best full-Bayes method's."""
    bayes = group.metric(metric, full)
    mine = group.metric(metric, points)
    if not bayes or not mine:
        return None
    clean = {m: v for m, v in bayes.items() if not _problems(group, m)} or bayes
    ref = min(clean, key=clean.get)
    ref_v = clean[ref]
    parts = []
    for m, v in mine.items():
        agrees = abs(v - ref_v) <= AGREE_WITHIN * abs(ref_v)
        parts.append(
            f"{_named(group, m, v, 'error')} <b>{'agrees' if agrees else 'differs'}</b> "
            f"({_relative(v, ref_v)})"
        )
    full_bayes = _named(group, ref, ref_v, "error")
    return f"{html.escape(what)}: full Bayes {full_bayes}; " + ", ".join(parts) + "."


def _agreements(groups) -> list[str]:
    items = []
    decon_samplers = _samplers("deconvolution")
    switching_samplers = _samplers("switching")
    for (section, scenario), group in groups.items():
        if section != "methods":
            continue
        if any("mse_z" in v for v in group.values.values()):
            items.append(
                _agreement(
                    group,
                    "mse_z",
                    decon_samplers,
                    POINT_METHODS["deconvolution"],
                    f"{scenario}, MSE of z",
                )
            )
        elif any("state_rmse" in v for v in group.values.values()):
            items.append(
                _agreement(
                    group,
                    "state_rmse",
                    switching_samplers,
                    POINT_METHODS["switching"],
                    f"{scenario}, state RMSE (Kim's smoother over GPB2 / IMM against the "
                    "sampler of the same smoothing posterior)",
                )
            )
    learning = groups.get(("learning", "1-d-switching-ar"))
    if learning is not None:
        metrics = dict.fromkeys(
            k for v in learning.values.values() for k in v if k.startswith("rmse_")
        )
        for metric in metrics:
            name = metric.removeprefix("rmse_").replace("_", " ")
            items.append(
                _agreement(
                    learning,
                    metric,
                    LEARNING_SAMPLERS,
                    POINT_METHODS["learning"],
                    f"learning, RMSE of the {name}",
                )
            )
    learned = groups.get(("learned", "nuts-dp"))
    if learned is not None:
        items.append(_learned_against_nuts(learned))
    return [i for i in items if i is not None]


def _learned_against_nuts(group: _Group) -> str | None:
    """The stack against NUTS-DP on NUTS-DP's tasks (it runs on a subset of the stack's): the
    stack's MSE there is NUTS-DP's row's oracle_mse + learned_regret_same_tasks."""
    nuts = group.values.get("nuts-dp", {})
    needed = ("mse", "oracle_mse", "learned_regret_same_tasks")
    if not all(math.isfinite(nuts.get(k, math.nan)) for k in needed):
        return None
    ref_v = nuts["mse"]
    v = nuts["oracle_mse"] + nuts["learned_regret_same_tasks"]
    agrees = abs(v - ref_v) <= AGREE_WITHIN * abs(ref_v)
    tasks = nuts.get("num_tasks", math.nan)
    on = f" on NUTS-DP's {tasks:.0f} task{'s' * (tasks != 1)}" if math.isfinite(tasks) else ""
    return (
        f"learned stack under its training prior, MSE of z{on}: full Bayes "
        f"{_named(group, 'nuts-dp', ref_v, 'error')}; learned {_link(_sig3(v), group.anchor)} "
        f"(oracle_mse + learned_regret_same_tasks) <b>{'agrees' if agrees else 'differs'}</b> "
        f"({_relative(v, ref_v)})."
    )


# ----------------------------------------------------------------------------- coverage


class _Interval(NamedTuple):
    method: str
    detail: str  # the family (learned attention) or target (calibration), else ""
    level: float
    coverage: float
    se: float


def _intervals(group: _Group, num_points: float | None) -> list[_Interval]:
    """Every interval of the group with a coverage, its nominal level and standard error."""
    out = []
    for method, values in group.values.items():
        if method in REFERENCES:
            continue
        for metric, c in values.items():
            if not math.isfinite(c):
                continue
            if group.section == "learned":  # methods "family/method@level", metrics coverage, se
                if metric != "coverage" or "@" not in method:
                    continue
                label, level_text = method.rsplit("@", 1)
                family, _, name = label.rpartition("/")
                if name in REFERENCES:
                    continue
                try:
                    level = float(level_text)
                except ValueError:
                    continue
                out.append(_Interval(name, family, level, c, values.get("se", math.nan)))
                continue
            found = re.fullmatch(r"coverage_(?:(.+)_)?(\d+)", metric)
            if found is None:
                continue
            target, percent = found.groups()
            level = int(percent) / 100
            if target is not None:  # calibration: coverage_<target>_<level>, se_<target>_<level>
                se = values.get(f"se_{target}_{percent}", math.nan)
            else:
                n = num_points or 0
                se = math.sqrt(level * (1 - level) / n) if n > 0 else math.nan
            out.append(_Interval(method, target or "", level, c, se))
    return out


def _by_method(under: list[_Interval], intervals: list[_Interval], anchor: str) -> list[str]:
    """Per method: its under-covering intervals, or past ``_LISTED`` of them how many of its
    intervals and the worst."""

    def one(i: _Interval) -> str:
        where = f"{html.escape(i.detail)} " if i.detail else ""
        return (
            f"{where}{i.level:.0%} {_link(_number(i.coverage, 'share'), anchor)} "
            f"(se {_number(i.se, 'share')})"
        )

    out = []
    for method in dict.fromkeys(i.method for i in under):
        mine = [i for i in under if i.method == method]
        if len(mine) <= _LISTED:
            out.append(f"{html.escape(method)} " + ", ".join(one(i) for i in mine))
            continue
        total = sum(i.method == method for i in intervals)
        worst = max(mine, key=lambda i: (i.level - i.coverage) / max(i.se, 1e-12))
        out.append(f"{html.escape(method)} {len(mine)} of its {total}, the worst {one(worst)}")
    return out


_LISTED = 2


def _undercover(groups) -> list[str]:
    items = []
    for (section, scenario), group in groups.items():
        if section == "methods":
            data = groups.get(("data", scenario))
            n = None
            if data is not None:
                sizes = data.metric("num_points") or data.metric("num_steps")
                n = next(iter(sizes.values()), None)
            where = scenario
        elif section == "calibration":
            n, where = None, "calibration over the prior"
        elif section == "learned" and scenario == "coverage":
            n, where = None, "learned attention, by task family"
        else:
            continue
        intervals = [i for i in _intervals(group, n) if math.isfinite(i.se)]
        if not intervals:
            continue
        under = [i for i in intervals if i.level - i.coverage > UNDERCOVER_SES * i.se]
        if not under:
            items.append(
                f"{html.escape(where)}: none of {len(intervals)} intervals "
                f"({_link('table', group.anchor)})."
            )
            continue
        items.append(
            f"{html.escape(where)}, {len(under)} of {len(intervals)} intervals: "
            + "; ".join(_by_method(under, intervals, group.anchor))
            + "."
        )
    cal = groups.get(("calibration", "prior"))
    if cal is not None:
        p = cal.metric("min_p_adjusted")
        if p:
            parts = [
                f"{html.escape(m)}{' (deliberately wrong)' if '(sigma x' in m else ''} "
                f"{'passes' if v > SBC_ALPHA else '<b>fails</b>'} "
                f"(smallest adjusted p {_link(_sig3(v), cal.anchor)}"
                + "".join(f"; {html.escape(f)}" for f in _problems(cal, m))
                + ")"
                for m, v in p.items()
            ]
            items.append(
                f"SBC ranks of the samplers (alpha {SBC_ALPHA}): " + ", ".join(parts) + "."
            )
    return items


# ----------------------------------------------------------------------------- the section


def _table(rows: list[_Row]) -> str:
    head = "".join(f"<th>{h}</th>" for h in _HEADERS)
    body = []
    previous = None
    for r in rows:
        reading = html.escape(r.reading) if r.reading != previous else ""
        previous = r.reading
        cells = [f"<th>{reading}</th>", f"<td>{html.escape(r.measure)}</td>"]
        cells += [f"<td>{c}</td>" for c in (r.best, r.runner_up, r.margin, r.note)]
        body.append("<tr>" + "".join(cells) + "</tr>")
    return "<table><tr>" + head + "</tr>" + "".join(body) + "</table>"


def _check(results) -> pd.DataFrame:
    if not isinstance(results, pd.DataFrame):
        raise ValueError(f"results: expected a pandas DataFrame, got {type(results).__name__}")
    missing = [c for c in COLUMNS if c not in results.columns]
    if missing:
        raise ValueError(f"results: missing columns {missing}; results.csv has {list(COLUMNS)}")
    return results


def summary_section(results: pd.DataFrame) -> str:
    """The HTML of the report's opening section, ``<h2 id="summary">`` and its content.

    From the rows of results.csv (columns section, scenario, method, metric, value, as
    ``write_report`` writes them): per reading (the deconvolution scenarios, the switching
    filters and smoothers, learning the switching parameters, the learned attention stack,
    kernel regression) the method that wins each measure with its runner-up and margin; where
    the point methods (attention-EM, NPMLE, the learned stack, Kim's smoother over GPB2 / IMM,
    MLE, EM) agree with full Bayes (NUTS, Gibbs); and which intervals under-cover (calibration
    included). The rules are the module docstring's and open the section. Readings, methods
    and metrics missing from ``results`` (a quick report has fewer) are left out; NaN never
    wins. Every number links to its sub-section (``ANCHORS``). Pure: no JAX, no files.

    Raises:
        ValueError: ``results`` is not a DataFrame with results.csv's columns.
    """
    groups = _groups(_check(results))
    rules = (
        "<b>Wins</b>: the best finite value of a measure (lowest error or time, highest log "
        "density) among the methods that are not references, by the margin runner-up / "
        "winner (&times;), or their difference (&Delta;) where a ratio means nothing; a winner "
        f"whose error or time is within {TIE_WITHIN:.0%} of the runner-up's, or within their "
        "standard errors where the table has them, ties with it. "
        f"<b>Agrees</b>: a point method's error is within {AGREE_WITHIN:.0%} of the best "
        "full-Bayes method's without failed diagnostics (else the best) on the same data. "
        "<b>Under-covers</b>: an interval's coverage is below its nominal level by more than "
        f"{UNDERCOVER_SES:g} standard errors (its section's, else the binomial "
        "sqrt(p(1 - p)/n) at the nominal p over the n points or steps of the data, which "
        "treats them as independent). "
        f"Failed diagnostics (R-hat &gt; {RHAT_OK}, divergent transitions, not converged) "
        "stand beside the method's name; the references (the oracle Bayes rule and the known "
        "modes know the truth, the exact filter and smoother are exact inference) stand beside "
        "a winner of their kind, never as winners. Every number links to its table."
    )
    parts = ['<h2 id="summary">Summary</h2>', f'<p class="note">{rules}</p>']
    rows = _reading_rows(groups)
    agree = _agreements(groups)
    under = _undercover(groups)
    if not (rows or agree or under):
        parts.append('<p class="note">results.csv holds nothing to summarise.</p>')
        return "\n".join(parts)
    if rows:
        parts.append("<h3>Who wins</h3>" + _table(rows))
    if agree:
        parts.append(
            "<h3>Full Bayes and the point methods</h3><ul>"
            + "".join(f"<li>{i}</li>" for i in agree)
            + "</ul>"
        )
    if under:
        parts.append(
            "<h3>Intervals that under-cover</h3><ul>"
            + "".join(f"<li>{i}</li>" for i in under)
            + "</ul>"
        )
    return "\n".join(parts)


__all__ = [
    "AGREE_WITHIN",
    "ANCHORS",
    "POINT_METHODS",
    "REFERENCES",
    "TIE_WITHIN",
    "UNDERCOVER_SES",
    "summary_section",
]
