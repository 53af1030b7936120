"""Columnar micro-batches straight into the engine's buffer (issue 12,
``AppendBuffer.append_columns``): publish by publish, the same outputs, errors, buffer and
counters as the general path (``table_from_columns`` then ``AppendBuffer.append``), and the
direct path is the one the plain case takes."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from test_engine import _record_rows, _records
from test_stream_buffer import assert_tables_equal

import cep_gpu
from cep_gpu import Engine
from cep_gpu.errors import CepError
from cep_gpu.stream_buffer import AppendBuffer

RULE = ("define R(k: int, v: float) from C(k=$k) as c and each B(k=$k and v > 0.2) as b within 4 s from c "
        "and last A(k=$k) within 4 s from b where k=c.k, v=b.v")


def _pair(text: str, **kw) -> tuple[Engine, Engine]:
    """An engine, and one whose columnar publishes all take the general path."""
    fast, slow = Engine(text, backend="cpu", **kw), Engine(text, backend="cpu", **kw)
    slow._publish_columns = lambda cols, output: None  # (shadows the method: never the direct path)
    return fast, slow


def _outcome(eng: Engine, cols: dict, output: str):
    try:
        return eng.publish({k: v.copy() for k, v in cols.items()}, output=output)
    except CepError as exc:
        return type(exc), str(exc)


def _comparable(out, eng: Engine):
    if isinstance(out, tuple):  # an error
        return out
    if isinstance(out, dict):  # output="columns"
        return {k: (v.tolist(), np.ma.getmaskarray(v).tolist()) if isinstance(v, np.ma.MaskedArray)
                else v.tolist() for k, v in out.items()}
    return out


def _stats(eng: Engine) -> dict:
    s = eng.stats()
    del s["buffer_capacity"], s["fast_path"], s["backend_seconds"]
    return s


@st.composite
def _batches(draw) -> list[dict]:
    """Micro-batches of NumPy columns, mostly plain (in order, known types and columns, no
    nulls); now and then out of order, late, a new type or column, NaN, float timestamps,
    own ids (sometimes repeated or decreasing), a 'U' type array, an empty batch."""
    out, clock, own_id = [], 0, 10**6
    for _ in range(draw(st.integers(1, 10))):
        n = draw(st.integers(0, 6))
        types = draw(st.lists(st.sampled_from("AABBCC" + ("D" if draw(st.booleans()) else "")), min_size=n, max_size=n))
        steps = draw(st.lists(st.sampled_from([0, 1, 1, 2, 3] + ([-1] if draw(st.integers(0, 5)) == 0 else [])),
                              min_size=n, max_size=n))
        ts = clock + np.cumsum(np.array(steps, np.int64)) - draw(st.sampled_from([0, 0, 0, 0, 1]))
        clock = int(ts.max()) if n else clock
        cols = {"type": np.array(types, dtype="U1" if draw(st.integers(0, 4)) == 0 else object),
                "ts": ts.astype(np.float64) if draw(st.integers(0, 5)) == 0 else ts.astype(np.int64),
                "k": np.array(draw(st.lists(st.integers(0, 2), min_size=n, max_size=n)), np.int64),
                "v": np.array(draw(st.lists(st.floats(0, 1), min_size=n, max_size=n)), np.float64)}
        if n and draw(st.integers(0, 6)) == 0:
            cols["v"][draw(st.integers(0, n - 1))] = np.nan
        if draw(st.integers(0, 6)) == 0:
            cols["w"] = np.ones(n, np.bool_)  # a column the buffer does not have (yet)
        if draw(st.integers(0, 4)) == 0:
            ids = own_id + np.arange(n, dtype=np.int64) * draw(st.sampled_from([1, 1, 0, -1]))
            own_id += n + 1
            cols["id"] = ids
        out.append(cols)
    return out


@settings(max_examples=120, deadline=None, suppress_health_check=list(HealthCheck))
@given(_batches(), st.sampled_from(["records", "tuples", "columns", "arrow", "pandas"]))
def test_direct_columnar_append_equals_the_general_path_publish_by_publish(batches, output):
    fast, slow = _pair(RULE, time_unit="s")
    accepted = []
    for cols in batches:
        a, b = _outcome(fast, cols, output), _outcome(slow, cols, output)
        if output == "pandas" and not isinstance(a, tuple):
            assert a.equals(b)
        elif output == "arrow" and not isinstance(a, tuple):
            assert a.equals(b)
        else:
            assert _comparable(a, fast) == _comparable(b, slow)
        if not isinstance(a, tuple):
            accepted.append(cols)
        if fast._buf.filled:
            assert_tables_equal(fast._buf.table(), slow._buf.table())
        assert _stats(fast) == _stats(slow)
    assert _record_rows([fast.flush(output="records")]) == _record_rows([slow.flush(output="records")])


def test_plain_micro_batches_go_straight_into_the_buffer_and_equal_batch(monkeypatch):
    from cep_gpu.benchmarks.workloads import seq3_events, seq3_rule

    direct = []
    real = AppendBuffer.append_columns

    def spy(self, *args):
        got = real(self, *args)
        direct.append(got is not None)
        return got

    monkeypatch.setattr(AppendBuffer, "append_columns", spy)
    events = seq3_events(5000, seed=4)
    text = seq3_rule(300, "each")
    batch = cep_gpu.detect(events, text, backend="reference", time_unit="ms")
    eng = Engine(text, backend="cpu", time_unit="ms")
    cols = {c: events[c].to_numpy() for c in events.columns}
    parts = [eng.publish({c: v[s:s + 100] for c, v in cols.items()}, output="records") for s in range(0, 5000, 100)]
    parts.append(eng.flush(output="records"))
    assert _record_rows(parts) == _record_rows([batch])
    # the first publish fixes the buffer's columns (the general path); every later one goes straight in
    assert direct == [True] * 49
    s = eng.stats()
    assert s["events"] == s["released"] == 5000 and s["fast_path"]["fallbacks"] == 0
    assert s["buffer_capacity"] <= 4 * max(1024, s["buffered"] + 100)


@pytest.mark.parametrize("case", ["late", "duplicate id", "id not above the last"])
def test_rejected_micro_batches_leave_no_trace(case):
    fast, slow = _pair(RULE, time_unit="s")
    first = {"type": np.array(["A", "B", "C"], object), "ts": np.array([1, 2, 3]), "k": np.zeros(3, np.int64),
             "v": np.full(3, 0.5), "id": np.array([10, 11, 12])}
    bad = {"late": dict(first, ts=np.array([0, 5, 6]), id=np.array([20, 21, 22])),
           "duplicate id": dict(first, ts=np.array([4, 5, 6]), id=np.array([12, 21, 22])),
           "id not above the last": dict(first, ts=np.array([3, 5, 6]), id=np.array([9, 21, 22]))}[case]
    for eng in (fast, slow):
        eng.publish(first, output="records")
    a, b = _outcome(fast, bad, "records"), _outcome(slow, bad, "records")
    assert a == b
    if case != "id not above the last":  # (a row at the last timestamp with a smaller id: accepted, in order)
        assert isinstance(a, tuple) and issubclass(a[0], CepError)
    assert_tables_equal(fast._buf.table(), slow._buf.table())
    assert _stats(fast) == _stats(slow)


@settings(max_examples=15, deadline=None, suppress_health_check=list(HealthCheck))  # (a compile per rule)
@given(st.data())
def test_one_rules_columns_in_place_equal_the_general_assembly(data):
    """``output="columns"`` of one rule's results (built in place) equals the general assembly
    (layout and gathers), arrays, dtypes and masks, over random rules and streams that give
    composite events."""
    from strategies import event_streams, tesla_rules

    import cep_gpu.output as output

    text = data.draw(tesla_rules(negations=False, aggregates=False, consuming=False))
    events = data.draw(event_streams(min_events=1, max_events=25))
    # (half the draws or more match nothing: filtered by the cheap reference, before a compile)
    assume(len(cep_gpu.detect(events, text, backend="reference")))
    rules = cep_gpu.parse_rules(text)
    eng = Engine(rules, backend="cpu")
    results = []
    real = Engine._columns

    def keep(self, res):
        results.append(list(res))
        return real(self, res)

    Engine._columns = keep
    try:
        for rec in _records(events):
            eng.publish(rec, output="columns")
    finally:
        Engine._columns = real
    table = eng._out_table()
    compared = 0
    for res in results:
        fast = output.assemble_columns(res, eng._schema, table)
        compared += len(fast["ts"])
        one = output._one_result
        output._one_result = lambda results, schema: None
        try:
            slow = output.assemble_columns(res, eng._schema, table)
        finally:
            output._one_result = one
        assert list(fast) == list(slow)
        for k in fast:
            assert fast[k].dtype == slow[k].dtype, k
            assert fast[k].tolist() == slow[k].tolist(), k
            assert np.ma.getmaskarray(fast[k]).tolist() == np.ma.getmaskarray(slow[k]).tolist(), k
    assert compared  # (never vacuous: the stream gave composite events)


@given(st.lists(st.text(max_size=4), min_size=1, max_size=5, unique=True),
       st.lists(st.integers(), min_size=0, max_size=5))
@settings(max_examples=60, deadline=None)
def test_record_dicts_by_generated_display_equal_dict_of_zip(keys, values):
    from cep_gpu.engine import _record_maker

    rows = [tuple(values[i % len(values)] if values else None for i in range(len(keys)))] * 3
    got = _record_maker(tuple(keys))(iter(rows))
    assert got == [dict(zip(keys, r)) for r in rows]
    assert [list(d) for d in got] == [list(keys)] * 3  # (the keys in order)


def test_numeric_timestamps_convert_back_from_ns():
    """``TimeFormat.from_ns`` (its int64/float64 shortcut and the general case) against Python's
    own arithmetic: floor division for integer formats, true division for float ones."""
    from cep_gpu.events import UNIT_NS, TimeFormat

    ns = np.array([-3_000_000_001, 0, 7, 2**62], np.int64)
    for unit, dtype in (("s", "int64"), ("ms", "float64"), ("ns", "int64"), ("us", "int32"), ("s", "float32")):
        got = TimeFormat("numeric", unit=unit, dtype=dtype).from_ns(ns)
        scale = UNIT_NS[unit]
        want = np.array([v // scale if "int" in dtype else v / scale for v in ns.tolist()]).astype(dtype)
        assert got.dtype == np.dtype(dtype) and got.tolist() == want.tolist()


def test_one_rules_columns_by_hand_nan_nulls_strings_and_kinds():
    """The in-place columns of one result: NaN is null even where valid, nulls masked, strings
    decoded, an int attribute in a float output column (schema of several rules) converted."""
    import cep_gpu.output as output
    from cep_gpu.detect import RuleResult
    from cep_gpu.engine import _empty_table
    from cep_gpu.events import AttributeColumn, StringDictionary, TimeFormat

    rules = cep_gpu.parse_rules("define P(x: int, y: float, s: string) from B(x=$x) as b and each A(x=$x) within 5 s "
                                "from b where x=b.x, y=b.y, s=b.s;\n"
                                "define Q(x: float) from B() as b and each A() within 5 s from b where x=b.y")
    strings = StringDictionary()
    codes = [strings.encode_one(t) for t in ("hi", "yo")]
    res = RuleResult(rules[0], np.array([1_000_000_000, 2_000_000_000], np.int64), np.array([[1, 0], [3, 2]], np.int64), {
        "x": AttributeColumn("int", np.array([4, 5], np.int64), np.array([True, False])),
        "y": AttributeColumn("float", np.array([np.nan, 2.5]), np.array([True, True])),
        "s": AttributeColumn("string", np.array(codes, np.int32), np.array([True, False]))})
    schema = output.OutputSchema.of(rules)
    table = _empty_table(strings, TimeFormat("numeric", unit="s", dtype="int64"))
    fast = output.assemble_columns([res], schema, table)
    one = output._one_result
    output._one_result = lambda results, schema: None
    try:
        slow = output.assemble_columns([res], schema, table)
    finally:
        output._one_result = one
    assert fast["x"].dtype == np.float64 and fast["x"].tolist() == [4.0, None]  # (x is float for Q)
    assert fast["y"].tolist() == [None, 2.5] and fast["s"].tolist() == ["hi", None]
    assert fast["ts"].tolist() == [1, 2] and fast["rule"].tolist() == ["P", "P"]
    for k in slow:
        assert fast[k].dtype == slow[k].dtype and fast[k].tolist() == slow[k].tolist(), k
        assert np.ma.getmaskarray(fast[k]).tolist() == np.ma.getmaskarray(slow[k]).tolist(), k
