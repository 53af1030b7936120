"""Table columns on the device: the dtypes the kernels read, device copies provided at ingestion,
and :class:`DeviceColumn` buffers that grow by doubling and keep the rows the row lineage proves
unchanged."""

from __future__ import annotations

import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

I64_MAX = np.iinfo(np.int64).max



def column_dtype(part: str, kind: str | None = None) -> np.dtype:
    """The dtype the kernels read a table array as: ``part`` is ``"ts"`` (int64), ``"valid"``
    (uint8) or ``"values"`` of an attribute of ``kind`` (float64 floats, uint8 booleans, int64
    integers and string codes)."""
    if part == "ts":
        return np.dtype(np.int64)
    if part == "valid" or kind == "bool":
        return np.dtype(np.uint8)
    return np.dtype(np.float64 if kind == "float" else np.int64)



class ArrayNotes:
    """Values attached to NumPy arrays by identity, forgotten when the array is collected.

    Arrays are not hashable, and an ``id`` is reused once its object is gone: each note keeps a
    weak reference that both checks the identity on lookup and drops the note with the array.
    """

    def __init__(self) -> None:
        self._notes: dict[int, tuple[weakref.ref, object]] = {}

    def set(self, arr: np.ndarray, value: object) -> None:
        key = id(arr)

        def drop(ref: weakref.ref, key: int = key) -> None:
            hit = self._notes.get(key)
            if hit is not None and hit[0] is ref:
                del self._notes[key]

        self._notes[key] = (weakref.ref(arr, drop), value)

    def get(self, arr: np.ndarray):
        """The note on ``arr``, or None."""
        hit = self._notes.get(id(arr))
        return hit[1] if hit is not None and hit[0]() is arr else None

    def clear(self) -> None:
        self._notes.clear()



_PROVIDED = ArrayNotes()  # table array -> fetch() of its device copy



def provide_device_copy(arr: np.ndarray, fetch: Callable[[], Any]) -> None:
    """Declare that ``fetch()`` makes the device copy of table array ``arr``: a device array of
    ``len(arr)`` elements of the kernels' dtype (:func:`column_dtype`) holding ``arr``'s values.

    The GPU backend then calls it, at most once per column it builds, instead of uploading
    ``arr`` (``cep_gpu.ingest_cudf`` provides the columns of a table that went to the device
    through cuDF). Only arrays with a row tag (:class:`~cep_gpu.events.RowTag`) become device
    columns; the declaration lives as long as ``arr``.
    """
    _PROVIDED.set(arr, fetch)



def provided_copy(arr: np.ndarray) -> Any | None:
    """The device copy that :func:`provide_device_copy` declared for ``arr`` (made now), or None."""
    fetch = _PROVIDED.get(arr)
    return None if fetch is None else fetch()



#: Smallest capacity (elements) of a device column.
MIN_COLUMN_CAPACITY = 256



@dataclass
class DeviceColumn:
    """One table column on the device: global rows ``[start, start + n)`` of the array last copied
    at ``buf[head : head + n]``; ``relatives`` are that array's lineage and ancestors with their cuts
    (:class:`~cep_gpu.events.RowTag`), which decide what a later array may reuse.

    ``buf`` holds ``capacity`` elements. Appending writes behind the live rows; dropping an expired
    prefix moves ``head``. When the rows no longer fit behind ``head`` they move to the front (of
    this buffer, or of a new one twice as large); once the buffer holds eight times the live rows
    they move to a smaller one (see :func:`column_capacity`).
    ``host`` (a weak reference) is the host array last copied, so a repeated array costs nothing.
    """

    role: str
    dtype: np.dtype
    buf: Any
    capacity: int
    head: int = 0
    n: int = 0
    start: int = 0
    relatives: dict[int, int] = field(default_factory=dict)  # lineage -> cut; its own: I64_MAX
    host: Any = None
    used: int = 0  # table version (see GpuCombiner._version) at the last use

    @property
    def nbytes(self) -> int:
        return self.capacity * self.dtype.itemsize



def column_capacity(current: int, want: int) -> int:
    """A column capacity for ``want`` elements: ``current`` doubled until it holds them, or halved
    while it holds four times as many (never below :data:`MIN_COLUMN_CAPACITY`)."""
    cap = max(int(current), MIN_COLUMN_CAPACITY)
    while cap < want:
        cap *= 2
    while cap // 2 >= MIN_COLUMN_CAPACITY and cap >= 4 * want:
        cap //= 2
    return cap



def as_device_dtype(arr: np.ndarray, dtype: Any) -> np.ndarray:
    """``arr`` as the contiguous array of ``dtype`` that the kernels read (bools as uint8)."""
    host = np.ascontiguousarray(arr)
    if host.dtype == np.bool_:
        host = host.view(np.uint8)
    return host.astype(dtype, copy=False)

