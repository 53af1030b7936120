"""The benchmark workloads of docs/performance.md: seq3, rules1000 and museum.

Each generator is seeded and vectorised, so a sweep regenerates its input in milliseconds and two
runs with the same seed see the same events.

* **seq3** (the chapter's Figure 7): one rule, terminator ``C``, ``each`` (or ``last``) ``B`` within
  WIN from ``C``, ``each`` (or ``last``) ``A`` within WIN from ``B``, parameter ``k=$k`` on all
  three. Event ``i`` at ``i`` ms; type uniform over A, B, C; ``k`` uniform in [0, 100); ``v``
  uniform in [0, 1). A window of WIN ms holds about WIN events, WIN / 3 per column.
* **rules1000** (Figure 6): 1000 rules, each a chain of length L with 15 s windows, all ``each`` or
  all ``last``, no parameters; 100 * L event types, each in exactly one state of exactly 10 rules
  (every event is relevant to 1% of the rules); 1000 events/s of event time, type uniform.
* **museum**: the rules of examples/museum.tesla over :func:`cep_gpu.museum.generate_museum`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

SEQ3_WINDOWS_MS = (100, 1000, 4000, 10000, 40000)
RULES1000_LENGTHS = (2, 3, 4)
RULES1000_WINDOW_S = 15
RULES1000_EVENTS = 200_000
POLICIES = ("each", "last")


@dataclass
class Workload:
    """One benchmark input: rule text, events, how to read ``ts``, and what counts as a terminator."""

    name: str
    rules: str
    events: pd.DataFrame
    time_unit: str
    terminator_types: tuple[str, ...]
    params: dict

    @property
    def n_events(self) -> int:
        return len(self.events)

    @property
    def n_terminators(self) -> int:
        """Events whose type terminates at least one rule (the denominator of per-terminator time)."""
        return int(self.events["type"].isin(self.terminator_types).sum())


# ----------------------------------------------------------------------------------------------
# seq3


def seq3_rule(window_ms: int, policy: str = "each") -> str:
    """The seq3 rule for one window (ms) and policy (``each`` / ``last`` / ``first``)."""
    _check_policy(policy)
    return (
        "define Seq3(k: int)\n"
        "from   C(k=$k) and\n"
        f"       {policy} B(k=$k) within {int(window_ms)} ms from C and\n"
        f"       {policy} A(k=$k) within {int(window_ms)} ms from B\n"
        "where  k=C.k\n"
    )


def seq3_events(n_events: int, seed: int = 0) -> pd.DataFrame:
    """``n_events`` seq3 events: event ``i`` at ``i`` ms, type uniform over A/B/C, ``k`` in [0, 100)."""
    rng = np.random.default_rng(seed)
    types = np.array(["A", "B", "C"], dtype=object)
    return pd.DataFrame(
        {
            "type": types[rng.integers(0, 3, n_events)],
            "ts": np.arange(n_events, dtype=np.int64),
            "k": rng.integers(0, 100, n_events).astype(np.int64),
            "v": rng.random(n_events),
        }
    )


def seq3_expected_composites(window_ms: int, policy: str) -> float:
    """Expected composite events per terminator (``each``: (WIN/300)^2; ``last``/``first``: < 1)."""
    per_column_matches = window_ms / 3 / 100
    if policy == "each":
        return per_column_matches**2
    return min(1.0, per_column_matches) ** 2


def seq3_events_for(window_ms: int, policy: str, n_max: int, composite_budget: float = 2e8) -> int:
    """How many events a seq3 run at this window should use: ``n_max``, fewer when ``each`` would
    produce more than ``composite_budget`` composite events (large windows), at least 3 windows."""
    per_term = max(seq3_expected_composites(window_ms, policy), 1e-9)
    n = int(composite_budget / per_term * 3)
    return int(max(min(n_max, n), min(n_max, 3 * window_ms)))


def seq3(window_ms: int, policy: str = "each", n_events: int = 200_000, seed: int = 0) -> Workload:
    """The seq3 workload at one window size."""
    return Workload(
        "seq3",
        seq3_rule(window_ms, policy),
        seq3_events(n_events, seed),
        "ms",
        ("C",),
        {"window_ms": int(window_ms), "policy": policy, "seed": seed},
    )


# ----------------------------------------------------------------------------------------------
# rules1000


def rules1000_types(length: int, n_rules: int = 1000, seed: int = 0) -> np.ndarray:
    """Type index of state ``j`` of rule ``r`` (shape (n_rules, length)).

    State ``j`` uses the types ``100 j .. 100 j + 99``; a seeded permutation per state deals each
    of them to exactly 10 rules, so rules differ while every type is in one state of 10 rules.
    """
    rng = np.random.default_rng(seed)
    group = n_rules // 100
    out = np.empty((n_rules, length), dtype=np.int64)
    for j in range(length):
        out[:, j] = 100 * j + rng.permutation(n_rules) // group
    return out


def rules1000_rules(length: int, policy: str = "each", n_rules: int = 1000, seed: int = 0) -> str:
    """``n_rules`` TESLA chains of ``length`` states; the last state is the terminator."""
    _check_policy(policy)
    if length < 2:
        raise ValueError("rules1000 chains need at least 2 states")
    types = rules1000_types(length, n_rules, seed)
    blocks = []
    for r in range(n_rules):
        # the terminator is the last state; each earlier state lies within 15 s before the next
        names = [f"T{t}" for t in types[r]]
        parts = [f"{names[-1]}()"]
        for j in range(length - 2, -1, -1):
            parts.append(f"{policy} {names[j]}() within {RULES1000_WINDOW_S} s from {names[j + 1]}")
        blocks.append(f"define R{r}\nfrom " + " and\n     ".join(parts))
    return "\n\n".join(blocks) + "\n"


def rules1000_events(length: int, n_events: int = RULES1000_EVENTS, seed: int = 0) -> pd.DataFrame:
    """Events at 1000 per second of event time (1 ms apart), type uniform over ``100 * length``."""
    rng = np.random.default_rng(seed + 1)
    n_types = 100 * length
    names = np.array([f"T{t}" for t in range(n_types)], dtype=object)
    return pd.DataFrame({"type": names[rng.integers(0, n_types, n_events)], "ts": np.arange(n_events, dtype=np.int64)})


def rules1000(length: int, policy: str = "each", n_events: int = RULES1000_EVENTS, seed: int = 0,
              n_rules: int = 1000) -> Workload:
    """The rules1000 workload for one chain length."""
    types = rules1000_types(length, n_rules, seed)
    terms = tuple(sorted({f"T{t}" for t in types[:, -1]}))
    return Workload(
        "rules1000",
        rules1000_rules(length, policy, n_rules, seed),
        rules1000_events(length, n_events, seed),
        "ms",
        terms,
        {"length": int(length), "policy": policy, "seed": seed, "n_rules": n_rules},
    )


# ----------------------------------------------------------------------------------------------
# museum


def museum(n_events: int, seed: int = 0) -> Workload:
    """The museum rules over a generated museum of ``n_events`` events."""
    from ..museum import MUSEUM_RULES, generate_museum

    return Workload("museum", MUSEUM_RULES, generate_museum(n_events, seed=seed), "s", ("Vibration",),
                    {"n_events": int(n_events), "seed": seed})


def _check_policy(policy: str) -> None:
    if policy not in ("each", "last", "first"):
        raise ValueError(f"policy must be 'each', 'last' or 'first', not {policy!r}")
