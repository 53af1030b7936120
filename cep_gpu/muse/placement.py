"""Planning: aMuSE, aMuSE* (paper §6, Algorithms 2 and 3), oOP and centralised evaluation.

``place(queries, network, algorithm)`` returns a :class:`~cep_gpu.muse.graph.Plan`.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Sequence

from .errors import MuseError
from .graph import CENTRAL, Plan, Sub, Vertex, make_info, primitive_sub, sinks_key
from .network import Network
from .query import Query, as_queries, leaves

ALGORITHMS = ("amuse", "amuse*", "oop", "centralized")
#: Most combinations enumerated per projection (Alg. 2 line 7 enumerates all; we stop here, taking
#: combinations with the largest parts first, so planning stays in seconds for 6-type queries).
MAX_COMBINATIONS = 5000


def place(
    queries,
    network: Network,
    algorithm: str = "amuse",
    *,
    max_combinations: int = MAX_COMBINATIONS,
) -> Plan:
    """Plan ``queries`` (Query objects or rule text) over ``network``.

    ``algorithm``: ``"amuse"`` and ``"amuse*"`` (§6.2), ``"oop"`` (optimal single-sink operator
    placement, exhaustive), ``"centralized"`` (every event to a central instance, §7.1).
    Queries are planned one after the other and their graphs united (§6.2 "Multi-Query
    Extension"): vertices the queries share (the primitive events) are sent to a node once.
    """
    if not isinstance(network, Network):
        raise MuseError(f"network must be a muse.Network, got {type(network).__name__}")
    if algorithm not in ALGORITHMS:
        raise MuseError(f"unknown algorithm {algorithm!r}; choose one of {', '.join(ALGORITHMS)}")
    qs = as_queries(queries)
    for q in qs:
        network.check_types(q.types, f"query {q.name}")
    t0 = time.perf_counter()
    subs: list[Sub] = []
    projections: dict[tuple, Query] = {}
    sinks: dict[str, tuple[Vertex, ...]] = {}
    stats: dict = {}
    for q in qs:
        # later queries are chosen by their marginal cost over the graphs placed so far, so that
        # events and matches already sent to a node are reused (§6.2 Multi-Query Extension)
        base = subs[0].union(*subs[1:]) if subs else Sub.empty()
        builder = _Builder(q, network, projections, base)
        if algorithm == "centralized":
            sub = builder.centralized()
        elif algorithm == "oop":
            sub = builder.oop()
        else:
            sub = builder.amuse(star=algorithm == "amuse*", max_combinations=max_combinations)
        stats[q.name] = builder.stats
        subs.append(sub)
        sinks[q.name] = sub.sinks
    total = subs[0].union(*subs[1:])
    return Plan(
        network, qs, algorithm, projections, total.edges, dict(total.info), sinks,
        time.perf_counter() - t0, stats,
    )


class _Builder:
    def __init__(
        self, q: Query, network: Network, projections: dict[tuple, Query], base: Sub
    ) -> None:
        self.q, self.net, self.projections, self.base = q, network, projections, base
        self.stats: dict = {}
        self._rate: dict[frozenset, float] = {}

    def proj(self, types) -> Query:
        p = self.q.project(types)
        self.projections.setdefault(p.key, p)
        return p

    def rate(self, s: frozenset) -> float:
        if s not in self._rate:
            self._rate[s] = self.proj(s).rate(self.net)
        return self._rate[s]

    def prim(self, t: str) -> Sub:
        """The primitive vertices of ``t``. Where earlier queries already send a vertex's events to
        some nodes, those sends are already paid: this query's graphs start from them at no cost,
        so every comparison in the construction is by marginal cost (§6.2, Multi-Query
        Extension)."""
        sub = primitive_sub(self.proj([t]), self.net)
        paid = {v: self.base.dests[v] for v in sub.sinks if v in self.base.dests}
        return Sub(sub.sinks, sub.edges, sub.info, paid, 0.0) if paid else sub

    # ------------------------------------------------------------------ baselines
    def centralized(self) -> Sub:
        q = self.proj(self.q.types)
        prims = [self.prim(t) for t in q.order]
        sink = Vertex(q.key, CENTRAL, "central")
        edges = frozenset((v, sink) for s in prims for v in s.sinks)
        info = make_info(q, self.net, {s.sinks[0].key: [s.info[v] for v in s.sinks] for s in prims})
        return prims[0].union(*prims[1:]).link(edges, sinks=(sink,)).with_info({sink: info})

    def oop(self) -> Sub:
        """Optimal operator placement (§7.1 baseline): each composite operator of the query's tree
        at one node, the assignment of least (marginal) cost.

        The cost decomposes over the tree's edges (a child's output goes to its parent's node
        only; primitive events already sent to a node by earlier queries are free), so a dynamic
        program over the tree finds the same optimum as exhaustive search over all |N|^|O_c|
        assignments, in O(|O_c| |N|^2)."""
        composites: list = []

        def walk(t):
            if not isinstance(t, str):
                for c in t[1]:
                    walk(c)
                composites.append(t)  # children before parents

        walk(self.q.tree)
        if not composites:  # a single-type query: its events are its matches
            return self.prim(self.q.order[0])
        nodes = self.net.nodes
        prims = {t: self.prim(t) for t in self.q.order}
        sent = self.base.dests
        best: dict[int, dict[str, tuple[float, dict]]] = {}
        for op in composites:
            table: dict[str, tuple[float, dict]] = {}
            for n in nodes:
                total, where = 0.0, {id(op): n}
                for c in op[1]:
                    if isinstance(c, str):
                        for w in prims[c].sinks:
                            if w.node != n and n not in sent.get(w, ()):
                                total += prims[c].info[w].weight
                        continue
                    weight = self.rate(frozenset(leaves(c))) * n_bindings(self, c)
                    cost_c, where_c = min(
                        ((best[id(c)][m][0] + (weight if m != n else 0.0), best[id(c)][m][1])
                         for m in nodes),
                        key=lambda x: x[0],
                    )
                    total += cost_c
                    where.update(where_c)
                table[n] = (total, where)
            best[id(op)] = table
        _, where = min(best[id(composites[-1])].values(), key=lambda x: x[0])
        self.stats = {"method": "tree dp", "assignment_space": len(nodes) ** len(composites)}
        return self._tree_graph(composites, where, prims)

    def _tree_graph(self, composites, where: dict, prims: dict) -> Sub:
        made: dict[int, Sub] = {}
        sub = None
        for op in composites:
            p = self.proj(leaves(op))
            v = Vertex(p.key, where[id(op)], "oop")
            kids = [prims[c] if isinstance(c, str) else made[id(c)] for c in op[1]]
            edges = frozenset((w, v) for k in kids for w in k.sinks)
            info = make_info(p, self.net, {k.sinks[0].key: [k.info[w] for w in k.sinks] for k in kids})
            sub = kids[0].union(*kids[1:]).link(edges, sinks=(v,)).with_info({v: info})
            made[id(op)] = sub
        assert sub is not None
        return sub

    # ------------------------------------------------------------------ aMuSE (§6.2)
    def amuse(self, star: bool, max_combinations: int) -> Sub:
        q, net = self.q, self.net
        full = frozenset(q.types)
        if len(full) == 1:
            return self.prim(q.order[0])
        prim_rate = {t: self.rate(frozenset([t])) for t in full}
        bindings = {}

        def n_bind(s: frozenset) -> int:
            if s not in bindings:
                bindings[s] = self.proj(s).bindings(net)
            return bindings[s]

        # Alg. 2: beneficial projections (Def. 13 on the primitive combination)
        ben: list[frozenset] = []
        for k in range(2, len(full)):
            for s in map(frozenset, itertools.combinations(sorted(full), k)):
                if self.rate(s) > sum(prim_rate[t] for t in s):
                    continue
                # aMuSE*: some primitive input must have r̂(e) >= r̂(p)·|𝔈(p)| (§6.2)
                if star and not any(prim_rate[t] >= self.rate(s) * n_bind(s) for t in s):
                    continue
                ben.append(s)
        ben.append(full)
        combos = {s: _combinations(s, [b for b in ben if b < s], max_combinations) for s in ben}
        self.stats = {
            "projections": len(ben),
            "combinations": sum(len(c) for c in combos.values()),
        }

        # Alg. 3: bottom-up, one best graph per (projection, placement option)
        G: dict[frozenset, dict[str, Sub]] = {frozenset([t]): {t: self.prim(t)} for t in full}
        for s in sorted(ben, key=lambda s: (len(s), sorted(s))):
            p = self.proj(s)
            best: dict[str, Sub] = {}
            for c in combos[s]:
                self._place(p, s, c, G, best, star, n_bind)
            if not best and star:  # aMuSE* left no local option: fall back to all (documented)
                for c in combos[s]:
                    self._place(p, s, c, G, best, False, n_bind)
            if best:
                G[s] = best
        return min(G[full].values(), key=lambda sub: (self.marginal(sub), sinks_key(sub.sinks)))

    def marginal(self, sub: Sub) -> float:
        """The cost ``sub`` adds to the graphs of the queries placed before."""
        if not self.base.edges:
            return sub.cost
        return self.base.cost_with(sub, ()) - self.base.cost

    def _place(self, p: Query, s: frozenset, c, G, best: dict, star: bool, n_bind) -> None:
        part = self._partitioning_input(c, n_bind)
        if part is not None:
            for po, base in G[part].items():
                nodes = sorted({v.node for v in base.sinks})
                self._keep(best, po, self._construct(p, c, part, po, nodes, G, True))
            return
        threshold = self.rate(s) * n_bind(s)
        for e in sorted(c, key=sorted):
            if star and self.rate(e) < threshold:  # aMuSE*: only worthwhile local placements
                continue
            for po, base in G[e].items():
                for node in sorted({v.node for v in base.sinks}):
                    self._keep(best, po, self._construct(p, c, e, po, [node], G, False))

    def _partitioning_input(self, c, n_bind) -> frozenset | None:
        """Alg. 3 getMSP: a predecessor e with r̂(e) > Σ_{ẽ≠e} r̂(ẽ)·|𝔈(ẽ)| (Eq. 6, strict as in
        line 20); the one of highest rate if several."""
        found = [
            e for e in c
            if self.rate(e) > sum(self.rate(o) * n_bind(o) for o in c if o != e)
        ]
        return max(found, key=lambda e: (self.rate(e), sorted(e))) if found else None

    @staticmethod
    def _keep(best: dict, po: str, sub: Sub) -> None:
        if po not in best or (sub.cost, sinks_key(sub.sinks)) < (
            best[po].cost, sinks_key(best[po].sinks)
        ):
            best[po] = sub

    def _construct(self, p, c, pred, po, nodes, G, multi) -> Sub:
        """Alg. 3 ConstructSubgraph: sinks of p at ``nodes``, fed by G[pred][po] (locally per node
        when ``multi``), and for each other predecessor the graph of least resulting cost."""
        base = G[pred][po]
        sinks = tuple(Vertex(p.key, n, po) for n in nodes)
        if multi:
            edges = [(w, v) for w in base.sinks for v in sinks if w.node == v.node]
        else:
            edges = [(w, v) for w in base.sinks for v in sinks]
        sub = base.link(edges, sinks=sinks)
        inputs: dict[Vertex, dict[frozenset, list]] = {v: {} for v in sinks}
        for w, v in edges:
            inputs[v].setdefault(pred, []).append(sub.info[w])
        for e in sorted(c, key=sorted):
            if e == pred:
                continue
            options = []
            for po_e, g in G[e].items():
                link = [(w, v) for w in g.sinks for v in sinks]
                options.append((sub.cost_with(g, link), po_e, g, link))
            _, _, g, link = min(options, key=lambda o: (o[0], o[1]))
            sub = sub.union(g).link(link, sinks=sinks)
            for w, v in link:
                inputs[v].setdefault(e, []).append(g.info[w])
        rate = self.rate(p.types)
        infos = {v: make_info(p, self.net, inputs[v], rate) for v in sinks}
        return sub.with_info(infos)


def n_bindings(builder: _Builder, tree) -> int:
    """|𝔈| of the projection onto a sub-tree's types."""
    return builder.proj(leaves(tree)).bindings(builder.net)


def _combinations(s: frozenset, candidates: Sequence[frozenset], limit: int) -> list[tuple]:
    """Non-redundant correct combinations of ``s`` (Def. 15, Alg. 2 lines 14-20): sets of >= 2
    predecessor projections (candidates or single types) whose types cover ``s`` and none of which
    is covered by the others. The primitive combination comes first; then larger parts first."""
    prims = [frozenset([t]) for t in sorted(s)]
    out: list[tuple] = [tuple(prims)]
    seen = {frozenset(prims)}
    cands = sorted(set(candidates), key=lambda c: (-len(c), sorted(c))) + prims

    def dfs(chosen: list[frozenset], covered: frozenset) -> None:
        if len(out) >= limit:
            return
        if covered == s:
            key = frozenset(chosen)
            if len(chosen) >= 2 and key not in seen and _non_redundant(chosen):
                seen.add(key)
                out.append(tuple(sorted(chosen, key=sorted)))
            return
        t = min(s - covered)
        for cnd in cands:
            if t in cnd and cnd not in chosen:
                dfs(chosen + [cnd], covered | cnd)

    dfs([], frozenset())
    return out


def _non_redundant(parts: Sequence[frozenset]) -> bool:
    for i, part in enumerate(parts):
        rest = frozenset().union(*(o for j, o in enumerate(parts) if j != i))
        if part <= rest:
            return False
    return True
