"""Reading a user's CSV (``attnbayes.app.user_data.read_table``): which columns are data is
never guessed, and a column named like an index is refused only when it is one."""

import pytest

from attnbayes.app.user_data import InputError, read_table


def _csv(tmp_path, text: str):
    path = tmp_path / "data.csv"
    path.write_text(text)
    return path


def test_a_data_column_named_index_is_read(tmp_path):
    """ "index" is also a name for data (a price index): with values that are not the row
    numbers, the column is data."""
    path = _csv(tmp_path, "gdp,index\n1.5,100.2\n2.5,101.3\n0.5,99.8\n")
    table = read_table(path, width=2)
    assert table.columns == ("gdp", "index")
    assert table.values[:, 1].tolist() == [100.2, 101.3, 99.8]


def test_a_column_named_index_holding_row_numbers_is_refused_with_a_way_out(tmp_path):
    """A column "index" holding 0..N-1 is named as a likely row index; the message also says
    how to take it as data."""
    path = _csv(tmp_path, "index,gdp\n0,1.5\n1,2.5\n2,0.5\n")
    with pytest.raises(InputError) as err:
        read_table(path, width=2)
    message = str(err.value)
    assert 'column "index" looks like a row index (its header is "index" and it holds' in message
    assert "(if it is data, pass --columns index,gdp)" in message
    assert read_table(path, width=2, columns=["index", "gdp"]).values.shape == (3, 2)


# ----------------------------------------------------------------------------- --se, --binomial


SE_CELLS = {
    "zero": (
        "x,se\n1,0.5\n2,0\n",
        ["se"],
        'line 3, column "se": --se: a standard error must be > 0',
    ),
    "negative": ("x,se\n1,-0.5\n", ["se"], 'line 2, column "se": --se: a standard error must be'),
    "tiny": (
        "x,se\n1,0.5\n2,0.5\n3,1e-300\n",
        ["se"],
        'line 4, column "se": --se: a standard error is so small that 1 / se^2 overflows',
    ),
    "missing": (
        "x,se\n1,0.5\n2,NA\n",
        ["se"],
        "line 3, column \"se\": missing value ('NA'); every standard error needs a number",
    ),
    "empty-cell": ("x,se\n1,\n", ["se"], 'line 2, column "se": missing value (empty cell)'),
    "not-a-number": (
        "x,se\n1,0.5\n# a comment\n2,abc\n",
        ["se"],
        "line 4, column \"se\": cannot parse 'abc' as a number",
    ),
    "headerless": ("1,0.5\n2,-1\n", ["2"], "line 2, column 2: --se: a standard error must be > 0"),
    "per-coordinate": (
        "a,b,sa,sb\n1,2,0.5,0.5\n1,2,0.5,0\n",
        ["sa", "sb"],
        'line 3, column "sb": --se: a standard error must be > 0',
    ),
}


@pytest.mark.parametrize("case", list(SE_CELLS))
def test_bad_standard_errors_are_named_by_line_and_column(case, tmp_path):
    from attnbayes.app.user_data import read_standard_errors

    text, se, message = SE_CELLS[case]
    path = _csv(tmp_path, text)
    data_columns = {"headerless": ["1"], "per-coordinate": ["a", "b"]}.get(case, ["x"])
    data = read_table(path, columns=data_columns)
    with pytest.raises(InputError) as err:
        read_standard_errors(path, se, data)
    assert str(err.value).startswith(f"{path} line"), err.value
    assert message in str(err.value)


def test_standard_errors_are_read_per_row_or_per_coordinate(tmp_path):
    from attnbayes.app.user_data import read_standard_errors

    path = _csv(tmp_path, "a,sa,b,sb\n1,0.5,2,3\n\n# skipped\n4,0.25,5,6\n")
    data = read_table(path, columns=["a", "b"])
    one = read_standard_errors(path, ["sa"], data)
    assert one.columns == ("sa",) and one.values.tolist() == [[0.5], [0.25]]
    assert one.lines.tolist() == data.lines.tolist() == [2, 5]
    both = read_standard_errors(path, ["sa", "sb"], data)
    assert both.values.tolist() == [[0.5, 3.0], [0.25, 6.0]]
    # without --columns the data are the columns --se leaves, which must be one
    alone = tmp_path / "alone.csv"
    alone.write_text("x,se\n1,0.5\n")
    assert read_table(alone, exclude=["se"], exclude_option="--se").columns == ("x",)
    with pytest.raises(InputError, match=r"2 columns \(a, b\) besides the --se columns and no"):
        read_table(path, exclude=["sa", "sb"], exclude_option="--se")


@pytest.mark.parametrize(
    ("columns", "se", "message"),
    [
        (["a"], ["a"], "--se: column 'a' is also a data column (--columns)"),
        (["a", "b"], ["sa", "sb", "sa"], "--se: 3 columns for 2 data columns"),
        (["a"], ["nope"], "--se: no column 'nope'; the file's columns are a, sa, b, sb"),
    ],
)
def test_se_columns_that_do_not_fit_the_data_are_refused(columns, se, message, tmp_path):
    from attnbayes.app.user_data import read_standard_errors

    path = _csv(tmp_path, "a,sa,b,sb\n1,0.5,2,3\n")
    with pytest.raises(InputError) as err:
        read_standard_errors(path, se, read_table(path, columns=columns))
    assert message in str(err.value)


COUNT_CELLS = {
    "negative-hits": ("h,t\n1,4\n-1,4\n", 'line 3, column "h": --binomial: hits', "negative"),
    "hits-beyond-trials": ("h,t\n5,4\n", 'line 2, column "t": --binomial: trials', "fewer trials"),
    "zero-trials": ("h,t\n0,0\n", 'line 2, column "t": --binomial: trials', "zero trials"),
    "fraction": ("h,t\n1,4\n2.5,4\n", 'line 3, column "h"', "not a whole number"),
    "fractional-trials": ("h,t\n1,4.5\n", 'line 2, column "t"', "not a whole number"),
    "missing": ("h,t\n1,NA\n", 'line 2, column "t": missing value', "every count needs a number"),
    "text": ("h,t\n1,four\n", 'line 2, column "t": cannot parse', "'four'"),
}


@pytest.mark.parametrize("case", list(COUNT_CELLS))
def test_bad_counts_are_named_by_line_and_column(case, tmp_path):
    from attnbayes.app.user_data import read_counts

    text, where, why = COUNT_CELLS[case]
    path = _csv(tmp_path, text)
    with pytest.raises(InputError) as err:
        read_counts(path, ["h", "t"])
    assert str(err.value).startswith(f"{path} {where}"), err.value
    assert why in str(err.value)


def test_counts_are_read_as_hits_and_trials(tmp_path):
    from attnbayes.app.user_data import read_counts

    path = _csv(tmp_path, "player,ab,h\nA,45,12\nB,1,0\nC,3,3\n")
    counts = read_counts(path, ["h", "ab"])
    assert counts.columns == ("h", "ab")
    assert counts.values.tolist() == [[12, 45], [0, 1], [3, 3]]
    with pytest.raises(InputError, match="--binomial: expected two columns HITS,TRIALS, got 1"):
        read_counts(path, ["h"])
