"""Event-sourced networks Γ = (N, f, r) (paper §2.1): nodes, the types each node produces, rates.

Rates follow the paper's model: ``r`` assigns a rate to an event *type*, and every node that
produces the type emits its events at that rate (events per second, paper Example 2: a type
produced by two nodes costs ``2 r(E)`` to collect).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from ..errors import CepError, is_finite_positive
from .errors import MuseError

#: The largest rate :meth:`Network.generate` draws (paper §7.2: skew 1.1 gives rate differences
#: "up to 1000000x"; numpy's Zipf sampler is unbounded, so it is clipped there).
MAX_GENERATED_RATE = 1e6


@dataclass(frozen=True)
class Network:
    """An event-sourced network: ``produces[node]`` = types node emits, ``rates[type]`` = events/s.

    All nodes may exchange events directly (the paper's complete graph, §2.1). Build one with
    :meth:`from_dict` or :meth:`generate`.
    """

    produces: Mapping[str, frozenset[str]]
    rates: Mapping[str, float]
    links: frozenset[frozenset[str]] | None = field(default=None)

    def __post_init__(self) -> None:
        if not self.produces:
            raise MuseError("empty network: give at least one node")
        for node, types in self.produces.items():
            if not isinstance(node, str) or not node:
                raise MuseError(f"node names must be non-empty strings, got {node!r}")
            for t in types:
                if t not in self.rates:
                    raise MuseError(f"node {node!r} produces type {t!r}, which has no rate")
        for t, r in self.rates.items():
            if not is_finite_positive(r):
                raise MuseError(f"rate of type {t!r} must be a positive finite number, got {r!r}")
        produced = set().union(*self.produces.values())
        unproduced = sorted(t for t in self.rates if t not in produced)
        if unproduced:  # a rate is per producing node (§2.1): such a rate changes nothing, a typo?
            raise MuseError(
                f"rate given for type(s) {', '.join(map(repr, unproduced))}, which no node produces "
                "(a rate is events/s at each node producing the type; add the type to a node's "
                "types or remove its rate)")
        if self.links is not None:
            self._check_connected()

    def _check_connected(self) -> None:
        nodes = set(self.produces)
        adj: dict[str, set[str]] = {n: set() for n in nodes}
        for link in self.links or ():
            a, b = tuple(link) if len(link) == 2 else (next(iter(link)),) * 2
            if a not in nodes or b not in nodes:
                raise MuseError(f"link {sorted(link)} names a node that is not in the network")
            adj[a].add(b)
            adj[b].add(a)
        start = min(nodes)
        seen, todo = {start}, [start]
        while todo:
            for m in adj[todo.pop()] - seen:
                seen.add(m)
                todo.append(m)
        if seen != nodes:
            raise MuseError(
                f"disconnected network: nodes {sorted(nodes - seen)} cannot reach {start!r}"
            )

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_dict(cls, spec: Mapping) -> Network:
        """``{"nodes": {"n1": ["A", "B"], ...}, "rates": {"A": 10.0, ...}, "links": [[a, b], ...]}``.

        ``links`` is optional; without it every pair of nodes is linked (paper §2.1). With it, the
        network must be connected.
        """
        if not isinstance(spec, Mapping) or "nodes" not in spec or "rates" not in spec:
            raise MuseError("a network spec needs 'nodes' (node -> types) and 'rates' (type -> rate)")
        unknown = [k for k in spec if k not in ("nodes", "rates", "links")]
        if unknown:  # a typo ("link") would otherwise silently give another network
            raise MuseError(f"unknown key(s) {', '.join(map(repr, unknown))} in the network spec "
                            "(its keys: 'nodes', 'rates' and optionally 'links')")
        nodes = spec["nodes"]
        if not isinstance(nodes, Mapping):
            raise MuseError("'nodes' must map node names to lists of event types")
        for n, ts in nodes.items():
            # a string is iterable too: "ABC" would silently become the types A, B and C
            if isinstance(ts, (str, bytes)) or not isinstance(ts, Iterable):
                raise MuseError(f"node {n!r}: its event types must be a list of names, got {ts!r}")
        produces = {str(n): frozenset(map(str, ts)) for n, ts in nodes.items()}
        if len(produces) < len(nodes):  # 1 and "1" are one node: the last would silently win
            twice = next(n for n in produces if sum(str(m) == n for m in nodes) > 1)
            raise MuseError(f"node {twice!r} is given twice (as {[m for m in nodes if str(m) == twice]!r})")
        if not isinstance(spec["rates"], Mapping):
            raise MuseError(f"'rates' must map event types to rates, got {type(spec['rates']).__name__}")
        rates = {str(t): r for t, r in dict(spec["rates"]).items()}
        if len(rates) < len(spec["rates"]):
            twice = next(t for t in rates if sum(str(u) == t for u in spec["rates"]) > 1)
            raise MuseError(f"rate of type {twice!r} is given twice "
                            f"(as {[u for u in spec['rates'] if str(u) == twice]!r})")
        links = spec.get("links")
        if links is not None:
            links = frozenset(frozenset(map(str, pair)) for pair in links)
        return cls(produces, rates, links)

    def to_dict(self) -> dict:
        """The spec :meth:`from_dict` reads back."""
        out: dict = {
            "nodes": {n: sorted(ts) for n, ts in sorted(self.produces.items())},
            "rates": dict(sorted(self.rates.items())),
        }
        if self.links is not None:
            out["links"] = sorted(sorted(link) for link in self.links)
        return out

    @classmethod
    def from_events(cls, events, node_column: str = "node", time_unit: str = "s") -> Network:
        """The network ``events`` were observed on: each node produces the types it emitted, and
        the rate of a type is its events per second per producing node over the events' time span
        (the latest ``ts`` minus the earliest), ``r(E) = events of E / (span · nodes emitting E)``.

        The paper's model has one rate per type (§2.1); a type emitted at different rates by its
        nodes gets their mean, so that collecting it costs what the file shows (``k · r(E)``).
        :func:`node_rates` gives the rate of every (node, type).

        ``events``: a pandas DataFrame or an Arrow table with ``type``, ``ts`` (numbers in
        ``time_unit`` or datetimes, as :func:`cep_gpu.detect` reads them) and ``node_column``.
        """
        return cls.from_rates(node_rates(events, node_column, time_unit))

    @classmethod
    def from_rates(cls, rates: pd.DataFrame) -> Network:
        """The network of :func:`node_rates`' table (``node``, ``type``, ``rate``), as
        :meth:`from_events` builds it."""
        produces: dict[str, set[str]] = {}
        for node, t in zip(rates["node"], rates["type"], strict=True):
            produces.setdefault(node, set()).add(t)
        per_type = rates.groupby("type", sort=True)["rate"].mean()
        return cls({n: frozenset(ts) for n, ts in produces.items()},
                   {str(t): float(r) for t, r in per_type.items()})

    @classmethod
    def generate(
        cls,
        nodes: int = 20,
        types: int | Iterable[str] = 15,
        event_node_ratio: float = 0.5,
        skew: float = 1.5,
        seed: int = 0,
        max_rate: float = MAX_GENERATED_RATE,
    ) -> Network:
        """A random network as in the paper's simulation (§7.1).

        Each node produces each type with probability ``event_node_ratio`` (at least one type per
        node, at least one node per type). Rates are drawn from numpy's Zipf distribution with
        parameter ``skew`` (> 1), clipped to ``max_rate`` (default :data:`MAX_GENERATED_RATE`):
        skew 2.0 gives nearly equal rates, skew 1.1 differences up to 10^6 (our reading of §7.2;
        docs/muse.md).
        """
        if isinstance(nodes, bool) or not isinstance(nodes, (int, np.integer)) or nodes < 1:
            raise MuseError(f"nodes must be an int >= 1, got {nodes!r}")
        if isinstance(types, bool) or (isinstance(types, float)):
            raise MuseError(f"types must be an int >= 1 or a list of type names, got {types!r}")
        for name, v in (("event_node_ratio", event_node_ratio), ("skew", skew), ("max_rate", max_rate)):
            if isinstance(v, bool) or not isinstance(v, (int, float, np.number)):
                raise MuseError(f"{name} must be a number, got {v!r}")
        if not 0 < event_node_ratio <= 1:
            raise MuseError(f"event_node_ratio must be in (0, 1], got {event_node_ratio}")
        if not (math.isfinite(skew) and skew > 1):  # NaN passed 'skew <= 1' and failed in numpy
            raise MuseError(f"skew (the Zipf parameter) must be a finite number > 1, got {skew}")
        if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
            raise MuseError(f"seed must be an int, got {seed!r}")
        names = [f"E{i}" for i in range(types)] if isinstance(types, int) else list(types)
        if not names:
            raise MuseError("types must be >= 1")
        rng = np.random.default_rng(seed)
        rates = np.minimum(rng.zipf(skew, len(names)).astype(float), float(max_rate))
        has = rng.random((nodes, len(names))) < event_node_ratio
        for i in range(nodes):
            if not has[i].any():
                has[i, rng.integers(len(names))] = True
        for j in range(len(names)):
            if not has[:, j].any():
                has[rng.integers(nodes), j] = True
        produces = {
            f"n{i}": frozenset(t for t, h in zip(names, has[i], strict=True) if h)
            for i in range(nodes)
        }
        return cls(produces, {t: float(r) for t, r in zip(names, rates, strict=True)})

    # ------------------------------------------------------------------ queries
    @property
    def nodes(self) -> tuple[str, ...]:
        """The node names, sorted."""
        return tuple(sorted(self.produces))

    def nodes_of(self, event_type: str) -> tuple[str, ...]:
        """The nodes that produce ``event_type``, sorted."""
        return tuple(n for n in self.nodes if event_type in self.produces[n])

    def rate(self, event_type: str) -> float:
        """Events per second of ``event_type`` at each node that produces it."""
        return float(self.rates[event_type])

    def check_types(self, types: Iterable[str], what: str) -> None:
        """Raise :class:`MuseError` if some type of ``types`` is produced by no node."""
        missing = sorted(t for t in types if not self.nodes_of(t))
        if missing:
            raise MuseError(f"{what}: no node produces type(s) {', '.join(missing)}")

    def fingerprint(self) -> tuple:
        """A hashable value equal for equal networks (plans remember their network by it)."""
        return (
            tuple(sorted((n, tuple(sorted(ts))) for n, ts in self.produces.items())),
            tuple(sorted(self.rates.items())),
        )

    def scaled(self, factor: float) -> Network:
        """The same network with every rate multiplied by ``factor``."""
        return Network(
            dict(self.produces), {t: r * factor for t, r in self.rates.items()}, self.links
        )


#: the columns that mean the same in every event file (docs/api.md): none of them names nodes
EVENT_COLUMNS = {"type": "type", "ts": "timestamp", "id": "id"}


def check_node_column(node_column) -> str:
    """``node_column``, a column that can name the node that emitted each event; else a
    :class:`MuseError`: not a column name, or ``type``, ``ts`` or ``id``, which have their own
    meaning (``ts`` made a node of every timestamp; ``type`` one per type, and simulate then
    lacked the type column)."""
    if not isinstance(node_column, str) or not node_column:
        raise MuseError(f"node_column must be a column name, got {node_column!r}")
    if node_column in EVENT_COLUMNS:
        raise MuseError(f"node_column {node_column!r} is the events' {EVENT_COLUMNS[node_column]} column: the "
                        "node column must be another one, naming the node that emitted each event")
    return node_column


def node_rates(events, node_column: str = "node", time_unit: str = "s") -> pd.DataFrame:
    """Events per second of each type at each node over the events' time span: one row per
    (node, type) that occurs, sorted, with the columns ``node``, ``type``, ``events`` (how many)
    and ``rate`` (``events / span``); ``attrs["span_s"]`` holds the span (the latest ``ts`` minus
    the earliest) in seconds. What :meth:`Network.from_events` averages per type.

    Raises :class:`MuseError` for a ``node_column`` that :func:`check_node_column` refuses, a
    missing ``type``, ``ts`` or ``node_column`` column (naming the columns there are), no events, a null type or node (naming the first such row) and
    events that all have the same timestamp (no span to measure a rate over)."""
    import pyarrow as pa

    from ..events import frame_from_arrow
    from ..events.checks import check_time_unit, null_error
    from ..events.from_pandas import convert_ts, pandas_types

    if isinstance(events, (pa.Table, pa.RecordBatch)):
        events = frame_from_arrow(pa.table(events))
    if not isinstance(events, pd.DataFrame):
        raise MuseError(f"events must be a pandas DataFrame or an Arrow table, got {type(events).__name__}")
    check_node_column(node_column)
    columns = ", ".join(map(repr, map(str, events.columns))) or "none"
    if node_column not in events.columns:
        raise MuseError(f"the events have no node column {node_column!r} naming the node that "
                        f"emitted each event (their columns: {columns})")
    for col in ("type", "ts"):
        if col not in events.columns:
            raise MuseError(f"the events have no {col!r} column (their columns: {columns})")
    if len(events) == 0:
        raise MuseError("no events: rates need events over a time span")
    for col, what in ((node_column, "the node that emitted it"), ("type", "a type")):
        isna = events[col].isna().to_numpy()
        if isna.any():
            raise MuseError(f"{null_error(col, isna)}: every event needs {what}")
    try:
        check_time_unit(time_unit)
        _, ns = convert_ts(events["ts"], time_unit)
        # numbers in `type` are refused as detect refuses them (they became type names '1', '2'
        # that no query reads)
        pandas_types(events["type"])
    except CepError as err:
        raise MuseError(f"events: {err}") from None
    span = (int(ns.max()) - int(ns.min())) / 1e9
    if span <= 0:
        raise MuseError(f"all {len(events)} event(s) have the same timestamp ({events['ts'].iloc[0]}): "
                        "a rate needs events over a time span")
    keys = pd.DataFrame({"node": events[node_column].astype(str).to_numpy(),
                         "type": events["type"].astype(str).to_numpy()})
    counts = keys.groupby(["node", "type"], sort=True).size().rename("events").reset_index()
    counts["events"] = counts["events"].astype(np.int64)
    counts["rate"] = counts["events"] / span
    counts.attrs["span_s"] = span
    return counts
