"""cuDF ingestion: the events of a Spark task reach the GPU in one copy, through cuDF.

When cuDF is importable and the task's kernels may run on the GPU (:func:`wanted`),
:func:`device_events` builds the engine's event table and puts the columns the GPU kernels read
on the device with a single ``cudf.DataFrame.from_arrow``:

- the host table is :meth:`EventTable.from_arrow` of the task's Arrow table, exactly as without
  cuDF. It stays complete: window searches (``ts``, type codes), static filters, parameter
  indexes, the planner's estimates, CPU batches and the output all read host arrays, and the Arrow
  buffers they come from are already in host memory, so nothing has to come back from the device;
- the device gets one Arrow table: the events' times (int64 ns, the host's conversion), each
  integer, float and boolean attribute column as it arrived (its values and validity bitmap;
  NaN made null first, so the device tells a missing value in one way only), each string
  attribute as the engine's int32 dictionary codes (-1 = null: codes are the engine's, shared
  across batches, which the Arrow dictionary is not), and the permutation into time order when
  the rows were not in it;
- the first time the GPU backend needs one of the table's columns, the column is made from that
  frame on the device (nulls filled, widened to the kernels' dtype, permuted) and adopted as a
  device column instead of being uploaded from the host array
  (:func:`cep_gpu.kernels.gpu.provide_device_copy`). ``from_arrow`` itself runs on that first use,
  so a task whose planner keeps every batch on the CPU copies nothing.

Columns of other types (the few that pandas decides, see ``EventTable.from_arrow``) are uploaded
by the backend as before. The table's arrays get a row lineage of their own
(:func:`cep_gpu.events.lineage.start_lineage`), so rules reading composite events, which extend the table,
append only the composite rows to the adopted columns.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .events import EventTable
from .events.lineage import array_role, start_lineage, tagged_arrays


def cudf_module() -> Any | None:
    """The ``cudf`` module, or None when it cannot be imported (not installed, or no usable GPU)."""
    try:
        import cudf  # type: ignore[import-not-found]
    except Exception:  # ImportError; cuDF raises others when CUDA cannot start
        return None
    return cudf


def wanted(backend: str, task_gpu: int | None) -> bool:
    """Whether a task's events should go to the device through cuDF: ``backend`` runs the GPU
    kernels (``"gpu"``, or another backend over the GPU combiner), or is ``"auto"`` in a task
    that was given a GPU (``task_gpu``, see ``spark_udfs.rapids.use_task_gpu``) where the GPU
    backend can run."""
    from .backends import get_backend, gpu_usable
    from .errors import CepError
    from .kernels.gpu import GpuBackend

    if backend == "auto":
        return task_gpu is not None and gpu_usable()
    try:
        impl = get_backend(backend)
    except (CepError, ImportError, ValueError):
        return False  # detect reports it
    return isinstance(impl, GpuBackend)


def device_events(table: pa.Table, time_unit: str = "s", cudf: Any | None = None) -> EventTable | None:
    """The event table of ``table`` with its kernel columns provided from a cuDF frame (see the
    module docstring); None when cuDF is not importable (``cudf``: the module, for tests)."""
    from .kernels.gpu import column_dtype, provide_device_copy

    cudf = cudf if cudf is not None else cudf_module()
    if cudf is None:
        return None
    host = EventTable.from_arrow(table, time_unit=time_unit, sort=False)
    order = host._order()
    final = host if order is None else host.take(order)

    upload: dict[str, pa.Array | pa.ChunkedArray] = {"ts": pa.array(host.ts)}
    parts: dict[str, tuple[str, str, str]] = {"ts": ("ts", "ts", "ts")}  # role -> (column, kind, part)
    for i, (name, col) in enumerate(host.columns.items()):
        arrived = _device_column(table.column(name), col)
        if arrived is None:
            continue
        upload[f"c{i}"] = arrived
        for part in ("values", "valid"):
            parts[array_role(part, name)] = (f"c{i}", col.kind, part)
    if order is not None:
        upload["order"] = pa.array(order)
    frame = _Frame(cudf, pa.table(upload))

    start_lineage(final)
    arrays = {role: arr for role, arr, _ in tagged_arrays(final)}
    for role, (column, kind, part) in parts.items():
        dtype = column_dtype(part, kind)
        provide_device_copy(arrays[role], lambda c=column, k=kind, p=part, d=dtype: frame.array(c, k, p, d))
    return final


def _device_column(arrived: pa.ChunkedArray, col) -> pa.ChunkedArray | pa.Array | None:
    """What goes to the device for one attribute (see the module docstring), or None."""
    t = arrived.type
    if col.kind == "string":
        return pa.array(col.values)  # the engine's codes, -1 = null
    if (col.kind == "int" and pa.types.is_integer(t)) or (col.kind == "bool" and pa.types.is_boolean(t)):
        return arrived
    if col.kind == "float" and pa.types.is_floating(t):
        if pa.types.is_float16(t):
            arrived = arrived.cast(pa.float32())  # cuDF has no half floats
        if int(np.count_nonzero(col.valid)) != len(arrived) - arrived.null_count:  # NaNs: make them null
            arrived = pc.if_else(pc.is_nan(arrived), pa.scalar(None, arrived.type), arrived)
        return arrived
    return None


class _Frame:
    """The cuDF frame of one table's device columns, made on first use (one ``from_arrow``)."""

    def __init__(self, cudf: Any, upload: pa.Table) -> None:
        self._cudf = cudf
        self._upload: pa.Table | None = upload  # with an "order" column when rows need permuting
        self._frame: Any = None
        self._order: Any = None

    def array(self, column: str, kind: str, part: str, dtype: np.dtype) -> Any:
        """The kernels' array (``dtype``, time order) of ``part`` of one uploaded column."""
        if self._frame is None:
            self._frame = self._cudf.DataFrame.from_arrow(self._upload)  # the one host-to-device copy
            if "order" in self._upload.column_names:
                self._order = self._frame["order"].values
            self._upload = None
        s = self._frame[column]
        if part == "ts":
            out = s.values.astype(dtype)
        elif kind == "string":
            codes = s.values
            out = codes.astype(dtype) if part == "values" else (codes >= 0).astype(dtype)
        elif part == "valid":
            out = s.notna().values.astype(dtype)
        elif kind == "float":
            out = s.fillna(0.0).values.astype(dtype)
            out[~s.notna().values] = np.nan
        else:
            out = s.fillna(False if kind == "bool" else 0).values.astype(dtype)
        return out if self._order is None else out[self._order]
