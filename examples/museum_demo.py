"""The museum example in one process: generate events, detect Touch/Theft/Alarm, print a summary.

    python examples/museum_demo.py [--events 200000] [--backend auto] [--out out/museum]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import cep_gpu
from cep_gpu.io import write_output
from cep_gpu.museum import MUSEUM_RULES, generate_museum


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--events", type=int, default=200_000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--backend", default="auto")
    ap.add_argument("--out", default="out/museum")
    args = ap.parse_args()

    events = generate_museum(args.events, seed=args.seed)
    rules = cep_gpu.parse_rules(MUSEUM_RULES)
    t0 = time.perf_counter()
    out = cep_gpu.detect(events, rules, backend=args.backend)
    elapsed = time.perf_counter() - t0

    Path(args.out).mkdir(parents=True, exist_ok=True)
    write_output(out, Path(args.out) / "composite_events.parquet")
    print(f"{len(events)} museum events -> {len(out)} composite events in {elapsed:.2f} s "
          f"({len(events) / elapsed:,.0f} events/s, backend={args.backend})")
    print(out.groupby("rule").size().rename("composite events").to_string())
    print(out.head(10).to_string())


if __name__ == "__main__":
    main()
