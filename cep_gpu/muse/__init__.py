"""MuSE graphs: multi-sink placement of query projections over a network of event sources.

After Akili and Weidlich, "MuSE Graphs for Flexible Distribution of Event Stream Processing in
Networks" (docs/muse.md)::

    from cep_gpu import muse
    net = muse.Network.generate(nodes=20, types=15, event_node_ratio=0.5, skew=1.5, seed=0)
    q = muse.Query.from_pattern("SEQ(AND(E0, E1), E2)", window=1.0)
    plan = muse.place([q], net, algorithm="amuse")
    print(plan.explain())
    result = muse.simulate(plan, muse.generate_streams(net, [q], duration=60, seed=0))
"""

from __future__ import annotations

from .errors import MuseError
from .graph import CENTRAL, Plan, Vertex
from .network import Network, node_rates
from .placement import ALGORITHMS, place
from .query import Query, parse_queries, selectivity_from_sample
from .simulate import SimulationResult, generate_streams, simulate

__all__ = [
    "ALGORITHMS",
    "CENTRAL",
    "MuseError",
    "Network",
    "Plan",
    "Query",
    "SimulationResult",
    "Vertex",
    "generate_streams",
    "node_rates",
    "parse_queries",
    "place",
    "selectivity_from_sample",
    "simulate",
]
