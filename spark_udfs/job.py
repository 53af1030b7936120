"""The Spark job shared by ``examples/museum_spark.py`` and ``cep-gpu spark``.

Parquet events in, ``detect_spark``, Parquet composite events out, a summary per rule and a PNG of
detections over time.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from .batch import detect_spark


def session(master: str = "local[2]", app_name: str = "cep-gpu", conf: Mapping[str, str] | None = None) -> SparkSession:
    """A Spark session for the job; local masters run their Python workers in this interpreter."""
    if master.startswith("local"):
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = (
        SparkSession.builder.master(master)
        .appName(app_name)
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.ui.showConsoleProgress", "false")
    )
    if master.startswith("local"):
        builder = builder.config("spark.ui.enabled", "false").config("spark.driver.memory", "4g")
    for k, v in (conf or {}).items():
        builder = builder.config(k, v)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


@dataclass
class JobResult:
    """What a run produced: where the output went, counts per rule, timings."""

    out_path: Path
    n_events: int
    counts: dict[str, int]
    seconds: float
    plan: str  # how detect_spark ran (``out.cep_plan.explain()``)
    plot_path: Path | None = None

    @property
    def events_per_second(self) -> float:
        return self.n_events / self.seconds if self.seconds else float("nan")


def run_job(
    spark: SparkSession,
    events: str | Path | DataFrame,
    rules,
    out_dir: str | Path,
    backend: str = "auto",
    partition_by: str | None = None,
    num_slices: int | None = None,
    time_unit: str = "s",
    plot: bool = True,
    slicing: str = "auto",
    check_ids: bool = True,
) -> JobResult:
    """Detect ``rules`` in Parquet ``events`` (a path, a URI Spark reads, or a DataFrame) and write
    ``out_dir/composite_events.parquet`` (``check_ids``: as :func:`detect_spark`'s)."""
    df = spark.read.parquet(str(events)) if not isinstance(events, DataFrame) else events
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    out_path = out_dir / "composite_events.parquet"
    n_events = df.count()
    t0 = time.perf_counter()
    out = detect_spark(df, rules, partition_by, backend, time_unit, num_slices, slicing, check_ids=check_ids)
    out.write.mode("overwrite").parquet(str(out_path))
    seconds = time.perf_counter() - t0
    written = spark.read.parquet(str(out_path))
    counts = {r["rule"]: r["count"] for r in written.groupBy("rule").count().collect()}
    result = JobResult(out_path, n_events, dict(sorted(counts.items())), seconds, out.cep_plan.explain())
    if plot:
        result.plot_path = plot_detections(written, out_dir / "detections.png")
    return result


def detections_over_time(out: DataFrame, buckets: int = 60) -> pd.DataFrame:
    """Composite events per rule in ``buckets`` equal time buckets (a small pandas frame)."""
    is_time = isinstance(out.schema["ts"].dataType, (T.TimestampType, T.TimestampNTZType))
    t = F.unix_micros(F.col("ts").cast("timestamp")) / 1e6 if is_time else F.col("ts").cast("double")
    df = out.select("rule", t.alias("t"))
    lo, hi = df.agg(F.min("t"), F.max("t")).first()
    if lo is None:
        return pd.DataFrame(columns=["rule", "bucket_start", "count"])
    width = max((hi - lo) / buckets, 1e-9)
    b = F.least(F.floor((F.col("t") - F.lit(lo)) / F.lit(width)), F.lit(buckets - 1))
    counts = df.groupBy("rule", b.alias("b")).count().toPandas()
    counts["bucket_start"] = lo + counts["b"] * width
    if is_time:
        counts["bucket_start"] = pd.to_datetime(counts["bucket_start"], unit="s")
    return counts.sort_values(["rule", "b"])[["rule", "bucket_start", "count"]]


def plot_detections(out: DataFrame, path: str | Path) -> Path:
    """Save a PNG of composite events per rule over time."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    counts = detections_over_time(out)
    fig, ax = plt.subplots(figsize=(9, 4))
    for rule, part in counts.groupby("rule"):
        ax.plot(part["bucket_start"], part["count"], marker=".", label=rule)
    ax.set_xlabel("event time")
    ax.set_ylabel("composite events per bucket")
    ax.set_title("Detections over time")
    if len(counts):
        ax.legend()
    fig.autofmt_xdate()
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def summary_table(result: JobResult, title: str = "Composite events"):
    """A rich table of the run: composite events per rule, then totals and throughput."""
    from rich.table import Table

    table = Table(title=title, min_width=72)
    table.add_column("rule")
    table.add_column("composite events", justify="right")
    for rule, n in result.counts.items():
        table.add_row(rule, f"{n:,}")
    table.add_section()
    table.add_row("total", f"{sum(result.counts.values()):,}")
    table.caption = (
        f"{result.n_events:,} events in {result.seconds:.1f} s "
        f"({result.events_per_second:,.0f} events/s) -> {result.out_path}"
    )
    return table
