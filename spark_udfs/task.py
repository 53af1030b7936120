"""What runs inside a Spark task: one Arrow table of events in, one Arrow table of composite events out.

The functions here are the bodies of the Arrow-based grouped UDFs (``applyInArrow``) of
:mod:`cep_gpu.spark_udfs.batch`: Spark hands a whole group (a key, or a time slice with its
context) as one ``pyarrow.Table``, the engine runs on it once, and the composite events go back
as one ``pyarrow.Table``. No Python runs per event.
"""

from __future__ import annotations

import functools
import inspect
import re
from collections.abc import Sequence

import numpy as np
import pyarrow as pa

from cep_gpu import ingest_cudf, kleene
from cep_gpu.detect import detect
from cep_gpu.errors import EventError
from cep_gpu.events import EventTable
from cep_gpu.model import Rule

from .rapids import use_task_gpu
from .schema import SLICE, T_NS


def type_names(rules: Sequence[Rule]) -> list[str]:
    """The event types the rules read, in a fixed order: the meaning of the integer ``type``
    codes that the batch plans send to the tasks (see ``batch._engine_events``)."""
    return sorted({t for r in rules for t in r.input_types})


def engine_input(table: pa.Table, types: Sequence[str] | None = None) -> pa.Table:
    """The events of one group as the Arrow table ``detect`` reads (internal columns dropped).

    The engine ingests Arrow columns directly (:meth:`cep_gpu.events.EventTable.from_arrow`: no
    pandas frame, no Python per row). When ``type`` arrives as integer codes into ``types`` (the
    batch plans send no type strings), it becomes a dictionary array over ``types``: the codes
    are its indices (nulls stay null, for ``detect`` to reject), the names its dictionary.
    """
    drop = [c for c in (T_NS, SLICE) if c in table.column_names]
    if drop:
        table = table.drop_columns(drop)
    if types is not None and pa.types.is_integer(table.schema.field("type").type):
        at = table.schema.get_field_index("type")
        table = table.set_column(at, "type", type_dictionary(table.column("type"), types))
    return table


def type_dictionary(codes: pa.ChunkedArray, types: Sequence[str]) -> pa.ChunkedArray:
    """Integer type codes into ``types`` as a dictionary array (Arrow checks the codes' range)."""
    names = pa.array(list(types), pa.string())
    chunks = [pa.DictionaryArray.from_arrays(c, names) for c in codes.cast(pa.int32()).chunks]
    return pa.chunked_array(chunks, pa.dictionary(pa.int32(), pa.string()))


def task_events(table: pa.Table, backend: str, time_unit: str, device: int | None) -> pa.Table | EventTable:
    """What ``detect`` gets in a task: ``table`` (from :func:`engine_input`), or, when cuDF is
    importable and the kernels may run on the task's GPU, its event table whose kernel columns
    come from one ``cudf.DataFrame.from_arrow`` copy (:mod:`cep_gpu.ingest_cudf`; docs/spark.md,
    "cuDF"). ``device``: the task's GPU ordinal from ``use_task_gpu``."""
    if ingest_cudf.wanted(backend, device):
        on_device = ingest_cudf.device_events(table, time_unit)
        if on_device is not None:
            return on_device
    return table


def task_fn(udf, job, struct, **extra):
    """``udf`` bound to what every engine task needs from the driver's plan ``job`` (rules,
    backend, engine time unit, the Arrow output schema of ``struct``), plus ``extra``."""
    from pyspark.sql.pandas.types import to_arrow_schema

    return under_drivers_limit(functools.partial(
        udf, rules=job.rules, backend=job.backend, time_unit=job.time.engine_unit,
        schema=to_arrow_schema(struct), **extra,
    ))


def under_drivers_limit(fn):
    """``fn`` run under the Kleene match limit in force here, in the driver
    (``cep_gpu.kleene.limit``, ``DEFAULT_MAX_MATCHES`` unless set): a task runs in a worker
    process, where the driver's ``with limit(N)`` does not reach (docs/language.md, "The output
    limit"). Keeps ``fn``'s signature, which Spark reads to call it."""
    n = kleene.max_matches()
    func = fn.func if isinstance(fn, functools.partial) else fn
    if inspect.isgeneratorfunction(func):

        def run(*args):
            with kleene.limit(n):
                yield from fn(*args)

    else:

        def run(*args):
            with kleene.limit(n):
                return fn(*args)

    run.__signature__ = inspect.signature(fn)
    return run


def to_ipc(table: pa.Table) -> bytes:
    """An Arrow table as Arrow IPC stream bytes (for broadcasts and streaming state)."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return sink.getvalue().to_pybytes()


def from_ipc(data: bytes) -> pa.Table:
    """The table of :func:`to_ipc`'s bytes."""
    return pa.ipc.open_stream(pa.py_buffer(data)).read_all()


def conform(out: pa.Table, schema: pa.Schema) -> pa.Table:
    """``detect``'s Arrow output cast to the UDF's declared output schema (same column order)."""
    cols = []
    for field in schema:
        if field.name in out.column_names:
            cols.append(out.column(field.name).cast(field.type))
        else:
            cols.append(pa.nulls(out.num_rows, field.type))
    return pa.Table.from_arrays(cols, schema=schema)


def run_group(
    table: pa.Table,
    rules: Sequence[Rule],
    backend: str,
    time_unit: str,
    schema: pa.Schema,
    slice_id: int | None = None,
) -> pa.Table:
    """Detect ``rules`` over one group's events; composite events in ``schema`` (+ slice id)."""
    device = use_task_gpu()  # the task's GPU (if any) becomes the CuPy device the planner may pick
    events = task_events(engine_input(table, type_names(rules)), backend, time_unit, device)
    try:
        out = detect(events, list(rules), backend=backend, time_unit=time_unit, output="arrow")
    except EventError as err:
        raise task_error(err) from None
    body = schema if slice_id is None else pa.schema([f for f in schema if f.name != SLICE])
    result = conform(out, body)
    if slice_id is not None:
        result = result.append_column(SLICE, pa.array(np.full(result.num_rows, slice_id, np.int32)))
    return result


def task_error(err: EventError) -> EventError:
    """``err`` with any row number it names marked as one of the task's own events: the input's
    rows were checked before the task (``checks``), so this is the last resort of an error the
    checks do not foresee, and the number must not pass for an input row."""
    text = re.sub(r"\bat row (\d+)", r"at row \1 of the events one Spark task ran (not an input row)", str(err))
    return err if text == str(err) else type(err)(text)


def engine_nanos(
    ts: pa.ChunkedArray | pa.Array | np.ndarray, kind: str, unit: str, where: str | None = None
) -> np.ndarray:
    """Engine ``ts`` values as int64 ns: the arithmetic of :meth:`TimeSpec.nanos` in NumPy.

    Values whose ns overflow int64 are an ``EventError`` naming the row (or ``where``)."""
    from cep_gpu.events import UNIT_NS, check_ts_range

    values = np.asarray(ts)
    scale = UNIT_NS[unit]
    check_ts_range(values, unit, where)  # the ns must fit in an int64 (files read by the tasks themselves)
    if kind == "fractional":
        return np.round(values.astype(np.float64) * scale).astype(np.int64)
    return values.astype(np.int64) * scale
