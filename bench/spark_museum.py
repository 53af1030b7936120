"""Benchmark: the museum workload, detect_spark on local[2] against single-process detect.

    python bench/spark_museum.py [--events 10000000] [--backend cpu] [--slices 2]
        [--slicing auto|parquet|partitions|shuffle] [--json out.json]

Both sides read the same Parquet file, run the same backend and build every composite event
(Arrow), ``--repeat`` times each; the first
run includes compiling the kernels (Numba JIT, in the driver and in every Python worker), the
best of the others is the warm figure. The Spark time covers the whole job, planning included,
executed with Spark's ``noop`` sink so that no output is written. The Parquet file is written in
time order, so ``--slicing auto`` (the default) takes the direct Parquet plan (the tasks read the
row groups with pyarrow; no row passes through the JVM); ``--slicing partitions`` measures the
shuffle-free plan over Spark's own scan (per-partition time statistics, the context collected and
broadcast, ``mapInArrow``); ``--slicing shuffle`` the time-slice shuffle (slice quantiles,
``explode``, ``groupBy(slice)``, the owner filter).
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

from cep_gpu.spark_udfs import detect_spark
from cep_gpu.spark_udfs.job import session

import cep_gpu
from cep_gpu.io import read_table
from cep_gpu.museum import MUSEUM_RULES, generate_museum


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--events", type=int, default=10_000_000)
    ap.add_argument("--backend", default="cpu")
    ap.add_argument("--slices", type=int, default=None)
    ap.add_argument("--slicing", default="auto", choices=["auto", "parquet", "partitions", "shuffle"])
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--repeat", type=int, default=2, help="timed runs per side (first one is cold)")
    ap.add_argument("--json", help="write the measurements here")
    args = ap.parse_args(argv)

    rules = cep_gpu.parse_rules(MUSEUM_RULES)
    tmp = Path(tempfile.mkdtemp(prefix="cep-spark-bench-"))
    path = tmp / "museum.parquet"
    events = generate_museum(args.events, seed=1)
    events["ts"] = events["ts"].astype("datetime64[us]")
    events.to_parquet(path, index=False)
    del events

    # single process: read the Parquet file, detect
    single_times = []
    for _ in range(args.repeat):
        t0 = time.perf_counter()
        events = read_table(path)  # what `cep-gpu run` reads Parquet with (Arrow, no pandas)
        # the same work as the Spark side: every composite event built (Arrow)
        out_single = cep_gpu.detect(events, rules, backend=args.backend, output="arrow")
        single_times.append(time.perf_counter() - t0)
        single = {d["values"]: d["counts"] for d in out_single.column("rule").value_counts().to_pylist()}
        del events

    spark = session(args.master, "cep-gpu spark bench", {
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.shuffle.partitions": str(args.slices or 2),
    })
    df = spark.read.parquet(str(path))
    spark_times = []
    for _ in range(args.repeat):
        t0 = time.perf_counter()
        out = detect_spark(df, rules, backend=args.backend, num_slices=args.slices, slicing=args.slicing)
        out.write.format("noop").mode("overwrite").save()
        spark_times.append(time.perf_counter() - t0)
    spark_counts = {r["rule"]: r["count"] for r in out.groupBy("rule").count().collect()}
    spark.stop()

    t_single = min(single_times[1:] or single_times)
    t_spark = min(spark_times[1:] or spark_times)
    result = {
        "events": args.events,
        "backend": args.backend,
        "master": args.master,
        "slices": args.slices or "default parallelism",
        "slicing": args.slicing,
        "plan": out.cep_plan.explain(),
        "single_process_cold_s": round(single_times[0], 2),
        "spark_cold_s": round(spark_times[0], 2),
        "single_process_s": round(t_single, 2),
        "spark_s": round(t_spark, 2),
        "spark_over_single": round(t_spark / t_single, 2),
        "single_events_per_s": round(args.events / t_single),
        "spark_events_per_s": round(args.events / t_spark),
        "composite_events": single,
        "same_counts": dict(sorted(single.items())) == dict(sorted(spark_counts.items())),
    }
    print(json.dumps(result, indent=2))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2))
    return result


if __name__ == "__main__":
    main()
