"""MuSE graphs (paper Def. 3), their covers (Def. 4) and network cost (§4.4): the :class:`Plan`.

A vertex is a projection placed at a node, plus a tag that tells apart two placements of the same
projection at the same node that were built from different inputs (the paper's (p, n) pairs are
unique per graph; our union of sub-graphs may hold two, and each is charged on its own).
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import NamedTuple

from .errors import MuseError
from .network import Network
from .query import Query, tree_text

#: The node name of the central instance outside the network that the centralised plan sends to
#: (paper §7.1: "all events ... are sent to a central instance outside the network").
CENTRAL = "@central"


class Vertex(NamedTuple):
    """A projection (by its key) hosted at ``node``."""

    key: tuple
    node: str
    tag: str = ""

    @property
    def order_key(self) -> tuple:
        """A total order (keys hold frozensets, which compare by inclusion)."""
        return (self.key[0], tuple(sorted(self.key[1])), self.node, self.tag)

    def label(self, projections: Mapping[tuple, Query]) -> str:
        p = projections[self.key]
        name = p.order[0] if p.is_plain_primitive else p.name
        return f"{name}@{self.node}"


@dataclass(frozen=True)
class VertexInfo:
    """𝔄(v) as one node set per type (a product of origins), and the weight r̂(p)·|𝔄(v)|."""

    cover: Mapping[str, frozenset[str]]
    weight: float

    @property
    def bindings(self) -> int:
        return math.prod(len(s) for s in self.cover.values())


@dataclass(frozen=True)
class Sub:
    """A MuSE graph under construction: sinks, edges, vertex information, and for each vertex the
    remote nodes it sends to (so that the cost of a union is computed incrementally)."""

    sinks: tuple[Vertex, ...]
    edges: frozenset[tuple[Vertex, Vertex]]
    info: Mapping[Vertex, VertexInfo]
    dests: Mapping[Vertex, frozenset[str]]
    cost: float

    @staticmethod
    def empty() -> Sub:
        return Sub((), frozenset(), {}, {}, 0.0)

    @staticmethod
    def of(sinks: tuple[Vertex, ...], info: Mapping[Vertex, VertexInfo]) -> Sub:
        """Vertices without edges."""
        return Sub(sinks, frozenset(), dict(info), {}, 0.0)

    def union(self, *others: Sub, sinks: tuple[Vertex, ...] | None = None) -> Sub:
        edges = self.edges.union(*(o.edges for o in others)) if others else self.edges
        info = dict(self.info)
        dests = dict(self.dests)
        cost = self.cost
        for o in others:
            info.update(o.info)
            for v, d in o.dests.items():
                cur = dests.get(v)
                if cur is None:
                    dests[v] = d
                    cost += o.info[v].weight * len(d)
                elif not d <= cur:
                    cost += o.info[v].weight * len(d - cur)
                    dests[v] = cur | d
        return Sub(self.sinks if sinks is None else sinks, edges, info, dests, cost)

    def link(self, edges, sinks: tuple[Vertex, ...] | None = None) -> Sub:
        """Add edges whose sources are vertices of this graph."""
        new = frozenset(edges) - self.edges
        dests = dict(self.dests)
        cost = self.cost
        for v, w in new:
            if v.node != w.node:
                cur = dests.get(v, frozenset())
                if w.node not in cur:
                    dests[v] = cur | {w.node}
                    cost += self.info[v].weight
        return Sub(
            self.sinks if sinks is None else sinks, self.edges | new, self.info, dests, cost
        )

    def with_info(self, infos: Mapping[Vertex, VertexInfo]) -> Sub:
        """Add vertex information (of new vertices without outgoing edges)."""
        info = dict(self.info)
        info.update(infos)
        return Sub(self.sinks, self.edges, info, self.dests, self.cost)

    def cost_with(self, other: Sub, edges) -> float:
        """The cost of ``self.union(other).link(edges)`` without building it."""
        cost = self.cost
        added: dict[Vertex, set[str]] = {}
        for v, d in other.dests.items():
            extra = d - self.dests.get(v, frozenset())
            if extra:
                added[v] = set(extra)
                cost += other.info[v].weight * len(extra)
        for v, w in edges:
            if v.node != w.node:
                if w.node in self.dests.get(v, ()) or w.node in added.get(v, ()):
                    continue
                added.setdefault(v, set()).add(w.node)
                weight = other.info[v].weight if v in other.info else self.info[v].weight
                cost += weight
        return cost


def _ok(v: Vertex) -> tuple:
    return v.order_key


def sinks_key(sinks: tuple[Vertex, ...]) -> tuple:
    """A total order on sink tuples, for deterministic tie-breaks."""
    return tuple(v.order_key for v in sinks)


def graph_cost(edges: Iterable[tuple[Vertex, Vertex]], info: Mapping[Vertex, VertexInfo]) -> float:
    """c(G) = Σ c(e) with c(e) = r̂(p)·|𝔄(v)| / |V_{v,n'}| for network edges (§4.4).

    Summed over the |V_{v,n'}| edges from v into node n', that is r̂(p)·|𝔄(v)| once per distinct
    destination node: matches go to each node once, however many of its vertices use them.
    """
    dests: dict[Vertex, set[str]] = defaultdict(set)
    for v, w in edges:
        if v.node != w.node:
            dests[v].add(w.node)
    return sum(info[v].weight * len(d) for v, d in dests.items())


def make_info(
    p: Query,
    network: Network,
    preds: Mapping[frozenset, list[VertexInfo]],
    rate: float | None = None,
) -> VertexInfo:
    """The cover of a vertex of ``p`` from its predecessors, grouped by predecessor projection.

    Per predecessor projection e the covers of its vertices are united per type; across the
    projections, a type's origins are those every projection that has the type allows (Def. 4 with
    Property 2: a binding is covered when each of its sub-bags is covered by some predecessor).
    """
    cover: dict[str, frozenset[str]] = {}
    for infos in preds.values():
        united: dict[str, set[str]] = defaultdict(set)
        for inf in infos:
            for t, nodes in inf.cover.items():
                united[t] |= nodes
        for t, nodes in united.items():
            cover[t] = cover[t] & frozenset(nodes) if t in cover else frozenset(nodes)
    missing = p.types - set(cover)
    if missing:
        raise MuseError(f"internal: vertex of {p.name} has no input for {sorted(missing)}")
    info = {t: cover[t] for t in p.order}
    rate = p.rate(network) if rate is None else rate
    return VertexInfo(info, rate * math.prod(len(s) for s in info.values()))


def primitive_sub(p: Query, network: Network) -> Sub:
    """The primitive vertices (E, n) of a single-type projection: one per producing node."""
    (t,) = p.order
    sinks = tuple(Vertex(p.key, n) for n in network.nodes_of(t))
    rate = p.rate(network)
    info = {v: VertexInfo({t: frozenset([v.node])}, rate) for v in sinks}
    return Sub.of(sinks, info)


@dataclass
class Plan:
    """An evaluation plan: a MuSE graph for a query workload in a network.

    ``cost`` is the graph's network cost (matches per second over the network, §4.4),
    ``centralized_cost`` that of sending every event of the queried types to a central instance,
    ``transmission_ratio`` their ratio (§7.1).
    """

    network: Network
    queries: list[Query]
    algorithm: str
    projections: dict[tuple, Query]
    edges: frozenset[tuple[Vertex, Vertex]]
    info: dict[Vertex, VertexInfo]
    sinks: dict[str, tuple[Vertex, ...]]
    planning_seconds: float = 0.0
    stats: dict = field(default_factory=dict)

    @property
    def cost(self) -> float:
        """c(G): the rate of matches sent over the network (per second)."""
        return graph_cost(self.edges, self.info)

    @property
    def centralized_cost(self) -> float:
        """Σ r̂(E)·|nodes producing E| over the queried types (every event to a central sink)."""
        seen: dict[tuple, float] = {}
        for q in self.queries:
            for t in q.order:
                p = q.project([t])
                seen[p.key] = p.rate(self.network) * len(self.network.nodes_of(t))
        return sum(seen.values())

    @property
    def transmission_ratio(self) -> float:
        """cost / centralized_cost (paper §7.1)."""
        return self.cost / self.centralized_cost

    @property
    def vertices(self) -> list[Vertex]:
        """Every vertex, sorted."""
        return sorted(self.info, key=_ok)

    def predecessors(self, v: Vertex) -> list[Vertex]:
        """The vertices with an edge into ``v``."""
        return sorted((w for w, x in self.edges if x == v), key=_ok)

    def sends(self) -> list[tuple[Vertex, str, float]]:
        """(vertex, destination node, matches per second) for every network transfer."""
        dests: dict[Vertex, set[str]] = defaultdict(set)
        for v, w in self.edges:
            if v.node != w.node:
                dests[v].add(w.node)
        return [
            (v, n, self.info[v].weight) for v in sorted(dests, key=_ok) for n in sorted(dests[v])
        ]

    def check_network(self, network: Network) -> None:
        """Raise :class:`MuseError` unless ``network`` is the one this plan was made for."""
        if network.fingerprint() != self.network.fingerprint():
            raise MuseError(
                "this plan was made for another network (nodes, types or rates differ); "
                "plan again with muse.place(queries, network)"
            )

    def explain(self) -> str:
        """Projection -> hosting nodes, and who sends what to whom, as text."""
        lab = {v: v.label(self.projections) for v in self.info}
        lines = [
            f"MuSE plan ({self.algorithm}) for {len(self.queries)} query(ies) on "
            f"{len(self.network.nodes)} nodes",
            f"  cost {self.cost:.6g} matches/s; centralised {self.centralized_cost:.6g}; "
            f"transmission ratio {self.transmission_ratio:.4g}; planned in "
            f"{self.planning_seconds:.3g} s",
            "placements:",
        ]
        hosted: dict[tuple, list[Vertex]] = defaultdict(list)
        for v in self.info:
            if not self.projections[v.key].is_plain_primitive:
                hosted[(v.key, v.tag)].append(v)
        for (key, _tag), vs in sorted(
            hosted.items(), key=lambda kv: (len(kv[0][0][1]), _ok(kv[1][0]))
        ):
            p = self.projections[key]
            nodes = ", ".join(v.node for v in sorted(vs, key=_ok))
            sink = " [sink]" if any(v in s for s in self.sinks.values() for v in vs) else ""
            kind = "multi-sink" if len(vs) > 1 else "single-sink"
            lines.append(
                f"  {p.name} = {tree_text(p.tree)}: {kind} at {nodes}{sink}; "
                f"r̂ = {p.rate(self.network):.4g}/binding"
            )
            for v in sorted(vs, key=_ok):
                preds = ", ".join(lab[w] for w in self.predecessors(v))
                lines.append(f"    {lab[v]} covers {self.info[v].bindings} binding(s) <- {preds}")
        lines.append("network transfers (matches/s):")
        for v, n, rate in self.sends():
            lines.append(f"  {lab[v]} -> {n}: {rate:.4g}")
        return "\n".join(lines)

    def to_dict(self) -> dict:
        """A JSON-friendly summary: costs, placements and transfers."""
        lab = {v: v.label(self.projections) for v in self.info}
        return {
            "algorithm": self.algorithm,
            "cost": self.cost,
            "centralized_cost": self.centralized_cost,
            "transmission_ratio": self.transmission_ratio,
            "planning_seconds": self.planning_seconds,
            "vertices": [
                {"vertex": lab[v], "projection": self.projections[v.key].name, "node": v.node,
                 "bindings": self.info[v].bindings, "weight": self.info[v].weight}
                for v in self.vertices
            ],
            "sends": [{"from": lab[v], "to": n, "rate": r} for v, n, r in self.sends()],
            "sinks": {q: [lab[v] for v in vs] for q, vs in self.sinks.items()},
            "stats": self.stats,
        }

    def __repr__(self) -> str:
        return (
            f"Plan({self.algorithm}, cost={self.cost:.4g}, "
            f"transmission_ratio={self.transmission_ratio:.4g})"
        )

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2)
