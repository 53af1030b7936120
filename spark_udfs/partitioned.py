"""The shuffle-free time-sliced plan: input partitions that are already time-ordered and disjoint.

Parquet written in time order (and ``repartitionByRange("ts")``) gives partitions that each hold
one stretch of time. Their partitions are then the slices: no ``explode``, no shuffle.

1. **Layout** (driver, one aggregate job): ``min``/``max`` of the engine time in ns and ``count``
   per input partition (``spark_partition_id()``). Sorted by ``min``, every non-empty partition's
   ``max`` must lie strictly below the next one's ``min``; otherwise (overlapping partitions, or
   equal timestamps on both sides of a boundary, whose owner would be ambiguous) the shuffle plan
   runs instead.
2. **Context** (driver, one filtered job, collected as Arrow): partition ``p`` owning
   ``[min_p, max_p]`` also needs the events of other partitions in ``[min_p - lookback, min_p)`` and
   ``(max_p, max_p + horizon]`` (the plan's ``lookback_ns`` / ``horizon_ns``: rule chains,
   negations, aggregates and trailing ``NOT``s included). Since partitions are disjoint and sorted,
   a row of partition ``q`` is context for some partition iff ``t >= next_min(q) - lookback`` or
   ``t <= prev_max(q) + horizon`` (the next / previous partition in time order), a per-row test in
   the JVM. The plan falls back to the shuffle when the context is too large (a fraction of the
   rows, and an absolute cap: it passes through the driver).
3. **Run** (``mapInArrow``, one task per input partition): the task concatenates its batches with
   its context (before + own + after, so rows stay in time order), runs the whole rule hierarchy
   once (:func:`cep_gpu.spark_udfs.task.run_group`), and keeps the composite events whose
   terminator's time lies in the partition's *tile*: the partitions' ranges widened to meet half
   way between neighbours, so every instant has exactly one owner even if a timestamp's ns value
   came back from the engine rounded differently.

The context reaches the tasks through one broadcast variable (a dict partition -> Arrow IPC
bytes): a broadcast is fetched once per executor and read lazily by the Python workers, while a
UDF closure is serialized into every task's command (all partitions' context in every task).

The partition ids the driver measured must be those the ``mapInArrow`` tasks see: the job runs
``mapInArrow`` directly on the DataFrame the statistics were taken on (no repartitioning between),
and each task checks its row count and that its rows lie in its tile, failing with a clear message
if the input's partitioning is not deterministic.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from .schema import T_NS, TimeSpec
from .task import engine_nanos, from_ipc, run_group, task_fn, to_ipc

log = logging.getLogger("cep_gpu.spark_udfs")

#: internal column: the input partition of an event
PID = "__cep_pid"

#: the plan is used automatically only while the context is at most this fraction of the rows ...
MAX_CONTEXT_FRACTION = 0.10
#: ... and at most this many rows (they are collected on the driver and broadcast)
MAX_CONTEXT_ROWS = 2_000_000

_I64_MIN, _I64_MAX = -(1 << 63), (1 << 63) - 1


@dataclass(frozen=True)
class PartitionStats:
    pid: int
    min_ns: int
    max_ns: int
    count: int


@dataclass
class PartitionLayout:
    """Time-ordered, disjoint input partitions and what each task needs.

    ``order``: non-empty partitions in time order; ``tiles``: pid -> ``[lo, hi)`` ns it owns;
    ``counts``: pid -> rows; ``context``: pid -> (rows before, rows after) as Arrow IPC bytes.
    """

    order: list[PartitionStats]
    tiles: dict[int, tuple[int, int]]
    counts: dict[int, int]
    context: dict[int, tuple[bytes, bytes]] = field(default_factory=dict)
    context_rows: int = 0

    @property
    def rows(self) -> int:
        return sum(self.counts.values())


def layout_problem(stats: list[PartitionStats]) -> str | None:
    """Why partitions with these statistics are not time-ordered and disjoint (``None`` if they are)."""
    order = sorted((s for s in stats if s.count), key=lambda s: (s.min_ns, s.max_ns))
    for a, b in zip(order, order[1:]):
        if a.max_ns >= b.min_ns:
            what = "have equal timestamps on both sides of their boundary" if a.max_ns == b.min_ns else "overlap in time"
            return f"input partitions {a.pid} and {b.pid} {what}"
    return None


def saturated(ns: int) -> int:
    """``ns`` (a Python int, e.g. ``max_ns + horizon``) clamped to the int64 range, as
    ``cep_gpu.ranges.shifted_ts`` computes edges: an edge past the range keeps every time on its
    side, and NumPy compares an int64 array with it exactly whatever its version."""
    return min(max(ns, _I64_MIN), _I64_MAX)


def in_tile(t: np.ndarray, tile: tuple[int, int]) -> np.ndarray:
    """Whether engine times ``t`` (ns) lie in ``tile`` ``[lo, hi)``. The last tile ends at the
    int64 maximum and includes it: an event at the largest time there is has an owner too."""
    lo, hi = tile
    return (t >= lo) & ((t < hi) | (hi == _I64_MAX))


def tiles_of(order: list[PartitionStats]) -> dict[int, tuple[int, int]]:
    """``pid -> [lo, hi)``: the partitions' ranges widened to meet half way, covering all of time
    (the last tile includes the int64 maximum: :func:`in_tile`)."""
    cuts = [_I64_MIN]
    for a, b in zip(order, order[1:]):
        cuts.append(a.max_ns + (b.min_ns - a.max_ns + 1) // 2)  # in (a.max, b.min]
    cuts.append(_I64_MAX)
    return {s.pid: (cuts[i], cuts[i + 1]) for i, s in enumerate(order)}


def unstable_partitions(df: DataFrame) -> str | None:
    """Why the partitions of ``df`` might differ from one Spark job to the next (``None``: they
    come straight from a file scan, a cache or a checkpoint, so every job sees the same).

    A shuffle in the input's plan makes that uncertain: ``repartitionByRange`` samples its range
    bounds anew in every job, for one.
    """
    try:
        node = df._jdf.queryExecution().executedPlan()
    except Exception:  # not a classic (JVM) DataFrame: cannot look
        return "the input's physical plan cannot be inspected"
    stack = [node]
    while stack:
        node = stack.pop()
        name = node.getClass().getSimpleName()
        if "Exchange" in name or name == "AdaptiveSparkPlanExec":
            return (
                f"the input's plan shuffles ({name}), so its partitions may differ between jobs "
                "(cache or checkpoint it, or write it as Parquet, to use its partitions)"
            )
        if name == "LocalTableScanExec":
            # local data (createDataFrame) is split one way for a mapInArrow and another way for
            # an aggregate over spark_partition_id(): the statistics would not match the tasks
            return "the input is local data, whose partitions differ between kinds of jobs"
        children = node.children()
        stack.extend(children.apply(i) for i in range(children.size()))
    return None


def partition_stats(events: DataFrame, time: TimeSpec) -> list[PartitionStats]:
    """One aggregate job: min/max engine time (ns) and count per input partition of ``events``."""
    t = time.nanos(F.col("ts"))
    rows = (
        events.select(F.spark_partition_id().alias(PID), t.alias(T_NS))
        .groupBy(PID)
        .agg(F.min(T_NS), F.max(T_NS), F.count(F.lit(1)))
        .collect()
    )
    return sorted((PartitionStats(int(p), int(lo), int(hi), int(n)) for p, lo, hi, n in rows), key=lambda s: s.pid)


def _context_filter(order: list[PartitionStats], lookback: int, horizon: int):
    """The JVM test "this row is context for another partition" (see the module docstring)."""
    n = max(s.pid for s in order) + 1
    next_min = [_I64_MAX] * n  # no later partition: never context backwards
    prev_max = [_I64_MIN] * n
    for a, b in zip(order, order[1:]):
        next_min[a.pid] = saturated(b.min_ns - lookback)
        prev_max[b.pid] = saturated(a.max_ns + horizon)
    pid = F.col(PID) + 1

    def pick(values):
        return F.element_at(F.array(*[F.lit(v).cast("long") for v in values]), pid)

    t = F.col(T_NS)
    return (t >= pick(next_min)) | (t <= pick(prev_max))


def partition_layout(
    events: DataFrame, time: TimeSpec, lookback: int, horizon: int, forced: bool = False
) -> tuple[PartitionLayout | None, str]:
    """The layout of ``events`` if the shuffle-free plan applies, else ``(None, why not)``.

    Runs two small jobs (statistics, then the context). With ``forced`` the context may exceed
    :data:`MAX_CONTEXT_FRACTION` of the rows (never :data:`MAX_CONTEXT_ROWS`), and an input whose
    plan shuffles is used as it is (each task checks that it got the partition planned).
    """
    if not forced:
        why = unstable_partitions(events)
        if why:
            return None, why
    stats = partition_stats(events, time)
    why = layout_problem(stats)
    if why:
        return None, why
    order = sorted((s for s in stats if s.count), key=lambda s: s.min_ns)
    layout = PartitionLayout(order, tiles_of(order), {s.pid: s.count for s in order})
    if len(order) < 2:
        return layout, "one non-empty partition"
    cap = MAX_CONTEXT_ROWS if forced else min(MAX_CONTEXT_ROWS, int(MAX_CONTEXT_FRACTION * layout.rows))
    ctx = _collect_context(events, time, order, lookback, horizon, cap)
    if ctx is None:
        return None, (
            f"the context the partitions need (events within lookback/horizon of other "
            f"partitions) is more than {cap:,} rows"
        )
    t = ctx.column(T_NS).to_numpy()
    pids = ctx.column(PID).to_numpy()
    by_pid = {s.pid: s for s in order}
    # the context job saw the partitions the statistics describe (same lineage, same layout)
    if len(pids) and not all(by_pid[int(p)].min_ns <= x <= by_pid[int(p)].max_ns for p, x in zip(pids, t)):
        return None, "the input's partitioning changed between two jobs (not deterministic)"
    ctx = ctx.drop_columns([PID])
    for s in order:
        before = np.flatnonzero((t >= saturated(s.min_ns - lookback)) & (t < s.min_ns))
        after = np.flatnonzero((t > s.max_ns) & (t <= saturated(s.max_ns + horizon)))
        parts = []
        for rows in (before, after):
            part = ctx.take(rows[np.argsort(t[rows], kind="stable")]).drop_columns([T_NS])
            parts.append(to_ipc(part))
        layout.context[s.pid] = (parts[0], parts[1])
        layout.context_rows += len(before) + len(after)
    return layout, f"{len(order)} time-ordered partitions, {layout.context_rows:,} context rows"


def _collect_context(events, time, order, lookback, horizon, cap) -> pa.Table | None:
    """The context rows (with their ns time and partition), or ``None`` when more than ``cap``."""
    df = events.withColumn(PID, F.spark_partition_id()).withColumn(T_NS, time.nanos(F.col("ts")))
    df = df.filter(_context_filter(order, lookback, horizon)).limit(cap + 1)
    spark = events.sparkSession
    # scan every partition in the first (and only) job of the limited collect, in parallel
    key = "spark.sql.limit.initialNumPartitions"
    old = spark.conf.get(key, None)
    spark.conf.set(key, str(max(events.rdd.getNumPartitions(), 1)))
    try:
        table = df.toArrow()
    finally:
        if old is None:
            spark.conf.unset(key)
        else:
            spark.conf.set(key, old)
    return None if table.num_rows > cap else table


def run_partitioned(events: DataFrame, job, layout: PartitionLayout) -> DataFrame:
    """``events.mapInArrow``: the engine per input partition with its context; owned composites only."""
    struct = job.engine_struct
    context = events.sparkSession.sparkContext.broadcast(layout.context)
    fn = task_fn(
        _partition_udf, job, struct,
        context=context,
        tiles=layout.tiles,
        counts=layout.counts,
        time=(job.time.kind, job.time.engine_unit),
    )
    return events.mapInArrow(fn, struct)


def _partition_udf(batches, *, rules, backend, time_unit, schema, context, tiles, counts, time):
    from pyspark import TaskContext

    from cep_gpu.errors import EventError

    batches = [b for b in batches if b.num_rows]
    if not batches:
        return  # an empty partition owns nothing
    pid = TaskContext.get().partitionId()
    own = pa.Table.from_batches(batches)
    if own.column("ts").null_count:
        raise EventError("column 'ts' is null: every event needs a timestamp")
    lo, hi = tiles.get(pid, (0, 0))
    t = engine_nanos(own.column("ts"), *time)
    if own.num_rows != counts.get(pid) or not in_tile(t, (lo, hi)).all():
        raise RuntimeError(
            f"cep_gpu.detect_spark: input partition {pid} is not the one planned on the driver "
            f"({own.num_rows} rows, expected {counts.get(pid, 0)}): the input's partitioning is not "
            "deterministic; use detect_spark(..., slicing='shuffle')"
        )
    ctx = context.value.get(pid)
    before, after = (from_ipc(b).select(own.column_names).cast(own.schema) for b in ctx) if ctx else (None, None)
    parts = [p for p in (before, own, after) if p is not None and p.num_rows]
    table = pa.concat_tables(parts) if len(parts) > 1 else own
    out = run_group(table, rules, backend, time_unit, schema)
    yield from owned_rows(out, (lo, hi), time).to_batches()


def owned_rows(out: pa.Table, tile: tuple[int, int], time: tuple[str, str]) -> pa.Table:
    """The composite events of ``out`` whose terminator's time (engine ns) lies in ``tile``
    (:func:`in_tile`)."""
    ts = engine_nanos(out.column("ts"), *time)
    return out.filter(pa.array(in_tile(ts, tile)))
