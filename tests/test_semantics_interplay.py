"""Semantics, hand-worked: selection, negation and aggregate interplay.

How the cases are written (worked out by hand first, every backend): tests/semantics_cases.py.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from semantics_cases import SEQ_AB, TESLA_AGG_EVENTS, E, ids, rows

import cep_gpu
from cep_gpu.detect import composite_ids

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


# Spans near the ends of the timestamp range: `ts(Y) - D` (and `ts(first) + W`) lie outside int64
# nanoseconds; they saturate there, so every span still holds what its definition says.
_EARLY = E(("A", pd.Timestamp("1680-01-01")), ("B", pd.Timestamp("1680-06-01")), ("C", pd.Timestamp("1680-07-01")))
_LATE = E(("A", pd.Timestamp("2260-01-01")), ("B", pd.Timestamp("2260-06-01")), ("C", pd.Timestamp("2260-07-01")))
_LOW = E(("A", -9.2e9), ("B", -9.2e9 + 1), ("C", -9.2e9 + 2))  # seconds: about -9.2e18 ns
_HIGH = E(("A", 9.2e9), ("B", 9.2e9 + 1), ("C", 9.2e9 + 2))


@pytest.mark.parametrize("events", [_EARLY, _LATE, _LOW, _HIGH], ids=["1680", "2260", "low", "high"])
@pytest.mark.parametrize("rule,expected", [
    # A (before B, well inside the ten years) is counted: n = 1
    ("define EC(n: int) from B() and n = Count(A() within 87600 h from B) where n = n", [(1,)]),
    # the C is after B: outside both [ts(B) - 10 y, ts(A)) and [ts(B) - 10 y, ts(B))
    ("define EL pattern SEQ(NOT(C n), A a, B b) within 87600 h", [(0, 1)]),
    ("define EN from B() and not C() within 87600 h from B", [(1,)]),
    # the C lies in (ts(B), ts(A) + 10 y]: no match
    ("define ET pattern SEQ(A a, B b, NOT(C n)) within 87600 h", []),
])
def test_spans_near_the_ends_of_the_timestamp_range(backend, events, rule, expected):
    out = cep_gpu.detect(events, rule, backend=backend)
    assert [tuple(int(i) for i in r) for r in out["ids"]] == expected
    if "n" in out:
        assert out["n"].tolist() == [1]


# Integer arithmetic wraps around in int64 (docs/language.md, "Integer arithmetic"): 2^62 + 2^62
# is -2^63, on every backend, in conditions (SEQ `where`, predicate and negation conditions) and in
# `return` values.
_BIG = E(("A", 1, {"x": 2**62, "y": -(2**63)}), ("B", 2, {"x": 2**62, "y": 1}), ("C", 3, {"x": 2**63 - 1, "y": 0}),
         ("D", 4, {"x": 3, "y": 0}))


@pytest.mark.parametrize("rule,expected", [
    ("define W1 pattern SEQ(A a, B b) where a.x + b.x < 0 within 5 s", [(0, 1)]),
    ("define W1 pattern SEQ(A a, B b) where a.x * 2 < 0 and a.x * 4 = 0 within 5 s", [(0, 1)]),
    ("define W1 pattern SEQ(A a, B b) where -a.y = a.y and a.x - a.y < 0 within 5 s", [(0, 1)]),
    ("define W1 pattern SEQ(A a, B b) where 9223372036854775807 + b.y < 0 within 5 s", [(0, 1)]),
    ("define W1 pattern SEQ(A a, B b) where 9223372036854775807 + 1 < 0 within 5 s", [(0, 1)]),
    ("define W2 from D() and last A() within 5 s from D and each B(x + A.x < 0) within 5 s from D",
     [(3, 0, 1)]),
    # C.x + B.x = 2^63 - 1 + 2^62 wraps to a negative number: C blocks B
    ("define W3 from D() and each B() within 5 s from D and not C(x + B.x < 0) within 5 s from D", []),
    ("define W3 from D() and each B() within 5 s from D and not C(x + B.x > 0) within 5 s from D",
     [(3, 1)]),
])
def test_integer_arithmetic_wraps_around(backend, rule, expected):
    assert ids(_BIG, rule, backend) == expected


def test_integer_return_values_wrap_around(backend):
    rule = "define W4(z: int, m: int) pattern SEQ(A a, B b) within 5 s return z := a.x + b.x, m := -a.y"
    assert rows(cep_gpu.detect(_BIG, rule, backend=backend), "z", "m") == [("W4", 2.0, (0, 1), -(2**63), -(2**63))]


def test_input_events_of_a_composite_type_are_read_like_composite_ones(backend):
    # docs/language.md, Composite events: Q@0 (0), P@1 (1), V@2 (2), an input Touch@3 (3).
    # Touch at V@2 binds P@1: (2, 1). Up reads Touch: the detected one at 2 binds Q@0 ([-3, 2)),
    # and the input one at 3 binds Q@0 too ([-2, 3)); the input Touch is no output row itself.
    rules = """define Touch from V() and each P() within 5 s from V
define Up from Touch() and each Q() within 5 s from Touch"""
    ev = E(("Q", 0), ("P", 1), ("V", 2), ("Touch", 3))
    touch = composite_ids("Touch", np.array([[2, 1]], np.int64))[0]
    out = cep_gpu.detect(ev, rules, backend=backend)
    assert rows(out) == [("Touch", 2, (2, 1)), ("Up", 2, (int(touch), 0)), ("Up", 3, (3, 0))]
