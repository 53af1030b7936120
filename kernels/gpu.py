"""The GPU backend (``backend="gpu"``): the CDP combination step in CUDA, launched through CuPy.

:class:`GpuCombiner` is the GPU side of the seam in :mod:`cep_gpu.cdp` (the host loop, columns,
window ranges and parameter index are shared with the CPU backend): per step it uploads the
partial sequences and their candidate ranges, maps threads to (sequence, candidate) pairs through
the exclusive prefix sum of the range sizes, and launches ``cdp_each`` (atomic output index) or
``cdp_select`` (atomic max/min on the candidate index); aggregates run in ``cdp_aggregates``. Rule
checks are generated CUDA C (:mod:`cep_gpu.codegen.cuda`) from the same lowered spec the Numba
kernels use.

The combiner talks to a *runtime* that owns memory, transfers and launches:
:class:`CupyRuntime` compiles ``cuda/`` with NVRTC (``cupy.RawModule``, cached by the source hash
and the device's compute capability) and runs on a device; ``kernels/host.py`` has
``HostRuntime``, the same kernels compiled by g++ and run serially over the whole grid, which is
how the tests prove this launch path without a GPU.

Output buffers: ``each`` writes through an atomic output index; if the count passes the buffer's
capacity the combiner grows the buffer to exactly that count and relaunches, so results are never
truncated. Buffers grow by doubling and are reused across steps and calls. If the device runs out
of memory, the batch of sequences is split in two and retried; a single sequence that still does
not fit raises :class:`DeviceMemoryError` with the number of bytes asked for. Output is sorted on
the host by the pair index, i.e. by (sequence, candidate): the same order as the CPU kernels.

Table columns (timestamps, attribute values and validity) live on the device as
:class:`DeviceColumn` buffers, one per column, that grow by doubling. In streaming the engine's
buffer table changes by dropping an expired prefix and appending events; the row lineage that
:class:`~cep_gpu.events.EventTable` records (:class:`~cep_gpu.events.RowTag`) proves which rows of
a device column are still those of the new table, so only the new tail is copied (asynchronously,
from pinned memory on the runtime's stream) and the expired prefix is released by moving the
column's start (and moving the rows into a smaller buffer once it holds eight times what is live).
Whatever the lineage cannot prove is uploaded in full. Arrays without a tag (batch tables, and the
per-call negation, aggregate and candidate columns) are copied once per array object. A column
whose device copy was made at ingestion (:func:`provide_device_copy`: a table that went to the
device through cuDF, see :mod:`cep_gpu.ingest_cudf`) is taken from that copy instead of uploaded.
"""

from __future__ import annotations

import hashlib
import re
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from ..backends import register
from ..cdp import CDPBackend, StepInput
from ..codegen import RuleSpec
from ..codegen.cuda import CudaRule, generate, step_id
from ..errors import BackendUnavailableError, CepError
from ..events import MAX_ANCESTORS, ArrayNotes, array_role, row_tag

I64_MAX = np.iinfo(np.int64).max

#: Parameter kinds of each kernel in cuda/cdp.cu: "p" pointer, "i" int64.
KERNELS: dict[str, str] = {
    "cdp_each": "ppiipipppipppi",
    "cdp_select": "ppiiipipppip",
    "cdp_aggregates": "pppip",
}


class DeviceMemoryError(CepError, MemoryError):
    """The device cannot hold the work of even a single partial sequence."""


class DeviceOutOfMemory(Exception):
    """Raised by a runtime when an allocation fails (caught by the combiner, which splits the batch)."""

    def __init__(self, nbytes: int) -> None:
        super().__init__(f"out of device memory allocating {nbytes} bytes")
        self.nbytes = nbytes


def cuda_dir() -> Path:
    """The folder holding cdp.cuh, portable.cuh, cdp.cu (installed as package data)."""
    return Path(str(resources.files("cep_gpu.cuda")))


def full_source(rule_source: str) -> str:
    """The translation unit for one rule: its generated header, then the kernel wrappers."""
    return f'#include "cdp.cuh"\n{rule_source}\n#include "cdp.cu"\n'


def sources_digest(folder: Path | None = None) -> str:
    """A hash of every file in cuda/ (or ``folder``), part of every compile-cache key."""
    h = hashlib.sha256()
    for p in sorted((cuda_dir() if folder is None else Path(folder)).iterdir()):
        if p.suffix in (".cu", ".cuh", ".h"):
            h.update(p.name.encode())
            h.update(p.read_bytes())
    return h.hexdigest()[:24]


_INCLUDE = re.compile(r'^[ \t]*#[ \t]*include[ \t]*"([^"]+)"[ \t]*$', re.MULTILINE)

#: NVRTC options of the device build (CuPy adds the device's ``-arch``). No fast-math: the kernels'
#: null semantics rely on IEEE NaN comparisons and exact division.
NVRTC_OPTIONS: tuple[str, ...] = ("-std=c++17",)


def nvrtc_source(rule_source: str, folder: Path | None = None) -> str:
    """The translation unit of one rule with every ``#include "..."`` of ``cuda/`` written out, so
    that the text NVRTC compiles is everything it depends on: CuPy's on-disk kernel cache keys on
    that text and the options, and never reads the headers an ``-I`` path would bring in (an
    edited or upgraded ``cuda/`` would otherwise load a stale binary). Each file is written out
    once, where it is first included (they all have include guards); ``#line`` keeps compiler
    messages pointing at the right file and line. ``folder`` replaces ``cuda/`` (tests)."""
    folder = cuda_dir() if folder is None else Path(folder)
    done: set[str] = set()

    def expand(text: str, name: str) -> str:
        out, pos = [], 0
        for m in _INCLUDE.finditer(text):
            out.append(text[pos:m.start()])
            pos = m.end()
            inc = m.group(1)
            path = folder / inc
            if not path.is_file():
                raise FileNotFoundError(f"{name}: #include \"{inc}\" is not a file of {folder}")
            if inc in done:
                continue
            done.add(inc)
            line = text.count("\n", 0, m.end()) + 2  # the line after the directive
            out.append(f'#line 1 "{inc}"\n{expand(path.read_text(), inc)}\n#line {line} "{name}"')
        out.append(text[pos:])
        return "".join(out)

    digest = sources_digest(folder)
    return f"// cep-gpu kernels, cuda/ sources {digest}\n" + expand(full_source(rule_source), "rule.cu")


def compile_key(source: str, arch: str, options: tuple[str, ...], versions: tuple[str, ...]) -> str:
    """The key of one compiled module: the whole source text (:func:`nvrtc_source`), the device's
    compute capability, the NVRTC options, and the versions of CuPy, NVRTC and the CUDA driver."""
    h = hashlib.sha256()
    for part in (source, arch, *options, "|", *versions):
        h.update(part.encode())
        h.update(b"\0")
    return h.hexdigest()[:32]


# ----------------------------------------------------------------------------------------------
# The runtime interface both CuPy and the host build implement


class Module(Protocol):
    def launch(self, name: str, n_threads: int, *args: Any) -> None:
        """Run kernel ``name`` over ``n_threads`` work items (grid-stride)."""


class Runtime(Protocol):
    """Memory, transfers and launches. Buffers are 1-d arrays of the runtime (NumPy or CuPy)."""

    name: str

    def compile(self, rule: CudaRule) -> Module: ...

    def to_device(self, host: np.ndarray) -> Any: ...

    def empty(self, n: int, dtype: Any) -> Any: ...

    def full(self, n: int, value: int, dtype: Any) -> Any: ...

    def to_host(self, buf: Any, n: int | None = None) -> np.ndarray: ...

    def copy_in(self, buf: Any, offset: int, host: np.ndarray) -> None:
        """Copy ``host`` into ``buf[offset : offset + len(host)]`` (asynchronously where it can)."""
        ...

    def copy_within(self, dst: Any, dst_offset: int, src: Any, src_offset: int, n: int) -> None:
        """Device-to-device copy of ``n`` elements; the two ranges never overlap."""
        ...

    def view(self, buf: Any, start: int, stop: int) -> Any:
        """``buf[start:stop]`` without a copy (its pointer is what kernels get)."""
        ...

    def pointer(self, buf: Any) -> int: ...

    def adopt(self, buf: Any) -> Any | None:
        """``buf``, a device array made elsewhere (cuDF), as a buffer of this runtime, or None
        when it cannot use it (another device or kind of memory)."""
        ...

    def bytes_in_use(self) -> int: ...


class GrowingBuffer:
    """A device array that grows by doubling (amortised) or to an exact size (overflow)."""

    def __init__(self, runtime: Runtime, dtype: Any, capacity: int) -> None:
        self.runtime = runtime
        self.dtype = np.dtype(dtype)
        self.capacity = max(int(capacity), 1)
        self.data = runtime.empty(self.capacity, self.dtype)

    def ensure(self, n: int) -> None:
        """At least ``n`` elements, doubling the capacity when it has to grow."""
        if n > self.capacity:
            self._resize(max(n, 2 * self.capacity))

    def grow_exact(self, n: int) -> None:
        """Exactly ``n`` elements (after an output overflow: the kernel told us the count)."""
        if n > self.capacity:
            self._resize(n)

    def _resize(self, n: int) -> None:
        self.data = None  # release first, so that the new allocation can reuse the memory
        self.data = self.runtime.empty(n, self.dtype)
        self.capacity = n


@dataclass
class LaunchStats:
    """Counters of the launch path and of transfers (tests check that each path ran).

    ``bytes_uploaded``: every host-to-device copy; ``column_bytes_uploaded``: the part that went
    into table columns (:class:`DeviceColumn`); ``column_full_uploads`` / ``column_appends``: column
    updates that copied the whole column / only new rows; ``column_rows_reused``: rows kept on the
    device by appends; ``column_compactions``: columns moved into a new (larger or smaller) buffer
    or to the front of their own; ``column_adoptions``: columns taken from a device copy made at
    ingestion (:func:`provide_device_copy`) instead of uploaded.
    """

    launches: int = 0
    relaunches: int = 0
    splits: int = 0
    bytes_uploaded: int = 0
    column_bytes_uploaded: int = 0
    column_full_uploads: int = 0
    column_appends: int = 0
    column_rows_reused: int = 0
    column_compactions: int = 0
    column_adoptions: int = 0


def column_dtype(part: str, kind: str | None = None) -> np.dtype:
    """The dtype the kernels read a table array as: ``part`` is ``"ts"`` (int64), ``"valid"``
    (uint8) or ``"values"`` of an attribute of ``kind`` (float64 floats, uint8 booleans, int64
    integers and string codes)."""
    if part == "ts":
        return np.dtype(np.int64)
    if part == "valid" or kind == "bool":
        return np.dtype(np.uint8)
    return np.dtype(np.float64 if kind == "float" else np.int64)


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
    they move to a smaller one (see :func:`_capacity`).
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


def _capacity(current: int, want: int) -> int:
    """A column capacity for ``want`` elements: ``current`` doubled until it holds them, or halved
    while it holds four times as many (never below :data:`MIN_COLUMN_CAPACITY`)."""
    cap = max(int(current), MIN_COLUMN_CAPACITY)
    while cap < want:
        cap *= 2
    while cap // 2 >= MIN_COLUMN_CAPACITY and cap >= 4 * want:
        cap //= 2
    return cap


def _as_device_dtype(arr: np.ndarray, dtype: Any) -> np.ndarray:
    """``arr`` as the contiguous array of ``dtype`` that the kernels read (bools as uint8)."""
    host = np.ascontiguousarray(arr)
    if host.dtype == np.bool_:
        host = host.view(np.uint8)
    return host.astype(dtype, copy=False)


@dataclass
class GpuKernels:
    """One rule compiled for a runtime."""

    spec: RuleSpec
    code: CudaRule
    module: Module
    kinds: dict[str, str | None]


class GpuCombiner:
    """The GPU combination step for :class:`cep_gpu.cdp.CDPBackend` (see module docstring).

    ``initial_capacity``: sequences a fresh output buffer holds (small values force the overflow
    path in tests).
    """

    def __init__(
        self, runtime: Runtime, name: str = "gpu", initial_capacity: int = 1 << 14, check_columns: bool = False
    ) -> None:
        self.runtime = runtime
        self.name = name
        self.initial_capacity = max(int(initial_capacity), 1)
        #: compare every device column with its host array after each update (tests; costs a download)
        self.check_columns = check_columns
        self.stats = LaunchStats()
        self._codes: dict[tuple, CudaRule] = {}
        self._buffers: dict[str, GrowingBuffer] = {}
        self._arrays = ArrayNotes()  # host array -> its device copy
        self._columns: dict[str, DeviceColumn] = {}  # role -> table column on the device
        self._version = 0  # table versions seen (new lineages of the "ts" column)
        self._ts_lineage = -1
        self._zeros: Any = None  # zero flags (no row consumed), grown by doubling

    # -- the Combiner protocol ---------------------------------------------------------------------

    def prepare(self, spec: RuleSpec, kinds: dict[str, str | None]) -> GpuKernels:
        """Generate and compile (cached by source hash, and by architecture on a device)."""
        key = (spec, tuple(sorted(kinds.items())))
        code = self._codes.get(key)
        if code is None:
            code = self._codes[key] = generate(spec, kinds)
        return GpuKernels(spec, code, self.runtime.compile(code), dict(kinds))

    def each(self, kernels: GpuKernels, step: StepInput) -> np.ndarray:
        """Every valid (sequence, candidate) pair, extended, in (sequence, candidate) order."""
        return self._split(self._each, kernels, step)

    def select(self, kernels: GpuKernels, step: StepInput, last: bool) -> np.ndarray:
        """The latest/earliest valid candidate row per sequence, -1 where none."""
        return self._split(lambda k, s: self._select(k, s, last), kernels, step)

    def aggregates(self, kernels: GpuKernels, spec: RuleSpec, seqs: np.ndarray, env: tuple) -> np.ndarray:
        """(n, n_aggregates) aggregate values of complete sequences (NaN = null)."""
        n, n_agg = len(seqs), len(spec.rule.aggregates)
        if n == 0 or n_agg == 0:
            return np.full((n, n_agg), np.nan)
        rt = self.runtime
        tab, scal, _keep = self._context(kernels, env, None)
        seq_dev = self._upload(np.ascontiguousarray(seqs, np.int64).ravel())
        out = rt.empty(n * n_agg, np.float64)
        self._launch(kernels, "cdp_aggregates", n, tab, scal, seq_dev, n, out)
        return rt.to_host(out).reshape(n, n_agg)

    def memory_in_use(self) -> int:
        """Bytes of device memory held (reported by ``Engine.stats()`` where it asks)."""
        return self.runtime.bytes_in_use()

    def stats_dict(self) -> dict:
        """Device memory, launch and transfer counters (see :class:`LaunchStats`), as a dict."""
        out = {
            "device": self.name,
            "device_memory_bytes": self.runtime.bytes_in_use(),
            "column_memory_bytes": sum(c.nbytes for c in self._columns.values()),
            "columns_on_device": len(self._columns),
        }
        out.update(vars(self.stats))
        return out

    def release(self) -> None:
        """Drop every device buffer this combiner holds (columns, caches, output buffers)."""
        self._columns.clear()
        self._arrays.clear()
        self._buffers.clear()
        self._zeros = None

    # -- device data ---------------------------------------------------------------------------------

    def _upload(self, host: np.ndarray) -> Any:
        """A new device array holding ``host`` (counted in ``stats.bytes_uploaded``)."""
        host = np.ascontiguousarray(host)
        self.stats.bytes_uploaded += host.nbytes
        return self.runtime.to_device(host)

    def _device(self, arr: np.ndarray, dtype: Any) -> Any:
        """Device copy of a host array without a row lineage, cached while the array lives."""
        dev = self._arrays.get(arr)
        if dev is None:
            dev = self._upload(_as_device_dtype(arr, dtype))
            self._arrays.set(arr, dev)
        return dev

    def _column(self, arr: np.ndarray, role: str, dtype: Any) -> Any:
        """The device copy of table array ``arr`` (role ``role``), updated incrementally.

        The array's row tag says which lineage and global rows it holds; the rows the device column
        holds that the tag proves unchanged stay, the expired prefix is dropped, and only the rows
        after them are copied. Anything the tag cannot prove is uploaded in full.
        """
        tag = row_tag(arr)
        if tag is None or tag.role != role:
            return self._device(arr, dtype)
        dtype = np.dtype(dtype)
        rt = self.runtime
        if role == "ts" and tag.lineage != self._ts_lineage:
            self._ts_lineage = tag.lineage
            self._version += 1
            self._evict()
        col = self._columns.get(role)
        n = len(arr)
        if col is not None and col.dtype == dtype and col.host is not None and col.host() is arr:
            col.used = self._version
            return rt.view(col.buf, col.head, col.head + n)
        keep = 0
        relatives = {tag.lineage: I64_MAX, **dict(tag.ancestors)}
        if col is not None and col.dtype == dtype and tag.base >= col.start:
            # the rows below `cut` are those of a lineage both descend from (or share)
            cut = max((min(c, col.relatives[lin]) for lin, c in relatives.items() if lin in col.relatives), default=0)
            keep = max(min(col.start + col.n, cut, tag.base + n) - tag.base, 0)
        if keep > 0:
            self._append(col, tag.base - col.start, keep, _as_device_dtype(arr[keep:], dtype))
        else:
            col = self._adopt(role, dtype, arr) or self._fill(col, role, dtype, _as_device_dtype(arr, dtype))
        col.n, col.start, col.relatives = n, tag.base, relatives
        col.host, col.used = weakref.ref(arr), self._version
        view = rt.view(col.buf, col.head, col.head + n)
        if self.check_columns:
            got = rt.to_host(view)
            if not np.array_equal(got, _as_device_dtype(arr, dtype), equal_nan=dtype.kind == "f"):
                raise AssertionError(f"device column {role!r} differs from its host array")
        return view

    def _adopt(self, role: str, dtype: np.dtype, arr: np.ndarray) -> DeviceColumn | None:
        """The whole column from the device copy provided for ``arr`` at ingestion, if there is
        one this runtime can use (else None: the caller uploads ``arr``)."""
        dev = provided_copy(arr) if len(arr) else None
        dev = None if dev is None else self.runtime.adopt(dev)
        if dev is None or len(dev) != len(arr) or np.dtype(dev.dtype) != dtype:
            return None
        self._drop_column(role)
        col = self._columns[role] = DeviceColumn(role, dtype, dev, len(dev))
        self.stats.column_adoptions += 1
        return col

    def _fill(self, col: DeviceColumn | None, role: str, dtype: np.dtype, host: np.ndarray) -> DeviceColumn:
        """Upload ``host`` as the whole column (reusing the buffer when its size suits)."""
        n = len(host)
        if col is None or col.dtype != dtype or _capacity(col.capacity, n) != col.capacity:
            cap = _capacity(0 if col is None or col.dtype != dtype else col.capacity, n)
            self._drop_column(role)
            col = self._columns[role] = DeviceColumn(role, dtype, self.runtime.empty(cap, dtype), cap)
        col.head = 0
        self._copy_in(col.buf, 0, host)
        self.stats.column_full_uploads += 1
        return col

    def _append(self, col: DeviceColumn, drop: int, keep: int, tail: np.ndarray) -> None:
        """Drop ``drop`` expired rows, keep the next ``keep``, copy ``tail`` in after them."""
        rt = self.runtime
        head = col.head + drop
        need = keep + len(tail)
        cap = _capacity(col.capacity, 2 * need)
        if head + need > col.capacity or cap < col.capacity:
            # no room behind the live rows, or the buffer is far too large after expiry: move the
            # live rows to the front of this buffer (when the two places do not overlap and the
            # size suits) or of one sized for twice the live rows
            if cap == col.capacity and head >= keep:
                rt.copy_within(col.buf, 0, col.buf, head, keep)
            else:
                new = rt.empty(cap, col.dtype)
                rt.copy_within(new, 0, col.buf, head, keep)
                col.buf, col.capacity = new, cap
            head = 0
            self.stats.column_compactions += 1
        col.head = head
        self._copy_in(col.buf, head + keep, tail)
        self.stats.column_appends += 1
        self.stats.column_rows_reused += keep

    def _drop_column(self, role: str) -> None:
        """Forget the device column of ``role`` and release its buffer now (callers may still hold
        the column object), so that a new allocation can reuse the memory."""
        col = self._columns.pop(role, None)
        if col is not None:
            col.buf = None

    def _copy_in(self, buf: Any, offset: int, host: np.ndarray) -> None:
        if len(host):
            self.runtime.copy_in(buf, offset, host)
        self.stats.bytes_uploaded += host.nbytes
        self.stats.column_bytes_uploaded += host.nbytes

    def _evict(self) -> None:
        """Drop columns no table version since ``MAX_ANCESTORS`` versions ago has used: no tag
        can lead back to them any more."""
        old = [r for r, c in self._columns.items() if c.used < self._version - MAX_ANCESTORS - 1]
        for r in old:
            del self._columns[r]

    def _excluded(self, n_rows: int, excluded: np.ndarray | None) -> Any:
        if excluded is None:
            # no row is consumed: a view of a zero buffer that grows by doubling
            n = max(n_rows, 1)
            if self._zeros is None or len(self._zeros) < n:
                cap = _capacity(0 if self._zeros is None else len(self._zeros), n)
                self._zeros = None
                self._zeros = self.runtime.full(cap, 0, np.uint8)
            return self.runtime.view(self._zeros, 0, n)
        # consumption edits the mask between calls: copy it each time
        return self._upload(np.ascontiguousarray(excluded).view(np.uint8))

    def _context(self, kernels: GpuKernels, env: tuple, excluded: np.ndarray | None) -> tuple[Any, Any, list]:
        """The pointer and scalar tables of cdp.cuh's Ctx for this env (see codegen.cuda)."""
        lay = kernels.spec.layout
        keep = [self._column(env[0], "ts", column_dtype("ts")), self._excluded(len(env[0]), excluded)]
        for e in range(1, len(env)):
            if e == lay.strings_at:
                keep.append(keep[0])  # codes travel in the scalar table; keep slots aligned
                continue
            arr = env[e]
            if e < lay.strings_at:
                attr = lay.attrs[(e - 1) // 2]
                kind = kernels.kinds.get(attr)
                part = "valid" if (e - 1) % 2 == 1 else "values"
                dtype = column_dtype(part, kind)
                if kind is None:  # no such column: a constant null stand-in
                    keep.append(self._device(arr, dtype))
                else:
                    keep.append(self._column(arr, array_role(part, attr), dtype))
            else:
                keep.append(self._device(arr, np.int64))  # negation/aggregate columns of this call
        tab = self._upload(np.array([self.runtime.pointer(b) for b in keep], dtype=np.uint64))
        cols = [len(env[lay.neg_at + 2 * k]) for k in range(lay.n_negations)]
        cols += [len(env[lay.agg_at + 2 * k]) for k in range(lay.n_aggregates)]
        codes = list(np.asarray(env[lay.strings_at], np.int64)[: len(lay.strings)])
        scal = self._upload(np.array(codes + cols + [0], dtype=np.int64))
        return tab, scal, keep

    # -- launches ------------------------------------------------------------------------------------

    def _launch(self, kernels: GpuKernels, name: str, n_threads: int, *args: Any) -> None:
        if n_threads > 0:
            self.stats.launches += 1
            kernels.module.launch(name, n_threads, *args)

    def _buffer(self, name: str, dtype: Any, n: int) -> GrowingBuffer:
        buf = self._buffers.get(name)
        if buf is None:
            buf = self._buffers[name] = GrowingBuffer(self.runtime, dtype, max(n, 1))
        else:
            buf.ensure(n)
        return buf

    def _split(self, fn, kernels: GpuKernels, step: StepInput):
        """Run ``fn`` on the step; on device OOM split the sequences in halves and retry."""
        try:
            return fn(kernels, step)
        except DeviceOutOfMemory as err:
            # leave the except block first: its traceback would keep the failed buffers alive
            failed = err.nbytes
        self._buffers.clear()
        n = len(step.seqs)
        if n <= 1:
            raise DeviceMemoryError(
                f"rule {kernels.spec.rule.name!r}: the device ran out of memory for a "
                f"single partial sequence (step {step.spec.step}, {int(np.sum(step.hi - step.lo))} "
                f"candidates); the failed allocation asked for {failed} bytes with "
                f"{self.runtime.bytes_in_use()} bytes in use"
            )
        self.stats.splits += 1
        mid = n // 2
        halves = [
            StepInput(step.spec, step.plan, step.seqs[a:b], step.lo[a:b], step.hi[a:b], step.cand,
                      step.excluded, step.use_excluded, step.env)
            for a, b in ((0, mid), (mid, n))
        ]
        return np.concatenate([self._split(fn, kernels, h) for h in halves])

    def _pairs(self, step: StepInput) -> tuple[np.ndarray, np.ndarray, int]:
        """Range starts, exclusive prefix sum of range sizes (n + 1), and the number of pairs."""
        lo = np.ascontiguousarray(step.lo, np.int64)
        sizes = np.maximum(np.asarray(step.hi, np.int64) - lo, 0)
        offsets = np.zeros(len(lo) + 1, np.int64)
        np.cumsum(sizes, out=offsets[1:])
        return lo, offsets, int(offsets[-1])

    def _each(self, kernels: GpuKernels, step: StepInput) -> np.ndarray:
        rt = self.runtime
        seqs = np.ascontiguousarray(step.seqs, np.int64)
        n, np_ = seqs.shape
        lo, offsets, total = self._pairs(step)
        if total == 0:
            return np.empty((0, np_), np.int64)
        tab, scal, _keep = self._context(kernels, step.env, step.excluded if step.use_excluded else None)
        args = (
            tab, scal, step_id(step.plan, step.spec.step), step.spec.pred, self._upload(seqs.ravel()), n,
            self._device(step.cand, np.int64), self._upload(lo), self._upload(offsets), total,
        )
        out = self._buffer("seqs", np.int64, self.initial_capacity * np_)
        keys = self._buffer("keys", np.int64, self.initial_capacity)
        cap = min(out.capacity // np_, keys.capacity)
        counter = rt.full(1, 0, np.uint64)
        self._launch(kernels, "cdp_each", total, *args, out.data, keys.data, counter, cap)
        count = int(rt.to_host(counter)[0])
        if count > cap:
            # the atomic index ran past the buffer: grow to the exact count and launch again
            self.stats.relaunches += 1
            out.grow_exact(count * np_)
            keys.grow_exact(count)
            counter = rt.full(1, 0, np.uint64)
            self._launch(kernels, "cdp_each", total, *args, out.data, keys.data, counter, count)
            assert int(rt.to_host(counter)[0]) == count, "a relaunch must find the same pairs"
        if count == 0:
            return np.empty((0, np_), np.int64)
        rows = rt.to_host(out.data, count * np_).reshape(count, np_)
        order = np.argsort(rt.to_host(keys.data, count), kind="stable")
        return rows[order]

    def _select(self, kernels: GpuKernels, step: StepInput, last: bool) -> np.ndarray:
        rt = self.runtime
        seqs = np.ascontiguousarray(step.seqs, np.int64)
        n = len(seqs)
        lo, offsets, total = self._pairs(step)
        if total == 0:
            return np.full(n, -1, np.int64)
        tab, scal, _keep = self._context(kernels, step.env, step.excluded if step.use_excluded else None)
        best = rt.full(n, -1 if last else int(I64_MAX), np.int64)
        self._launch(
            kernels, "cdp_select", total, tab, scal, step_id(step.plan, step.spec.step), step.spec.pred,
            int(last), self._upload(seqs.ravel()), n, self._device(step.cand, np.int64),
            self._upload(lo), self._upload(offsets), total, best,
        )
        idx = rt.to_host(best)
        found = (idx >= 0) & (idx != I64_MAX)
        cand = np.asarray(step.cand)
        return np.where(found, cand[np.where(found, idx, 0)] if len(cand) else -1, -1).astype(np.int64)


# ----------------------------------------------------------------------------------------------
# CuPy runtime


def _import_cupy():
    """CuPy and a usable device, or BackendUnavailableError naming what is missing."""
    try:
        import cupy  # type: ignore[import-not-found]
    except ImportError as err:
        raise BackendUnavailableError(
            "backend 'gpu' needs CuPy, which is not installed (pip install 'cep-gpu[gpu]', i.e. "
            "cupy-cuda12x); use backend='cpu' on machines without a GPU"
        ) from err
    try:
        count = cupy.cuda.runtime.getDeviceCount()
    except Exception as err:  # CUDARuntimeError: no driver, or driver too old
        raise BackendUnavailableError(
            f"backend 'gpu': CuPy is installed but the CUDA driver is not usable ({err}); "
            "install an NVIDIA driver that supports CuPy's CUDA version, or use backend='cpu'"
        ) from err
    if count == 0:
        raise BackendUnavailableError("backend 'gpu': the CUDA driver found no GPU device; use backend='cpu'")
    return cupy


class _CupyModule:
    def __init__(self, cupy, raw, block: int, max_blocks: int, device, stream) -> None:
        self._cupy = cupy
        with device:  # the module loads into this device's context
            self._funcs = {name: raw.get_function(name) for name in KERNELS}
        self._block = block
        self._max_blocks = max_blocks
        self._device = device
        self._stream = stream

    def launch(self, name: str, n_threads: int, *args: Any) -> None:
        kinds = KERNELS[name]
        conv = tuple(np.int64(a) if k == "i" else a for k, a in zip(kinds, args, strict=True))
        grid = launch_grid(n_threads, self._block, self._max_blocks)
        # the module's device (a Spark task may have made another one current since) and the
        # copies' stream: kernels see the data they were given, in order
        with self._device, self._stream:
            self._funcs[name]((grid,), (self._block,), conv)


def _version(fn: Callable[[], object]) -> str:
    """``str(fn())``, or "unknown" where this CuPy build cannot say (the key is then coarser)."""
    try:
        return str(fn())
    except Exception:
        return "unknown"


def launch_grid(n_threads: int, block: int, max_blocks: int) -> int:
    """Blocks of a launch over ``n_threads`` work items: enough for one item a thread, at most
    ``max_blocks`` (the kernels' grid-stride loops, with int64 indices, take the rest), at least 1."""
    return max(min(-(-int(n_threads) // int(block)), int(max_blocks)), 1)


#: Threads per block and the most blocks of a device launch (gridDim.x may reach 2^31 - 1; more
#: blocks than a few waves of the largest GPU would only add scheduling, as the loops are
#: grid-stride).
DEVICE_BLOCK = 256
DEVICE_MAX_BLOCKS = 65535


class CupyRuntime:
    """Device memory, pinned async transfers on one stream, and NVRTC-compiled modules."""

    name = "gpu"

    def __init__(self, device: int | None = None) -> None:
        cupy = _import_cupy()
        self.cupy = cupy
        # default: the current device, which a Spark task has set to its assigned GPU
        # (cep_gpu.spark_udfs.rapids.use_task_gpu); backend="gpu" keeps one runtime per device
        # (GpuDevicesBackend), so a reused worker that gets another GPU gets another runtime.
        # Every operation enters this device itself: the current device may change between calls.
        self.device = cupy.cuda.Device() if device is None else cupy.cuda.Device(device)
        self.arch = str(self.device.compute_capability)  # e.g. "90"; part of the module cache key
        with self.device:
            self.stream = cupy.cuda.Stream(non_blocking=True)
        self._modules: dict[str, _CupyModule] = {}  # compile_key -> module
        self._by_rule: dict[str, _CupyModule] = {}  # CudaRule.key -> module
        self._versions = self.versions()
        self._inflight: list[Any] = []  # what queued copies read or write, until the next sync
        self._pool = cupy.get_default_memory_pool()

    def versions(self) -> tuple[str, ...]:
        """CuPy, NVRTC, CUDA runtime and driver versions (part of the compile key)."""
        rt = self.cupy.cuda.runtime

        def nvrtc() -> object:
            from cupy_backends.cuda.libs import nvrtc  # type: ignore[import-not-found]

            return nvrtc.getVersion()

        return (
            f"cupy {self.cupy.__version__}",
            f"nvrtc {_version(nvrtc)}",
            f"runtime {_version(rt.runtimeGetVersion)}",
            f"driver {_version(rt.driverGetVersion)}",
        )

    def compile(self, rule: CudaRule) -> Module:
        # called at every match (per terminator in streaming): the rule's module is found by
        # the rule header's hash first; the full text and key are built once per rule
        mod = self._by_rule.get(rule.key)
        if mod is None:
            source = nvrtc_source(rule.source)
            key = compile_key(source, self.arch, NVRTC_OPTIONS, self._versions)
            mod = self._modules.get(key)
            if mod is None:
                with self.device:
                    raw = self.cupy.RawModule(code=source, options=NVRTC_OPTIONS, backend="nvrtc")
                    mod = self._modules[key] = _CupyModule(
                        self.cupy, raw, DEVICE_BLOCK, DEVICE_MAX_BLOCKS, self.device, self.stream)
            self._by_rule[rule.key] = mod
        return mod

    def _guard(self, fn, nbytes: int):
        try:
            with self.device, self.stream:
                return fn()
        except (self.cupy.cuda.memory.OutOfMemoryError, MemoryError) as err:
            # MemoryError: how an RMM pool (rapids_conf(python_pool="rmm")) reports exhaustion
            raise DeviceOutOfMemory(nbytes) from err

    def to_device(self, host: np.ndarray) -> Any:
        host = np.ascontiguousarray(host)
        pinned = self._pinned(host)
        out = self._guard(lambda: self.cupy.empty(host.shape, host.dtype), host.nbytes)
        with self.device:
            out.set(pinned, stream=self.stream)  # asynchronous from pinned memory
        self._inflight.append(pinned)  # keep the staging copy alive until the stream syncs
        return out

    def _pinned(self, host: np.ndarray) -> np.ndarray:
        import cupyx  # type: ignore[import-not-found]

        pinned = cupyx.empty_pinned(host.shape, host.dtype)
        pinned[...] = host
        return pinned

    def empty(self, n: int, dtype: Any) -> Any:
        return self._guard(lambda: self.cupy.empty(int(n), dtype), int(n) * np.dtype(dtype).itemsize)

    def full(self, n: int, value: int, dtype: Any) -> Any:
        return self._guard(lambda: self.cupy.full(int(n), value, dtype), int(n) * np.dtype(dtype).itemsize)

    def to_host(self, buf: Any, n: int | None = None) -> np.ndarray:
        view = buf if n is None else buf[: int(n)]
        with self.device:
            # on the stream of the kernels that wrote it, then wait: the host never reads a
            # count or a result before the launch that produced it has finished
            out = view.get(stream=self.stream)
            self.stream.synchronize()
        self._inflight.clear()
        return out

    def copy_in(self, buf: Any, offset: int, host: np.ndarray) -> None:
        pinned = self._pinned(np.ascontiguousarray(host))
        with self.device:
            buf[int(offset): int(offset) + len(pinned)].set(pinned, stream=self.stream)  # asynchronous
        self._inflight += (pinned, buf)

    def copy_within(self, dst: Any, dst_offset: int, src: Any, src_offset: int, n: int) -> None:
        if n <= 0:
            return
        size = dst.dtype.itemsize
        with self.device:
            self.cupy.cuda.runtime.memcpyAsync(
                int(dst.data.ptr) + int(dst_offset) * size, int(src.data.ptr) + int(src_offset) * size,
                int(n) * size, self.cupy.cuda.runtime.memcpyDeviceToDevice, self.stream.ptr,
            )
        # the caller may drop ``src`` at once (a column moved into a new buffer): keep both ends
        # alive until the stream has run the copy. CuPy's own pool would only hand the memory to
        # later work on this stream, but an adopted cuDF column lives in RMM, which frees it for
        # work on other streams at once.
        self._inflight += (src, dst)

    def view(self, buf: Any, start: int, stop: int) -> Any:
        return buf[int(start): int(stop)]

    def pointer(self, buf: Any) -> int:
        return int(buf.data.ptr)

    def adopt(self, buf: Any) -> Any | None:
        if not isinstance(buf, self.cupy.ndarray) or buf.device.id != self.device.id:
            return None
        buf = self.cupy.ascontiguousarray(buf)
        # cuDF and the CuPy operations that made ``buf`` ran on other streams than this runtime's
        # (non-blocking) one, which does not wait for them: wait here, once per adopted column
        self.device.synchronize()
        return buf

    def bytes_in_use(self) -> int:
        return int(self._pool.used_bytes())


def gpu_available() -> tuple[bool, str]:
    """Whether ``backend="gpu"`` can run here, and if not, why (for skip messages)."""
    try:
        _import_cupy()
    except BackendUnavailableError as err:
        return False, str(err)
    return True, "a CUDA device is available"


def gpu_combiner(device: int | None = None) -> GpuCombiner:
    """A combiner over CuPy on ``device`` (default: the current one); BackendUnavailableError
    when no GPU is usable."""
    return GpuCombiner(CupyRuntime(device), "gpu")


def current_device() -> int:
    """The ordinal of CuPy's current CUDA device (what ``use_task_gpu`` selected in a Spark task)."""
    return int(_import_cupy().cuda.runtime.getDevice())


class GpuBackend(CDPBackend):
    """CDP over a :class:`GpuCombiner`: the backend object of ``"gpu"`` and ``"gpu-host"``, with
    :meth:`stats` (device memory, launches, transfers) for ``Engine.stats()`` and the planner."""

    combiner: GpuCombiner

    def stats(self) -> dict:
        """``device_memory_bytes`` (held by the runtime), ``column_memory_bytes`` (table columns),
        ``launches``, ``relaunches``, ``splits``, ``bytes_uploaded``, ``column_bytes_uploaded``,
        ``column_full_uploads``, ``column_appends``, ... (see :class:`LaunchStats`)."""
        return self.combiner.stats_dict()

    def release(self) -> None:
        """Free the device memory the backend holds (it is allocated again as needed)."""
        self.combiner.release()


class GpuDevicesBackend(GpuBackend):
    """``backend="gpu"``: one :class:`GpuCombiner` per CUDA device, and each call runs on the
    current device's.

    A backend object lives as long as its process, and Spark reuses Python workers across tasks,
    which may be given different GPUs (``spark_udfs.rapids.use_task_gpu`` makes the task's GPU
    current). A combiner bound to the first task's device would keep launching there; this one
    asks ``current()`` at every call and keeps each device's combiner (its compiled modules, device
    columns and buffers) for when that device comes back. ``factory(ordinal)`` builds a combiner.
    """

    def __init__(self, factory: Callable[[int], GpuCombiner], current: Callable[[], int], name: str = "gpu") -> None:
        self._factory = factory
        self._current = current
        self._by_device: dict[int, GpuCombiner] = {}
        super().__init__(self._for(current()), name)

    def _for(self, device: int) -> GpuCombiner:
        comb = self._by_device.get(device)
        if comb is None:
            comb = self._by_device[device] = self._factory(device)
        return comb

    @property
    def combiner(self) -> GpuCombiner:  # type: ignore[override]
        """The current device's combiner (made on first use)."""
        return self._for(self._current())

    @combiner.setter
    def combiner(self, value: GpuCombiner) -> None:
        self._by_device[self._current()] = value

    @property
    def devices(self) -> list[int]:
        """The devices this backend has run on."""
        return sorted(self._by_device)

    def release(self) -> None:
        """Free the device memory held on every device."""
        for comb in self._by_device.values():
            comb.release()


def register_gpu_backend(name: str, factory) -> None:
    """Register ``backend=name`` as a :class:`GpuBackend` over the combiner ``factory`` builds."""
    register(name, lambda: GpuBackend(factory(), name))


register("gpu", lambda: GpuDevicesBackend(gpu_combiner, current_device, "gpu"))
