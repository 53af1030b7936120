"""Ingestion edge cases (issue 11): untyped (all-null, empty, absent) columns, timestamp ranges,
duplicate columns, empty files, unusual ``type`` / ``id`` / attribute values."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
from conftest import id_tuples

import cep_gpu
from cep_gpu import EventError
from cep_gpu.io import read_table

TOUCH = """
define Touch(room: string, painting: string)
from   Vibration(painting=$p and value>3.0) and
       each PeopleNear(painting=$p) within 2 min. from Vibration
where  room=Vibration.room and painting=Vibration.painting
"""

EVENTS = pd.DataFrame({
    "type": ["PeopleNear", "Vibration"],
    "ts": [1.0, 2.0],
    "painting": ["M", "M"],
    "room": [None, None],
    "value": [None, 4.2],
})


def _check_touch(out: pd.DataFrame, n: int) -> None:
    assert id_tuples(out) == [(1, 0)][:n]
    assert list(out.columns) == ["rule", "ts", "ids", "room", "painting"]
    assert out["room"].isna().all()
    assert out["room"].dtype == object  # the declared string, not the float pandas reads
    assert out["painting"].tolist() == ["M"][:n]


# -- item 2: an all-null column has no type of its own: it takes the declared one --------------


@pytest.mark.parametrize(
    "events",
    [
        pytest.param(EVENTS, id="all-None"),
        pytest.param(EVENTS.assign(room=[np.nan, np.nan]), id="all-NaN"),
        pytest.param(EVENTS.drop(columns="room"), id="absent"),
        pytest.param(EVENTS.assign(room=pd.Series([None, None], dtype="string")), id="all-NA-string-dtype"),
    ],
)
def test_untyped_output_attribute_takes_declared_type(events, backend):
    out = cep_gpu.detect(events, cep_gpu.parse_rule(TOUCH), backend=backend)
    _check_touch(out, 1)


def test_empty_frame_gives_empty_output_of_declared_types():
    empty = EVENTS.iloc[:0]
    out = cep_gpu.detect(empty, cep_gpu.parse_rule(TOUCH), backend="cpu")
    _check_touch(out, 0)
    arrow = cep_gpu.detect(empty, cep_gpu.parse_rule(TOUCH), backend="cpu", output="arrow")
    assert arrow.schema.field("room").type == pa.string()


def test_csv_with_blank_column(tmp_path):
    path = tmp_path / "events.csv"
    path.write_text("type,ts,painting,room,value\nPeopleNear,1.0,M,,\nVibration,2.0,M,,4.2\n")
    out = cep_gpu.detect(read_table(path), cep_gpu.parse_rule(TOUCH), backend="cpu")
    _check_touch(out, 1)


def test_engine_publish_of_events_without_the_attribute():
    # the docs/api.md streaming example: the first event has no `room`, and neither has the second
    engine = cep_gpu.Engine([cep_gpu.parse_rule(TOUCH)], backend="cpu")
    first = engine.publish({"type": "PeopleNear", "ts": 1.0, "painting": "Mona"})
    assert len(first) == 0
    out = engine.publish({"type": "Vibration", "ts": 2.0, "painting": "Mona", "value": 4.0})
    assert id_tuples(out) == [(1, 0)]
    assert out["room"].isna().all()


def test_typed_column_of_another_kind_still_rejected():
    # values present in the input do have a kind: a number where a string is declared is an error
    events = EVENTS.assign(room=[1.5, 2.5])
    with pytest.raises(cep_gpu.RuleError, match="'room' is declared string but its value is float"):
        cep_gpu.detect(events, cep_gpu.parse_rule(TOUCH), backend="cpu")


# -- item 3: timestamps whose nanoseconds do not fit in an int64 --------------------------------


def _frame(ts) -> pd.DataFrame:
    return pd.DataFrame({"type": ["A"] * len(ts), "ts": ts})


OUT_OF_RANGE = [
    pytest.param(np.array([1, 9_300_000_000], np.int64), "s", "9300000000", id="int-s-9.3e9"),
    pytest.param(np.array([1, 10**10], np.int64), "s", "10000000000", id="int-s-1e10"),
    pytest.param(np.array([1, -(10**10)], np.int64), "s", "-10000000000", id="int-s-neg"),
    pytest.param(np.array([1.0, 1e12]), "s", "1000000000000.0", id="float-s-1e12"),
    pytest.param(np.array([1.0, 9.3e15]), "ms", "9300000000000000.0", id="float-ms"),
    pytest.param(np.array([1, 2**63], np.uint64), "ns", "9223372036854775808", id="uint64-2^63-ns"),
    pytest.param(np.array([1, 2**40], np.uint64), "s", "1099511627776", id="uint64-s"),
    pytest.param(
        np.array(["2000-01-01", "3000-01-01"], dtype="datetime64[s]"), "s", "3000-01-01", id="datetime64[s]-3000"
    ),
    pytest.param(
        pd.Series(np.array(["2000-01-01", "1500-01-01"], dtype="datetime64[ms]")).dt.tz_localize("UTC"),
        "s", "1500-01-01", id="tz-aware-1500",
    ),
]


@pytest.mark.parametrize("source", ["pandas", "arrow"])
@pytest.mark.parametrize(("ts", "unit", "shown"), OUT_OF_RANGE)
def test_timestamp_out_of_int64_ns_range(ts, unit, shown, source):
    frame = _frame(ts)
    events = frame if source == "pandas" else pa.Table.from_pandas(frame, preserve_index=False)
    rule = cep_gpu.parse_rule("define X from A() as a")
    with pytest.raises(EventError) as err:
        cep_gpu.detect(events, rule, backend="cpu", time_unit=unit)
    msg = str(err.value)
    assert "column 'ts' at row 1" in msg and shown in msg and "representable range" in msg
    if np.asarray(ts).dtype.kind in "iuf":
        scale = {"s": 10**9, "ms": 10**6, "ns": 1}[unit]
        assert f"to {(2**63 - 1) // scale} with time_unit='{unit}'" in msg
    else:
        assert "1677-09-21 00:12:43 to 2262-04-11 23:47:16 UTC" in msg


@pytest.mark.parametrize(
    ("ts", "unit"),
    [
        (np.array([9_223_372_030, 9_223_372_036], np.int64), "s"),
        (np.array([-9_223_372_036, -9_223_372_030], np.int64), "s"),
        (np.array([2**63 - 10**9, 2**63 - 1], np.uint64), "ns"),
        (np.array([9.2e9, 9.2e9 + 1.5]), "s"),
        (np.array(["2262-04-11T23:47:00", "2262-04-11T23:47:16"], dtype="datetime64[s]"), "s"),
        (np.array(["1677-09-21T00:12:44", "1677-09-21T00:12:50"], dtype="datetime64[s]"), "s"),
    ],
)
def test_timestamps_at_the_edges_of_the_range_are_kept(ts, unit, backend):
    rule = cep_gpu.parse_rule("define AB from B() as b and each A() as a within 1 min from b")
    events = pd.DataFrame({"type": ["A", "B"], "ts": ts})
    out = cep_gpu.detect(events, rule, backend=backend, time_unit=unit)
    assert id_tuples(out) == [(1, 0)]
    assert out["ts"].iloc[0] == events["ts"].iloc[1]  # the input's value comes back unchanged


def test_sub_nanosecond_fractions_round_to_the_nearest_ns():
    # documented (docs/api.md, "Timestamps"): float ts are rounded to whole ns, so two events
    # less than half a ns apart get the same timestamp and are ordered by id
    events = pd.DataFrame({"type": ["B", "A"], "ts": [1.0 + 2e-10, 1.0], "id": [0, 1]})
    table = cep_gpu.events.EventTable.from_pandas(events, time_unit="s")
    assert table.ts.tolist() == [1_000_000_000, 1_000_000_000]
    assert table.ids.tolist() == [0, 1]


# -- items 8 and 10: duplicate columns, empty CSV, `type` as numbers, ids and ints beyond int64 ---


@pytest.mark.parametrize("name", ["x", "ts", "type"])
def test_duplicate_column_names_in_a_frame(name):
    cols = ["type", "ts", "x", name]
    df = pd.DataFrame([["A", 1.0, 1, 2 if name == "x" else ("A" if name == "type" else 1.0)]], columns=cols)
    with pytest.raises(EventError, match=f"more than one column named '{name}'"):
        cep_gpu.detect(df, cep_gpu.parse_rule("define X from A() as a"), backend="cpu")


def test_empty_csv_file(tmp_path):
    path = tmp_path / "events.csv"
    path.write_text("")
    with pytest.raises(EventError, match="the CSV file is empty; it needs a header row naming at least 'type'"):
        read_table(path)
    path.write_text("\n\n")
    with pytest.raises(EventError, match="empty"):
        read_table(path)


def test_header_only_csv_gives_no_composite_events(tmp_path):
    path = tmp_path / "events.csv"
    path.write_text("type,ts,room\n")
    rule = cep_gpu.parse_rule("define X(room: string) from A() as a where room = a.room")
    for events in (read_table(path), cep_gpu.io.read_events(path)):
        out = cep_gpu.detect(events, rule, backend="cpu")
        assert len(out) == 0 and list(out.columns) == ["rule", "ts", "ids", "room"]


RALLY = ("define Rally(gain: float) pattern SEQ(GOOG a, GOOG b) where a.price < b.price within 10 s "
         "return gain := b.price - a.price")


@pytest.mark.parametrize("backend", ["cpu", "reference", "aip", "gpu-host", "auto"])
def test_header_only_csv_without_the_rules_attributes_gives_no_composite_events(tmp_path, backend):
    """A header `type,ts`, no rows: no events, so no composite events (docs/api.md), rather than
    'reads attribute 'price', which no event in the input has (attributes: ['gain'])', a list that
    named the rule's own output attribute."""
    path = tmp_path / "events.csv"
    path.write_text("type,ts\n")
    for events in (read_table(path), cep_gpu.io.read_events(path), pd.DataFrame({"type": [], "ts": []})):
        out = cep_gpu.detect(events, RALLY, backend=backend)
        assert len(out) == 0 and list(out.columns) == ["rule", "ts", "ids", "gain"]
        assert out["gain"].dtype == np.float64


def test_an_attribute_no_event_has_is_still_an_error_naming_the_inputs_attributes():
    events = pd.DataFrame({"type": ["GOOG", "GOOG"], "ts": [1.0, 2.0], "vol": [3, 4]})
    with pytest.raises(cep_gpu.RuleError, match=r"reads attribute 'price', which no event in the input has "
                       r"\(the input's attributes: \['vol'\]; composite events add \['gain'\]\)"):
        cep_gpu.detect(events, RALLY, backend="cpu")


# -- one bad value in a CSV column: an error about that value, not about something else -------------

CSV = "type,ts,price\nGOOG,1,10\nMSFT,2,11\nGOOG,3,12\nMSFT,4,13\nGOOG,5,14\n"


def test_text_in_a_csv_ts_column_names_the_row_and_the_value(tmp_path):
    """It was 'column 'ts' has unsupported dtype category: ...', naming no row, and an internal dtype."""
    path = tmp_path / "events.csv"
    path.write_text(CSV.replace("GOOG,3,12", "GOOG,abc,12"))
    for events in (read_table(path), cep_gpu.io.read_events(path)):
        with pytest.raises(EventError, match=r"^column 'ts' holds 'abc' at row 2, which is neither a "
                           r"number nor a datetime: use datetime64 or numbers in time_unit$"):
            cep_gpu.detect(events, RALLY, backend="cpu")


@pytest.mark.parametrize("rule, doing", [
    (RALLY, "compares it with '<'"),
    ("define R pattern SEQ(GOOG a, GOOG b) where a.price + 1 = b.price within 10 s", r"computes with it \('\+'\)"),
    ("define R(g: float) pattern SEQ(GOOG a, GOOG b) within 10 s return g := b.price - a.price",
     r"computes with it \('-'\)"),
    ("define R from GOOG() as b and m=Avg(MSFT() within 5 s from b).price > 1", "takes its Avg"),
    ("define R pattern SEQ(GOOG a, MSFT b) where b.price = 13 within 10 s", "compares it with '='"),
])
@pytest.mark.parametrize("backend", ["cpu", "reference"])
def test_text_among_numbers_names_the_column_and_the_row(tmp_path, rule, doing, backend):
    """A CSV column of numbers with one 'oops' is read as text: a rule ordering it gave
    'rule 'Rally': strings can only be compared with = and != (not '<')', and one computing with it
    computed on the strings' dictionary codes without a word."""
    path = tmp_path / "events.csv"
    path.write_text(CSV.replace("MSFT,4,13", "MSFT,4,oops"))
    name = "Rally" if rule is RALLY else "R"
    for events in (read_table(path), cep_gpu.io.read_events(path)):
        with pytest.raises(EventError, match=rf"^column 'price' holds the text 'oops' at row 3 \(rule '{name}' "
                           rf"{doing}\); the other values are numbers$"):
            cep_gpu.detect(events, rule, backend=backend)
    # several such rows: the first one, and how many more; without row positions, the event's id
    frame = pd.read_csv(path, dtype={"price": str})
    frame.loc[4, "price"] = "n/a"
    with pytest.raises(EventError, match=r"'oops' at row 3 .*; 1 more rows hold text, the other values are numbers"):
        cep_gpu.detect(frame, rule, backend=backend)
    with pytest.raises(EventError, match=r"'oops' in the event with id 13 \("):
        cep_gpu.detect(frame.assign(id=range(10, 15)), rule, backend=backend)


def test_text_columns_keep_their_rule_errors():
    """A column of text (not numbers with a stray string) still gets the errors about the rule."""
    events = pd.DataFrame({"type": ["A", "B"], "ts": [1.0, 2.0], "s": ["x", "y"], "n": ["1", "y"]})
    with pytest.raises(cep_gpu.RuleError, match=r"strings can only be compared with = and != \(not '<'\)"):
        cep_gpu.detect(events, "define R pattern SEQ(A a, B b) where a.s < b.s within 5 s", backend="cpu")
    with pytest.raises(cep_gpu.RuleError, match=r"arithmetic needs numbers, but attribute 's' holds a string "
                       r"\(with '-'\) \(line 1"):
        cep_gpu.detect(events, "define R(d: float) pattern SEQ(A a, B b) within 5 s return d := b.s - a.s",
                       backend="cpu")
    with pytest.raises(cep_gpu.RuleError, match=r"arithmetic needs numbers, but 'k' is a string"):
        cep_gpu.detect(events, "define R pattern SEQ(A a, B b) where a.ts + 'k' > 1 within 5 s", backend="cpu")
    # half numbers: named as the data's fault, the first text in input order
    with pytest.raises(EventError, match=r"column 'n' holds the text 'y' at row 1 \(rule 'R' compares it with '>'\)"):
        cep_gpu.detect(events, "define R pattern SEQ(A a, B b) where b.n > 0 within 5 s", backend="cpu")


def test_a_stream_names_the_event_holding_text_among_numbers():
    engine = cep_gpu.Engine(RALLY, backend="cpu")
    engine.publish(pd.DataFrame({"type": ["GOOG", "GOOG"], "ts": [1.0, 2.0], "price": [10.0, 11.0]}))
    bad = pd.DataFrame({"type": ["GOOG"] * 3, "ts": [3.0, 4.0, 5.0], "price": ["12", "oops", "14"]})
    with pytest.raises(EventError, match=r"column 'price' holds the text 'oops' in the event with id 3 "
                       r"\(rule 'Rally' compares it with '<'\)"):
        engine.publish(bad)
    assert engine.stats()["events"] == 2  # the publish left no trace


def test_unreadable_csv_is_an_event_error(tmp_path):
    path = tmp_path / "events.csv"
    path.write_text("type,ts\nA,1,extra\n")
    with pytest.raises(EventError, match="cannot read the CSV file"):
        read_table(path)


@pytest.mark.parametrize("source", ["pandas", "arrow"])
@pytest.mark.parametrize(
    ("types", "shown", "row"),
    [([1, 2], "got 1 (int) at row 0", 0), (["A", 2], "got 2 (int) at row 1", 1), ([1.5, 1.5], "got 1.5 (float)", 0)],
)
def test_type_must_hold_strings(types, shown, row, source):
    # rejected, not turned into names with str(): Spark rejects a numeric `type` column too
    df = pd.DataFrame({"type": pd.Series(types, dtype=object if source == "pandas" else None), "ts": [1.0, 2.0]})
    if source == "arrow":
        if isinstance(types[0], str) != isinstance(types[1], str):
            pytest.skip("Arrow has no column mixing strings and numbers")
        df = pa.Table.from_pandas(df, preserve_index=False)
    with pytest.raises(EventError, match="column 'type' must hold strings") as err:
        cep_gpu.detect(df, cep_gpu.parse_rule("define X from A() as a"), backend="cpu")
    assert shown in str(err.value)


def test_categorical_and_string_dtype_types_still_accepted():
    for types in (pd.Categorical(["A", "B"]), pd.array(["A", "B"], dtype="string")):
        out = cep_gpu.detect(pd.DataFrame({"type": types, "ts": [1.0, 2.0]}), cep_gpu.parse_rule("define X from A() as a"))
        assert id_tuples(out) == [(0,)]


@pytest.mark.parametrize("source", ["pandas", "arrow"])
@pytest.mark.parametrize("col", ["id", "x"])
def test_uint64_beyond_int64_rejected_with_row(col, source):
    # a uint64 of 2**63 would wrap to a negative int64: rejected on both paths with the value
    df = pd.DataFrame({"type": ["A", "A"], "ts": [1.0, 2.0], col: np.array([1, 2**63], np.uint64)})
    events = df if source == "pandas" else pa.Table.from_pandas(df, preserve_index=False)
    with pytest.raises(EventError, match=f"'{col}' holds 9223372036854775808 at row 1, above the int64 maximum"):
        cep_gpu.detect(events, cep_gpu.parse_rule("define X from A() as a"), backend="cpu")


def test_uint64_id_up_to_int64_max_is_reported_unchanged():
    df = pd.DataFrame({"type": ["A", "B"], "ts": [1.0, 2.0], "id": np.array([2**63 - 1, 7], np.uint64)})
    out = cep_gpu.detect(df, cep_gpu.parse_rule("define X from B() as b and each A() as a within 5 s from b"))
    assert id_tuples(out) == [(7, 2**63 - 1)]


@pytest.mark.parametrize("values", [[1, 2**64], [2**63], [-(2**63) - 1, 0]])
def test_python_int_beyond_int64_is_an_error_as_in_arrow(values):
    n = len(values)
    df = pd.DataFrame({"type": ["A"] * n, "ts": np.arange(n, dtype=float), "x": values})
    rule = cep_gpu.parse_rule("define X(v: int) from A() as a where v = a.x")
    with pytest.raises(EventError, match="'x' holds"):
        cep_gpu.detect(df, rule, backend="cpu")
    with pytest.raises((EventError, OverflowError, pa.ArrowInvalid)):
        pa.table({"x": values}, schema=pa.schema([("x", pa.int64())]))  # Arrow refuses them too
    engine = cep_gpu.Engine([rule], backend="cpu")
    with pytest.raises(EventError, match="'x' holds"):
        engine.publish({"type": "A", "ts": 0.0, "x": values[0] if abs(values[0]) >= 2**63 else values[-1]})


def test_ids_print_as_python_lists(backend):
    # docs/api.md shows `[4, 2]`; pandas alone would print the NumPy form `[4 2]`
    events = pd.DataFrame({"type": ["A", "A", "B"], "ts": [1.0, 2.0, 3.0]})
    rule = cep_gpu.parse_rule("define X from B() as b and each A() as a within 5 s from b")
    out = cep_gpu.detect(events, rule, backend=backend)
    assert isinstance(out["ids"].dtype, pd.ArrowDtype)  # still Arrow-backed list<int64>
    text = out.to_string()
    assert "[2, 0]" in text and "[2, 1]" in text and "[2 0]" not in text
    assert "[2, 1]" in out[out["ids"].map(lambda i: i[1] == 1)].to_string()  # filtered frames too
    assert "[2, 0]" in pd.concat([out, out]).to_string()
    engine = cep_gpu.Engine([rule], backend="cpu")
    assert "[2, 0]" in engine.publish(events).to_string()


def test_numbers_stored_as_text_are_named_as_such():
    """Every value a number written as text (a Parquet string column, a frame read with dtype=str):
    the search for the first text row found none and raised a bare ValueError (argmin of an empty
    sequence), a traceback on the command line."""
    events = pd.DataFrame({"type": ["A", "B"], "ts": [1.0, 2.0], "x": ["1", "2"]})
    for rule, doing in (("define R pattern SEQ(A a, B b) where a.x < b.x within 5 s", "compares it with '<'"),
                        ("define R pattern SEQ(A a, B b) where a.x + 1 = 2 within 5 s", r"computes with it \('\+'\)"),
                        ("define R from B() as b and m=Max(A() within 5 s from b).x > 1", "takes its Max")):
        with pytest.raises(EventError, match=rf"^column 'x' holds numbers stored as text, such as '1' "
                                             rf"\(rule 'R' {doing}\); store them as numbers$"):
            cep_gpu.detect(events, rule, backend="cpu")


def test_the_sequential_baseline_names_the_bad_row_too():
    """The parallel bench's sequential baseline checks a missing attribute on the frame's columns
    alone: a stray text in a column of numbers is the engine's error for its row, as detect's."""
    from cep_gpu.parallel.baselines import run

    events = pd.DataFrame({"type": ["A", "B", "A", "B"], "ts": [1.0, 2.0, 3.0, 4.0], "p": ["10", "11", "oops", "12"]})
    rule = "define R pattern SEQ(A a, B b) where a.p < b.p within 5 s"
    for method in ("sequential", "rip"):
        with pytest.raises(EventError, match=r"^column 'p' holds the text 'oops' (at row|in the event with id) 2 "):
            run(method, rule, events, 1)
    with pytest.raises(cep_gpu.RuleError, match=r"reads attribute 'q', which no event in the input has"):
        run("sequential", rule.replace("a.p", "a.q"), events, 1)


def test_strings_with_a_nul_character_stay_distinct(backend):
    # pandas' object hash table cuts strings at a NUL: 'a\x00b' and 'a' must not get one code
    df = pd.DataFrame({"type": ["A", "B", "B"], "ts": [1.0, 2.0, 3.0], "s": ["a\x00b", "a", "a\x00b"]})
    same = cep_gpu.detect(df, "define Q pattern SEQ(A a, B b) where a.s = b.s within 5 s", backend=backend)
    assert id_tuples(same) == [(0, 2)]


def _empty_type_inputs(tmp_path):
    """The same events, with an empty type at row 1, through every entry point."""
    import pyarrow.parquet as pq

    df = pd.DataFrame({"type": ["A", "", "B"], "ts": [0.0, 0.2, 0.5]})
    pq.write_table(pa.Table.from_pandas(df, preserve_index=False), tmp_path / "e.parquet")
    return {
        "pandas": df,
        "pandas categorical": df.astype({"type": "category"}),
        "arrow": pa.Table.from_pandas(df, preserve_index=False),
        "arrow dictionary": pa.table({"type": pa.array(df["type"]).dictionary_encode(), "ts": df["ts"]}),
        "parquet": read_table(tmp_path / "e.parquet"),
        "dict of columns": df.to_dict("list"),
    }


@pytest.mark.parametrize("source", ["pandas", "pandas categorical", "arrow", "arrow dictionary", "parquet",
                                    "dict of columns"])
@pytest.mark.parametrize("call", ["detect", "publish"])
def test_an_empty_type_is_refused_by_every_entry_point(tmp_path, source, call):
    """An empty event type was refused only in CSV input; Parquet, pandas and Arrow accepted it."""
    events = _empty_type_inputs(tmp_path)[source]
    rules = cep_gpu.parse_rules("define Q pattern SEQ(A a, B b) within 1s")
    with pytest.raises(EventError, match=r"^column 'type' is empty at row 1: every event needs a type$"):
        if call == "detect":
            cep_gpu.detect(events if source != "dict of columns" else pd.DataFrame(events), rules, backend="reference")
        else:
            cep_gpu.Engine(rules, backend="cpu").publish(events)
    # the CSV reader says the same, after the file's name
    (tmp_path / "e.csv").write_text("type,ts\nA,0\n,0.2\nB,0.5\n")
    with pytest.raises(EventError, match=r"e\.csv: column 'type' is empty at row 1: every event needs a type$"):
        read_table(tmp_path / "e.csv")


def test_an_unused_empty_type_in_a_dictionary_is_no_error():
    col = pa.DictionaryArray.from_arrays(pa.array([1, 2], pa.int32()), pa.array(["", "A", "B"]))
    out = cep_gpu.detect(pa.table({"type": col, "ts": [0.0, 0.5]}),
                         "define Q pattern SEQ(A a, B b) within 1s", backend="reference")
    assert len(out) == 1


DATES_RULE = "define Q pattern SEQ(A a, B b) within 72 h"


def _dates_inputs(tmp_path):
    import datetime as dt

    import pyarrow.parquet as pq

    days = [dt.date(2024, 1, 1), dt.date(2024, 1, 2), dt.date(2024, 1, 3), dt.date(2024, 1, 5)]
    types = ["A", "B", "A", "B"]
    pq.write_table(pa.table({"type": types, "ts": pa.array(days, pa.date32())}), tmp_path / "d.parquet")
    (tmp_path / "d.csv").write_text("type,ts\n" + "".join(f"{t},{d}\n" for t, d in zip(types, days)))
    frame = pd.DataFrame({"type": types, "ts": days})
    return {
        "parquet file": read_table(tmp_path / "d.parquet"),
        "csv file": read_table(tmp_path / "d.csv"),
        "pandas dates": frame,
        "pandas arrow date": frame.astype({"ts": pd.ArrowDtype(pa.date32())}),
        "arrow date32": pa.table({"type": types, "ts": pa.array(days, pa.date32())}),
        "arrow date64": pa.table({"type": types, "ts": pa.array(days, pa.date64())}),
    }


@pytest.mark.parametrize("source", ["pandas dates", "pandas arrow date", "arrow date32", "arrow date64"])
@pytest.mark.parametrize("call", ["detect", "publish"])
def test_dates_as_ts_read_as_the_file_reader_reads_them(tmp_path, source, call):
    """Dates were read (as datetimes at midnight) only by the file reader: detect and publish
    refused a date32/date64 column or datetime.date values."""
    inputs = _dates_inputs(tmp_path)
    expected = cep_gpu.detect(inputs["parquet file"], DATES_RULE, backend="reference")
    assert len(expected) == 2 and str(expected["ts"].dtype) == "datetime64[s]"  # (dates: in seconds)
    pd.testing.assert_frame_equal(cep_gpu.detect(inputs["csv file"], DATES_RULE, backend="reference"), expected)
    if call == "detect":
        got = cep_gpu.detect(inputs[source], DATES_RULE, backend="cpu")
    else:
        got = cep_gpu.Engine(DATES_RULE, backend="cpu").publish(inputs[source])
    pd.testing.assert_frame_equal(got.reset_index(drop=True), expected)


def test_dates_mixed_with_datetimes_are_not_truncated():
    import datetime as dt

    events = pd.DataFrame({"type": ["A", "B"], "ts": [dt.date(2024, 1, 1), dt.datetime(2024, 1, 1, 5)]})
    with pytest.raises(EventError, match="column 'ts' holds date values"):
        cep_gpu.detect(events, DATES_RULE, backend="reference")


def test_dates_beyond_the_datetime_range_name_the_row():
    import datetime as dt

    events = pd.DataFrame({"type": ["A", "B"], "ts": [dt.date(2024, 1, 1), dt.date(2300, 1, 1)]})
    with pytest.raises(EventError, match="column 'ts' at row 1 holds 2300-01-01"):
        cep_gpu.detect(events, DATES_RULE, backend="reference")
