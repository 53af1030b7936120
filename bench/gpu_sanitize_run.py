"""A small GPU run for ``compute-sanitizer`` (bench/gpu_check.sh runs it under memcheck, racecheck
and initcheck): every kernel (each, last, first, aggregates, negations), the overflow relaunch,
and streaming with incremental device columns (asynchronous copies, device-to-device moves),
each compared with the CPU backend.

    compute-sanitizer --tool memcheck python bench/gpu_sanitize_run.py [--events 3000]

CuPy's memory pools are switched off first: the sanitizer checks accesses against each
``cudaMalloc`` allocation, and a pool hands out pieces of larger ones, so an overrun into a
neighbouring piece would go unseen. Exits 1 on a mismatch, 2 where the GPU backend cannot run.
"""

from __future__ import annotations

import argparse
import sys

import numpy as np
import pandas as pd

import cep_gpu
from cep_gpu.errors import BackendUnavailableError

SEQ3 = "define Seq3 from C(k=$k) and {p} B(k=$k) within {w} ms from C and {p} A(k=$k) within {w} ms from B"
RICH = """
define R(m: float, c: float)
from C(k=$k) as c0 and each B(k=$k) within 30 ms from c0
 and not D(k=$k and v > 0.8) between c0 and B
 and m=Avg(A(k=$k) within 25 ms from B).v > 0.3
 and c=Count(D() within 20 ms from c0) >= 1
where m=m, c=c
"""


def events(n: int, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    return pd.DataFrame({
        "type": rng.choice(["A", "B", "C", "D"], n, p=[0.3, 0.3, 0.3, 0.1]),
        "ts": np.sort(rng.integers(0, n // 2, n)),
        "k": rng.integers(0, 4, n),
        "v": np.where(rng.random(n) < 0.1, np.nan, rng.random(n)),
    })


def rows(out: pd.DataFrame) -> list:
    return list(zip(out["rule"], out["ts"], (tuple(i) for i in out["ids"].tolist()), strict=True))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, default=3000)
    args = ap.parse_args()
    try:
        import cupy  # type: ignore[import-not-found]
        from cep_gpu.kernels.gpu import CupyRuntime, GpuBackend, GpuCombiner

        from cep_gpu.backends import get_backend

        cupy.cuda.set_allocator(None)  # plain cudaMalloc per buffer (see the module docstring)
        cupy.cuda.set_pinned_memory_allocator(None)
        get_backend("gpu")
    except (ImportError, BackendUnavailableError) as err:
        print(f"gpu_sanitize_run: not run: {err}", file=sys.stderr)
        return 2
    from cep_gpu.backends import register

    # a one-sequence first output buffer: every `each` step overflows and relaunches
    register("gpu-tiny", lambda: GpuBackend(GpuCombiner(CupyRuntime(), "gpu", initial_capacity=1), "gpu"))
    ev = events(args.events)
    failures = 0
    cases = [(f"seq3 {p}", SEQ3.format(p=p, w=40), "gpu-tiny") for p in ("each", "last", "first")]
    cases.append(("negation and aggregates", RICH, "gpu"))
    for label, text, backend in cases:
        got, want = cepdetect(ev, text, backend), cepdetect(ev, text, "cpu")
        ok = got == want
        failures += not ok
        print(f"{'ok' if ok else 'MISMATCH'}: {label} on {backend}: {len(got)} composite events", flush=True)
    # streaming: device columns appended to, compacted and shrunk as the buffer moves
    eng = cep_gpu.Engine(SEQ3.format(p="each", w=40), backend="gpu", time_unit="ms")
    parts = [eng.publish(ev.iloc[i:i + 37]) for i in range(0, len(ev), 37)] + [eng.flush()]
    got = sorted(r for p in parts if len(p) for r in rows(p))
    want = sorted(cepdetect(ev, SEQ3.format(p="each", w=40), "cpu"))
    failures += got != want
    print(f"{'ok' if got == want else 'MISMATCH'}: streaming {len(got)} composite events", flush=True)
    return 1 if failures else 0


def cepdetect(ev: pd.DataFrame, text: str, backend: str) -> list:
    return rows(cep_gpu.detect(ev, text, backend=backend, time_unit="ms"))


if __name__ == "__main__":
    sys.exit(main())
