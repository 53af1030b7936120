"""``detect_spark``: the batch pipeline, exact for any number of partitions.

Planning (driver only, before any task runs): validate the input schema, parse and check the
rules, choose keyed or time-sliced execution (:mod:`cep_gpu.spark_udfs.plan`). Then:

* keyed: ``groupBy(key).applyInArrow`` runs the engine once per key value;
* time-sliced, input a plain scan of local Parquet files whose row groups are ordered in time: no
  rows pass through the JVM; ``spark.range(n).mapInArrow`` runs one task per chunk of row groups,
  which reads them (and its context) with pyarrow (:mod:`cep_gpu.spark_udfs.parquet_scan`);
* time-sliced, input partitions already time-ordered and disjoint (Parquet written in time
  order): no shuffle; ``mapInArrow`` runs the engine once per input partition with the context
  it needs collected and broadcast by the driver (:mod:`cep_gpu.spark_udfs.partitioned`);
* time-sliced, otherwise: each event is copied (``explode``) to every slice whose owned range or
  context covers it, ``groupBy(slice).applyInArrow`` runs the engine once per slice, and a Spark
  filter keeps each composite event only in the slice that owns its terminator's timestamp.

Rule hierarchies run whole inside each group (the context is the sum of lookbacks along the
chain), so composite events that feed other rules need no extra stage.
"""

from __future__ import annotations

import logging
import numbers
from dataclasses import dataclass
from typing import Literal

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from cep_gpu.analysis import rule_order
from cep_gpu.backends import check_backend_name
from cep_gpu.detect import as_rules
from cep_gpu.errors import ArgumentError, EventError

from .checks import (
    POS,
    check_column_names,
    check_unique_ids,
    checked_rows,
    require_dataframe,
    with_positions,
)
from .parquet_scan import parquet_layout, run_parquet
from .partitioned import partition_layout, run_partitioned
from .plan import SparkPlan, plan_rules
from .schema import SLICE, T_NS, TimeSpec, engine_columns, output_struct, time_spec
from .task import run_group, task_fn, type_names

log = logging.getLogger("cep_gpu.spark_udfs")

Slicing = Literal["auto", "parquet", "partitions", "shuffle"]


@dataclass(frozen=True)
class RunPlan:
    """How a ``detect_spark`` call runs, decided on the driver (``out.cep_plan`` on its result).

    ``kind``: ``keyed`` (``groupBy(key)``), ``parquet`` (tasks read time-ordered Parquet row
    groups themselves, ``mapInArrow``, no shuffle), ``partitions`` (time-ordered input partitions,
    ``mapInArrow``, no shuffle) or ``shuffle`` (time slices, ``explode`` + ``groupBy(slice)``);
    ``reason``: why, in words (for the time-sliced kinds, ending with ``not keyed: <why>``: the
    reason :func:`~cep_gpu.spark_udfs.plan.plan_rules` gives, e.g. the rule not tied to
    ``partition_by``).
    """

    kind: str
    reason: str

    def explain(self) -> str:
        head = {
            "keyed": "keyed: shuffle by key",
            "parquet": "Parquet row groups read by the tasks: no shuffle",
            "partitions": "time-partitioned input: no shuffle",
            "shuffle": "time slices: shuffle",
        }[self.kind]
        return f"{head} ({self.reason})"

    __str__ = explain


@dataclass(frozen=True)
class SparkJob:
    """Everything decided on the driver: rules, plan, time handling, output schema."""

    rules: tuple
    plan: SparkPlan
    input_schema: T.StructType
    time: TimeSpec
    attributes: tuple[str, ...]
    n_slices: int
    backend: str

    @property
    def engine_struct(self) -> T.StructType:
        """The UDF output: composite events with ``ts`` as the engine's number."""
        return output_struct(self.rules, self.time.engine_type, self.input_schema)


def plan_job(
    df: DataFrame,
    rules,
    partition_by: str | None = None,
    backend: str = "auto",
    time_unit: str = "s",
    num_slices: int | None = None,
) -> SparkJob:
    """Validate ``df`` and ``rules`` and plan the run, on the driver, without starting a task."""
    if num_slices is not None and (isinstance(num_slices, bool) or not isinstance(num_slices, numbers.Integral)
                                   or num_slices < 1):
        raise ArgumentError(f"num_slices must be a whole number >= 1 (or None), got {num_slices!r}")
    check_backend_name(backend)  # the tasks would fail on it, each behind a Java trace
    rule_list = as_rules(rules)
    if not rule_list:
        raise ArgumentError("no rules given")
    rule_order(rule_list)  # a cycle in the hierarchy fails here, not in a task
    require_dataframe(df, "detect_spark")
    check_column_names(df)  # Spark's AMBIGUOUS_REFERENCE otherwise, on the first column named twice
    spec = time_spec(df.schema, time_unit)
    if partition_by is not None and not isinstance(partition_by, str):
        raise ArgumentError(f"partition_by must be a column name (a str) or None, got {partition_by!r}")
    if partition_by is not None and partition_by not in df.columns:
        raise EventError(f"partition_by column {partition_by!r} is not in the events (columns: {df.columns})")
    attrs = engine_columns(df, rule_list, extra=[partition_by] if partition_by else [])
    check_column_names(df, ["type", "ts", "id", *attrs])
    if num_slices is None:
        num_slices = max(df.sparkSession.sparkContext.defaultParallelism, 1)
    num_slices = int(num_slices)  # (a NumPy integer is one too; plans and plan texts take an int)
    plan = plan_rules(rule_list, partition_by, num_slices)
    return SparkJob(tuple(rule_list), plan, df.schema, spec, tuple(attrs), num_slices, backend)


def detect_spark(
    df: DataFrame,
    rules,
    partition_by: str | None = None,
    backend: str = "auto",
    time_unit: str = "s",
    num_slices: int | None = None,
    slicing: Slicing = "auto",
    check_ids: bool = True,
) -> DataFrame:
    """The composite events of ``rules`` in the Spark DataFrame ``df``, as a Spark DataFrame.

    Exactly the rows ``cep_gpu.detect`` returns on ``df`` collected (``df.toPandas()``), for any
    partitioning of ``df`` and any ``num_slices``; rows come unordered (use ``orderBy("ts",
    "rule", "ids")`` for ``detect``'s order).

    Parameters
    ----------
    df:
        Events with ``type`` (string), ``ts`` (timestamp, or numbers in ``time_unit``), optional
        ``id`` (integers >= 0; else the row position in ``df``, as ``detect`` would number them)
        and attribute columns.
    rules:
        A Rule, a list of Rules, or rule text.
    partition_by:
        A column that every predicate, negation and aggregate of every rule is tied to by an
        equality (``attr=$p`` everywhere): the engine then runs once per value of that column.
        Otherwise (or when ``None``) the run is time-sliced.
    backend:
        The engine's backend inside each task (``auto`` lets the planner choose per partition;
        a task with a GPU makes that GPU the CuPy device).
    num_slices:
        Number of time slices of the shuffle plan, and of chunks of the Parquet plan (default:
        the cluster's default parallelism).
    slicing:
        How a time-sliced run cuts time (docs/spark.md, "How partitioning is chosen"):

        * ``"parquet"``: ``df`` is a plain scan of local Parquet files whose row groups are
          ordered in time; the tasks read the row groups themselves with pyarrow (no rows pass
          through the JVM, no shuffle);
        * ``"partitions"``: the input's own partitions are the slices, when they are
          time-ordered and disjoint (no shuffle);
        * ``"shuffle"``: range-partitions by ``ts`` (any input);
        * ``"auto"`` (default): the first of these that applies (with small context).

        ``"parquet"`` and ``"partitions"`` raise ``ValueError`` when they do not apply. The
        choice is logged (logger ``cep_gpu.spark_udfs``) and kept as ``out.cep_plan`` (a
        :class:`RunPlan`).
    check_ids:
        ``True`` (default): refuse an ``id`` that two rows share, wherever they are (one Spark
        job on the driver, :func:`~cep_gpu.spark_udfs.checks.check_unique_ids`). ``False``
        skips that job, for inputs whose ids are unique by construction (a huge input where
        the job's shuffle of every distinct id costs too much): then a repeat is refused only
        where one task sees both rows, and a repeat across tasks goes through unnoticed, with
        results that may differ from ``detect``'s (docs/spark.md). No ``id`` column: no job
        either way.

    Raises
    ------
    EventError, RuleError
        On the driver, before any task runs: missing ``type``/``ts``, a ``ts`` of the wrong type,
        rules reading unknown attributes, ``consuming`` rules that cannot be keyed; an ``id``
        that two rows share, in one input partition or in two (one Spark job on the driver,
        :func:`~cep_gpu.spark_udfs.checks.check_unique_ids`; unless ``check_ids=False``).
    ArgumentError
        ``num_slices`` not a whole number >= 1, no rules, an unknown ``backend`` name, a
        ``check_ids`` that is not a bool (a ``ValueError`` too).
    """
    if not isinstance(slicing, str) or slicing not in ("auto", "parquet", "partitions", "shuffle"):
        raise ArgumentError(f"slicing must be 'auto', 'parquet', 'partitions' or 'shuffle', not {slicing!r}")
    if not isinstance(check_ids, bool):  # (a string such as "no" would read as True)
        raise ArgumentError(f"check_ids must be True or False, got {check_ids!r}")
    job = plan_job(df, rules, partition_by, backend, time_unit, num_slices)
    if check_ids:
        check_unique_ids(df)  # a repeat across partitions reaches no one task; one JVM job
    if job.plan.mode == "keyed":
        out, run = _run_keyed(_engine_events(df, job), job), RunPlan("keyed", f"by {job.plan.key!r}")
    else:
        out, run = _run_time(df, job, slicing)
        # why not keyed (plan_rules worked it out): a partition_by that did not fit says so here
        run = RunPlan(run.kind, f"{run.reason}; not keyed: {job.plan.reason}")
    log.info("detect_spark: %s", run.explain())
    out = out.withColumn("ts", job.time.from_engine(F.col("ts")))
    out.cep_plan = run
    return out


def _run_time(df: DataFrame, job: SparkJob, slicing: Slicing) -> tuple[DataFrame, RunPlan]:
    """The time-sliced run: Parquet row groups read by the tasks, or the input's own partitions,
    when they fit; else the shuffle. The plan's reason says why the earlier ones did not fit."""
    why = f"slicing={slicing!r}"
    if slicing != "shuffle":
        if job.plan.unbounded:
            why = "a predicate without a window needs every earlier event"
        elif any(r.consuming for r in job.rules):
            why = "'consuming' rules depend on every earlier match"
        else:
            not_parquet = ""
            if slicing in ("auto", "parquet"):
                layout, why = parquet_layout(df, job, forced=slicing == "parquet")
                if layout is not None:
                    return run_parquet(df.sparkSession, job, layout), RunPlan("parquet", layout.describe())
                if slicing == "parquet":
                    raise ValueError(f"slicing='parquet' is not possible: {why}; use slicing='auto'")
                not_parquet = f"; not read as Parquet: {why}"
            events = _engine_events(df, job)
            layout, why = partition_layout(
                events, job.time, job.plan.lookback_ns, job.plan.horizon_ns, forced=slicing == "partitions"
            )
            if layout is not None:
                return run_partitioned(events, job, layout), RunPlan("partitions", why + not_parquet)
            why += not_parquet
        if slicing in ("parquet", "partitions"):
            raise ValueError(f"slicing={slicing!r} is not possible: {why}; use slicing='auto' or 'shuffle'")
    n = job.plan.n_slices
    return _run_sliced(_engine_events(df, job), job), RunPlan("shuffle", f"{n} slice{'s' * (n != 1)}; {why}")


# ------------------------------------------------------------------------------------------------


def _engine_events(df: DataFrame, job: SparkJob) -> DataFrame:
    """``type``, ``ts`` (engine units), ``id`` and the attributes the rules read.

    Only events of a type some rule reads leave the JVM, and their ``type`` goes as an integer
    code into :func:`~cep_gpu.spark_udfs.task.type_names` (the task turns it back into names):
    other events can never bind a predicate, and a code is far cheaper to hand to Python than a
    string. Ids are taken before the filter, so row-position ids stay those of ``detect``.
    """
    df = checked_events(df, job.time)
    names = type_names(job.rules)
    code = F.array_position(F.array(*[F.lit(t) for t in names]), F.col("type")).cast("int") - 1
    cols = [code.alias("type"), job.time.to_engine(F.col("ts")).alias("ts"),
            F.col("id").cast("long").alias("id")]
    cols += [F.col(f"`{a}`") for a in job.attributes]
    # unread types go (a null type failed the row checks; the isNull keeps Spark from inferring
    # an isnotnull(type) filter that it would put before them)
    return df.select(*cols).where(F.col("type").isNull() | (F.col("type") >= 0))


def checked_events(df: DataFrame, time: TimeSpec) -> DataFrame:
    """``df`` with ``id`` (the row position when it has none, as ``detect`` numbers rows) and the
    row checks of :func:`~cep_gpu.spark_udfs.checks.checked_rows`, which name the row that fails:
    its position in ``df.collect()`` without an ``id`` column, else its position in its input
    partition."""
    if "id" not in df.columns:
        return checked_rows(with_row_ids(df), time, "ids")
    return checked_rows(with_positions(df), time, "partitions").drop(POS)


def with_row_ids(df: DataFrame) -> DataFrame:
    """``df`` with ``id`` = the row's position in ``df.collect()`` (what ``detect`` numbers by).

    Uses the partition index and the position within the partition (one small count job), so no
    Python runs per row.
    """
    df = df.withColumn("__cep_pid", F.spark_partition_id()).withColumn(
        "__cep_mid", F.monotonically_increasing_id()
    )
    counts = dict(df.groupBy("__cep_pid").count().collect())
    offsets, total = [], 0
    for pid in range(max(counts, default=-1) + 1):
        offsets.append(total)
        total += counts.get(pid, 0)
    start = F.element_at(F.array(*[F.lit(o).cast("long") for o in offsets or [0]]), F.col("__cep_pid") + 1)
    within = F.col("__cep_mid") - F.shiftleft(F.col("__cep_pid").cast("long"), 33)
    return df.withColumn("id", start + within).drop("__cep_pid", "__cep_mid")


def _run_keyed(events: DataFrame, job: SparkJob) -> DataFrame:
    struct = job.engine_struct
    fn = task_fn(_keyed_udf, job, struct)
    return events.groupBy(job.plan.key).applyInArrow(fn, struct)


def _keyed_udf(key, table, *, rules, backend, time_unit, schema):
    return run_group(table, rules, backend, time_unit, schema)


def slice_bounds(events: DataFrame, n_slices: int) -> list[int]:
    """Interior slice boundaries (ns, ascending, distinct) at approximate quantiles of time.

    Slice ``s`` owns ``[bounds[s-1], bounds[s])`` (open-ended at both ends of the list).
    """
    if n_slices <= 1:
        return []
    probs = [i / n_slices for i in range(1, n_slices)]
    qs = events.approxQuantile(T_NS, probs, 0.01)  # 1% balance is plenty
    return sorted({int(q) for q in qs})


def slice_of(t_ns: Column, bounds: list[int]) -> Column:
    """The slice owning time ``t_ns``: the number of boundaries at or before it."""
    if not bounds:
        return F.lit(0)
    arr = F.array(*[F.lit(b).cast("long") for b in bounds])
    return F.size(F.filter(arr, lambda b: b <= t_ns))


def _run_sliced(events: DataFrame, job: SparkJob) -> DataFrame:
    events = events.withColumn(T_NS, job.time.nanos(F.col("ts")))
    bounds = slice_bounds(events, job.plan.n_slices)
    t = F.col(T_NS)
    # saturating (try_* give null on overflow): timestamps near the ends of the int64 range
    first = slice_of(F.coalesce(F.try_subtract(t, F.lit(job.plan.horizon_ns)), F.lit(-(2**63))), bounds)
    last = slice_of(F.coalesce(F.try_add(t, F.lit(job.plan.lookback_ns)), F.lit(2**63 - 1)), bounds)
    copies = events.withColumn(SLICE, F.explode(F.sequence(first, last))).drop(T_NS)

    struct = T.StructType(job.engine_struct.fields + [T.StructField(SLICE, T.IntegerType())])
    fn = task_fn(_sliced_udf, job, struct)
    out = copies.groupBy(SLICE).applyInArrow(fn, struct)
    owner = slice_of(job.time.nanos(F.col("ts")), bounds)
    return out.filter(owner == F.col(SLICE)).drop(SLICE)


def _sliced_udf(key, table, *, rules, backend, time_unit, schema):
    return run_group(table, rules, backend, time_unit, schema, slice_id=int(key[0].as_py()))
