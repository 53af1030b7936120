"""Streaming, one event per publish, for rules that took the engine's GENERAL path (issue 12).

Rules with aggregates, hierarchies (rules reading composite events), ``consuming`` and a trailing
``NOT`` (held terminators) took the general path before (the engine ran the CDP backend over its
buffer per terminator); they now take the fast path (cep_gpu/stream_match.py and, for consuming
and held rules, cep_gpu/stream_held.py). This measures their mean cost per one-event publish
(``output="tuples"``, Python scalars) against the window, next to the plain fast-path rule: 1
event per ms, k in 0..9, types A/B/C at 45/45/10 %, two windows of warm-up, then ``--events``
timed publishes; ``--json`` also writes the figures and the load average.

    flock -x /work/cpu.lock .venv/bin/python bench/stream_general.py --windows 1000 10000
"""

from __future__ import annotations

import argparse
import json
import os
import time

import numpy as np

import cep_gpu

RULES = {
    "plain": "define X from C(k=$k) and last B(k=$k) within WIN s. from C",
    "agg": "define X from C(k=$k) and last B(k=$k) within WIN s. from C "
           "and n = Count(A(k=$k) within WIN s. from C) >= 3",
    "aggall": "define X from C(k=$k) and last B(k=$k) within WIN s. from C "
              "and n = Count(A() within WIN s. from C) >= 3",
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
    ap.add_argument("--json", help="also write the figures (µs per event by rule and window) here")
    args = ap.parse_args()
    load = os.getloadavg()
    print(f"load average {load}")
    print("rule       " + "".join(f"W={w:>8}" for w in args.windows) + "   (µs per event)")
    out: dict = {"load_before": load, "events": args.events, "us_per_event": {}}
    for name in args.rules:
        got = {w: run(RULES[name], w, args.events) for w in args.windows}
        out["us_per_event"][name] = got
        print(f"{name:<10} " + "".join(f"{v:>10.1f}" for v in got.values()), flush=True)
    out["load_after"] = os.getloadavg()
    print(f"load average {out['load_after']}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
