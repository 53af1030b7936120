"""Kleene closure ``KL(T b)`` in SEQ patterns (issue 19): language, reference semantics (hand-worked
cases), the output layout, the max_matches limit, and differential tests of the CPU CDP backend,
``auto`` and the streaming Engine against the reference matcher."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from strategies import event_streams

import cep_gpu
import cep_gpu.kleene
from cep_gpu.engine import composite_records
from cep_gpu.errors import MatchLimitError, RuleError, RuleSyntaxError, UnsupportedFeatureError
from cep_gpu.model import NEXT, SELF, Attr, Compare

KLEENE_BACKENDS = ("reference", "cpu", "auto", "aip", "gpu-host")


def records(events, rule, backend="reference", **kw):
    return composite_records(cep_gpu.detect(events, rule, backend=backend, **kw))


def ids_of(recs):
    return [(r["ts"], r["ids"], tuple(r["id_counts"])) for r in recs]


def stream(*events):
    """(type, ts, **attributes) tuples -> a DataFrame (ids are row positions)."""
    rows = [{"type": t, "ts": float(ts), **attrs} for t, ts, attrs in events]
    return pd.DataFrame(rows)


# ------------------------------------------------------------------------------------ language


def test_parse_bounds_policy_and_conditions():
    r = cep_gpu.parse_rule(
        "define R pattern SEQ(A a, KL(B b)[2..5], C c) "
        "where b.v > a.v and b[i].v < b[i+1].v and count(b) >= 2 within 10 s select greedy"
    )
    b = r.predicates[1]
    assert (b.kleene.min_size, b.kleene.max_size, b.kleene.greedy, b.kleene.after) == (2, 5, True, 0)
    assert b.kleene.conditions == (Compare(">", Attr(SELF, "v"), Attr(0, "v")),)
    assert b.kleene.consecutive == (Compare("<", Attr(SELF, "v"), Attr(NEXT, "v")),)
    assert r.aggregates[0].function == "count" and r.aggregates[0].kleene == 1
    # plain positions from the last backwards, then the Kleene one; a's "before" skips over b
    assert r.plans[0].order == (2, 0, 1)
    assert r.predicates[0].before == 2
    assert r.kleene_positions == (1,)


def test_parse_defaults_and_open_bound():
    r = cep_gpu.parse_rule("define R pattern SEQ(KL(B)[3..], C c) within 5 s")
    k = r.predicates[0].kleene
    assert (k.min_size, k.max_size, k.greedy, k.after) == (3, None, False, None)
    assert r.predicates[0].alias == "B"


def test_same_aggregate_is_computed_once():
    r = cep_gpu.parse_rule(
        "define R pattern SEQ(A a, KL(B b), C c) where sum(b.v) > 1 within 5 s return t := sum(b.v)"
    )
    assert len(r.aggregates) == 1


@pytest.mark.parametrize(
    "text, message, column",
    [
        ("define R pattern SEQ(A a, KL(B b)) within 5 s", "cannot be the last position", 27),
        ("define R pattern SEQ(A a, KL(B b), KL(C c), D d) within 5 s", "next to each other", 36),
        ("define R pattern SEQ(A a, KL(B b)[0..3], C c) within 5 s", "at least 1", 34),
        ("define R pattern SEQ(A a, KL(B b)[5..2], C c) within 5 s", "upper bound is below", 34),
        ("define R pattern SEQ(A a, KL(B b)[1.5..2], C c) within 5 s", "whole number", 35),
        ("define R pattern SEQ(A a, KL(B b), C c) within 5 s select last", "select last", 52),
        ("define R pattern SEQ(A a, C c) within 5 s select greedy", "has none", 43),
        ("define R pattern AND(A a, KL(B b), C c) within 5 s", "only supported inside SEQ", 27),
        ("define R pattern SEQ(A a, KL(B b), C c) where count(b.v) > 1 within 5 s", "count takes", 47),
        ("define R pattern SEQ(A a, KL(B b), C c) where sum(b) > 1 within 5 s", "needs an attribute", 47),
        ("define R pattern SEQ(A a, KL(B b), C c) where sum(a.v) > 1 within 5 s", "not one", 51),
        ("define R pattern SEQ(A a, KL(B b), C c) where med(b.v) > 1 within 5 s", "unknown function", 47),
        ("define R pattern SEQ(A a, KL(B b), C c) within 5 s return v := b.v", "return an aggregate", 64),
        ("define R pattern SEQ(A a, NOT(X x), KL(B b), C c) where x.v = b.v within 5 s", "NOT condition", 57),
        # an aggregate over a set in a NOT condition (was a raw ValueError on every backend)
        ("define R pattern SEQ(A a, KL(B b), C c, NOT(D n)) where n.x < sum(b.x) within 5 s",
         "NOT condition may not read an aggregate", 57),
        ("define R pattern SEQ(A a, NOT(D n), KL(B b), C c) where a.x > 1 and (n.ts - a.ts < 2 or count(b) > 3) "
         "within 5 s", "NOT condition may not read an aggregate", 70),
        ("define R pattern SEQ(A a, KL(B b), C c) where b.v < b[i+1].v within 5 s", "b[i]", 47),
        ("define R pattern SEQ(A a, KL(B b), C c) where b[i].v < b[i+2].v within 5 s", "consecutive", 56),
        # b[i-1] with b[i+1] is two apart too (it was read as b[i] with b[i+1], or crashed)
        ("define R pattern SEQ(A a, KL(B b), C c) where b[i-1].v < b[i+1].v within 5 s", "two apart", 58),
        ("define R pattern SEQ(A a, KL(B b), C c) where b[i-1].v + b[i+1].v < b[i].v * 2 within 5 s",
         "two apart", 58),
        ("define R pattern SEQ(A a, KL(B b), C c) where b.v > avg(b.v) within 5 s", "mix", 47),
        ("define R pattern SEQ(A a, KL(B b), C c) where min(b.ts) > 1 within 5 s", "timestamps", 47),
    ],
)
def test_rule_errors_name_the_spot(text, message, column):
    with pytest.raises(RuleError) as err:
        cep_gpu.parse_rule(text)
    assert message in str(err.value)
    assert err.value.line == 1 and err.value.column == column


def test_kleene_is_not_tesla_syntax():
    with pytest.raises(RuleSyntaxError) as err:
        cep_gpu.parse_rule("define R from C() and each KL(B()) within 5 s from C")
    assert err.value.line == 1
    with pytest.raises(RuleError, match="only for Kleene positions"):
        cep_gpu.parse_rule("define R from C() as c where n = count(c)")


def test_attribute_named_id_counts_is_reserved():
    with pytest.raises(RuleError, match="reserved"):
        cep_gpu.parse_rule("define R pattern SEQ(A a, KL(B b), C c) within 5 s return id_counts := count(b)")


# ------------------------------------------------------------------------------------ hand-worked


def _rising_stream():
    # one stock's price at t = 1..5 (10, 11, 13, 12, 14); another stock's event in between
    return stream(
        ("S", 1, {"sym": "G", "p": 10.0}), ("S", 2, {"sym": "G", "p": 11.0}),
        ("S", 3, {"sym": "G", "p": 13.0}), ("S", 3.5, {"sym": "M", "p": 0.0}),
        ("S", 4, {"sym": "G", "p": 12.0}), ("S", 5, {"sym": "G", "p": 14.0}),
    )


RISING = """define Rise(n: int, top: float)
pattern SEQ(S a, KL(S b)[2..], S c)
where a.sym = 'G' and c.sym = 'G' and b.sym = 'G' and b[i].p < b[i+1].p
within 10 s {select}
return n := count(b), top := max(b.p)"""


@pytest.mark.parametrize("backend", KLEENE_BACKENDS)
def test_rising_run_each(backend):
    # strictly between a and c, every rising subset of size >= 2 of the G events:
    #   a@1, c@5: {11, 13}, {11, 12} ({13, 12} falls);  a@1, c@4: {11, 13};  a@2, c@5: {13, 12} falls
    got = records(_rising_stream(), RISING.format(select=""), backend)
    assert ids_of(got) == [
        (4.0, (0, 1, 2, 4), (1, 2, 1)),
        (5.0, (0, 1, 2, 5), (1, 2, 1)),
        (5.0, (0, 1, 4, 5), (1, 2, 1)),
    ]
    assert [(r["n"], r["top"]) for r in got] == [(2, 13.0), (2, 13.0), (2, 12.0)]


@pytest.mark.parametrize("backend", KLEENE_BACKENDS)
def test_rising_run_greedy(backend):
    # greedy: the set is every G event between a and c (the M event fails b.sym = 'G'), and it
    # must be rising as a whole: only a@1, c@4 with {11, 13}
    got = records(_rising_stream(), RISING.format(select="select greedy"), backend)
    assert ids_of(got) == [(4.0, (0, 1, 2, 4), (1, 2, 1))]


def _four_bs():
    return stream(("A", 1, {}), *[("B", t, {"v": float(t)}) for t in (2, 3, 4, 5)], ("C", 6, {}))


@pytest.mark.parametrize("backend", KLEENE_BACKENDS)
@pytest.mark.parametrize("bounds, expected", [("", 15), ("[2..3]", 10), ("[4..4]", 1), ("[3..]", 5), ("[1..1]", 4)])
def test_bounded_sizes(backend, bounds, expected):
    text = f"define R pattern SEQ(A a, KL(B b){bounds}, C c) within 10 s"
    got = records(_four_bs(), text, backend)
    assert len(got) == expected
    lo, hi = {"": (1, 4), "[2..3]": (2, 3), "[4..4]": (4, 4), "[3..]": (3, 4), "[1..1]": (1, 1)}[bounds]
    assert all(lo <= r["id_counts"][1] <= hi for r in got)
    assert all(len(r["ids"]) == sum(r["id_counts"]) for r in got)


@pytest.mark.parametrize("backend", KLEENE_BACKENDS)
def test_greedy_takes_the_whole_span_per_binding(backend):
    # two A's: one set per (a, c) pair, every B strictly between them
    ev = stream(("A", 1, {}), ("B", 2, {"v": 1.0}), ("A", 3, {}), ("B", 4, {"v": 2.0}), ("C", 5, {}))
    got = records(ev, "define R(s: float) pattern SEQ(A a, KL(B b), C c) within 10 s select greedy "
                      "return s := sum(b.v)", backend)
    assert [(r["ids"], r["s"]) for r in got] == [((0, 1, 3, 4), 3.0), ((2, 3, 4), 2.0)]


@pytest.mark.parametrize("backend", KLEENE_BACKENDS)
def test_negations_around_kleene(backend):
    ev = stream(("A", 1, {}), ("B", 2, {}), ("X", 3, {}), ("B", 4, {}), ("C", 5, {}))
    before = "define R pattern SEQ(A a, NOT(X x), KL(B b), C c) within 10 s"
    after = "define R pattern SEQ(A a, KL(B b), NOT(X x), C c) within 10 s"
    # NOT before b: none between a and b's FIRST element; after b: none between its LAST and c
    assert [r["ids"] for r in records(ev, before, backend)] == [(0, 1, 3, 4), (0, 1, 4)]
    assert [r["ids"] for r in records(ev, after, backend)] == [(0, 1, 3, 4), (0, 3, 4)]
    leading = "define R pattern SEQ(NOT(X x), KL(B b), C c) within 10 s"
    # leading NOT: none in [c - W, first element): {B@2} and {B@2, B@4}, not {B@4}
    assert [r["ids"] for r in records(ev, leading, backend)] == [(1, 3, 4), (1, 4)]


@pytest.mark.parametrize("backend", KLEENE_BACKENDS)
def test_aggregates_in_where_and_return(backend):
    text = """define R(n: int, s: float, m: float, lo: float, hi: float)
    pattern SEQ(A a, KL(B b), C c) where sum(b.v) >= 7 and count(b) < 4 within 10 s
    return n := count(b), s := sum(b.v), m := avg(b.v), lo := min(b.v), hi := max(b.v)"""
    got = records(_four_bs(), text, backend)
    # subsets of {2, 3, 4, 5} with sum >= 7 and size < 4
    sets = [(2, 5), (3, 4), (3, 5), (4, 5), (2, 3, 4), (2, 3, 5), (2, 4, 5), (3, 4, 5)]
    assert sorted(tuple(int(x) + 1 for x in r["ids"][1:-1]) for r in got) == sorted(sets)
    for r in got:
        vals = [float(x + 1) for x in r["ids"][1:-1]]
        assert (r["n"], r["s"], r["m"], r["lo"], r["hi"]) == (
            len(vals), sum(vals), sum(vals) / len(vals), min(vals), max(vals))


@pytest.mark.parametrize("backend", KLEENE_BACKENDS)
def test_missing_values_fail_elements_and_are_skipped_by_aggregates(backend):
    ev = stream(("A", 1, {}), ("B", 2, {"v": 1.0}), ("B", 3, {"v": np.nan}), ("C", 4, {}))
    got = records(ev, "define R(n: int, s: float) pattern SEQ(A a, KL(B b), C c) within 10 s "
                      "select greedy return n := count(b), s := avg(b.v)", backend)
    assert [(r["n"], r["s"]) for r in got] == [(2, 1.0)]
    got = records(ev, "define R pattern SEQ(A a, KL(B b), C c) where b.v > 0 within 10 s select greedy", backend)
    assert [r["ids"] for r in got] == [(0, 1, 3)]


@pytest.mark.parametrize("backend", KLEENE_BACKENDS)
def test_kleene_first_is_bounded_by_the_window(backend):
    ev = stream(("B", 1, {}), ("B", 3, {}), ("B", 4, {}), ("C", 5, {}))
    got = records(ev, "define R pattern SEQ(KL(B b), C c) within 2 s select greedy", backend)
    assert [r["ids"] for r in got] == [(1, 2, 3)]  # B@1 is outside [5 - 2, 5)


def test_output_layout_and_mixed_rules():
    ev = _four_bs()
    text = ("define K pattern SEQ(A a, KL(B b)[4..4], C c) within 10 s\n\n"
            "define P pattern SEQ(A a, C c) within 10 s")
    out = cep_gpu.detect(ev, text, backend="reference")
    assert list(out.columns[:4]) == ["rule", "ts", "ids", "id_counts"]
    assert [tuple(x) for x in out["ids"]] == [(0, 1, 2, 3, 4, 5), (0, 5)]
    assert [list(x) for x in out["id_counts"]] == [[1, 4, 1], [1, 1]]
    table = cep_gpu.detect(ev, text, backend="cpu", output="arrow")
    assert table.column("id_counts").to_pylist() == [[1, 4, 1], [1, 1]]
    assert cep_gpu.detect(ev, text, backend="cpu", output="count") == {"K": 1, "P": 1}
    # no Kleene rule: no id_counts column
    assert "id_counts" not in cep_gpu.detect(ev, "define P pattern SEQ(A a, C c) within 10 s").columns


def test_composite_kleene_events_feed_other_rules():
    ev = _four_bs()
    text = ("define K(n: int) pattern SEQ(A a, KL(B b)[4..4], C c) within 10 s return n := count(b)\n\n"
            "define Big pattern SEQ(K k) where k.n = 4")
    for backend in KLEENE_BACKENDS:
        out = records(ev, text, backend)
        assert [r["rule"] for r in out] == ["Big", "K"]


@pytest.mark.parametrize("backend", KLEENE_BACKENDS)
def test_matches_with_equal_flat_ids_are_distinct_composite_events(backend):
    # x = {A0}, y = A1, z = {A2, A3} and x = {A0, A1}, y = A2, z = {A3} list the same flat ids
    # [0, 1, 2, 3, 4]; only id_counts tells them apart. Their composite ids hashed the flat ids
    # alone and were equal: a rule reading R saw two events with one id.
    ev = stream(*[("A", t, {}) for t in (1, 2, 3, 4)], ("C", 5, {}))
    text = (
        "define R(n: int) pattern SEQ(KL(A x), A y, KL(A z), C c) within 10 s return n := count(x)"
        "\n\ndefine Q(m: int) pattern SEQ(R r) return m := r.n"
    )
    got = records(ev, text, backend)
    split = [r for r in got if r["rule"] == "R" and r["ids"] == (0, 1, 2, 3, 4)]
    assert [(tuple(r["id_counts"]), r["n"]) for r in split] == [((1, 1, 2, 1), 1), ((2, 1, 1, 1), 2)]
    q = [r["ids"][0] for r in got if r["rule"] == "Q"]
    assert len(q) == 6 and len(set(q)) == 6
    eng = cep_gpu.Engine(text, backend=backend)
    streamed = composite_records(eng.publish(ev)) + composite_records(eng.flush())
    assert sorted(r["ids"][0] for r in streamed if r["rule"] == "Q") == sorted(q)


@pytest.mark.parametrize("backend", KLEENE_BACKENDS)
def test_a_high_lower_bound_does_not_walk_every_small_subset(backend):
    # 64 elements, sets of 62 to 64 of them: 2081 sets (within max_matches). The CPU kernel's
    # depth-first walk used to visit every prefix smaller than the lower bound (about 2^64 of
    # them) before reaching a set that big: the call never returned.
    ev = stream(("A", 0, {}), *[("B", 1 + i / 100, {"v": float(i)}) for i in range(64)], ("C", 5, {}))
    text = (
        "define R(n: int, s: float) pattern SEQ(A a, KL(B b)[62..], C c) within 60 s "
        "return n := count(b), s := sum(b.v)"
    )
    got = records(ev, text, backend)
    assert len(got) == math.comb(64, 62) + math.comb(64, 63) + 1
    assert sum(r["n"] == 64 for r in got) == 1 and sum(r["n"] == 63 for r in got) == 64
    assert max(r["s"] for r in got) == sum(range(64))
    assert all(len(r["ids"]) == 2 + r["n"] for r in got)


# Hand-worked from docs/language.md ("Kleene closure", Semantics): (events, rule, expected ids).
# Events are (type, ts, attributes); ids are row positions unless an "id" attribute is given.
SEQ_ABC = "define R pattern SEQ(A a, KL(B b){b}, C c) {w}within 10 s {s}"
HAND_WORKED = {
    # two B's at one timestamp may share a set, listed in (ts, id) order
    "equal_ts_inside_a_set": (
        [("A", 1, {}), ("B", 2, {}), ("B", 2, {}), ("C", 3, {})],
        SEQ_ABC.format(b="", w="", s=""),
        [(0, 1, 2, 3), (0, 1, 3), (0, 2, 3)],
    ),
    # elements lie strictly between the neighbours: a B at a's or c's timestamp is no element
    "equal_ts_at_the_neighbours": (
        [("A", 1, {}), ("B", 1, {}), ("B", 2, {}), ("B", 3, {}), ("C", 3, {})],
        SEQ_ABC.format(b="", w="", s=""),
        [(0, 2, 4)],
    ),
    # consecutive conditions see equal timestamps in id order (ids 3 before 9), not row order
    "consecutive_in_id_order_at_a_tie": (
        [("A", 1, {"id": 10}), ("B", 2, {"id": 9, "v": 1}), ("B", 2, {"id": 3, "v": 2}),
         ("B", 3, {"id": 5, "v": 0}), ("C", 4, {"id": 11})],
        SEQ_ABC.format(b="[2..]", w="where b[i].v > b[i+1].v ", s=""),
        [(10, 3, 5, 11), (10, 3, 9, 5, 11), (10, 3, 9, 11), (10, 9, 5, 11)],
    ),
    # b[i-1]/b[i] is the same pair as b[i]/b[i+1]; b[i].ts < b[i+1].ts forbids ties in a set
    "previous_index_and_strict_ts": (
        [("A", 1, {}), ("B", 2, {"v": 1}), ("B", 2, {"v": 2}), ("B", 3, {"v": 0}), ("C", 4, {})],
        SEQ_ABC.format(b="[2..]", w="where b[i-1].v > b[i].v and b[i-1].ts < b[i].ts ", s=""),
        [(0, 1, 3, 4), (0, 2, 3, 4)],
    ),
    # one index alone, whatever its offset, is a condition on every element (first one included)
    "one_index_alone_is_per_element": (
        [("A", 1, {}), ("B", 2, {"v": 1}), ("B", 3, {"v": 9}), ("C", 4, {})],
        SEQ_ABC.format(b="", w="where b[i+1].v > 5 ", s=""),
        [(0, 2, 3)],
    ),
    # a missing value in a consecutive condition rejects the sets where that pair is consecutive
    "missing_value_in_a_pair": (
        [("A", 1, {}), ("B", 2, {"v": 1.0}), ("B", 3, {"v": np.nan}), ("B", 4, {"v": 3.0}),
         ("C", 5, {})],
        SEQ_ABC.format(b="", w="where b[i].v < b[i+1].v ", s=""),
        [(0, 1, 3, 4), (0, 1, 4), (0, 2, 4), (0, 3, 4)],
    ),
    # greedy: the whole span or nothing (3 elements, above [1..2] / below [4..])
    "greedy_above_the_upper_bound": (
        [("A", 1, {}), ("B", 2, {}), ("B", 3, {}), ("B", 4, {}), ("C", 5, {})],
        SEQ_ABC.format(b="[1..2]", w="", s="select greedy"),
        [],
    ),
    "greedy_below_the_lower_bound": (
        [("A", 1, {}), ("B", 2, {}), ("B", 3, {}), ("B", 4, {}), ("C", 5, {})],
        SEQ_ABC.format(b="[4..]", w="", s="select greedy"),
        [],
    ),
    # a NOT next to a set is bounded by its nearest element, strictly: an X at that element's
    # timestamp is not between them
    "not_after_the_set_at_its_last_timestamp": (
        [("A", 1, {}), ("B", 2, {}), ("X", 2, {}), ("C", 3, {})],
        "define R pattern SEQ(A a, KL(B b), NOT(X x), C c) within 10 s",
        [(0, 1, 3)],
    ),
    "not_before_the_set_at_its_first_timestamp": (
        [("A", 1, {}), ("X", 2, {}), ("B", 2, {}), ("C", 3, {})],
        "define R pattern SEQ(A a, NOT(X x), KL(B b), C c) within 10 s",
        [(0, 2, 3)],
    ),
    # a trailing NOT after a leading set spans (ts(c), first element + W]: {B@0} and {B@0, B@2}
    # end at 5 (X@6 outside), {B@2} at 7 (X@6 inside)
    "trailing_not_after_a_leading_set": (
        [("B", 0, {}), ("B", 2, {}), ("C", 3, {}), ("X", 6, {})],
        "define R pattern SEQ(KL(B b), C c, NOT(X x)) within 5 s",
        [(0, 1, 2), (0, 2)],
    ),
    # a leading set before two plain positions is bounded by the window from the last one
    "leading_set_then_two_positions": (
        [("B", 0, {}), ("B", 1, {}), ("C", 2, {}), ("D", 4, {})],
        "define R pattern SEQ(KL(B b), C c, D d) within 3 s",
        [(1, 2, 3)],
    ),
    # neighbours of the set's own type: B a, B c around the set, every pair of them
    "neighbours_of_the_same_type": (
        [("B", 1, {}), ("B", 2, {}), ("B", 3, {}), ("B", 4, {})],
        "define R pattern SEQ(B a, KL(B b), B c) within 10 s",
        [(0, 1, 2), (0, 1, 2, 3), (0, 1, 3), (0, 2, 3), (1, 2, 3)],
    ),
}


@pytest.mark.parametrize("backend", KLEENE_BACKENDS)
@pytest.mark.parametrize("case", sorted(HAND_WORKED))
def test_hand_worked_semantics(backend, case):
    events, text, expected = HAND_WORKED[case]
    ev = stream(*events)
    if "id" in ev:
        ev["id"] = ev["id"].astype(np.int64)
    assert [r["ids"] for r in records(ev, text, backend)] == expected
    eng = cep_gpu.Engine(text, backend=backend)
    got = []
    for i in range(len(ev)):  # one event per publish
        got += composite_records(eng.publish(ev.iloc[i : i + 1]))
    got += composite_records(eng.flush())
    assert sorted(r["ids"] for r in got) == sorted(expected)


@pytest.mark.parametrize("backend", ["cpu", "reference", "aip"])
@pytest.mark.parametrize("pattern", ["KL(B b), C c, NOT(D d)", "B b, C c, NOT(D d)"])
def test_a_trailing_span_past_the_int64_range_holds_until_flush(backend, pattern):
    # (ts(c), ts(b1) + 1 h] ends past 2262: saturated, no later event can settle it. The Engine
    # added the delay in int64 and wrapped around, so it reported the match at once, and a D
    # inside the span published next could not withdraw it (batch: no match)
    top = np.iinfo(np.int64).max
    ev = pd.DataFrame({"type": ["B", "C", "D"], "ts": np.array([top - 10, top - 5, top - 1])})
    text = f"define R pattern SEQ({pattern}) within 1 h"
    assert len(cep_gpu.detect(ev, text, backend=backend, time_unit="ns")) == 0
    eng = cep_gpu.Engine(text, backend=backend, time_unit="ns")
    assert len(eng.publish(ev.iloc[:2])) == 0
    assert len(eng.publish(ev.iloc[2:])) == 0 and len(eng.flush()) == 0
    eng = cep_gpu.Engine(text, backend=backend, time_unit="ns")
    assert len(eng.publish(ev.iloc[:2])) == 0 and len(eng.flush()) == 1


# ------------------------------------------------------------------------------------ output limit


@pytest.mark.parametrize("backend", KLEENE_BACKENDS)
def test_max_matches_error_names_rule_estimate_and_bounds(backend):
    ev = stream(("A", 0, {}), *[("B", t, {}) for t in range(1, 26)], ("C", 30, {}))
    with pytest.raises(MatchLimitError) as err:
        cep_gpu.detect(ev, "define Many pattern SEQ(A a, KL(B b), C c) within 60 s", backend=backend)
    msg = str(err.value)
    assert "'Many'" in msg and "3.36e+07" in msg and "max_matches=10000000" in msg
    assert "KL(B b)[1..4]" in msg and "select greedy" in msg
    # bounded, greedy, or a higher limit: no error
    assert len(records(ev, "define Few pattern SEQ(A a, KL(B b)[1..2], C c) within 60 s", backend)) == 325
    assert len(records(ev, "define G pattern SEQ(A a, KL(B b), C c) within 60 s select greedy", backend)) == 1


@pytest.mark.parametrize("backend", KLEENE_BACKENDS)
def test_max_matches_argument_and_context(backend):
    ev = _four_bs()
    text = "define R pattern SEQ(A a, KL(B b), C c) within 10 s"
    with pytest.raises(MatchLimitError, match="about 15 matches"):
        cep_gpu.detect(ev, text, backend=backend, max_matches=14)
    assert len(cep_gpu.detect(ev, text, backend=backend, max_matches=15)) == 15
    with cep_gpu.kleene.limit(3), pytest.raises(MatchLimitError):
        cep_gpu.detect(ev, text, backend=backend)


@pytest.mark.parametrize("backend", KLEENE_BACKENDS)
def test_max_matches_past_the_float_range_is_a_match_limit_error(backend):
    # 1100 elements: 2^1100 - 1 sets, past float64's range; the reference's exact count used to
    # escape as a raw OverflowError while formatting the message, the others said "about inf"
    ev = stream(("A", 0, {}), *[("B", 1 + i / 1000, {}) for i in range(1100)], ("C", 5, {}))
    with pytest.raises(MatchLimitError, match=r"more than 1e\+308 matches"):
        cep_gpu.detect(ev, "define Many pattern SEQ(A a, KL(B b), C c) within 60 s", backend=backend)


def test_engine_limit_and_bad_limit():
    with pytest.raises(cep_gpu.errors.ArgumentError):
        with cep_gpu.kleene.limit(0):
            pass
    eng = cep_gpu.Engine("define R pattern SEQ(A a, KL(B b), C c) within 10 s", backend="cpu")
    with cep_gpu.kleene.limit(3), pytest.raises(MatchLimitError):
        eng.publish(_four_bs())


def test_limit_takes_numpy_integers_and_refuses_the_rest():
    # a NumPy integer (a count computed with NumPy) is an int; it was refused as "not an int"
    text = "define R pattern SEQ(A a, KL(B b), C c) within 10 s"
    assert len(cep_gpu.detect(_four_bs(), text, backend="cpu", max_matches=np.int64(15))) == 15
    with pytest.raises(MatchLimitError, match="max_matches=14"):
        cep_gpu.detect(_four_bs(), text, backend="cpu", max_matches=np.int32(14))
    for bad in (0, -1, True, np.bool_(True), 1.5, np.float64(3.0), "5"):
        with pytest.raises(cep_gpu.errors.ArgumentError, match="positive int"):
            cep_gpu.detect(_four_bs(), text, backend="cpu", max_matches=bad)


# ------------------------------------------------------------------------------------ backends


def test_a_combiner_without_kleene_support_refuses_clearly():
    from cep_gpu.cdp import CDPBackend

    class Plain:  # a combiner of a backend that does not evaluate Kleene positions
        name = "plain"

    rule = cep_gpu.parse_rule("define R pattern SEQ(A a, KL(B b), C c) within 10 s")
    table = cep_gpu.events.EventTable.from_pandas(_four_bs(), time_unit="s")
    with pytest.raises(UnsupportedFeatureError) as err:
        CDPBackend(Plain(), "plain").match(rule, table)
    msg = str(err.value)
    assert "Kleene closure" in msg and "'plain'" in msg and "reference, cpu, auto, aip, gpu" in msg


@st.composite
def kleene_rules(draw) -> str:
    """A SEQ pattern with one Kleene position (not last), optional NOTs next to it, per-element,
    consecutive and aggregate conditions, bounds, each or greedy, aggregates in return."""
    n_before = draw(st.integers(0, 1))
    # mostly A before, B in the set, C after (so that most rules match), sometimes any type
    pick = lambda usual: draw(st.sampled_from([usual, usual, usual, "A", "B", "C"]))  # noqa: E731
    plain = [f"{pick('A')} p{i}" for i in range(n_before)]
    after = [f"{pick('C')} q{i}" for i in range(draw(st.sampled_from([1, 1, 2])))]
    lo = draw(st.integers(1, 3))
    hi = draw(st.one_of(st.none(), st.integers(lo, 4)))
    bounds = draw(st.sampled_from(["", f"[{lo}..]" if hi is None else f"[{lo}..{hi}]"]))
    items = plain + [f"KL({pick('B')} b){bounds}"] + after
    if draw(st.booleans()):
        items.insert(len(plain) + draw(st.sampled_from([0, 1])), "NOT(D x)")
    conds = []
    if draw(st.booleans()):
        conds.append(draw(st.sampled_from(["b.x != 2", "b.y < 3.0", "b.s = 'u'", "b.x >= q0.x"])))
    if draw(st.booleans()):
        conds.append(draw(st.sampled_from(["b[i].y <= b[i+1].y", "b[i].x != b[i+1].x", "b[i+1].ts - b[i].ts <= 2"])))
    if draw(st.booleans()):
        conds.append(draw(st.sampled_from(["count(b) != 2", "sum(b.x) >= 1", "avg(b.y) > 0.5", "max(b.x) > q0.x"])))
    if "NOT(D x)" in items and draw(st.booleans()):
        conds.append("x.x = 1")
    if draw(st.sampled_from([False, False, False, True])):  # a second Kleene position
        items += ["KL(B d)[1..2]", "C r"]
        if draw(st.booleans()):
            conds.append(draw(st.sampled_from(["count(d) <= count(b)", "d.x = b0.x"])).replace("b0", after[0].split()[1]))
    where = f"where {' and '.join(conds)} " if conds else ""
    window = draw(st.sampled_from([4, 6, 10]))
    select = draw(st.sampled_from(["", "select each", "select greedy"]))
    ret = draw(st.sampled_from(["", "return n := count(b), m := min(b.y)", "return t := sum(b.x) + q0.x"]))
    return f"define K pattern SEQ({', '.join(items)}) {where}within {window} s {select} {ret}"


@st.composite
def kleene_streams(draw) -> pd.DataFrame:
    """Streams where most Kleene rules match: mostly B events, timestamps mostly one second
    apart (some ties, some gaps), attributes with tiny domains and nulls as in event_streams."""
    base = draw(event_streams(max_events=14, min_events=6))
    n = len(base)
    gaps = draw(st.lists(st.sampled_from([1, 1, 1, 0, 2]), min_size=n, max_size=n))
    # a shuffled mix (hypothesis' lists repeat one value a lot): every type shows up
    kinds = draw(st.permutations(["A", "A", "B", "B", "B", "B", "C", "C", "C", "D", "B", "A", "C", "B"]))[:n]
    base["ts"] = np.cumsum(gaps).astype(np.int64)
    base["type"] = pd.Series(kinds, dtype=object)
    return base


KLEENE_STREAMS = kleene_streams()

SETTINGS = settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))


@SETTINGS
@given(kleene_rules(), KLEENE_STREAMS)
def test_cpu_auto_and_aip_equal_reference(text, events):
    expected = records(events, text, "reference")
    assert records(events, text, "cpu") == expected
    assert records(events, text, "auto") == expected
    assert records(events, text, "aip") == expected


@SETTINGS
@given(kleene_rules(), KLEENE_STREAMS, st.data())
def test_streaming_engine_equals_reference(text, events, data):
    expected = records(events, text, "reference")
    eng = cep_gpu.Engine(text, backend=data.draw(st.sampled_from(["cpu", "reference", "aip"])))
    got, i = [], 0
    while i < len(events):
        step = data.draw(st.integers(1, 4))
        got += composite_records(eng.publish(events.iloc[i:i + step]))
        i += step
    got += composite_records(eng.flush())
    key = lambda r: (r["ts"], r["ids"])  # noqa: E731
    assert sorted(got, key=key) == sorted(expected, key=key)


@st.composite
def kleene_rules_around(draw) -> str:
    """What kleene_rules leaves out: up to two plain positions before the set, a NOT anywhere
    (leading, trailing, or next to the set; a trailing NOT after a leading set spans to its first
    element + W), b[i-1] and one-index conditions, b.ts against other positions, set aggregates
    in arithmetic."""
    plain = [f"{draw(st.sampled_from(['A', 'A', 'B']))} p{i}" for i in range(draw(st.integers(0, 2)))]
    after = [f"{draw(st.sampled_from(['C', 'C', 'B']))} q{i}" for i in range(draw(st.integers(1, 2)))]
    lo = draw(st.integers(1, 3))
    hi = draw(st.one_of(st.none(), st.integers(lo, 4)))
    bounds = draw(st.sampled_from(["", f"[{lo}..]" if hi is None else f"[{lo}..{hi}]"]))
    items = [*plain, f"KL(B b){bounds}", *after]
    at = {"before": len(plain), "after": len(plain) + 1, "lead": 0, "trail": len(items)}
    where_not = draw(st.sampled_from(["none", "before", "after", "lead", "trail", "trail"]))
    conds = []
    if where_not != "none":
        items.insert(at[where_not], "NOT(D x)")
        if draw(st.booleans()):
            conds.append(draw(st.sampled_from(["x.x = 1", "x.y > q0.y", "x.s = 'u'"])))
    elements = ["b.x != 2", "b[i+1].x = 1", "b[i-1].y > 0", "b.ts - q0.ts > -3", "b.y < q0.y"]
    pairs = ["b[i-1].x != b[i].x", "b[k].ts < b[k+1].ts", "b[i].x + q0.x > b[i+1].x"]
    sets = ["min(b.y) = 0", "sum(b.y) / count(b) > 1", "max(b.x) - min(b.x) < 2"]
    for options in (elements, pairs, sets):
        if draw(st.booleans()):
            conds.append(draw(st.sampled_from(options)))
    where = f"where {' and '.join(conds)} " if conds else ""
    window = draw(st.sampled_from([2, 3, 4, 6]))
    select = draw(st.sampled_from(["", "select greedy"]))
    ret = draw(st.sampled_from(["", "return n := count(b), m := min(b.y), s := sum(b.y) + q0.x"]))
    return f"define K pattern SEQ({', '.join(items)}) {where}within {window} s {select} {ret}"


@settings(max_examples=20, deadline=None, suppress_health_check=list(HealthCheck))
@given(kleene_rules_around(), KLEENE_STREAMS, st.data())
def test_negations_anywhere_and_index_forms_equal_reference(text, events, data):
    expected = _outcome(events, text, "reference", 2000)
    backend = data.draw(st.sampled_from(["cpu", "aip", "gpu-host"]))
    assert _outcome(events, text, backend, 2000) == expected
    if expected == "over the limit":
        return
    eng = cep_gpu.Engine(text, backend=data.draw(st.sampled_from(["cpu", "reference", "aip"])))
    got, i = [], 0
    while i < len(events):
        step = data.draw(st.integers(1, 4))
        got += composite_records(eng.publish(events.iloc[i : i + step]))
        i += step
    got += composite_records(eng.flush())
    key = lambda r: (r["ts"], r["ids"], r["id_counts"])  # noqa: E731
    assert sorted(got, key=key) == sorted(expected, key=key)


@pytest.mark.parametrize("backend", KLEENE_BACKENDS)
def test_two_kleene_positions_and_a_condition_across_them(backend):
    ev = stream(("A", 1, {}), ("B", 2, {}), ("B", 3, {}), ("C", 4, {}), ("B", 5, {}), ("E", 6, {}))
    text = ("define R pattern SEQ(A a, KL(B b), C c, KL(B d), E e) where count(b) > count(d) "
            "within 10 s")
    got = records(ev, text, backend)
    # b is a non-empty subset of {B@2, B@3}, d = {B@5}: count(b) > 1 only for b = {B@2, B@3}
    assert ids_of(got) == [(6.0, (0, 1, 2, 3, 4, 5), (1, 2, 1, 1, 1))]


def test_cli_csv_output_and_explain(tmp_path):
    from cep_gpu.cli import main

    (tmp_path / "r.seq").write_text(
        "define R(n: int) pattern SEQ(A a, KL(B b)[1..2], C c) where b.v > 0 within 10 s "
        "return n := count(b)\n")
    (tmp_path / "e.csv").write_text("type,ts,v\nA,1,0\nB,2,1\nB,3,2\nC,4,0\n")
    out = tmp_path / "o.csv"
    assert main(["run", str(tmp_path / "r.seq"), str(tmp_path / "e.csv"), "--backend", "cpu",
                 "--out", str(out)]) == 0
    lines = out.read_text().splitlines()
    assert lines[0] == '"rule","ts","ids","id_counts","n"'
    assert '"R",4,"0 1 2 3","1 2 1",2' in lines
    rule = cep_gpu.parse_rule((tmp_path / "r.seq").read_text())
    text = cep_gpu.Engine(rule, backend="cpu").explain()
    assert "Kleene b[1..2] (each subset)" in text and "after a" in text


def test_bench_kleene_smoke():
    from cep_gpu.benchmarks import kleene as bench

    result = bench.run(windows=(100, 400), n_events=600, repeat=1, warmup=0)
    assert [(r["rule"], r["window_ms"]) for r in result["rows"]] == [
        ("greedy", 100), ("greedy", 400), ("each[1..2]", 100), ("each[1..2]", 400)]
    # the counts are the reference's
    ev = bench.events(600)
    for r in result["rows"]:
        text = bench.RULES[r["rule"]].format(win=r["window_ms"])
        want = cep_gpu.detect(ev, text, backend="reference", time_unit="ms", output="count")
        assert r["composite_events"] == sum(want.values())
    assert [r["composite_events"] for r in result["rows"]] == [0, 2, 0, 16]
    assert "| greedy | 100 | cpu |" in bench.markdown(result)


def _outcome(events, text, backend, limit):
    try:
        return records(events, text, backend, max_matches=limit)
    except MatchLimitError:
        return "over the limit"


@settings(max_examples=15, deadline=None, suppress_health_check=list(HealthCheck))
@given(kleene_rules(), KLEENE_STREAMS, st.integers(1, 12), st.sampled_from(["cpu", "aip", "gpu-host"]))
def test_limit_decision_equals_reference(text, events, limit, backend):
    # the estimate is the same on every backend: both raise, or both return the same rows
    assert _outcome(events, text, backend, limit) == _outcome(events, text, "reference", limit)


def test_aip_explains_and_traces_kleene_sets():
    from cep_gpu.aip import trace
    from cep_gpu.events import EventTable

    rule = cep_gpu.parse_rule("define R pattern SEQ(A a, KL(B b)[1..2], C c) within 10 s")
    assert "then Kleene set b from its span" in cep_gpu.Engine(rule, backend="aip").explain()
    ev = stream(("A", 1, {}), ("B", 2, {}), ("B", 3, {}), ("C", 4, {}))
    steps = trace(rule, EventTable.from_pandas(ev, time_unit="s"))
    assert sorted(steps[-1].composite) == [(0, 1, 2, 3), (0, 1, 3), (0, 2, 3)]
