"""Tests of the AIP backend (cep_gpu.aip): the chapter's worked example step by step (Figure 2),
the shape of the automaton models, and differential tests against the reference matcher (and the
CPU backend when it exists) on random rules and streams."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from strategies import event_streams, rules_and_streams, seq_rules, tesla_rules

import cep_gpu
from cep_gpu import aip
from cep_gpu.analysis import rule_order
from cep_gpu.backends import get_backend
from cep_gpu.errors import CepError
from cep_gpu.events import EventTable

R1 = """define Touch(room: string, painting: string)
from   Vibration(painting=$p and value>3.0) and
       {policy} PeopleNear(painting=$p) within 2 min. from Vibration
where  room=Vibration.room and painting=Vibration.painting"""


def figure2_events() -> pd.DataFrame:
    """The events of Figure 2 (times in minutes): P1@1, V1@2.5 (value too low), P2@3.5, P3@4, V2@4.5."""
    return pd.DataFrame({
        "type": ["PeopleNear", "Vibration", "PeopleNear", "PeopleNear", "Vibration"],
        "ts": [1.0, 2.5, 3.5, 4.0, 4.5],
        "id": [1, 2, 3, 4, 5],  # P1, V1, P2, P3, V2
        "painting": ["Mona Lisa"] * 5,
        "room": ["R1"] * 5,
        "value": [np.nan, 2.0, np.nan, np.nan, 5.0],
    })


def alive(step: aip.TraceStep) -> list[tuple[str, str, dict]]:
    return sorted((v.name, v.state, v.ids) for v in step.alive)


# -- the chapter's worked example ----------------------------------------------------------------


def test_figure1_automaton_model():
    auto = aip.compile_automaton(cep_gpu.parse_rule(R1.format(policy="each")))
    assert len(auto.models) == 1  # one sequence model: init -> P -> V (accepting)
    model = auto.models[0]
    assert model.order == (1, 0)
    assert [model.state_name(auto.rule, s) for s in range(3)] == ["init", "PeopleNear", "Vibration"]
    assert [t.accepting for t in model.transitions] == [False, True]
    # the window of PeopleNear is the time limit of the transition to V
    assert model.transitions[0].expiry == ((1, 120 * 10**9),)
    assert model.transitions[1].lower == ((1, 0, 120 * 10**9),)
    # painting=$p: a parameter constraint between the two states (the dashed line of Figure 1)
    assert model.transitions[1].fast == (aip.FastCompare("=", (1, "painting"), (0, "painting")),)


def test_shared_parameter_constrains_states_before_the_terminator():
    # k=$k on A, B and C compiles to A.k = C.k and B.k = C.k; their implied A.k = B.k is checked
    # when B arrives, so that (A, B) pairs with different k never become instances
    rule = cep_gpu.parse_rule(
        "define S from C(k=$k) and each B(k=$k) within 5 s from C and each A(k=$k) within 5 s from B"
    )
    (model,) = aip.compile_automaton(rule).models
    assert model.order == (2, 1, 0)
    assert model.transitions[1].fast == (aip.FastCompare("=", (1, "k"), (2, "k"), ("k",)),)
    ev = pd.DataFrame({"type": ["A", "A", "B", "C"], "ts": [0, 1, 2, 3], "k": [1, 2, 1, 1]})
    steps = aip.trace(rule, EventTable.from_pandas(ev))
    assert sorted((v.state, tuple(v.ids.values())) for v in steps[2].alive) == [
        ("A", (0,)), ("A", (1,)), ("B", (0, 2)),
    ]
    assert steps[3].composite == [(3, 2, 0)]


def test_figure2_step_by_step():
    rule = cep_gpu.parse_rule(R1.format(policy="each"))
    table = EventTable.from_pandas(figure2_events(), time_unit="min")
    steps = aip.trace(rule, table)
    assert [s.id for s in steps] == [1, 2, 3, 4, 5]
    p = "PeopleNear"
    # t=1: P1 clones Seq into Seq1, which advances to state P
    assert alive(steps[0]) == [("Seq1", p, {p: 1})]
    # t=2.5: V1's value is too low: discarded, nothing changes
    assert alive(steps[1]) == [("Seq1", p, {p: 1})]
    assert steps[1].accepted == [] and steps[1].composite == []
    # t=3.5: P2 creates Seq2; Seq1 is deleted (its time limit, 1 + 2 min, has passed)
    assert alive(steps[2]) == [("Seq2", p, {p: 3})]
    # t=4: P3 creates Seq3
    assert alive(steps[3]) == [("Seq2", p, {p: 3}), ("Seq3", p, {p: 4})]
    # t=4.5: V2 clones Seq2 and Seq3 into Seq21 and Seq31, which accept: P2-V2 and P3-V2
    assert sorted((v.name, v.state, v.ids) for v in steps[4].accepted) == [
        ("Seq21", "Vibration", {p: 3, "Vibration": 5}),
        ("Seq31", "Vibration", {p: 4, "Vibration": 5}),
    ]
    assert sorted(steps[4].composite) == [(5, 3), (5, 4)]
    # the accepting clones are gone; Seq2 and Seq3 wait for further vibrations
    assert alive(steps[4]) == [("Seq2", p, {p: 3}), ("Seq3", p, {p: 4})]


@pytest.mark.parametrize("policy, expected", [
    ("each", [(5, 3), (5, 4)]),
    ("last", [(5, 4)]),
    ("first", [(5, 3)]),
])
def test_figure2_policies(policy, expected):
    out = cep_gpu.detect(figure2_events(), R1.format(policy=policy), backend="aip", time_unit="min")
    assert [tuple(int(i) for i in ids) for ids in out["ids"]] == expected
    assert list(out["ts"]) == [4.5] * len(expected)


def test_columns_example():
    # Figure 4: V(painting B)@6.5 with P(B)@5 and P(A)@6 in the window: exactly one Touch, with P(B)
    ev = pd.DataFrame({
        "type": ["PeopleNear", "PeopleNear", "Vibration"],
        "ts": [5.0, 6.0, 6.5],
        "painting": ["B", "A", "B"],
        "room": ["r", "r", "r"],
        "value": [np.nan, np.nan, 4.0],
    })
    out = cep_gpu.detect(ev, R1.format(policy="each"), backend="aip", time_unit="min")
    assert [tuple(ids) for ids in out["ids"]] == [(2, 0)]


# -- automaton structure -------------------------------------------------------------------------


def test_tree_plan_gets_one_model_per_arrival_order():
    # B and C are both bound relative to T: either may arrive first
    rule = cep_gpu.parse_rule(
        "define R from T() and each B() within 5 s from T and each C() within 5 s from T"
    )
    auto = aip.compile_automaton(rule)
    assert sorted(m.order for m in auto.models) == [(1, 2, 0), (2, 1, 0)]
    # and a match whose B and C are the same event is accepted once (same_row by declaration order)
    ev = pd.DataFrame({"type": ["B", "T"], "ts": [1, 2]})
    same = cep_gpu.parse_rule(
        "define R from T() and each B() within 5 s from T and each B() as B2 within 5 s from T"
    )
    out = cep_gpu.detect(ev, same, backend="aip")
    assert [tuple(ids) for ids in out["ids"]] == [(1, 0, 0)]


def test_last_step_gets_a_sub_plan_model():
    rule = cep_gpu.parse_rule(
        "define R from C() and last B() within 5 s from C and each A() within 5 s from B"
    )
    auto = aip.compile_automaton(rule)
    assert sorted((m.depth, m.order) for m in auto.models) == [(1, (1, 0)), (2, (2, 1, 0))]
    # the latest B has no A before it: no backtracking to an earlier B
    ev = pd.DataFrame({"type": ["A", "B", "B", "C"], "ts": [1, 2, 3, 4]})
    ev.loc[2, "ts"] = 3
    out = cep_gpu.detect(ev, rule, backend="aip")
    ref = cep_gpu.detect(ev, rule, backend="reference")
    assert [tuple(i) for i in out["ids"]] == [tuple(i) for i in ref["ids"]] == [(3, 2, 0)]
    ev2 = pd.DataFrame({"type": ["B", "A", "B", "C"], "ts": [1, 2, 3, 4]})
    out2 = cep_gpu.detect(ev2, rule, backend="aip")
    assert [tuple(i) for i in out2["ids"]] == [(3, 2, 1)]


def test_instances_expire_but_initial_state_never_does():
    rule = cep_gpu.parse_rule("define R from B() and each A() within 2 s from B")
    ev = pd.DataFrame({"type": ["A", "A", "A", "B"], "ts": [0, 1, 10, 11]})
    steps = aip.trace(rule, EventTable.from_pandas(ev))
    assert [len(s.alive) for s in steps] == [1, 2, 1, 1]
    assert sorted(steps[3].composite) == [(3, 2)]


def test_trailing_not_waits_for_later_events():
    rule = cep_gpu.parse_rule("define S pattern SEQ(A a, B b, NOT(C c)) within 5 s")
    ev = pd.DataFrame({"type": ["A", "B", "C", "A", "B", "D"], "ts": [0, 1, 4, 10, 11, 30]})
    out = cep_gpu.detect(ev, rule, backend="aip")
    assert [tuple(i) for i in out["ids"]] == [(3, 4)]  # the first match is killed by C@4


def test_supersede_deletes_older_last_candidates(monkeypatch):
    monkeypatch.setattr(aip.AipRun, "SUPERSEDE_GROWTH", 0)
    monkeypatch.setattr(aip.AipRun, "SUPERSEDE_SLACK", 0)
    rule = cep_gpu.parse_rule("define R from B(x=$k) and last A(x=$k) within 10 s from B")
    auto = aip.compile_automaton(rule)
    assert [m.supersede for m in auto.models] == [True]
    ev = pd.DataFrame({"type": ["A"] * 6 + ["B"], "ts": [0, 1, 2, 3, 3, 4, 5],
                       "x": [1, 2, 1, 2, 1, 1, 1]})
    steps = aip.trace(rule, EventTable.from_pandas(ev))
    # after A@4 (x=1): A@0, A@2 (x=1) are superseded by A@3 (x=1, row 4); A@1 by A@3 (x=2, row 3)
    assert sorted(v.ids["A"] for v in steps[5].alive) == [3, 4, 5]
    assert steps[6].composite == [(6, 5)]
    # an output attribute does not take part in the choice, so reading A's timestamp there is fine
    out_ts = cep_gpu.parse_rule(
        "define R from B() and last A() within 10 s from B where d = B.ts - A.ts"
    )
    assert [m.supersede for m in aip.compile_automaton(out_ts).models] == [True]
    # a condition on the timestamp, or a span fixed by it, disables it: the older event could
    # then be the only valid one
    timed = cep_gpu.parse_rule(
        "define S pattern SEQ(A a, B b) where b.ts - a.ts > 1 within 5 s select last"
    )
    assert [m.supersede for m in aip.compile_automaton(timed).models] == [False]
    neg = cep_gpu.parse_rule(
        "define R from B() and last A() within 10 s from B and not C() between A and B"
    )
    assert [m.supersede for m in aip.compile_automaton(neg).models] == [False]


@pytest.mark.parametrize("policy, clone", [("last", "Seq31"), ("first", "Seq21")])
def test_figure2_last_and_first_delete_clones_that_cannot_be_chosen(policy, clone):
    # the chapter: "other composition operators (e.g., last-within) may enable early deletion".
    # At t=4.5, V2 fits Seq2 (P2) and Seq3 (P3), which bind the same painting: only the clone of
    # the latest (last) / earliest (first) one is made; the other could never be chosen
    rule = cep_gpu.parse_rule(R1.format(policy=policy))
    (model,) = aip.compile_automaton(rule).models
    assert model.prune == policy
    steps = aip.trace(rule, EventTable.from_pandas(figure2_events(), time_unit="min"))
    p = "PeopleNear"
    assert alive(steps[3]) == [("Seq2", p, {p: 3}), ("Seq3", p, {p: 4})]
    assert [(v.name, v.ids) for v in steps[4].accepted] == [(clone, {p: 3 if clone == "Seq21" else 4,
                                                                      "Vibration": 5})]
    assert len(steps[4].composite) == 1


def test_early_deletion_keeps_one_clone_per_distinguishable_event():
    # A's x is read by a check: A events with different x stay apart (a later check could tell
    # them apart); only the latest A per x is cloned when B arrives
    rule = cep_gpu.parse_rule(
        "define R from T() and last B() within 10 s from T and last A(x != B.x) within 10 s from B"
    )
    auto = aip.compile_automaton(rule)
    by_order = {m.order: m.prune for m in auto.models}
    assert by_order == {(1, 0): "last", (2, 1, 0): "last"}
    ev = pd.DataFrame({"type": ["A", "A", "A", "A", "B", "T"], "ts": [0, 1, 2, 3, 4, 5],
                       "x": [1, 2, 1, 2, 9, 9]})
    steps = aip.trace(rule, EventTable.from_pandas(ev))
    # after B@4: state "B" of model (A, B, T) holds one clone per x: A@2 (x=1) and A@3 (x=2)
    in_b = sorted(v.ids["A"] for v in steps[4].alive if v.state == "B" and "A" in v.ids)
    assert in_b == [2, 3]
    out = cep_gpu.detect(ev, rule, backend="aip")
    ref = cep_gpu.detect(ev, rule, backend="reference")
    assert [tuple(i) for i in out["ids"]] == [tuple(i) for i in ref["ids"]] == [(5, 4, 3)]


def test_early_deletion_only_where_it_is_safe():
    # `first` whose window check comes only with a later event: an older A may fall out of the
    # window that a newer A still meets, so no clone may be dropped early
    seq_first = cep_gpu.parse_rule("define S pattern SEQ(A a, B b, C c) within 5 s select first")
    ev = pd.DataFrame({"type": ["A", "A", "B", "C"], "ts": [0, 2, 3, 6]})
    out = cep_gpu.detect(ev, seq_first, backend="aip")
    ref = cep_gpu.detect(ev, seq_first, backend="reference")
    assert [tuple(i) for i in out["ids"]] == [tuple(i) for i in ref["ids"]] == [(1, 2, 3)]
    assert all(m.prune is None for m in aip.compile_automaton(seq_first).models if m.order[0] == 0)
    # `last` over SEQ: the window check is later, but the newer event always passes it
    seq_last = cep_gpu.parse_rule("define S pattern SEQ(A a, B b, C c) within 5 s select last")
    assert {m.order: m.prune for m in aip.compile_automaton(seq_last).models}[(0, 1, 2)] == "last"
    # a timestamp read, a span fixed by the event, or consumption: never
    for text in (
        "define R from B() and first A(ts > B.ts - 3) within 10 s from B",
        "define R from B() and first A() within 10 s from B and not C() between A and B",
        "define R from B() and first A() within 10 s from B consuming A",
    ):
        rule = cep_gpu.parse_rule(text)
        assert [m.prune for m in aip.compile_automaton(rule).models] == [None], text


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.one_of(tesla_rules(policies=("last", "first"), consuming=False),
                 seq_rules(policies=("last", "first"))),
       event_streams(max_events=40, max_ts=20))
def test_aip_with_early_deletion_equals_reference(text, events):
    """Random `last`/`first` rules (where early deletion applies most) on longer streams."""
    _same_as_others(text, events)


# -- differential tests ----------------------------------------------------------------------------


def _rows(df: pd.DataFrame) -> list:
    """Output rows as comparable tuples (NaN-safe)."""
    cols = [c for c in df.columns if c != "ids"]
    out = []
    for rec, ids in zip(df[cols].astype(object).where(df[cols].notna(), None).itertuples(index=False),
                        df["ids"].tolist()):
        out.append((tuple(rec), tuple(int(i) for i in ids)))
    return out


def _same_as_others(text: str, events: pd.DataFrame, others: tuple[str, ...] = ()) -> None:
    try:
        expected = cep_gpu.detect(events, text, backend="reference")
    except CepError:
        with pytest.raises(CepError):
            cep_gpu.detect(events, text, backend="aip")
        return
    got = cep_gpu.detect(events, text, backend="aip")
    assert _rows(got) == _rows(expected), text
    for other in others:
        assert _rows(got) == _rows(cep_gpu.detect(events, text, backend=other)), (other, text)


# (the plain differential against the reference and the other backends: tests/test_differential.py)


@settings(max_examples=100, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.one_of(tesla_rules(), seq_rules()), event_streams(max_events=60, max_ts=25))
def test_aip_equals_reference_longer_streams_with_eager_supersede(text, events):
    old = aip.AipRun.SUPERSEDE_GROWTH, aip.AipRun.SUPERSEDE_SLACK
    aip.AipRun.SUPERSEDE_GROWTH, aip.AipRun.SUPERSEDE_SLACK = 0, 0
    try:
        _same_as_others(text, events)
    finally:
        aip.AipRun.SUPERSEDE_GROWTH, aip.AipRun.SUPERSEDE_SLACK = old


@settings(max_examples=100, deadline=None, suppress_health_check=list(HealthCheck))
@given(tesla_rules(), event_streams(max_events=30), st.data())
def test_match_contract_lo_hi_excluded(text, events, data):
    """The backend contract directly: context rows before lo, terminators in [lo, hi), excluded rows."""
    rule = cep_gpu.parse_rule(text)
    table = EventTable.from_pandas(events)
    n = len(table)
    lo = data.draw(st.integers(0, n))
    hi = data.draw(st.integers(lo, n))
    excluded = np.array(data.draw(st.lists(st.booleans(), min_size=n, max_size=n)), bool)
    try:
        cep_gpu.detect(events, rule, backend="reference")  # schema check
    except CepError:
        return
    want = get_backend("reference").match(rule, table, lo, hi, excluded.copy())
    got = get_backend("aip").match(rule, table, lo, hi, excluded.copy())
    key = lambda m: sorted(map(tuple, np.c_[m.rows, np.nan_to_num(m.aggs, nan=-1e300)].tolist()))  # noqa: E731
    assert key(got) == key(want)


@settings(max_examples=50, deadline=None, suppress_health_check=list(HealthCheck))
@given(rules_and_streams(max_events=20), st.integers(1, 4))
def test_streaming_engine_with_aip_equals_batch(case, chunks):
    text, events = case
    try:
        rules = cep_gpu.parse_rules(text)
        rule_order(rules)
        batch = cep_gpu.detect(events, rules, backend="reference")
    except CepError:
        return
    engine = cep_gpu.Engine(rules, backend="aip")
    cuts = np.linspace(0, len(events), chunks + 1).astype(int)
    parts = [engine.publish(events.iloc[a:b]) for a, b in zip(cuts[:-1], cuts[1:]) if b > a]
    parts.append(engine.flush())
    streamed = pd.concat([p for p in parts if len(p)], ignore_index=True) if any(len(p) for p in parts) else batch.iloc[:0]
    key = lambda df: sorted((r, tuple(int(i) for i in ids)) for r, ids in zip(df["rule"], df["ids"]))  # noqa: E731
    assert key(streamed) == key(batch)
