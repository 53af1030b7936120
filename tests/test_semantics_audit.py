"""Semantics audit: small hand-worked cases of the contract, through the whole pipeline, per backend.

Every expected result below was worked out by hand from docs/language.md
("Semantics", "Names and references") *before* running the code; the comment of each case says
why. The cases go through the public API (rule text -> ``cep_gpu.detect``) on every backend of
``tests/conftest.py``. To keep the Numba compile cost of the ``cpu`` backend down, many cases share
one rule text (kernels are cached per rule) and vary only the events.

Conventions: event ids are the row positions of the input frame (``id`` column only where a case
says so); rows are written in timestamp order so that ids follow time. Times are seconds unless a
case says otherwise. Expected ids are tuples in declaration order (TESLA: terminator first; SEQ:
pattern order), listed in output order (ts, rule, ids).
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
from conftest import id_tuples

import cep_gpu
from cep_gpu.detect import composite_ids


def E(*rows) -> pd.DataFrame:
    """Events from ``(type, ts)`` or ``(type, ts, attrs)`` tuples; ids are the row positions."""
    data = []
    for row in rows:
        t, ts = row[0], row[1]
        attrs = row[2] if len(row) > 2 else {}
        data.append({"type": t, "ts": ts, **attrs})
    return pd.DataFrame(data)


def ids(events, rules, backend, **kw) -> list[tuple[int, ...]]:
    return id_tuples(cep_gpu.detect(events, rules, backend=backend, **kw))


def rows(out: pd.DataFrame, *cols) -> list[tuple]:
    """(rule, ts, ids, *cols) of each output row, nulls as None."""
    res = []
    for _, r in out.iterrows():
        extra = tuple(None if _isnull(r[c]) else r[c] for c in cols)
        res.append((r["rule"], r["ts"], tuple(int(i) for i in r["ids"]), *extra))
    return res


def _isnull(v) -> bool:
    try:
        return bool(pd.isna(v))
    except (TypeError, ValueError):
        return False


# =================================================================================================
# SEQ patterns
# =================================================================================================

SEQ_AB = "define AB pattern SEQ(A a, B b) within 10 s"


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


# =================================================================================================
# TESLA rules
# =================================================================================================

TESLA_POLICY = """
define P(k: int)
from T(k=$k) and {policy} X(k=$k) within 5 s from T
where k = T.k
"""
# X@0 k1 (exactly 5 s before T@5), X@1 k2, X@2 k1, X@4 k1, X@4 k2, T@5 k1, X@5 k1, T@6 k2
TESLA_POLICY_EVENTS = E(
    ("X", 0, {"k": 1}), ("X", 1, {"k": 2}), ("X", 2, {"k": 1}), ("X", 4, {"k": 1}),
    ("X", 4, {"k": 2}), ("T", 5, {"k": 1}), ("X", 5, {"k": 1}), ("T", 6, {"k": 2}),
)


@pytest.mark.parametrize("policy,expected", [
    # T@5 k=1: window [0, 5) of k=1: X0 (edge, inclusive), X2, X3; X6 (same ts as T) is not before.
    # T@6 k=2: window [1, 6) of k=2: X1 (edge), X4.
    ("each", [(5, 0), (5, 2), (5, 3), (7, 1), (7, 4)]),
    ("last", [(5, 3), (7, 4)]),
    ("first", [(5, 0), (7, 1)]),
])
def test_tesla_policies_with_parameters(backend, policy, expected):
    out = cep_gpu.detect(TESLA_POLICY_EVENTS, TESLA_POLICY.format(policy=policy), backend=backend)
    assert id_tuples(out) == expected
    assert out["k"].tolist() == [1 if t[0] == 5 else 2 for t in expected]


def test_tesla_window_far_edge_inclusive_in_milliseconds(backend):
    # within 2 s from T@5: X@3.000 is exactly 2 s earlier (in), X@2.999 is not; X@5 not before.
    rule = TESLA_POLICY.format(policy="each").replace("5 s", "2 s")
    ev = E(("X", 2.999, {"k": 1}), ("X", 3, {"k": 1}), ("X", 5, {"k": 1}), ("T", 5, {"k": 1}))
    assert ids(ev, rule, backend) == [(3, 1)]


@pytest.mark.parametrize("policy,expected", [
    # equal timestamps: order is (ts, id); last takes the largest id, first the smallest.
    ("each", [(30, 10), (30, 20)]),
    ("last", [(30, 20)]),
    ("first", [(30, 10)]),
])
def test_tesla_equal_timestamps_break_ties_on_ids(backend, policy, expected):
    rule = f"define Tie from T() and {policy} X() within 5 s from T"
    ev = E(("X", 4), ("X", 4), ("T", 5))
    ev["id"] = [20, 10, 30]
    assert ids(ev, rule, backend) == expected


def test_tesla_chain_window_from_earlier_predicate(backend):
    # last Y within 2 s from X: ts(X) - 2 <= ts(Y) < ts(X).  T@6: X@2.5 -> Y in [0.5, 2.5): Y@1;
    # X@3 -> Y in [1, 3): Y@1, Y@2.6 -> latest Y@2.6.  Y@0 is never in a window.
    rule = "define Ch from T() and each X() within 5 s from T and last Y() within 2 s from X"
    ev = E(("Y", 0), ("Y", 1), ("X", 2.5), ("Y", 2.6), ("X", 3), ("T", 6))
    assert ids(ev, rule, backend) == [(5, 2, 1), (5, 4, 3)]


def test_tesla_parameter_first_bound_by_a_non_terminator(backend):
    # $k appears first in X (T has no k): X binds it, Y must equal X.k.
    rule = """
    define PK from T() and each X(k=$k) within 5 s from T and each Y(k=$k) within 5 s from T
    """
    ev = E(("X", 1, {"k": 1}), ("X", 2, {"k": 2}), ("Y", 3, {"k": 1}), ("Y", 4, {"k": 2}), ("T", 5))
    assert ids(ev, rule, backend) == [(4, 0, 2), (4, 1, 3)]


TESLA_NEG_WITHIN = """
define Neg(k: int)
from T(k=$k) and each X(k=$k) within 5 s from T and not N(k=$k) within 2 s from T
where k = $k
"""


@pytest.mark.parametrize("events,expected", [
    # not N within 2 s from T@10 forbids N of T's k in [8, 10): N@8 is on the inclusive edge.
    (E(("X", 8, {"k": 1}), ("N", 8, {"k": 1}), ("T", 10, {"k": 1})), []),
    # an N at the terminator's timestamp is not before it (either row order).
    (E(("X", 8, {"k": 1}), ("T", 10, {"k": 1}), ("N", 10, {"k": 1})), [(1, 0)]),
    (E(("X", 8, {"k": 1}), ("N", 10, {"k": 1}), ("T", 10, {"k": 1})), [(2, 0)]),
    (E(("N", 7.9, {"k": 1}), ("X", 8, {"k": 1}), ("T", 10, {"k": 1})), [(2, 1)]),
    # another k, or no k at all: no block.
    (E(("X", 8, {"k": 1}), ("N", 9, {"k": 2}), ("T", 10, {"k": 1})), [(2, 0)]),
    (E(("X", 8, {"k": 1}), ("N", 9, {"k": None}), ("T", 10, {"k": 1})), [(2, 0)]),
])
def test_tesla_negation_within(backend, events, expected):
    assert ids(events, TESLA_NEG_WITHIN, backend) == expected


@pytest.mark.parametrize("ends", ["X and T", "T and X"])
def test_tesla_negation_between_either_order(backend, ends):
    # not N strictly between X and T.  X@1: N@3 in (1, 5) -> blocked (N@1 at ts(X) would not).
    # X@2: N@3 -> blocked.  X@4: (4, 5) holds no N (N@5 at ts(T) is not strictly between).
    rule = f"define Btw from T() and each X() within 10 s from T and not N() between {ends}"
    ev = E(("X", 1), ("N", 1), ("X", 2), ("N", 3), ("X", 4), ("N", 5), ("T", 5))
    assert ids(ev, rule, backend) == [(6, 4)]


def test_tesla_negation_between_two_selections_in_either_time_order(backend):
    # X and Y both anywhere in T's window; N strictly between them, whichever came first.
    # (X@2, Y@6): N@4 -> blocked.  (X@2, Y@9): N@4, N@7 -> blocked.  (X@8, Y@6): N@7 -> blocked
    # (Y before X).  (X@8, Y@9): nothing between -> match.
    rule = """
    define Btw2 from T() and each X() within 10 s from T and each Y() within 10 s from T
           and not N() between X and Y
    """
    ev = E(("X", 2), ("N", 4), ("Y", 6), ("N", 7), ("X", 8), ("Y", 9), ("T", 10))
    assert ids(ev, rule, backend) == [(6, 4, 5)]


TESLA_AGG = """
define Ag(cnt: int, total: float, mean: float, lo: float, hi: float, per: float)
from T(k=$k)
 and n = Count(V(k=$k) within 5 s from T)
 and s = Sum(V(k=$k) within 5 s from T).v
 and a = Avg(V(k=$k) within 5 s from T).v
 and mn = Min(V(k=$k) within 5 s from T).v
 and mx = Max(V(k=$k) within 5 s from T).v
where cnt = n, total = s, mean = a, lo = mn, hi = mx, per = s / n
"""
# V@0 k1 v10 (outside [1,6)), V@1 k1 v2 (edge), V@3 k1 v=null, V@4 k2 v100 (other k), V@5 k1 v6,
# V@6 k1 v50 (same ts as T@6: not before), T@6 k1, T@20 k1 (empty span [15, 20))
TESLA_AGG_EVENTS = E(
    ("V", 0, {"k": 1, "v": 10.0}), ("V", 1, {"k": 1, "v": 2.0}), ("V", 3, {"k": 1, "v": None}),
    ("V", 4, {"k": 2, "v": 100.0}), ("V", 5, {"k": 1, "v": 6.0}), ("V", 6, {"k": 1, "v": 50.0}),
    ("T", 6, {"k": 1}), ("T", 20, {"k": 1}),
)


def test_tesla_aggregates_in_where(backend):
    # T@6: V1 (2), V2 (null v: counted, but skipped by Sum/Avg/Min/Max), V4 (6):
    #   Count 3, Sum 8, Avg 4, Min 2, Max 6, per = 8/3.
    # T@20: nothing: Count 0, Sum 0, Avg/Min/Max null, per = 0/0 = null.
    out = cep_gpu.detect(TESLA_AGG_EVENTS, TESLA_AGG, backend=backend)
    got = rows(out, "cnt", "total", "mean", "lo", "hi", "per")
    assert got[0][:8] == ("Ag", 6.0, (6,), 3, 8.0, 4.0, 2.0, 6.0)
    assert math.isclose(got[0][8], 8 / 3)
    assert got[1] == ("Ag", 20.0, (7,), 0, 0.0, None, None, None, None)


@pytest.mark.parametrize("condition,expected", [
    ("a = Avg(V(k=$k) within 5 s from T).v > 3", [(6,)]),   # 4 > 3; null at T@20 -> false
    ("s = Sum(V(k=$k) within 5 s from T).v <= 0", [(7,)]),  # 8; 0 over nothing -> true
    ("n = Count(V(k=$k) within 5 s from T) < 1", [(7,)]),   # 3; 0 -> true
    ("mx = Max(V(k=$k) within 5 s from T).v <= 100", [(6,)]),  # 6; null -> false
    ("mn = Min(V(k=$k) within 5 s from T).v >= 2", [(6,)]),  # 2 >= 2; null -> false
])
def test_tesla_aggregate_conditions(backend, condition, expected):
    rule = f"define AgC from T(k=$k) and {condition}"
    assert ids(TESLA_AGG_EVENTS, rule, backend) == expected


@pytest.mark.parametrize("policy", ["each", "last", "first"])
def test_tesla_last_first_choose_among_candidates_passing_a_negation(backend, policy):
    # not N within 1 s from X is fixed once X is bound, so it takes part in X's choice.
    rule = f"define LN from T() and {policy} X() within 10 s from T and not N() within 1 s from X"
    # X@3 has N@2.5 in [2, 3) -> invalid; X@1 is valid -> every policy gives X@1.
    assert ids(E(("X", 1), ("N", 2.5), ("X", 3), ("T", 5)), rule, backend) == [(3, 0)]
    # X@1 has N@0.5 in [0, 1) -> invalid; X@3 is valid -> every policy gives X@3.
    assert ids(E(("N", 0.5), ("X", 1), ("X", 3), ("T", 5)), rule, backend) == [(3, 2)]


@pytest.mark.parametrize("policy", ["each", "last", "first"])
def test_tesla_last_first_choose_among_candidates_passing_an_aggregate(backend, policy):
    # Sum(V within 1 s from X) < 5: X@3 has V@2.5 (10) in [2, 3) -> invalid; X@1 sums 0 -> valid.
    rule = f"""
    define LA from T() and {policy} X() within 10 s from T
           and s = Sum(V() within 1 s from X).v < 5
    """
    ev = E(("X", 1), ("V", 2.5, {"v": 10.0}), ("X", 3), ("T", 5))
    assert ids(ev, rule, backend) == [(3, 0)]


def test_tesla_aggregate_over_a_later_predicate_does_not_change_an_earlier_choice(backend):
    # last X is chosen first (X@3, latest); Sum(V between X and Y) reads Y too, so it is checked at
    # Y's step: Y@5 has V@4 (10) between X@3 and Y@5 -> invalid; Y@2: nothing in (2, 3) -> valid.
    # X is not re-chosen (X@1 would not change anything here either way).
    rule = """
    define LL from T() and last X() within 10 s from T and last Y() within 10 s from T
           and s = Sum(V() between X and Y).v < 5
    """
    ev = E(("X", 1), ("Y", 2), ("X", 3), ("V", 4, {"v": 10.0}), ("Y", 5), ("T", 6))
    assert ids(ev, rule, backend) == [(5, 2, 1)]


def test_tesla_later_condition_rejects_without_backtracking(backend):
    # last X picks X@3 (v=5); Y(v > X.v) is a condition of Y: Y@4 (v=4) fails it, so no match,
    # although X@1 (v=1) with Y@4 would satisfy it.
    rule = """
    define NB from T() and last X() within 10 s from T and each Y(v > X.v) within 10 s from T
    """
    ev = E(("X", 1, {"v": 1}), ("X", 3, {"v": 5}), ("Y", 4, {"v": 4}), ("T", 6))
    assert ids(ev, rule, backend) == []


CONS = "define Cons from T() and each X() within 10 s from T consuming X"
FREE = "define Free from T() and each X() within 10 s from T"


def test_tesla_consuming_is_per_rule(backend):
    # Cons: T@3 binds X@1, X@2 (both of its composite events, then both are consumed); T@4 finds
    # nothing left; T@6 only X@5.  Free (no consuming) is not affected.
    ev = E(("X", 1), ("X", 2), ("T", 3), ("T", 4), ("X", 5), ("T", 6))
    out = cep_gpu.detect(ev, CONS + "\n\n" + FREE, backend=backend)
    assert rows(out) == [
        ("Cons", 3.0, (2, 0)), ("Cons", 3.0, (2, 1)), ("Free", 3.0, (2, 0)), ("Free", 3.0, (2, 1)),
        ("Free", 4.0, (3, 0)), ("Free", 4.0, (3, 1)),
        ("Cons", 6.0, (5, 4)), ("Free", 6.0, (5, 0)), ("Free", 6.0, (5, 1)), ("Free", 6.0, (5, 4)),
    ]


def test_tesla_consuming_terminators_at_equal_timestamps(backend):
    # terminators are processed in (ts, id) order: T1 consumes X0, T2 (same ts) finds nothing.
    ev = E(("X", 1), ("T", 3), ("T", 3))
    assert ids(ev, CONS, backend) == [(1, 0)]


@pytest.mark.parametrize("consumed,expected", [
    # A@2 binds (a2=A@2, a1=A@1) and consumes A@1; A@3 can only take A@2.
    ("a1", [(1, 0), (2, 1)]),
    # A@2 consumes itself (as a2); A@3 can still take A@1 but not A@2.
    ("a2", [(1, 0), (2, 0)]),
    # both consumed: A@3 finds nothing.
    ("a1, a2", [(1, 0)]),
])
def test_tesla_consuming_with_one_type_in_two_roles(backend, consumed, expected):
    rule = f"define Pair from A() as a2 and last A() as a1 within 10 s from a2 consuming {consumed}"
    assert ids(E(("A", 1), ("A", 2), ("A", 3)), rule, backend) == expected


HIER = """
define P(k: int) from B(k=$k) and each A(k=$k) within 5 s from B where k = B.k

define Q from C(k=$k) and each P(k=$k) within 5 s from C
"""


def test_composite_events_feed_other_rules(backend):
    # P at B@2 with A@1 (k=1): ids (1, 0), ts 2, k 1.  Q at C@3: binds that P (k=1, ts 2 < 3).
    # C@2 (k=1) does not: P happens at ts 2, not before it.  The P's id is its content hash.
    ev = E(("A", 1, {"k": 1}), ("B", 2, {"k": 1}), ("C", 2, {"k": 1}), ("C", 3, {"k": 1}))
    pid = int(composite_ids("P", np.array([[1, 0]], dtype=np.int64))[0])
    assert -(2**62) <= pid < 0
    for text in (HIER, "\n\n".join(reversed(HIER.strip().split("\n\n")))):  # rule order irrelevant
        out = cep_gpu.detect(ev, text, backend=backend)
        # Q defines no attribute: its k is null.
        assert rows(out, "k") == [("P", 2.0, (1, 0), 1), ("Q", 3.0, (3, pid), None)]


def test_composite_events_in_negations(backend):
    # a composite type may be negated too: C@3 has P@2 in [0, 3) -> blocked; C@9 does not.
    rules = HIER.split("\n\n")[0] + "\n\ndefine NQ from C() and not P() within 3 s from C"
    ev = E(("A", 1, {"k": 1}), ("B", 2, {"k": 1}), ("C", 3, {"k": 1}), ("C", 9, {"k": 1}))
    out = cep_gpu.detect(ev, rules, backend=backend)
    assert rows(out) == [("P", 2.0, (1, 0)), ("NQ", 9.0, (3,))]


@pytest.mark.parametrize("cond,expected", [
    # X1 lacks v, so it fails v > 0; X2 (v=2) passes, its w reads the null u -> null w.
    ("v > 0", [((4, 0), 3.0), ((4, 2), None)]),
    # v != 1: X0 fails (v = 1), X1 fails (null), X2 passes.
    ("v != 1", [((4, 2), None)]),
])
def test_tesla_nulls_fail_predicates_and_make_where_null(backend, cond, expected):
    rule = f"define Nul(w: float) from T() and each X({cond}) within 5 s from T where w = X.u + 1"
    ev = E(
        ("X", 1, {"v": 1, "u": 2}), ("X", 2, {"v": None, "u": 3}), ("X", 3, {"v": 2, "u": None}),
        ("Y", 3.5), ("T", 5),
    )
    out = cep_gpu.detect(ev, rule, backend=backend)
    assert [(r[2], r[3]) for r in rows(out, "w")] == expected


def test_tesla_negation_ignores_events_failing_on_null(backend):
    # not N(v > 0): an N without v does not block; one with v = 1 does.
    rule = "define NN from T() and not N(v > 0) within 5 s from T"
    ev = E(("N", 1, {"v": None}), ("T", 2), ("N", 3, {"v": 1.0}), ("T", 4))
    assert ids(ev, rule, backend) == [(1,)]


def test_unknown_attribute_is_a_schema_error(backend):
    with pytest.raises(cep_gpu.RuleError, match="nosuch"):
        cep_gpu.detect(E(("T", 1, {"v": 1})), "define U from T(nosuch > 1)", backend=backend)


# =================================================================================================
# Output: several rules, ordering, layout, timestamps
# =================================================================================================

def test_several_rules_sorted_by_ts_rule_ids(backend):
    # Zed and Alpha produce at the same ts: Alpha first (rule), then ids; ts dominates.
    zed = "define Zed from T() and each X() within 5 s from T"
    alpha = "define Alpha from T() and each X() within 5 s from T"
    ev = E(("X", 1), ("X", 2), ("T", 3), ("T", 4))
    out = cep_gpu.detect(ev, [cep_gpu.parse_rule(zed), cep_gpu.parse_rule(alpha)], backend=backend)
    assert rows(out) == [
        ("Alpha", 3.0, (2, 0)), ("Alpha", 3.0, (2, 1)), ("Zed", 3.0, (2, 0)), ("Zed", 3.0, (2, 1)),
        ("Alpha", 4.0, (3, 0)), ("Alpha", 4.0, (3, 1)), ("Zed", 4.0, (3, 0)), ("Zed", 4.0, (3, 1)),
    ]


def test_output_layout_union_of_attributes(backend):
    # columns: rule, ts, ids (Arrow list<int64>), then every rule's attributes, first seen first;
    # null where a rule does not define one.
    r1 = "define R1(k: int) from T(k=$k) and each X(k=$k) within 5 s from T where k = $k"
    r2 = "define R2(w: string, k: int) from T(k=$k) where w = 'hi', k = T.k * 10"
    ev = E(("X", 1, {"k": 1}), ("T", 2, {"k": 1}))
    out = cep_gpu.detect(ev, r1 + "\n\n" + r2, backend=backend)
    assert list(out.columns) == ["rule", "ts", "ids", "k", "w"]
    assert out["ids"].dtype == pd.ArrowDtype(pa.list_(pa.int64()))
    assert rows(out, "k", "w") == [("R1", 2.0, (1, 0), 1, None), ("R2", 2.0, (1,), 10, "hi")]
    assert [tuple(r) for r in out["ids"]] == [(1, 0), (1,)]

    tab = cep_gpu.detect(ev, r1 + "\n\n" + r2, backend=backend, output="arrow")
    assert isinstance(tab, pa.Table)
    assert tab.schema.names == ["rule", "ts", "ids", "k", "w"]
    assert tab.schema.field("ids").type == pa.list_(pa.int64())
    assert tab.schema.field("rule").type == pa.string()
    assert tab.column("ids").to_pylist() == [[1, 0], [1]]
    assert tab.column("w").to_pylist() == [None, "hi"]

    assert cep_gpu.detect(ev, r1 + "\n\n" + r2, backend=backend, output="count") == {"R1": 1, "R2": 1}


def test_empty_output_keeps_the_layout(backend):
    r1 = "define R1(k: int) from T(k=$k) and each X(k=$k) within 5 s from T where k = $k"
    out = cep_gpu.detect(E(("T", 2, {"k": 1})), r1, backend=backend)
    assert len(out) == 0
    assert list(out.columns) == ["rule", "ts", "ids", "k"]


@pytest.mark.parametrize("ts,unit,within", [
    # integer milliseconds stay integer milliseconds
    ([1000, 2000, 4500], "ms", "1 s"),
    # float minutes stay float minutes
    ([1.0, 2.0, 4.5], "min", "1 min"),
    # datetimes stay datetimes (naive and tz-aware)
    (pd.to_datetime(["2024-01-01 00:00:01.000", "2024-01-01 00:00:02.000", "2024-01-01 00:00:04.500"]), "s", "1 s"),
    (pd.to_datetime(["2024-01-01 00:00:01.000", "2024-01-01 00:00:02.000", "2024-01-01 00:00:04.500"], utc=True),
     "s", "1 s"),
])
def test_output_ts_keeps_the_input_dtype(backend, ts, unit, within):
    # A@t0, B@t1 exactly one unit later (inclusive window) -> match at t1; B@t2 is 3.5 units after.
    rule = f"define AB pattern SEQ(A a, B b) within {within}"
    ev = pd.DataFrame({"type": ["A", "B", "B"], "ts": ts})
    out = cep_gpu.detect(ev, rule, backend=backend, time_unit=unit)
    assert id_tuples(out) == [(0, 1)]
    assert out["ts"].dtype == ev["ts"].dtype
    assert out["ts"].tolist() == [ev["ts"].iloc[1]]


def test_timestamp_reference_is_in_the_input_unit(backend):
    # Y.ts / alias.ts is in the input's time unit (seconds here, the default time_unit), see
    # docs/language.md; tests/test_time_units.py covers the other units and datetime input.
    rule = "define Ts pattern SEQ(A a, B b) where b.ts - a.ts >= 2 within 10 s return d := b.ts - a.ts"
    ev = E(("A", 1), ("B", 2), ("B", 3.5))
    out = cep_gpu.detect(ev, rule, backend=backend)
    assert rows(out, "d") == [("Ts", 3.5, (0, 2), 2.5)]


# =================================================================================================
# More selection, negation and aggregate interplay
# =================================================================================================

@pytest.mark.parametrize("policy,events,expected", [
    # last: A@3 (k=2) has N@4 (k=2) strictly between it and B@5 -> invalid (the NOT's span and its
    # condition on a are fixed when a is bound, so it takes part in a's choice); A@1 (k=1) is not
    # blocked by a k=2 N -> the latest valid A is A@1.
    ("last", E(("A", 1, {"k": 1}), ("A", 3, {"k": 2}), ("N", 4, {"k": 2}), ("B", 5, {"k": 0})), [(0, 3)]),
    # first: A@1 (k=2) has N@2 (k=2) between -> invalid; the earliest valid A is A@3.
    ("first", E(("A", 1, {"k": 2}), ("N", 2, {"k": 2}), ("A", 3, {"k": 1}), ("B", 5, {"k": 0})), [(2, 3)]),
])
def test_seq_not_takes_part_in_select_choice(backend, policy, events, expected):
    rule = f"define SN pattern SEQ(A a, NOT(N h), B b) where h.k = a.k within 10 s select {policy}"
    assert ids(events, rule, backend) == expected


def test_seq_not_reading_an_earlier_position_is_checked_with_it(backend):
    # NOT(h) between b and c, but h.k = a.k reads a: checked when a is bound (it takes part in a's
    # choice, not b's).  b = B@3 (latest); a: A@2 (k=2) is blocked by N@4 (k=2) in (3, 5); A@1 is not.
    rule = "define SN2 pattern SEQ(A a, B b, NOT(N h), C c) where h.k = a.k within 10 s select last"
    ev = E(("A", 1, {"k": 1}), ("A", 2, {"k": 2}), ("B", 3), ("N", 4, {"k": 2}), ("C", 5))
    assert ids(ev, rule, backend) == [(0, 2, 4)]


@pytest.mark.parametrize("policy", ["each", "last", "first"])
def test_seq_trailing_not_takes_part_in_select_choice(backend, policy):
    # (ts(b), ts(a) + W] depends on a: A@2 -> (4, 12] holds N@10.5 -> invalid; A@0 -> (4, 10] is
    # clear.  Every policy ends with A@0.
    rule = f"define TS pattern SEQ(A a, B b, NOT(N h)) within 10 s select {policy}"
    ev = E(("A", 0), ("A", 2), ("B", 4), ("N", 10.5))
    assert ids(ev, rule, backend) == [(0, 2)]


@pytest.mark.parametrize("policy", ["each", "last"])
def test_seq_leading_not_takes_part_in_select_choice(backend, policy):
    # [ts(b) - W, ts(a)): A@3 -> [-5, 3) holds N@2 -> invalid; A@1 -> [-5, 1) is clear.
    rule = f"define LS pattern SEQ(NOT(N h), A a, B b) within 10 s select {policy}"
    ev = E(("A", 1), ("N", 2), ("A", 3), ("B", 5))
    assert ids(ev, rule, backend) == [(0, 3)]


def test_seq_repeated_type(backend):
    # SEQ(A a, A b): distinct events, ts(a) < ts(b), within 5 s, b.x > a.x.
    # b=A@2 (x3): A@1.  b=A@3#2 (x2): A@1 (A@2 has x3).  b=A@3#3 (x5): A@1, A@2 (not A@3#2: same ts).
    # b=A@7 (x9): A@2, A@3#2, A@3#3 (A@1 is 6 s before).
    rule = "define AA pattern SEQ(A a, A b) where b.x > a.x within 5 s"
    ev = E(("A", 1, {"x": 1}), ("A", 2, {"x": 3}), ("A", 3, {"x": 2}), ("A", 3, {"x": 5}), ("A", 7, {"x": 9}))
    assert ids(ev, rule, backend) == [(0, 1), (0, 2), (0, 3), (1, 3), (1, 4), (2, 4), (3, 4)]


@pytest.mark.parametrize("policy,expected", [
    # The plan where C@5 is last binds y then x, each anchored at (and before) C@5 only, so x may
    # come after y.  each: x=A@2 with y=B@1 or B@3.  No other event has all the others before it.
    ("each", [(1, 0, 3), (1, 2, 3)]),
    ("last", [(1, 2, 3)]),   # y = latest B before C@5
    ("first", [(1, 0, 3)]),  # y = earliest B in [C@5 - 10, C@5)
])
def test_and_select_policies(backend, policy, expected):
    rule = f"define T3 pattern AND(A x, B y, C z) within 10 s select {policy}"
    assert ids(E(("B", 1), ("A", 2), ("B", 3), ("C", 5)), rule, backend) == expected


def test_and_with_where(backend):
    # B@3 last: A@1 (same k) -> (0, 2).  A@4 last: B@2 (same k) -> (3, 1).  B@2 last: A@1 differs.
    rule = "define M pattern AND(A x, B y) where x.k = y.k within 5 s"
    ev = E(("A", 1, {"k": 1}), ("B", 2, {"k": 2}), ("B", 3, {"k": 1}), ("A", 4, {"k": 2}))
    out = cep_gpu.detect(ev, rule, backend=backend)
    assert rows(out) == [("M", 3, (0, 2)), ("M", 4, (3, 1))]


def test_tesla_first_then_last_chain(backend):
    # first X in [0, 5) = X@1; then the latest Y in [X@1 - 5, X@1) = Y@0.5 (Y@1.5 is after X@1).
    rule = "define FL from T() and first X() within 5 s from T and last Y() within 5 s from X"
    ev = E(("Y", 0), ("Y", 0.5), ("X", 1), ("Y", 1.5), ("X", 2), ("T", 5))
    assert ids(ev, rule, backend) == [(5, 2, 1)]


def test_tesla_aggregate_between_two_selections_in_either_order(backend):
    # Sum(V.v strictly between X and Y) < 50.  V@2 = 1, V@3.5 = 10, V@5 = 100.
    # (X@1, Y@3): 1 ok.  (X@1, Y@6): 111.  (X@4, Y@3) (Y first): 10 ok.  (X@4, Y@6): 100.
    rule = """
    define AB2(tot: float) from T() and each X() within 10 s from T and each Y() within 10 s from T
           and s = Sum(V() between X and Y).v < 50
    where tot = s
    """
    ev = E(("X", 1), ("V", 2, {"v": 1.0}), ("Y", 3), ("V", 3.5, {"v": 10.0}), ("X", 4),
           ("V", 5, {"v": 100.0}), ("Y", 6), ("T", 10))
    out = cep_gpu.detect(ev, rule, backend=backend)
    assert rows(out, "tot") == [("AB2", 10.0, (7, 0, 2), 1.0), ("AB2", 10.0, (7, 4, 2), 10.0)]


def test_tesla_aggregate_conditions_on_bound_predicates(backend):
    # Max(V(k = X.k) within 3 s from X).v, no comparison, used in where.
    # X@2 (k1): [-1, 2) -> V@0 (5), V@1.5 (3) -> 5.  X@4 (k2): [1, 4) -> V@1 (7, on the edge) -> 7.
    rule = """
    define AK(top: float) from T() and each X() within 10 s from T
           and m = Max(V(k = X.k) within 3 s from X).v
    where top = m
    """
    ev = E(("V", 0, {"k": 1, "v": 5.0}), ("V", 1, {"k": 2, "v": 7.0}), ("V", 1.5, {"k": 1, "v": 3.0}),
           ("X", 2, {"k": 1}), ("V", 3, {"k": 1, "v": 100.0}), ("X", 4, {"k": 2}), ("T", 6))
    out = cep_gpu.detect(ev, rule, backend=backend)
    assert rows(out, "top") == [("AK", 6.0, (6, 3), 5.0), ("AK", 6.0, (6, 5), 7.0)]


def test_tesla_parameter_in_inequalities_and_arithmetic(backend):
    # T binds $l = 3; X needs 3 < v <= 3 * 2 - -1 = 7.
    rule = "define PL from T(lim = $l) and each X(v > $l and v <= $l * 2 - -1) within 10 s from T"
    ev = E(("X", 1, {"v": 3}), ("X", 2, {"v": 4}), ("X", 3, {"v": 7}), ("X", 4, {"v": 8}),
           ("X", 5, {"v": -1}), ("T", 6, {"lim": 3}))
    assert ids(ev, rule, backend) == [(5, 1), (5, 2)]


def test_tesla_strings_and_literals_absent_from_the_input(backend):
    # room != 'zzz' holds for every non-null room ('zzz' occurs nowhere); room = 'zzz' never holds.
    # X1 lacks room -> fails.  Y must share X's room.
    rules = """
    define SS from T() and each X(room != 'zzz') within 10 s from T
           and each Y(room = X.room) within 10 s from T

    define SZ from T() and each X(room = 'zzz') within 10 s from T
    """
    ev = E(("X", 1, {"room": "a"}), ("X", 2, {"room": None}), ("Y", 3, {"room": "a"}),
           ("Y", 4, {"room": "b"}), ("T", 5))
    assert rows(cep_gpu.detect(ev, rules, backend=backend)) == [("SS", 5.0, (4, 0, 2))]


def test_tesla_booleans_and_division_by_zero(backend):
    # flag = true: X0 only (X1 false, X2 null).  v / w > 1: X0 4/2 ok; X3 4/0 is null -> false.
    rule = "define BD from T() and each X(flag = true and v / w > 1) within 10 s from T"
    ev = E(("X", 1, {"flag": True, "v": 4, "w": 2}), ("X", 2, {"flag": False, "v": 4, "w": 2}),
           ("X", 3, {"flag": None, "v": 4, "w": 2}), ("X", 4, {"flag": True, "v": 4, "w": 0}),
           ("T", 5))
    assert ids(ev, rule, backend) == [(4, 0)]


NEG2 = """
define NX from T() and each X() within 10 s from T
       and not N(k = X.k) between X and T
       and not M() within 1 s from T
"""


@pytest.mark.parametrize("events,expected", [
    # N@3 (k=1) lies between X@1 (k=1) and T -> X@1 blocked; X@2 (k=2) is not.
    (E(("X", 1, {"k": 1}), ("X", 2, {"k": 2}), ("N", 3, {"k": 1}), ("T", 5)), [(3, 1)]),
    # M@4 in [4, 5) blocks everything.
    (E(("X", 1, {"k": 1}), ("X", 2, {"k": 2}), ("M", 4), ("T", 5)), []),
    # M@3.9 is outside [4, 5).
    (E(("X", 1, {"k": 1}), ("X", 2, {"k": 2}), ("M", 3.9), ("T", 5)), [(3, 0), (3, 1)]),
])
def test_tesla_two_negations(backend, events, expected):
    assert ids(events, NEG2, backend) == expected


def test_ids_are_input_row_positions_even_when_unsorted(backend):
    # No id column: ids are the positions in the input frame (B@2 is 0, A@1 is 1, B@3 is 2).
    ev = E(("B", 2), ("A", 1), ("B", 3))
    out = cep_gpu.detect(ev, SEQ_AB, backend=backend)
    assert rows(out) == [("AB", 2, (1, 0)), ("AB", 3, (1, 2))]


@pytest.mark.parametrize("within,gaps", [
    ("1.5 s", [(1.5, True), (1.501, False)]),
    ("2 min.", [(120, True), (120.5, False)]),
])
def test_durations(backend, within, gaps):
    rule = f"define Du pattern SEQ(A a, B b) within {within}"
    for gap, ok in gaps:
        assert ids(E(("A", 0), ("B", gap)), rule, backend) == ([(0, 1)] if ok else [])


def test_attribute_absent_from_an_event_type_fails_quietly(backend):
    # v exists in the input (on Y) but X never has it: X fails X(v > 0); no error.
    rule = "define AX from T() and each X(v > 0) within 10 s from T"
    assert ids(E(("X", 1), ("Y", 2, {"v": 5}), ("T", 3)), rule, backend) == []


def test_composite_ties_break_on_composite_ids_and_consumption(backend):
    # P: B@2 -> (1, 0); B@4 -> (3, 0) and (3, 2), both at ts 4.  Q: last P before C, consuming it.
    # C@5: the latest P is at ts 4; of the two, the larger id (ids are content hashes) wins, then
    # it is consumed; C@6 gets the other one.  kk = P.k * 100.
    rules = """
    define P(k: int) from B(k=$k) and each A(k=$k) within 5 s from B where k = B.k

    define Q(kk: int) from C(k=$k) and last P(k=$k) within 5 s from C where kk = P.k * 100 consuming P
    """
    ev = E(("A", 1, {"k": 1}), ("B", 2, {"k": 1}), ("A", 3, {"k": 1}), ("B", 4, {"k": 1}),
           ("C", 5, {"k": 1}), ("C", 6, {"k": 1}))
    p2, p3 = (int(x) for x in composite_ids("P", np.array([[3, 0], [3, 2]], dtype=np.int64)))
    hi, lo = max(p2, p3), min(p2, p3)
    out = cep_gpu.detect(ev, rules, backend=backend)
    q = [r for r in rows(out, "kk") if r[0] == "Q"]
    assert q == [("Q", 5.0, (4, hi), 100), ("Q", 6.0, (5, lo), 100)]


def test_attribute_union_int_and_float_is_float(backend):
    rules = "define I1(z: int) from T() where z = 1\n\ndefine F1(z: float) from U() where z = 2.5"
    out = cep_gpu.detect(E(("T", 1), ("U", 2)), rules, backend=backend)
    assert rows(out, "z") == [("I1", 1.0, (0,), 1.0), ("F1", 2.0, (1,), 2.5)]
    assert out["z"].dtype == np.float64


SEQ_NOTS = "define Multi pattern SEQ(NOT(L l), A a, NOT(M m), B b, NOT(N n)) within 10 s"


@pytest.mark.parametrize("extra,expected", [
    # A@2, B@5 with: L forbidden in [B - 10, A) = [-5, 2), M in (2, 5), N in (5, A + 10] = (5, 12].
    ([], True),
    ([("L", 1)], False),
    ([("L", 2)], True),       # at ts(a): outside [.., 2)
    ([("M", 3)], False),
    ([("M", 5)], True),       # at ts(b): not strictly between
    ([("N", 12)], False),     # on the inclusive far edge
    ([("N", 12.5)], True),
    ([("N", 5)], True),       # at ts(b): not after it
])
def test_seq_leading_middle_and_trailing_nots_together(backend, extra, expected):
    ev = E(("A", 2), ("B", 5), *extra)
    assert ids(ev, SEQ_NOTS, backend) == ([(0, 1)] if expected else [])


@pytest.mark.parametrize("rule,events,expected", [
    # one positive event and a trailing NOT: none in (ts(a), ts(a) + 5].
    ("define Lone pattern SEQ(A a, NOT(N h)) within 5 s", E(("A", 0), ("N", 5), ("A", 10), ("N", 15.5)),
     [(2,)]),
    # one positive event and a leading NOT: none in [ts(a) - 5, ts(a)).
    ("define Lone2 pattern SEQ(NOT(N h), A a) within 5 s", E(("N", 0), ("A", 5), ("A", 10.5)), [(2,)]),
])
def test_seq_single_positive_event_with_not(backend, rule, events, expected):
    assert ids(events, rule, backend) == expected


def test_tesla_aggregate_compared_with_an_earlier_aggregate(backend):
    # n = Count, s = Sum(...).v > n * 2: T@6: 8 > 3 * 2; T@20: 0 > 0 is false.
    rule = """
    define AgR from T(k=$k) and n = Count(V(k=$k) within 5 s from T)
           and s = Sum(V(k=$k) within 5 s from T).v > n * 2
    """
    assert ids(TESLA_AGG_EVENTS, rule, backend) == [(6,)]


def test_tesla_aggregates_see_consumed_events(backend):
    # T@2 binds and consumes X@1 (Count 1).  T@3 can only bind X@2.5, but Count still sees X@1: 2.
    rule = """
    define CA(n: int) from T() and each X() within 10 s from T
           and c = Count(X() within 10 s from T)
    where n = c
    consuming X
    """
    ev = E(("X", 1), ("T", 2), ("X", 2.5), ("T", 3))
    assert rows(cep_gpu.detect(ev, rule, backend=backend), "n") == [("CA", 2.0, (1, 0), 1), ("CA", 3.0, (3, 2), 2)]


def test_composite_string_attributes_feed_parameters_and_literals(backend):
    # P carries a string from its input (room) and a literal that no input event holds (w = 'hi');
    # Q matches them against a primitive's string parameter and the same literal.
    rules = """
    define P(w: string, room: string) from B(room=$r) and each A(room=$r) within 5 s from B
    where w = 'hi', room = B.room

    define Q from C(room=$r) and each P(room=$r and w = 'hi') within 5 s from C
    """
    ev = E(("A", 1, {"room": "r1"}), ("B", 2, {"room": "r1"}), ("C", 3, {"room": "r2"}),
           ("C", 4, {"room": "r1"}))
    pid = int(composite_ids("P", np.array([[1, 0]], dtype=np.int64))[0])
    out = cep_gpu.detect(ev, rules, backend=backend)
    # C@3 is in another room; C@4 matches P (r1, 'hi').
    assert rows(out, "w", "room") == [("P", 2.0, (1, 0), "hi", "r1"), ("Q", 4.0, (3, pid), None, None)]


def test_int_and_float_compare_by_value(backend):
    # v = 1 holds for v = 1.0; n > 1.5 holds for the int 2, not for 1.
    rule = "define NF from T() and each X(v = 1 and n > 1.5) within 10 s from T"
    ev = E(("X", 1, {"v": 1.0, "n": 2}), ("X", 2, {"v": 1.5, "n": 2}), ("X", 3, {"v": 1.0, "n": 1}), ("T", 4))
    assert ids(ev, rule, backend) == [(3, 0)]


def test_consumption_only_by_produced_composite_events(backend):
    # T@3: last X = X@1, but Y@2 (v 0) fails v > X.v: no composite event, so nothing is consumed.
    # T@5: X@1 is still available; Y@4 (v 5) passes -> (T@5, X@1, Y@4).
    rule = """
    define CR from T() and last X() within 10 s from T and each Y(v > X.v) within 10 s from T
    consuming X
    """
    ev = E(("X", 1, {"v": 1}), ("Y", 2, {"v": 0}), ("T", 3), ("Y", 4, {"v": 5}), ("T", 5))
    assert ids(ev, rule, backend) == [(4, 0, 3)]
