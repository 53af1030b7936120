"""The direct Parquet plan: Spark schedules the tasks, the tasks read the Parquet row groups.

When the events are a plain Parquet scan (``spark.read.parquet(...)``, at most a ``select`` of
plain columns: no filter, no computed column, no Hive partition columns) of local files whose row
groups each cover a stretch of time, the JVM need not read them at all. Handing rows from the JVM
to Python is the dearest part of a Spark job here (rows to Arrow in the JVM, one cell at a time);
pyarrow reads the same row groups columnar, straight from the file, with strings dictionary
encoded as they are stored.

1. **Layout** (driver, no Spark job): the footers give each row group's row count and the min/max
   of ``ts`` (Parquet statistics). Row groups are sorted by time and merged into *blocks* where
   their ranges overlap or touch (equal timestamps on both sides of a boundary must be owned by
   one task); blocks are disjoint in time and are packed, in time order, into about ``num_slices``
   *chunks* of equal row counts (more if a chunk would exceed :data:`MAX_CHUNK_ROWS`).
2. **Context**: chunk ``c`` owning ``[min_c, max_c]`` also reads the row groups of its
   neighbours that may hold events in ``[min_c - lookback, min_c)`` or ``(max_c, max_c +
   horizon]``, and keeps the rows in those ranges.
3. **Run** (``spark.range(n).mapInArrow``, one task per chunk): the task reads its row groups and
   context with pyarrow (one read per file), checks its rows as the JVM plans do (a bad row is
   named by its row in the file: :func:`~cep_gpu.spark_udfs.checks.check_arrow_rows`), builds what
   :func:`~cep_gpu.spark_udfs.batch._engine_events` builds in the JVM (only the types the rules
   read, engine ``ts``, ``id``, the attributes the rules read), runs the rule
   hierarchy once, and keeps the composite events whose terminator lies in its tile (the chunks'
   ranges widened to meet half way, as in :mod:`cep_gpu.spark_udfs.partitioned`).

Without an ``id`` column the engine numbers events by their position in ``df.collect()``; that
order is the file's for one file, but for several files it depends on how Spark packs them into
splits, so several files without ``id`` take the other plans. Files that Spark would read
differently from pyarrow (INT96 or nanosecond timestamps, Spark 2 "legacy" calendar metadata,
rebase options) take the other plans too. Remote files (``s3a://``, ``hdfs://``...) are read
only when asked for (``slicing="parquet"``): pyarrow, not Hadoop, opens them, with the credentials
the Python workers find themselves.
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import unquote, urlparse

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyspark.sql import DataFrame
from pyspark.sql import types as T
from pyspark.sql.pandas.types import to_arrow_type

from .checks import check_arrow_rows
from .partitioned import PartitionStats, owned_rows, saturated, tiles_of
from .schema import TimeSpec
from .task import engine_nanos, run_group, task_fn, type_names

#: plan nodes a plain Parquet scan (with a column selection) consists of
_SCAN_NODES = {"WholeStageCodegenExec", "ColumnarToRowExec", "InputAdapter", "ProjectExec", "FileSourceScanExec"}
#: file metadata keys of Spark 2.x writers whose dates Spark rebases on read (pyarrow would not)
_LEGACY_KEYS = (b"org.apache.spark.legacyDateTime", b"org.apache.spark.legacyINT96")
#: chunks hold at most about this many rows (more chunks than ``num_slices`` when needed), so that
#: one task's events and composites fit in a Python worker's memory
MAX_CHUNK_ROWS = 8_000_000
#: with ``slicing="auto"``, no chunk may hold more than this many times its share of the rows
#: (row groups that overlap in time must share a chunk: unordered files would run in one task) ...
MAX_CHUNK_SHARE = 2.0
#: ... a task may read at most this many rows of context row groups per row
#: of its own (reading is cheap next to detecting; whole row groups are read) ...
MAX_CONTEXT_READ = 4.0
#: ... and keep (estimated from the row groups' time ranges) at most this many per row of its own
MAX_CONTEXT_KEPT = 0.5


@dataclass(frozen=True)
class RowGroup:
    """One row group: ``file`` index, ``index`` in the file, rows, its ``ts`` range (engine ns)
    and ``first_row``, its first row's position in the file."""

    file: int
    index: int
    rows: int
    min_ns: int
    max_ns: int
    first_row: int


@dataclass(frozen=True)
class Chunk:
    """What one task reads: its own row groups and the context row groups before / after."""

    own: tuple[RowGroup, ...]
    before: tuple[RowGroup, ...]
    after: tuple[RowGroup, ...]
    min_ns: int
    max_ns: int
    tile: tuple[int, int]
    lookback: int
    horizon: int

    @property
    def rows(self) -> int:
        return _rows(self.own)

    @property
    def context_read(self) -> int:
        """Rows of the context row groups (read whole)."""
        return _rows(self.before + self.after)

    def context_kept(self) -> float:
        """The context rows this chunk keeps, estimated as if events were spread evenly in time."""
        est = 0.0
        for groups, lo, hi in ((self.before, self.min_ns - self.lookback, self.min_ns - 1),
                               (self.after, self.max_ns + 1, self.max_ns + self.horizon)):
            for g in groups:
                overlap = min(hi, g.max_ns) - max(lo, g.min_ns) + 1
                est += g.rows * max(overlap, 0) / (g.max_ns - g.min_ns + 1)
        return est


@dataclass(frozen=True)
class ParquetLayout:
    """The files, their chunks, and how to turn file columns into the engine's input."""

    files: tuple[str, ...]
    chunks: tuple[Chunk, ...]
    has_id: bool
    attributes: tuple[tuple[str, pa.DataType], ...]  # (column, Arrow type Spark would hand)
    strings: tuple[str, ...]  # columns read dictionary-encoded

    def describe(self) -> str:
        groups = sum(len(c.own) for c in self.chunks)
        n = len(self.chunks)
        return (
            f"{n} chunk{'s' * (n != 1)} of {groups} row groups in {len(self.files)} file"
            f"{'s' * (len(self.files) != 1)}, about {sum(c.context_kept() for c in self.chunks):,.0f} "
            f"context rows"
        )


def parquet_files(df: DataFrame, remote: bool = False) -> tuple[list[str] | None, str]:
    """The Parquet files ``df`` is a plain scan of (URIs pyarrow opens), or ``(None, why not)``.

    Local files only, unless ``remote``: then any file system pyarrow can open from the URI
    (``s3://``, ``s3a://``, ``hdfs://``, ``gs://``...) with the credentials the Python processes
    find themselves (Hadoop's ``fs.s3a.*`` settings of the Spark configuration do not reach them).
    """
    try:
        node = df._jdf.queryExecution().executedPlan()
    except Exception:  # not a classic (JVM) DataFrame
        return None, "the input's physical plan cannot be inspected"
    stack, scans = [node], []
    while stack:
        node = stack.pop()
        name = node.getClass().getSimpleName()
        if name not in _SCAN_NODES:
            return None, f"the input is not a plain Parquet scan (its plan has {name})"
        if name == "ProjectExec":
            exprs = node.projectList()
            if any(exprs.apply(i).getClass().getSimpleName() != "AttributeReference" for i in range(exprs.size())):
                return None, "the input computes or renames columns"
        if name == "FileSourceScanExec":
            scans.append(node)
        children = node.children()
        stack.extend(children.apply(i) for i in range(children.size()))
    if len(scans) != 1:
        return None, "the input is not one file scan"
    scan = scans[0]
    rel = scan.relation()
    if rel.fileFormat().getClass().getSimpleName() != "ParquetFileFormat":
        return None, "the input is not Parquet"
    if rel.partitionSchema().size() or scan.dataFilters().size() or scan.partitionFilters().size():
        return None, "the input has partition columns or filters"
    options = str(rel.options()).lower()
    if "rebase" in options or "int96" in options:
        return None, "the input is read with calendar rebase options"
    paths = [pyarrow_path(uri) for uri in df.inputFiles()]
    for path in paths:
        if "://" in path and not remote:
            return None, (
                f"the input is not on a local file system ({path.split('://')[0]}://); "
                "slicing='parquet' reads it with pyarrow's file systems"
            )
    if not paths:
        return None, "the input has no files"
    return sorted(paths), ""


#: Hadoop's names of file systems that pyarrow knows by another name
_HADOOP_SCHEMES = {"s3a": "s3", "s3n": "s3"}


def pyarrow_path(uri: str) -> str:
    """A Spark file URI as pyarrow opens it: a local path for ``file:``, else a URI whose
    scheme pyarrow knows (``s3a://b/k`` -> ``s3://b/k``)."""
    parsed = urlparse(uri)
    if parsed.scheme in ("", "file"):
        return unquote(parsed.path)
    return _HADOOP_SCHEMES.get(parsed.scheme, parsed.scheme) + uri[len(parsed.scheme):]


def open_parquet(uri: str, **kwargs) -> pq.ParquetFile:
    """A Parquet file by local path or URI (pyarrow's file systems)."""
    if "://" not in uri:
        return pq.ParquetFile(uri, **kwargs)
    from pyarrow import fs

    filesystem, path = fs.FileSystem.from_uri(uri)
    return pq.ParquetFile(filesystem.open_input_file(path), **kwargs)


def _file_type_ok(spark_type: T.DataType, arrow_type: pa.DataType, is_ts: bool) -> bool:
    """Whether pyarrow reads the column as Spark does (same values, up to an exact cast)."""
    if is_ts and isinstance(spark_type, (T.TimestampType, T.TimestampNTZType)):
        return pa.types.is_timestamp(arrow_type) and arrow_type.unit in ("ms", "us")
    if pa.types.is_timestamp(arrow_type) or pa.types.is_date(arrow_type):
        return False  # only ts is read as time; other time columns keep the JVM's conversion
    if isinstance(spark_type, T.StringType):
        return pa.types.is_string(arrow_type) or pa.types.is_large_string(arrow_type)
    try:
        expected = to_arrow_type(spark_type)
    except Exception:
        return False
    if arrow_type == expected:
        return True
    # unsigned Parquet integers: Spark widens them (UINT32 -> bigint, ...), pyarrow keeps them
    return pa.types.is_unsigned_integer(arrow_type) and pa.types.is_integer(expected) and (
        expected.bit_width > arrow_type.bit_width
    )


def _stats_ns(value, time: TimeSpec, arrow_type: pa.DataType) -> int:
    """A raw Parquet statistic of ``ts`` in engine ns."""
    if pa.types.is_timestamp(arrow_type):  # the engine reads timestamps as microseconds
        value = int(value) * (1000 if arrow_type.unit == "ms" else 1)
    where = "in the Parquet statistics (a row group's min or max)"
    return int(engine_nanos(np.array([value]), time.kind, time.engine_unit, where)[0])


def row_groups(paths: list[str], schema: T.StructType, columns: list[str], time: TimeSpec) -> tuple[list[RowGroup], str]:
    """Every non-empty row group of ``paths`` with its time range; ``([], why)`` when the files
    cannot be read directly (types, missing statistics)."""
    groups = []
    for f, path in enumerate(paths):
        try:
            meta = open_parquet(path).metadata
        except (OSError, ValueError, pa.ArrowException) as e:
            return [], f"pyarrow cannot open {path}: {e}"
        if meta.metadata and any(k in meta.metadata for k in _LEGACY_KEYS):
            return [], f"{path} was written with Spark 2 legacy dates"
        arrow = meta.schema.to_arrow_schema()
        for col in columns:
            if arrow.get_field_index(col) < 0:
                return [], f"{path} has no column {col!r}"
            if not _file_type_ok(schema[col].dataType, arrow.field(col).type, col == "ts"):
                return [], f"{path} stores {col!r} as {arrow.field(col).type}, which Spark reads differently"
        ts_type = arrow.field("ts").type
        ts_index = [meta.schema.column(i).path for i in range(meta.num_columns)].index("ts")
        first = 0
        for i in range(meta.num_row_groups):
            rg = meta.row_group(i)
            if rg.num_rows:
                stats = rg.column(ts_index).statistics
                if stats is None or not stats.has_min_max:
                    return [], f"{path} has no min/max statistics for 'ts'"
                groups.append(RowGroup(
                    f, i, rg.num_rows, _stats_ns(stats.min_raw, time, ts_type),
                    _stats_ns(stats.max_raw, time, ts_type), first,
                ))
            first += rg.num_rows
    return groups, ""


def chunks_of(groups: list[RowGroup], n: int, lookback: int, horizon: int) -> list[Chunk]:
    """Row groups packed into at most ``n`` chunks disjoint in time, with their context."""
    order = sorted(groups, key=lambda g: (g.min_ns, g.max_ns))
    blocks: list[list[RowGroup]] = []
    end = None
    for g in order:
        if end is not None and g.min_ns <= end:
            blocks[-1].append(g)  # overlaps or touches the block: one owner for its instants
            end = max(end, g.max_ns)
        else:
            blocks.append([g])
            end = g.max_ns
    packed: list[list[RowGroup]] = []
    left, i = _rows(order), 0
    for k in range(min(n, len(blocks)), 0, -1):  # k chunks to go: at least one block each
        target = left / k
        chunk, rows = list(blocks[i]), _rows(blocks[i])
        i += 1
        while i < len(blocks) and len(blocks) - i > k - 1 and rows + _rows(blocks[i]) / 2 <= target:
            chunk.extend(blocks[i])
            rows += _rows(blocks[i])
            i += 1
        packed.append(chunk)
        left -= rows
    ranges = [(min(g.min_ns for g in p), max(g.max_ns for g in p)) for p in packed]
    tiles = tiles_of([PartitionStats(i, lo, hi, 1) for i, (lo, hi) in enumerate(ranges)])
    chunks = []
    for i, (own, (lo, hi)) in enumerate(zip(packed, ranges)):
        before = [g for p in packed[:i] for g in p if g.max_ns >= lo - lookback]
        after = [g for p in packed[i + 1:] for g in p if g.min_ns <= hi + horizon]
        chunks.append(Chunk(
            tuple(sorted(own, key=_file_order)), tuple(sorted(before, key=_file_order)),
            tuple(sorted(after, key=_file_order)), lo, hi, tiles[i], lookback, horizon,
        ))
    return chunks


def unbalanced_reason(own: tuple[RowGroup, ...], total: int, n: int) -> str:
    """Why a chunk of row groups ``own`` holds more than :data:`MAX_CHUNK_SHARE` times its share
    of ``total`` rows in ``n`` chunks: one row group (the plan never splits one), row groups that
    overlap or touch in time (they must share a chunk), or too few row groups to balance."""
    rows = _rows(own)
    limit = f"more than {MAX_CHUNK_SHARE:g} times a chunk's share of {total:,} rows in {n} chunks"
    if len(own) == 1:
        return (
            f"one row group holds {rows:,} of {total:,} rows, {limit} (a row group is never split; "
            "write smaller row groups, e.g. row_group_size=, or use fewer slices)"
        )
    order = sorted(own, key=lambda g: (g.min_ns, g.max_ns))
    end, one_block = order[0].max_ns, True
    for g in order[1:]:
        one_block = one_block and g.min_ns <= end
        end = max(end, g.max_ns)
    if one_block:
        return (
            f"the row groups overlap in time: one run of overlapping row groups holds {rows:,} "
            f"of {total:,} rows, {limit}"
        )
    return f"a chunk of {len(own)} row groups holds {rows:,} of {total:,} rows, {limit} (too few row groups to balance)"


def _rows(groups) -> int:
    return sum(g.rows for g in groups)


def _file_order(g: RowGroup) -> tuple[int, int]:
    return g.file, g.index


def parquet_layout(df: DataFrame, job, forced: bool = False) -> tuple[ParquetLayout | None, str]:
    """The layout of the direct Parquet plan for ``df``, or ``(None, why it does not apply)``.

    With ``forced`` the context may be as large as it is (see :data:`MAX_CONTEXT_READ`)."""
    paths, why = parquet_files(df, remote=forced)
    if paths is None:
        return None, why
    has_id = "id" in df.columns
    if not has_id and len(paths) > 1:
        return None, "the events have no 'id' column and come from several files"
    columns = ["type", "ts"] + ["id"] * has_id + list(job.attributes)
    groups, why = row_groups(paths, df.schema, columns, job.time)
    if not groups:
        return None, why or "the input has no rows"
    total = _rows(groups)
    n = max(job.n_slices, -(-total // MAX_CHUNK_ROWS))  # a task's table stays a few GB at most
    chunks = chunks_of(groups, n, job.plan.lookback_ns, job.plan.horizon_ns)
    largest = max(chunks, key=lambda c: c.rows)
    if not forced and n > 1 and largest.rows > MAX_CHUNK_SHARE * total / n:
        return None, unbalanced_reason(largest.own, total, n)
    for c in chunks:
        if forced:
            break
        if c.context_read > MAX_CONTEXT_READ * c.rows or c.context_kept() > MAX_CONTEXT_KEPT * c.rows:
            return None, (
                f"a chunk of {c.rows:,} rows would need {c.context_read:,} rows of context row "
                f"groups (about {c.context_kept():,.0f} of them in its windows)"
            )
    attributes = tuple((a, to_arrow_type(df.schema[a].dataType)) for a in job.attributes)
    strings = tuple(c for c in ["type", *job.attributes] if isinstance(df.schema[c].dataType, T.StringType))
    return ParquetLayout(tuple(paths), tuple(chunks), has_id, attributes, strings), ""


def run_parquet(spark, job, layout: ParquetLayout) -> DataFrame:
    """One ``mapInArrow`` task per chunk of ``layout`` (over ``spark.range``): read, detect, keep
    the owned composite events."""
    struct = job.engine_struct
    fn = task_fn(_parquet_udf, job, struct, layout=layout, time=(job.time.kind, job.time.engine_unit))
    n = len(layout.chunks)
    return spark.range(0, n, 1, n).mapInArrow(fn, struct)


def read_engine_events(layout: ParquetLayout, groups, types: list[str], time: tuple[str, str]) -> pa.Table:
    """Row groups as the table the JVM plans hand to the tasks: ``type`` (as stored,
    dictionary-encoded; rows of types not in ``types`` dropped, nulls kept), engine ``ts``,
    ``id``, attributes."""
    parts = []
    by_file: dict[int, list[RowGroup]] = {}
    for g in groups:
        by_file.setdefault(g.file, []).append(g)
    cols = ["type", "ts"] + ["id"] * layout.has_id + [a for a, _ in layout.attributes]
    for f, gs in sorted(by_file.items()):
        pf = open_parquet(layout.files[f], read_dictionary=list(layout.strings))
        for g, n in zip(gs, (pf.metadata.row_group(g.index).num_rows for g in gs)):
            if n != g.rows:
                raise RuntimeError(
                    f"cep_gpu.detect_spark: {layout.files[f]} changed after planning "
                    f"(row group {g.index}: {n} rows, planned {g.rows})"
                )
        table = pf.read_row_groups([g.index for g in gs], columns=cols, use_threads=True)
        rows = np.concatenate([np.arange(g.first_row, g.first_row + g.rows, dtype=np.int64) for g in gs])
        if not layout.has_id:
            table = table.append_column("id", pa.array(rows))
        # bad rows fail here, named by their row in the file (the row of df.collect() for one file)
        path = layout.files[f] if len(layout.files) > 1 else None
        check_arrow_rows(table, *time, lambda i, rows=rows, path=path: (
            f"at row {rows[i]}" + (f" of {path}" if path else "")))
        parts.append(table)
    table = pa.concat_tables(parts) if len(parts) > 1 else parts[0]
    kind, unit = time
    code = type_codes(table.column("type"), types)
    keep = pc.or_(pc.is_valid(code), pc.is_null(table.column("type")))
    ts = table.column("ts")
    if pa.types.is_timestamp(ts.type):
        ts = ts.cast(pa.timestamp("us", ts.type.tz)).cast(pa.int64())
    else:
        ts = ts.cast(pa.int64() if kind != "fractional" else pa.float64())
    arrays = [table.column("type"), ts, table.column("id").cast(pa.int64())]
    names = ["type", "ts", "id"]
    for a, t in layout.attributes:
        col = table.column(a)
        arrays.append(col if pa.types.is_dictionary(col.type) else col.cast(t))
        names.append(a)
    return pa.Table.from_arrays(arrays, names=names).filter(keep)


def type_codes(col: pa.ChunkedArray, types: list[str]) -> pa.ChunkedArray:
    """Each event type's position in ``types`` (int32; null for null and for other types), a
    dictionary-encoded column by its dictionary (a few lookups, not one per row)."""
    value_set = pa.array(types, pa.string())
    chunks = []
    for chunk in col.chunks:
        if pa.types.is_dictionary(chunk.type):
            chunks.append(pc.take(pc.index_in(chunk.dictionary.cast(pa.string()), value_set=value_set), chunk.indices))
        else:
            chunks.append(pc.index_in(chunk, value_set=value_set))
    return pa.chunked_array(chunks, pa.int32())


def _parquet_udf(batches, *, rules, backend, time_unit, schema, layout, time):
    types = type_names(rules)
    for c in (i for b in batches for i in b.column(0).to_pylist()):
        chunk = layout.chunks[c]
        groups = sorted(chunk.before + chunk.own + chunk.after, key=_file_order)
        table = read_engine_events(layout, groups, types, time)
        # own rows lie in [min, max], context row groups' rows outside it: keep their windows
        t = engine_nanos(table.column("ts"), *time)
        lo, hi = saturated(chunk.min_ns - chunk.lookback), saturated(chunk.max_ns + chunk.horizon)
        table = table.filter(pa.array((t >= lo) & (t <= hi)))
        out = run_group(table, rules, backend, time_unit, schema)
        yield from owned_rows(out, chunk.tile, time).to_batches()
