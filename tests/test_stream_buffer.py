"""The streaming engine's buffer and one-event ingestion equal the general EventTable paths."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cep_gpu.events import EventTable, StringDictionary
from cep_gpu.stream_buffer import AppendBuffer, new_rows_last, table_from_record


def assert_tables_equal(a: EventTable, b: EventTable) -> None:
    assert a.ts.tolist() == b.ts.tolist()
    assert a.ids.tolist() == b.ids.tolist()
    assert [a.type_names[t] for t in a.types] == [b.type_names[t] for t in b.types]
    assert list(a.columns) == list(b.columns)
    for name in a.columns:
        ca, cb = a.columns[name], b.columns[name]
        assert ca.kind == cb.kind, name
        assert ca.valid.tolist() == cb.valid.tolist(), name
        va, vb = ca.values[ca.valid].tolist(), cb.values[cb.valid].tolist()
        assert va == vb, name
    assert {t: s for t, s in a.schema.items() if s} == {t: s for t, s in b.schema.items() if s}
    assert a.time == b.time


_values = st.one_of(
    st.integers(-(2**63), 2**63 - 1),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=3),
    st.booleans(),
    st.none(),
    # values read from NumPy arrays or pandas rows
    st.integers(-(2**63), 2**63 - 1).map(np.int64),
    st.integers(-(2**31), 2**31 - 1).map(np.int32),
    st.floats(allow_nan=True, allow_infinity=True, width=32).map(np.float32),
    st.floats(allow_nan=True, allow_infinity=True).map(np.float64),
    st.booleans().map(np.bool_),
    st.text(max_size=3).map(np.str_),
)
_records = st.fixed_dictionaries(
    {"type": st.sampled_from(["A", "B", "Cx"]).flatmap(lambda t: st.sampled_from([t, np.str_(t)])),
     "ts": st.one_of(st.integers(0, 10**6), st.floats(0, 1e6, allow_nan=False))},
    optional={"id": st.one_of(st.integers(0, 10**9), st.integers(0, 10**9).map(np.int64)),
              "x": _values, "y": _values, "name": st.text(max_size=2)},
)


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(_records, st.sampled_from(["s", "ms", "ns"]))
def test_one_record_without_pandas_equals_the_pandas_path(rec, unit):
    fast_strings, slow_strings = StringDictionary(), StringDictionary()
    fast = table_from_record(rec, 7, unit, fast_strings)
    frame = pd.DataFrame([rec])
    if "id" not in rec:
        frame = frame.assign(id=np.array([7], np.int64))
    slow = EventTable.from_pandas(frame, time_unit=unit, strings=slow_strings)
    if fast is None:  # handed to pandas: only for values outside the plain cases
        assert any(isinstance(v, float) and math.isinf(v) for v in rec.values()) or max(
            abs(v) for v in rec.values() if type(v) is int
        ) * 10**9 > 2**62
        return
    assert_tables_equal(fast, slow)
    assert fast_strings._strings == slow_strings._strings


def _table(rows: list[tuple], strings: StringDictionary) -> EventTable:
    frame = pd.DataFrame(rows, columns=["type", "ts", "id", "x"]).dropna(axis=1, how="all")
    if "x" in frame and frame["x"].notna().any() and rows and isinstance(rows[0][3], str):
        frame["x"] = frame["x"].astype(object)
    return EventTable.from_pandas(frame, time_unit="s", strings=strings)


_ops = st.lists(
    st.one_of(
        st.tuples(st.just("append"), st.lists(
            st.tuples(st.sampled_from(["A", "B"]), st.integers(-3, 6), st.one_of(
                st.none(), st.integers(0, 9), st.floats(0, 1, allow_nan=False))),
            max_size=4)),
        st.tuples(st.just("drop"), st.integers(0, 5)),
    ),
    max_size=25,
)


@settings(max_examples=120, deadline=None, suppress_health_check=list(HealthCheck))
@given(_ops, st.booleans())
def test_append_buffer_equals_concat_and_take(ops, lineage):
    # without a lineage, rows that belong among the last ones are merged in place
    strings = StringDictionary()
    buf, ref = AppendBuffer(lineage=lineage), None
    clock, next_id = 0, 0
    for op, arg in ops:
        if op == "append":
            rows = []
            for typ, dt, x in arg:  # mostly later than what came before, sometimes in the middle
                rows.append((typ, clock + dt, next_id, x))
                next_id += 1
            clock += 3
            new = _table(rows, strings) if rows else _table([("A", clock, next_id, 1)], strings)
            next_id += 0 if rows else 1
            buf.append(new)
            ref = new if ref is None else ref.concat(new)
        elif ref is not None:
            n = min(arg, len(ref))
            buf.drop_front(n)
            ref = ref.take(np.arange(n, len(ref)))
        if ref is not None:
            assert_tables_equal(buf.table(), ref)
            assert len(buf) == len(ref)


def test_capacity_stays_proportional_to_the_live_rows():
    strings = StringDictionary()
    buf = AppendBuffer()
    for i in range(20_000):
        buf.append(table_from_record({"type": "A", "ts": i, "x": i}, i, "s", strings))
        if len(buf) > 100:
            buf.drop_front(len(buf) - 100)
    assert len(buf) == 100 and buf.capacity <= 4 * 1024
    assert buf.table().ts.tolist() == [t * 10**9 for t in range(19_900, 20_000)]


def test_views_continue_one_row_lineage_until_the_store_is_rebuilt():
    from cep_gpu.events.lineage import row_tag

    strings = StringDictionary()
    buf = AppendBuffer()
    buf.append(table_from_record({"type": "A", "ts": 0, "x": 1}, 0, "s", strings))
    first = buf.table()
    buf.append(table_from_record({"type": "A", "ts": 1, "x": 2}, 1, "s", strings))
    buf.drop_front(1)
    second = buf.table()
    a, b = row_tag(first), row_tag(second)
    assert a is not None and b is not None and a.lineage == b.lineage
    assert (a.base, b.base) == (0, 1)  # global row 1 is row 0 of the second view
    assert row_tag(second, "values:x").base == 1
    buf.set(buf.table())  # compaction: a new lineage
    assert row_tag(buf.table()).lineage != a.lineage


def test_a_pickled_table_keeps_no_lineage():
    import pickle

    from cep_gpu.events.lineage import row_tag

    strings = StringDictionary()
    buf = AppendBuffer()
    buf.append(table_from_record({"type": "A", "ts": 0, "x": 1}, 0, "s", strings))
    table = buf.table()
    assert row_tag(table) is not None
    again = pickle.loads(pickle.dumps(table))
    assert row_tag(again) is None and again.ts.tolist() == table.ts.tolist()


@given(st.permutations(range(8)), st.integers(0, 8), st.integers(0, 8), st.integers(0, 8))
@settings(max_examples=200, deadline=None)
def test_new_rows_last_is_the_set_of_the_tail_rows_at_or_after_lo(ids, n, lo, end):
    ids = np.array(ids, np.int64)
    tail = set(ids[max(end - n, 0):end].tolist())
    for new in (ids[end - n:end] if end >= n else ids[:n], ids[:n]):
        new = np.array(new[::-1])  # (any order)
        want = end - len(new) >= lo and set(new.tolist()) == tail
        assert new_rows_last(ids, new, lo, end) == want
