"""Streaming, one event per publish, for rules on the engine's GENERAL path (issue 12).

Rules with aggregates or hierarchies (rules reading composite events) do not take the fast path
(cep_gpu/stream_match.py): the engine runs the CDP backend over its buffer per terminator;
``consuming`` rules and held terminators (a trailing ``NOT``) took the general path before
cep_gpu/stream_held.py. This measures their mean cost per one-event publish (``output="tuples"``, Python
scalars) against the window, next to the plain fast-path rule: 1 event per ms, k in 0..9, types
A/B/C at 45/45/10 %, two windows of warm-up, then ``--events`` timed publishes.

    flock -x /work/cpu.lock .venv/bin/python bench/stream_general.py --windows 1000 10000
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np

import cep_gpu

RULES = {
    "plain": "define X from C(k=$k) and last B(k=$k) within WIN s. from C",
    "agg": "define X from C(k=$k) and last B(k=$k) within WIN s. from C "
           "and n = Count(A(k=$k) within WIN s. from C) >= 3",
    "consuming": "define X from C(k=$k) and last B(k=$k) within WIN s. from C consuming B",
    "eachcons": "define X from C(k=$k) and each B(k=$k) within WIN s. from C consuming B",
    "trailnot": "define X pattern SEQ(B b, C c, NOT(A z)) within WIN s where b.k = c.k and z.k = c.k "
                "select last",
    "hier": "define X(k: int) from C(k=$k) and last B(k=$k) within WIN s. from C where k = C.k\n\n"
            "define Y from X(k=$k) and last A(k=$k) within WIN s. from X",
}


def run(rule: str, window: int, n: int) -> float:
    """Mean µs per one-event publish after two windows of warm-up."""
    eng = cep_gpu.Engine(rule.replace("WIN", str(window / 1000)), backend="cpu")
    rng = np.random.default_rng(0)
    types = [str(t) for t in rng.choice(["A", "B", "C"], size=n + 2 * window, p=[0.45, 0.45, 0.1])]
    ks = [int(k) for k in rng.integers(0, 10, size=len(types))]
    for i in range(2 * window):
        eng.publish({"type": types[i], "ts": i / 1000, "k": ks[i], "v": 1.0}, output="tuples")
    t0 = time.perf_counter()
    for i in range(2 * window, len(types)):
        eng.publish({"type": types[i], "ts": i / 1000, "k": ks[i], "v": 1.0}, output="tuples")
    return (time.perf_counter() - t0) / n * 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--windows", type=int, nargs="+", default=[1000, 10000], help="window sizes in events")
    ap.add_argument("--rules", nargs="+", default=list(RULES), choices=list(RULES))
    ap.add_argument("--events", type=int, default=2000, help="timed publishes per run")
    args = ap.parse_args()
    print(f"load average {os.getloadavg()}")
    print("rule       " + "".join(f"W={w:>8}" for w in args.windows) + "   (µs per event)")
    for name in args.rules:
        print(f"{name:<10} " + "".join(f"{run(RULES[name], w, args.events):>10.1f}" for w in args.windows), flush=True)


if __name__ == "__main__":
    main()
