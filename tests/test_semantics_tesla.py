"""Semantics, hand-worked: TESLA rules: policies with parameters, windows, negations, aggregates, consumption, hierarchies, nulls.

How the cases are written (worked out by hand first, every backend): tests/semantics_cases.py.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from conftest import id_tuples
from semantics_cases import TESLA_AGG_EVENTS, E, ids, rows

import cep_gpu
from cep_gpu.detect import composite_ids
from cep_gpu.museum import MUSEUM_RULES

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


# A parameter's binding `attr = $p` names `attr`: an event lacking it (null, NaN, or no such
# column for its type) fails that predicate (DESIGN 3.3), whatever later uses $p. Before, the
# binding compiled to no condition at all, so such an event passed and $p was null: a later
# `C(k = $p)` then failed (no harm), but a $p used only in `where`, a negation or an aggregate let
# the composite event through, and a `last` could choose the event lacking the attribute.

PARAM_RULES = """
define OnlyWhere(k: int) from T(k = $k) where k = $k

define InNegation from T(k = $k) and not N(k = $k) within 5 s from T

define InCount from T(k = $k) and n = Count(N(k = $k) within 5 s from T) = 0

define LastBinds(k: int) from T() and last B(k = $k) within 10 s from T
    and each C(k = $k) within 10 s from T where k = $k
"""


def test_tesla_parameter_binding_fails_events_lacking_the_attribute(backend):
    # C@1 k1 (0), B@2 k1 (1), B@3 k null (2), T@5 k null (3), T@6 k2 (4), T@7 no k (5: NaN).
    # OnlyWhere / InNegation / InCount: T3 and T5 lack k and fail T(k = $k); T4 (k2) matches each
    #   (no N at all: the negation holds, the count is 0).
    # LastBinds: T() has no k condition, so every T terminates; B2 lacks k and fails B(k = $k), so
    #   `last` takes B1 (k1), and C0 (k1) joins: (T, B1, C0) for T3, T4 and T5 alike.
    ev = E(
        ("C", 1, {"k": 1}), ("B", 2, {"k": 1}), ("B", 3, {"k": None}), ("T", 5, {"k": None}),
        ("T", 6, {"k": 2}), ("T", 7),
    )
    out = cep_gpu.detect(ev, PARAM_RULES, backend=backend)
    assert rows(out, "k") == [
        ("LastBinds", 5.0, (3, 1, 0), 1),
        ("InCount", 6.0, (4,), None), ("InNegation", 6.0, (4,), None),
        ("LastBinds", 6.0, (4, 1, 0), 1), ("OnlyWhere", 6.0, (4,), 2),
        ("LastBinds", 7.0, (5, 1, 0), 1),
    ]


def test_tesla_theft_with_a_vibration_lacking_its_room(backend):
    # The chapter's R2: Vibration(room=$r ...) names room; a vibration without one is no Theft,
    # although no StaffAt(room=$r) can be found for it.
    rule = cep_gpu.parse_rules(MUSEUM_RULES)[1]
    ev = E(
        ("PeopleNear", 0, {"painting": "P"}),
        ("Vibration", 1, {"room": None, "painting": "P", "value": 5.0}),
        ("Vibration", 2, {"room": "R1", "painting": "P", "value": 5.0}),
    )
    assert ids(ev, rule, backend) == [(2, 0)]


def test_tesla_parameter_on_an_attribute_no_event_has_is_a_schema_error(backend):
    with pytest.raises(cep_gpu.RuleError, match="'p'"):
        cep_gpu.detect(E(("B", 0, {"q": 1}), ("A", 1, {"q": 2})),
                       "define R from A(p = $p) and each B() within 5 s from A", backend=backend)
