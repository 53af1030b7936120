"""The streaming Engine: same results as batch detect, lateness, bounded memory, callbacks, flush."""

from __future__ import annotations

import logging

import numpy as np
import pandas as pd
import pytest
from conftest import id_tuples
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from strategies import event_streams, rules_and_streams

import cep_gpu
from cep_gpu import Engine, EventError, LateEventError

AB = "define AB(v: float) from B(x = $k) as b and each A(x = $k) as a within 5 s from b where v = a.y"
TRAIL = "define S pattern SEQ(A a, B b, NOT(C z)) within 3 s return v := a.y"


def _stream(engine: Engine, events: pd.DataFrame, cuts: list[int]) -> pd.DataFrame:
    parts, prev = [], 0
    for c in sorted(cuts) + [len(events)]:
        parts.append(engine.publish(events.iloc[prev:c]))
        prev = c
    parts.append(engine.flush())
    return parts


def _rows(out) -> list[tuple]:
    """Rows as comparable tuples (rule, ts, ids, attributes with NaN/None as None), sorted.

    ``out`` is one output frame or a list of them (the outputs of successive publishes).
    """
    if isinstance(out, list):
        return sorted((row for part in out for row in _rows(part)), key=repr)
    cols = [c for c in out.columns if c not in ("rule", "ts", "ids")]
    rows = []
    for k in range(len(out)):
        attrs = tuple(None if pd.isna(out[c].iloc[k]) else out[c].iloc[k] for c in cols)
        rows.append((out["rule"].iloc[k], out["ts"].iloc[k], tuple(out["ids"].iloc[k]), attrs))
    return sorted(rows, key=repr)


# -- streaming == batch ------------------------------------------------------------------------------


# (publishes of random chunks against batch detection: tests/test_differential.py)


@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
@given(rules_and_streams(min_events=4, max_events=16))
def test_event_by_event_equals_batch(case):
    text, events = case
    rules = cep_gpu.parse_rules(text)
    batch = cep_gpu.detect(events, rules, backend="reference")
    eng = Engine(rules, backend="reference")
    parts = [eng.publish(rec) for rec in _records(events)] + [eng.flush()]
    assert _rows(parts) == _rows(batch)


def _records(events: pd.DataFrame) -> list[dict]:
    """One dict per event, leaving out null attributes (as a producer would)."""
    out = []
    for rec in events.to_dict("records"):
        out.append({k: v for k, v in rec.items() if not (v is None or v is pd.NA or (isinstance(v, float) and np.isnan(v)))})
    return out


def test_publish_returns_composites_at_once_in_the_output_layout():
    eng = Engine(AB, backend="reference")
    first = eng.publish({"type": "A", "ts": 1.0, "x": 1, "y": 2.5})
    assert list(first.columns) == ["rule", "ts", "ids", "v"] and len(first) == 0
    out = eng.publish({"type": "B", "ts": 2.0, "x": 1})
    assert id_tuples(out) == [(1, 0)]
    assert out["ts"].tolist() == [2.0] and out["v"].tolist() == [2.5]
    assert str(out["ids"].dtype) == "list<item: int64>[pyarrow]"


def test_running_ids_across_publishes_match_batch():
    frames = [
        pd.DataFrame({"type": ["A", "A"], "ts": [0, 1], "x": [1, 1], "y": [1.0, 2.0]}),
        pd.DataFrame({"type": ["B"], "ts": [2], "x": [1]}),
    ]
    eng = Engine(AB, backend="reference")
    got = [eng.publish(f) for f in frames]
    assert id_tuples(got[1]) == [(2, 0), (2, 1)]
    assert got[1]["ts"].tolist() == [2, 2] and got[1]["ts"].dtype == np.int64  # ints stay ints
    batch = cep_gpu.detect(pd.concat(frames, ignore_index=True), AB, backend="reference")
    assert _rows(got[1]) == _rows(batch)


def test_datetime_stream():
    t0 = pd.Timestamp("2024-01-01 12:00")
    eng = Engine(AB, backend="reference")
    eng.publish({"type": "A", "ts": t0, "x": 1, "y": 1.0})
    out = eng.publish({"type": "B", "ts": t0 + pd.Timedelta(seconds=3), "x": 1})
    assert out["ts"].tolist() == [t0 + pd.Timedelta(seconds=3)]
    with pytest.raises(EventError, match="earlier events had datetime"):
        eng.publish({"type": "B", "ts": 10.0, "x": 1})


def test_arrow_input_and_empty_frames():
    import pyarrow as pa

    eng = Engine(AB, backend="reference")
    assert len(eng.publish(pd.DataFrame({"type": pd.Series([], dtype=object), "ts": pd.Series([], dtype=float)}))) == 0
    out = eng.publish(pa.table({"type": ["A", "B"], "ts": [0.0, 1.0], "x": [2, 2], "y": [1.0, None]}))
    assert id_tuples(out) == [(1, 0)]
    with pytest.raises(EventError, match="publish\\(\\) takes a dict"):
        eng.publish([1, 2, 3])


def test_duplicate_ids_across_publishes():
    eng = Engine(AB, backend="reference")
    eng.publish(pd.DataFrame({"type": ["A"], "ts": [0], "id": [7]}))
    with pytest.raises(EventError, match="duplicate event id 7"):
        eng.publish(pd.DataFrame({"type": ["A"], "ts": [1], "id": [7]}))


# -- late events --------------------------------------------------------------------------------------


def test_late_event_is_an_error_naming_it():
    eng = Engine(AB, backend="reference")
    eng.publish({"type": "A", "ts": 5.0, "x": 1})
    with pytest.raises(LateEventError, match=r"late event B\(id=1, ts=4.0\).*allowed_lateness"):
        eng.publish({"type": "B", "ts": 4.0, "x": 1})
    # the rejected event left no trace: the next event still gets id 1
    out = eng.publish({"type": "B", "ts": 6.0, "x": 1})
    assert id_tuples(out) == [(1, 0)]


def test_equal_timestamps_are_not_late():
    eng = Engine(AB, backend="reference")
    eng.publish({"type": "A", "ts": 5.0, "x": 1})
    eng.publish({"type": "B", "ts": 5.0, "x": 1})
    assert eng.stats()["events"] == 2


def test_rows_of_one_frame_may_come_in_any_order():
    ev = pd.DataFrame({"type": ["B", "A"], "ts": [3.0, 1.0], "x": [1, 1], "y": [None, 4.0]})
    out = Engine(AB, backend="reference").publish(ev)
    assert id_tuples(out) == [(0, 1)]


def test_lateness_buffers_and_releases_in_order():
    eng = Engine(AB, backend="reference", allowed_lateness=2)
    assert len(eng.publish({"type": "B", "ts": 3.0, "x": 1})) == 0  # held: watermark 1
    assert len(eng.publish({"type": "A", "ts": 2.0, "x": 1, "y": 1.0})) == 0  # late but allowed
    assert eng.stats()["waiting_late"] == 2
    out = eng.publish({"type": "C", "ts": 5.0})  # watermark 3: releases A@2 and B@3
    assert id_tuples(out) == [(0, 1)]
    assert eng.stats()["waiting_late"] == 1
    assert eng.stats()["late"] == 0


def test_lateness_as_timedelta_and_flush_releases_everything():
    t0 = pd.Timestamp("2024-01-01")
    eng = Engine(AB, backend="reference", allowed_lateness=pd.Timedelta(minutes=1))
    eng.publish({"type": "B", "ts": t0 + pd.Timedelta(seconds=4), "x": 1})
    eng.publish({"type": "A", "ts": t0 + pd.Timedelta(seconds=1), "x": 1, "y": 1.0})
    out = eng.flush()
    assert id_tuples(out) == [(0, 1)]


def test_too_late_events_are_reported_not_lost(caplog):
    reported = []
    eng = Engine(AB, backend="reference", allowed_lateness=1, on_late=reported.extend)
    eng.publish({"type": "A", "ts": 1.0, "x": 1})
    eng.publish({"type": "A", "ts": 5.0, "x": 1})  # releases A@1 (watermark 4)
    with caplog.at_level(logging.WARNING, logger="cep_gpu.engine"):
        eng.publish({"type": "B", "ts": 0.5, "x": 1})  # older than what was released
    assert [(r["type"], r["ts"], r["id"]) for r in reported] == [("B", 0.5, 2)]
    stats = eng.stats()
    assert stats["late"] == 1 and stats["late_events"][0]["id"] == 2
    assert "later than the allowed lateness" in caplog.text
    # within the lateness it is still accepted
    eng.publish({"type": "B", "ts": 4.5, "x": 1})
    assert eng.stats()["late"] == 1


def test_lateness_argument_errors():
    with pytest.raises(ValueError, match="allowed_lateness"):
        Engine(AB, backend="reference", allowed_lateness="soon")
    with pytest.raises(ValueError, match="negative"):
        Engine(AB, backend="reference", allowed_lateness=-1)


def test_lateness_streaming_equals_batch_on_shuffled_input():
    rng = np.random.default_rng(3)
    n = 300
    ts = np.sort(rng.integers(0, 150, n)).astype(float)
    events = pd.DataFrame({
        "type": rng.choice(["A", "B"], n), "ts": ts, "x": rng.integers(0, 3, n), "y": rng.random(n),
    })
    # deliver with bounded disorder: each event at most 4 s late
    arrival = ts + rng.uniform(0, 4, n)
    order = np.argsort(arrival, kind="stable")
    shuffled = events.iloc[order]
    eng = Engine(AB, backend="reference", allowed_lateness=4)
    got = [eng.publish(shuffled.iloc[k:k + 7]) for k in range(0, n, 7)] + [eng.flush()]
    # ids follow arrival order (running ids), so compare with a batch over the arrival order
    batch = cep_gpu.detect(shuffled.reset_index(drop=True), AB, backend="reference")
    assert eng.stats()["late"] == 0
    assert _rows(got) == _rows(batch) and len(batch) > 50


# -- trailing negations and flush -----------------------------------------------------------------------


def test_trailing_not_is_held_until_its_span_has_passed():
    eng = Engine(TRAIL, backend="reference")
    eng.publish({"type": "A", "ts": 0, "y": 1.0})
    assert len(eng.publish({"type": "B", "ts": 1})) == 0  # span (1, 3] still open
    assert eng.stats()["held"] == {"S": 1}
    # held until an event later than ts(b) + 3 (a safe bound on the span's end) has arrived
    assert len(eng.publish({"type": "D", "ts": 3})) == 0
    assert len(eng.publish({"type": "D", "ts": 4})) == 0
    out = eng.publish({"type": "D", "ts": 4.5})
    assert id_tuples(out) == [(0, 1)]
    assert eng.stats()["held"] == {"S": 0}


def test_trailing_not_rejects_when_the_event_arrives():
    eng = Engine(TRAIL, backend="reference")
    eng.publish({"type": "A", "ts": 0})
    eng.publish({"type": "B", "ts": 1})
    assert len(eng.publish({"type": "C", "ts": 3})) == 0
    assert len(eng.publish({"type": "D", "ts": 10})) == 0
    assert len(eng.flush()) == 0


def test_flush_releases_held_matches():
    eng = Engine(TRAIL, backend="reference")
    eng.publish(pd.DataFrame({"type": ["A", "B"], "ts": [0, 1], "y": [2.0, None]}))
    out = eng.flush()
    assert id_tuples(out) == [(0, 1)] and out["v"].tolist() == [2.0]
    assert len(eng.flush()) == 0  # nothing twice


def test_rules_reading_held_rules_wait_too():
    rules = TRAIL + ";\ndefine T from B() as b and each S() as s within 10 s from b"
    ev = pd.DataFrame({"type": ["A", "B", "B", "D"], "ts": [0, 1, 2, 9], "y": [1.0, None, None, None]})
    eng = Engine(rules, backend="reference")
    got = [eng.publish(ev.iloc[k:k + 1]) for k in range(len(ev))] + [eng.flush()]
    batch = cep_gpu.detect(ev, rules, backend="reference")
    assert id_tuples(batch, "T") and _rows(got) == _rows(batch)


# -- subscribe, stats, explain ----------------------------------------------------------------------------


def test_subscribe_callbacks():
    got, other = [], []
    eng = Engine(AB + ";\n" + TRAIL, backend="reference")
    eng.subscribe("AB", got.append)
    eng.subscribe("S", other.append)
    eng.publish({"type": "A", "ts": 0.0, "x": 1, "y": 1.5})
    eng.publish({"type": "B", "ts": 1.0, "x": 1})
    assert got == [[{"rule": "AB", "ts": 1.0, "ids": (1, 0), "v": 1.5}]]
    assert other == []
    eng.flush()
    assert other == [[{"rule": "S", "ts": 1.0, "ids": (0, 1), "v": 1.5}]]
    with pytest.raises(ValueError, match="no rule named 'Nope'"):
        eng.subscribe("Nope", print)


def test_stats_counts():
    eng = Engine(AB, backend="reference")
    eng.publish(pd.DataFrame({"type": ["A", "A", "B"], "ts": [0, 1, 2], "x": [1, 1, 1]}))
    s = eng.stats()
    assert s["events"] == 3 and s["released"] == 3 and s["composites"] == {"AB": 2}
    assert s["buffered"] == 3 and s["late"] == 0 and s["backend"] == "reference"


def test_stats_count_backend_calls_and_include_the_backends_own_stats(monkeypatch):
    from cep_gpu import backends

    eng = Engine(AB, backend="reference")
    eng.publish({"type": "A", "ts": 0, "x": 1})
    s = eng.stats()
    assert s["backend_calls"] == 0 and s["backend_seconds"] == 0.0 and s["backend_stats"] is None
    eng.publish({"type": "B", "ts": 1, "x": 1})
    eng.publish({"type": "B", "ts": 2, "x": 1})
    s = eng.stats()
    assert s["backend_calls"] == 2 and s["backend_seconds"] > 0
    assert s["max_batch_latency"] == 0.0  # accepted, and ignored by non-planner backends

    class WithStats:
        """The reference matcher plus a stats() of its own (as the gpu backend reports memory)."""

        name = "with-stats"

        def __init__(self):
            self.inner, self.calls = backends.get_backend("reference"), 0

        def match(self, *args, **kwargs):
            self.calls += 1
            return self.inner.match(*args, **kwargs)

        def stats(self):
            return {"calls": self.calls, "device_bytes": 123}

    impl = WithStats()
    monkeypatch.setitem(backends._REGISTRY, "with-stats", lambda: impl)
    monkeypatch.setitem(backends._INSTANCES, "with-stats", impl)
    eng = Engine(AB, backend="with-stats", max_batch_latency=None)
    eng.publish(pd.DataFrame({"type": ["A", "B", "B"], "ts": [0, 1, 2], "x": [1, 1, 1]}))
    s = eng.stats()
    assert s["backend"] == "with-stats" and s["backend_calls"] == 1
    assert s["backend_stats"] == {"calls": 1, "device_bytes": 123}
    assert s["composites"] == {"AB": 2}


def test_max_batch_latency_argument_errors():
    for bad in (-1, "soon", float("nan")):
        with pytest.raises(ValueError, match="max_batch_latency"):
            Engine(AB, backend="reference", max_batch_latency=bad)


def test_auto_engine_stats_report_the_planner():
    eng = Engine(AB, backend="auto", max_batch_latency=None)
    eng.publish(pd.DataFrame({"type": ["A", "A", "B", "B"], "ts": [0, 1, 2, 3], "x": [1, 1, 1, 2]}))
    s = eng.stats()
    planner = s["backend_stats"]
    assert set(planner) >= {"cpu", "gpu"}
    for dev in ("cpu", "gpu"):
        assert {"decisions", "terminators", "seconds", "estimated_s"} <= set(planner[dev])
    assert planner["cpu"]["decisions"] + planner["gpu"]["decisions"] == s["backend_calls"] == 1
    assert planner["cpu"]["terminators"] + planner["gpu"]["terminators"] == 2
    assert s["max_batch_latency"] is None
    # a second engine starts from zero: statistics are per engine
    assert Engine(AB, backend="auto").stats()["backend_stats"]["cpu"]["decisions"] == 0


@pytest.mark.parametrize("backend", ["reference", "cpu", "aip", "auto"])
def test_explain_asks_the_backend(backend):
    eng = Engine(AB + ";\n" + TRAIL, backend=backend)
    text = eng.explain()
    assert "rule AB" in text and "rule S" in text
    assert "each A" in text and "within 5 s from b" in text
    assert "held back 3 s" in text
    # each backend says what it does (Backend.explain), no type checks in the engine
    own = {"reference": "reference: for each terminator", "cpu": "CDP (1 plan(s))",
           "aip": "AIP automaton", "auto": "planner: GPU"}[backend]
    assert own in text
    sample = pd.DataFrame({"type": ["A", "B"], "ts": [1.0, 2.0], "x": [1, 1], "y": [0.5, None]})
    planned = eng.explain(sample)
    assert ("what backend='auto' would do" in planned) == (backend != "auto")
    assert "per terminator (one launch each)" in planned


# -- bounded memory -----------------------------------------------------------------------------------


def test_buffer_stays_bounded_by_the_longest_window():
    rng = np.random.default_rng(0)
    eng = Engine(AB, backend="reference")
    sizes = []
    for chunk in range(60):
        n = 50
        ts = chunk * 10 + np.sort(rng.uniform(0, 10, n))  # 5 events per second
        eng.publish(pd.DataFrame({"type": rng.choice(["A", "B"], n), "ts": ts, "x": rng.integers(0, 50, n)}))
        sizes.append(eng.stats()["buffered"])
    # the window is 5 s: about 25 events, plus one chunk of newly arrived ones
    assert max(sizes) <= 100
    assert eng.stats()["expired"] >= 60 * 50 - 100


def test_held_terminators_keep_their_context():
    rule = "define S pattern SEQ(A a, B b, NOT(C z)) within 50 s"
    eng = Engine(rule, backend="reference")
    eng.publish({"type": "A", "ts": 0})
    eng.publish({"type": "B", "ts": 40})
    for t in range(41, 90):
        eng.publish({"type": "D", "ts": t})
    out = eng.flush()
    assert id_tuples(out) == [(0, 1)]


# -- every backend streams like it detects ---------------------------------------------------------------


def test_museum_stream_equals_batch_on_every_backend(backend):
    from cep_gpu.museum import MUSEUM_RULES, generate_museum

    events = generate_museum(1500, seed=7, n_rooms=3, paintings_per_room=3)
    batch = cep_gpu.detect(events, MUSEUM_RULES, backend=backend)
    eng = Engine(MUSEUM_RULES, backend=backend)
    sizes = [1, 7, 50, 3, 200]
    parts, k, i = [], 0, 0
    while k < len(events):
        n = sizes[i % len(sizes)]
        parts.append(eng.publish(events.iloc[k:k + n]))
        k, i = k + n, i + 1
    parts.append(eng.flush())
    assert len(batch) > 20
    assert _rows(parts) == _rows(batch)
    assert eng.stats()["buffered"] < len(events)


# -- argument errors, publish after flush, callbacks that raise --------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "named"),
    [
        ({"backend": "quantum"}, "backend"),
        ({"backend": 3}, "backend"),
        ({"allowed_lateness": "1 min"}, "allowed_lateness"),
        ({"allowed_lateness": float("nan")}, "allowed_lateness"),
        ({"allowed_lateness": float("inf")}, "allowed_lateness"),
        ({"allowed_lateness": -1}, "allowed_lateness"),
        ({"allowed_lateness": True}, "allowed_lateness"),
        ({"max_batch_latency": -1}, "max_batch_latency"),
        ({"max_batch_latency": "soon"}, "max_batch_latency"),
        ({"time_unit": "fortnight"}, "time_unit"),
        ({"on_late": 5}, "on_late"),
    ],
)
def test_engine_argument_errors_are_cep_errors_naming_the_argument(kwargs, named):
    from cep_gpu import ArgumentError, CepError

    args = {"backend": "reference"} | kwargs
    with pytest.raises(ArgumentError, match=named) as info:
        Engine(AB, **args)
    assert isinstance(info.value, CepError) and isinstance(info.value, ValueError)


def test_subscribe_argument_errors():
    from cep_gpu import ArgumentError

    eng = Engine(AB, backend="reference")
    with pytest.raises(ArgumentError, match="subscribe: no rule named 'Nope'"):
        eng.subscribe("Nope", print)
    with pytest.raises(ArgumentError, match="callback must be callable"):
        eng.subscribe("AB", "print")


def test_publish_after_flush_is_an_error():
    from cep_gpu import EngineClosedError

    eng = Engine(TRAIL, backend="reference")
    eng.publish({"type": "A", "ts": 0.0, "y": 1.0})
    eng.publish({"type": "B", "ts": 1.0})
    released = eng.flush()
    assert len(released) == 1  # the held trailing-NOT match, released by the end of input
    with pytest.raises(EngineClosedError, match=r"publish\(\) after flush\(\)"):
        eng.publish({"type": "C", "ts": 2.0})  # would have cancelled the released match
    assert len(eng.flush()) == 0  # flushing again is harmless
    assert eng.stats()["closed"] and eng.stats()["events"] == 2


def test_a_callback_that_raises_does_not_abort_publish(caplog):
    got = []

    def broken(records):
        raise RuntimeError("subscriber bug")

    eng = Engine(AB, backend="reference")
    eng.subscribe("AB", broken)
    eng.subscribe("AB", got.append)
    eng.publish({"type": "A", "ts": 0.0, "x": 1, "y": 1.5})
    with caplog.at_level(logging.ERROR, logger="cep_gpu.engine"):
        out = eng.publish({"type": "B", "ts": 1.0, "x": 1})
    assert len(out) == 1 and got == [[{"rule": "AB", "ts": 1.0, "ids": (1, 0), "v": 1.5}]]
    assert "subscriber bug" in caplog.text
    s = eng.stats()
    assert s["callback_errors"] == 1
    assert isinstance(s["callback_error_list"][0]["error"], RuntimeError)
    # the engine goes on: the next match is found and delivered too
    assert len(eng.publish({"type": "B", "ts": 2.0, "x": 1})) == 1 and len(got) == 2
    assert eng.stats()["callback_errors"] == 2


def test_an_on_late_callback_that_raises_is_isolated():
    def broken(records):
        raise ValueError("boom")

    eng = Engine(AB, backend="reference", allowed_lateness=0, on_late=broken)
    eng.publish({"type": "A", "ts": 5.0, "x": 1})
    eng.publish({"type": "A", "ts": 1.0, "x": 1})  # too late: reported, callback raises
    s = eng.stats()
    assert s["late"] == 1 and s["callback_errors"] == 1


# -- every input and output form, any chunking: the same as batch ------------------------------------


def _publish_as(eng: Engine, chunk: pd.DataFrame, form: str, output: str) -> list:
    """Publish ``chunk`` in one input ``form``; the outputs as a list of frames or record lists."""
    import pyarrow as pa

    if form == "records":  # one event per publish, as dicts
        return [eng.publish(rec, output=output) for rec in _records(chunk)]
    if form == "arrow":
        return [eng.publish(pa.Table.from_pandas(chunk, preserve_index=False), output=output)]
    if form == "columns":  # a mapping of NumPy arrays (columnar micro-batch)
        return [eng.publish({c: chunk[c].to_numpy() for c in chunk.columns}, output=output)]
    return [eng.publish(chunk, output=output)]


def _record_rows(parts: list) -> list[tuple]:
    """Frames or record lists as the comparable rows of :func:`_rows`."""
    from cep_gpu.engine import composite_records

    recs = []
    for part in parts:
        recs += composite_records(part) if isinstance(part, pd.DataFrame) else part
    rows = []
    for r in recs:
        attrs = tuple(None if v is None or (isinstance(v, float) and np.isnan(v)) else v
                      for k, v in r.items() if k not in ("rule", "ts", "ids"))
        rows.append((r["rule"], r["ts"], tuple(r["ids"]), attrs))
    return sorted(rows, key=repr)


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(rules_and_streams(min_events=1, max_events=20), st.data())
def test_streaming_equals_batch_in_every_form(case, data):
    text, events = case
    rules = cep_gpu.parse_rules(text)
    batch = cep_gpu.detect(events, rules, backend="reference")
    lateness = data.draw(st.sampled_from([None, None, 0, 2]))
    eng = Engine(rules, backend="reference", allowed_lateness=lateness)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(events)), max_size=5)))
    parts, prev = [], 0
    for c in cuts + [len(events)]:
        if c > prev:
            form = data.draw(st.sampled_from(["records", "frame", "arrow", "columns"]))
            output = data.draw(st.sampled_from(["pandas", "records"]))
            parts += _publish_as(eng, events.iloc[prev:c], form, output)
        prev = c
    parts.append(eng.flush(output=data.draw(st.sampled_from(["pandas", "records"]))))
    assert _record_rows(parts) == _record_rows([batch])
    assert eng.stats()["late"] == 0


_SHARP_RULES = [
    TRAIL,  # trailing NOT: held matches
    TRAIL + ";\ndefine T from B() as b and each S() as s within 10 s from b",  # a rule reading a held rule
    "define S pattern SEQ(A a, NOT(C z), B b) within 3 s where z.x = a.x return v := b.y",
    AB + "\nconsuming a",
    "define G(n: int) from B(x = $k) as b and n = Count(A(x = $k) within 4 s from b) >= 2 where n = n",
    "define L pattern SEQ(A a, B b, A c) where a.x = c.x within 4 s select last",
]


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.sampled_from(_SHARP_RULES), st.data())
def test_streaming_equals_batch_on_held_consuming_and_aggregate_rules(text, data):
    from strategies import event_streams

    events = data.draw(event_streams(min_events=2, max_events=24))
    batch = cep_gpu.detect(events, text, backend="reference")
    eng = Engine(text, backend="reference", allowed_lateness=data.draw(st.sampled_from([None, 1])))
    cuts = sorted(data.draw(st.lists(st.integers(0, len(events)), max_size=4)))
    parts, prev = [], 0
    for c in cuts + [len(events)]:
        if c > prev:
            form = data.draw(st.sampled_from(["records", "frame", "columns"]))
            parts += _publish_as(eng, events.iloc[prev:c], form, data.draw(st.sampled_from(["pandas", "records"])))
        prev = c
    parts.append(eng.flush())
    assert _record_rows(parts) == _record_rows([batch])


# -- checkpoint and restore --------------------------------------------------------------------------


@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.one_of(rules_and_streams(min_events=1, max_events=14),
                 st.tuples(st.sampled_from(_SHARP_RULES), event_streams(min_events=1, max_events=14))),
       st.data())
def test_restore_at_every_position_equals_batch(case, data):
    text, events = case
    rules = cep_gpu.parse_rules(text)
    batch = cep_gpu.detect(events, rules, backend="reference")
    lateness = data.draw(st.sampled_from([None, 1]))
    recs = _records(events)
    for k in range(len(recs) + 1):
        eng = Engine(rules, backend="reference", allowed_lateness=lateness)
        parts = [eng.publish(r, output="records") for r in recs[:k]]
        saved = eng.checkpoint()
        del eng  # the service restarts: only the bytes survive
        again = Engine.restore(saved)
        parts += [again.publish(r, output="records") for r in recs[k:]]
        parts.append(again.flush(output="records"))
        assert _record_rows(parts) == _record_rows([batch]), f"restored after {k} events"


def test_checkpoint_to_a_file_and_what_it_keeps(tmp_path):
    got = []
    eng = Engine(TRAIL, backend="reference", allowed_lateness=0.5)
    eng.subscribe("S", got.append)
    eng.publish({"type": "A", "ts": 0.0, "y": 2.0})
    eng.publish({"type": "B", "ts": 1.0})
    eng.publish({"type": "D", "ts": 1.6})  # B released by the watermark, held by the trailing NOT
    path = tmp_path / "engine.ckpt"
    data = eng.checkpoint(path)
    assert path.read_bytes() == data
    again = Engine.restore(path)
    assert again.stats()["held"] == {"S": 1} and again.stats()["events"] == 3
    assert again.stats()["waiting_late"] == eng.stats()["waiting_late"]
    again.subscribe("S", got.append)  # subscribers are not saved
    assert again.stats()["waiting_late"] == 1  # D at 1.6
    out = [again.publish({"type": "D", "ts": t}, output="records") for t in (9.0, 10.0)]
    assert out == [[], [{"rule": "S", "ts": 1.0, "ids": (0, 1), "v": 2.0}]]
    assert len(got) == 1
    # the original goes on independently: restoring copied the state
    assert len(eng.publish({"type": "C", "ts": 2.0})) == 0
    assert len(eng.flush()) == 0


def test_restore_rejects_what_is_not_a_checkpoint(tmp_path):
    from cep_gpu import ArgumentError

    with pytest.raises(ArgumentError, match="not an Engine checkpoint"):
        Engine.restore(b"hello")
    with pytest.raises(ArgumentError, match="damaged"):
        Engine.restore(Engine(AB, backend="reference").checkpoint()[:-5])
    with pytest.raises(ArgumentError, match="cannot read checkpoint file"):
        Engine.restore(tmp_path / "missing.ckpt")


def test_one_event_publishes_keep_the_buffer_and_its_arrays_bounded():
    rng = np.random.default_rng(1)
    eng = Engine(AB, backend="cpu")
    rows, capacity = [], []
    for k in range(4000):  # 10 events per second, window 5 s: about 51 rows inside it
        rec = {"type": "A" if rng.random() < 0.7 else "B", "ts": k / 10, "x": int(rng.integers(0, 3)),
               "y": float(rng.random())}
        eng.publish(rec, output="records")
        s = eng.stats()
        rows.append(s["buffered"])
        capacity.append(s["buffer_capacity"])
    assert max(rows) <= 51 + 1 and min(rows[100:]) >= 50
    assert max(capacity) <= 4 * 1024  # compacted, not grown with the stream
    assert eng.stats()["expired"] == 4000 - rows[-1]


def test_an_attribute_changing_kind_names_the_event():
    engine = cep_gpu.Engine("define X from C(k=$k) and each B(k=$k) within 1 s. from C", backend="cpu")
    engine.publish({"type": "B", "ts": 1.0, "k": 1})
    with pytest.raises(cep_gpu.errors.EventError, match=r"'k' holds string values \(first in event C\(id=1\)\) "
                       r"but int values in earlier events"):
        engine.publish({"type": "C", "ts": 1.5, "k": "1"})


def test_dicts_of_numpy_scalars_take_the_plain_record_path(monkeypatch):
    """Rows read from NumPy arrays (np.str_ type, np.int64 values, None) go straight into the
    buffer, not through pandas, and give batch's composite events."""
    rule = "define X(v: float) from C(k=$k) and each B(k=$k) within 5 s. from C where v = C.v"
    rng = np.random.default_rng(3)
    types = rng.choice(np.array(["B", "C"]), 40)
    ks, vs = rng.integers(0, 3, 40), rng.random(40).astype(np.float32)
    rows = [{"type": "B", "ts": -1.0, "k": 0, "v": 0.5}, {"type": "C", "ts": -1.0, "k": 1, "v": 0.5}]
    rows += [{"type": types[i], "ts": float(i), "k": ks[i], "v": None if i % 7 == 0 else vs[i]}
             for i in range(40)]
    engine = cep_gpu.Engine(rule, backend="cpu")
    # the first publish sets the time format, a new event type goes through the general path
    got = engine.publish(pd.DataFrame(rows[:2]), output="records")
    general = []
    ingest = engine._ingest
    monkeypatch.setattr(engine, "_ingest", lambda events: general.append(events) or ingest(events))
    got += [r for row in rows[2:] for r in engine.publish(row, output="records")]
    # only when the buffer's arrays grow (doubling) does a plain record take the general path
    assert len(general) <= 3, general
    want = cep_gpu.detect(pd.DataFrame(rows), rule, backend="reference")
    assert [r["ids"] for r in got] == id_tuples(want)
    assert [r["v"] for r in got] == [None if pd.isna(v) else v for v in want["v"]]


@pytest.mark.parametrize("backend", ["cpu", "reference", "aip", "gpu-host"])
def test_a_publish_whose_kinds_break_a_rule_is_a_rule_error(backend):
    """A string attribute ordered with '<' is an error in detect; a stream says so too (it gave
    0 rows), whether the strings come in a frame or in one event."""
    rule = "define X pattern SEQ(A a, B b) where a.y < b.y within 5 s"
    frame = pd.DataFrame({"type": ["A", "B"], "ts": [1.0, 2.0], "y": ["s", "t"]})
    with pytest.raises(cep_gpu.errors.RuleError, match=r"strings can only be compared with = and !="):
        cep_gpu.Engine(rule, backend=backend).publish(frame)
    engine = cep_gpu.Engine(rule, backend=backend)
    engine.publish({"type": "A", "ts": 1.0})
    with pytest.raises(cep_gpu.errors.RuleError, match=r"\(line 1, column 38\)"):
        engine.publish({"type": "B", "ts": 2.0, "y": "t"})
    # an attribute a stream has not seen yet is no error (it may come later)
    assert len(cep_gpu.Engine(rule, backend=backend).publish(frame.drop(columns="y"))) == 0


def test_damaged_checkpoints_are_argument_errors(tmp_path):
    import pickle

    from cep_gpu.engine import _CHECKPOINT_MAGIC, _CHECKPOINT_VERSION

    engine = cep_gpu.Engine("define X pattern SEQ(A a, B b) within 5 s", backend="cpu")
    engine.publish({"type": "A", "ts": 1.0})
    good = engine.checkpoint()
    assert len(cep_gpu.Engine.restore(memoryview(good)).publish({"type": "B", "ts": 2.0})) == 1
    bad = {
        "text": (good.decode("latin1"), "as text"),
        "list": (_CHECKPOINT_MAGIC + pickle.dumps([1, 2]), "holds a list"),
        "no state": (_CHECKPOINT_MAGIC + pickle.dumps({"version": _CHECKPOINT_VERSION}), "no state"),
        "empty state": (_CHECKPOINT_MAGIC + pickle.dumps({"version": _CHECKPOINT_VERSION, "state": {}}),
                        "no _buf, _strings, backend_name"),
        "nul path": ("a\0b", "cannot read checkpoint file"),
    }
    for data, words in bad.values():
        with pytest.raises(cep_gpu.errors.ArgumentError, match=words):
            cep_gpu.Engine.restore(data)
    with pytest.raises(cep_gpu.errors.ArgumentError, match="checkpoint: cannot write"):
        engine.checkpoint(tmp_path / "missing" / "c.ckpt")


def test_publish_errors_name_the_users_columns_and_scalar_columns():
    """A user review: a columnar publish with one scalar column raised a bare TypeError (object of
    type 'int' has no len()); an event without 'type' named an 'id' column the user never gave."""
    import pyarrow as pa

    eng = cep_gpu.Engine("define P pattern SEQ(B b, C c) within 5 s")
    with pytest.raises(EventError, match=r"column 'k' is one value \(1\), not one value per event"):
        eng.publish({"type": np.array(["B", "C"]), "ts": np.array([7.0, 8.0]), "k": 1})
    for events, columns in (({}, r"\[\]"), (pd.DataFrame({"typ": ["B"], "ts": [1.0]}), r"\['typ', 'ts'\]"),
                            (pa.table({"typ": ["B"], "ts": [1.0]}), r"\['typ', 'ts'\]")):
        with pytest.raises(EventError, match=rf"events have no 'type' column \(columns: {columns}\)"):
            eng.publish(events)


# -- a rejected publish leaves no trace; ids, timestamps and column forms at the edges ---------------

PAIR = "define P from B() as b and each A() as a within 5 s from b"


def test_a_declared_type_the_value_cannot_fill_is_refused_before_any_state_changes():
    rules = ("define Good(v: float) from B() as b and each A() as a within 5 s from b where v = a.y\n"
             "define Bad(w: bool) from B() as b and each A() as a within 5 s from b where w = a.y")
    e = Engine(rules, backend="cpu")
    with pytest.raises(cep_gpu.RuleError, match="attribute 'w' is declared bool but its value is float"):
        e.publish({"type": "A", "ts": 1.0, "y": 0.5})
    st = e.stats()
    assert st["events"] == 0 and st["composites"] == {"Good": 0, "Bad": 0}


@pytest.mark.parametrize("backend", ["cpu", "reference"])
def test_events_with_and_without_ids_mix(backend):
    e = Engine(PAIR, backend=backend)
    e.publish({"type": "A", "ts": 1.0, "id": 3})
    got = [e.publish({"type": "B", "ts": 2.0 + i}, output="records") for i in range(3)]
    assert [r[0]["ids"] for r in got] == [(4, 3), (5, 3), (6, 3)]  # the next id after the largest
    with pytest.raises(EventError, match="duplicate event id 5: already published"):
        e.publish({"type": "A", "ts": 9.0, "id": 5})


@pytest.mark.parametrize("form", ["columns", "frame"])
def test_an_id_used_twice_in_one_publish_is_an_error_in_every_form(form):
    cols = {"type": np.array(["A", "A", "B"]), "ts": np.array([1.0, 1.2, 2.0]), "id": np.array([3, 3, 4])}
    e = Engine(PAIR, backend="cpu")
    with pytest.raises(EventError, match="column 'id' has duplicate id 3"):
        e.publish(cols if form == "columns" else pd.DataFrame(cols))
    assert e.stats()["events"] == 0
    assert e.publish({"type": "B", "ts": 3.0}, output="records") == []


def test_an_attribute_that_changes_kind_is_refused_without_using_ids():
    e = Engine("define P from B(x = $k) as b and each A(x = $k) as a within 5 s from b", backend="cpu")
    e.publish({"type": "A", "ts": 1.0, "x": 1, "y": 0.5})
    with pytest.raises(EventError, match="attribute 'y' holds string values .* but float values"):
        e.publish(pd.DataFrame({"type": ["A", "A"], "ts": [2.0, 2.5], "x": [1, 1], "y": ["oops", "x"]}))
    assert e.publish({"type": "B", "ts": 3.0, "x": 1}, output="records")[0]["ids"] == (1, 0)
    assert e.stats()["events"] == 2


@pytest.mark.parametrize("empty", [pd.DataFrame({"type": [], "ts": []}),
                                   {"type": np.array([], dtype=object), "ts": np.array([])}],
                         ids=["frame", "columns"])
def test_an_empty_publish_fixes_no_timestamp_kind(empty):
    e = Engine("define S pattern SEQ(A a, B b) within 5 s", backend="cpu")
    e.publish(empty)
    e.publish({"type": "A", "ts": pd.Timestamp("2024-01-01")})
    out = e.publish({"type": "B", "ts": pd.Timestamp("2024-01-01 00:00:01")})
    assert out["ts"].tolist() == [pd.Timestamp("2024-01-01 00:00:01")]


def test_naive_and_zoned_datetimes_do_not_mix_in_a_stream():
    e = Engine("define S pattern SEQ(A a, B b) within 5 s", backend="cpu")
    e.publish({"type": "A", "ts": pd.Timestamp("2024-01-01")})
    with pytest.raises(EventError, match=r"time-zone-aware \(Europe/Berlin\) datetimes, but earlier events had naive"):
        e.publish({"type": "B", "ts": pd.Timestamp("2024-01-01 00:00:01", tz="Europe/Berlin")})
    e = Engine("define S pattern SEQ(A a, B b) within 5 s", backend="cpu")
    e.publish({"type": "A", "ts": pd.Timestamp("2024-01-01", tz="UTC")})
    with pytest.raises(EventError, match=r"naive datetimes, but earlier events had time-zone-aware \(UTC\)"):
        e.publish({"type": "B", "ts": pd.Timestamp("2024-01-01 00:00:01")})
    # zones may differ
    out = e.publish({"type": "B", "ts": pd.Timestamp("2024-01-01 01:00:01", tz="Europe/Berlin")})
    assert out["ts"].tolist() == [pd.Timestamp("2024-01-01 00:00:01", tz="UTC")]


def test_column_forms_at_the_edges():
    rule = "define S pattern SEQ(A a, B b) within 5 s"
    out = Engine(rule, backend="cpu").publish({"type": pd.Categorical(["A", "B"]), "ts": np.array([1.0, 2.0])},
                                              output="records")
    assert out == [{"rule": "S", "ts": 2.0, "ids": (0, 1)}]
    two = {"type": np.array(["A", "B"]), "ts": np.array([1.0, 2.0])}
    with pytest.raises(EventError, match="column 'x' holds complex numbers"):
        Engine(rule, backend="cpu").publish({**two, "x": np.array([1j, 2j])})
    with pytest.raises(EventError, match="column 'x' cannot be read as one array"):
        Engine(rule, backend="cpu").publish({**two, "x": np.array([1, "1"], dtype=object)})
    with pytest.raises(EventError, match=r"got list: publish a list of events as pandas.DataFrame\(events\)"):
        Engine(rule, backend="cpu").publish([{"type": "A", "ts": 1.0}])
    with pytest.raises(cep_gpu.ArgumentError, match=r"finite numbers >= 0\), got \{'A': nan\}"):
        Engine(rule, backend="cpu").explain({"A": float("nan"), "B": 1.0})


@pytest.mark.parametrize("rules", ["", "  \n", []])
def test_an_engine_of_no_rule_is_an_argument_error(rules):
    with pytest.raises(cep_gpu.ArgumentError, match="holds no rule; an Engine needs at least one"):
        Engine(rules, backend="cpu")
