"""Semantics, hand-worked: SEQ and AND patterns: order, windows, where/return, select policies, NOT positions.

How the cases are written (worked out by hand first, every backend): tests/semantics_cases.py.
"""

from __future__ import annotations

import pytest
from conftest import id_tuples
from semantics_cases import SEQ_AB, E, ids, rows

import cep_gpu

# =================================================================================================
# SEQ patterns
# =================================================================================================



def test_seq_strict_order_with_equal_timestamps(backend):
    # ts(a) < ts(b) strictly: A@1-B@1 and A@2-B@2 never match (equal timestamps never precede one
    # another), whatever their row order; B@2 after A@1 and B@3 after A@1/A@2 do.
    ev = E(("A", 1), ("B", 1), ("B", 2), ("A", 2), ("B", 3))
    assert ids(ev, SEQ_AB, backend) == [(0, 2), (0, 4), (3, 4)]


def test_seq_within_is_inclusive(backend):
    # last - first == W matches (B@10 - A@0 = 10 s), W + 1 ms does not (B@10.001).
    ev = E(("A", 0), ("B", 10), ("B", 10.001))
    out = cep_gpu.detect(ev, SEQ_AB, backend=backend)
    assert id_tuples(out) == [(0, 1)]
    # the composite event happens at its last event
    assert out["ts"].tolist() == [10.0]


def test_seq_within_bounds_first_to_last_not_consecutive(backend):
    # SEQ(a, b, c) within 5: every position lies in [ts(c) - 5, ts(c)).
    # C@5: b=B@4, a in [0, 4): A@0, A@2.  C@6: b=B@4, a in [1, 4): A@2.
    # C@8: b=B@4, a in [3, 4): none (A@2 is 6 s before C@8 although only 2 s before B).
    rule = "define ABC pattern SEQ(A a, B b, C c) within 5 s"
    ev = E(("A", 0), ("A", 2), ("B", 4), ("C", 5), ("C", 6), ("C", 8))
    assert ids(ev, rule, backend) == [(0, 2, 3), (1, 2, 3), (1, 2, 4)]


def test_seq_single_event(backend):
    # A single-position SEQ needs no window; where filters it; return computes from it.
    rule = "define One pattern SEQ(A a) where a.x > 1 return y := a.x * 2"
    ev = E(("A", 1, {"x": 1}), ("A", 2, {"x": 2}), ("B", 3, {"x": 5}))
    out = cep_gpu.detect(ev, rule, backend=backend)
    assert rows(out, "y") == [("One", 2.0, (1,), 4)]


SEQ_WHERE = """
define W(total: int)
pattern SEQ(A a, B b)
where (a.x + b.x = 10 or a.x * 2 < b.x) and not (b.y = 'no')
within 10 s
return total := a.x + b.x
"""


def test_seq_where_and_or_not_arithmetic(backend):
    # With A0 (x=4): B1 x=6 'ok': 4+6=10 -> match (total 10).  B2 x=9 'ok': 13 != 10 but 8 < 9 ->
    # match (13).  B3 x=7 'no': 11, 8<7 false -> no.  B4 x=9 'no': first part true, not(y='no')
    # false -> no.  B5 x=6, y null: not(null) is null -> false.  A7 (x=1) + B8 (x=3): with A0,
    # 7 != 10 and 8 < 3 false; with A7, 2 < 3 -> match (4).
    ev = E(
        ("A", 1, {"x": 4, "y": "ok"}),
        ("B", 2, {"x": 6, "y": "ok"}),
        ("B", 3, {"x": 9, "y": "ok"}),
        ("B", 4, {"x": 7, "y": "no"}),
        ("B", 5, {"x": 9, "y": "no"}),
        ("B", 6, {"x": 6, "y": None}),
        ("A", 8, {"x": 1, "y": "ok"}),
        ("B", 9, {"x": 3, "y": "ok"}),
    )
    out = cep_gpu.detect(ev, SEQ_WHERE, backend=backend)
    assert rows(out, "total") == [("W", 2.0, (0, 1), 10), ("W", 3.0, (0, 2), 13), ("W", 9.0, (6, 7), 4)]


def test_seq_or_reading_a_missing_attribute_is_false(backend):
    # "An attribute that an event lacks makes every condition that reads it false": the operand
    # `a.x = 1 or b.z = 1` reads b.z, so it is false when b.z is null even though a.x = 1 holds.
    rule = "define Or pattern SEQ(A a, B b) where a.x = 1 or b.z = 1 within 10 s"
    ev = E(("A", 1, {"x": 1}), ("B", 2, {"z": None}), ("B", 3, {"z": 5}), ("B", 4, {"z": 1}))
    # B2: z=5 -> a.x=1 true, b.z=1 false -> true.  B3: z=1 -> true.  B1: null -> false.
    assert ids(ev, rule, backend) == [(0, 2), (0, 3)]


def test_seq_return_expressions(backend):
    # return over both positions; b.x / a.x with a.x = 0 is null (division by zero); the undeclared
    # attributes take their kind from the values (int + int -> int, / -> float, string).
    rule = """
    define Ret pattern SEQ(A a, B b) within 10 s
    return total := a.x + b.x, ratio := b.x / a.x, tag := b.y, gap := b.x - a.x * 2
    """
    ev = E(
        ("A", 1, {"x": 2}),
        ("B", 2, {"x": 6, "y": "u"}),
        ("A", 3, {"x": 0}),
        ("B", 4, {"x": 3, "y": "v"}),
    )
    out = cep_gpu.detect(ev, rule, backend=backend)
    assert list(out.columns) == ["rule", "ts", "ids", "total", "ratio", "tag", "gap"]
    assert rows(out, "total", "ratio", "tag", "gap") == [
        ("Ret", 2.0, (0, 1), 8, 3.0, "u", 2),
        ("Ret", 4.0, (0, 3), 5, 1.5, "v", -1),
        ("Ret", 4.0, (2, 3), 3, None, "v", 3),
    ]


SEQ_SELECT = "define Sel pattern SEQ(A a, B b, C c) within 10 s select {policy}"
# ids: A@1=0 A@2=1 B@3=2 A@3.5=3 D@3.7=4 (noise) B@4=5 C@5=6 C@12.5=7
SEQ_SELECT_EVENTS = E(
    ("A", 1), ("A", 2), ("B", 3), ("A", 3.5), ("D", 3.7), ("B", 4), ("C", 5), ("C", 12.5)
)


@pytest.mark.parametrize("policy,expected", [
    # each (skip-till-any-match): every combination; the D event in between is simply skipped.
    # C@5: b=B@3 with A@1, A@2; b=B@4 with A@1, A@2, A@3.5.  C@12.5 (window [2.5, 12.5)): b=B@3
    # has no A in [2.5, 3); b=B@4 has A@3.5.
    ("each", [(0, 2, 6), (0, 5, 6), (1, 2, 6), (1, 5, 6), (3, 5, 6), (3, 5, 7)]),
    # last: c, then the latest B before c (B@4), then the latest A before that B (A@3.5).
    ("last", [(3, 5, 6), (3, 5, 7)]),
    # first: the earliest B in c's window (B@3), then the earliest A before it in the window.
    # For C@12.5 the earliest B is B@3 and no A lies in [2.5, 3): no match (no backtracking to B@4).
    ("first", [(0, 2, 6)]),
])
def test_seq_select_policies(backend, policy, expected):
    assert ids(SEQ_SELECT_EVENTS, SEQ_SELECT.format(policy=policy), backend) == expected


def test_seq_select_first_does_not_backtrack(backend):
    # B@1, A@2, B@3, C@4: `first` binds b = B@1 (the earliest B before c); no A precedes it, so no
    # match, although A@2, B@3, C@4 is a sequence (`each` finds it).
    ev = E(("B", 1), ("A", 2), ("B", 3), ("C", 4))
    assert ids(ev, SEQ_SELECT.format(policy="first"), backend) == []
    assert ids(ev, SEQ_SELECT.format(policy="each"), backend) == [(1, 2, 3)]


SEQ_SELECT_WHERE = """
define SelW pattern SEQ(A a, B b, C c)
where a.x = b.x and b.y = c.y
within 10 s select {policy}
"""
# A@1 x=1; B@2 x=1 y=1; B@3 x=2 y=1; B@4 x=1 y=2; C@5 y=1
SEQ_SELECT_WHERE_EVENTS = E(
    ("A", 1, {"x": 1, "y": 0}),
    ("B", 2, {"x": 1, "y": 1}),
    ("B", 3, {"x": 2, "y": 1}),
    ("B", 4, {"x": 1, "y": 2}),
    ("C", 5, {"x": 0, "y": 1}),
)


@pytest.mark.parametrize("policy,expected", [
    # each: b must have y=1 (B@2, B@3); a.x = b.x only for B@2 (x=1) with A@1.
    ("each", [(0, 1, 4)]),
    # last: b.y = c.y reads b and c (bound) so it takes part in b's choice: the latest B with y=1 is
    # B@3 (B@4 has y=2).  a.x = b.x reads a, bound later: it does not change b's choice; no A with
    # x=2 precedes B@3 -> no match, although A@1, B@2, C@5 would satisfy everything.
    ("last", []),
    # first: the earliest B with y=1 is B@2; the earliest A before it with x=1 is A@1.
    ("first", [(0, 1, 4)]),
])
def test_seq_select_with_conditions_on_later_positions(backend, policy, expected):
    assert ids(SEQ_SELECT_WHERE_EVENTS, SEQ_SELECT_WHERE.format(policy=policy), backend) == expected


def test_seq_select_first_respects_the_window(backend):
    # first picks the earliest A inside [ts(c) - W, ts(b)): A@0 is 11 s before C@11, so A@2.
    ev = E(("A", 0), ("A", 2), ("B", 3), ("C", 11))
    assert ids(ev, SEQ_SELECT.format(policy="first"), backend) == [(1, 2, 3)]


SEQ_NOT_MID = """
define Gap pattern SEQ(A a, NOT(N h), B b)
where h.k = a.k and b.k = a.k
within 10 s
"""


@pytest.mark.parametrize("events,expected", [
    # B@3: a=A@1; N@2 has k=2, not a's k -> no block -> (0, 2).  B@6: a=A@1 or A@4, N@5 (k=1) lies
    # strictly between either of them and B@6 -> both blocked.
    (E(("A", 1, {"k": 1}), ("N", 2, {"k": 2}), ("B", 3, {"k": 1}),
       ("A", 4, {"k": 1}), ("N", 5, {"k": 1}), ("B", 6, {"k": 1})), [(0, 2)]),
    # N exactly at ts(a) and at ts(b) is not strictly between -> no block.
    (E(("A", 1, {"k": 1}), ("N", 1, {"k": 1}), ("N", 3, {"k": 1}), ("B", 3, {"k": 1})), [(0, 3)]),
    # an N lacking k fails h.k = a.k -> it does not block.
    (E(("A", 1, {"k": 1}), ("N", 2, {"k": None}), ("B", 3, {"k": 1})), [(0, 2)]),
    # a matching N between -> blocked; ids never include the NOT position.
    (E(("A", 1, {"k": 1}), ("N", 2, {"k": 1}), ("B", 3, {"k": 1})), []),
])
def test_seq_not_between_positions(backend, events, expected):
    assert ids(events, SEQ_NOT_MID, backend) == expected


SEQ_NOT_LEAD = "define Lead pattern SEQ(NOT(N h), A a, B b) within 10 s"


@pytest.mark.parametrize("events,expected", [
    # leading NOT forbids N in [ts(b) - W, ts(a)) = [0, 5): N@0 is on the (inclusive) edge.
    (E(("N", 0), ("A", 5), ("B", 10)), []),
    # B@10.5: the span is [0.5, 5), N@0 is outside.
    (E(("N", 0), ("A", 5), ("B", 10.5)), [(1, 2)]),
    # N at ts(a) is outside [.., ts(a)).
    (E(("A", 5), ("N", 5), ("B", 10)), [(0, 2)]),
    (E(("N", 3), ("A", 5), ("B", 10)), []),
    # an N between a and b is not the leading NOT's business.
    (E(("A", 5), ("N", 7), ("B", 10)), [(0, 2)]),
])
def test_seq_leading_not(backend, events, expected):
    assert ids(events, SEQ_NOT_LEAD, backend) == expected


SEQ_NOT_TRAIL = "define Trail pattern SEQ(A a, B b, NOT(N h)) within 10 s"


@pytest.mark.parametrize("events,expected", [
    # trailing NOT forbids N in (ts(b), ts(a) + W] = (4, 10]: N@10 is on the inclusive edge.
    (E(("A", 0), ("B", 4), ("N", 10)), []),
    # N at ts(b) is not after b.
    (E(("A", 0), ("B", 4), ("N", 4)), [(0, 1)]),
    (E(("A", 0), ("B", 4), ("N", 10.5)), [(0, 1)]),
    # batch: the span runs past the end of the input; judged at the end -> reported.
    (E(("A", 0), ("B", 4)), [(0, 1)]),
    (E(("A", 0), ("B", 4), ("N", 7)), []),
    # an N between a and b does not matter to the trailing NOT.
    (E(("A", 0), ("N", 3), ("B", 4)), [(0, 2)]),
    # the span ends at ts(first) + W, so it depends on a: (A@0, B@4) -> (4, 10], N@11 outside;
    # (A@2, B@4) -> (4, 12], N@11 blocks.
    (E(("A", 0), ("A", 2), ("B", 4), ("N", 11)), [(0, 2)]),
])
def test_seq_trailing_not(backend, events, expected):
    out = cep_gpu.detect(events, SEQ_NOT_TRAIL, backend=backend)
    assert id_tuples(out) == expected
    # reported at ts(b), the last positive event
    assert out["ts"].tolist() == [4.0] * len(expected)


def test_seq_trailing_not_with_condition_on_its_alias(backend):
    # NOT(N h) with h.k = a.k: only an N of a's k blocks.  A0 k=1, A1 k=2 (both before B@4);
    # N@6 k=2 blocks the match of A1 only.
    rule = "define TrailK pattern SEQ(A a, B b, NOT(N h)) where h.k = a.k within 10 s"
    ev = E(("A", 0, {"k": 1}), ("A", 1, {"k": 2}), ("B", 4, {"k": 0}), ("N", 6, {"k": 2}))
    assert ids(ev, rule, backend) == [(0, 2)]


SEQ_AND2 = "define Both pattern AND(A x, B y) within 5 s"


def test_and_any_order_last_in_ts_id_order(backend):
    # ids in pattern order (x, y); the last event is the last in (ts, id) order (issue 11).
    # A@2 last: B@1 -> (1, 0).  A@3 (id 2) last: B@1 -> (2, 0); B@3 has a larger id, not before.
    # B@3 (id 3) last: A@2 and A@3 (same ts, smaller id) -> (1, 3), (2, 3): the tie combines once.
    # B@7 last: A in [2, 7]: A@2 (exactly 5 s), A@3.  B@1 last: nothing before.
    ev = E(("B", 1), ("A", 2), ("A", 3), ("B", 3), ("B", 7))
    out = cep_gpu.detect(ev, SEQ_AND2, backend=backend)
    assert id_tuples(out) == [(1, 0), (1, 3), (2, 0), (2, 3), (1, 4), (2, 4)]
    assert out["ts"].tolist() == [2.0, 3.0, 3.0, 3.0, 7.0, 7.0]


SEQ_AND3 = "define Tri pattern AND(A x, B y, C z) within 5 s"


@pytest.mark.parametrize("events,expected", [
    # the others may share a timestamp.
    (E(("A", 1), ("B", 1), ("C", 2)), [(0, 1, 2)]),
    # B and C share the latest timestamp: C (larger id) is the last in (ts, id) order (issue 11).
    (E(("A", 1), ("B", 2), ("C", 2)), [(0, 1, 2)]),
    # all three at once: one match, not one per order.
    (E(("C", 4), ("B", 4), ("A", 4)), [(2, 1, 0)]),
    # any order; ids in pattern order (x=A, y=B, z=C).
    (E(("C", 1), ("A", 2), ("B", 3)), [(1, 2, 0)]),
    # window: C@0 is 5.5 s before B@5.5 -> out.
    (E(("C", 0), ("A", 2), ("B", 5.5)), []),
])
def test_and_three_positions(backend, events, expected):
    assert ids(events, SEQ_AND3, backend) == expected
