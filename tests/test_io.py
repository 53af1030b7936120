"""``cep_gpu.io``: reading events, writing composite events."""

from __future__ import annotations

import re
import warnings
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import cep_gpu
from cep_gpu.errors import CepWarning, EventError
from cep_gpu.io import read_table, write_output


def test_a_pandas_output_written_to_parquet_reads_back_with_pandas(tmp_path):
    events = pd.DataFrame({"type": ["A", "B", "A", "B"], "ts": [0.5, 1.0, 1.5, 2.0]})
    out = cep_gpu.detect(events, "define Q pattern SEQ(A a, B b) within 1 s", backend="reference")
    path = tmp_path / "out.parquet"
    write_output(out, path)
    # was: TypeError: data type 'list<item: int64>[pyarrow]' not understood (pandas' metadata)
    back = pd.read_parquet(path)
    assert back["rule"].tolist() == ["Q", "Q"]
    assert back["ts"].tolist() == [1.0, 2.0]
    assert [list(i) for i in back["ids"]] == [[0, 1], [2, 3]]
    write_output(out, tmp_path / "out.csv")
    assert (tmp_path / "out.csv").read_text().splitlines()[1] == '"Q",1,"0 1"'


# -- reading events: what CSV inference and a folder of Parquet files make of bad input ------------


def _csv(tmp_path, data: bytes):
    path = tmp_path / "ev.csv"
    path.write_bytes(data)
    return path


@pytest.mark.parametrize("cell", ["99999999999999999999", "-99999999999999999999", "9223372036854775808"])
def test_a_csv_integer_beyond_int64_is_an_error_naming_it(tmp_path, cell):
    """pyarrow read the column as float64: 99999999999999999999 and ...98 compared equal."""
    path = _csv(tmp_path, f"type,ts,x\nA,1,5\nB,2,{cell}\n".encode())
    with pytest.raises(EventError, match=re.escape(
            f"column 'x' holds integers outside the int64 range (e.g. '{cell}' at row 1)")):
        read_table(path)
    # the id column too (it became float64: "must hold integers, got dtype float64")
    path = _csv(tmp_path, f"type,ts,id\nA,1,5\nB,2,{cell}\n".encode())
    with pytest.raises(EventError, match="column 'id' holds integers outside the int64 range"):
        read_table(path)


def test_csv_numbers_near_the_int64_bounds_that_are_no_error(tmp_path):
    # the int64 extremes in a float column (float64 rounds them to +-2**63), and float literals
    path = _csv(tmp_path, b"type,ts,x,y\nA,1,9223372036854775807,1e20\nB,2,-9223372036854775808,inf\nA,3,0.5,\n")
    table = read_table(path)
    assert table.column("x").type == pa.float64() and table.column("y").to_pylist()[:2] == [1e20, float("inf")]
    path = _csv(tmp_path, b"type,ts,x\nA,1,9223372036854775807\nB,2,-9223372036854775808\n")
    assert read_table(path).column("x").to_pylist() == [2**63 - 1, -(2**63)]


@pytest.mark.parametrize("data, message", [
    (b"type,ts,x,y\nA,1,1,0.5\nB,2,1,\xff\n", r"column 'y' is not UTF-8 text: row 1 holds b'\xff'"),
    (b"type,ts,x\nA,1,1\nB,2,1\nC\xe9,3,1\n", r"column 'type' is not UTF-8 text: row 2 holds b'C\xe9'"),
])
def test_a_csv_cell_that_is_not_utf8_is_named(tmp_path, data, message):
    """It was "holds bytes values (e.g. b'0.5')", a valid value, and for type a pandas hint."""
    with pytest.raises(EventError, match=re.escape(message) + "; save the file as UTF-8"):
        read_table(_csv(tmp_path, data))
    # the first bad row of many, whatever chunk it is in
    rows = b"".join(b"A,%d,1\n" % i for i in range(100_000))
    with pytest.raises(EventError, match=r"column 'x' is not UTF-8 text: row 77777 holds b'\\xff'"):
        read_table(_csv(tmp_path, b"type,ts,x\n" + rows.replace(b"A,77777,1", b"A,77777,\xff")))


def test_an_empty_type_in_a_csv_is_an_error_naming_its_row(tmp_path):
    """It was the event type "" (a warning then listed "(types: , B)")."""
    with pytest.raises(EventError, match=r"column 'type' is empty at row 1: every event needs a type"):
        read_table(_csv(tmp_path, b'type,ts,x\nB,1,1\n"",2,1\nB,3,1\n'))
    with pytest.raises(EventError, match=r"column 'type' is empty at row 0"):
        read_table(_csv(tmp_path, b"type,ts,x\n,1,1\nB,2,1\n"))


def test_a_csv_ts_of_dates_is_datetimes_at_midnight(tmp_path):
    """It was "column 'ts' holds date values ... convert it first"."""
    table = read_table(_csv(tmp_path, b"type,ts,x\nA,2024-01-01,1\nB,2024-01-02,1\n"))
    out = cep_gpu.detect(table, "define Q pattern SEQ(A a, B b) within 25 h", backend="reference")
    assert out["ts"].tolist() == [pd.Timestamp("2024-01-02")]
    assert str(out["ts"].dtype) == "datetime64[s]"  # (dates: datetimes in seconds, docs/api.md)


def _numbers_with_text(numbers: int, text: int, first: str = "numbers") -> bytes:
    """A CSV file whose attribute k holds ``numbers`` numbers and ``text`` words (words first or
    last), a null-like cell of each kind pyarrow reads as null in a number column, and text columns."""
    cells = [f"{i % 7}" for i in range(numbers)]
    words = [f"w{i}" for i in range(text)]
    cells = words + cells if first == "text" else cells + words
    cells += ["", "NA", "nan"]  # null in a column of numbers: not counted either way
    rows = [f"{'AB'[i % 2]},{i},{cell},room{i % 3}" for i, cell in enumerate(cells)]
    return ("type,ts,k,room\n" + "\n".join(rows) + "\n").encode()


def test_a_csv_column_of_numbers_read_as_text_warns_naming_the_first_word(tmp_path):
    """One word among numbers made the column text without a word, and rules compared its values
    as text: with '=', 1.0 and 1 differ."""
    path = _csv(tmp_path, b"type,ts,k\nA,1,1.0\nB,2,1\nA,3,  2\nB,4,oops\nA,5,inf\nB,6,\n"
                          + b"".join(b"A,%d,%d\n" % (i, i) for i in range(7, 17)))
    with pytest.warns(CepWarning) as caught:
        table = read_table(path)
    assert len(caught) == 1 and caught[0].filename == __file__  # the line that read the file
    assert str(caught[0].message) == (
        f"{path}: column 'k' is read as text, though 14 of its 15 values are numbers: row 3 holds "
        "'oops', so rules compare its values as text (with '=', '1.0' is not '1'). Fix the file, or "
        "cast the column to numbers after reading it (the text becoming null: "
        "pd.to_numeric(frame['k'], errors='coerce'))")
    # what it warns of: as text, the A with k 1.0 and the B with k 1 do not match
    rule = "define P(k: string) from B(k = $k) and each A(k = $k) within 5 s from B where k = $k"
    assert len(cep_gpu.detect(table, rule, backend="reference")) == 0
    frame = table.to_pandas()
    frame["k"] = pd.to_numeric(frame["k"], errors="coerce")
    assert len(cep_gpu.detect(frame, rule.replace("string", "float"), backend="reference")) == 1
    # more than one word: the first, and how many more
    with pytest.warns(CepWarning, match=r"18 of its 20 values are numbers: row 18 holds 'w0' \(and 1 more row holds text\)"):
        read_table(_csv(tmp_path, _numbers_with_text(18, 2)))


@pytest.mark.parametrize("numbers, text, first, warns", [
    (90, 10, "text", True),  # 90 %, the words first: the check reads on past them
    (89, 11, "text", False),
    (90, 10, "numbers", True),
    (8, 2, "numbers", False),  # 80 %
    (3, 30, "numbers", False),  # a text column with a few numbers
])
def test_only_a_column_of_at_least_90_percent_numbers_warns(tmp_path, numbers, text, first, warns):
    path = _csv(tmp_path, _numbers_with_text(numbers, text, first))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        table = read_table(path)
    assert table.column("k").type == pa.string()
    ours = [str(w.message) for w in caught if issubclass(w.category, CepWarning)]
    if warns:
        row = 0 if first == "text" else numbers
        assert len(ours) == 1 and ours[0].startswith(
            f"{path}: column 'k' is read as text, though {numbers} of its {numbers + text} values are "
            f"numbers: row {row} holds 'w0' (and {text - 1} more rows hold text)")
    else:
        assert ours == []


def test_columns_of_numbers_text_and_the_event_columns_give_no_warning(tmp_path):
    # numbers (with nulls), text, and text in type, ts and id, whose text is an error of its own later
    rows = "".join(f"A,{i},{i},{i},r{i % 3}\n" for i in range(20))
    path = _csv(tmp_path, f"type,ts,id,k,room\n{rows}B,abc,x,,r1\n1,21,21,NA,r2\n".encode())
    with warnings.catch_warnings():
        warnings.simplefilter("error", CepWarning)
        table = read_table(path)
    assert [table.schema.field(n).type for n in ("type", "ts", "id", "k", "room")] == [pa.string()] * 3 + [pa.int64(), pa.string()]


def test_the_csv_emptiness_check_reads_only_the_first_bytes(tmp_path, monkeypatch):
    def whole_file(self):
        raise AssertionError("read the whole file")

    monkeypatch.setattr(Path, "read_bytes", whole_file)
    assert read_table(_csv(tmp_path, b"type,ts\nA,1\n")).num_rows == 1
    with pytest.raises(EventError, match="the CSV file is empty"):
        read_table(_csv(tmp_path, b" \n\n"))


def _folder(tmp_path, *tables):
    folder = tmp_path / "d"
    folder.mkdir()
    for name, columns in zip("ab", tables):
        pq.write_table(pa.table(columns), folder / f"{name}.parquet")
    return folder


def test_a_parquet_folder_has_the_columns_of_all_its_files(tmp_path):
    """The first file's schema was taken: z was dropped ("no event in the input has attribute z")."""
    folder = _folder(tmp_path, {"type": ["A"], "ts": [1], "x": [1]},
                     {"type": ["B"], "ts": [2], "x": [2], "z": ["u"]})
    table = read_table(folder)
    assert table.column("z").to_pylist() == [None, "u"]
    assert pa.types.is_dictionary(table.column("z").type) and pa.types.is_dictionary(table.column("type").type)
    out = cep_gpu.detect(table, "define Q(z: string) pattern SEQ(A a, B b) within 5 s return z := b.z",
                         backend="reference")
    assert out["z"].tolist() == ["u"]


@pytest.mark.parametrize("first, second", [([1.7], [2]), ([2], [1.7])])
def test_a_parquet_folder_joins_int_and_float_to_float(tmp_path, first, second):
    """One order gave "Float value 1.700000 was truncated converting to int64", the other ints."""
    folder = _folder(tmp_path, {"type": ["A"], "ts": [1], "x": first}, {"type": ["B"], "ts": [2], "x": second})
    table = read_table(folder)
    assert table.column("x").type == pa.float64()
    assert table.column("x").to_pylist() == [float(first[0]), float(second[0])]


def test_a_parquet_folder_with_a_column_of_two_types_is_an_error_naming_them(tmp_path):
    """The text "1" was silently converted to the integer 1."""
    folder = _folder(tmp_path, {"type": ["A"], "ts": [1], "x": [1]}, {"type": ["B"], "ts": [2], "x": ["1"]})
    with pytest.raises(EventError, match=re.escape(
            f"column 'x' is int64 in {folder / 'a.parquet'} but string in {folder / 'b.parquet'}; "
            "give it one type in every file")):
        read_table(folder)


def test_an_empty_parquet_folder_says_so(tmp_path):
    """It was "events have no 'type' column (columns: [])"."""
    (tmp_path / "d").mkdir()
    with pytest.raises(EventError, match="the folder holds no Parquet file"):
        read_table(tmp_path / "d")


def test_a_partitioned_parquet_folder_keeps_its_keys(tmp_path):
    for key in ("n1", "n2"):
        (tmp_path / f"node={key}").mkdir()
        pq.write_table(pa.table({"type": ["A"], "ts": [1], "x": [1]}), tmp_path / f"node={key}" / "p.parquet")
    assert read_table(tmp_path).column("node").to_pylist() == ["n1", "n2"]


MS = pa.array([1_700_000_000_123], pa.timestamp("ms"))
US = pa.array([1_700_000_000_123_456], pa.timestamp("us"))
NS = pa.array([1_700_000_000_123_456_789], pa.timestamp("ns"))


@pytest.mark.parametrize(("first", "second", "joined"), [
    (MS, US, pa.timestamp("us")),
    (US, MS, pa.timestamp("us")),
    (MS, NS, pa.timestamp("ns")),
    (MS.cast(pa.timestamp("ms", "UTC")), US.cast(pa.timestamp("us", "UTC")), pa.timestamp("us", "UTC")),
    (pa.array([19675], pa.date32()), US, pa.timestamp("us")),
])
def test_a_parquet_folder_joins_timestamp_units_to_the_finer_one(tmp_path, first, second, joined):
    """A ts in ms in one file and in us in another was refused ("give it one type in every
    file"): every value is kept, in the finer unit."""
    folder = _folder(tmp_path, {"type": ["A"], "ts": first}, {"type": ["B"], "ts": second})
    table = read_table(folder)
    assert table.column("ts").type == joined
    if pa.types.is_date(first.type):  # a date is the datetime at midnight
        first = first.cast(pa.timestamp("s"))
    both = pa.table({"type": ["A", "B"], "ts": pa.concat_arrays([first.cast(joined), second.cast(joined)])})
    assert table.column("ts").to_pylist() == both.column("ts").to_pylist()  # (safe casts: nothing lost)
    # and the engine reads them as the one file of both would be read
    rule = "define Q pattern SEQ(A a, B b) within 10000 h"
    assert cep_gpu.detect(table, rule, backend="reference").equals(cep_gpu.detect(both, rule, backend="reference"))


@pytest.mark.parametrize("zones", [("UTC", None), (None, "UTC"), ("UTC", "Europe/Paris")])
def test_a_parquet_folder_with_ts_in_two_time_zones_names_both_files(tmp_path, zones):
    folder = _folder(tmp_path, {"type": ["A"], "ts": MS.cast(pa.timestamp("ms", zones[0]))},
                     {"type": ["B"], "ts": MS.cast(pa.timestamp("ms", zones[1]))})
    with pytest.raises(EventError, match=re.escape(f"column 'ts' is timestamp[ms{', tz=' + zones[0] if zones[0] else ''}] "
                                                   f"in {folder / 'a.parquet'} but timestamp[ms")) as info:
        read_table(folder)
    assert str(folder / "b.parquet") in str(info.value)


@pytest.mark.parametrize(("first", "second", "shown"), [
    (pa.array([-(10**12)], pa.timestamp("s")), NS, "timestamp[ns]"),  # year -29719 in ns: out of range
    (pa.array([2**60 + 1]), pa.array([0.5]), "double"),  # not exact as a float
    (pa.array([1]), pa.array([2**64 - 1], pa.uint64()), "int64"),
])
def test_a_parquet_folder_value_the_joined_type_cannot_hold_names_the_files(tmp_path, first, second, shown):
    """It was "cannot read the Parquet data: Integer value 1152921504606846977 not in range",
    naming neither the column nor a file."""
    folder = _folder(tmp_path, {"type": ["A"], "ts": first}, {"type": ["B"], "ts": second})
    with pytest.raises(EventError, match=re.escape(f"not every value can be read as {shown}")) as info:
        read_table(folder)
    message = str(info.value)
    assert "column 'ts'" in message and "a.parquet" in message and "b.parquet" in message


def test_a_damaged_parquet_file_is_an_error_naming_it(tmp_path):
    """Damaged pages (the footer intact) gave "cep-gpu: error: Unexpected end of stream"."""
    import numpy as np

    path = tmp_path / "big.parquet"
    pd.DataFrame({"type": ["A", "B"] * 500, "ts": np.arange(1000) / 10, "x": np.arange(1000)}).to_parquet(
        path, compression=None)
    data = bytearray(path.read_bytes())
    data[100:3000] = b"\xff" * 2900
    path.write_bytes(bytes(data))
    with pytest.raises(EventError, match=re.escape(f"{path}: cannot read the Parquet data: ")):
        read_table(path)
    (tmp_path / "half.parquet").write_bytes(bytes(data[: len(data) // 2]))
    with pytest.raises(EventError, match=re.escape(f"{tmp_path / 'half.parquet'}: cannot read the Parquet data: ")):
        read_table(tmp_path / "half.parquet")


@pytest.mark.parametrize(("data", "message"), [
    (b"\xff\xfe" + "type,ts\nA,0\n".encode("utf-16-le"),
     "the CSV file is UTF-16 (little-endian) text, by its byte order mark; save it as UTF-8"),
    (b"\xfe\xff" + "type,ts\nA,0\n".encode("utf-16-be"),
     "the CSV file is UTF-16 (big-endian) text, by its byte order mark; save it as UTF-8"),
    (b"\xff\xfe\x00\x00" + "type,ts\nA,0\n".encode("utf-32-le"),
     "the CSV file is UTF-32 (little-endian) text, by its byte order mark; save it as UTF-8"),
    # was a UnicodeDecodeError ('utf-8' codec can't decode byte 0xfe), naming no file
    (b"\x00\x00\xfe\xff" + "type,ts\nA,0\n".encode("utf-32-be"),
     "the CSV file is UTF-32 (big-endian) text, by its byte order mark; save it as UTF-8"),
    (b"\xef\xbb\xbf\n", "the CSV file is empty; it needs a header row naming at least 'type' and 'ts'"),
])
def test_a_csv_file_that_is_not_utf8_or_only_a_byte_order_mark_says_so(tmp_path, data, message):
    """A UTF-16 file was "CSV parse error: Expected 2 columns, got 1"; a byte order mark alone
    was pyarrow's "Empty CSV file" rather than the reader's own message."""
    path = tmp_path / "e.csv"
    path.write_bytes(data)
    with pytest.raises(EventError, match=re.escape(f"{path}: {message}")):
        read_table(path)


def test_a_csv_file_with_a_byte_order_mark_and_quoted_header_reads_as_plain_csv(tmp_path):
    plain = tmp_path / "plain.csv"
    plain.write_text("type,ts,x\nA,0,1\nB,0.5,2\n")
    odd = tmp_path / "odd.csv"
    odd.write_bytes(b'\xef\xbb\xbf"type","ts","x"\n"A",0,1\n"B",0.5,2\n')
    assert read_table(odd).equals(read_table(plain))
