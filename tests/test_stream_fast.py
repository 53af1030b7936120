"""The streaming fast path (issue 12, ``cep_gpu.stream_match``): the Engine's incremental
per-rule matcher gives the composite events of batch ``detect``, and is the path actually taken."""

from __future__ import annotations

import datetime

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from strategies import event_streams, seq_rules, tesla_rules
from test_engine import _publish_as, _record_rows, _records

import cep_gpu
from cep_gpu import Engine

#: rules the fast path covers (TESLA without aggregates/consuming, negations included), and
#: SEQ/AND patterns (those with a trailing NOT hold their terminators: stream_held; the differential covers both)
FAST_RULES = st.one_of(
    tesla_rules(negations=False, aggregates=False, consuming=False),
    tesla_rules(negations=True, aggregates=False, consuming=False),
    seq_rules(),
)

#: every output form of publish/flush
OUTPUTS = ["pandas", "arrow", "columns", "records", "tuples"]


def _dicts(eng: Engine, parts: list) -> list:
    """Outputs with ``output="tuples"`` parts as the dicts of ``output="records"``, and
    ``output="arrow"`` tables and ``output="columns"`` dicts as records too."""
    return [[dict(zip(eng.output_fields, t)) for t in p] if isinstance(p, list) and p and isinstance(p[0], tuple)
            else _arrow_records(p) if isinstance(p, pa.Table) else _column_records(p) if isinstance(p, dict)
            else p for p in parts]


def _column_records(cols: dict) -> list[dict]:
    """An ``output="columns"`` dict as the records of ``output="records"``, row by row."""
    n = len(cols["ts"])
    assert all(len(v) == n for v in cols.values()) and cols["ids"].dtype == np.int64
    ts = list(pd.to_datetime(cols["ts"])) if cols["ts"].dtype.kind == "M" else cols["ts"].tolist()
    lens = cols["ids_len"].tolist()
    recs = []
    for i in range(n):
        ids = cols["ids"][i]
        assert (ids[lens[i]:] == -1).all()  # the padding
        rec = {"rule": str(cols["rule"][i]), "ts": ts[i], "ids": tuple(ids[:lens[i]].tolist())}
        for name, col in cols.items():
            if name == "id_counts":
                rec[name] = [c for c in col[i].tolist() if c]  # 0: padding (a position takes >= 1 id)
            elif name not in ("rule", "ts", "ids", "ids_len"):
                assert isinstance(col, np.ma.MaskedArray)
                rec[name] = col.tolist()[i]  # masked: None
        recs.append(rec)
    return recs


def _arrow_records(table: pa.Table) -> list[dict]:
    """An ``output="arrow"`` table as the records of ``output="records"`` (Python values)."""
    recs = table.to_pylist()
    for r in recs:
        r["ids"] = tuple(r["ids"])
        if isinstance(r["ts"], datetime.datetime):
            r["ts"] = pd.Timestamp(r["ts"])
    return recs


def _fast_only(eng: Engine, rules) -> None:
    """Every rule the engine marks fast did all its matching on the fast path."""
    s = eng.stats()
    fast = s["fast_path"]
    if all(why == "fast" for why in fast["rules"].values()):
        assert fast["fallbacks"] == 0
        assert fast["calls"] == s["backend_calls"]


@settings(max_examples=50, deadline=None, suppress_health_check=list(HealthCheck))
@given(FAST_RULES, event_streams(min_events=1, max_events=30), st.data())
def test_fast_path_equals_batch_over_random_chunkings(text, events, data):
    rules = cep_gpu.parse_rules(text)
    batch = cep_gpu.detect(events, rules, backend="reference")
    eng = Engine(rules, backend="cpu", allowed_lateness=data.draw(st.sampled_from([None, None, 0, 2])))
    cuts = sorted(data.draw(st.lists(st.integers(0, len(events)), max_size=6)))
    parts, prev = [], 0
    for c in cuts + [len(events)]:
        if c > prev:
            form = data.draw(st.sampled_from(["records", "records", "frame", "columns"]))
            output = data.draw(st.sampled_from(OUTPUTS))
            parts += _publish_as(eng, events.iloc[prev:c], form, output)
        prev = c
    parts.append(eng.flush(output=data.draw(st.sampled_from(OUTPUTS))))
    assert _record_rows(_dicts(eng, parts)) == _record_rows([batch])
    _fast_only(eng, rules)


@settings(max_examples=30, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.sampled_from(["each", "last", "first"]), st.integers(1, 6), st.integers(0, 3), st.data())
def test_seq3_with_parameters_one_event_per_publish(policy, window, seed, data):
    """seq3 with k-equality (the benchmark's rule), every event its own publish."""
    from cep_gpu.benchmarks.workloads import seq3_events, seq3_rule

    events = seq3_events(data.draw(st.integers(1, 120)), seed=seed)
    events["k"] %= 3
    text = seq3_rule(window, policy)
    batch = cep_gpu.detect(events, text, backend="reference", time_unit="ms")
    eng = Engine(text, backend="cpu", time_unit="ms")
    parts = [eng.publish(r, output="records") for r in _records(events)] + [eng.flush(output="records")]
    assert _record_rows(parts) == _record_rows([batch])
    terminators = int((events["type"] == "C").sum())
    s = eng.stats()["fast_path"]
    assert s["rules"] == {"Seq3": "fast"} and s["fallbacks"] == 0
    assert s["calls"] == terminators  # one compiled call per terminator publish


def test_rules_outside_the_fast_path_say_why():
    text = ("define N pattern SEQ(A a, NOT(C z), B b) within 3 s;\n"
            "define G(n: int) from B() as b and n = Count(A() within 4 s from b) >= 1 where n = n;\n"
            "define K from B(x = $k) as b and each A(x = $k) as a within 5 s from b consuming a;\n"
            "define H from B() as b and each K() as k within 5 s from b;\n"
            "define F pattern SEQ(A a, B b) within 2 s;\n"
            "define T pattern SEQ(A a, B b, NOT(C z)) within 2 s;\n"
            "define U from B() as b and each T() as t within 5 s from b")
    why = Engine(text, backend="cpu").stats()["fast_path"]["rules"]
    assert why == {"N": "fast", "G": "fast", "K": "fast",
                   "H": "fast", "F": "fast", "T": "fast",
                   "U": "held terminators (trailing NOT upstream)"}
    assert set(Engine(text, backend="reference").stats()["fast_path"]["rules"].values()) == {"backend 'reference'"}


def _same_as_batch(events: pd.DataFrame, text: str, publish, **kw) -> Engine:
    batch = cep_gpu.detect(events, text, backend="reference", **kw)
    eng = Engine(text, backend="cpu", **kw)
    parts = publish(eng) + [eng.flush(output="records")]
    assert _record_rows(parts) == _record_rows([batch])
    return eng


def test_output_buffer_grows_instead_of_truncating():
    # 30 A, 30 B then one C: 900 matches in one call (the output array starts at 16 rows)
    events = pd.DataFrame({"type": ["A"] * 30 + ["B"] * 30 + ["C"], "ts": np.arange(61), "x": 1})
    text = "define M pattern SEQ(A a, B b, C c) within 100 s"
    eng = _same_as_batch(events, text, lambda e: [e.publish(r, output="records") for r in _records(events)])
    assert eng.stats()["composites"] == {"M": 900}


def test_long_stream_through_buffer_growth_compaction_and_column_reserve():
    from cep_gpu.benchmarks.workloads import seq3_events, seq3_rule

    events = seq3_events(6000, seed=3)
    text = seq3_rule(40, "each")

    def publish(eng):
        recs = _records(events)
        out = [eng.publish(r, output="records") for r in recs[:3000]]
        cols = {c: events[c].to_numpy()[3000:] for c in events.columns}
        for s in range(0, 3000, 37):  # columnar micro-batches
            out.append(eng.publish({c: v[s:s + 37] for c, v in cols.items()}, output="records"))
        return out

    eng = _same_as_batch(events, text, publish, time_unit="ms")
    s = eng.stats()
    assert s["fast_path"]["calls"] > 1000 and s["fast_path"]["fallbacks"] == 0
    assert s["fast_path"]["rebuilds"] >= 2  # the buffer compacted: columns rebuilt, results unchanged
    assert s["buffer_capacity"] < 5000


def test_rows_in_the_middle_of_the_window_are_matched_run_by_run():
    # ids out of order at one timestamp: the new rows 4 and 6 straddle the old row 5 (matched
    # before: the fast path matches the two runs of new rows, and row 5 only joins the columns)
    text = "define M from B() as b and each A() as a within 5 s from b"

    def publish(eng):
        out = [eng.publish({"type": "A", "ts": 0, "id": 1}, output="records"),
               eng.publish({"type": "B", "ts": 1, "id": 5}, output="records")]
        out.append(eng.publish(pd.DataFrame({"type": ["B", "B"], "ts": [1, 1], "id": [4, 6]}), output="records"))
        out.append(eng.publish({"type": "B", "ts": 2, "id": 7}, output="records"))
        return out

    events = pd.DataFrame({"type": ["A", "B", "B", "B", "B"], "ts": [0, 1, 1, 1, 2], "id": [1, 5, 4, 6, 7]})
    eng = _same_as_batch(events, text, publish)
    s = eng.stats()["fast_path"]
    assert s["fallbacks"] == 0 and s["calls"] == 3 and eng.stats()["composites"] == {"M": 4}


def test_string_constants_and_types_that_appear_later():
    text = "define W from B(s = 'late') as b and last Z(s = 'late') as z within 5 s from b"
    events = pd.DataFrame({"type": ["B", "A", "B", "Z", "B", "Z", "B"], "ts": np.arange(7),
                           "s": ["x", "y", "late", "late", "late", "y", "late"]})
    eng = _same_as_batch(events, text, lambda e: [e.publish(r, output="records") for r in _records(events)])
    assert eng.stats()["composites"] == {"W": 2} and eng.stats()["fast_path"]["calls"] == 4


def test_float_timestamps_and_datetime_streams():
    text = "define M from B(x = $k) as b and each A(x = $k) as a within 2 s from b"
    events = pd.DataFrame({"type": ["A", "B", "A", "B"], "ts": [0.5, 1.0, 1.25, 2.75], "x": [1, 1, 1, 1]})
    _same_as_batch(events, text, lambda e: [e.publish(r, output="records") for r in _records(events)])
    dt = events.assign(ts=pd.to_datetime(events["ts"], unit="s"))
    eng = _same_as_batch(dt, text, lambda e: [e.publish(dt.iloc[k:k + 1], output="records") for k in range(len(dt))])
    assert eng.stats()["fast_path"]["calls"] == 2


def test_auto_takes_the_fast_path_and_reports_it_to_the_planner():
    from cep_gpu.benchmarks.workloads import seq3_events, seq3_rule

    events = seq3_events(300, seed=1)
    text = seq3_rule(50, "last")
    batch = cep_gpu.detect(events, text, backend="reference", time_unit="ms")
    eng = Engine(text, backend="auto", time_unit="ms")
    parts = [eng.publish(r, output="records") for r in _records(events)] + [eng.flush(output="records")]
    assert _record_rows(parts) == _record_rows([batch])
    s = eng.stats()
    terminators = int((events["type"] == "C").sum())
    assert s["fast_path"]["calls"] == terminators
    planner = s["backend_stats"]
    assert planner["cpu"]["terminators"] + planner["gpu"]["terminators"] == terminators


def test_auto_decides_once_per_rule_and_occupancy_bucket(monkeypatch):
    """With a usable GPU, the planner is asked once per (rule, occupancy bucket); GPU answers
    take the general path, and the results do not change."""
    from cep_gpu import planner
    from cep_gpu.benchmarks.workloads import seq3_events, seq3_rule

    calls = []

    def fake_decide(profile, features, usable):
        calls.append(1)
        return ("gpu" if len(calls) % 2 else "cpu"), 1.0, 1.0, "test"

    monkeypatch.setattr(planner, "decide", fake_decide)
    events = seq3_events(400, seed=2)
    text = seq3_rule(30, "each")
    batch = cep_gpu.detect(events, text, backend="reference", time_unit="ms")
    eng = Engine(text, backend="auto", time_unit="ms")
    eng._backend._gpu_available = True
    eng._backend._gpu = cep_gpu.backends.get_backend("cpu")  # the "GPU" is the CPU backend here
    parts = [eng.publish(r, output="records") for r in _records(events)] + [eng.flush(output="records")]
    assert _record_rows(parts) == _record_rows([batch])
    terminators = int((events["type"] == "C").sum())
    choice = eng._auto_choice
    assert 0 < choice.decisions == len(choice._cache) <= 12  # per occupancy bucket, not per terminator
    s = eng.stats()
    assert 0 < s["fast_path"]["calls"] < terminators


@settings(max_examples=7, deadline=None, suppress_health_check=list(HealthCheck))
@given(FAST_RULES, event_streams(min_events=1, max_events=12))
def test_restore_at_every_position_on_the_fast_path(text, events):
    rules = cep_gpu.parse_rules(text)
    batch = cep_gpu.detect(events, rules, backend="reference")
    recs = _records(events)
    for k in range(len(recs) + 1):
        eng = Engine(rules, backend="cpu")
        parts = [eng.publish(r, output="records") for r in recs[:k]]
        again = Engine.restore(eng.checkpoint())
        parts += [again.publish(r, output="records") for r in recs[k:]]
        parts.append(again.flush(output="records"))
        assert _record_rows(parts) == _record_rows([batch]), f"restored after {k} events"


@pytest.mark.parametrize("policy", ["each", "last", "first"])
def test_generated_kernels_are_cached_on_disk(policy, tmp_path, monkeypatch):
    """The fast path's kernels go through the kernel cache: a file per rule in the cache dir."""
    from cep_gpu.benchmarks.workloads import seq3_rule
    from cep_gpu.stream_match import _KERNELS

    monkeypatch.setenv("CEP_GPU_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr("cep_gpu.stream_match._KERNELS", {})
    monkeypatch.setattr("cep_gpu.stream_match._BY_RULE", {})
    eng = Engine(seq3_rule(7, policy), backend="cpu", time_unit="ms")
    for r in ({"type": "A", "ts": 0, "k": 1}, {"type": "B", "ts": 1, "k": 1}, {"type": "C", "ts": 2, "k": 1}):
        out = eng.publish(r, output="records")
    assert [o["ids"] for o in out] == [(2, 1, 0)]
    files = list(tmp_path.rglob("k_*.py"))
    assert any("def s_match" in f.read_text() for f in files)
    assert _KERNELS is not None


# -- columnar micro-batches without Arrow --------------------------------------------------------


_column_batches = st.integers(1, 12).flatmap(lambda n: st.fixed_dictionaries(
    {
        "type": st.lists(st.sampled_from(["A", "B", "C"]), min_size=n, max_size=n),
        "ts": st.one_of(
            st.lists(st.integers(-5, 5), min_size=n, max_size=n).map(sorted),
            st.lists(st.floats(-5, 5, allow_nan=False), min_size=n, max_size=n).map(sorted),
        ),
    },
    optional={
        "x": st.lists(st.integers(-3, 3), min_size=n, max_size=n),
        "y": st.lists(st.sampled_from([0.5, -1.0, float("nan")]), min_size=n, max_size=n),
        "s": st.lists(st.sampled_from(["u", "v", "ü"]), min_size=n, max_size=n),
        "b": st.lists(st.booleans(), min_size=n, max_size=n),
    },
))


@settings(max_examples=120, deadline=None, suppress_health_check=list(HealthCheck))
@given(_column_batches, st.sampled_from(["s", "ms"]))
def test_numpy_columns_without_arrow_equal_the_arrow_path(batch, unit):
    import pyarrow as pa

    from cep_gpu.events import EventTable, StringDictionary
    from cep_gpu.stream_buffer import table_from_columns

    cols = {k: np.array(v, dtype=object if k in ("type", "s") else None) for k, v in batch.items()}
    fast_strings, slow_strings = StringDictionary(), StringDictionary()
    fast = table_from_columns(cols, 7, unit, fast_strings)
    assert fast is not None
    n = len(batch["type"])
    arrow = pa.table({**{k: pa.array(v) for k, v in cols.items()}, "id": pa.array(np.arange(7, 7 + n))})
    slow = EventTable.from_arrow(arrow, time_unit=unit, strings=slow_strings, sort=True)
    assert fast.ts.tolist() == slow.ts.tolist() and fast.ids.tolist() == slow.ids.tolist()
    assert [fast.type_names[t] for t in fast.types] == [slow.type_names[t] for t in slow.types]
    assert fast.time == slow.time
    assert set(fast.columns) == set(slow.columns)
    for k, a in fast.columns.items():
        b = slow.columns[k]
        assert (a.kind, a.valid.tolist()) == (b.kind, b.valid.tolist()), k
        if a.kind == "string":
            assert fast_strings.decode(a.values).tolist() == slow_strings.decode(b.values).tolist()
        else:
            assert a.values[a.valid].tolist() == b.values[b.valid].tolist()
    assert {t: v for t, v in fast.schema.items()} == {t: v for t, v in slow.schema.items()}


def test_columns_outside_the_plain_cases_take_the_arrow_path():
    from cep_gpu.events import StringDictionary
    from cep_gpu.stream_buffer import table_from_columns

    ok = {"type": np.array(["A", "B"], object), "ts": np.array([1, 2])}
    assert table_from_columns(ok, 0, "s", StringDictionary()) is not None
    for bad in (
        {"ts": np.array([2, 1])},  # unsorted: sorted by the general path
        {"ts": np.array([1.0, np.inf])},
        {"ts": np.array([1, 2], np.int32)},
        {"x": np.array(["a", None], object)},  # nulls in strings
        {"x": np.array([1, 2], np.int32)},
        {"id": np.array([5, 4])},  # ids against their order at a tied ts? here ts differ: fine
        {"type": ["A", "B"]},
    ):
        cols = {**ok, **bad}
        got = table_from_columns(cols, 0, "s", StringDictionary())
        if "id" in bad:
            assert got is not None and got.ids.tolist() == [5, 4]
        else:
            assert got is None, bad


def test_static_filters_with_arithmetic_and_strings_are_compiled():
    text = "define R from B(s != 'v') as b and each A(x + 1 > y and s = 'u') as a within 5 s from b"
    events = pd.DataFrame({"type": ["A", "A", "A", "B", "B"], "ts": [0, 1, 2, 3, 4],
                           "x": [1, 0, 3, 0, 0], "y": [1.5, 2.5, 0.5, 0.0, 0.0], "s": ["u", "u", "v", "u", "v"]})
    eng = _same_as_batch(events, text, lambda e: [e.publish(r, output="records") for r in _records(events)])
    assert eng.stats()["composites"] == {"R": 1} and eng.stats()["fast_path"]["calls"] == 2


def test_restore_of_a_checkpoint_saved_before_the_fast_path_existed():
    text = "define M from B(x = $k) as b and each A(x = $k) as a within 5 s from b"
    eng = Engine(text, backend="cpu")
    eng.publish({"type": "A", "ts": 0, "x": 1})
    for old in ("_fast_why", "_fast_calls", "_fast_fallbacks"):  # what an older engine lacked
        del eng.__dict__[old]
    again = Engine.restore(eng.checkpoint())
    assert [r["ids"] for r in again.publish({"type": "B", "ts": 1, "x": 1}, output="records")] == [(1, 0)]
    assert again.stats()["fast_path"]["calls"] == 1


@pytest.mark.parametrize("policy", ["each", "last", "first"])
def test_large_micro_batches_take_the_fast_path_through_the_key_chains(policy):
    """A publish of thousands of rows is matched by the fast path (its key chains, not a scan
    of each window) and equals batch, followed by one-event publishes on the same columns."""
    from cep_gpu.benchmarks.workloads import seq3_events, seq3_rule
    from cep_gpu.stream_match import FAST_PATH_MAX_ROWS

    n = FAST_PATH_MAX_ROWS + 600
    events = seq3_events(n, seed=4)
    events["k"] %= 7
    cols = {c: events[c].to_numpy() for c in events.columns}

    def publish(eng):
        big = FAST_PATH_MAX_ROWS + 1
        out = [eng.publish({c: v[:big] for c, v in cols.items()}, output="records")]
        return out + [eng.publish(r, output="records") for r in _records(events.iloc[big:])]

    eng = _same_as_batch(events, seq3_rule(20, policy), publish, time_unit="ms")
    s = eng.stats()
    assert s["fast_path"]["calls"] > 100 and s["backend_calls"] == s["fast_path"]["calls"]


def test_large_micro_batches_of_rules_without_key_chains_take_the_indexed_general_path():
    """An equality with an expression (``a.x = b.x + 1``) has no chain: a publish of more than
    ``FAST_PATH_MAX_ROWS`` rows goes to the CDP backend (its parameter index), the columns keep up."""
    from cep_gpu.stream_match import FAST_PATH_MAX_ROWS

    n = FAST_PATH_MAX_ROWS + 300
    rng = np.random.default_rng(5)
    events = pd.DataFrame({"type": rng.choice(["A", "B"], n), "ts": np.arange(n), "x": rng.integers(0, 9, n)})
    text = "define R from B() as b and each A(x = b.x + 1) as a within 15 ms from b"
    cols = {c: events[c].to_numpy() for c in events.columns}
    big = FAST_PATH_MAX_ROWS + 1

    def publish(eng):
        out = [eng.publish({c: v[:big] for c, v in cols.items()}, output="records")]
        return out + [eng.publish(r, output="records") for r in _records(events.iloc[big:])]

    eng = _same_as_batch(events, text, publish, time_unit="ms")
    s = eng.stats()
    assert s["fast_path"]["calls"] > 50 and s["backend_calls"] == s["fast_path"]["calls"] + 1


_key_kinds = st.sampled_from([
    ("int", "int"), ("int", "float"), ("float", "float"), ("float", "int"), ("str", "str"), ("bool", "bool"),
    ("bool", "float"), ("float", "bool"), ("bool", "int"),
])


def _key_values(kind: str, rng, n: int):
    if kind == "int":
        return rng.integers(-2, 3, n)
    if kind == "float":  # integral floats equal ints; -0.0 equals 0.0; NaN equals nothing
        return rng.choice([-1.0, -0.0, 0.0, 1.0, 2.0, 0.5, float("nan")], n)
    if kind == "str":
        return rng.choice(np.array(["u", "v", "w"], object), n)
    return rng.integers(0, 2, n).astype(bool)


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(_key_kinds, st.sampled_from(["each", "last", "first"]), st.integers(0, 10**6), st.data())
def test_key_chains_equal_batch_for_every_key_kind(kinds, policy, seed, data):
    """The chains hash values so that equal ones (3 and 3.0, 0.0 and -0.0) share a bucket and
    nulls/NaN join none: seq3-like streams whose keys mix kinds, with nulls, in random chunkings."""
    rng = np.random.default_rng(seed)
    n = data.draw(st.integers(1, 80))
    types = rng.choice(["A", "B", "C"], n)
    keys = {"A": _key_values(kinds[0], rng, n), "B": _key_values(kinds[1], rng, n), "C": _key_values(kinds[1], rng, n)}
    rows = []
    for i, t in enumerate(types):
        rec = {"type": str(t), "ts": i}
        if rng.random() > 0.1:  # some events lack the key: null
            v = keys[str(t)][i]
            rec["k" if t != "A" else "ka"] = v.item() if hasattr(v, "item") else v
        rows.append(rec)
    events = pd.DataFrame(rows, columns=["type", "ts", "k", "ka"])
    text = (f"define S from C(k=$k) as c and {policy} B(k=$k) as b within 6 s from c "
            f"and {policy} A(ka=$k) as a within 6 s from b")
    batch = cep_gpu.detect(events, text, backend="reference")
    eng = Engine(text, backend="cpu")
    cuts = sorted(data.draw(st.lists(st.integers(0, n), max_size=4)))
    parts, prev = [], 0
    for c in cuts + [n]:
        if c > prev:
            parts += _publish_as(eng, events.iloc[prev:c], data.draw(st.sampled_from(["records", "frame"])), "records")
        prev = c
    parts.append(eng.flush(output="records"))
    assert _record_rows(parts) == _record_rows([batch])
    _fast_only(eng, [text])


def test_tuples_output_is_records_without_the_dicts():
    """``output="tuples"``: the values of ``output="records"`` in ``output_fields`` order, for
    publish and flush; subscribers still get dicts; an unknown output form is an error."""
    text = ("define AB(v: float, s: string) from B(x = $k) as b and each A(x = $k) as a within 5 s from b "
            "where v = a.y and s = b.s")
    events = [{"type": "A", "ts": 0.0, "x": 1, "y": 1.5}, {"type": "A", "ts": 0.5, "x": 1, "y": float("nan")},
              {"type": "B", "ts": 1.0, "x": 1, "s": "u"}]
    got, seen = Engine(text, backend="cpu"), []
    want = Engine(text, backend="cpu")
    got.subscribe("AB", seen.append)
    assert got.output_fields == ("rule", "ts", "ids", "v", "s")
    for e in events:
        tuples, records = got.publish(e, output="tuples"), want.publish(e, output="records")
        assert [dict(zip(got.output_fields, t)) for t in tuples] == records
    assert records == [{"rule": "AB", "ts": 1.0, "ids": (2, 0), "v": 1.5, "s": "u"},
                       {"rule": "AB", "ts": 1.0, "ids": (2, 1), "v": None, "s": "u"}]
    assert seen == [records]
    assert got.flush(output="tuples") == [] and got.flush(output="tuples") == []
    with pytest.raises(cep_gpu.ArgumentError, match="tuples"):
        Engine(text).publish(events[0], output="rows")


def test_arrow_output_is_batch_arrow_output():
    """``output="arrow"``: per publish, a pyarrow Table with batch ``detect(output="arrow")``'s
    schema; concatenated, the same table as batch (one rule: publishes come in batch order);
    an empty publish gives an empty table of that schema; subscribers still get records."""
    rng = np.random.default_rng(5)
    n = 400
    events = pd.DataFrame({"type": rng.choice(["A", "B", "C"], n), "ts": np.arange(n, dtype=np.int64),
                           "k": rng.integers(0, 4, n), "v": rng.normal(size=n)})
    events.loc[events.index % 7 == 0, "v"] = np.nan  # nulls in a returned attribute
    text = ("define R(x: float) from C(k=$k) as c and each B(k=$k) as b within 30 s from c "
            "and each A(k=$k) as a within 30 s from b where x = a.v")
    batch = cep_gpu.detect(events, text, backend="cpu", output="arrow")
    eng, seen = Engine(text, backend="cpu"), []
    eng.subscribe("R", seen.append)
    cols = {c: events[c].to_numpy() for c in events.columns}
    parts = [eng.publish({c: v[s:s + 37] for c, v in cols.items()}, output="arrow") for s in range(0, n, 37)]
    parts.append(eng.flush(output="arrow"))
    assert all(isinstance(p, pa.Table) and p.schema == batch.schema for p in parts)
    assert any(p.num_rows == 0 for p in parts) and len(batch) > 100
    assert pa.concat_tables(parts).equals(batch)
    assert [r["ids"] for recs in seen for r in recs] == [tuple(i) for i in batch.column("ids").to_pylist()]
    again = eng.flush(output="arrow")
    assert isinstance(again, pa.Table) and again.num_rows == 0 and again.schema == batch.schema


def test_columns_output_by_hand():
    """``output="columns"``: two rules of different widths (ids padded with -1 past ``ids_len``),
    output order by (ts, rule, ids), a string attribute and nulls (masked), NumPy arrays only."""
    text = ("define AB(s: string, v: float) from B(x = $k) as b and each A(x = $k) as a within 5 s from b "
            "where s = a.s and v = a.y\n"
            "define ABC pattern SEQ(A a, B b, C c) within 5 s")
    events = [{"type": "A", "ts": 0.0, "x": 1, "y": 1.5, "s": "p"},
              {"type": "A", "ts": 0.5, "x": 1, "y": float("nan"), "s": "q"},
              {"type": "B", "ts": 1.0, "x": 1, "s": "u"},
              {"type": "C", "ts": 2.0, "x": 1}]
    eng = Engine(text, backend="cpu")
    got = [eng.publish(e, output="columns") for e in events] + [eng.flush(output="columns")]
    assert [len(c["ts"]) for c in got] == [0, 0, 2, 2, 0]
    ab, abc = got[2], got[3]
    assert set(ab) == {"rule", "ts", "ids", "ids_len", "s", "v"}
    assert ab["rule"].tolist() == ["AB", "AB"] and ab["ts"].tolist() == [1.0, 1.0]
    assert ab["ids"].tolist() == [[2, 0], [2, 1]] and ab["ids_len"].tolist() == [2, 2]
    assert ab["s"].tolist() == ["p", "q"] and ab["v"].tolist() == [1.5, None]  # NaN is null
    assert abc["ids"].tolist() == [[0, 2, 3], [1, 2, 3]] and abc["ids_len"].tolist() == [3, 3]
    assert abc["s"].mask.all() and abc["v"].mask.all()  # ABC defines neither attribute
    # one publish with both rules' events: (ts, rule, ids) order, the 2-id rows padded
    again = Engine(text, backend="cpu")
    both = again.publish(pd.DataFrame(events), output="columns")
    assert both["rule"].tolist() == ["AB", "AB", "ABC", "ABC"]
    assert both["ids"].tolist() == [[2, 0, -1], [2, 1, -1], [0, 2, 3], [1, 2, 3]]
    assert both["ids_len"].tolist() == [2, 2, 3, 3]
    assert all(isinstance(v, np.ndarray) for v in both.values())
    batch = cep_gpu.detect(pd.DataFrame(events), text, backend="reference")
    assert _record_rows([_column_records(both)]) == _record_rows([batch])


@pytest.mark.parametrize("output", ["records", "tuples", "arrow", "columns"])
def test_thousands_of_records_at_once_equal_batch_and_leave_the_collector_on(output):
    """3,600 composite events from one terminator (records are built with Python's cyclic
    collector paused: it is on again afterwards)."""
    import gc

    events = pd.DataFrame({"type": ["A"] * 60 + ["B"] * 60 + ["C"], "ts": np.arange(121), "x": 1})
    text = "define M pattern SEQ(A a, B b, C c) within 200 s"
    batch = cep_gpu.detect(events, text, backend="reference")
    eng = Engine(text, backend="cpu")
    assert gc.isenabled()
    parts = [eng.publish(r, output=output) for r in _records(events)]
    assert gc.isenabled() and sum(len(p["ts"]) if isinstance(p, dict) else len(p) for p in parts) == 3600
    assert _record_rows(_dicts(eng, parts)) == _record_rows([batch])


@pytest.mark.parametrize("size", [1, 37, 5000])
def test_negation_columns_through_reserve_and_compaction(size):
    """A rule with a (non-trailing) negation on the fast path over a stream long enough to
    compact the buffer and the columns many times (the negation's rows and timestamps move
    with them), in one-event publishes, micro-batches and one large publish."""
    rng = np.random.default_rng(11)
    n = 3000
    events = pd.DataFrame({"type": rng.choice(["A", "B", "C"], n), "ts": np.arange(n), "x": rng.integers(0, 5, n)})
    text = ("define R from B(x=$k) as b and each A(x=$k) as a within 20 s from b "
            "and not C(x=$k) between a and b")
    cols = {c: events[c].to_numpy() for c in events.columns}

    def publish(eng):
        return [eng.publish({c: v[s:s + size] for c, v in cols.items()}, output="records")
                for s in range(0, n, size)]

    eng = _same_as_batch(events, text, publish)
    s = eng.stats()
    assert s["fast_path"]["rules"] == {"R": "fast"} and s["fast_path"]["fallbacks"] == 0
    assert s["backend_calls"] == s["fast_path"]["calls"] and s["composites"]["R"] > 100


# -- rules that took the general path on backend="cpu" (consumption, held terminators, in-place merges)

_GENERAL_RULES = [
    "define X from C(k=$k) and last B(k=$k) within 3 s from C consuming B",
    "define X from C(k=$k) and each B(k=$k) within 3 s from C and each A(k=$k) within 2 s from B "
    "consuming A, B",
    "define X from C(k=$k) and last B(k=$k) within 3 s from C and n = Count(A(k=$k) within 3 s from C) >= 1",
    "define X(k: int) from C(k=$k) and last B(k=$k) within 3 s from C where k = C.k\n\n"
    "define Y from X(k=$k) and last A(k=$k) within 2 s from X",
    "define X(k: int) from C(k=$k) and each B(k=$k) within 3 s from C where k = C.k consuming B\n\n"
    "define Y from X(k=$k) and each A(k=$k) within 2 s from X consuming A",
    # a fast-path rule with a negation column feeding a hierarchy, and one beside it: their
    # columns take back the rows a merged composite event renumbered
    "define X(k: int) from C(k=$k) and each B(k=$k) within 3 s from C and not A(k=$k) within 1 s "
    "from C where k = C.k\n\ndefine Y from X(k=$k) and last A(k=$k) within 2 s from X\n\n"
    "define W from C(k=$k) and each A(k=$k) within 2 s from C",
    # a trailing NOT (held terminators) and a rule reading its composite events
    "define S pattern SEQ(B b, C c, NOT(A z)) within 2 s where b.k = c.k and z.k = c.k return k := c.k\n\n"
    "define T from A(k=$k) and each S(k=$k) within 3 s from A",
]


@settings(max_examples=30, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.sampled_from(_GENERAL_RULES), st.integers(2, 60), st.integers(0, 10**6), st.data())
def test_consuming_held_aggregate_and_hierarchy_rules_one_event_per_publish_equal_batch(text, n, seed, data):
    """Consuming, held-terminator, aggregate and hierarchy rules (the fast path now; a rule
    reading a holding rule's composite events stays on the general path) with backend="cpu",
    whose buffer merges a composite event into its last rows in place: one event per publish,
    with a checkpoint and restore at a drawn position, equal batch."""
    rng = np.random.default_rng(seed)
    events = pd.DataFrame({
        "type": rng.choice(["A", "B", "C"], size=n, p=[0.4, 0.4, 0.2]),
        "ts": np.cumsum(rng.integers(0, 3, n)) * 0.5,  # ties included
        "k": rng.integers(0, 3, n),
    })
    batch = cep_gpu.detect(events, text, backend="reference")
    recs = _records(events)
    k = data.draw(st.integers(0, n))
    eng = Engine(text, backend="cpu")
    parts = [eng.publish(r, output="records") for r in recs[:k]]
    eng = Engine.restore(eng.checkpoint())
    parts += [eng.publish(r, output="records") for r in recs[k:]] + [eng.flush(output="records")]
    assert _record_rows(parts) == _record_rows([batch])


_PRELOAD_CHILD = r'''
import json, sys
import numpy as np, pandas as pd
from numba.core import dispatcher
import cep_gpu

at = {"i": -1}
loads = []
orig = dispatcher.Dispatcher._compile_for_args


def logged(self, *a, **k):
    loads.append((at["i"], self.py_func.__name__))
    return orig(self, *a, **k)


dispatcher.Dispatcher._compile_for_args = logged
rng = np.random.default_rng(1)
n = 1500
ev = pd.DataFrame({"type": rng.choice(["A", "B", "C"], n), "ts": np.arange(n) * 0.1, "v": rng.random(n)})
eng = cep_gpu.Engine(sys.argv[1], backend="cpu")
for i, r in enumerate(ev.to_dict("records")):
    at["i"] = i
    r["id"] = i
    eng.publish(r, output="columns")
(_, m), = eng._fast.values()
print(json.dumps({"loads": loads, "out_rows": len(m._out), "fast": eng.stats()["fast_path"]}))
'''


@pytest.mark.parametrize("rule", [
    "define P pattern SEQ(A a, B b, C c) where a.v < c.v within 4 s",
    "define P pattern SEQ(A a, B b, C c, NOT(B x)) where a.v < c.v within 4 s",
])
def test_every_stream_kernel_is_loaded_before_the_stream_needs_it(rule):
    """A kernel loaded from the disk cache on its first call costs 2-200 ms: the first output
    overflow, compaction or sync must not pay it mid-stream (DARLING's real-time bound saw a
    2.7 ms publish at a first overflow). In a fresh process, every load happens at the publish
    that sets the matcher up, none later; the stream did overflow its first output array."""
    import json
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", _PRELOAD_CHILD, rule], capture_output=True, text=True,
                          check=True, timeout=600)
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert got["out_rows"] > 16  # (the output array grew: _take_out ran on the stream)
    stream_loads = [(i, name) for i, name in got["loads"] if i >= 0]
    assert stream_loads, got  # the matcher's kernels load at its setup, inside the stream
    first = stream_loads[0][0]
    assert [x for x in stream_loads if x[0] != first] == [], got
