"""MuSE planning (cep_gpu.muse): networks, projections, rates, the cost model and the placement
algorithms, on the paper's hand-worked examples (Figs. 1-2, Examples 2, 5, 9, 13, 17)."""

from __future__ import annotations

import math

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

import cep_gpu
from cep_gpu import muse
from cep_gpu.muse.graph import Vertex, graph_cost, make_info, primitive_sub
from cep_gpu.muse.query import orderings, project_tree

# Fig. 1: R1 emits C and F, R2 emits C and L, R3 emits L (Example 2's costs pin this down)
FIG1 = {"nodes": {"R1": ["C", "F"], "R2": ["C", "L"], "R3": ["L"]}}
# Fig. 2: F at nodes 1 and 4, C at 1 and 2, L at 2 and 3 (Examples 6, 13, 17)
FIG2 = {"nodes": {"1": ["C", "F"], "2": ["C", "L"], "3": ["L"], "4": ["F"]}}
RC, RL, RF = 10.0, 10.0, 0.1


def fig(spec, rc=RC, rl=RL, rf=RF) -> muse.Network:
    return muse.Network.from_dict({**spec, "rates": {"C": rc, "L": rl, "F": rf}})


Q1 = "SEQ(AND(C, L), F)"


# ---------------------------------------------------------------------------- network


def test_from_dict_round_trip_and_lookups():
    net = fig(FIG2)
    assert muse.Network.from_dict(net.to_dict()).fingerprint() == net.fingerprint()
    assert net.nodes_of("L") == ("2", "3")
    assert net.rate("F") == RF


def test_generate_is_deterministic_and_follows_the_parameters():
    a = muse.Network.generate(nodes=12, types=6, event_node_ratio=0.3, skew=1.5, seed=7)
    b = muse.Network.generate(nodes=12, types=6, event_node_ratio=0.3, skew=1.5, seed=7)
    c = muse.Network.generate(nodes=12, types=6, event_node_ratio=0.3, skew=1.5, seed=8)
    assert a.fingerprint() == b.fingerprint() != c.fingerprint()
    assert len(a.nodes) == 12 and len(a.rates) == 6
    assert all(a.produces[n] for n in a.nodes)  # every node produces something
    assert all(a.nodes_of(t) for t in a.rates)  # every type has a producer
    full = muse.Network.generate(nodes=5, types=4, event_node_ratio=1.0, seed=1)
    assert all(full.produces[n] == frozenset(full.rates) for n in full.nodes)
    skewed = muse.Network.generate(nodes=5, types=40, skew=1.1, seed=2, max_rate=1e3)
    assert max(skewed.rates.values()) == 1e3 and min(skewed.rates.values()) >= 1


@pytest.mark.parametrize(
    ("spec", "match"),
    [
        ({"nodes": {}, "rates": {}}, "empty network"),
        ({"nodes": {"a": ["A"]}, "rates": {"A": 0}}, "positive finite"),
        ({"nodes": {"a": ["A"]}, "rates": {"A": float("nan")}}, "positive finite"),
        ({"nodes": {"a": ["A"]}, "rates": {}}, "has no rate"),
        # was silently accepted: a rate for a type no node produces (a typo, or a node dropped)
        ({"nodes": {"a": ["A"], "b": ["A"]}, "rates": {"A": 1, "Z": 2, "B": 3}},
         "rate given for type\\(s\\) 'B', 'Z', which no node produces"),
        ({"nodes": {"a": ["A"], "b": ["A"], "c": ["A"]}, "rates": {"A": 1},
          "links": [["a", "b"]]}, "disconnected"),
        ({"nodes": {"a": ["A"]}, "rates": {"A": 1}, "links": [["a", "zz"]]}, "not in the network"),
        ({"rates": {"A": 1}}, "needs 'nodes'"),
    ],
)
def test_bad_networks_raise(spec, match):
    with pytest.raises(muse.MuseError, match=match):
        muse.Network.from_dict(spec)


def test_bad_generate_parameters_raise():
    with pytest.raises(muse.MuseError, match="skew"):
        muse.Network.generate(skew=1.0)
    with pytest.raises(muse.MuseError, match="event_node_ratio"):
        muse.Network.generate(event_node_ratio=0)
    with pytest.raises(muse.MuseError, match="nodes"):
        muse.Network.generate(nodes=0)


def test_network_from_events_measures_rates_per_node_and_type():
    """was: no way to derive a network from events; the rates had to be typed into the JSON."""
    import pandas as pd
    import pyarrow as pa

    net = muse.Network.from_dict({"nodes": {"a": ["A", "B"], "b": ["B"], "c": ["A", "C"]},
                                  "rates": {"A": 2.0, "B": 5.0, "C": 1.0}})
    q = muse.Query.from_pattern("SEQ(A, B, C)", window=1.0)
    ev = muse.generate_streams(net, [q], 400, seed=3).rename(columns={"node": "host"})
    got = muse.Network.from_events(ev, node_column="host")
    assert got.produces == net.produces
    span = ev["ts"].max() - ev["ts"].min()
    for t in net.rates:  # events per second per producing node, over the file's span
        n = int((ev["type"] == t).sum())
        assert got.rate(t) == pytest.approx(n / span / len(net.nodes_of(t)))
        assert abs(got.rate(t) - net.rate(t)) < 5 * math.sqrt(net.rate(t) / 400)
    rates = muse.node_rates(ev, "host")
    assert list(rates.columns) == ["node", "type", "events", "rate"]
    assert rates["events"].sum() == len(ev) and rates.attrs["span_s"] == pytest.approx(span)
    # datetimes, an Arrow table, and numbers in another unit give the same network
    dated = ev.assign(ts=pd.Timestamp("2024-01-01") + pd.to_timedelta(ev["ts"], unit="s"))
    ms = ev.assign(ts=ev["ts"] * 1000)
    for other in (muse.Network.from_events(dated, "host"),
                  muse.Network.from_events(pa.Table.from_pandas(dated), "host"),
                  muse.Network.from_events(ms, "host", time_unit="ms")):
        assert other.produces == got.produces
        assert other.rates == pytest.approx(got.rates, rel=1e-6)
    # the mean over a type's nodes: collecting it costs what the file shows
    uneven = pd.DataFrame({"type": ["A", "A", "A", "B"], "ts": [0.0, 1.0, 2.0, 2.0],
                           "node": [1, 1, 2, 2]})
    net2 = muse.Network.from_events(uneven)
    assert net2.to_dict() == {"nodes": {"1": ["A"], "2": ["A", "B"]}, "rates": {"A": 0.75, "B": 0.5}}


@pytest.mark.parametrize(
    ("frame", "kwargs", "match"),
    [
        ({"type": ["A"], "ts": [0.0], "host": ["x"]}, {},
         r"no node column 'node' .* \(their columns: 'type', 'ts', 'host'\)"),
        ({"type": [], "ts": [], "node": []}, {}, "no events"),
        ({"type": ["A", "B"], "ts": [3.0, 3.0], "node": ["x", "y"]}, {},
         r"all 2 event\(s\) have the same timestamp"),
        ({"type": ["A", "B", "A"], "ts": [0.0, 1.0, 2.0], "node": ["x", None, None]}, {},
         "column 'node' is null at row 1: every event needs the node"),
        ({"type": ["A", "B"], "ts": [0.0, 1.0], "node": ["x", "y"]}, {"time_unit": "parsec"},
         "unknown time_unit"),
        ({"ts": [0.0, 1.0], "node": ["x", "y"]}, {}, "no 'type' column"),
        # was: the numbers became type names '1' and '2' that no query reads, without a word
        ({"type": [1, 2], "ts": [0.0, 1.0], "node": ["x", "y"]}, {}, "column 'type' must hold strings"),
        ({"type": ["A", 2], "ts": [0.0, 1.0], "node": ["x", "y"]}, {}, "column 'type' must hold strings"),
    ],
)
def test_network_from_events_errors(frame, kwargs, match):
    import pandas as pd

    with pytest.raises(muse.MuseError, match=match):
        muse.Network.from_events(pd.DataFrame(frame), **kwargs)


def test_selectivity_from_sample_measures_the_where_conditions():
    """σ measured on a sample (DecoPa's estimator for pairs, the pass rate for one type's own
    conditions), in the form parse_queries takes."""
    text = """define Q1 pattern SEQ(A a, B b) where a.k = b.k and a.v > 0.75 within 1 s
define Q2 pattern AND(B b, C c) where b.v < c.v within 500 ms
define Q3 pattern SEQ(A a, C c) within 1 s"""
    net = muse.Network.from_dict({"nodes": {"a": ["A", "B"], "b": ["B", "C"]},
                                  "rates": {"A": 2.0, "B": 2.0, "C": 1.0}})
    ev = muse.generate_streams(net, text, 200, seed=1)  # k uniform in 0..9, v uniform in [0, 1)
    sel = muse.selectivity_from_sample(text, ev, backend="cpu")
    assert set(sel) == {"Q1", "Q2"}  # Q3 has no condition
    assert set(sel["Q1"]) == {"A", ("A", "B")} and set(sel["Q2"]) == {("B", "C")}
    assert sel["Q1"]["A"] == pytest.approx(0.25, abs=0.05)
    assert sel["Q1"][("A", "B")] == pytest.approx(0.1, abs=0.03)
    assert sel["Q2"][("B", "C")] == pytest.approx(0.5, abs=0.05)
    q1, q2, q3 = muse.parse_queries(text, selectivity=sel)
    assert q1.sigma() == pytest.approx(sel["Q1"]["A"] * sel["Q1"][("A", "B")]) and q3.sigma() == 1
    with pytest.raises(muse.MuseError, match="no events"):
        muse.selectivity_from_sample(text, ev.iloc[:0])


# ---------------------------------------------------------------------------- queries


def test_projections_of_example_5():
    q = muse.Query.from_pattern(Q1, window=1.0)
    assert project_tree(q.tree, frozenset("CF")) == ("SEQ", ("C", "F"))  # p1: AND dropped
    assert project_tree(q.tree, frozenset("LF")) == ("SEQ", ("L", "F"))  # p2
    assert project_tree(q.tree, frozenset("CL")) == ("AND", ("C", "L"))  # p3: SEQ dropped
    assert q.project("CL").name == "Q_p_C_L"
    # nested operators of one kind merge once the middle operator is gone
    q2 = muse.Query.from_pattern("SEQ(A, AND(B, SEQ(C, D)), E)", window=1.0)
    assert project_tree(q2.tree, frozenset("ACDE")) == ("SEQ", ("A", "C", "D", "E"))


def test_projection_keeps_only_its_predicates_and_compiles():
    text = ("define Q pattern SEQ(A a, B b, C c) where a.k = b.k and b.v < c.v and a.v > 0.5 "
            "within 2 s")
    q = muse.Query.from_text(text, selectivity={("A", "B"): 0.1, ("B", "C"): 0.5})
    p = q.project(["A", "C"])
    assert [c.text for c in p.conjuncts] == ["a.v > 0.5"]
    assert p.selectivity == {}
    assert "a.k" not in p.rule_text() and "SEQ(A a, C c)" in p.rule_text()
    cep_gpu.parse_rule(p.rule_text())
    assert q.project(["A", "B"]).sigma() == pytest.approx(0.1)
    assert q.sigma() == pytest.approx(0.05)


def test_nested_query_compiles_to_timestamp_conditions():
    q = muse.Query.from_pattern(Q1, window=1.0)
    text = q.rule_text()
    assert "AND(C x_C, L x_L, F x_F)" in text
    assert "x_C.ts < x_F.ts" in text and "x_L.ts < x_F.ts" in text and "x_C.ts < x_L.ts" not in text
    rule = cep_gpu.parse_rule(text)
    assert rule.name == "Q"


def test_rate_estimates():
    net = fig(FIG2)
    w = 2.0
    seq = muse.Query.from_pattern("SEQ(C, L, F)", window=w, selectivity={("C", "L"): 0.5})
    # Poisson: SEQ of k types within W: σ Π r W^(k-1)/(k-1)!
    assert seq.rate(net) == pytest.approx(0.5 * RC * RL * RF * w**2 / 2)
    conj = muse.Query.from_pattern("AND(C, L)", window=1.0)
    assert conj.rate(net) == pytest.approx(2 * RC * RL)  # the paper's k·Π at W = 1 (§4.4)
    nested = muse.Query.from_pattern(Q1, window=w)
    assert orderings(nested.tree) == 2
    assert nested.rate(net) == pytest.approx(RC * RL * RF * w**2 * 2 / 2)
    assert nested.bindings(net) == 8  # |𝔈(q1)| = 2 * 2 * 2 (Fig. 2a)


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("define Q pattern SEQ(A a, A b) within 1 s", "occurs twice"),
        ("define Q pattern SEQ(A a, NOT(B b), C c) within 1 s", "NOT"),
        ("define Q pattern SEQ(A a, B b) within 1 s select last", "select each"),
        ("define Q pattern SEQ(A a, B b within 1 s", "does not parse"),
        ("define Q from A() and each B() within 1 s from A", "pattern SEQ"),
    ],
)
def test_bad_queries_raise(text, match):
    with pytest.raises(muse.MuseError, match=match):
        muse.Query.from_text(text)


def test_bad_patterns_and_selectivities_raise():
    with pytest.raises(muse.MuseError, match="twice"):
        muse.Query.from_pattern("SEQ(A, AND(B, A))", window=1)
    with pytest.raises(muse.MuseError, match="selectivity"):
        muse.Query.from_pattern("SEQ(A, B)", window=1, selectivity={("A", "B"): 0})
    with pytest.raises(muse.MuseError, match="expected"):
        muse.Query.from_pattern("SEQ(A, B", window=1)


@pytest.mark.parametrize("make", [
    lambda sel: muse.Query.from_text("define Q pattern SEQ(GOOG a, MSFT b) within 1 s", selectivity=sel),
    lambda sel: muse.Query.from_pattern("SEQ(GOOG, MSFT)", window=1.0, selectivity=sel),
])
def test_a_selectivity_naming_a_type_the_query_does_not_have_is_refused(make):
    from cep_gpu.errors import ArgumentError

    # was accepted, and entered no projection: the σ the user meant silently became 1
    with pytest.raises(ArgumentError) as err:
        make({("GOOG", "ZZZ"): 0.5})
    assert str(err.value) == ("query Q: selectivity key ('GOOG', 'ZZZ') names type(s) ['ZZZ'] that the "
                              "query does not have (its types: ['GOOG', 'MSFT'])")
    with pytest.raises(ArgumentError, match=r"key 'a' names type\(s\) \['a'\]"):  # an alias, not a type
        make({"a": 0.5})
    assert make({("GOOG", "MSFT"): 0.5}).sigma() == 0.5


def test_several_rules_go_to_parse_queries():
    text = ("define Q1 pattern SEQ(A a, B b) where a.k = b.k within 1 s\n"
            "define Q2 pattern AND(B b, C c) where b.v < c.v within 500 ms")
    # was: "query does not parse: expected exactly one rule, found 2; use parse_rules for several"
    with pytest.raises(muse.MuseError) as err:
        muse.Query.from_text(text)
    assert str(err.value) == ("Query.from_text takes one rule, got 2 (Q1, Q2): "
                              "muse.parse_queries(text) reads several")
    q1, q2 = muse.parse_queries(text, selectivity={"Q1": {("A", "B"): 0.1}})
    assert (q1.name, q2.name) == ("Q1", "Q2") and q1.sigma() == 0.1 and q2.window == 0.5
    assert [c.text for c in q2.conjuncts] == ["b.v < c.v"]
    # separated by new lines only (the old split wanted ';' or a blank line), by ';' or blank lines
    for sep in (";", "\n\n", ";\n\n"):
        assert [q.name for q in muse.parse_queries(text.replace("\n", sep))] == ["Q1", "Q2"]
    net = muse.Network.from_dict({"nodes": {"n": ["A", "B", "C"]}, "rates": {"A": 1, "B": 1, "C": 1}})
    assert [q.name for q in muse.place(text, net).queries] == ["Q1", "Q2"]
    from cep_gpu.errors import ArgumentError

    with pytest.raises(ArgumentError, match=r"selectivity names no query of the text: \['Q3'\]"):
        muse.parse_queries(text, selectivity={"Q3": {}})


# ---------------------------------------------------------------------------- cost model


def test_cost_of_the_muse_graph_of_figure_2():
    """Fig. 2 by hand: p2 = SEQ(L, F) single-sink at node 1 (v1), p3 = AND(C, L) multi-sink at 1
    and 2 partitioned on C (v2, v3), q1 at 1 and 2 partitioned on p3 (v4, v5)."""
    net = fig(FIG2)
    q = muse.Query.from_pattern(Q1, window=1.0, selectivity={("C", "L"): 0.2, ("L", "F"): 0.3})
    p2, p3 = q.project("LF"), q.project("CL")
    prim = {t: primitive_sub(q.project(t), net) for t in "CLF"}
    pv = {(t, v.node): v for t in "CLF" for v in prim[t].sinks}
    info = {v: i for s in prim.values() for v, i in s.info.items()}
    edges = set()

    def vertex(p, node, inputs):
        v = Vertex(p.key, node)
        groups: dict = {}
        for w in inputs:
            groups.setdefault(w.key, []).append(info[w])
            edges.add((w, v))
        info[v] = make_info(p, net, groups)
        return v

    v1 = vertex(p2, "1", [pv["L", "2"], pv["L", "3"], pv["F", "1"], pv["F", "4"]])
    v2 = vertex(p3, "1", [pv["C", "1"], pv["L", "2"], pv["L", "3"]])
    v3 = vertex(p3, "2", [pv["C", "2"], pv["L", "2"], pv["L", "3"]])
    vertex(q, "1", [v1, v2])
    vertex(q, "2", [v1, v3])
    # covers (Example 6 / 13): v1 covers all 4 bindings of p2, v2 and v3 two of p3 each
    assert info[v1].bindings == 4 and info[v2].bindings == 2 and info[v3].bindings == 2
    assert info[v2].cover["C"] == {"1"} and info[v3].cover["C"] == {"2"}
    # Example 17: placement costs of V_p3 are 3 r(L), of v1 2 r(L) + r(F); L@2 goes to node 1
    # once for both v1 and v2 (V_{v,n} sharing, §4.4)
    rp2 = p2.rate(net)
    expected = RL * (1 + 2) + RF * 1 + rp2 * 4 * 1
    assert graph_cost(edges, info) == pytest.approx(expected)
    assert rp2 == pytest.approx(0.3 * RL * RF)


def test_oop_on_figure_1_is_example_2():
    """Example 2: evaluating SEQ(C, L, F) at R2 costs r(F) + r(C) + r(L), at R3 r(F) + 2r(C) +
    r(L); oOP picks the cheapest node."""
    net = fig(FIG1, rc=10, rl=10, rf=1)
    q = muse.Query.from_pattern("SEQ(C, L, F)", window=1.0)
    plan = muse.place(q, net, "oop")
    assert plan.cost == pytest.approx(1 + 10 + 10)
    assert [v.node for v in plan.sinks["Q"]] == ["R2"]
    central = muse.place(q, net, "centralized")
    assert central.cost == pytest.approx(2 * 10 + 2 * 10 + 1) == plan.centralized_cost
    assert central.transmission_ratio == pytest.approx(1.0)


def test_amuse_on_figure_2_builds_a_multi_sink_plan():
    """With frequent C and L and rare F, aMuSE partitions p = SEQ(L, F) by L (Eq. 6:
    r(L) > r(F)·|𝔈(F)|) and q1 by C, as in Fig. 2's v2/v3: no C or L event is ever sent."""
    net = fig(FIG2)
    q = muse.Query.from_pattern(Q1, window=1.0, selectivity={("C", "L"): 0.01, ("L", "F"): 0.1})
    plan = muse.place(q, net, "amuse")
    assert sorted(v.node for v in plan.sinks["Q"]) == ["1", "2"]  # the C nodes
    sent = {plan.projections[v.key].name for v, _, _ in plan.sends()}
    assert "Q_p_C" not in sent and all(not s.endswith("_L") for s in sent)
    rlf = q.project("LF").rate(net)
    # F@1 and F@4 go to the two L nodes; SEQ(L,F)@2 (2 bindings) to node 1, @3 to nodes 1 and 2
    assert plan.cost == pytest.approx(4 * RF + 3 * 2 * rlf)
    assert plan.cost < muse.place(q, net, "oop").cost < plan.centralized_cost
    assert "multi-sink" in plan.explain()


def test_amuse_star_prunes_projections():
    net = muse.Network.generate(nodes=10, types=6, event_node_ratio=0.5, skew=1.3, seed=3)
    q = muse.Query.from_pattern("SEQ(AND(E0, E1), E2, AND(E3, E4))", window=1.0,
                                selectivity={("E0", "E2"): 0.05, ("E1", "E3"): 0.1})
    a, s = muse.place(q, net, "amuse"), muse.place(q, net, "amuse*")
    assert s.stats["Q"]["projections"] <= a.stats["Q"]["projections"]
    assert s.cost <= s.centralized_cost + 1e-9


def test_place_errors():
    net = fig(FIG2)
    with pytest.raises(muse.MuseError, match="no node produces type"):
        muse.place(muse.Query.from_pattern("SEQ(C, X)", window=1), net)
    with pytest.raises(muse.MuseError, match="unknown algorithm"):
        muse.place(muse.Query.from_pattern("SEQ(C, F)", window=1), net, "best")
    with pytest.raises(muse.MuseError, match="distinct"):
        muse.place([muse.Query.from_pattern("SEQ(C, F)", window=1)] * 2, net)
    with pytest.raises(muse.MuseError, match="muse.Network"):
        muse.place(muse.Query.from_pattern("SEQ(C, F)", window=1), {"nodes": {}})


def test_planning_is_deterministic():
    net = muse.Network.generate(nodes=8, types=5, event_node_ratio=0.5, skew=1.5, seed=11)
    q = muse.Query.from_pattern("SEQ(E0, AND(E1, E2), E3)", window=1.0,
                                selectivity={("E1", "E2"): 0.1})
    assert muse.place(q, net).explain().split("\n")[2:] == muse.place(q, net).explain().split(
        "\n")[2:]


# ---------------------------------------------------------------------------- invariants


@st.composite
def placements(draw, max_nodes: int, max_types: int, rates: list[float]):
    """(types -> origin nodes, type -> rate): every node produces something, every type has a
    producer."""
    n_nodes = draw(st.integers(2, max_nodes))
    types = [f"T{i}" for i in range(draw(st.integers(2, max_types)))]
    produces = {
        f"n{i}": draw(st.lists(st.sampled_from(types), min_size=1, max_size=len(types),
                               unique=True))
        for i in range(n_nodes)
    }
    for t in types:  # every type somewhere
        if not any(t in ts for ts in produces.values()):
            produces[draw(st.sampled_from(sorted(produces)))].append(t)
    return produces, {t: draw(st.sampled_from(rates)) for t in types}


@st.composite
def instances(draw):
    produces, rates = draw(placements(6, 4, [0.01, 0.1, 1.0, 10.0, 100.0]))
    net = muse.Network.from_dict({"nodes": produces, "rates": rates})
    types = sorted(rates)
    kind = draw(st.sampled_from(["SEQ", "AND"]))
    order = draw(st.permutations(types))
    sel = {(a, b): draw(st.sampled_from([0.01, 0.1, 1.0]))
           for a, b in zip(order, order[1:], strict=False)}
    q = muse.Query.from_pattern(f"{kind}({', '.join(order)})", window=1.0, selectivity=sel)
    return net, q


@settings(max_examples=40, deadline=None)
@given(instances())
def test_muse_plans_never_cost_more_than_centralised(case):
    net, q = case
    central = muse.place(q, net, "centralized").cost
    oop = muse.place(q, net, "oop").cost
    assert oop <= central + 1e-9  # oOP can always put the whole query at one producing node
    for alg in ("amuse", "amuse*"):
        plan = muse.place(q, net, alg)
        assert plan.cost <= central * (1 + 1e-9), (alg, plan.explain())
        assert math.isclose(plan.transmission_ratio, plan.cost / central)
    # two types: aMuSE's options are the single sinks at each producing node and the partitioned
    # multi-sink placement, which contains the flat oOP optimum (a single producing node)
    if len(q.types) == 2:
        assert muse.place(q, net, "amuse").cost <= oop * (1 + 1e-9)


@settings(max_examples=15, deadline=None)
@given(instances(), st.sampled_from(["SEQ(AND({0}, {1}), {2})", "AND(SEQ({0}, {1}), {2})",
                                     "SEQ({0}, AND({1}, {2}), {3})"]))
def test_oop_dynamic_program_equals_exhaustive_search(case, shape):
    """oOP's tree DP finds the least cost over all |N|^|O_c| assignments of the composites."""
    import itertools

    from cep_gpu.muse.graph import Sub
    from cep_gpu.muse.placement import _Builder

    net, _ = case
    types = sorted(net.rates)
    assume(shape.count("{") <= len(types))
    q = muse.Query.from_pattern(shape.format(*types), window=1.0, selectivity={
        (types[0], types[1]): 0.1})
    plan = muse.place(q, net, "oop")
    b = _Builder(q, net, {}, Sub.empty())
    composites = []

    def walk(t):
        if not isinstance(t, str):
            for c in t[1]:
                walk(c)
            composites.append(t)

    walk(q.tree)
    prims = {t: b.prim(t) for t in q.order}
    brute = min(
        b._tree_graph(composites, dict(zip(map(id, composites), nodes, strict=True)), prims).cost
        for nodes in itertools.product(net.nodes, repeat=len(composites))
    )
    assert plan.cost == pytest.approx(brute)


def _two_type_optimum(net: muse.Network, q: muse.Query) -> float:
    """Exhaustive optimum for a two-type query over the placements §6.1.3 leaves (Theorem 7:
    a minimal multi-sink placement is partitioning): one sink at any node, or one sink per node
    of one type, each receiving the other type from every other node."""
    a, b = q.order
    ra, rb = (q.project([t]).rate(net) for t in (a, b))
    na, nb = set(net.nodes_of(a)), set(net.nodes_of(b))
    single = min(ra * len(na - {n}) + rb * len(nb - {n}) for n in net.nodes)
    part_a = sum(rb * len(nb - {n}) for n in na)
    part_b = sum(ra * len(na - {n}) for n in nb)
    return min(single, part_a, part_b)


@settings(max_examples=40, deadline=None)
@given(instances())
def test_amuse_is_optimal_for_two_type_queries(case):
    """For two types the only combination is the primitive one, and aMuSE's options (a single
    sink at each producing node; the partitioned placement when Eq. 6 holds) contain the optimum:
    partitioning on A beats every single sink exactly when r(A) outweighs B's total rate."""
    net, q = case
    if len(q.types) != 2:
        q = q.project(sorted(q.types)[:2])
    best = _two_type_optimum(net, q)
    for alg in ("amuse", "amuse*"):
        assert muse.place(q, net, alg).cost == pytest.approx(best), alg


def test_a_spec_or_selectivity_that_names_one_thing_twice_is_refused():
    """was: the last value silently won (node 1's type A was lost; σ of A, B was 0.5)."""
    from cep_gpu.errors import ArgumentError

    with pytest.raises(muse.MuseError, match="node '1' is given twice"):
        muse.Network.from_dict({"nodes": {1: ["A"], "1": ["B"]}, "rates": {"A": 1, "B": 1}})
    with pytest.raises(muse.MuseError, match="rate of type '1' is given twice"):
        muse.Network.from_dict({"nodes": {"n": ["1"]}, "rates": {1: 1, "1": 2}})
    with pytest.raises(ArgumentError, match=r"σ of the types \['A', 'B'\] is given twice"):
        muse.Query.from_pattern("SEQ(A, B)", window=1, selectivity={("A", "B"): 0.1, ("B", "A"): 0.5})
