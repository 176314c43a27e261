"""Reading and checking a user's input files for ``attnbayes deconvolve`` and ``attnbayes filter``.

CSV tables (``read_table``):

- one row per observation (deconvolve) or per time step (filter), one column per coordinate;
  cells are separated by ``delimiter`` (default ","; quoted cells as in RFC 4180);
- the header row is optional: the first row is taken as a header when none of its cells is a
  number (and at least one is a name), else it is data and the columns are called x1..xp
  (or y1..yo, by ``prefix``; a single column is just x or y); the first header cell may be
  empty (R's ``write.csv`` and pandas write their row names so);
- which columns are data is never guessed: without ``columns`` (``--columns``) a file must
  hold exactly the columns needed (one, or ``width``) besides those other options name
  (``exclude``: ``--inputs``), and none of them may look like a row index (a header
  "rownames", "row.names", "index", "Unnamed: 0" or empty, or the integers 1..N or 0..N-1 in
  order); otherwise the file is refused with its columns listed, the likely index named and
  the ``--columns`` to pass;
- blank lines and lines starting with "#" are skipped; a UTF-8 byte-order mark is ignored;
- numbers are decimal with a point (1.5, -2e-3, .5); an empty cell, NA, N/A or NaN is a
  missing value, which only the filter's observation columns accept (a whole row of them is
  a step with no observation; a partly missing row updates on its observed coordinates);
  inf is always refused.

The noise of ``deconvolve`` may come from the same file: ``read_standard_errors`` reads the
``--se`` column(s) (one per row, or one per data column; every cell a number > 0) and
``read_counts`` the ``--binomial`` hits and trials (whole numbers, 0 <= hits <= trials,
trials >= 1), each bad cell named like the others. ``read_text_column`` reads one column as
text (``attnbayes regimes --time``: dates or labels), with the same rows and header rule.

A problem raises ``InputError`` (a ``ValueError``) whose message names the file, the line and
the column, e.g. ``data.csv line 7, column "x2": cannot parse 'abc' as a number``; a file that
looks separated by another character than ``delimiter`` is reported as such.

Switching-model parameters (``read_params``): a JSON object with the nine required fields of
``attnbayes.models.switching.SwitchingParams`` as nested lists of numbers (``PARAMS_FORMAT``), the
optional emission offsets and input weights (``PARAMS_OPTIONAL_FIELDS``), and the optional labels
"state_names" (d strings) and "mode_names" (M strings).

This module reads with the standard library and NumPy only; ``read_params`` imports
``attnbayes.models.switching`` (and so JAX) for ``check_params``.

Over 800 lines: every file a user hands the CLI (CSV tables, a text column, standard errors,
counts, parameter JSON), read by shared private readers so that every error names the file,
line and column the same way.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import math
import re
from pathlib import Path
from typing import NamedTuple

import numpy as np

MISSING_TOKENS = frozenset({"", "na", "n/a", "nan"})
# header names of a row-index column (R's write.csv: "" or "rownames" in Rdatasets' files;
# pandas: "" or, read back and written again, "Unnamed: 0"; reset_index: "index")
INDEX_NAMES = frozenset({"", "rownames", "row.names", "row_names", "unnamed: 0", "index"})
OTHER_DELIMITERS = (";", "\t", "|", ",")
# what each row of a column chosen by the option is, in the missing-value message
_NEEDS_A_NUMBER = {"--inputs": "input", "--se": "standard error", "--binomial": "count"}
_NUMBER = re.compile(
    r"[+-]?(?:(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?|inf|infinity)", re.IGNORECASE | re.ASCII
)
_DECIMAL_COMMA = re.compile(r"[+-]?\d*,\d+(?:[eE][+-]?\d+)?")

PARAMS_FIELDS = {
    "initial_probs": ("(M,)", "P(s_1 = j)"),
    "transition_matrix": ("(M, M)", "[i][j] = P(s_t = j | s_{t-1} = i), rows sum to 1"),
    "initial_means": ("(M, d)", "mean of x_1 given s_1 = j"),
    "initial_covs": ("(M, d, d)", "covariance of x_1 given s_1 = j, symmetric PSD"),
    "dynamics_matrices": ("(M, d, d)", "F_j"),
    "dynamics_biases": ("(M, d)", "b_j"),
    "dynamics_covs": ("(M, d, d)", "Q_j, symmetric PSD (may be singular)"),
    "emission_matrices": ("(M, o, d)", "H_j"),
    "emission_covs": ("(M, o, o)", "R_j, symmetric positive semi-definite"),
}
PARAMS_OPTIONAL_FIELDS = {
    "emission_biases": ("(M, o)", "d_j, added to H_j x_t (default 0)"),
    "dynamics_input_weights": ("(M, d, k)", "B_j: B_j u_t is added to x_t (--inputs)"),
    "emission_input_weights": ("(M, o, k)", "D_j: D_j u_t is added to y_t (--inputs)"),
}
PARAMS_LABELS = {
    "state_names": "optional, d strings naming the state coordinates",
    "mode_names": "optional, M strings naming the modes",
}
PARAMS_FORMAT = (
    "a JSON object whose fields are nested lists of numbers (M modes, state dimension d, "
    "observation dimension o): "
    + "; ".join(f"{k} {shape} {what}" for k, (shape, what) in PARAMS_FIELDS.items())
    + "; optionally "
    + "; ".join(f"{k} {shape} {what}" for k, (shape, what) in PARAMS_OPTIONAL_FIELDS.items())
    + " (k input columns; absent: zeros, k = 0); "
    + "; ".join(f"{k} ({v})" for k, v in PARAMS_LABELS.items())
)
_SEE_HELP = "(the format: attnbayes filter --help)"


def _field_format(field: str) -> str:
    shape, what = (PARAMS_FIELDS | PARAMS_OPTIONAL_FIELDS)[field]
    return f"{field} is {shape}: {what}"


class InputError(ValueError):
    """A problem with a user's input file; the message names the file, line and column."""


class Table(NamedTuple):
    """Numbers read from a CSV file.

    Attributes:
        path: the file name as given (used in messages).
        columns: the names of the selected columns (header names, else x1..xp / y1..yo).
        values: (N, p) float64; NaN marks a missing value (only with ``allow_missing``).
        lines: (N,) the line of the file each row came from (1-based).
        header: whether the file had a header row.
        sha256: hex digest of the file's bytes as read.
        positions: (p,) the 1-based column of the file each selected column came from.
    """

    path: str
    columns: tuple[str, ...]
    values: np.ndarray
    lines: np.ndarray
    header: bool
    sha256: str = ""
    positions: tuple[int, ...] = ()

    def where(self, row: int, column: int) -> str:
        """'PATH line L, column "c"' of data row ``row`` and selected column ``column``
        (0-based), as the reading errors name a cell (a file without a header: the column's
        number)."""
        if self.header or not self.positions:
            label = f'"{self.columns[column]}"'
        else:
            label = str(self.positions[column])
        return _where(self.path, int(self.lines[row]), label)


def _delimiter_name(delimiter: str) -> str:
    return "tab" if delimiter == "\t" else repr(delimiter)


def _delimiter_option(delimiter: str) -> str:
    return "--delimiter tab" if delimiter == "\t" else f"--delimiter '{delimiter}'"


def _is_missing(cell: str) -> bool:
    return cell.strip().lower() in MISSING_TOKENS


def _is_number(cell: str) -> bool:
    return _NUMBER.fullmatch(cell.strip()) is not None


def _where(path: str, line: int, column: str | None = None) -> str:
    return f"{path} line {line}" + (f", column {column}" if column is not None else "")


def _column_label(names: tuple[str, ...] | None, index: int) -> str:
    """'"x2"' for a named column, else its 1-based number."""
    if names is not None and index < len(names):
        return f'"{names[index]}"'
    return str(index + 1)


def _cell_hints(cell: str, delimiter: str) -> str:
    """Likely causes of an unreadable cell, as a parenthesised suffix (or "")."""
    text = cell.strip()
    if delimiter != "," and _DECIMAL_COMMA.fullmatch(text):
        return " (a decimal comma? write numbers with a point: 1.5, not 1,5)"
    for other in OTHER_DELIMITERS:
        if other != delimiter and other in text:
            pieces = [p for p in text.split(other) if p.strip()]
            if len(pieces) > 1:
                return (
                    f" (the file looks {_delimiter_name(other)}-separated, not "
                    f"{_delimiter_name(delimiter)}-separated: pass {_delimiter_option(other)})"
                )
    if len(text.split()) > 1:
        return (
            f" (several values in one cell? cells must be separated by "
            f"{_delimiter_name(delimiter)}; see --delimiter)"
        )
    return ""


def _read_bytes(path: str) -> bytes:
    try:
        raw = Path(path).read_bytes()
    except FileNotFoundError:
        raise InputError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise InputError(f"{path}: is a folder, not a file") from None
    except PermissionError:
        raise InputError(f"{path}: permission denied") from None
    except OSError as err:
        raise InputError(f"{path}: cannot read it ({err.strerror or err})") from None
    return raw


def _decode(path: str, raw: bytes) -> str:
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        line = raw[: err.start].count(b"\n") + 1
        raise InputError(
            f"{_where(path, line)}: not UTF-8 text (byte 0x{raw[err.start]:02x}); save the "
            "file as UTF-8 CSV"
        ) from None


def _rows(path: str, text: str, delimiter: str) -> list[tuple[int, list[str]]]:
    """(line, cells) for every row that is neither blank nor a comment."""
    reader = csv.reader(io.StringIO(text, newline=""), delimiter=delimiter, strict=True)
    rows = []
    while True:
        try:
            cells = next(reader)
        except StopIteration:
            break
        except csv.Error as err:
            raise InputError(f"{_where(path, reader.line_num)}: not valid CSV ({err})") from None
        if not cells or (len(cells) == 1 and not cells[0].strip()):
            continue
        if cells[0].lstrip().startswith("#"):
            continue
        rows.append((reader.line_num, cells))
    return rows


def _check_delimiter(path: str, line: int, cells: list[str], delimiter: str) -> None:
    """A first row that is one cell under ``delimiter`` but several under another one."""
    if len(cells) != 1:
        return
    for other in OTHER_DELIMITERS:
        if other == delimiter:
            continue
        pieces = cells[0].split(other)
        if len(pieces) > 1 and sum(bool(p.strip()) for p in pieces) > 1:
            raise InputError(
                f"{_where(path, line)}: no {_delimiter_name(delimiter)} in the first row but "
                f"{len(pieces)} {_delimiter_name(other)}-separated cells: the file looks "
                f"{_delimiter_name(other)}-separated; pass {_delimiter_option(other)}"
            )


def _looks_numeric(cell: str) -> bool:
    """A number, or several numbers run together by spaces or another delimiter."""
    pieces = [p for p in re.split(r"[\s;|,]+", cell.strip()) if p]
    return bool(pieces) and all(_is_number(p) for p in pieces)


def _is_header(cells: list[str]) -> bool:
    names = [c for c in cells if not _is_missing(c)]
    return bool(names) and not any(_looks_numeric(c) for c in names)


def _header_names(path: str, line: int, cells: list[str]) -> tuple[str, ...]:
    """The header's names; only the first may be empty (a row-index column)."""
    names = tuple(c.strip() for c in cells)
    for j, name in enumerate(names):
        if not name and j > 0:
            extra = " (a trailing delimiter at the end of the line?)" if j == len(names) - 1 else ""
            raise InputError(f"{_where(path, line, str(j + 1))}: empty column name{extra}")
        if name in names[:j]:
            raise InputError(f'{_where(path, line, str(j + 1))}: column name "{name}" repeats')
    return names


def _needed(count: int) -> str:
    """'1 is needed', '2 are needed'."""
    return f"{count} {'is' if count == 1 else 'are'} needed"


def _name(names: tuple[str, ...], j: int) -> str:
    return names[j] or f"column {j + 1} (no name)"


def _listing(names: tuple[str, ...], indices) -> str:
    return ", ".join(_name(names, j) for j in indices)


def _option_value(names: tuple[str, ...], indices, option: str) -> str:
    """``--columns a,b`` for these columns (numbers for names a shell or the list would split)."""
    items = [names[j] if re.fullmatch(r"[\w.\-]+", names[j]) else str(j + 1) for j in indices]
    return f"{option} {','.join(items)}"


def _index_reason(name: str | None, cells: list[str], first: bool) -> str | None:
    """Why a column looks like a row index, or None: its header name (``INDEX_NAMES``; ``name``
    is None without a header), or, for the file's first column (where R and pandas write the
    row names), its cells are the integers 1..N or 0..N-1 in order (N >= 3)."""
    named = name is not None and name.lower() in INDEX_NAMES
    if named and name.lower() != "index":
        return f'its header is "{name}"' if name else "its header is empty"
    # "index" is also a name for data (a price index): an index only with the integers
    if not (first or named) or len(cells) < 3:
        return None
    if not all(_NUMBER.fullmatch(c.strip()) for c in cells):
        return None
    values = [float(c) for c in cells]
    start = values[0]
    if start in (0.0, 1.0) and values == [start + i for i in range(len(values))]:
        held = f"the integers {start:.0f}..{start + len(values) - 1:.0f} in order"
        return f'its header is "{name}" and it holds {held}' if named else held
    return None


def _survey(names, header: bool, data, indices) -> tuple[list[str], list[int]]:
    """(what makes each of ``indices`` look like a row index, the others holding numbers)."""
    hints, numeric = [], []
    for j in indices:
        cells = [row[j] for _, row in data if j < len(row)]
        reason = _index_reason(names[j] if header else None, cells, j == 0)
        if reason is not None:
            label = f'"{names[j]}"' if names[j] else f"{j + 1} (no name)"
            hints.append(f"column {label} looks like a row index ({reason})")
        elif any(_is_number(c) for c in cells) and all(
            _is_number(c) or _is_missing(c) for c in cells
        ):
            numeric.append(j)
    return hints, numeric


def _unchosen(path, line, names, header, data, chosen, *, width, reason, option, excluded):
    """The InputError for columns nobody chose (``columns`` None), or None when the columns
    left are exactly the needed ones (``width``, else one) and none looks like a row index.
    ``excluded`` is the option that left columns out (``--inputs``, ``--se``) or None."""
    needed = 1 if width is None else width
    if len(chosen) < needed or len(names) == 1:
        return None  # a missing column: the caller's message; one column: nothing to guess
    hints, numeric = _survey(names, header, data, chosen)
    if len(chosen) == needed and not hints:
        return None
    where = _where(path, line)
    listing = _listing(names, chosen)
    others = f" besides the {excluded} columns" if excluded else ""
    if len(chosen) == needed:  # the right number, but a row index among them
        head = f"{where}: {'; '.join(hints)}, not data"
        # the user may know better: say how to take every column as data
        anyway = f" (if it is data, pass {_option_value(names, chosen, option)})"
        if len(numeric) == needed:
            return InputError(
                f"{head}; the columns of data are not guessed: pass "
                f"{_option_value(names, numeric, option)}{anyway}"
            )
        return InputError(
            f"{head}; that leaves {len(numeric)} column(s) of numbers{others} "
            f"({_listing(names, numeric) or 'none'}) where {_needed(needed)}{reason}{anyway}"
        )
    if width is None:  # deconvolve: one column, or --columns for points in R^p
        head = (
            f"{where}: {len(chosen)} columns ({listing}){others} and no {option} to say which "
            "are data"
        )
        tail = f"choose them with {option} (header names, or numbers 1..{len(names)})"
        if len(numeric) == 1:
            tail = f"pass {_option_value(names, numeric, option)}"
        elif len(numeric) > 1:
            tail = (
                f"pass {_option_value(names, numeric[:1], option)} for one column of "
                f"observations, or {_option_value(names, numeric, option)} for points in "
                f"R^{len(numeric)}"
            )
        return InputError("; ".join([head, *hints, tail]))
    chose = f"{excluded} left" if excluded else "the file has"
    head = f"{where}: {chose} {len(chosen)} columns ({listing}) where {_needed(needed)}{reason}"
    tail = f"choose {needed} of them with {option}"
    if len(numeric) == needed:
        tail += f", e.g. {_option_value(names, numeric, option)}"
    return InputError("; ".join([head, *hints, tail]))


def _select(path: str, names: tuple[str, ...], columns, option: str = "--columns") -> list[int]:
    if columns is None:
        return list(range(len(names)))
    chosen = []
    listing = _listing(names, range(len(names)))
    for item in columns:
        item = str(item).strip()
        if item in names:
            index = names.index(item)
        elif item.isdigit() and 1 <= int(item) <= len(names):
            index = int(item) - 1
        else:
            raise InputError(
                f"{path}: {option}: no column {item!r}; the file's columns are {listing} "
                f"(names from the header, or numbers 1..{len(names)})"
            )
        if index in chosen:
            raise InputError(f"{path}: {option}: column {item!r} is chosen twice")
        chosen.append(index)
    if not chosen:
        raise InputError(f"{path}: {option}: no column chosen")
    return chosen


def _parse_cell(path, line, label, cell, delimiter, *, first_row: bool) -> float:
    text = cell.strip()
    if _is_missing(text):
        return math.nan
    if _NUMBER.fullmatch(text):
        value = float(text)
        if math.isinf(value):
            raise InputError(
                f"{_where(path, line, label)}: {text!r} is not a finite number (write an empty "
                "cell or NA for a missing value where missing values are allowed)"
            )
        return value
    hint = _cell_hints(text, delimiter)
    if not hint and first_row:
        hint = f" (if line {line} is meant as a header, none of its names may be a number)"
    raise InputError(f"{_where(path, line, label)}: cannot parse {text!r} as a number{hint}")


def read_table(
    path,
    *,
    delimiter: str = ",",
    columns=None,
    width: int | None = None,
    width_reason: str = "",
    allow_missing: bool = False,
    prefix: str = "x",
    option: str = "--columns",
    exclude=None,
    exclude_option: str = "--inputs",
) -> Table:
    """Read a CSV of numbers, checking every cell; see the module docstring for the format.

    Args:
        path: the file.
        delimiter: one character separating cells.
        columns: names or 1-based numbers (strings or ints) of the columns to use, in that
            order. Cells of the other columns are not read. None: the file's columns (but
            ``exclude``), which must then be exactly the ones needed (``width``, or one when
            ``width`` is None) with no row index among them: which columns are data is never
            guessed (module docstring).
        width: the number of columns required after the selection (e.g. the observation
            dimension of a switching model), or None for any number of chosen columns (one
            when ``columns`` is None).
        width_reason: what requires ``width``, for the message (e.g. 'the scenario
            "maneuvering-target" observes 2 values per step').
        allow_missing: accept missing values (NaN in ``values``; a row may be partly missing).
        prefix: default column names prefix when there is no header.
        option: the command-line option that chose ``columns`` (for the messages).
        exclude: names or numbers of columns left out when ``columns`` is None (e.g. the
            --inputs columns, when the observations are the other ones).
        exclude_option: the command-line option that named ``exclude`` (for the messages):
            ``--inputs`` (filter) or ``--se`` (deconvolve).

    Returns:
        ``Table``.

    Raises:
        InputError: naming the file and, where there is one, the line and column.
    """
    path = str(path)
    if not isinstance(delimiter, str) or len(delimiter) != 1 or delimiter in '\r\n"#':
        raise InputError(
            f"--delimiter: expected one character (not a quote, # or newline), got {delimiter!r}"
        )
    raw = _read_bytes(path)
    text = _decode(path, raw)
    rows = _rows(path, text, delimiter)
    if not rows:
        raise InputError(
            f"{path}: the file is empty (no data rows); expected one row of numbers per "
            f"observation, separated by {_delimiter_name(delimiter)}"
        )
    first_line, first = rows[0]
    _check_delimiter(path, first_line, first, delimiter)
    header = _is_header(first)
    if header:
        names = _header_names(path, first_line, first)
        data = rows[1:]
        if not data:
            raise InputError(f"{_where(path, first_line)}: only a header, no data rows after it")
    else:
        p = len(first)
        names = (prefix,) if p == 1 else tuple(f"{prefix}{j + 1}" for j in range(p))
        data = rows
    p = len(names)
    chosen = _select(path, names, columns, option)
    if columns is None and exclude is not None:
        dropped = set(_select(path, names, exclude, exclude_option))
        chosen = [j for j in chosen if j not in dropped]
        if not chosen:
            raise InputError(f"{path}: no column left for the observations after {exclude_option}")
    reason = f": {width_reason}" if width_reason else ""
    if columns is None:  # never guess which columns are data
        error = _unchosen(
            path,
            first_line,
            names,
            header,
            data,
            chosen,
            width=width,
            reason=reason,
            option=option,
            excluded=exclude_option if exclude is not None else None,
        )
        if error is not None:
            raise error
    unnamed = [j for j in chosen if not names[j]]
    if unnamed:
        raise InputError(
            f"{_where(path, first_line, str(unnamed[0] + 1))}: empty column name; name the "
            f"column in the header to use it, or leave it out with {option}"
        )
    if width is not None and len(chosen) != width:
        listing = _listing(names, chosen)
        if columns is not None:
            raise InputError(
                f"{path}: {option} chose {len(chosen)} column(s) ({listing}) where "
                f"{_needed(width)}{reason}"
            )
        if exclude is not None:
            raise InputError(
                f"{path}: {exclude_option} left {len(chosen)} column(s) ({listing}) where "
                f"{_needed(width)}{reason}"
            )
        raise InputError(
            f"{_where(path, first_line, str(p + 1))}: missing column: the file has {p} "
            f"column(s) ({listing}) where {_needed(width)}{reason}"
        )
    labels = [_column_label(names if header else None, j) for j in range(p)]

    values = np.empty((len(data), len(chosen)), dtype=np.float64)
    lines = np.empty(len(data), dtype=np.int64)
    for i, (line, cells) in enumerate(data):
        if len(cells) != p:
            if len(cells) < p:
                where = _where(path, line, labels[len(cells)])
                what = f"missing: the row has {len(cells)} of {p} fields"
                extra = _cell_hints(cells[-1], delimiter) if cells else ""
            else:
                where = _where(path, line, str(p + 1))
                what = f"extra field {cells[p].strip()!r}: the row has {len(cells)} fields, "
                what += f"the {'header' if header else 'first row'} {p}"
                extra = ""
            raise InputError(f"{where}: {what}{extra}")
        row = [
            _parse_cell(
                path, line, labels[j], cells[j], delimiter, first_row=(i == 0 and not header)
            )
            for j in chosen
        ]
        gaps = [math.isnan(v) for v in row]
        if any(gaps):
            j = chosen[gaps.index(True)]
            if not allow_missing:
                token = cells[j].strip()
                raise InputError(
                    f"{_where(path, line, labels[j])}: missing value "
                    f"({repr(token) if token else 'empty cell'}); every "
                    f"{_NEEDS_A_NUMBER.get(option, 'observation')} needs a number"
                )
        values[i] = row
        lines[i] = line
    return Table(
        path=path,
        columns=tuple(names[j] for j in chosen),
        values=values,
        lines=lines,
        header=header,
        sha256=hashlib.sha256(raw).hexdigest(),
        positions=tuple(j + 1 for j in chosen),
    )


class TextColumn(NamedTuple):
    """One column of a CSV read as text (``read_text_column``).

    Attributes:
        path: the file name as given.
        name: the column's header name (or its number, as text, without a header).
        label: the column as the messages name it ('"date"', or its number).
        cells: (N,) the stripped cells, one per data row ("" for a missing one).
        lines: (N,) the line of the file each row came from (1-based).
        position: the 1-based column of the file.
    """

    path: str
    name: str
    label: str
    cells: tuple[str, ...]
    lines: np.ndarray
    position: int


def read_text_column(path, column, *, delimiter: str = ",", option: str = "--time") -> TextColumn:
    """Read one column (a header name or a 1-based number) of a CSV as text: a time column of
    dates or labels, with ``read_table``'s rows (blank and comment lines skipped), header rule
    and messages; a missing cell (``MISSING_TOKENS``) is ""."""
    path = str(path)
    text = _decode(path, _read_bytes(path))
    rows = _rows(path, text, delimiter)
    if not rows:
        raise InputError(f"{path}: the file is empty (no data rows)")
    first_line, first = rows[0]
    header = _is_header(first)
    if header:
        names = _header_names(path, first_line, first)
        data = rows[1:]
    else:
        names = tuple(str(j + 1) for j in range(len(first)))
        data = rows
    (j,) = _select(path, names, [column], option)
    label = _column_label(names if header else None, j)
    cells = []
    for line, row in data:
        if j >= len(row):
            raise InputError(f"{_where(path, line, label)}: missing: the row has {len(row)} fields")
        cell = row[j].strip()
        cells.append("" if _is_missing(cell) else cell)
    return TextColumn(
        path=path,
        name=names[j],
        label=label,
        cells=tuple(cells),
        lines=np.asarray([line for line, _ in data], dtype=np.int64),
        position=j + 1,
    )


def _positions_overlap(data: Table, other: Table, option: str) -> None:
    """Refuse a column chosen both as data (``--columns``) and by ``option``."""
    shared = [c for c, j in zip(other.columns, other.positions, strict=True) if j in data.positions]
    if shared:
        raise InputError(
            f"{data.path}: {option}: column {shared[0]!r} is also a data column (--columns); "
            f"the {option} columns must be other columns of the file"
        )


def read_standard_errors(path, columns, data: Table, *, delimiter: str = ",") -> Table:
    """Read the standard errors s_i (``--se``) of the rows of ``data`` from the same file.

    ``columns`` names one column (s_i applies to every coordinate of row i: x_i ~ N(z_i,
    s_i^2 I_p)) or as many columns as ``data`` has, in the order of its columns (s_ic, one per
    coordinate: x_ic ~ N(z_ic, s_ic^2)). Every cell must be a finite number > 0 whose 1 / s^2
    is finite in float64; a missing, non-numeric, zero, negative or too small cell is refused
    naming the file, line and column.

    Returns:
        ``Table`` of the standard errors: values (N, 1) or (N, p), the lines of ``data``.

    Raises:
        InputError: naming the file and, for a bad cell, the line and column.
    """
    path = str(path)
    columns = list(columns)
    p = data.values.shape[1]
    if len(columns) not in (1, p):
        raise InputError(
            f"--se: {len(columns)} columns for {p} data columns; give one column (the standard "
            f"error of every coordinate of a row) or one per data column ({p})"
        )
    se = read_table(path, delimiter=delimiter, columns=columns, option="--se", prefix="x")
    _positions_overlap(data, se, "--se")
    smallest = 1.0 / math.sqrt(np.finfo(np.float64).max)
    for j in range(se.values.shape[1]):
        bad = np.flatnonzero(~(se.values[:, j] > smallest))
        if bad.size:
            i = int(bad[0])
            value = se.values[i, j]
            what = "must be > 0" if value <= 0 else "is so small that 1 / se^2 overflows float64"
            raise InputError(f"{se.where(i, j)}: --se: a standard error {what}, got {value:g}")
    return se


def read_counts(path, columns, *, delimiter: str = ",") -> Table:
    """Read binomial counts (``--binomial HITS,TRIALS``): two columns of whole numbers, hits
    H_i and trials T_i with 0 <= H_i <= T_i, T_i >= 1 (and at most 2^53, exact in float64).

    Returns:
        ``Table`` with values (N, 2): H_i, T_i as float64.

    Raises:
        InputError: naming the file, the line and the column of the first bad cell.
    """
    columns = list(columns)
    if len(columns) != 2:
        raise InputError(
            f"--binomial: expected two columns HITS,TRIALS, got {len(columns)} "
            f"({','.join(columns)})"
        )
    counts = read_table(path, delimiter=delimiter, columns=columns, option="--binomial")
    limit = 2.0**53
    for j, what in enumerate(("hits", "trials")):
        values = counts.values[:, j]
        wrong = (values != np.floor(values)) | (values < (1 if j else 0)) | (values > limit)
        if j:
            wrong |= values < counts.values[:, 0]
        bad = np.flatnonzero(wrong)
        if bad.size:
            i = int(bad[0])
            value = values[i]
            if value != math.floor(value):
                why = "not a whole number"
            elif value < 0:
                why = "negative"
            elif j and value == 0:
                why = "zero trials (no proportion to estimate)"
            elif value > limit:
                why = "more than 2^53 (not exact in float64)"
            else:
                why = f"fewer trials than hits ({counts.values[i, 0]:g})"
            raise InputError(
                f"{counts.where(i, j)}: --binomial: {what} must be whole numbers with "
                f"0 <= hits <= trials and trials >= 1, got {value:g}: {why}"
            )
    return counts


# ----------------------------------------------------------------------------- JSON params


def _nested_array(path: str, field: str, value) -> np.ndarray:
    """A rectangular nested list of numbers (no bools, no strings) as float64."""

    def bad(what):
        return InputError(
            f'{path}: field "{field}": {what}; expected nested lists of numbers '
            f"({_field_format(field)})"
        )

    def walk(item):
        if isinstance(item, bool) or item is None or isinstance(item, str | dict):
            raise bad(f"{item!r} is not a number")
        if isinstance(item, list):
            shapes = {walk(x) for x in item}
            if len(shapes) > 1:
                raise bad("rows of different lengths (not a rectangular array)")
            return (len(item), *next(iter(shapes), ()))
        if not isinstance(item, int | float):
            raise bad(f"{item!r} is not a number")
        return ()

    walk(value)
    arr = np.asarray(value, dtype=np.float64)
    if not np.all(np.isfinite(arr)):
        raise bad("contains a non-finite number")
    return arr


def parse_params(path: str, document) -> tuple[dict[str, np.ndarray], dict[str, tuple[str, ...]]]:
    """The SwitchingParams fields as float arrays (the nine required ones and the optional ones
    present) and the optional labels, from a decoded JSON document; shapes are not checked here
    (``read_params`` does, with ``check_params``)."""
    if not isinstance(document, dict):
        raise InputError(
            f"{path}: expected a JSON object {{...}} with the fields "
            f"{', '.join(PARAMS_FIELDS)}, got a {type(document).__name__} {_SEE_HELP}"
        )
    known = (*PARAMS_FIELDS, *PARAMS_OPTIONAL_FIELDS, *PARAMS_LABELS)
    unknown = [k for k in document if k not in known]
    if unknown:
        raise InputError(
            f"{path}: unknown field(s) {', '.join(map(repr, unknown))}; the fields are "
            f"{', '.join(PARAMS_FIELDS)} and optionally "
            f"{', '.join([*PARAMS_OPTIONAL_FIELDS, *PARAMS_LABELS])}"
        )
    missing = [k for k in PARAMS_FIELDS if k not in document]
    if missing:
        raise InputError(
            f"{path}: missing field(s) {', '.join(map(repr, missing))}; "
            + "; ".join(_field_format(k) for k in missing)
            + f" {_SEE_HELP}"
        )
    fields = {k: _nested_array(path, k, document[k]) for k in PARAMS_FIELDS}
    fields |= {
        k: _nested_array(path, k, document[k]) for k in PARAMS_OPTIONAL_FIELDS if k in document
    }
    labels = {}
    for key in PARAMS_LABELS:
        if key in document:
            names = document[key]
            if (
                not isinstance(names, list)
                or not all(isinstance(n, str) and n.strip() for n in names)
                or len(set(names)) != len(names)
            ):
                raise InputError(
                    f'{path}: field "{key}": expected a list of distinct non-empty strings, '
                    f"got {names!r}"
                )
            labels[key] = tuple(n.strip() for n in names)
    return fields, labels


def read_params(path):
    """Read and validate switching-model parameters from a JSON file (``PARAMS_FORMAT``).

    Returns:
        (``SwitchingParams`` of float64 arrays, {"state_names": (...), "mode_names": (...)}
        for the labels present).

    Raises:
        InputError: naming the file and the field (JSON syntax errors: line and column).
    """
    from ..models.switching import SwitchingParams, check_params

    path = str(path)
    text = _decode(path, _read_bytes(path))
    if not text.strip():
        raise InputError(f"{path}: the file is empty; --params expects {PARAMS_FORMAT}")
    try:
        document = json.loads(text)
    except json.JSONDecodeError as err:
        raise InputError(
            f"{_where(path, err.lineno, str(err.colno))}: not valid JSON ({err.msg})"
        ) from None
    fields, labels = parse_params(path, document)
    try:
        params = check_params("params", SwitchingParams(**fields))
    except ValueError as err:
        message = str(err).removeprefix("params.")
        field, _, rest = message.partition(": ")
        if field in PARAMS_FIELDS or field in PARAMS_OPTIONAL_FIELDS:
            message = f'field "{field}": {rest} ({_field_format(field)})'
        raise InputError(f"{path}: {message} {_SEE_HELP}") from None
    m, d = params.initial_means.shape
    for key, size, what in (("state_names", d, "d"), ("mode_names", m, "M")):
        if key in labels and len(labels[key]) != size:
            raise InputError(f'{path}: field "{key}": {len(labels[key])} names for {what} = {size}')
    return params, labels


def params_document(params, labels: dict | None = None) -> dict:
    """The JSON document ``read_params`` reads, for ``params`` (and optional labels): the nine
    required fields, the emission offsets when ``params`` has them, the input weights when
    it has inputs (k > 0)."""
    doc = {k: np.asarray(getattr(params, k), dtype=np.float64).tolist() for k in PARAMS_FIELDS}
    for k in PARAMS_OPTIONAL_FIELDS:
        value = getattr(params, k, None)
        if value is not None and np.size(value) and (k != "emission_biases" or np.any(value)):
            doc[k] = np.asarray(value, dtype=np.float64).tolist()
    for key, names in (labels or {}).items():
        doc[key] = list(names)
    return doc


__all__ = [
    "INDEX_NAMES",
    "MISSING_TOKENS",
    "PARAMS_FIELDS",
    "PARAMS_FORMAT",
    "PARAMS_OPTIONAL_FIELDS",
    "InputError",
    "Table",
    "TextColumn",
    "params_document",
    "parse_params",
    "read_counts",
    "read_params",
    "read_standard_errors",
    "read_table",
    "read_text_column",
]
