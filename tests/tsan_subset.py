"""The subset of the GPU differential tests that tests/test_gpu_emulation.py runs under
ThreadSanitizer: the kernels' concurrent host build (``HostRuntime(mode="tsan")``) on fixed rules
that reach every kernel (each / last / first, negations, aggregates, hierarchies, consuming,
Kleene sets) over
seeded random streams, with tiny output buffers (many concurrent writers, overflow relaunches) and
small thread groups. Every result must equal the reference matcher's.

Run in a subprocess started with :func:`cep_gpu.kernels.host.tsan_env` (the TSan runtime must be
loaded at process start)::

    python tests/tsan_subset.py [--include DIR] [--only each]

``--include`` builds the kernels from another copy of ``cuda/`` (the planted-race test).
Prints ``TSAN-SUBSET-OK <n>`` after ``n`` checked runs; ThreadSanitizer writes its reports to stderr.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import pandas as pd
from cep_gpu.kernels.host import host_backend

import cep_gpu
from cep_gpu.backends import register

SEQ3 = "define Seq3 from C(k=$k) and {p} B(k=$k) within {w} ms from C and {p} A(k=$k) within {w} ms from B"
RULES = {
    "each": SEQ3.format(p="each", w=40),
    "last": SEQ3.format(p="last", w=40),
    "first": SEQ3.format(p="first", w=40),
    "negation-aggregate": """
define R(m: float, c: float)
from C(k=$k) as c0 and each B(k=$k) within 30 ms from c0
 and not D(k=$k and v > 0.8) between c0 and B
 and m=Avg(A(k=$k) within 25 ms from B).v > 0.3
 and c=Count(D() within 20 ms from c0) >= 1
where m=m, c=c
""",
    "hierarchy": """
define P(k: int, v: float) from B(k=$k) as b and last A(k=$k) as a within 20 ms from b where k=b.k, v=a.v
define Q from C(k=$k) as c and each P(k=$k) as p within 30 ms from c
""",
    "consuming": "define S from B(k=$k) and each A(k=$k) within 15 ms from B consuming A",
    "kleene": "define K pattern SEQ(A a, NOT(D x), KL(B b)[1..3], C c) where a.k = c.k and b.k = a.k "
    "and b[i].v < b[i+1].v and sum(b.v) > 0.5 within 12 ms return s := sum(b.v)",
}


def events(n: int, seed: int) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    return pd.DataFrame({
        "type": rng.choice(["A", "B", "C", "D"], n, p=[0.3, 0.3, 0.3, 0.1]),
        "ts": np.sort(rng.integers(0, n // 2, n)),
        "k": rng.integers(0, 3, n),
        "v": rng.random(n),
    })


def rows(out: pd.DataFrame) -> list:
    return list(zip(out["rule"], out["ts"], (tuple(i) for i in out["ids"].tolist()), strict=True))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--include", type=Path, default=None, help="build from this copy of cuda/")
    ap.add_argument("--only", default=None, help="run one rule of RULES")
    ap.add_argument("--streams", type=int, default=2, help="random streams per rule")
    args = ap.parse_args()
    register("gpu-host-tsan", lambda: host_backend(
        mode="tsan", block=8, max_blocks=4, group=4, initial_capacity=2, include=args.include))
    names = [args.only] if args.only else list(RULES)
    checked = 0
    for name in names:
        for seed in range(args.streams):
            ev = events(300, seed)
            got = cep_gpu.detect(ev, RULES[name], backend="gpu-host-tsan", time_unit="ms")
            ref = cep_gpu.detect(ev, RULES[name], backend="reference", time_unit="ms")
            if rows(got) != rows(ref):
                sys.exit(f"TSAN-SUBSET-MISMATCH {name} seed {seed}: {len(got)} rows != {len(ref)}")
            checked += 1
    print(f"TSAN-SUBSET-OK {checked}")


if __name__ == "__main__":
    main()
