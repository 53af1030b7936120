"""Event-level simulation of a plan: every node runs cep-gpu over what it produces and receives.

Each vertex v = (p, n) of the plan computes its matches with :func:`cep_gpu.detect` on the
projection's rule (``Query.rule_text``) over the primitive events inside the matches it receives,
and keeps the matches whose restriction to each predecessor projection is a match it received
(a semi-join on the event ids): the matches of p that v can build from its inputs, which is
what a node combining partial matches computes. Messages are counted per (vertex, destination
node), as the cost model charges them (§4.4).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
import pyarrow as pa

from ..errors import EventError, is_finite_positive
from ..events import TimeFormat
from .errors import MuseError
from .graph import Plan, Vertex
from .network import Network, check_node_column
from .query import Query, as_queries


@dataclass
class SimulationResult:
    """What :func:`simulate` returns.

    ``matches``: one row per match found at a sink, in ``detect``'s order (``ts``, query, ``ids``):
    ``query``, ``node`` (the sink), ``ts`` (the time of the match's latest event, in the streams'
    ``ts`` dtype, as ``detect`` gives it) and ``ids`` (an Arrow ``list<int64>`` of the event ids in
    the query's type order, as in ``detect``'s output), then the queries' ``return`` attributes
    when a query has any; ``messages``: one row per network transfer
    (``vertex``, ``to``, ``count``, ``predicted``: the plan's rate times the stream duration);
    ``duration``: seconds of event time; ``ignored``: how many events of each type that no query
    reads were left out (``{type: count}``, empty when there were none).
    """

    matches: pd.DataFrame
    messages: pd.DataFrame
    duration: float
    ignored: dict[str, int] = field(default_factory=dict)

    def composite_events(self) -> pd.DataFrame:
        """The sinks' matches as ``cep_gpu.detect`` returns the queries' composite events: the
        columns ``rule``, ``ts``, ``ids`` and the queries' ``return`` attributes (same rows, order
        and dtypes as ``detect`` over the streams with the queries' rules), then ``node``, the
        sink that found each."""
        out = self.matches.rename(columns={"query": "rule"})
        attrs = [c for c in out.columns if c not in ("rule", "node", "ts", "ids")]
        return out[["rule", "ts", "ids", *attrs, "node"]].reset_index(drop=True)

    @property
    def total_messages(self) -> int:
        return int(self.messages["count"].sum()) if len(self.messages) else 0

    @property
    def predicted_messages(self) -> float:
        return float(self.messages["predicted"].sum()) if len(self.messages) else 0.0

    def match_ids(self, query: str) -> list[tuple[int, ...]]:
        """The sorted id tuples of ``query``'s matches over all sinks (duplicates kept)."""
        m = self.matches[self.matches["query"] == query]
        return sorted(tuple(int(i) for i in ids) for ids in m["ids"])


def simulate(
    plan: Plan,
    streams: pd.DataFrame,
    *,
    network: Network | None = None,
    backend: str = "auto",
    duration: float | None = None,
    node_column: str = "node",
    time_unit: str = "s",
) -> SimulationResult:
    """Run ``plan`` over ``streams`` (columns ``type``, ``ts`` in ``time_unit`` or datetimes, the
    origin node in ``node_column``, optional ``id``, attributes) and return the sinks' matches and
    the counted messages.

    ``network``, when given, must be the plan's network. Events of a type that no query reads
    cannot change a match: they are left out (``SimulationResult.ignored`` counts them per type).
    Events of a type a query reads at a node that the network says does not produce it, or at an
    unknown node, raise :class:`MuseError`. ``duration`` (seconds) defaults to the span of every
    event's ``ts``.
    """
    if not isinstance(plan, Plan):
        raise MuseError(f"plan must be a muse.Plan, got {type(plan).__name__}")
    from ..backends import get_backend

    get_backend(backend)  # an unknown name fails here, also when no node has events to match
    if network is not None:
        plan.check_network(network)
    ev, time, ns, span, ignored = _check_streams(plan, streams, node_column, time_unit)
    if duration is None:
        duration = span
    matches: dict[Vertex, np.ndarray] = {}
    preds: dict[Vertex, list[Vertex]] = defaultdict(list)
    for w, v in plan.edges:
        preds[v].append(w)
    # observed=True: read_events gives categoricals, whose unobserved pairs are of no interest
    # (and pandas warns about the default)
    by_type_node = {k: g["id"].to_numpy() for k, g in ev.groupby(["type", "node"], sort=False, observed=True)}
    order = sorted(plan.info, key=lambda v: (len(plan.projections[v.key].order), v.order_key))
    for v in order:
        p = plan.projections[v.key]
        if not preds[v]:
            ids = by_type_node.get((p.order[0], v.node), np.empty(0, np.int64))
            if p.is_plain_primitive:
                matches[v] = ids.reshape(-1, 1).astype(np.int64)
            else:  # a filtered primitive projection: run its single-event rule
                matches[v] = _detect(p, ev[ev["id"].isin(ids)], backend, time_unit)
            continue
        matches[v] = _combine(plan, v, p, preds[v], matches, ev, backend, time_unit)

    rows = []
    for w, to, rate in plan.sends():
        rows.append({"vertex": w.label(plan.projections), "to": to, "count": len(matches[w]),
                     "predicted": rate * duration})
    messages = pd.DataFrame(rows, columns=["vertex", "to", "count", "predicted"])
    sinks = [(q.name, v.node, matches[v]) for q in plan.queries for v in plan.sinks[q.name]]
    found = _sink_matches(sinks, ev["id"].to_numpy(), ns, time)
    attrs = _sink_attributes(plan, sinks, ev, backend, time_unit)
    if attrs is not None:
        found = pd.concat([found.reset_index(drop=True), attrs.iloc[found.index].reset_index(drop=True)],
                          axis=1)
    return SimulationResult(found.reset_index(drop=True), messages, duration, ignored)


def _sink_attributes(plan, sinks, ev: pd.DataFrame, backend: str, time_unit: str) -> pd.DataFrame | None:
    """The attributes of the sinks' matches (the queries' ``return`` clauses), one row per match
    in the order of ``sinks``' rows, or ``None`` when no query has any. Each sink evaluates its
    query's rule, with its ``return``, on the events of its own matches (those it received):
    ``detect`` there finds each of its matches (and maybe combinations no vertex of the plan
    assigned to it, which are not looked up)."""
    from .. import detect

    queries = {q.name: q for q in plan.queries}
    if not any(q.returns for q in queries.values()):
        return None
    parts = []
    for name, _node, m in sinks:
        q = queries[name]
        if not q.returns or not len(m):
            parts.append(pd.DataFrame(index=range(len(m))))
            continue
        events = ev[ev["id"].isin(np.unique(m))].drop(columns=["node"])
        out = detect(events, q.output_rule_text(), backend=backend, time_unit=time_unit)
        attrs = out.drop(columns=["rule", "ts", "ids"])
        parts.append(attrs.iloc[_rows_of(_id_matrix(out["ids"], m.shape[1]), m)].reset_index(drop=True))
    # the rows of several queries: the union of their attributes, null where a query has none,
    # as detect gives several rules' composite events
    out = pd.concat(parts, ignore_index=True)
    for c in out.columns:  # a string attribute is None where a query lacks it, as in detect
        if out[c].dtype == object:
            out[c] = out[c].astype(object).where(out[c].notna(), None)
    return out


def _id_matrix(ids, width: int) -> np.ndarray:
    """``detect``'s ``ids`` column (Arrow ``list<int64>``, every row ``width`` long; a pandas
    column or an Arrow one) as an (n, width) array, without a Python object per row."""
    import pyarrow as pa

    ids = ids.combine_chunks() if isinstance(ids, pa.ChunkedArray) else pa.array(ids)
    return np.asarray(ids.flatten(), dtype=np.int64).reshape(-1, width)


def _rows_of(table: np.ndarray, wanted: np.ndarray) -> np.ndarray:
    """For each row of ``wanted``, the index of the equal row of ``table`` (every one is there)."""
    keys = _rows(table)
    order = np.argsort(keys, kind="stable")
    found = order[np.searchsorted(keys[order], _rows(wanted))]
    if not np.array_equal(table[found], wanted):
        raise AssertionError("a sink's match is not among detect's matches on its events")
    return found


def _sink_matches(sinks, ids: np.ndarray, ns: np.ndarray, time: TimeFormat) -> pd.DataFrame:
    """The sinks' matches as one frame in ``detect``'s order (ts, query, ids; then the sink), each
    with the time of its latest event (``ns`` per row of ``ids``) in the input's ``ts`` dtype."""
    from ..output import IdsArray

    by_id = np.argsort(ids, kind="stable")
    sorted_ids = ids[by_id]
    n = sum(len(m) for _, _, m in sinks)
    width = max([m.shape[1] for _, _, m in sinks] + [1])
    pad = np.full((n, width), np.iinfo(np.int64).min, np.int64)  # a shorter tuple sorts first
    lens = np.empty(n, np.int64)
    ts_ns = np.empty(n, np.int64)
    names = np.empty(n, dtype=object)
    nodes = np.empty(n, dtype=object)
    start = 0
    for name, node, m in sinks:
        stop = start + len(m)
        pad[start:stop, : m.shape[1]] = m
        lens[start:stop] = m.shape[1]
        if len(m):
            ts_ns[start:stop] = ns[by_id[np.searchsorted(sorted_ids, m)]].max(axis=1)
        names[start:stop] = name
        nodes[start:stop] = node
        start = stop
    name_codes = np.unique(names.astype(str), return_inverse=True)[1] if n else np.empty(0, np.int64)
    node_codes = np.unique(nodes.astype(str), return_inverse=True)[1] if n else np.empty(0, np.int64)
    keys = (node_codes,) + tuple(pad[:, j] for j in reversed(range(width))) + (name_codes, ts_ns)
    order = np.lexsort(keys) if n else np.empty(0, np.int64)
    pad, lens = pad[order], lens[order]
    offsets = np.zeros(n + 1, np.int64)
    np.cumsum(lens, out=offsets[1:])
    flat = pad[np.arange(width)[None, :] < lens[:, None]]
    ids_arr = pa.ListArray.from_arrays(pa.array(offsets.astype(np.int32)), pa.array(flat, type=pa.int64()))
    ts = time.from_ns(ts_ns[order])
    # indexed by each row's position in ``sinks`` (what _sink_attributes' rows follow)
    return pd.DataFrame({
        "query": names[order],
        "node": nodes[order],
        "ts": ts.reset_index(drop=True) if isinstance(ts, pd.Series) else ts,
        "ids": pd.Series(IdsArray(pa.chunked_array([ids_arr], type=pa.list_(pa.int64())))),
    }).set_axis(order)


def _check_streams(plan: Plan, streams: pd.DataFrame, node_column: str = "node", time_unit: str = "s"):
    """The events of the types the plan's queries read, with int64 ids (the ``id`` column, else
    the row positions of all of ``streams``) and their origin in ``node``; their time format, each
    kept row's time in ns (as ``detect`` reads ``ts``: numbers in ``time_unit`` or datetimes), the
    span of all events' times in seconds, and ``{type: count}`` of the events left out."""
    from ..events.checks import check_time_unit, null_error
    from ..events.from_pandas import convert_ts, pandas_ids, pandas_types

    if not isinstance(streams, pd.DataFrame):
        raise MuseError(f"streams must be a pandas DataFrame, got {type(streams).__name__}")
    check_node_column(node_column)
    for col in ("type", "ts", node_column):
        if col not in streams.columns:
            what = " (the origin node of each event)" if col == node_column else ""
            raise MuseError(f"streams need a {col!r} column{what}; their columns: "
                            f"{', '.join(map(repr, map(str, streams.columns)))}")
    if node_column != "node" and "node" in streams.columns:
        raise MuseError(f"streams have a 'node' column besides the node column {node_column!r}: "
                        "rename one of them")
    try:
        check_time_unit(time_unit)
        time, ns = convert_ts(streams["ts"], time_unit)
        ids = pandas_ids(streams["id"]) if "id" in streams.columns else np.arange(len(streams), dtype=np.int64)
        isna = streams["type"].isna().to_numpy()
        if isna.any():
            raise null_error("type", isna, ": every event needs a type")
    except EventError as err:
        raise MuseError(f"streams: {err}") from None
    # numbers in `type` are refused as detect refuses them, with its EventError (they matched
    # no query's type name and were silently left out as types no query reads)
    pandas_types(streams["type"])
    if len(np.unique(ids)) != len(ids):
        raise MuseError("streams: event ids must be unique")
    span = float(ns.max() - ns.min()) / 1e9 if len(ns) else 0.0
    ev = streams.copy()
    if node_column != "node":
        # the node column stays an attribute too: a query may read it (h.zone = s.zone with
        # --node-column zone), as cep-gpu run and the selectivity sample read it
        ev["node"] = streams[node_column]
    ev["id"] = ids
    read = {t for q in plan.queries for t in q.types}
    types = ev["type"].astype(str)
    keep = types.isin(read).to_numpy()
    ignored = {str(t): int(n) for t, n in types[~keep].value_counts(sort=False).sort_index().items()}
    if not keep.all():
        ev, ns = ev[keep], ns[keep]
    isna = ev["node"].isna().to_numpy()
    if isna.any():
        row = int(np.flatnonzero(keep)[np.flatnonzero(isna)[0]])
        raise MuseError(f"streams: column {node_column!r} is null at row {row}: every event needs "
                        "the node that emitted it")
    ev["node"] = ev["node"].astype(str)
    net = plan.network
    unknown = sorted(set(ev["node"]) - set(net.nodes))
    if unknown:
        raise MuseError(f"streams: node(s) {unknown[:5]} are not in the plan's network")
    pairs = ev[["node", "type"]].drop_duplicates()
    bad = [(n, t) for n, t in pairs.itertuples(index=False) if t not in net.produces[n]]
    if bad:
        raise MuseError(
            f"streams: node {bad[0][0]!r} emits type {bad[0][1]!r}, which a query reads and the "
            "network says it does not produce (is this plan for another network?)"
        )
    return ev, time, ns, span, ignored


def _detect(p: Query, events: pd.DataFrame, backend: str, time_unit: str = "s") -> np.ndarray:
    from .. import detect

    k = len(p.order)
    if len(events) == 0:
        return np.empty((0, k), np.int64)
    out = detect(events.drop(columns=["node"]), p.rule_text(), backend=backend, time_unit=time_unit,
                 output="arrow")
    return _id_matrix(out.column("ids"), k)


def _rows(a: np.ndarray) -> np.ndarray:
    """Each row of an int64 matrix as one opaque value, for set operations on rows."""
    a = np.ascontiguousarray(a, dtype=np.int64)
    return a.view(np.dtype((np.void, a.dtype.itemsize * a.shape[1]))).ravel()


def _combine(plan, v, p, pred_vertices, matches, ev, backend, time_unit="s") -> np.ndarray:
    groups: dict[tuple[str, ...], list[np.ndarray]] = defaultdict(list)
    for w in pred_vertices:
        groups[plan.projections[w.key].order].append(matches[w])
    received = {}
    for order, arrays in groups.items():
        a = np.concatenate(arrays) if arrays else np.empty((0, len(order)), np.int64)
        if len(a) == 0:
            return np.empty((0, len(p.order)), np.int64)
        received[order] = np.unique(a, axis=0)
    candidates = np.unique(np.concatenate([a.ravel() for a in received.values()]))
    found = _detect(p, ev[ev["id"].isin(candidates)], backend, time_unit)
    keep = np.ones(len(found), bool)
    pos = {t: i for i, t in enumerate(p.order)}
    for order, a in received.items():
        cols = [pos[t] for t in order]
        keep &= np.isin(_rows(found[:, cols]), _rows(a))
    return found[keep]


#: most events :func:`generate_streams` makes (about 3 GB of columns)
MAX_GENERATED_EVENTS = 100_000_000


def generate_streams(
    network: Network,
    queries,
    duration: float,
    seed: int = 0,
    attributes: Sequence[str] = ("k", "v"),
    k_values: int = 10,
) -> pd.DataFrame:
    """Poisson event streams for the types the queries use (paper §7.1): each node emits each type
    it produces at the type's rate for ``duration`` seconds. Attributes: ``k`` uniform in
    ``[0, k_values)`` (so ``a.k = b.k`` has selectivity 1/k_values); every other name (``v``, ...)
    uniform in [0, 1)."""
    if not is_finite_positive(duration):  # 0 gave no events, and a simulation of nothing
        raise MuseError(f"duration must be a finite number of seconds > 0, got {duration!r}")
    qs = as_queries(queries)
    types = sorted({t for q in qs for t in q.types})
    expected = sum(network.rate(t) * duration for n in network.nodes for t in types
                   if t in network.produces[n])
    if expected > MAX_GENERATED_EVENTS:  # numpy would fail with a MemoryError (or hang) instead
        raise MuseError(f"duration {duration} s gives about {expected:.3g} events at the network's "
                        f"rates, over {MAX_GENERATED_EVENTS:.0e}: shorten the duration")
    rng = np.random.default_rng(seed)
    parts = []
    for n in network.nodes:
        for t in types:
            if t not in network.produces[n]:
                continue
            count = rng.poisson(network.rate(t) * duration)
            ts = np.sort(rng.uniform(0, duration, count))
            df = pd.DataFrame({"type": t, "ts": ts, "node": n})
            if "k" in attributes:
                df["k"] = rng.integers(0, k_values, count)
            for name in attributes:
                if name != "k":
                    df[name] = rng.random(count)
            parts.append(df)
    if not parts:
        raise MuseError("no node produces any type of the queries")
    ev = pd.concat(parts, ignore_index=True).sort_values(["ts", "node", "type"], kind="stable")
    ev = ev.reset_index(drop=True)
    ev["id"] = np.arange(len(ev), dtype=np.int64)
    return ev
