"""DecoPa: throughput-guided query decomposition for parallel CEP.

After Akili, Purtzel and Weidlich, "DecoPa: Query Decomposition for Parallel Complex Event
Processing" (SIGMOD 2024; docs/decopa.md)::

    from cep_gpu import decopa, parse_rule
    rule = parse_rule("define Q pattern SEQ(A a, B b, C c) where a.x < b.x within 1 min")
    stats = decopa.Stats(rates={"a": 1000, "b": 1000, "c": 30},
                         selectivity={("a", "b"): 0.01, ("a", "c"): 0.01, ("b", "c"): 0.01})
    plan = decopa.optimize(rule, stats, decopa.Units(4, iota=6000, kappa=60000))
    print(plan.explain())
    rows = decopa.execute(events, plan)          # == cep_gpu.detect(events, rule)
"""

from __future__ import annotations

from .errors import DecompositionError
from .execute import ExecutionReport, execute, execute_stream
from .optimize import STRATEGIES, Operator, Plan, Units, optimize, plan_from_split
from .stats import Stats

__all__ = [
    "STRATEGIES",
    "DecompositionError",
    "ExecutionReport",
    "Operator",
    "Plan",
    "Stats",
    "Units",
    "execute",
    "execute_stream",
    "optimize",
    "plan_from_split",
]
