"""muse.simulate: a plan run event by event, every node on cep-gpu, finds exactly the matches of
centralised detect, once each, and sends the message volume the cost model predicts."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from test_muse import placements

import cep_gpu
from cep_gpu import muse


def central_ids(events, q: muse.Query, backend="reference") -> list[tuple[int, ...]]:
    out = cep_gpu.detect(events.drop(columns=["node"]), q.rule_text(), backend=backend)
    return sorted(tuple(int(i) for i in ids) for ids in out["ids"])


CONDITIONS = [
    "{a}.k = {b}.k",
    "{a}.v < {b}.v",
    "{a}.v > 0.3",
    "({a}.k < 5 or {b}.v > 0.5)",
    "{a}.v + {b}.v < 1.2",
]


@st.composite
def cases(draw):
    produces, rates = draw(placements(8, 5, [0.2, 1.0, 5.0, 25.0]))
    universe = sorted(rates)
    k = draw(st.integers(2, min(4, len(universe))))
    types = draw(st.permutations(universe))[:k]
    window = draw(st.sampled_from([1, 2, 3]))
    sel: dict = {}
    if draw(st.booleans()):  # a flat SEQ/AND rule with where conditions
        kind = draw(st.sampled_from(["SEQ", "AND"]))
        alias = {t: t.lower() for t in types}
        conds = []
        for _ in range(draw(st.integers(0, 3))):
            a, b = draw(st.permutations(types))[:2]
            conds.append(draw(st.sampled_from(CONDITIONS)).format(a=alias[a], b=alias[b]))
            sel[(a, b)] = draw(st.sampled_from([0.1, 0.5, 1.0]))  # a planning guess
        where = f" where {' and '.join(conds)}" if conds else ""
        items = ", ".join(f"{t} {alias[t]}" for t in types)
        q = muse.Query.from_text(
            f"define Q pattern {kind}({items}){where} within {window} s", selectivity=sel)
    else:  # a nested operator tree
        if k == 2:
            pattern = f"{draw(st.sampled_from(['SEQ', 'AND']))}({types[0]}, {types[1]})"
        else:
            outer, inner = draw(st.sampled_from([("SEQ", "AND"), ("AND", "SEQ")]))
            pattern = f"{outer}({inner}({types[0]}, {types[1]}), {', '.join(types[2:])})"
        q = muse.Query.from_pattern(pattern, window=float(window), selectivity=sel)
    # about 80 events over 20 windows: rates keep their ratios, so plans still differ
    duration = 20.0 * window
    total = sum(rates[t] for ts in produces.values() for t in ts if t in types)
    net = muse.Network.from_dict({
        "nodes": produces, "rates": {t: r * 80.0 / (total * duration) for t, r in rates.items()}})
    events = muse.generate_streams(net, [q], duration, seed=draw(st.integers(0, 1000)))
    return net, q, events


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cases(), st.sampled_from(muse.ALGORITHMS))
def test_simulated_plan_equals_centralised_detect(case, algorithm):
    net, q, events = case
    plan = muse.place(q, net, algorithm)
    result = muse.simulate(plan, events, backend="reference")
    got = result.match_ids("Q")
    assert len(got) == len(set(got)), "a match was found at two sinks"
    assert got == central_ids(events, q), plan.explain()
    event(f"matches: {'none' if not got else '1-20' if len(got) <= 20 else 'more than 20'}")
    event(f"sinks: {'one' if len(plan.sinks['Q']) == 1 else 'several'}")


def test_simulation_on_the_cpu_backend_and_a_nested_query():
    net = muse.Network.from_dict({
        "nodes": {"1": ["C", "F"], "2": ["C", "L"], "3": ["L"], "4": ["F"]},
        "rates": {"C": 4.0, "L": 4.0, "F": 0.5},
    })
    q = muse.Query.from_pattern("SEQ(AND(C, L), F)", window=0.2)
    events = muse.generate_streams(net, [q], duration=40, seed=3)
    plan = muse.place(q, net, "amuse")
    assert len(plan.sinks["Q"]) > 1  # a multi-sink plan
    result = muse.simulate(plan, events, backend="cpu")
    expected = central_ids(events, q, backend="cpu")
    assert len(expected) > 30
    assert result.match_ids("Q") == expected
    assert set(result.matches["node"]) == {v.node for v in plan.sinks["Q"]}


def _tolerance(plan: muse.Plan, row, duration: float, window: float) -> float:
    """Counted vs predicted messages of one transfer (see docs/muse.md, 'Message counts').

    A primitive vertex sends a Poisson count: sd = sqrt(λ). A composite vertex sends one message
    per match; matches share events, so the count is compound Poisson: each event of the type
    that completes matches brings Poisson(μ) of them, sd = sqrt(λ (1 + μ)) with μ at most
    r̂(p) / min r(t). Matches whose window would start before t = 0 are missing: up to λ W / T.
    """
    lam = row.predicted
    (v,) = [w for w in plan.info if w.label(plan.projections) == row.vertex]
    p = plan.projections[v.key]
    mu = 0.0 if len(p.order) == 1 else p.rate(plan.network) / min(
        plan.network.rate(t) for t in p.order)
    return 5 * math.sqrt(lam * (1 + mu)) + lam * window / duration


@pytest.mark.parametrize("algorithm", ["amuse", "oop", "centralized"])
def test_counted_messages_match_the_cost_model(algorithm):
    net = muse.Network.from_dict({
        "nodes": {"1": ["C", "F"], "2": ["C", "L"], "3": ["L"], "4": ["F"]},
        "rates": {"C": 2.0, "L": 2.0, "F": 0.5},
    })
    q = muse.Query.from_pattern("SEQ(AND(C, L), F)", window=0.5)
    duration = 400.0
    events = muse.generate_streams(net, [q], duration, seed=5)
    plan = muse.place(q, net, algorithm)
    result = muse.simulate(plan, events, backend="cpu", duration=duration)
    assert len(result.messages) > 0
    if algorithm == "amuse":  # the plan sends partial matches, not only events
        assert any(not plan.projections[v.key].is_plain_primitive for v, _, _ in plan.sends())
    for row in result.messages.itertuples():
        tol = _tolerance(plan, row, duration, q.window)
        assert abs(row.count - row.predicted) <= tol, (row, tol)
    assert result.predicted_messages == pytest.approx(plan.cost * duration)
    assert abs(result.total_messages - result.predicted_messages) < 0.1 * result.predicted_messages


def test_simulate_errors():
    net = muse.Network.from_dict({"nodes": {"a": ["A", "B"], "b": ["B"]},
                                  "rates": {"A": 1.0, "B": 2.0}})
    other = muse.Network.from_dict({"nodes": {"a": ["A", "B"], "b": ["B"]},
                                    "rates": {"A": 1.0, "B": 3.0}})
    q = muse.Query.from_pattern("SEQ(A, B)", window=1.0)
    plan = muse.place(q, net)
    events = muse.generate_streams(net, [q], 5, seed=0)
    with pytest.raises(muse.MuseError, match="another network"):
        muse.simulate(plan, events, network=other)
    bad = events.copy()
    bad.loc[0, "node"] = "zz"
    with pytest.raises(muse.MuseError, match="not in the plan's network"):
        muse.simulate(plan, bad)
    bad = events.copy()
    bad.loc[bad["type"] == "A", "node"] = "b"
    with pytest.raises(muse.MuseError, match="does not produce"):
        muse.simulate(plan, bad)
    with pytest.raises(muse.MuseError, match="'node' column|origin node"):
        muse.simulate(plan, events.drop(columns=["node"]))
    with pytest.raises(muse.MuseError, match="muse.Plan"):
        muse.simulate("plan", events)


def test_simulate_refuses_numbers_in_type_with_detects_error():
    """Numbers in ``type`` matched no query's type name and were silently left out as types no
    query reads (the command line refused them, through cli.event_types); now the API raises
    detect's own EventError, word for word."""
    net = muse.Network.from_dict({"nodes": {"a": ["A", "B"]}, "rates": {"A": 1.0, "B": 2.0}})
    q = muse.Query.from_pattern("SEQ(A, B)", window=1.0)
    plan = muse.place(q, net)
    events = muse.generate_streams(net, [q], 5, seed=0)
    mixed = events.astype({"type": object})
    mixed.loc[3, "type"] = 7
    numbers = events.assign(type=np.where(events["type"] == "A", 1, 2))
    for bad in (mixed, numbers):
        with pytest.raises(cep_gpu.EventError) as want:
            cep_gpu.detect(bad.drop(columns=["node"]), "define Q pattern SEQ(A a, B b) within 1 s",
                           backend="reference")
        with pytest.raises(cep_gpu.EventError) as got:
            muse.simulate(plan, bad, backend="reference")
        assert str(got.value) == str(want.value) and "must hold strings" in str(got.value)
    assert len(muse.simulate(plan, events, backend="reference").matches) > 0  # strings: fine


def test_generate_streams_follows_the_rates():
    net = muse.Network.from_dict({"nodes": {"a": ["A", "B"], "b": ["B"]},
                                  "rates": {"A": 3.0, "B": 7.0}})
    q = muse.Query.from_pattern("SEQ(A, B)", window=1.0)
    ev = muse.generate_streams(net, [q], 200, seed=1)
    counts = ev.groupby(["node", "type"]).size().to_dict()
    assert set(counts) == {("a", "A"), ("a", "B"), ("b", "B")}
    for (_node, t), c in counts.items():
        lam = net.rate(t) * 200
        assert abs(c - lam) < 5 * math.sqrt(lam)
    assert ev["ts"].is_monotonic_increasing and np.array_equal(ev["id"], np.arange(len(ev)))
    again = muse.generate_streams(net, [q], 200, seed=1)
    assert ev.equals(again)


@pytest.mark.parametrize("algorithm", ["amuse", "amuse*", "oop"])
def test_workload_of_several_queries(algorithm):
    net = muse.Network.from_dict({
        "nodes": {"a": ["A", "B"], "b": ["B", "C"], "c": ["A", "C"], "d": ["B"]},
        "rates": {"A": 0.3, "B": 3.0, "C": 1.0},
    })
    text = """define Q1 pattern SEQ(A a, B b) where a.k = b.k within 1 s;
              define Q2 pattern AND(B b, C c) where b.v < c.v within 500 ms;
              define Q3 pattern SEQ(A a, B b, C c) within 1 s"""
    queries = muse.place(text, net, algorithm).queries
    plan = muse.place(queries, net, algorithm)
    alone = sum(muse.place(q, net, algorithm).cost for q in queries)
    assert plan.cost <= alone + 1e-9  # events already sent for one query are reused
    events = muse.generate_streams(net, queries, duration=60, seed=2)
    result = muse.simulate(plan, events, backend="aip")
    for q in queries:
        got = result.match_ids(q.name)
        assert len(got) == len(set(got))
        assert got == central_ids(events, q)
        assert got, q.name


# -- a user's own streams: detect's composite events, datetimes, files read by read_events -----------

WORKLOAD_NET = {"nodes": {"a": ["A", "B"], "b": ["B", "C"], "c": ["A", "C"], "d": ["B"]},
                "rates": {"A": 0.3, "B": 3.0, "C": 1.0}}
WORKLOAD = """define Q1 pattern SEQ(A a, B b) where a.k = b.k within 1 s
define Q2 pattern AND(B b, C c) where b.v < c.v within 500 ms
define Q3 pattern SEQ(A a, B b, C c) within 1 s"""


def test_composite_events_are_detects_rows():
    import pandas as pd

    net = muse.Network.from_dict(WORKLOAD_NET)
    plan = muse.place(WORKLOAD, net, "amuse")
    events = muse.generate_streams(net, plan.queries, duration=60, seed=2)
    result = muse.simulate(plan, events, backend="reference")
    got = result.composite_events()
    expected = cep_gpu.detect(events.drop(columns=["node"]), WORKLOAD, backend="reference")
    assert set(expected["rule"]) == {"Q1", "Q2", "Q3"}
    # was: no ts, rows by query and sink
    pd.testing.assert_frame_equal(got[["rule", "ts", "ids"]], expected)
    assert list(got.columns) == ["rule", "ts", "ids", "node"]
    sinks = {q: {v.node for v in vs} for q, vs in plan.sinks.items()}
    assert all(node in sinks[rule] for rule, node in zip(got["rule"], got["node"]))
    assert list(result.matches.columns) == ["query", "node", "ts", "ids"]


def test_streams_with_datetimes_simulate_as_detect_reads_them():
    import pandas as pd

    net = muse.Network.from_dict(WORKLOAD_NET)
    plan = muse.place(WORKLOAD, net, "amuse")
    events = muse.generate_streams(net, plan.queries, duration=30, seed=4)
    start = pd.Timestamp("2024-03-01 09:30", tz="America/New_York")
    dated = events.assign(ts=start + pd.to_timedelta(events["ts"], unit="s"))
    # was: MuseError "'ts' must be numbers of seconds"
    result = muse.simulate(plan, dated, backend="reference")
    expected = cep_gpu.detect(dated.drop(columns=["node"]), WORKLOAD, backend="reference")
    assert str(expected["ts"].dtype) == "datetime64[ns, America/New_York]"
    pd.testing.assert_frame_equal(result.composite_events()[["rule", "ts", "ids"]], expected)
    numeric = muse.simulate(plan, events, backend="reference")
    assert [list(i) for i in numeric.matches["ids"]] == [list(i) for i in result.matches["ids"]]
    assert result.duration == pytest.approx(numeric.duration, abs=1e-6)
    assert result.total_messages == numeric.total_messages


def test_streams_read_by_read_events_give_no_pandas_warning(tmp_path):
    import warnings

    from cep_gpu.io import read_events

    net = muse.Network.from_dict(WORKLOAD_NET)
    plan = muse.place(WORKLOAD, net, "amuse")
    path = tmp_path / "events.parquet"
    muse.generate_streams(net, plan.queries, duration=20, seed=1).to_parquet(path)
    events = read_events(path)
    assert events["type"].dtype == "category" and events["node"].dtype == "category"
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # was: FutureWarning, groupby's observed=False default
        result = muse.simulate(plan, events, backend="reference")
    assert len(result.matches) > 0


def test_events_of_types_no_query_reads_are_ignored():
    """was: MuseError "node 'b' emits type 'News', which the network says it does not produce"
    for events that cannot change any match."""
    import pandas as pd

    net = muse.Network.from_dict(WORKLOAD_NET)
    plan = muse.place(WORKLOAD, net, "amuse")
    events = muse.generate_streams(net, plan.queries, duration=30, seed=6).drop(columns=["id"])
    news = pd.DataFrame({"type": ["News", "News", "Trade"], "ts": [1.5, 2.5, 40.0],
                         "node": ["b", "nyse", None]})  # an unknown node, no node: ignored too
    mixed = pd.concat([events, news]).sort_values("ts", kind="stable").reset_index(drop=True)
    result = muse.simulate(plan, mixed, backend="reference")
    assert result.ignored == {"News": 2, "Trade": 1}
    # the composite events of detect on the whole file (ids: its row positions)
    expected = cep_gpu.detect(mixed.drop(columns=["node"]), WORKLOAD, backend="reference")
    pd.testing.assert_frame_equal(result.composite_events()[["rule", "ts", "ids"]], expected)
    assert result.duration == pytest.approx(40.0 - mixed["ts"].min())  # the file's span
    assert muse.simulate(plan, events, backend="reference").ignored == {}
    # a type a query reads at a node that does not produce it is still an error
    bad = mixed.copy()
    bad.loc[bad["type"] == "A", "node"] = "b"
    with pytest.raises(muse.MuseError, match="node 'b' emits type 'A', which a query reads"):
        muse.simulate(plan, bad)


def test_streams_with_another_node_column_and_time_unit():
    import pandas as pd

    net = muse.Network.from_dict(WORKLOAD_NET)
    plan = muse.place(WORKLOAD, net, "amuse")
    events = muse.generate_streams(net, plan.queries, duration=30, seed=7)
    want = muse.simulate(plan, events, backend="reference")
    ms = events.assign(ts=(events["ts"] * 1000)).rename(columns={"node": "host"})
    got = muse.simulate(plan, ms, backend="reference", node_column="host", time_unit="ms")
    assert [list(i) for i in got.matches["ids"]] == [list(i) for i in want.matches["ids"]]
    assert got.duration == pytest.approx(want.duration)
    pd.testing.assert_series_equal(got.matches["ts"], want.matches["ts"] * 1000)
    with pytest.raises(muse.MuseError, match=r"'host' column \(the origin node"):
        muse.simulate(plan, events, node_column="host")
    with pytest.raises(muse.MuseError, match="besides the node column"):
        muse.simulate(plan, ms.assign(node="a"), node_column="host")


RETURNING = """define Q1(gain: float) pattern SEQ(A a, B b) where a.k = b.k and a.site != b.site within 1 s
return gain := b.v - a.v
define Q2 pattern AND(B b, C c) where b.v < c.v within 500 ms return top := c.v, at := c.site, n := b.k
define Q3 pattern SEQ(A a, B b, C c) within 1 s"""


@pytest.mark.parametrize("algorithm", ["amuse", "centralized"])
def test_return_attributes_and_a_node_column_the_queries_read(algorithm):
    """Queries with 'return' were refused ("'return' is not supported by MuSE planning"), and the
    node column was renamed away, so a query could not read it ("reads attribute 'site', which no
    event in the input has"). Now the sinks' matches carry the attributes detect gives them."""
    import pandas as pd

    net = muse.Network.from_dict(WORKLOAD_NET)
    queries = muse.parse_queries(RETURNING)
    assert [bool(q.returns) for q in queries] == [True, True, False]
    plain = muse.place(muse.parse_queries(WORKLOAD), net, algorithm)
    plan = muse.place(queries, net, algorithm)
    assert plan.cost == pytest.approx(plain.cost)  # the output does not change the placement
    events = muse.generate_streams(net, plan.queries, duration=60, seed=3).rename(columns={"node": "site"})
    got = muse.simulate(plan, events, backend="cpu", node_column="site").composite_events()
    want = cep_gpu.detect(events, RETURNING, backend="cpu")
    assert set(want["rule"]) == {"Q1", "Q2", "Q3"} and want["gain"].notna().sum() > 5
    assert list(got.columns) == [*want.columns, "node"]
    pd.testing.assert_frame_equal(got.drop(columns=["node"]), want)
