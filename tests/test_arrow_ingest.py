"""Arrow ingestion without pandas: ``EventTable.from_arrow`` builds exactly the table that
``EventTable.from_pandas(frame_from_arrow(table))`` builds, and fails with the same errors.

The tables are generated: every column type the engine reads (strings plain, large, as views and
dictionary-encoded with shuffled, unused and per-chunk dictionaries; integers of every width;
floats with nulls and NaN; booleans; an all-null column), timestamps of every unit with and
without a time zone, numeric timestamps, explicit ids, chunked columns and empty tables.
"""

from __future__ import annotations

import datetime
import decimal

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import cep_gpu
from cep_gpu import EventError
from cep_gpu.events import EventTable, StringDictionary, frame_from_arrow
from cep_gpu.museum import MUSEUM_RULES

TYPES = ["Vibration", "PeopleNear", "StaffAt", "A"]
WORDS = ["r1", "r2", "monet", "", "é", "r1 ", "Z"]


def pandas_path(table: pa.Table, **kw) -> EventTable:
    return EventTable.from_pandas(frame_from_arrow(table), **kw)


def assert_same_table(a: EventTable, b: EventTable) -> None:
    """Equal in every array, dtype, name, code, dictionary entry, time format and schema."""
    for name in ("ts", "ids", "types"):
        x, y = getattr(a, name), getattr(b, name)
        assert x.dtype == y.dtype and np.array_equal(x, y), name
    assert a.type_names == b.type_names
    assert list(a.columns) == list(b.columns)
    for name, x in a.columns.items():
        y = b.columns[name]
        assert x.kind == y.kind, name
        assert x.values.dtype == y.values.dtype and x.valid.dtype == y.valid.dtype, name
        assert np.array_equal(x.valid, y.valid), name
        assert np.array_equal(x.values, y.values, equal_nan=x.values.dtype.kind == "f"), name
    assert a.strings._strings == b.strings._strings
    assert a.time == b.time
    assert a.schema == b.schema


# -- generated tables ----------------------------------------------------------------------------------


def _cuts(draw, n: int) -> list[tuple[int, int]]:
    """``range(n)`` cut into 1 to 3 ``(start, stop)`` pieces at drawn places (some may be empty)."""
    bounds = [0, *sorted(draw(st.lists(st.integers(0, n), max_size=2))), n]
    return list(zip(bounds, bounds[1:], strict=False))


def _chunks(draw, values: list, typ: pa.DataType) -> pa.ChunkedArray:
    """``values`` as 0 to 3 chunks, cut at drawn places (an empty chunk now and then)."""
    n = len(values)
    parts = [values[a:b] for a, b in _cuts(draw, n)]
    if n == 0 and draw(st.booleans()):
        parts = []
    return pa.chunked_array([pa.array(p, type=typ) for p in parts], type=typ)


def _dictionary_chunks(draw, values: list, value_type: pa.DataType | None = None, pool=WORDS) -> pa.ChunkedArray:
    """``values`` (None = null) as dictionary chunks, each with its own shuffled dictionary that
    may list values (from ``pool``) no row uses."""
    value_type = value_type or pa.string()
    chunks = []
    for a, b in _cuts(draw, len(values)):
        part = values[a:b]
        extra = draw(st.lists(st.sampled_from(pool), max_size=2))
        dictionary = draw(st.permutations(list(dict.fromkeys([v for v in part if v is not None] + extra))))
        pos = {v: i for i, v in enumerate(dictionary)}
        idx = pa.array([None if v is None else pos[v] for v in part], pa.int32())
        chunks.append(pa.DictionaryArray.from_arrays(idx, pa.array(dictionary, value_type)))
    return pa.chunked_array(chunks, pa.dictionary(pa.int32(), value_type))


def _string_column(draw, values: list) -> pa.ChunkedArray:
    kind = draw(st.sampled_from(["string", "large_string", "string_view", "dictionary"]))
    if kind == "dictionary":
        return _dictionary_chunks(draw, values, pool=WORDS + TYPES)
    typ = {"string": pa.string(), "large_string": pa.large_string(),
           "string_view": getattr(pa, "string_view", pa.string)()}[kind]
    return _chunks(draw, values, typ)


INT_TYPES = [pa.int8(), pa.int16(), pa.int32(), pa.int64(), pa.uint8(), pa.uint16(), pa.uint32(), pa.uint64()]


@st.composite
def attribute_columns(draw, n: int) -> pa.ChunkedArray:
    kind = draw(st.sampled_from(["string", "int", "float", "bool", "null", "dict_int"]))
    nulls = draw(st.lists(st.booleans(), min_size=n, max_size=n))
    if kind == "string":
        values = [None if z else draw(st.sampled_from(WORDS)) for z in nulls]
        return _string_column(draw, values)
    if kind == "int":
        typ = draw(st.sampled_from(INT_TYPES))
        values = [None if z else draw(st.integers(0, 100)) for z in nulls]
        return _chunks(draw, values, typ)
    if kind == "float":
        typ = draw(st.sampled_from([pa.float32(), pa.float64()]))
        num = st.one_of(st.floats(-1e6, 1e6, width=32), st.just(float("nan")))
        values = [None if z else draw(num) for z in nulls]
        return _chunks(draw, values, typ)
    if kind == "bool":
        return _chunks(draw, [None if z else draw(st.booleans()) for z in nulls], pa.bool_())
    if kind == "null":
        return _chunks(draw, [None] * n, pa.null())
    values = [None if z else draw(st.integers(0, 5)) for z in nulls]  # dictionary of integers
    return _dictionary_chunks(draw, values, pa.int64(), pool=range(8))


@st.composite
def ts_columns(draw, n: int) -> pa.ChunkedArray:
    kind = draw(st.sampled_from(["int", "float", "timestamp"] + (["date"] if n else [])))
    if kind == "int":
        typ = draw(st.sampled_from([pa.int32(), pa.int64(), pa.uint16(), pa.uint32()]))
        return _chunks(draw, draw(st.lists(st.integers(0, 60), min_size=n, max_size=n)), typ)
    if kind == "float":
        typ = draw(st.sampled_from([pa.float32(), pa.float64()]))
        values = draw(st.lists(st.floats(0, 60, width=32), min_size=n, max_size=n))
        return _chunks(draw, values, typ)
    if kind == "date":  # datetimes at midnight on both paths (an empty one has no type in pandas)
        days = draw(st.lists(st.integers(-50_000, 50_000), min_size=n, max_size=n))
        if draw(st.booleans()):
            return _chunks(draw, days, pa.date32())
        return _chunks(draw, [d * 86_400_000 for d in days], pa.date64())
    unit = draw(st.sampled_from(["s", "ms", "us", "ns"]))
    tz = draw(st.sampled_from([None, "UTC", "Europe/Rome", "+01:00"]))
    ticks = draw(st.lists(st.integers(0, 10**9), min_size=n, max_size=n))
    return _chunks(draw, ticks, pa.timestamp(unit, tz=tz))


@st.composite
def arrow_events(draw, min_rows: int = 0, max_rows: int = 25) -> pa.Table:
    n = draw(st.integers(min_rows, max_rows))
    types = draw(st.lists(st.sampled_from(TYPES), min_size=n, max_size=n))
    cols = {"type": _type_codes(draw, types) if draw(st.booleans()) else _string_column(draw, types)}
    cols["ts"] = draw(ts_columns(n))
    if draw(st.booleans()):
        ids = draw(st.permutations(range(n)))
        cols["id"] = _chunks(draw, [3 * i + 1 for i in ids], draw(st.sampled_from([pa.int64(), pa.int32()])))
    for i in range(draw(st.integers(0, 4))):
        cols[f"a{i}"] = draw(attribute_columns(n))
    order = draw(st.permutations(list(cols)))
    return pa.table({k: cols[k] for k in order})


def _type_codes(draw, types: list[str]) -> pa.ChunkedArray:
    """``type`` as the Spark tasks send it: int32 codes into a fixed list of names, as a
    dictionary array (see spark_udfs.task.engine_input)."""
    names = sorted(TYPES)
    codes = [names.index(t) for t in types]
    n = len(codes)
    cut = draw(st.integers(0, n))
    chunks = [pa.DictionaryArray.from_arrays(pa.array(c, pa.int32()), pa.array(names))
              for c in (codes[:cut], codes[cut:])]
    return pa.chunked_array(chunks, pa.dictionary(pa.int32(), pa.string()))


# -- equality with the pandas path ---------------------------------------------------------------------


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(arrow_events(), st.sampled_from(["s", "ms", "ns"]), st.booleans())
def test_from_arrow_equals_the_pandas_path(table, time_unit, sort):
    assert_same_table(EventTable.from_arrow(table, time_unit, sort=sort),
                      pandas_path(table, time_unit=time_unit, sort=sort))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(arrow_events(), arrow_events())
def test_a_shared_string_dictionary_grows_the_same_way(first, second):
    # the engine ingests batch after batch into one dictionary (Engine.publish): codes given by
    # one batch must stay and new strings must get the same new codes on both paths
    mine, theirs = StringDictionary(), StringDictionary()
    for table in (first, second):
        a = EventTable.from_arrow(table, strings=mine)
        b = pandas_path(table, strings=theirs)
        assert_same_table(a, b)


def test_empty_tables():
    for ts_type in (pa.float64(), pa.timestamp("us", tz="UTC"), pa.int64()):
        table = pa.table({
            "type": pa.array([], pa.string()), "ts": pa.array([], ts_type), "id": pa.array([], pa.int64()),
            "s": pa.array([], pa.string()), "d": pa.array([], pa.dictionary(pa.int32(), pa.string())),
            "i": pa.array([], pa.int32()), "f": pa.array([], pa.float32()), "b": pa.array([], pa.bool_()),
            "z": pa.array([], pa.null()),
        })
        a = EventTable.from_arrow(table)
        assert len(a) == 0 and a.columns["s"].kind == "string"
        assert_same_table(a, pandas_path(table))


def test_no_pandas_frame_is_built(monkeypatch):
    from cep_gpu.events import from_arrow as arrow_in

    def boom(*args, **kwargs):
        raise AssertionError("a pandas conversion ran")

    table = pa.table({
        "type": pa.array(["A", "B", "A"]).dictionary_encode(), "ts": pa.array([3, 1, 2], pa.timestamp("ms", "UTC")),
        "id": [5, 6, 7], "s": ["x", None, "y"], "i": pa.array([1, None, 3], pa.int16()),
        "f": [1.0, None, float("nan")], "b": [True, None, False], "z": pa.nulls(3),
    })
    want = pandas_path(table)
    monkeypatch.setattr(arrow_in, "_pandas_column", boom)
    monkeypatch.setattr(arrow_in, "frame_from_arrow", boom)
    monkeypatch.setattr(pd, "DataFrame", boom)
    assert_same_table(EventTable.from_arrow(table), want)


def test_detect_reads_arrow_like_its_pandas_frame():
    from cep_gpu.museum import generate_museum

    frame = generate_museum(3000, seed=3)
    table = pa.Table.from_pandas(frame, preserve_index=False)
    got = cep_gpu.detect(table, MUSEUM_RULES, backend="cpu")
    want = cep_gpu.detect(frame_from_arrow(table), MUSEUM_RULES, backend="cpu")
    assert len(got) > 0 and got.equals(want)
    # the Arrow table split into many chunks, strings dictionary-encoded: still the same
    chunked = pa.Table.from_batches(table.to_batches(max_chunksize=97))
    chunked = chunked.set_column(chunked.schema.get_field_index("room"), "room",
                                 chunked.column("room").dictionary_encode())
    assert cep_gpu.detect(chunked, MUSEUM_RULES, backend="cpu").equals(want)


# -- the same errors -------------------------------------------------------------------------------------


def _error(fn) -> str:
    with pytest.raises(EventError) as info:
        fn()
    return str(info.value)


BASE = {"type": pa.array(["A", "B", "A"]), "ts": pa.array([1.0, 2.0, 3.0])}


def _with(**cols) -> pa.Table:
    data = dict(BASE)
    data.update(cols)
    return pa.table({k: v for k, v in data.items() if v is not None})


BAD = {
    "no type": _with(type=None),
    "no ts": _with(ts=None),
    "null type": _with(type=pa.array(["A", None, "B"])),
    "null dictionary type": _with(type=pa.array(["A", "B", None]).dictionary_encode()),
    "integer type with a null": _with(type=pa.array([1, None, 2])),
    "null ts": _with(ts=pa.array([1.0, None, 3.0])),
    "NaN ts": _with(ts=pa.array([1.0, 2.0, float("nan")])),
    "null timestamp": _with(ts=pa.array([1, None, 3], pa.timestamp("ms"))),
    "infinite ts": _with(ts=pa.array([1.0, float("inf"), 3.0])),
    "string ts": _with(ts=pa.array(["a", "b", "c"])),
    "bool ts": _with(ts=pa.array([True, False, True])),
    "date ts with a null": _with(ts=pa.array([datetime.date(2024, 1, 1), None, datetime.date(2024, 1, 3)])),
    "duration ts": _with(ts=pa.array([1, 2, 3], pa.duration("s"))),
    "decimal ts": _with(ts=pa.array([decimal.Decimal(1)] * 3)),
    "dictionary ts": _with(ts=pa.array([1, 2, 1]).dictionary_encode()),
    "null id": _with(id=pa.array([1, None, 2])),
    "float id": _with(id=pa.array([1.5, 2.5, 3.5])),
    "string id": _with(id=pa.array(["1", "2", "3"])),
    "negative id": _with(id=pa.array([0, -3, 1])),
    "duplicate id": _with(id=pa.array([7, 1, 7], pa.int32())),
    "date attribute": _with(d=pa.array([datetime.date(2024, 1, 1), None, None])),
    "timestamp attribute": _with(w=pa.array([1, 2, 3], pa.timestamp("s"))),
    "decimal attribute": _with(v=pa.array([decimal.Decimal(1), None, None])),
    "binary attribute": _with(v=pa.array([b"x", b"y", None])),
    "list attribute": _with(v=pa.array([[1], [2], None])),
}


@pytest.mark.parametrize("case", list(BAD))
def test_bad_input_fails_with_the_pandas_paths_error(case):
    table = BAD[case]
    assert _error(lambda: EventTable.from_arrow(table)) == _error(lambda: pandas_path(table))


def test_unknown_time_unit_and_not_a_table():
    assert _error(lambda: EventTable.from_arrow(_with(), "days")) == _error(lambda: pandas_path(_with(), time_unit="days"))
    assert "pyarrow Table" in _error(lambda: EventTable.from_arrow({"type": ["A"], "ts": [1]}))


def test_uint64_beyond_int64_and_duplicate_columns_same_error_on_both_paths():
    # uint64 beyond int64 and duplicate column names: named, with the row, on both paths
    big = pa.array([1, 2**63 + 1, 2], pa.uint64())
    for col in ("v", "id"):
        arrow = _error(lambda: EventTable.from_arrow(_with(**{col: big})))  # noqa: B023
        assert f"'{col}' holds 9223372036854775809 at row 1, above the int64 maximum" in arrow
        frame = pd.DataFrame({"type": ["A", "B", "A"], "ts": [1.0, 2.0, 3.0], col: big.to_numpy()})
        assert arrow == _error(lambda: EventTable.from_pandas(frame))  # noqa: B023
    twice = pa.Table.from_arrays([BASE["type"], BASE["ts"], pa.array([1, 2, 3]), pa.array([4, 5, 6])],
                                 names=["type", "ts", "x", "x"])
    assert "more than one column named 'x'" in _error(lambda: EventTable.from_arrow(twice))
    assert _error(lambda: EventTable.from_arrow(twice)) == _error(lambda: EventTable.from_pandas(twice.to_pandas()))


@settings(max_examples=60, deadline=None)
@given(arrow_events(min_rows=1), st.data())
def test_a_null_anywhere_in_type_ts_or_id_names_the_same_row(table, data):
    name = data.draw(st.sampled_from([c for c in ("type", "ts", "id") if c in table.column_names]))
    col = table.column(name).combine_chunks()
    row = data.draw(st.integers(0, len(col) - 1))
    broken = table.set_column(table.schema.get_field_index(name), name, pa.chunked_array([_null_at(col, row)]))
    got = _error(lambda: EventTable.from_arrow(broken))
    assert got == _error(lambda: pandas_path(broken))
    assert f"column {name!r} is null at row {row}" in got


def _null_at(col: pa.Array, row: int) -> pa.Array:
    """``col`` with a null at ``row`` (dictionary columns: a null index)."""
    if pa.types.is_dictionary(col.type):
        idx = col.indices.to_pylist()
        idx[row] = None
        return pa.DictionaryArray.from_arrays(pa.array(idx, col.indices.type), col.dictionary)
    values = col.to_pylist()
    values[row] = None
    return pa.array(values, col.type)


def test_engine_publish_of_arrow_batches_equals_their_pandas_frames():
    from cep_gpu.museum import generate_museum

    frame = generate_museum(2000, seed=5).drop(columns=["id"], errors="ignore")
    table = pa.Table.from_pandas(frame, preserve_index=False)
    engines = [cep_gpu.Engine(MUSEUM_RULES, backend="cpu") for _ in range(2)]
    outs: list[list] = [[], []]
    for start in range(0, table.num_rows, 350):
        batch = table.slice(start, 350)
        outs[0].append(engines[0].publish(batch))
        outs[1].append(engines[1].publish(frame_from_arrow(batch)))
    outs[0].append(engines[0].flush())
    outs[1].append(engines[1].flush())
    got, want = (pd.concat(o, ignore_index=True) for o in outs)
    assert len(got) > 0 and got.equals(want)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(arrow_events(), st.data())
def test_spark_task_input_with_type_codes_ingests_like_the_categorical_frame(table, data):
    """What a batch task gets: ``type`` as int32 codes into ``type_names(rules)`` (the JVM sends
    no strings). ``engine_input`` makes it a dictionary array; the table must be the one the
    former pandas input (a categorical from the codes) gave."""
    pytest.importorskip("pyspark")
    from cep_gpu.spark_udfs.task import engine_input

    names = sorted(set(TYPES) | {"Unused"})
    codes = [names.index(t) for t in table.column("type").to_pylist()]
    cut = data.draw(st.integers(0, len(codes)))
    as_codes = pa.chunked_array([pa.array(codes[:cut], pa.int32()), pa.array(codes[cut:], pa.int32())])
    sent = table.set_column(table.schema.get_field_index("type"), "type", as_codes)
    got = engine_input(sent, names)
    assert isinstance(got, pa.Table) and pa.types.is_dictionary(got.schema.field("type").type)
    frame = frame_from_arrow(sent)
    frame["type"] = pd.Categorical.from_codes(np.array(codes, dtype=np.int64), categories=names)
    assert_same_table(EventTable.from_arrow(got), EventTable.from_pandas(frame))
    assert_same_table(EventTable.from_arrow(got), pandas_path(table))


def test_spark_task_input_keeps_a_null_type_code_null():
    pytest.importorskip("pyspark")
    from cep_gpu.spark_udfs.task import engine_input

    sent = pa.table({"type": pa.array([1, None, 0], pa.int32()), "ts": [1.0, 2.0, 3.0]})
    with pytest.raises(EventError, match="'type' is null at row 1"):
        EventTable.from_arrow(engine_input(sent, ["A", "B"]))
