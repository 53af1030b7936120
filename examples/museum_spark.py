"""The museum pipeline on Spark (the main job): Parquet events -> detect_spark -> Parquet + plot.

    python examples/museum_spark.py [--events 200000] [--seed 1] [--master local[2]]
                                    [--backend auto] [--out out/museum_spark]

1. generates the museum events (rooms, paintings, visitors, staff) and writes them as Parquet;
2. reads them with Spark and detects Touch, Theft and Alarm (examples/museum.tesla) with
   ``detect_spark``: the rules are not all tied to one attribute (Theft's StaffAt negation is tied
   to the room, its PeopleNear to the painting), so the run is time-sliced, with each slice reading
   the 5 minutes before it as context;
3. writes the composite events as Parquet, prints a summary and saves a PNG of detections over time.

Runs in local mode with no cluster and no GPU; on a RAPIDS cluster pass ``--master`` and
``--rapids`` (see docs/spark.md).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from cep_gpu.spark_udfs.job import run_job, session, summary_table
from cep_gpu.spark_udfs.rapids import rapids_conf
from pyspark.sql import SparkSession
from rich.console import Console

from cep_gpu import parse_rules
from cep_gpu.museum import MUSEUM_RULES, generate_museum


def write_museum(path: Path, n_events: int, seed: int) -> Path:
    """Generate the museum events and write them as one Parquet file (ts in microseconds).

    The events are in time order and cut into 16 row groups (of at least 1,000 events), so that
    ``detect_spark``'s tasks can read the file in parallel by row groups (docs/spark.md).
    """
    events = generate_museum(n_events, seed=seed)
    events["ts"] = events["ts"].astype("datetime64[us]")  # Spark timestamps are microseconds
    path.parent.mkdir(parents=True, exist_ok=True)
    events.to_parquet(path, index=False, row_group_size=max(1_000, -(-n_events // 16)))
    return path


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--events", type=int, default=200_000, help="number of museum events")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--backend", default="auto")
    ap.add_argument("--slices", type=int, default=None, help="time slices (default: parallelism)")
    ap.add_argument("--rapids", action="store_true", help="RAPIDS GPU executors (cluster only)")
    ap.add_argument("--out", default="out/museum_spark")
    args = ap.parse_args(argv)

    console = Console()
    out = Path(args.out)
    events_path = write_museum(out / "events.parquet", args.events, args.seed)
    console.print(f"wrote {args.events:,} museum events to {events_path}")

    owned = SparkSession.getActiveSession() is None  # a session we start here, we stop here
    spark = session(args.master, "cep-gpu museum", rapids_conf() if args.rapids else None)
    result = run_job(
        spark, events_path, parse_rules(MUSEUM_RULES), out, backend=args.backend, num_slices=args.slices
    )
    console.print(summary_table(result, title="Museum: composite events (Spark)"))
    console.print(f"plan: {result.plan}", soft_wrap=True)
    console.print(f"composite events: {result.out_path}\nplot: {result.plot_path}")
    if owned:
        spark.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
