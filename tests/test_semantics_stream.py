"""Semantics, hand-worked, through the streaming ``Engine``: the cases of docs/language.md where the
streaming path has logic of its own (held matches of trailing negations, consumption across
publishes, composite events at an input's timestamp), on each Engine backend, one event per
publish and in chunks. Each expected result is the batch one (``detect``), worked out by hand.

How the cases are written: tests/semantics_cases.py.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from semantics_cases import E
from strategies import event_streams

import cep_gpu
from cep_gpu.detect import composite_ids

ENGINE_BACKENDS = ["reference", "cpu", "aip"]


def stream_ids(events: pd.DataFrame, rules, backend: str, mode: str, **kw) -> list[tuple[int, ...]]:
    """The ``ids`` of every composite event an Engine produces for ``events`` (published in
    ``(ts, id)`` order: one row per publish, or in three chunks), flush included, in output order
    (ts, rule, ids)."""
    ev = events.copy()
    if "id" not in ev.columns:
        ev["id"] = np.arange(len(ev), dtype=np.int64)
    ev = ev.sort_values(["ts", "id"], kind="stable").reset_index(drop=True)
    eng = cep_gpu.Engine(rules, backend=backend, **kw)
    if mode == "rows":
        cuts = list(range(len(ev) + 1))
    else:
        cuts = sorted({0, len(ev) // 3, 2 * len(ev) // 3, len(ev)})
    outs = [eng.publish(ev.iloc[a:b]) for a, b in zip(cuts, cuts[1:])] + [eng.flush()]
    out = pd.concat([o for o in outs if len(o)] or [outs[-1]], ignore_index=True)
    keys = [(r["ts"], r["rule"], tuple(int(i) for i in r["ids"])) for _, r in out.iterrows()]
    return [k[2] for k in sorted(keys)]


@pytest.fixture(params=ENGINE_BACKENDS)
def engine_backend(request) -> str:
    return request.param


@pytest.fixture(params=["rows", "chunks"])
def mode(request) -> str:
    return request.param


# A trailing NOT holds a match back until its span (ts(last), ts(first) + W] has passed. Near the end
# of the int64 nanosecond range ts(first) + W saturates (docs/language.md, "Time"): the span never
# passes, the C inside it rejects the match, and flush must not release it either.
_LATE = E(
    ("A", pd.Timestamp("2260-01-01")),
    ("B", pd.Timestamp("2260-06-01")),
    ("C", pd.Timestamp("2260-07-01")),
)
_HIGH = E(("A", 9.2e9), ("B", 9.2e9 + 1), ("C", 9.2e9 + 2))


@pytest.mark.parametrize("events", [_LATE, _HIGH], ids=["2260", "high"])
def test_trailing_not_near_the_end_of_the_timestamp_range(engine_backend, mode, events):
    rule = "define ET pattern SEQ(A a, B b, NOT(C n)) within 87600 h"
    assert cep_gpu.detect(events, rule, backend="reference").empty
    assert stream_ids(events, rule, engine_backend, mode) == []
    # without the C, the match is released on flush
    assert stream_ids(events.iloc[:2], rule, engine_backend, mode) == [(0, 1)]


# Composite events happen at their terminator's timestamp and have negative ids (docs/language.md,
# "Composite events"), so in (ts, id) order they come before every input event of that timestamp,
# also when the terminator that makes them is published after such an event. A rule for which the
# order of events at one timestamp matters must see them all: AND (simultaneous events combine in
# (ts, id) order) and consuming rules (terminators are processed in (ts, id) order).
_AND_COMPOSITE = "define C1 from A(); define M pattern AND(C1 c, X x) within 5 s"


def cid(rule: str, *ids: int) -> int:
    """The id of the composite event of ``rule`` that binds ``ids``."""
    return int(composite_ids(rule, np.array([ids], np.int64), None)[0])


def batch_ids(events, rules) -> list[tuple[int, ...]]:
    out = cep_gpu.detect(events, rules, backend="reference")
    return sorted((r["ts"], r["rule"], tuple(int(i) for i in r["ids"])) for _, r in out.iterrows())


@pytest.mark.parametrize(
    "events,a,x",
    [
        # C1@1 (made by A@1) comes before X@1 in (ts, id) order: one match (C1, X)
        (E(("A", 1), ("X", 1)), 0, 1),
        # the same when X is published first: C1 is made after X but still precedes it
        (E(("X", 1), ("A", 1)), 1, 0),
        (E(("X", 1), ("A", 1), ("Y", 2)), 1, 0),
    ],
)
def test_and_reading_a_composite_event_of_the_same_timestamp(engine_backend, mode, events, a, x):
    want = [(a,), (cid("C1", a), x)]
    assert [k[2] for k in batch_ids(events, _AND_COMPOSITE)] == want
    assert stream_ids(events, _AND_COMPOSITE, engine_backend, mode) == want


# Terminators of a consuming rule are processed in (ts, id) order. Two C1 at ts 1 (made by A@1 id 2
# and A@1 id 3): the one with the smaller id takes X and consumes it, whichever A came first.
_CONSUME_COMPOSITE = """
define C1 from A();
define D from C1() and last X() within 5 s from C1 consuming X
"""


def test_consuming_composite_terminators_of_one_timestamp(engine_backend, mode):
    events = E(("X", 0), ("Y", 0.5), ("A", 1), ("A", 1))
    first = min(cid("C1", 2), cid("C1", 3))
    assert first == cid("C1", 3)  # (the later A's composite event comes first)
    want = [(2,), (3,), (first, 0)]
    assert [k[2] for k in batch_ids(events, _CONSUME_COMPOSITE)] == sorted(
        want, key=lambda t: (len(t) == 2, t)
    )
    assert sorted(stream_ids(events, _CONSUME_COMPOSITE, engine_backend, mode)) == sorted(want)


# The same family, drawn: an upstream rule R0 and a downstream rule R1 that depends on the order of
# events at one timestamp (AND over R0, a consuming rule ending at R0), and a third rule reading
# R1's composite events, over streams with many equal timestamps; every Engine backend, one event
# per publish, equals batch detect.
_UPSTREAM = [
    "define R0(x: int) from A() as a where x = a.x",
    "define R0(x: int) from A() as a and last B() as b within 2 s from a where x = b.x",
    "define R0(x: int) from A() as a and each B(x = a.x) as b within 2 s from a where x = b.x",
]
_ORDERED = [
    "define R1 pattern AND(R0 c, B b) within 1 s",
    "define R1 pattern AND(R0 c, R0 d) within 1 s where c.x = d.x",
    "define R1 pattern AND(R0 c, C k, B b) within 2 s select last",
    "define R1 from R0() as r and last B() as b within 2 s from r consuming b",
    "define R1 from R0() as r and first C(x = r.x) as c within 3 s from r consuming c",
    "define R1 from R0() as r and each C() as c within 2 s from r consuming r, c",
]
_DOWNSTREAM = [
    "",
    "define R2 from D() and each R1() within 2 s from D",
    "define R2 pattern AND(R1 p, D d) within 1 s",
]


@settings(max_examples=80, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    st.sampled_from(_UPSTREAM),
    st.sampled_from(_ORDERED),
    st.sampled_from(_DOWNSTREAM),
    # dense: 6 to 14 events over 4 timestamps, mostly A and B (before this was fixed, about one
    # draw in four streamed differently from batch)
    event_streams(min_events=6, max_events=14, max_ts=3, types=("A", "A", "B", "B", "C", "D")),
    st.sampled_from(ENGINE_BACKENDS),
)
def test_order_at_one_timestamp_streams_as_batch(up, ordered, down, events, backend):
    rules = ";\n".join(r for r in (up, ordered, down) if r)
    want = [k[2] for k in batch_ids(events, rules)]
    assert stream_ids(events, rules, backend, "rows") == want


# Explicit ids: events of one timestamp are ordered by id. A rule that depends on that order (AND,
# consuming) cannot take an event of the newest timestamp whose id is below one already published
# at that timestamp (its terminators were already processed): a LateEventError naming the event,
# as for an older timestamp, and nothing changes. Rules that do not depend on it take the event.
@pytest.mark.parametrize(
    "rule",
    [
        "define M pattern AND(A a, B b) within 5 s",
        "define D from T() and last X() within 5 s from T consuming X",
    ],
)
@pytest.mark.parametrize("form", ["dict", "frame"])
def test_a_smaller_id_at_the_newest_timestamp_is_late_for_order_dependent_rules(
    engine_backend, rule, form
):
    first = {"type": "B" if "AND" in rule else "T", "ts": 1.0, "id": 5}
    second = {"type": "A" if "AND" in rule else "T", "ts": 1.0, "id": 3}
    eng = cep_gpu.Engine(rule, backend=engine_backend)
    eng.publish({"type": "X", "ts": 0.0, "id": 0})
    eng.publish(first if form == "dict" else pd.DataFrame([first]))
    with pytest.raises(cep_gpu.LateEventError, match=r"id=3.*smaller id than id=5"):
        eng.publish(second if form == "dict" else pd.DataFrame([second]))
    # a larger id at that timestamp, or a later timestamp, is fine
    eng.publish({**second, "id": 7})
    eng.publish({**second, "ts": 2.0, "id": 8})


def test_a_smaller_id_at_the_newest_timestamp_is_taken_where_the_order_does_not_matter(
    engine_backend,
):
    rule = "define D from T() and last X() within 5 s from T"
    eng = cep_gpu.Engine(rule, backend=engine_backend)
    eng.publish({"type": "X", "ts": 0.0, "id": 0})
    eng.publish({"type": "T", "ts": 1.0, "id": 5})
    out = eng.publish({"type": "T", "ts": 1.0, "id": 3})
    assert [tuple(i) for i in out["ids"]] == [(3, 0)]


def test_with_allowed_lateness_a_smaller_id_at_the_released_timestamp_is_reported_late():
    rule = "define M pattern AND(A a, B b) within 5 s"
    eng = cep_gpu.Engine(rule, backend="reference", allowed_lateness=0)
    eng.publish({"type": "B", "ts": 1.0, "id": 5})
    out = eng.publish({"type": "A", "ts": 1.0, "id": 3})
    assert out.empty and [e["id"] for e in eng.stats()["late_events"]] == [3]
    out = eng.publish({"type": "A", "ts": 1.0, "id": 6})  # after B@1 (id 5) in (ts, id) order
    assert [tuple(i) for i in out["ids"]] == [(6, 5)]
