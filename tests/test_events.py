"""EventTable ingestion (cep_gpu.events): conversion, sorting, concatenation and every EventError."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from cep_gpu import EventError
from cep_gpu.events import EventTable, StringDictionary


def _frame(**cols) -> pd.DataFrame:
    base = {"type": ["A", "B", "A"], "ts": [1.0, 2.0, 3.0]}
    base.update(cols)
    return pd.DataFrame(base)


# -- conversion -------------------------------------------------------------------------------------


def test_numeric_seconds_become_nanoseconds_and_default_ids_are_row_positions():
    t = EventTable.from_pandas(_frame())
    assert t.ts.dtype == np.int64
    assert t.ts.tolist() == [1_000_000_000, 2_000_000_000, 3_000_000_000]
    assert t.ids.tolist() == [0, 1, 2]
    assert [t.type_names[c] for c in t.types] == ["A", "B", "A"]
    assert t.rows_of_type("A").tolist() == [0, 2]
    assert t.rows_of_type("Z").tolist() == []


@pytest.mark.parametrize("unit,scale", [("ns", 1), ("us", 1_000), ("ms", 10**6), ("s", 10**9),
                                        ("min", 60 * 10**9), ("h", 3600 * 10**9)])
def test_time_units(unit, scale):
    t = EventTable.from_pandas(pd.DataFrame({"type": ["A"], "ts": [2]}), time_unit=unit)
    assert t.ts.tolist() == [2 * scale]
    assert t.time.from_ns(t.ts).tolist() == [2]


def test_datetime_ts_round_trips():
    ts = pd.to_datetime(["2024-01-01 09:00:00", "2024-01-01 09:00:01.500"], format="ISO8601")
    t = EventTable.from_pandas(pd.DataFrame({"type": ["A", "B"], "ts": ts}))
    assert t.ts[1] - t.ts[0] == 1_500_000_000
    assert list(t.time.from_ns(t.ts)) == list(ts)


def test_timezone_aware_ts_round_trips():
    ts = pd.to_datetime(["2024-01-01 09:00:00"]).tz_localize("Europe/Rome")
    t = EventTable.from_pandas(pd.DataFrame({"type": ["A"], "ts": ts}))
    back = t.time.from_ns(t.ts)
    assert back.iloc[0] == ts[0]
    assert str(back.dt.tz) == "Europe/Rome"


def test_batch_input_is_sorted_stably_by_ts():
    df = pd.DataFrame({"type": ["A", "B", "C", "D"], "ts": [3, 1, 3, 1]})
    t = EventTable.from_pandas(df)
    assert [t.type_names[c] for c in t.types] == ["B", "D", "A", "C"]
    assert t.ids.tolist() == [1, 3, 0, 2]


def test_explicit_ids_break_timestamp_ties():
    df = pd.DataFrame({"type": ["A", "B"], "ts": [1, 1], "id": [9, 4]})
    t = EventTable.from_pandas(df)
    assert t.ids.tolist() == [4, 9]


def test_attribute_kinds_nulls_and_string_codes():
    df = _frame(
        i=pd.array([1, None, 3], dtype="Int64"),
        f=[1.5, np.nan, 2.0],
        s=["x", None, "x"],
        b=[True, False, True],
    )
    t = EventTable.from_pandas(df)
    assert t.columns["i"].kind == "int" and t.columns["i"].valid.tolist() == [True, False, True]
    assert t.columns["f"].kind == "float" and t.columns["f"].valid.tolist() == [True, False, True]
    s = t.columns["s"]
    assert s.kind == "string" and s.valid.tolist() == [True, False, True]
    assert s.values[0] == s.values[2] == t.strings.lookup("x")
    assert t.strings.lookup("never") == -2
    assert t.columns["b"].kind == "bool"
    # per-type schema only lists attributes a type actually has
    assert t.has_attribute("A", "i") and not t.has_attribute("B", "i")


def test_python_ints_with_none_are_int():
    t = EventTable.from_pandas(_frame(k=[1, None, 2]))
    assert t.columns["k"].valid.tolist() == [True, False, True]
    assert t.columns["k"].values[[0, 2]].tolist() == [1, 2]


def test_to_pandas_round_trip():
    df = _frame(s=["x", None, "y"], f=[1.0, 2.0, np.nan])
    back = EventTable.from_pandas(df).to_pandas()
    assert back["type"].tolist() == ["A", "B", "A"]
    assert back["s"].tolist() == ["x", None, "y"]
    assert back["f"].isna().tolist() == [False, False, True]


def test_shared_string_dictionary_and_concat():
    strings = StringDictionary()
    a = EventTable.from_pandas(pd.DataFrame({"type": ["A"], "ts": [2], "id": [0], "s": ["u"]}), strings=strings)
    b = EventTable.from_pandas(
        pd.DataFrame({"type": ["B", "A"], "ts": [1, 3], "id": [1, 2], "s": ["v", "u"], "x": [1.0, 2.0]}),
        strings=strings,
    )
    assert a.strings is strings and b.strings is strings
    c = a.concat(b)
    assert c.ids.tolist() == [1, 0, 2]  # merged in (ts, id) order
    assert [c.type_names[t] for t in c.types] == ["B", "A", "A"]
    assert c.columns["s"].values[1] == c.columns["s"].values[2]
    assert c.columns["x"].valid.tolist() == [True, False, True]
    other = EventTable.from_pandas(pd.DataFrame({"type": ["A"], "ts": [5]}))
    with pytest.raises(ValueError, match="StringDictionary"):
        c.concat(other)


def test_concat_of_int_and_float_is_float():
    strings = StringDictionary()
    a = EventTable.from_pandas(pd.DataFrame({"type": ["A"], "ts": [1], "id": [0], "x": [1]}), strings=strings)
    b = EventTable.from_pandas(pd.DataFrame({"type": ["A"], "ts": [2], "id": [1], "x": [1.5]}), strings=strings)
    c = a.concat(b)
    assert c.columns["x"].kind == "float"
    assert c.columns["x"].values.tolist() == [1.0, 1.5]


def test_from_arrow():
    t = EventTable.from_arrow(pa.table({"type": ["A", "B"], "ts": [2.0, 1.0]}))
    assert t.ids.tolist() == [1, 0]


# -- errors -------------------------------------------------------------------------------------------


def test_not_a_dataframe():
    with pytest.raises(EventError, match="pandas DataFrame"):
        EventTable.from_pandas([{"type": "A", "ts": 1}])


@pytest.mark.parametrize("missing", ["type", "ts"])
def test_missing_required_column(missing):
    df = _frame().drop(columns=[missing])
    with pytest.raises(EventError, match=f"no '{missing}' column"):
        EventTable.from_pandas(df)


def test_null_ts_names_the_row():
    df = _frame(ts=[1.0, None, 3.0])
    with pytest.raises(EventError, match="'ts' is null at row 1"):
        EventTable.from_pandas(df)


def test_null_datetime_ts():
    df = pd.DataFrame({"type": ["A", "B"], "ts": pd.to_datetime(["2024-01-01", None])})
    with pytest.raises(EventError, match="'ts' is null at row 1"):
        EventTable.from_pandas(df)


def test_infinite_ts():
    with pytest.raises(EventError, match="not finite at row 2"):
        EventTable.from_pandas(_frame(ts=[1.0, 2.0, np.inf]))


@pytest.mark.parametrize(("bad", "message"), [
    (["a", "b", "c"], r"holds 'a' at row 0, which is neither a number nor a datetime \(and 2 more"),
    ([1.0, "abc", 3.0], r"holds 'abc' at row 1, which is neither a number nor a datetime: use datetime64"),
    (pd.Categorical(["1", "2", "oops"]), r"holds 'oops' at row 2, which is neither"),  # what a CSV gives
    (["2024-01-01", "2024-01-02", "later"], r"holds 'later' at row 2, which is neither"),
    (["1", "2", "3"], r"holds text \(e.g. '1' at row 0\): use datetime64 or numbers in time_unit"),
    ([True, False, True], r"holds booleans \(e.g. True at row 0\)"),
    (pd.to_timedelta([1, 2, 3], unit="s"), r"has unsupported dtype timedelta64\[ns\]"),
])
def test_unsupported_ts_values_name_the_first_row_at_fault(bad, message):
    """A 'ts' that is not numbers or datetimes: the first row whose value is neither, and the value
    (it was 'unsupported dtype category', naming no row, and a dtype the user never made)."""
    tables = [_frame(ts=bad)]
    try:
        tables.append(pa.Table.from_pandas(_frame(ts=bad), preserve_index=False))
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        pass  # a column Arrow cannot hold (mixed objects): the pandas path only
    for events in tables:
        with pytest.raises(EventError, match=r"^column 'ts' " + message) as err:
            (EventTable.from_pandas if isinstance(events, pd.DataFrame) else EventTable.from_arrow)(events)
        assert "category" not in str(err.value)


def test_unknown_time_unit():
    with pytest.raises(EventError, match="unknown time_unit 'days'"):
        EventTable.from_pandas(_frame(), time_unit="days")


def test_null_type():
    with pytest.raises(EventError, match="'type' is null at row 2"):
        EventTable.from_pandas(_frame(type=["A", "B", None]))


def test_duplicate_ids():
    with pytest.raises(EventError, match="duplicate id 7"):
        EventTable.from_pandas(_frame(id=[7, 1, 7]))


def test_negative_ids_are_reserved():
    with pytest.raises(EventError, match="negative"):
        EventTable.from_pandas(_frame(id=[0, -3, 1]))


def test_null_and_non_integer_ids():
    with pytest.raises(EventError, match="'id' is null at row 1"):
        EventTable.from_pandas(_frame(id=pd.array([1, None, 2], dtype="Int64")))
    with pytest.raises(EventError, match="'id' must hold integers"):
        EventTable.from_pandas(_frame(id=[1.5, 2.5, 3.5]))


def test_mixed_attribute_types():
    with pytest.raises(EventError, match="'v' mixes value types"):
        EventTable.from_pandas(_frame(v=[1, "one", 2]))


def test_unsupported_and_out_of_range_attribute_values():
    import decimal

    with pytest.raises(EventError, match="'v' holds Decimal values"):
        EventTable.from_pandas(_frame(v=[decimal.Decimal(1)] * 3))
    with pytest.raises(EventError, match="'v' holds integers outside the int64 range"):
        EventTable.from_pandas(_frame(v=pd.Series([1, 2**70, 3], dtype=object)))


def test_datetime_attribute_rejected():
    with pytest.raises(EventError, match="'when' holds datetimes"):
        EventTable.from_pandas(_frame(when=pd.to_datetime(["2024-01-01"] * 3)))


def test_concat_with_conflicting_kinds():
    strings = StringDictionary()
    a = EventTable.from_pandas(pd.DataFrame({"type": ["A"], "ts": [1], "id": [0], "v": ["x"]}), strings=strings)
    b = EventTable.from_pandas(pd.DataFrame({"type": ["A"], "ts": [2], "id": [1], "v": [1.0]}), strings=strings)
    with pytest.raises(EventError, match=r"attribute 'v' holds float values \(first in event A\(id=1\)\) but string"):
        a.concat(b)


def test_arrow_and_categorical_input_ingest_like_object_strings():
    # dictionary-encoded strings (Arrow input, pandas categoricals) take the codes path; the
    # table must be the same as from plain object strings, nulls included
    import pyarrow as pa

    df = pd.DataFrame({
        "type": ["A", "B", "A", "C"], "ts": [1.0, 2.0, 3.0, 4.0],
        "room": ["r1", None, "r2", "r1"], "k": pd.array([1, None, 3, 4], dtype="Int64"),
    })
    plain = EventTable.from_pandas(df)
    for other in (EventTable.from_arrow(pa.Table.from_pandas(df, preserve_index=False)),
                  EventTable.from_pandas(df.astype({"type": "category", "room": "category"}))):
        assert other.type_names == plain.type_names
        assert other.types.tolist() == plain.types.tolist()
        for name in ("room", "k"):
            a, b = plain.columns[name], other.columns[name]
            assert a.kind == b.kind and a.valid.tolist() == b.valid.tolist()
            va, vb = a.values[a.valid], b.values[b.valid]
            if a.kind == "string":
                va, vb = plain.strings.decode(va), other.strings.decode(vb)
            assert va.tolist() == vb.tolist()
        assert other.schema == plain.schema


def test_detect_on_arrow_input_equals_pandas_input():
    import pyarrow as pa

    import cep_gpu

    df = pd.DataFrame({"type": ["P", "P", "V", "V"], "ts": [1.0, 2.0, 2.5, 3.0],
                       "painting": ["m", "n", "m", None]})
    rule = "define T from V(painting=$p) and each P(painting=$p) within 5 s from V"
    a = cep_gpu.detect(pa.Table.from_pandas(df, preserve_index=False), rule, backend="cpu")
    b = cep_gpu.detect(df, rule, backend="cpu")
    assert a.equals(b) and len(a) == 1
