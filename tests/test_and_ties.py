"""Issue 11 item 1: the terminator of ``AND(...)`` is its last event in ``(ts, id)`` order, so
events that share a timestamp combine, exactly once, on every backend; ``SEQ`` stays strict."""

from __future__ import annotations

import itertools

import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from strategies import event_streams

import cep_gpu
from cep_gpu.language import parse_rule

BACKENDS = ["reference", "cpu", "aip", "gpu-host", "auto"]


def matches(out: pd.DataFrame) -> list[tuple]:
    return [(int(t), tuple(int(i) for i in ids)) for t, ids in zip(out["ts"], out["ids"])]


def detect_all(events: pd.DataFrame, rule: str) -> dict[str, list[tuple]]:
    return {b: matches(cep_gpu.detect(events, rule, backend=b)) for b in BACKENDS}


SIMULTANEOUS = pd.DataFrame(
    {"type": ["A", "B", "C", "A", "B", "B", "C"], "ts": [1, 1, 1, 5, 5, 6, 6], "x": [1, 1, 1, 2, 2, 2, 1]}
)


@pytest.mark.parametrize(
    "rule, expected",
    [
        # A0 and B1 share ts 1: one match, at that time; A3/B4 at 5; A3 with B5 (later)
        ("define P pattern AND(A a, B b) within 2 s", [(1, (0, 1)), (5, (3, 4)), (6, (3, 5))]),
        ("define P pattern AND(B b, A a) within 2 s", [(1, (1, 0)), (5, (4, 3)), (6, (5, 3))]),
        ("define P pattern AND(A a, B b, C c) within 2 s",
         [(1, (0, 1, 2)), (6, (3, 4, 6)), (6, (3, 5, 6))]),
        ("define P pattern AND(A a, B b) where a.x = b.x within 2 s",
         [(1, (0, 1)), (5, (3, 4)), (6, (3, 5))]),
        # one event never fills two positions of one type; both orders of two A events match
        ("define P pattern AND(A a, B b, A c) within 5 s",
         [(5, (0, 1, 3)), (5, (0, 4, 3)), (5, (3, 1, 0)), (5, (3, 4, 0)), (6, (0, 5, 3)),
          (6, (3, 5, 0))]),
        # SEQ keeps strict order: equal timestamps never precede one another
        ("define P pattern SEQ(A a, B b) within 2 s", [(6, (3, 5))]),
        ("define P pattern SEQ(B b, A a) within 2 s", []),
    ],
)
@pytest.mark.parametrize("backend", BACKENDS)
def test_simultaneous_events_combine_exactly_once(rule, expected, backend):
    assert matches(cep_gpu.detect(SIMULTANEOUS, rule, backend=backend)) == expected


def test_and_plans_order_by_row_and_seq_plans_do_not():
    and_rule = parse_rule("define P pattern AND(A a, B b, C c) within 2 s")
    for plan in and_rule.plans:
        others = [p for i, p in enumerate(plan.predicates) if i != plan.terminator]
        assert all(p.ties for p in others)
        assert not plan.predicates[plan.terminator].ties
    seq_rule = parse_rule("define P pattern SEQ(A a, B b, C c) within 2 s")
    assert not any(p.ties for p in seq_rule.predicates)
    tesla = parse_rule("define P from A() and each B() within 2 s from A")
    assert not any(p.ties for p in tesla.predicates)


def brute_force_and(events: pd.DataFrame, types: list[str], window_s: int) -> list[tuple]:
    """AND by definition: every choice of one distinct event per position whose last event in
    (ts, id) order (here: row order) is at most ``window_s`` after each of the others."""
    out = []
    ts = events["ts"].tolist()
    rows = [[r for r in range(len(events)) if events["type"][r] == t] for t in types]
    for combo in itertools.product(*rows):
        if len(set(combo)) < len(combo):
            continue  # one event never fills two positions
        last = max(combo)
        if all(ts[last] - ts[r] <= window_s for r in combo):
            out.append((ts[last], combo))
    return sorted(out)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    events=event_streams(max_events=14, max_ts=4),
    types=st.lists(st.sampled_from(["A", "B", "C"]), min_size=2, max_size=3),
    window=st.sampled_from([1, 2]),
)
def test_and_equals_its_definition_with_many_ties(events, types, window):
    # repeated types included: AND(A a, B b, A c) binds two different A events
    rule = f"define P pattern AND({', '.join(f'{t} e{i}' for i, t in enumerate(types))}) within {window} s"
    expected = brute_force_and(events, types, window)
    assert matches(cep_gpu.detect(events, rule, backend="reference")) == expected
    assert matches(cep_gpu.detect(events, rule, backend="cpu")) == expected


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    events=event_streams(max_events=16, max_ts=5),
    items=st.lists(st.sampled_from(["A", "B", "C"]), min_size=2, max_size=3),
    policy=st.sampled_from(["each", "last", "first"]),
    cond=st.sampled_from(["", "where e0.x = e1.x", "where e0.y < e1.y + 1", "where e1.s != e0.s"]),
)
def test_backends_agree_on_and_with_ties(events, items, policy, cond):
    pattern = ", ".join(f"{t} e{i}" for i, t in enumerate(items))
    rule = f"define P pattern AND({pattern}) {cond} within 2 s select {policy}"
    got = detect_all(events, rule)
    for backend, rows in got.items():
        assert rows == got["reference"], backend


def test_streaming_engine_follows_the_same_order():
    rule = "define P pattern AND(A a, B b, C c) within 2 s"
    engine = cep_gpu.Engine(rule, backend="cpu")
    seen = []
    for _, row in SIMULTANEOUS.iterrows():
        seen.extend(matches(engine.publish(row.to_dict())))
    seen.extend(matches(engine.flush()))
    assert seen == matches(cep_gpu.detect(SIMULTANEOUS, rule, backend="reference"))
    assert seen == [(1, (0, 1, 2)), (6, (3, 4, 6)), (6, (3, 5, 6))]
