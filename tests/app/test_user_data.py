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
