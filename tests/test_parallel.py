"""HYPERSONIC (cep_gpu.parallel): every engine and baseline finds exactly detect's composite events."""

from __future__ import annotations

import dataclasses
import math
import time
from unittest import mock

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from strategies import event_streams

import cep_gpu
from cep_gpu.errors import ArgumentError, EngineClosedError, LateEventError, RuleError
from cep_gpu.parallel import ChainStats, HybridEngine, UnsupportedPatternError, match_rates, runtime
from cep_gpu.parallel.baselines import run

ALIASES = ("a", "b", "c", "d")


@st.composite
def seq_rules(draw, max_len: int = 4) -> str:
    """A SEQ rule with filters, cross-position conditions ("parameters": equalities), or/not."""
    n = draw(st.integers(1, max_len))
    types = [draw(st.sampled_from("ABC")) for _ in range(n)]
    conds = []
    for i in range(n):
        al = ALIASES[i]
        if draw(st.integers(0, 3)) == 0:
            conds.append(draw(st.sampled_from([
                f"{al}.x != 2", f"{al}.y > 1.0", f"{al}.s = 'u'", f"{al}.x + 1 > {al}.y",
                f"not ({al}.y <= 0)",
            ])))
        if i and draw(st.integers(0, 2)) == 0:
            o = ALIASES[draw(st.integers(0, i - 1))]
            conds.append(draw(st.sampled_from([
                f"{al}.x = {o}.x", f"{al}.s = {o}.s", f"{al}.y >= {o}.y - 1.5", f"{al}.x * 2 > {o}.x",
                f"({al}.y / 2 < {o}.y or {al}.x = 0)", f"{al}.ts - {o}.ts >= 1", f"-{al}.y < {o}.x",
            ])))
    where = f" where {' and '.join(conds)}" if conds else ""
    ret = ""
    if n > 1 and draw(st.booleans()):
        ret = f" return dy := {ALIASES[n - 1]}.y - a.y, sx := a.s"
    window = draw(st.sampled_from([1, 2, 3, 5]))
    seq = ", ".join(f"{t} {ALIASES[i]}" for i, t in enumerate(types))
    return f"define Q pattern SEQ({seq}){where} within {window} s{ret}"


def rows_of(df: pd.DataFrame) -> list[tuple]:
    """Rows as hashable tuples (NaN made comparable), sorted: a multiset of composite events."""
    out = []
    for rec in df.to_dict("records"):
        out.append(tuple((k, tuple(v) if k == "ids" else ("nan" if isinstance(v, float) and math.isnan(v) else v))
                         for k, v in sorted(rec.items())))
    return sorted(out, key=repr)


def publish_all(eng: HybridEngine, events: pd.DataFrame, cuts: list[int]) -> pd.DataFrame:
    parts = []
    bounds = sorted({0, len(events), *[c for c in cuts if 0 < c < len(events)]})
    for lo, hi in zip(bounds, bounds[1:]):
        parts.append(eng.publish(events.iloc[lo:hi]))
    eng.flush()
    parts = [p for p in parts if len(p)]
    return pd.concat(parts, ignore_index=True) if parts else eng_empty(events)


def eng_empty(events):
    return pd.DataFrame(columns=["rule", "ts", "ids"])


CONFIGS = st.fixed_dictionaries({
    "units": st.integers(1, 4),
    "allocation": st.sampled_from(["cost-model", "equal"]),
    "dynamic": st.booleans(),
    "fusion": st.booleans(),
    "batch_size": st.integers(1, 4),
    "chunk_size": st.integers(2, 12),
    "output_part": st.sampled_from([1, 3, 8192]),  # composite events built in parts, or at the end
    "splitters": st.integers(1, 4),  # threads routing a chunk at once (slices of 2 events here)
})


@settings(max_examples=100, deadline=None, suppress_health_check=list(HealthCheck))
@given(seq_rules(), event_streams(max_events=28), CONFIGS, st.lists(st.integers(1, 27), max_size=3))
def test_hybrid_equals_detect(rule, events, cfg, cuts):
    hybrid_equals_detect(rule, events, cfg, cuts)


def hybrid_equals_detect(rule, events, cfg, cuts) -> pd.DataFrame:
    """The hybrid engine (thread yields injected) finds exactly detect's rows, none twice."""
    expected = cep_gpu.detect(events, rule, backend="reference")
    with mock.patch.object(runtime, "SPLIT_MIN", 2):  # every chunk cut for several splitters
        eng = HybridEngine(rule, jitter=0.3, seed=len(events), **cfg)
        got = publish_all(eng, events, cuts)
    assert rows_of(got) == rows_of(expected), (rule, cfg)
    ids = [tuple(x) for x in got["ids"]] if len(got) else []
    assert len(ids) == len(set(ids)), "duplicate composite events"
    return expected


@st.composite
def tesla_chains(draw, max_len: int = 4) -> str:
    """A TESLA chain of each: ``from T0(..) and each T1(..) within D1 from T0 and each T2(..)
    within D2 from T1 ...``, with filters, a parameter bound at the terminator and used further
    down the chain, and an output attribute."""
    n = draw(st.integers(1, max_len))
    types = [draw(st.sampled_from("ABC")) for _ in range(n)]
    param = draw(st.booleans())
    parts = []
    for i, t in enumerate(types):
        conds = []
        if draw(st.integers(0, 2)) == 0:
            conds.append(draw(st.sampled_from(["x != 2", "y > 1.0", "s = 'u'", "x + 1 > y"])))
        if param and (i == 0 or draw(st.booleans())):
            conds.append("x = $p")
        body = f"{t}({' and '.join(conds)}) as P{i}"
        if i == 0:
            parts.append(f"from {body}")
        else:
            window = draw(st.sampled_from([1, 2, 3]))
            parts.append(f"each {body} within {window} s from P{i - 1}")
    out = ""
    if n > 1 and draw(st.booleans()):
        out = f" where d = P0.y - P{n - 1}.y"
    head = "define T(d: float)" if out else "define T"
    return f"{head} {' and '.join(parts)}{out}"


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(tesla_chains(), event_streams(max_events=28), CONFIGS, st.lists(st.integers(1, 27), max_size=2))
def test_tesla_chains_equal_detect(rule, events, cfg, cuts):
    """TESLA chains of each run on the same stages (each window measured from the next event)."""
    expected = hybrid_equals_detect(rule, events, cfg, cuts)
    if len(events) > 3 and not cuts:
        method = ("rip", "llsf", "state-parallel")[len(events) % 3]
        res = run(method, rule, events, cfg["units"], chunk_size=cfg["chunk_size"], batch_size=2, rip_batch=3)
        pd.testing.assert_frame_equal(res.output, expected)


def test_tesla_chain_windows_by_hand():
    """Each step has its own window, measured from the next event (not from the first one): C@3,
    B@2, A@0 match (1 s and 2 s steps) although the whole span is 3 s; C@4.5 is 2.5 s after B."""
    ev = pd.DataFrame({"type": ["A", "B", "C", "C"], "ts": [0.0, 2.0, 3.0, 4.5]})
    rule = "define T from C() and each B() within 1 s from C and each A() within 2 s from B"
    for units in (1, 2):
        eng = HybridEngine(rule, units=units)
        got = eng.publish(ev)
        eng.close()
        assert [tuple(x) for x in got["ids"]] == [(2, 1, 0)]  # declaration order, terminator first
        pd.testing.assert_frame_equal(got, cep_gpu.detect(ev, rule, backend="reference"))
    assert "TESLA chain of 3" in eng.explain() and "windows per step: 2, 1 s" in eng.explain()


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(seq_rules(), event_streams(max_events=28),
       st.sampled_from(["state-parallel", "rip", "llsf", "hybrid", "hybrid-equal"]), st.integers(1, 4),
       st.integers(2, 9))
def test_baselines_equal_detect(rule, events, method, units, chunk):
    expected = cep_gpu.detect(events, rule, backend="reference")
    res = run(method, rule, events, units, chunk_size=chunk, batch_size=2, rip_batch=3, jitter=0.2)
    # one publish: the very same frame, row order and dtypes included
    pd.testing.assert_frame_equal(res.output, expected)


def test_sequential_baseline_and_one_publish_equal_detect():
    rng = np.random.default_rng(3)
    n = 3000
    ev = pd.DataFrame({"type": rng.choice(list("ABC"), n), "ts": np.sort(rng.integers(0, 1500, n)).astype(float),
                       "x": rng.integers(0, 4, n), "y": rng.random(n)})
    rule = "define Q pattern SEQ(A a, B b, C c) where a.x = c.x and a.y < b.y within 5 s return z := c.y - a.y"
    expected = cep_gpu.detect(ev, rule, backend="cpu")
    assert len(expected) > 100
    for method, units in (("sequential", 1), ("hybrid", 2), ("llsf", 3), ("rip", 2)):
        got = run(method, rule, ev, units).output
        assert rows_of(got) == rows_of(expected), method
    # composite events built in parts while the units go on: the very same frame (order, dtypes)
    for arrow in (False, True):
        eng = HybridEngine(rule, units=2, chunk_size=97, output_part=10)
        got = eng.publish(ev, output="arrow" if arrow else "pandas")
        eng.close()
        if arrow:
            assert got.equals(cep_gpu.detect(ev, rule, backend="cpu", output="arrow"))
        else:
            pd.testing.assert_frame_equal(got, expected)


def test_forget_starts_an_independent_stream_on_the_same_runtime():
    """A data-parallel unit runs its pieces on one runtime, emptied between them: RIP's pieces
    overlap by a window, so a piece re-feeds events the last one saw, and a match kept from the
    last piece would be extended again (a duplicate)."""
    from cep_gpu.parallel.engine import as_rule_list, load_events
    from cep_gpu.parallel.runtime import Layout, Runtime

    ev = pd.DataFrame({"type": ["A", "B", "B"], "ts": [0.0, 1.0, 2.0]})
    rules = as_rule_list("define P pattern SEQ(A a, B b) within 5 s")
    loaded = load_events(rules, ev, "s")
    rt = Runtime(loaded.specs, loaded.store, Layout([[(1,)]], [0], 1), [loaded.strcodes], dynamic=False,
                 threads=False)
    got = []
    for _ in range(3):  # the same piece three times: the same two matches each time
        rt.feed(loaded.rows, first_only=loaded.rows[:1])
        rt.drain()
        rt.quiesce()
        (res,) = rt.take_results()
        got.append(sorted(map(tuple, res.tolist())))
        rt.forget()
    assert got[0] == [(0, 1), (0, 2)] and got[1] == got[0] and got[2] == got[0]


def test_chunks_never_cut_a_timestamp():
    from cep_gpu.parallel.engine import chunk_bounds

    ts = np.array([0, 1, 1, 1, 2, 3, 3, 4, 4, 4, 4])
    bounds = chunk_bounds(ts, 2)
    assert bounds[0][0] == 0 and bounds[-1][1] == len(ts)
    assert all(a[1] == b[0] for a, b in zip(bounds, bounds[1:]))
    assert all(ts[hi - 1] < ts[hi] for _, hi in bounds[:-1])
    assert chunk_bounds(ts[:0], 4) == []


def test_several_rules_and_datetime_input():
    rng = np.random.default_rng(5)
    n = 600
    ev = pd.DataFrame({"type": rng.choice(list("ABC"), n),
                       "ts": pd.Timestamp("2024-01-01") + pd.to_timedelta(np.sort(rng.integers(0, 400, n)), unit="s"),
                       "x": rng.integers(0, 3, n), "s": rng.choice(["u", "v"], n)})
    rules = ("define P pattern SEQ(A a, B b) where a.s = b.s within 4 s\n\n"
             "define Q pattern SEQ(C a, A b, C c) where a.x < c.x and b.s = 'u' within 6 s return k := a.x")
    expected = cep_gpu.detect(ev, rules, backend="reference")
    for units in (1, 2, 4):
        for part in (3, 8192):  # both rules' composite events in parts built by several threads
            eng = HybridEngine(rules, units=units, chunk_size=50, batch_size=8, output_part=part, jitter=0.1)
            got = eng.publish(ev)
            eng.close()
            pd.testing.assert_frame_equal(got, expected)
            # Arrow parts too: a part where another rule's attribute is all null takes its type
            eng = HybridEngine(rules, units=units, chunk_size=50, batch_size=8, output_part=part, jitter=0.1)
            arrow = eng.publish(ev, output="arrow")
            eng.close()
            assert arrow.schema.field("k").type == pa.int64() and arrow.num_rows == len(expected)
            assert arrow.column("k").to_pylist() == [None if pd.isna(v) else v for v in expected["k"]]


@pytest.mark.parametrize("match_first", [True, False])
def test_exactly_once_under_the_probe_insert_race(match_first):
    """An event and a match numbered before either probes: joined once, by the later number."""
    from cep_gpu.parallel import _compat
    from cep_gpu.parallel.agent import Stage
    from cep_gpu.parallel.compile import compile_rules
    from cep_gpu.parallel.runtime import Store

    ev = pd.DataFrame({"type": ["A", "B"], "ts": [1.0, 2.0]})
    table = _compat.ingest(ev, "s", _compat.StringDictionary())
    (spec,) = compile_rules([cep_gpu.parse_rule("define Q pattern SEQ(A a, B b) within 5 s")])
    store = Store(spec.attributes)
    store.append(table)
    stage = Stage(spec, 1, store, np.empty(0))
    match, event = np.array([[0]]), np.array([1])
    out_other: list[np.ndarray] = []

    def other():  # runs between the first item's numbering and its probe (the paper's open race)
        if not out_other:
            out_other.append(stage.process(1, event, True) if match_first else stage.process(1, match, False))

    if match_first:
        first_out = stage.process(0, match, False, jitter=other)
    else:
        first_out = stage.process(0, event, True, jitter=other)
    assert np.concatenate([first_out, *out_other]).tolist() == [[0, 1]]
    assert len(out_other[0]) == 1 and len(first_out) == 0  # the later-numbered item joined


def _two_stage(n_a: int, n_b: int):
    """A stage 1 of ``SEQ(A a, B b) within 1000 s`` over ``n_a`` A events then ``n_b`` B events."""
    from cep_gpu.parallel import _compat
    from cep_gpu.parallel.agent import Stage
    from cep_gpu.parallel.compile import compile_rules
    from cep_gpu.parallel.runtime import Store

    ev = pd.DataFrame({"type": ["A"] * n_a + ["B"] * n_b, "ts": np.arange(n_a + n_b, dtype=float)})
    table = _compat.ingest(ev, "s", _compat.StringDictionary())
    (spec,) = compile_rules([cep_gpu.parse_rule("define Q pattern SEQ(A a, B b) within 1000 s")])
    store = Store(spec.attributes)
    store.append(table)
    return Stage(spec, 1, store, np.empty(0), units=1)


def test_probe_keeps_its_snapshot_while_the_buffer_grows():
    """Between an event's numbering and its probe, other units append enough matches to grow
    (reallocate) the match buffer and add fragments: the probe reads the arrays and counts of its
    snapshot, so it joins exactly the match numbered before it; the later matches join the event
    in their own probes. Each pair once."""
    stage = _two_stage(600, 1)
    event = np.array([600])
    later: list[np.ndarray] = []
    batches = {1: np.arange(1, 300), 2: np.arange(300, 450), 3: np.arange(450, 600)}

    def grow():  # runs between the event's numbering and its probe
        if not later:
            for u, rows in batches.items():  # new fragments; 299 items outgrow the first 256
                later.append(stage.process(u, rows.reshape(-1, 1), False))

    stage.process(0, np.array([[0]]), False)
    first = stage.process(5, event, True, jitter=grow)
    assert first.tolist() == [[0, 600]]  # only the match numbered before the event
    got = [tuple(r) for r in np.concatenate([first, *later]).tolist()]
    assert sorted(got) == [(m, 600) for m in range(600)]
    assert stage.matches.fragments == 4 and stage.matches.seq.shape[1] >= 299


def test_one_probe_call_visits_every_fragment():
    """A batch probes the fragments of every unit in one compiled call (one task, one call)."""
    stage = _two_stage(3, 2)
    for u in range(3):
        stage.process(u, np.array([[u]]), False)
    out = stage.process(7, np.array([3, 4]), True)
    s = stage.unit_stats(7)
    assert sorted(map(tuple, out.tolist())) == [(m, e) for m in range(3) for e in (3, 4)]
    assert (s.tasks, s.accesses, s.compared) == (1, 3, 6)
    # and a match probes the event fragments of two units in one call too
    stage.process(8, np.array([3]), True)
    got = stage.process(9, np.array([[0]]), False)  # numbered after all three events
    assert sorted(map(tuple, got.tolist())) == [(0, 3), (0, 3), (0, 4)] and stage.unit_stats(9).accesses == 2


def test_heavy_jitter_many_units():
    rng = np.random.default_rng(7)
    n = 400
    ev = pd.DataFrame({"type": rng.choice(list("AB"), n), "ts": np.sort(rng.integers(0, 200, n)),
                       "x": rng.integers(0, 3, n)})
    rule = "define Q pattern SEQ(A a, B b, A c, B d) where a.x = d.x within 4 s"
    expected = cep_gpu.detect(ev, rule, backend="cpu")
    for dynamic in (True, False):
        eng = HybridEngine(rule, units=4, jitter=1.0, batch_size=3, chunk_size=40, dynamic=dynamic, fusion=False)
        got = eng.publish(ev)
        eng.close()
        pd.testing.assert_frame_equal(got, expected)


def test_measured_stats_reproduce_match_rates():
    """Eq. (1) with the measured s_i gives back the measured partial-match rates (definition of s_i)."""
    rng = np.random.default_rng(2)
    n = 1500
    ev = pd.DataFrame({"type": rng.choice(list("ABCD"), n), "ts": np.arange(n) * 0.01, "y": rng.random(n)})
    rule = "define Q pattern SEQ(A a, B b, C c, D d) where a.y < b.y and b.y < c.y within 0.5 s"
    eng = HybridEngine(rule)
    (stats,) = eng.calibrate(ev)
    m = match_rates(stats)
    out = cep_gpu.detect(ev, rule, backend="reference", output="count")["Q"]
    assert out > 50
    span = float(ev.ts.iloc[-1] - ev.ts.iloc[0])
    assert m[5] == pytest.approx(out / span, rel=1e-9)
    for k, t in enumerate("ABCD"):
        assert stats.rates[k] == pytest.approx((ev.type == t).sum() / span)


def test_stats_and_explain():
    rng = np.random.default_rng(4)
    n = 2000
    ev = pd.DataFrame({"type": rng.choice(list("ABC"), n), "ts": np.arange(n) * 0.1, "x": rng.integers(0, 3, n)})
    rule = "define Q pattern SEQ(A a, B b, C c) where a.x = c.x within 3 s"
    eng = HybridEngine(rule, units=3, fusion=False, chunk_size=200)
    assert "not calibrated" in eng.explain()
    out = eng.publish(ev)
    s = eng.stats()
    text = eng.explain()
    eng.close()
    assert s["events"] == n and s["matches"] == len(out) and s["throughput"] > 0
    assert [a["agent"] for a in s["agents"]] == ["A2", "A3"]
    assert sum(s["agents"][1]["outputs"] for _ in [0]) == len(out)
    assert s["units_over_time"] and all(sum(u) == 3 for u in s["units_over_time"])
    assert "comp_i" in text and "|U_i|" in text and "agent A2" in text


def test_single_position_and_empty_inputs():
    ev = pd.DataFrame({"type": ["A", "B", "A"], "ts": [1.0, 2.0, 3.0], "x": [1, 2, 3]})
    rule = "define S pattern SEQ(A a) where a.x > 1 within 1 s"
    eng = HybridEngine(rule, units=2)
    got = eng.publish(ev)
    pd.testing.assert_frame_equal(got, cep_gpu.detect(ev, rule, backend="reference"))
    assert eng.publish(ev.iloc[:0]).empty
    eng.close()


# -- bad input --------------------------------------------------------------------------------------

RULE = "define Q pattern SEQ(A a, B b) within 5 s"


@pytest.mark.parametrize("kwargs, word", [
    ({"units": 0}, "units"), ({"units": -1}, "units"), ({"units": 1.5}, "units"), ({"units": True}, "units"),
    ({"allocation": "best"}, "allocation"), ({"dynamic": 1}, "dynamic"), ({"fusion": "yes"}, "fusion"),
    ({"batch_size": 0}, "batch_size"), ({"chunk_size": -3}, "chunk_size"), ({"jitter": 2.0}, "jitter"),
    ({"output_part": 0}, "output_part"),
])
def test_bad_arguments(kwargs, word):
    with pytest.raises(ArgumentError, match=word):
        HybridEngine(RULE, **kwargs)


@pytest.mark.parametrize("text, feature", [
    ("define Q pattern SEQ(A a, NOT(C n), B b) within 5 s", "NOT"),
    ("define Q pattern AND(A a, B b) within 5 s", "AND"),
    ("define Q pattern SEQ(A a, B b) within 5 s select last", "select last"),
    ("define Q pattern SEQ(A a, B b) within 5 s select first", "select first"),
    ("define T from C() and each A() within 5 s from C and each B() within 5 s from C", "chain"),
    ("define T from C() and last A() within 5 s from C", "last"),
    ("define T from C() and each A() within 5 s from C and not B() within 5 s from C", "negation"),
    ("define T from B() and v=Count(A() within 5 s from B) > 1", "TESLA"),
])
def test_unsupported_patterns_name_the_feature(text, feature):
    with pytest.raises(UnsupportedPatternError, match=feature):
        HybridEngine(text)
    with pytest.raises(UnsupportedPatternError, match=feature):
        run("rip", text, pd.DataFrame({"type": ["A"], "ts": [1.0]}), 2)


def test_hierarchies_late_events_and_closed_engine():
    with pytest.raises(UnsupportedPatternError, match="composite events"):
        HybridEngine("define P pattern SEQ(A a, B b) within 5 s\n\ndefine Q pattern SEQ(P p, C c) within 5 s")
    eng = HybridEngine(RULE, units=2)
    eng.publish(pd.DataFrame({"type": ["A"], "ts": [5.0]}))
    with pytest.raises(LateEventError):
        eng.publish({"type": "B", "ts": 1.0})
    eng.flush()
    with pytest.raises(EngineClosedError):
        eng.publish({"type": "B", "ts": 9.0})
    with pytest.raises(ArgumentError, match="rules"):
        HybridEngine(42)
    with pytest.raises(ArgumentError, match="method"):
        run("magic", RULE, pd.DataFrame({"type": ["A"], "ts": [1.0]}))


@pytest.mark.parametrize("units", [1, 2])
@pytest.mark.parametrize("failure", [RuntimeError("injected"), KeyboardInterrupt()])
def test_a_publish_that_fails_after_it_was_accepted_closes_the_engine(monkeypatch, units, failure):
    """A failure while the units run (an internal error, Ctrl-C) left the events stored and
    counted but the newest timestamp not updated: later publishes ran on that state. Now the
    engine stops its threads and refuses every later publish, and flush, saying why."""
    eng = HybridEngine(RULE, units=units)
    eng.publish(pd.DataFrame({"type": ["A", "B"], "ts": [1.0, 2.0]}))
    threads = list(eng._rt._threads)
    assert threads and all(t.is_alive() for t in threads)

    def fail(self):
        raise failure

    with monkeypatch.context() as m:
        m.setattr(runtime.Runtime, "drain", fail)
        with pytest.raises(type(failure)):
            eng.publish(pd.DataFrame({"type": ["A", "B"], "ts": [3.0, 4.0]}))
    assert not any(t.is_alive() for t in threads)  # the units were stopped
    said = "injected" if isinstance(failure, RuntimeError) else ""
    message = (rf"this HybridEngine failed in the middle of a publish \({type(failure).__name__}"
               rf"(: {said})?\): .* create a new HybridEngine")
    with pytest.raises(EngineClosedError, match=message):
        eng.publish(pd.DataFrame({"type": ["A", "B"], "ts": [5.0, 6.0]}))
    with pytest.raises(EngineClosedError, match=message):
        eng.flush()
    eng.close()  # still idempotent
    assert eng.stats()["events"] == 4  # (what was stored, for a look at the failed engine)


def test_a_failed_publish_drops_the_queued_work(monkeypatch):
    """was: after a failure (Ctrl-C) close() waited for the units to run every queued batch of
    the failed publish, whose results were thrown away: long for a large publish."""
    eng = HybridEngine(RULE, units=2, batch_size=8, chunk_size=4096)
    eng.publish(pd.DataFrame({"type": ["A", "B"], "ts": [1.0, 2.0]}))
    ran = []
    real_run = runtime.Runtime._run_task

    def slow(self, u, task):
        ran.append(task)
        time.sleep(0.002)
        return real_run(self, u, task)

    def fail(self):
        with self._cv:
            queued = self._pending
        ran.clear()
        raise KeyboardInterrupt(f"{queued} queued")

    n = 4000
    ev = pd.DataFrame({"type": np.where(np.arange(n) % 2, "B", "A"), "ts": 3.0 + np.arange(n) * 0.01})
    with monkeypatch.context() as m:
        m.setattr(runtime.Runtime, "_run_task", slow)
        m.setattr(runtime.Runtime, "drain", fail)
        with pytest.raises(KeyboardInterrupt) as info:
            eng.publish(ev)
    queued = int(str(info.value).split()[0])
    assert queued > 50  # the failure came with much work queued ...
    assert len(ran) <= 4  # ... of which only the tasks in flight ran


def test_string_ordering_is_rejected_like_detect():
    ev = pd.DataFrame({"type": ["A", "B"], "ts": [1.0, 2.0], "s": ["u", "v"]})
    rule = "define Q pattern SEQ(A a, B b) where a.s < b.s within 5 s"
    with pytest.raises(RuleError, match="strings"):
        cep_gpu.detect(ev, rule, backend="reference")
    eng = HybridEngine(rule)
    with pytest.raises(RuleError, match="strings"):
        eng.publish(ev)
    eng.close()


REFUSE_RULE = "define Q pattern SEQ(A a, B b) where a.x = b.n within 5 s return bs := b.s"


def _publish_all(frames: list, refused: pd.DataFrame | None = None, at: int = 0) -> list:
    """Each frame's output of one HybridEngine, with its events count and string dictionary's
    size; ``refused`` (its ``ts`` just before frame ``at``'s) is published first and refused."""
    out = []
    with HybridEngine(REFUSE_RULE, units=2) as eng:
        for i, frame in enumerate(frames):
            if i == at and refused is not None:
                bad = refused.assign(ts=frame.ts.iloc[0] - 0.5)
                with pytest.raises((RuleError, cep_gpu.EventError)) as err:
                    eng.publish(bad)
                assert not isinstance(err.value, LateEventError)
            out.append((rows_of(eng.publish(frame)), eng.stats()["events"], len(eng._strings)))
    return out


@pytest.mark.parametrize("refused, at", [
    # a string compared with a number, a number from an earlier publish: the parallel engine's
    # own string check (was after the published count had grown)
    (pd.DataFrame({"type": ["B"], "n": ["w"], "s": ["new"]}), 1),
    # a kind the store cannot take (the store had taken the timestamps: phantom rows)
    (pd.DataFrame({"type": ["B"], "n": [1], "s": [3]}), 1),
    # integers the engine cannot compare exactly (also in the first publish, which had
    # started the engine and calibrated it on the refused events)
    (pd.DataFrame({"type": ["B"], "n": [2**60], "s": ["new"]}), 1),
    (pd.DataFrame({"type": ["A"], "x": [2**60], "s": ["new"]}), 0),
])
def test_a_refused_publish_leaves_the_engine_as_it_was(refused, at):
    """A publish that raises changes nothing: the next ones (default ids included) give what an
    engine that never saw it gives, and its strings are not kept."""
    frames = [pd.DataFrame({"type": ["A", "B", "A"], "ts": [1.0, 2.0, 3.0], "x": [1, None, 2],
                            "n": [None, 1, None], "s": ["u", "v", "u"]}),
              pd.DataFrame({"type": ["B", "B"], "ts": [4.0, 5.0], "n": [2, 1], "s": ["v", "t"]})]
    want = _publish_all(frames)
    assert [len(rows) for rows, _, _ in want] == [1, 2]
    assert _publish_all(frames, refused, at) == want


TYPO = "define T pattern SEQ(GOOG a, MSFT b) where a.prise < b.price within 5 s"


def test_an_attribute_no_event_has_is_detects_error_for_the_whole_input():
    """The whole input (publish(complete=True), every baseline) is checked as detect checks it;
    a rule reading an attribute that no event has found nothing and said nothing."""
    from cep_gpu.parallel.baselines import METHODS

    ev = pd.DataFrame({"type": ["GOOG", "MSFT", "GOOG", "MSFT"], "ts": [1.0, 2.0, 3.0, 4.0],
                       "price": [1.0, 2.0, 3.0, 4.0]})
    with pytest.raises(RuleError) as want:
        cep_gpu.detect(ev, TYPO, backend="reference")
    assert "reads attribute 'prise'" in str(want.value) and "['price']" in str(want.value)
    eng = HybridEngine(TYPO, units=2)
    with pytest.raises(RuleError) as got:
        eng.publish(ev, complete=True)
    assert str(got.value) == str(want.value)
    assert eng.stats()["events"] == 0  # the engine is left as it was
    eng.close()
    for method in METHODS:
        with pytest.raises(RuleError) as got:
            run(method, TYPO, ev, 2)
        assert str(got.value) == str(want.value), method
    with pytest.raises(ArgumentError, match="complete"):
        HybridEngine(TYPO).publish(ev, complete=1)


def test_an_attribute_no_event_has_yet_is_no_error_in_a_stream_as_in_engine():
    """A stream's attribute may come in a later publish: as cep_gpu.Engine, no error, and the
    predicates that read it match once it has come."""
    rule = "define T pattern SEQ(A a, B b) where a.x < b.x within 5 s"
    first = pd.DataFrame({"type": ["A", "B"], "ts": [1.0, 2.0]})
    later = pd.DataFrame({"type": ["A", "B", "B"], "ts": [3.0, 4.0, 5.0], "x": [1, 2, 0]})
    stream = cep_gpu.Engine(rule, backend="cpu")
    eng = HybridEngine(rule, units=2)
    found = []
    for part in (first, later, pd.DataFrame({"type": ["B"], "ts": [6.0], "x": [5]})):
        found.append(rows_of(eng.publish(part)))
        assert found[-1] == rows_of(stream.publish(part))
    assert [len(f) for f in found] == [0, 1, 1]  # (A at 1 s has no x: it never matches)
    eng.close()
    eng = HybridEngine(TYPO)  # never comes: no match, no error (Engine's behaviour)
    ev = pd.DataFrame({"type": ["GOOG", "MSFT"], "ts": [1.0, 2.0], "price": [1.0, 2.0]})
    assert eng.publish(ev).empty and cep_gpu.Engine(TYPO).publish(ev).empty
    eng.close()


def test_chainstats_validation():
    with pytest.raises(ArgumentError, match="selectivity"):
        ChainStats((1.0, 1.0), (0.0,), (0.0, 0.0), (0.0, 0.0), (0.0, 0.0), 1.0)
    with pytest.raises(ArgumentError, match="2 positions"):
        ChainStats((1.0,), (0.0,), (0.0,), (0.0,), (0.0,), 1.0)
    with pytest.raises(ArgumentError, match="stats"):
        HybridEngine(RULE, stats=[1, 2])


def test_given_stats_and_arrow_output():
    rng = np.random.default_rng(11)
    n = 1500
    ev = pd.DataFrame({"type": rng.choice(list("ABC"), n), "ts": np.arange(n) * 0.05, "y": rng.random(n)})
    rule = "define Q pattern SEQ(A a, B b, C c) where a.y < c.y within 1 s return d := c.y - a.y"
    stats = HybridEngine(rule).calibrate(ev.iloc[:500])
    eng = HybridEngine(rule, units=3, stats=stats, fusion=False, allocation="equal")
    got = eng.publish(ev, output="arrow")
    eng.close()
    assert got.equals(cep_gpu.detect(ev, rule, backend="cpu", output="arrow"))
    assert "agent A2" in eng.explain()
    with pytest.raises(ArgumentError, match="output"):
        HybridEngine(rule).publish(ev, output="count")


@pytest.mark.parametrize("units", [6, 9])
def test_many_units_with_their_default_batches(units):
    """From 5 units on, tasks hold at least 64 items a unit (auto_batch) and chunks at least 32,768
    events: the defaults (no batch or chunk size given), several agents with several units each,
    dynamic units on and off, exactly detect's composite events."""
    from cep_gpu.parallel.bench import stock_events, stock_rule
    from cep_gpu.parallel.engine import auto_batch

    ev = stock_events(40_000, seed=units)
    rule = stock_rule(4, 0.5)
    expected = cep_gpu.detect(ev, rule, backend="cpu")
    assert len(expected) > 0
    for dynamic in (True, False):
        eng = HybridEngine(rule, units=units, dynamic=dynamic, fusion=False)
        try:
            got = eng.publish(ev)
            assert eng.chunk_size >= 32_768 and eng.batch_size == auto_batch(eng.chunk_size, 4, units) >= 64 * units
        finally:
            eng.close()
        pd.testing.assert_frame_equal(got, expected)


def _first_line(call) -> str:
    try:
        out = call()
    except RuleError as err:
        return f"RuleError: {err}"
    return f"{len(out)} matches"


_KIND_FRAMES = {
    "numbers": pd.DataFrame({"type": ["A", "B", "A", "B"], "ts": [0.0, 0.5, 1.0, 1.2], "s": ["x", "y", "x", "y"],
                             "n": [1, 2, 3, 4]}),
    "datetimes": pd.DataFrame({"type": ["A", "B"], "ts": pd.to_datetime([0, 5 * 10**8]), "s": ["x", "y"],
                               "n": [1, 2]}),
}


@pytest.mark.parametrize("ts", list(_KIND_FRAMES))
@pytest.mark.parametrize("cond", ["a.s = b.ts", "b.ts != a.s", "a.ts < 'x'", "a.ts = 'x'", "a.n + 1 = 'x'",
                                  "-a.n = b.s", "a.ts < b.n", "a.n * 2 > b.n", "a.s = 'x'", "(a.n + 1) = (b.n + 1)",
                                  "a.s = true", "a.s < b.s"])
def test_the_hybrid_engine_tells_strings_from_numbers_as_detect(ts, cond):
    """A timestamp compared with a string was let through (``a.s = b.ts`` matched nothing, with
    datetimes ``a.ts = 'x'`` matched on the CPU backend and not in the reference); numbers
    (timestamps, arithmetic) compared with numbers are no error."""
    events = _KIND_FRAMES[ts]
    rules = cep_gpu.parse_rules(f"define Q pattern SEQ(A a, B b) where {cond} within 1s")

    def hybrid():
        eng = HybridEngine(rules, units=2)
        try:
            return eng.publish(events, complete=True)
        finally:
            eng.close()

    want = _first_line(lambda: cep_gpu.detect(events, rules, backend="reference"))
    assert _first_line(lambda: cep_gpu.detect(events, rules, backend="cpu")) == want
    assert _first_line(hybrid) == want
    if cond in ("a.s = b.ts", "b.ts != a.s", "a.ts < 'x'", "a.ts = 'x'"):
        assert want.startswith("RuleError: rule 'Q' compares a string with a number"), want


def test_string_compare_problems_takes_aggregates_and_timestamps_for_numbers():
    from cep_gpu.model import AggValue, Attr, Compare, Const, Timestamp
    from cep_gpu.parallel.compile import compile_rule, string_compare_problems

    spec = compile_rule(cep_gpu.parse_rules("define Q pattern SEQ(A a, B b) within 1s")[0])

    def problem(left, right, op="="):
        # the parallel engine refuses aggregates (check_supported); the check itself must not
        # take them for strings or let them pass against strings
        rule = dataclasses.replace(spec.rule, conditions=(Compare(op, left, right),))
        return string_compare_problems(dataclasses.replace(spec, rule=rule), {"s": "string", "n": "int"})

    agg = AggValue(0)
    assert problem(agg, Const("x")) == "rule 'Q' compares a string with a number (with '=')"
    assert problem(Attr(0, "s"), agg) == "rule 'Q' compares a string with a number (with '=')"
    assert problem(agg, Const(3.0), ">") is None
    assert problem(agg, Attr(0, "n"), "<") is None
    assert problem(Timestamp(0), Const("x")) == "rule 'Q' compares a string with a number (with '=')"
    assert problem(Attr(0, "s"), Const(True)) == "rule 'Q' compares a string with a boolean (with '=')"
