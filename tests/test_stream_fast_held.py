"""The streaming fast path for ``consuming`` rules and held terminators (trailing ``NOT``), issue 12
(``cep_gpu.stream_held``): streaming equals batch ``detect`` over random chunkings, lateness,
``flush`` and checkpoint/restore, and these rules really take the fast path."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from strategies import tesla_rules
from test_engine import _publish_as, _record_rows, _records

import cep_gpu
from cep_gpu import Engine
from cep_gpu.errors import EngineClosedError

POLICIES = st.sampled_from(["each", "last", "first"])
WINDOWS = st.sampled_from([1, 2, 3, 5])


#: consuming rules: parameters, each/last/first, rules sharing the event types, a consumed
#: predicate of the terminator's own type (a consumed event then terminates nothing), a negation
#: between two positions, a non-consuming rule beside consuming ones. (A fixed list: each new rule
#: costs a kernel compilation, about 1.5 s; the streams and chunkings are drawn.)
CONSUMING = [
    "define R0 from C(k=$k) as c and last B(k=$k) as b within 2 s from c consuming b",
    "define R0 from C(k=$k) as c and each B(k=$k) as b within 3 s from c "
    "and first A(k=$k) as a within 2 s from b consuming a, b",
    "define R0 from C() as c and first B() as b within 2 s from c consuming b, c\n\n"
    "define R1 from C(k=$k) as c and each B(k=$k) as b within 3 s from c consuming b\n\n"
    "define R2 from C(k=$k) as c and last B(k=$k) as b within 3 s from c",
    "define R0 from B(k=$k) as b2 and each B(k=$k) as b1 within 2 s from b2 consuming b1",
    "define R0 from C(k=$k) as c and last B(k=$k) as b within 3 s from c "
    "and not A(k=$k) between b and c consuming b\n\n"
    "define R1 from A() as a and each B(x > 1) as b within 2 s from a consuming b",
]

#: SEQ patterns ending in NOT (held terminators): parameters, policies, a negation with its own
#: condition, two rules over the same types, a plain rule beside them
TRAILING_NOT = [
    "define S0 pattern SEQ(B b, C c, NOT(A z)) within 2 s where b.k = c.k and z.k = c.k select last",
    "define S0 pattern SEQ(A a, B b, C c, NOT(D z)) within 3 s where a.k = c.k",
    "define S0 pattern SEQ(C c, NOT(A z)) within 1 s where z.x > c.x\n\n"
    "define S1 pattern SEQ(A a, B b, NOT(C z)) within 2 s where a.k = b.k and z.k = b.k select first",
    "define S0 pattern SEQ(B b, C c, NOT(B z)) within 3 s where z.k = c.k\n\n"
    "define P from C(k=$k) as c and last B(k=$k) as b within 2 s from c",
]


def _events(seed: int, n: int, types=("A", "B", "C", "D"), p=(0.35, 0.35, 0.25, 0.05)) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    return pd.DataFrame({
        "type": rng.choice(list(types), size=n, p=list(p)),
        "ts": np.cumsum(rng.integers(0, 3, n)) * 0.5,  # ties included
        "k": rng.integers(0, 3, n),
        "x": rng.integers(0, 4, n),
    })


def _publish_chunked(eng: Engine, events: pd.DataFrame, data) -> list:
    """Publish ``events`` in drawn chunks (one-event dicts, frames, NumPy columns), then flush."""
    cuts = sorted(data.draw(st.lists(st.integers(0, len(events)), max_size=5)))
    parts, prev = [], 0
    for c in cuts + [len(events)]:
        if c > prev:
            form = data.draw(st.sampled_from(["records", "records", "frame", "columns"]))
            parts += _publish_as(eng, events.iloc[prev:c], form, data.draw(st.sampled_from(["records", "tuples"])))
        prev = c
    parts.append(eng.flush(output="records"))
    return [[dict(zip(eng.output_fields, t)) for t in p] if p and isinstance(p[0], tuple) else p for p in parts]


def _all_fast(eng: Engine) -> None:
    """Every rule took the fast path, every matching call through it."""
    s = eng.stats()
    assert set(s["fast_path"]["rules"].values()) == {"fast"}, s["fast_path"]["rules"]
    assert s["fast_path"]["fallbacks"] == 0 and s["fast_path"]["calls"] == s["backend_calls"]


@settings(max_examples=6, deadline=None, suppress_health_check=list(HealthCheck))
@given(tesla_rules(negations=True, aggregates=False, consuming=True).filter(lambda t: "consuming" in t),
       st.integers(1, 30), st.integers(0, 10**6), st.data())
def test_random_tesla_rules_with_consumption_equal_batch(text, n, seed, data):
    """The shared random TESLA rules (static filters, cross conditions, strings, nulls)."""
    rng = np.random.default_rng(seed)
    events = pd.DataFrame({
        "type": rng.choice(["A", "B", "C", "D"], n, p=[0.3, 0.3, 0.3, 0.1]),
        "ts": np.sort(rng.integers(0, max(2, 2 * n // 3), n)),
        "x": pd.array(rng.choice([0, 1, 2, None], n), dtype="Int64"),
        "y": rng.choice([0.0, 1.5, 3.0, np.nan], n),
        "s": pd.Series(rng.choice(["u", "v", None], n), dtype=object),
    })
    batch = cep_gpu.detect(events, text, backend="reference")
    eng = Engine(text, backend="cpu")
    assert _record_rows(_publish_chunked(eng, events, data)) == _record_rows([batch])
    _all_fast(eng)


@settings(max_examples=80, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.sampled_from(CONSUMING + TRAILING_NOT), st.integers(1, 50), st.integers(0, 10**6), st.data())
def test_consuming_and_trailing_not_rules_equal_batch_over_random_chunkings(text, n, seed, data):
    events = _events(seed, n)
    batch = cep_gpu.detect(events, text, backend="reference")
    eng = Engine(text, backend="cpu")
    assert _record_rows(_publish_chunked(eng, events, data)) == _record_rows([batch])
    _all_fast(eng)
    assert sum(eng.stats()["held"].values()) == 0  # flush released every held terminator
    with pytest.raises(EngineClosedError):
        eng.publish({"type": "A", "ts": 1000.0, "k": 0})


@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.sampled_from(CONSUMING + TRAILING_NOT), st.integers(1, 40), st.integers(0, 10**6),
       st.integers(0, 3), st.data())
def test_late_events_within_and_beyond_the_allowed_lateness(text, n, seed, jitter, data):
    """Events arrive up to ``jitter`` s out of order; ``allowed_lateness`` may be shorter: the
    events it reports late are not processed, and the rest equal batch over them."""
    events = _events(seed, n).assign(id=np.arange(n))
    rng = np.random.default_rng(seed + 1)
    arrival = np.argsort(events["ts"].to_numpy() + rng.uniform(0, jitter, n), kind="stable")
    lateness = data.draw(st.sampled_from([0, 1, 2, 3]))
    eng = Engine(text, backend="cpu", allowed_lateness=lateness)
    parts = [eng.publish(r, output="records") for r in _records(events.iloc[arrival])]
    parts.append(eng.flush(output="records"))
    late = {r["id"] for r in eng.stats()["late_events"]}
    kept = events[~events["id"].isin(late)]
    batch = cep_gpu.detect(kept, text, backend="reference")
    assert _record_rows(parts) == _record_rows([batch])
    _all_fast(eng)


@settings(max_examples=20, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.sampled_from(CONSUMING + TRAILING_NOT), st.integers(2, 40), st.integers(0, 10**6), st.data())
def test_checkpoint_and_restore_at_a_drawn_position(text, n, seed, data):
    """A checkpoint taken while terminators are held and events consumed (the consumed set the
    fast path owns is written into it), restored twice: the rest of the stream equals batch."""
    events = _events(seed, n)
    batch = cep_gpu.detect(events, text, backend="reference")
    recs = _records(events)
    k = data.draw(st.integers(0, n))
    eng = Engine(text, backend="cpu")
    parts = [eng.publish(r, output="records") for r in recs[:k]]
    saved = eng.checkpoint()
    again = Engine.restore(saved)
    rest = [again.publish(r, output="records") for r in recs[k:]] + [again.flush(output="records")]
    assert _record_rows(parts + rest) == _record_rows([batch])
    # the original engine goes on too (the checkpoint changed nothing in it)
    tail = [eng.publish(r, output="records") for r in recs[k:]] + [eng.flush(output="records")]
    assert _record_rows(parts + tail) == _record_rows([batch])
    _all_fast(again)


def test_checkpoint_holds_the_consumed_and_held_state():
    """By hand: B0 B1 C2 (consumes B1) then C3 (gets B0) then C4 (nothing left); a trailing NOT
    holds C's match until 2 s have passed; a checkpoint in between carries both."""
    text = ("define X from C() as c and last B() as b within 10 s from c consuming b\n\n"
            "define S pattern SEQ(B b, C c, NOT(A z)) within 2 s select last")
    eng = Engine(text, backend="cpu")
    out = [eng.publish(e, output="records") for e in (
        {"type": "B", "ts": 0.0}, {"type": "B", "ts": 1.0}, {"type": "C", "ts": 2.0})]
    assert [r["ids"] for r in out[2]] == [(2, 1)]  # X at once (ids in declaration order); S held
    assert eng.stats()["held"] == {"X": 0, "S": 1}
    assert eng._states[0].consumed.tolist() == []  # owned by the fast path ...
    saved = Engine.restore(eng.checkpoint())
    assert saved._states[0].consumed.tolist() == [1]  # ... and written into the checkpoint
    assert saved._states[1].pending.tolist() == [2]
    for e in (eng, saved):
        got = e.publish({"type": "C", "ts": 3.0}, output="records")
        assert [(r["rule"], r["ids"]) for r in got] == [("X", (3, 0))]
        # C4: no B left for X; it releases S for C2 (2 + 2 < 4.5), not yet for C3
        got = e.publish({"type": "C", "ts": 4.5}, output="records")
        assert [(r["rule"], r["ids"]) for r in got] == [("S", (1, 2))]
        got = e.flush(output="records")  # C3's; C4 has no B within 2 s
        assert [(r["rule"], r["ids"]) for r in got] == [("S", (1, 3))]
        _all_fast(e)


def test_an_event_inside_the_trailing_span_withdraws_the_held_match():
    text = "define S pattern SEQ(B b, C c, NOT(A z)) within 2 s where z.k = c.k"
    eng = Engine(text, backend="cpu")
    assert eng.publish({"type": "B", "ts": 0.0, "k": 1}, output="records") == []
    assert eng.publish({"type": "C", "ts": 1.0, "k": 1}, output="records") == []
    assert eng.publish({"type": "A", "ts": 1.5, "k": 2}, output="records") == []  # another key
    assert eng.publish({"type": "C", "ts": 1.6, "k": 2}, output="records") == []
    assert eng.publish({"type": "A", "ts": 1.9, "k": 2}, output="records") == []  # withdraws C(1.6)
    got = eng.publish({"type": "B", "ts": 3.5, "k": 0}, output="records")  # 1 + 2 < 3.5: C(1.0) released
    assert [r["ids"] for r in got] == [(0, 1)]
    assert eng.stats()["held"] == {"S": 1}
    assert eng.flush(output="records") == []
    _all_fast(eng)


@pytest.mark.parametrize("keyed", [False, True])
@pytest.mark.parametrize("kind", ["consuming", "held", "both"])
def test_output_array_growth_redoes_the_call_with_its_stamps_cleared(kind, keyed):
    """One terminator with 900 matches (the output array starts at 16 rows: the compiled call
    runs again); a consumed event stamped (and, keyed, unlinked from its chain) by the first try
    must be back for the second."""
    events = pd.DataFrame({"type": ["A"] * 30 + ["B"] * 30 + ["C", "C"], "ts": np.arange(62.0), "x": 1})
    seq = "define M pattern SEQ(A a, B b, C c{}) within 100 s{}".format(
        ", NOT(D z)" if kind != "consuming" else "", " where a.x = c.x and b.x = c.x" if keyed else "")
    rule = cep_gpu.parse_rules(seq)[0]
    if kind != "held":
        rule = replace(rule, consuming=(0, 1))  # (a SEQ pattern has no consuming clause: the Python API)
    batch = cep_gpu.detect(events, [rule], backend="reference")
    eng = Engine([rule], backend="cpu")
    parts = [eng.publish(r, output="records") for r in _records(events)] + [eng.flush(output="records")]
    assert _record_rows(parts) == _record_rows([batch])
    assert eng.stats()["composites"] == {"M": 900 if kind != "held" else 1800}
    _all_fast(eng)


@pytest.mark.parametrize("size", [1, 53])
@pytest.mark.parametrize("text", [
    "define X from C(k=$k) as c and each B(k=$k) as b within 40 ms from c "
    "and last A(k=$k) as a within 20 ms from b consuming a, b",
    "define S pattern SEQ(B b, C c, NOT(A z)) within 30 ms where b.k = c.k and z.k = c.k select last",
])
def test_long_streams_through_buffer_compaction_and_log_expiry(text, size):
    """Thousands of events: the buffer compacts and grows, the stamps are rebuilt from the log,
    the log and the held queue drop what expired; equal to batch (CDP), all on the fast path."""
    rng = np.random.default_rng(7)
    n = 4000
    events = pd.DataFrame({"type": rng.choice(["A", "B", "C"], n, p=[0.45, 0.45, 0.1]), "ts": np.arange(n),
                           "k": rng.integers(0, 4, n)})
    batch = cep_gpu.detect(events, text, backend="cpu", time_unit="ms")
    eng = Engine(text, backend="cpu", time_unit="ms")
    cols = {c: events[c].to_numpy() for c in events.columns}
    parts = [eng.publish({c: v[s:s + size] for c, v in cols.items()}, output="records")
             for s in range(0, n, size)] if size > 1 else [eng.publish(r, output="records") for r in _records(events)]
    parts.append(eng.flush(output="records"))
    assert _record_rows(parts) == _record_rows([batch]) and len(batch) > 100
    s = eng.stats()
    _all_fast(eng)
    assert s["fast_path"]["rebuilds"] >= 2 and s["buffer_capacity"] < 2000
    matcher = eng._fast[0][1]
    assert len(matcher._cid) <= 1024 and len(matcher._pid) <= 1024  # bounded by the window, not the stream


def test_the_general_path_in_between_hands_the_consumed_set_over():
    """A publish of many rows of a rule with an unchained equality takes the general path; the
    consumed set goes to it and back, results unchanged."""
    from cep_gpu.stream_match import FAST_PATH_MAX_ROWS

    n = FAST_PATH_MAX_ROWS + 400
    rng = np.random.default_rng(3)
    events = pd.DataFrame({"type": rng.choice(["A", "B"], n, p=[0.7, 0.3]), "ts": np.arange(n), "x": rng.integers(0, 5, n)})
    text = "define R from B() as b and last A(x = b.x + 1) as a within 30 ms from b consuming a"
    batch = cep_gpu.detect(events, text, backend="cpu", time_unit="ms")
    eng = Engine(text, backend="cpu", time_unit="ms")
    recs = _records(events)
    cols = {c: events[c].to_numpy() for c in events.columns}
    parts = [eng.publish(r, output="records") for r in recs[:200]]
    parts.append(eng.publish({c: v[200:FAST_PATH_MAX_ROWS + 300] for c, v in cols.items()}, output="records"))
    parts += [eng.publish(r, output="records") for r in recs[FAST_PATH_MAX_ROWS + 300:]]
    assert _record_rows(parts + [eng.flush(output="records")]) == _record_rows([batch])
    s = eng.stats()
    assert s["fast_path"]["rules"] == {"R": "fast"} and s["backend_calls"] == s["fast_path"]["calls"] + 1


@pytest.mark.parametrize("text", [CONSUMING[1], TRAILING_NOT[0]])
def test_auto_backend_takes_the_fast_path_and_counts_each_terminator_once(text):
    """``backend="auto"`` (no GPU here: the CPU, i.e. the fast path): results equal batch, and the
    planner's statistics count every terminator once (a held one when it is matched, none for
    a call that only queues)."""
    events = _events(4, 300)
    batch = cep_gpu.detect(events, text, backend="reference")
    eng = Engine(text, backend="auto")
    parts = [eng.publish(r, output="records") for r in _records(events)] + [eng.flush(output="records")]
    assert _record_rows(parts) == _record_rows([batch])
    s = eng.stats()
    _all_fast(eng)
    planner = s["backend_stats"]
    terminators = int((events["type"] == "C").sum())  # (both rules end at C)
    assert planner["cpu"]["terminators"] + planner["gpu"]["terminators"] == terminators


#: where the fast path's pieces meet (aggregates and composite inputs: stream_match; consumption
#: and held terminators: stream_held): consuming and holding rules that read composite events,
#: composite events of a consuming rule read by a hierarchy and by an aggregate, and an aggregate
#: in a consuming rule (that one stays on the general path, by name)
COMBINED = [
    "define X(k: int) from C(k=$k) as c and last B(k=$k) as b within 2 s from c where k = c.k\n\n"
    "define Y from X(k=$k) as x and each A(k=$k) as a within 3 s from x consuming a",
    "define X(k: int) from C(k=$k) as c and each B(k=$k) as b within 2 s from c where k = c.k consuming b\n\n"
    "define Y from A(k=$k) as a and last X(k=$k) as x within 3 s from a\n\n"
    "define Z from D() as d and n = Count(X(k=1) within 4 s from d) >= 1",
    "define X(k: int) from C(k=$k) as c and last B(k=$k) as b within 2 s from c where k = c.k\n\n"
    "define S pattern SEQ(X x, A a, NOT(B z)) within 2 s where x.k = a.k and z.k = a.k",
    "define G from C(k=$k) as c and last B(k=$k) as b within 2 s from c "
    "and n = Count(A(k=$k) within 2 s from c) >= 1 consuming b\n\n"
    "define H from A(k=$k) as a and each G() as g within 3 s from a",
]


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.sampled_from(COMBINED), st.integers(1, 50), st.integers(0, 10**6), st.data())
def test_the_fast_paths_combined_equal_batch(text, n, seed, data):
    events = _events(seed, n)
    batch = cep_gpu.detect(events, text, backend="reference")
    eng = Engine(text, backend="cpu")
    assert _record_rows(_publish_chunked(eng, events, data)) == _record_rows([batch])
    why = eng.stats()["fast_path"]["rules"]
    assert why == {r: ("aggregates in a consuming rule or one with held terminators" if r == "G" else "fast")
                   for r in why}, why


@pytest.mark.parametrize("keyed", [False, True])
def test_output_growth_with_composite_inputs_and_consumption(keyed):
    """A consuming rule over composite events whose terminator has 900 matches: the call runs
    again (its stamps cleared, its unlinked entries back), after in-place merges took rows back."""
    events = pd.DataFrame({"type": ["B"] * 30 + ["A"] * 30 + ["C", "D", "D"], "ts": np.arange(63.0), "k": 1})
    key = "(k=$k)" if keyed else "()"
    text = (f"define X(k: int) from A{key} as a and last B{key} as b within 100 s from a where k = a.k\n\n"
            f"define Y from D{key} as d and each X{key} as x within 100 s from d "
            f"and each A{key} as a within 100 s from x consuming x, a")
    batch = cep_gpu.detect(events, text, backend="reference")
    eng = Engine(text, backend="cpu")
    parts = [eng.publish(r, output="records") for r in _records(events)] + [eng.flush(output="records")]
    assert _record_rows(parts) == _record_rows([batch]) and len(batch) > 400
    _all_fast(eng)
