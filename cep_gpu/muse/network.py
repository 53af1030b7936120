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

from ..errors import is_finite_positive
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
        nodes = spec["nodes"]
        if not isinstance(nodes, Mapping):
            raise MuseError("'nodes' must map node names to lists of event types")
        for n, ts in nodes.items():
            # a string is iterable too: "ABC" would silently become the types A, B and C
            if isinstance(ts, (str, bytes)) or not isinstance(ts, Iterable):
                raise MuseError(f"node {n!r}: its event types must be a list of names, got {ts!r}")
        produces = {str(n): frozenset(map(str, ts)) for n, ts in nodes.items()}
        if not isinstance(spec["rates"], Mapping):
            raise MuseError(f"'rates' must map event types to rates, got {type(spec['rates']).__name__}")
        rates = {str(t): r for t, r in dict(spec["rates"]).items()}
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
