"""The chapter's worked examples and hand-worked cases of every feature, on every backend.

Each test states its events and the exact composite events expected (as tuples of bound ids in
declaration order), worked out by hand from docs/language.md "Semantics". The ``backend`` fixture
(tests/conftest.py) runs each test on every backend that exists.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from conftest import id_tuples

import cep_gpu
from cep_gpu.detect import composite_ids

TOUCH = """
define Touch(room: string, painting: string)
from   Vibration(painting=$p and value>3.0) and
       {policy} PeopleNear(painting=$p) within 2 min. from Vibration
where  room=Vibration.room and painting=Vibration.painting
"""

THEFT = """
define Theft(room: string, painting: string)
from   Vibration(room=$r and painting=$p and value>3.0) and
       each PeopleNear(painting=$p) within 5 min. from Vibration
       and not StaffAt(room=$r) within 1 min. from Vibration
where  room=Vibration.room and painting=Vibration.painting
"""

ALARM = """
define Alarm(painting: string, level: float)
from   Vibration(room=$r and painting=$p and value>3.0) and
       v=Avg(Vibration(room=$r and painting=$p)
             within 5 min. from Vibration).value > 3.0
where  painting=Vibration.painting and level=v
"""


def events(rows) -> pd.DataFrame:
    """Events from (type, ts, attrs-dict) triples; ids are the row positions."""
    data = [{"type": t, "ts": ts, **attrs} for t, ts, attrs in rows]
    return pd.DataFrame(data)


def run(ev, rules, backend, time_unit="s", rule=None):
    return id_tuples(cep_gpu.detect(ev, rules, backend=backend, time_unit=time_unit), rule)


# -- the chapter's examples ------------------------------------------------------------------------

# Section 3.1 (AIP): times in minutes, all on painting A. ids: P1=0 V1=1 P2=2 P3=3 V2=4.
AIP_EVENTS = events([
    ("PeopleNear", 1.0, {"room": "r1", "painting": "A"}),
    ("Vibration", 2.5, {"room": "r1", "painting": "A", "value": 1.0}),  # value too low
    ("PeopleNear", 3.5, {"room": "r1", "painting": "A"}),
    ("PeopleNear", 4.0, {"room": "r1", "painting": "A"}),
    ("Vibration", 4.5, {"room": "r1", "painting": "A", "value": 5.0}),
])


@pytest.mark.parametrize("policy,expected", [
    ("each", [(4, 2), (4, 3)]),  # P2-V2 and P3-V2 (P1 is out of V2's 2-minute window)
    ("last", [(4, 3)]),  # P3-V2 only
    ("first", [(4, 2)]),  # P2-V2 only
])
def test_aip_example(backend, policy, expected):
    out = cep_gpu.detect(AIP_EVENTS, TOUCH.format(policy=policy), backend=backend, time_unit="min")
    assert id_tuples(out) == expected
    assert out["rule"].tolist() == ["Touch"] * len(expected)
    assert out["ts"].tolist() == [4.5] * len(expected)
    assert out["painting"].tolist() == ["A"] * len(expected)
    assert out["room"].tolist() == ["r1"] * len(expected)


def test_aip_example_with_datetimes(backend):
    ev = AIP_EVENTS.assign(ts=pd.Timestamp("2024-05-01 10:00") + pd.to_timedelta(AIP_EVENTS["ts"], unit="min"))
    out = cep_gpu.detect(ev, TOUCH.format(policy="each"), backend=backend)
    assert id_tuples(out) == [(4, 2), (4, 3)]
    assert out["ts"].tolist() == [pd.Timestamp("2024-05-01 10:04:30")] * 2


def test_columns_example(backend):
    # Section 3.2 (CDP, Figure 4): V(p='B')@6.5 with P(p='B')@5 and P(p='A')@6; window 2.
    ev = events([
        ("PeopleNear", 5.0, {"painting": "B"}),
        ("PeopleNear", 6.0, {"painting": "A"}),
        ("Vibration", 6.5, {"painting": "B", "value": 4.0, "room": "r"}),
    ])
    out = cep_gpu.detect(ev, TOUCH.format(policy="each"), backend=backend, time_unit="min")
    assert id_tuples(out) == [(2, 0)]  # exactly one Touch, with P(B)@5
    assert out["painting"].tolist() == ["B"]


def test_columns_example_discards_events_before_the_window(backend):
    ev = events([
        ("PeopleNear", 4.0, {"painting": "B"}),  # < 6.5 - 2: outside the window
        ("PeopleNear", 5.0, {"painting": "B"}),
        ("PeopleNear", 6.0, {"painting": "A"}),
        ("Vibration", 6.5, {"painting": "B", "value": 4.0, "room": "r"}),
    ])
    assert run(ev, TOUCH.format(policy="each"), backend, "min") == [(3, 1)]


# -- windows and time ------------------------------------------------------------------------------

CHAIN = "define R from B() as b and {policy} A() as a within 2 s from b"


def test_window_far_edge_is_inclusive_and_same_ts_is_not_before(backend):
    ev = events([("A", 0, {}), ("A", 1, {}), ("A", 3, {}), ("B", 3, {}), ("A", 3, {})])
    # window [1, 3): A@1 (exactly 2 s earlier) is in; A@0 is out; the A's at 3 are not before B
    assert run(ev, CHAIN.format(policy="each"), backend) == [(3, 1)]


@pytest.mark.parametrize("policy,expected", [
    ("each", [(4, 1), (4, 2), (4, 3)]),
    ("last", [(4, 3)]),  # equal timestamps: the largest id is the latest
    ("first", [(4, 1)]),  # ... and the smallest the earliest
])
def test_equal_timestamps_tie_break_on_ids(backend, policy, expected):
    ev = events([("A", 0, {}), ("A", 2, {}), ("A", 2, {}), ("A", 2, {}), ("B", 3, {})])
    assert run(ev, CHAIN.format(policy=policy), backend) == expected


def test_explicit_ids_order_ties(backend):
    ev = pd.DataFrame({"type": ["A", "A", "B"], "ts": [2, 2, 3], "id": [20, 10, 30]})
    assert run(ev, CHAIN.format(policy="last"), backend) == [(30, 20)]
    assert run(ev, CHAIN.format(policy="first"), backend) == [(30, 10)]


def test_equal_terminators_each_get_their_match(backend):
    ev = events([("A", 1, {}), ("B", 2, {}), ("B", 2, {})])
    assert run(ev, CHAIN.format(policy="each"), backend) == [(1, 0), (2, 0)]


def test_chain_anchored_at_earlier_predicates(backend):
    rule = """define R from C() as c
      and each B() as b within 2 s from c
      and each A() as a within 1 s from b"""
    ev = events([("A", 0, {}), ("A", 1, {}), ("B", 2, {}), ("A", 2, {}), ("B", 3, {}), ("C", 4, {})])
    # B@2 (id 2): A in [1, 2) -> A@1 (id 1); B@3 (id 4): A in [2, 3) -> A@2 (id 3)
    assert run(ev, rule, backend) == [(5, 2, 1), (5, 4, 3)]


def test_window_from_terminator_not_from_previous(backend):
    rule = """define R from C() as c
      and each B() as b within 3 s from c
      and each A() as a within 5 s from c"""
    # a is anchored at c, so it only has to precede c, not b
    ev = events([("B", 2, {}), ("A", 3, {}), ("C", 4, {})])
    assert run(ev, rule, backend) == [(2, 0, 1)]


# -- parameters, conditions and selection -------------------------------------------------------------


def test_parameters_bind_and_constrain(backend):
    rule = """define R from C(x = $k) as c
      and each B(x = $k) as b within 5 s from c
      and each A(x = $k and y > b.y) as a within 5 s from b"""
    ev = events([
        ("A", 0, {"x": 1, "y": 5.0}),
        ("A", 1, {"x": 2, "y": 5.0}),
        ("A", 1, {"x": 1, "y": 0.5}),
        ("B", 2, {"x": 1, "y": 1.0}),
        ("B", 2, {"x": 2, "y": 1.0}),
        ("C", 3, {"x": 1}),
    ])
    assert run(ev, rule, backend) == [(5, 3, 0)]


def test_last_chooses_among_candidates_passing_bound_conditions(backend):
    # `last` picks the latest B with x = $k (the parameter is checked before choosing)
    rule = "define R from C(x = $k) as c and last B(x = $k) as b within 5 s from c"
    ev = events([("B", 1, {"x": 1}), ("B", 2, {"x": 2}), ("C", 3, {"x": 1})])
    assert run(ev, rule, backend) == [(2, 0)]


def test_no_backtracking_over_later_conditions(backend):
    # b is chosen (last) before a is bound; a's condition on b cannot change that choice
    rule = """define R from C() as c
      and last B() as b within 5 s from c
      and each A(x = b.x) as a within 5 s from b"""
    ev = events([("A", 0, {"x": 1}), ("B", 1, {"x": 1}), ("B", 2, {"x": 2}), ("C", 3, {})])
    assert run(ev, rule, backend) == []
    ev2 = events([("A", 0, {"x": 2}), ("B", 1, {"x": 1}), ("B", 2, {"x": 2}), ("C", 3, {})])
    assert run(ev2, rule, backend) == [(3, 2, 0)]


def test_cross_event_arithmetic(backend):
    rule = "define R(d: float) from B() as b and each A(y * 2 >= b.y + 1) as a within 5 s from b where d = b.y - a.y"
    ev = events([("A", 0, {"y": 1.0}), ("A", 1, {"y": 2.0}), ("B", 2, {"y": 3.0})])
    out = cep_gpu.detect(ev, rule, backend=backend)
    assert id_tuples(out) == [(2, 1)]
    assert out["d"].tolist() == [1.0]


def test_same_event_may_fill_two_tesla_predicates(backend):
    rule = """define R from B() as b
      and each A() as a1 within 2 s from b
      and each A() as a2 within 2 s from b"""
    ev = events([("A", 1, {}), ("B", 2, {})])
    assert run(ev, rule, backend) == [(1, 0, 0)]


# -- missing values ---------------------------------------------------------------------------------


def test_null_attributes_fail_conditions(backend):
    rule = "define R(v: float) from B(x = $k) as b and each A(x = $k) as a within 5 s from b where v = a.y"
    ev = events([
        ("A", 0, {"x": 1}),  # y missing -> v null
        ("A", 1, {"x": None, "y": 2.0}),  # x null -> fails x = $k
        ("A", 2, {"x": 1, "y": 3.0}),
        ("B", 3, {"x": 1}),
        ("B", 4, {}),  # no x: cannot bind $k
    ])
    out = cep_gpu.detect(ev, rule, backend=backend)
    assert id_tuples(out) == [(3, 0), (3, 2)]
    v = out["v"].tolist()
    assert math.isnan(v[0]) and v[1] == 3.0


def test_not_equal_with_null_is_false(backend):
    rule = "define R from B(x != 1) as b"
    ev = events([("B", 0, {"x": 2}), ("B", 1, {}), ("B", 2, {"x": 1})])
    assert run(ev, rule, backend) == [(0,)]


def test_division_by_zero_is_null(backend):
    rule = "define R(q: float) from B() as b where q = b.y / b.x"
    ev = events([("B", 0, {"x": 0, "y": 1.0}), ("B", 1, {"x": 2, "y": 1.0})])
    out = cep_gpu.detect(ev, rule, backend=backend)
    q = out["q"].tolist()
    assert math.isnan(q[0]) and q[1] == 0.5


# -- negation ------------------------------------------------------------------------------------------


def _museum(rows):
    return events([(t, ts, attrs) for t, ts, attrs in rows])


def test_theft_blocked_by_staff_in_the_same_room(backend):
    ev = _museum([
        ("PeopleNear", 0.0, {"room": "r1", "painting": "A"}),
        ("StaffAt", 1.5, {"room": "r1"}),  # within 1 min before V@2 -> blocks
        ("Vibration", 2.0, {"room": "r1", "painting": "A", "value": 5.0}),
        ("StaffAt", 3.0, {"room": "r2"}),  # other room -> does not block
        ("Vibration", 3.5, {"room": "r1", "painting": "A", "value": 5.0}),
    ])
    assert run(ev, THEFT, backend, "min") == [(4, 0)]


def test_negation_window_edges(backend):
    ev = _museum([
        ("PeopleNear", 0.0, {"room": "r1", "painting": "A"}),
        ("StaffAt", 1.0, {"room": "r1"}),  # exactly 1 min before V@2: blocks (inclusive)
        ("Vibration", 2.0, {"room": "r1", "painting": "A", "value": 5.0}),
        ("StaffAt", 3.0, {"room": "r1"}),  # same timestamp as V@3: not before it
        ("Vibration", 3.0, {"room": "r1", "painting": "A", "value": 5.0}),
    ])
    assert run(ev, THEFT, backend, "min") == [(4, 0)]


def test_negation_between(backend):
    rule = "define R from C() as c and each A() as a within 10 s from c and not B() between a and c"
    ev = events([("A", 0, {}), ("B", 1, {}), ("A", 1, {}), ("A", 2, {}), ("B", 4, {}), ("C", 4, {})])
    # B@1 lies strictly between A@0 and C@4; not between A@1 (same ts) and C; B@4 is not before C
    assert run(ev, rule, backend) == [(5, 2), (5, 3)]


def test_negation_between_in_reverse_order(backend):
    rule = """define R from C() as c
      and each A() as a within 10 s from c
      and each B() as b within 10 s from c
      and not D() between b and a"""
    ev = events([("A", 0, {}), ("D", 1, {}), ("B", 2, {}), ("B", 3, {}), ("C", 4, {})])
    # D@1 is strictly between A@0 and B@2 (and B@3): spans are taken in either order
    assert run(ev, rule, backend) == []


def test_negation_with_its_own_filter_and_null(backend):
    rule = "define R from B() as b and not A(x > 1) within 5 s from b"
    ev = events([("A", 0, {"x": 1}), ("A", 1, {}), ("B", 2, {}), ("A", 3, {"x": 2}), ("B", 4, {})])
    # for B@2: A@0 has x=1 and A@1 has no x: neither counts; for B@4: A@3 blocks
    assert run(ev, rule, backend) == [(2,)]


def test_negation_takes_part_in_last_choice(backend):
    # the negation only reads a, so it is checked while a is chosen: `last` skips the blocked A@3
    rule = "define R from C() as c and last A() as a within 10 s from c and not B() within 1 s from a"
    ev = events([("A", 0, {}), ("B", 2.5, {}), ("A", 3, {}), ("C", 5, {})])
    assert run(ev, rule, backend) == [(3, 0)]


# -- aggregates -----------------------------------------------------------------------------------------


def test_alarm_rule(backend):
    base = {"room": "r1", "painting": "A"}
    ev = _museum([
        ("Vibration", 0.0, {**base, "value": 4.0}),  # avg over nothing: null -> no Alarm
        ("Vibration", 1.0, {**base, "value": 2.0}),  # too low to terminate
        ("Vibration", 2.0, {**base, "value": 5.0}),  # avg(4, 2) = 3.0, not > 3.0
        ("Vibration", 2.5, {"room": "r1", "painting": "B", "value": 9.0}),  # other painting
        ("Vibration", 3.0, {**base, "value": 4.0}),  # avg(4, 2, 5) = 11/3 -> Alarm
        ("Vibration", 6.0, {**base, "value": 4.0}),  # window [1, 6): avg(2, 5, 4) = 11/3 -> Alarm
    ])
    out = cep_gpu.detect(ev, ALARM, backend=backend, time_unit="min")
    assert id_tuples(out) == [(4,), (5,)]
    assert out["level"].tolist() == pytest.approx([11 / 3, 11 / 3])
    assert out["painting"].tolist() == ["A", "A"]


@pytest.mark.parametrize("fn,attr,expected", [
    ("Count", "", [3.0, 0.0]),  # A@0, A@1 (x = 1) and A@2 (x = 1, no y)
    ("Sum", ".y", [4.0, 0.0]),  # null y is skipped; sum over nothing is 0
    ("Avg", ".y", [2.0, None]),  # avg over nothing is null
    ("Min", ".y", [1.0, None]),
    ("Max", ".y", [3.0, None]),
])
def test_aggregate_functions_and_empty_spans(backend, fn, attr, expected):
    rule = f"define R(v: float) from B() as b and n={fn}(A(x = 1) within 3 s from b){attr} where v = n"
    ev = events([
        ("A", 0, {"x": 1, "y": 1.0}),
        ("A", 1, {"x": 1, "y": 3.0}),
        ("A", 1, {"x": 2, "y": 7.0}),  # fails x = 1
        ("A", 2, {"x": 1}),  # no y: counted by Count, skipped by the others
        ("B", 3, {}),  # span [0, 3)
        ("B", 9, {}),  # span [6, 9): empty
    ])
    out = cep_gpu.detect(ev, rule, backend=backend)
    assert id_tuples(out) == [(4,), (5,)]
    assert [None if math.isnan(v) else v for v in out["v"].tolist()] == expected


def test_aggregate_condition_over_empty_span_is_false(backend):
    rule = "define R from B() as b and n=Avg(A() within 2 s from b).y > 0"
    ev = events([("A", 0, {"y": 1.0}), ("B", 1, {}), ("B", 5, {})])
    assert run(ev, rule, backend) == [(1,)]


def test_aggregate_between(backend):
    rule = """define R(n: float) from C() as c
      and each A() as a within 10 s from c
      and k=Count(B() between a and c) >= 2
      where n = k"""
    ev = events([("A", 0, {}), ("B", 1, {}), ("A", 2, {}), ("B", 3, {}), ("B", 4, {}), ("C", 4, {})])
    out = cep_gpu.detect(ev, rule, backend=backend)
    # A@0: B@1, B@3 strictly between (B@4 is not before C@4) -> 2; A@2: only B@3 -> 1
    assert id_tuples(out) == [(5, 0)]
    assert out["n"].tolist() == [2.0]


# -- consumption ----------------------------------------------------------------------------------------


def test_consuming(backend):
    rule = "define R from B() as b and each A() as a within 5 s from b consuming a"
    ev = events([("A", 0, {}), ("A", 1, {}), ("B", 2, {}), ("B", 3, {}), ("A", 3, {}), ("B", 4, {})])
    # B@2 binds both A's and consumes them; B@3 finds none; B@4 binds A@3
    assert run(ev, rule, backend) == [(2, 0), (2, 1), (5, 4)]
    no_consume = rule.replace(" consuming a", "")
    assert run(ev, no_consume, backend) == [(2, 0), (2, 1), (3, 0), (3, 1), (5, 0), (5, 1), (5, 4)]


def test_consuming_with_last(backend):
    rule = "define R from B() as b and last A() as a within 5 s from b consuming a"
    ev = events([("A", 0, {}), ("A", 1, {}), ("B", 2, {}), ("B", 3, {}), ("B", 4, {})])
    # each B takes the latest A not yet consumed
    assert run(ev, rule, backend) == [(2, 1), (3, 0)]


def test_consumption_is_per_rule(backend):
    rules = """define R1 from B() as b and last A() as a within 5 s from b consuming a;
    define R2 from B() as b and last A() as a within 5 s from b"""
    ev = events([("A", 0, {}), ("B", 1, {}), ("B", 2, {})])
    out = cep_gpu.detect(ev, rules, backend=backend)
    assert id_tuples(out, "R1") == [(1, 0)]
    assert id_tuples(out, "R2") == [(1, 0), (2, 0)]


def test_consumed_events_still_count_for_negations(backend):
    rule = """define R from B() as b
      and last A() as a within 5 s from b
      and not A() between a and b
      consuming a"""
    ev = events([("A", 0, {}), ("A", 1, {}), ("B", 2, {}), ("B", 3, {})])
    # B@2 binds and consumes A@1; for B@3 only A@0 is left, and the consumed A@1 still lies
    # between A@0 and B@3, so the negation rejects it
    assert run(ev, rule, backend) == [(2, 1)]


# -- SEQ / AND / NOT patterns -----------------------------------------------------------------------------


def test_seq_strict_order_and_inclusive_total_window(backend):
    rule = "define S pattern SEQ(A a, B b, C c) within 4 s"
    ev = events([("A", 0, {}), ("A", 1, {}), ("B", 1, {}), ("B", 2, {}), ("C", 4, {}), ("C", 5, {})])
    # C@4: (A@0|A@1) x B@2, and A@0-B@1; A@1-B@1 share a timestamp. C@5: window [1, 5]: A@1-B@2
    expected = [(0, 2, 4), (0, 3, 4), (1, 3, 4), (1, 3, 5)]
    assert run(ev, rule, backend) == expected


def test_seq_where_and_return(backend):
    rule = """define Ascend pattern SEQ(A a, A b, A c)
    where a.y < b.y and b.y < c.y
    within 3 s
    return lo := a.y, hi := c.y"""
    ev = events([("A", 0, {"y": 1.0}), ("A", 1, {"y": 3.0}), ("A", 2, {"y": 2.0}), ("A", 3, {"y": 4.0})])
    out = cep_gpu.detect(ev, rule, backend=backend)
    assert id_tuples(out) == [(0, 1, 3), (0, 2, 3)]
    assert out["hi"].tolist() == [4.0, 4.0]
    assert out["lo"].tolist() == [1.0, 1.0]


@pytest.mark.parametrize("select,expected", [
    ("each", [(0, 2, 3), (1, 2, 3)]),
    ("last", [(1, 2, 3)]),
    ("first", [(0, 2, 3)]),
])
def test_seq_select(backend, select, expected):
    rule = f"define S pattern SEQ(A a, B b, C c) within 5 s select {select}"
    ev = events([("A", 0, {}), ("A", 1, {}), ("B", 2, {}), ("C", 3, {})])
    assert run(ev, rule, backend) == expected


def test_seq_single_event(backend):
    rule = "define One pattern SEQ(A a) where a.x = 1 within 1 s return v := a.x"
    ev = events([("A", 0, {"x": 1}), ("A", 1, {"x": 2}), ("B", 2, {"x": 1})])
    assert run(ev, rule, backend) == [(0,)]


def test_and_any_order(backend):
    rule = "define Both pattern AND(A a, B b) within 2 s"
    ev = events([("A", 0, {}), ("B", 1, {}), ("B", 3, {}), ("A", 3, {}), ("A", 4, {})])
    # ids in pattern order (a, b); the last event is the last in (ts, id) order (issue 11): A@3
    # (id 3) follows B@3 (id 2), so the simultaneous pair matches once, as (3, 2)
    assert run(ev, rule, backend) == [(0, 1), (3, 1), (3, 2), (4, 2)]


def test_seq_not_between(backend):
    rule = "define S pattern SEQ(A a, NOT(C z), B b) where z.x = a.x within 5 s"
    ev = events([
        ("A", 0, {"x": 1}), ("A", 0, {"x": 2}), ("C", 1, {"x": 1}), ("B", 2, {}),
        ("C", 2, {"x": 2}),  # same ts as B: not strictly between
    ])
    assert run(ev, rule, backend) == [(1, 3)]


def test_seq_leading_not(backend):
    rule = "define S pattern SEQ(NOT(C z), A a, B b) within 3 s"
    # none in [ts(b) - 3, ts(a))
    ev = events([("C", 0, {}), ("A", 2, {}), ("B", 3, {}), ("C", 4, {}), ("B", 5, {})])
    # B@3: span [0, 2) holds C@0 -> blocked; B@5: span [2, 2) is empty -> match
    assert run(ev, rule, backend) == [(1, 4)]


def test_seq_trailing_not(backend):
    rule = "define S pattern SEQ(A a, B b, NOT(C z)) within 3 s"
    # none in (ts(b), ts(a) + 3]
    ev = events([("A", 0, {}), ("B", 1, {}), ("C", 3, {}), ("A", 4, {}), ("B", 5, {}), ("C", 8, {})])
    # (A@0, B@1): C@3 in (1, 3] -> blocked; (A@4, B@5): span (5, 7] is empty -> match;
    # (A@0, B@5) is outside the window
    assert run(ev, rule, backend) == [(3, 4)]


def test_trailing_not_sees_events_at_the_window_edge(backend):
    rule = "define S pattern SEQ(A a, B b, NOT(C z)) within 3 s"
    ev = events([("A", 0, {}), ("B", 1, {}), ("C", 3, {})])
    assert run(ev, rule, backend) == []  # C exactly at ts(a) + 3 blocks
    ev2 = events([("A", 0, {}), ("B", 1, {}), ("C", 1, {}), ("C", 3.5, {})])
    assert run(ev2, rule, backend) == [(0, 1)]  # C@1 is not after B, C@3.5 is beyond the span


# -- composite events -----------------------------------------------------------------------------------


def test_composite_hierarchy(backend):
    rules = """define Touch(room: string, painting: string)
    from   Vibration(painting=$p and value>3.0) and
           each PeopleNear(painting=$p) within 2 min. from Vibration
    where  room=Vibration.room and painting=Vibration.painting;

    define Vandal(room: string)
    from   StaffAt(room=$r) and
           first Touch(room=$r) within 5 min. from StaffAt
    where  room=StaffAt.room"""
    ev = _museum([
        ("PeopleNear", 0.0, {"room": "r1", "painting": "A"}),
        ("Vibration", 1.0, {"room": "r1", "painting": "A", "value": 5.0}),
        ("PeopleNear", 1.5, {"room": "r1", "painting": "A"}),
        ("Vibration", 2.0, {"room": "r1", "painting": "A", "value": 5.0}),
        ("StaffAt", 3.0, {"room": "r2"}),
        ("StaffAt", 4.0, {"room": "r1"}),
    ])
    out = cep_gpu.detect(ev, rules, backend=backend, time_unit="min")
    touches = out[out["rule"] == "Touch"]
    assert id_tuples(touches) == [(1, 0), (3, 0), (3, 2)]
    vandal = out[out["rule"] == "Vandal"]
    assert len(vandal) == 1
    (staff, touch_id), = id_tuples(vandal)
    assert staff == 5
    first_touch = composite_ids("Touch", np.array([[1, 0]]))[0]
    assert touch_id == first_touch < 0
    assert vandal["room"].tolist() == ["r1"]
    assert out["rule"].tolist() == ["Touch", "Touch", "Touch", "Vandal"]


def test_rule_reading_a_rule_defined_later(backend):
    rules = """define High from Pair(n > 1) as p;
    define Pair(n: int) from B() as b and k=Count(A() within 5 s from b) where n = k"""
    ev = events([("A", 0, {}), ("B", 1, {}), ("A", 2, {}), ("B", 3, {})])
    out = cep_gpu.detect(ev, rules, backend=backend)
    assert id_tuples(out, "Pair") == [(1,), (3,)]
    assert len(id_tuples(out, "High")) == 1
    assert out[out["rule"] == "High"]["ts"].tolist() == [3]
