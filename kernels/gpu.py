"""The GPU backend (``backend="gpu"``): the CDP combination step in CUDA, launched through CuPy.

Two layers:

* :class:`DeviceMatcher` drives the CDP algorithm for one rule on a *runtime*: it builds the columns
  and their static filters on the host, uploads them, and runs one launch (or two, for
  ``last``/``first``) per column over a whole batch of partial sequences. It knows nothing of CuPy.
* A runtime owns memory, transfers and launches. :class:`CupyRuntime` (here) compiles ``cuda/``
  with NVRTC (``cupy.RawModule``) and launches on a device; ``kernels/host.py`` has
  ``HostRuntime``, the same kernels compiled by g++ and run serially over the whole grid, which is
  how the tests prove this launcher without a GPU (same calls, same buffers, same overflow path).

Output buffers: ``each`` writes through an atomic output index; if the count passes the buffer's
capacity the launcher grows the buffer to exactly that count and relaunches, so results are never
truncated. Partial-sequence buffers grow by doubling and are reused across steps and calls. If the
device runs out of memory, the terminator batch is split in two and retried; a single terminator
that still does not fit raises :class:`DeviceMemoryError` with the number of bytes it asked for.
Results are sorted on the host by (terminator, candidates in binding order), as on the CPU.
"""

from __future__ import annotations

import hashlib
import weakref
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from ..backends import Matches, register
from ..codegen.cuda import CudaRule, StepSpec, generate
from ..errors import BackendUnavailableError, CepError
from ..evaluate import condition_mask
from ..events import EventTable
from ..model import Attr, Rule, walk

I64_MAX = np.iinfo(np.int64).max

#: Parameter kinds of each kernel in cuda/cdp.cu: "p" pointer, "i" int64.
KERNELS: dict[str, str] = {
    "cdp_filter": "ppipippi",
    "cdp_ranges": "pppiiiiipipp",
    "cdp_each": "ppiipipppippi",
    "cdp_select": "ppiiipipppip",
    "cdp_emit": "ipippppi",
    "cdp_aggregates": "pppip",
}


class DeviceMemoryError(CepError, MemoryError):
    """The device cannot hold the work of even a single terminator."""


class DeviceOutOfMemory(Exception):
    """Raised by a runtime when an allocation fails (caught by the matcher, which splits the batch)."""

    def __init__(self, nbytes: int) -> None:
        super().__init__(f"out of device memory allocating {nbytes} bytes")
        self.nbytes = nbytes


def cuda_dir() -> Path:
    """The folder holding cdp.cuh, portable.cuh, cdp.cu (installed as package data)."""
    return Path(str(resources.files("cep_gpu.cuda")))


def full_source(rule_source: str) -> str:
    """The translation unit for one rule: its generated header, then the kernel wrappers."""
    return f'#include "cdp.cuh"\n{rule_source}\n#include "cdp.cu"\n'


def sources_digest() -> str:
    """A hash of every file in cuda/, part of every compile-cache key."""
    h = hashlib.sha256()
    for p in sorted(cuda_dir().iterdir()):
        if p.suffix in (".cu", ".cuh", ".h"):
            h.update(p.name.encode())
            h.update(p.read_bytes())
    return h.hexdigest()[:24]


# ----------------------------------------------------------------------------------------------
# The runtime interface both CuPy and the host build implement


class Module(Protocol):
    def launch(self, name: str, n_threads: int, *args: Any) -> None:
        """Run kernel ``name`` over ``n_threads`` work items (grid-stride; no-op when 0)."""


class Runtime(Protocol):
    """Memory, transfers and launches. Buffers are 1-d arrays of the runtime (NumPy or CuPy)."""

    name: str

    def compile(self, rule: CudaRule) -> Module: ...

    def to_device(self, host: np.ndarray) -> Any: ...

    def empty(self, n: int, dtype: Any) -> Any: ...

    def full(self, n: int, value: int, dtype: Any) -> Any: ...

    def to_host(self, buf: Any, n: int | None = None) -> np.ndarray: ...

    def scan(self, sizes: Any, n: int) -> tuple[Any, int]:
        """Exclusive prefix sum (n + 1 entries) of the first n sizes, and its total."""

    def pointer(self, buf: Any) -> int: ...

    def set_flags(self, buf: Any, rows: np.ndarray) -> None:
        """``buf[rows] = 1`` (uint8 flags)."""

    def bytes_in_use(self) -> int: ...


# ----------------------------------------------------------------------------------------------
# Buffers


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
        self.data = None  # release first, so that a retry after OOM has the memory back
        self.data = self.runtime.empty(n, self.dtype)
        self.capacity = n


@dataclass
class LaunchStats:
    """Counters of the launch path (tests check that the overflow and split paths ran)."""

    launches: int = 0
    relaunches: int = 0
    splits: int = 0
    batches: int = 0
    peak_bytes: int = 0


# ----------------------------------------------------------------------------------------------
# Host-side data of one rule over one table


@dataclass
class _Column:
    rows: Any  # device int64 table rows, time-sorted
    ts: Any  # device int64 timestamps
    n: int
    host_rows: np.ndarray


@dataclass
class _RuleData:
    module: Module
    code: CudaRule
    tab: Any  # device uint64 pointer table
    scal: Any  # device int64 scalars
    columns: dict[int, _Column]  # predicate -> its (statically filtered) column
    terminators: list[np.ndarray]  # per plan: candidate terminator rows (host)
    keep: list[Any] = field(default_factory=list)  # device arrays the pointer table points into


def _attribute_names(rule: Rule) -> set[str]:
    exprs = list(rule.conditions) + [a.expr for a in rule.attributes]
    for part in list(rule.negations) + list(rule.aggregates):
        exprs.extend(part.conditions)
    names = {a.attribute for a in rule.aggregates if a.attribute is not None}
    for e in exprs:
        names.update(n.name for n in walk(e) if isinstance(n, Attr))
    return names


def _filter_rows(table: EventTable, rows: np.ndarray, conds, pred: int | None, n_pred: int) -> np.ndarray:
    """Rows (of one predicate, or SELF rows when pred is None) passing every condition (vectorised)."""
    if not len(conds) or not len(rows):
        return rows
    if pred is None:
        mats = np.zeros((len(rows), 0), dtype=np.int64)
        mask = np.ones(len(rows), bool)
        for c in conds:
            mask &= condition_mask(c, table, mats, None, rows)
        return rows[mask]
    mats = np.zeros((len(rows), n_pred), dtype=np.int64)
    mats[:, pred] = rows
    mask = np.ones(len(rows), bool)
    for c in conds:
        mask &= condition_mask(c, table, mats)
    return rows[mask]


class DeviceMatcher:
    """The CDP backend on a runtime (CuPy device or host build); see the module docstring.

    ``batch_size``: terminators per batch (many terminators share each launch).
    ``initial_capacity``: sequences in a fresh output buffer (small values force the overflow path).
    """

    def __init__(self, runtime: Runtime, name: str, batch_size: int = 1 << 16, initial_capacity: int = 1 << 14) -> None:
        self.runtime = runtime
        self.name = name
        self.batch_size = max(int(batch_size), 1)
        self.initial_capacity = max(int(initial_capacity), 1)
        self.stats = LaunchStats()
        self._codes: dict[Any, CudaRule] = {}
        self._table_ref: weakref.ref | None = None
        self._table_arrays: dict[str, Any] = {}
        self._buffers: dict[str, GrowingBuffer] = {}
        self.block = 256

    # -- backend contract -------------------------------------------------------------------------

    def match(
        self,
        rule: Rule,
        table: EventTable,
        lo: int = 0,
        hi: int | None = None,
        excluded: np.ndarray | None = None,
    ) -> Matches:
        """Matches of ``rule`` whose terminator is a row in ``[lo, hi)`` (see cep_gpu.backends)."""
        hi = len(table) if hi is None else hi
        excl = np.zeros(len(table), bool) if excluded is None else np.array(excluded, bool)
        if len(table) == 0 or hi <= lo:
            return Matches.empty(rule)
        data = self._prepare(rule, table, excl, lo, hi)
        if rule.consuming:
            return self._match_consuming(rule, table, data, excl)
        parts: list[tuple[np.ndarray, np.ndarray]] = []
        for plan_index, terms in enumerate(data.terminators):
            terms = terms[~excl[terms]]
            for start in range(0, len(terms), self.batch_size):
                parts.extend(self._run_split(rule, data, plan_index, terms[start : start + self.batch_size]))
        return self._finish(rule, parts)

    def memory_in_use(self) -> int:
        """Bytes of device memory this matcher's runtime holds."""
        return self.runtime.bytes_in_use()

    # -- preparation --------------------------------------------------------------------------------

    def _code(self, rule: Rule, table: EventTable) -> CudaRule:
        kinds = {n: (table.columns[n].kind if n in table.columns else None) for n in sorted(_attribute_names(rule))}
        key = (rule, tuple(kinds.items()))
        if key not in self._codes:
            self._codes[key] = generate(rule, kinds)
        return self._codes[key]

    def _table_array(self, table: EventTable, key: str, make) -> Any:
        """Device copy of a table-wide array, kept while the same table object is in use."""
        if self._table_ref is None or self._table_ref() is not table:
            self._table_ref = weakref.ref(table)
            self._table_arrays = {}
        if key not in self._table_arrays:
            self._table_arrays[key] = self.runtime.to_device(np.ascontiguousarray(make()))
        return self._table_arrays[key]

    def _attr_array(self, table: EventTable, name: str, part: str) -> Any:
        col = table.columns[name]

        def make():
            if part == "valid":
                return col.valid.astype(np.uint8)
            if col.kind == "float":
                return col.values.astype(np.float64)
            if col.kind == "bool":
                return col.values.astype(np.uint8)
            return col.values.astype(np.int64)  # int, and string codes widened to int64

        return self._table_array(table, f"attr:{name}:{part}", make)

    def _prepare(self, rule: Rule, table: EventTable, excl: np.ndarray, lo: int, hi: int) -> _RuleData:
        rt = self.runtime
        code = self._code(rule, table)
        module = rt.compile(code)
        low = code.lowered
        n_pred = rule.n_predicates
        ts_dev = self._table_array(table, "ts", lambda: table.ts.astype(np.int64))
        excl_dev = rt.to_device(excl.astype(np.uint8))  # per call: consumption edits it
        keep = [ts_dev, excl_dev]
        pointers = [rt.pointer(ts_dev), rt.pointer(excl_dev)]
        aux: dict[tuple, np.ndarray] = {}
        for i, neg in enumerate(rule.negations):
            rows = _filter_rows(table, table.rows_of_type(neg.event_type), low.negation_filters[i], None, n_pred)
            aux[("neg", i)] = rows
        for i, agg in enumerate(rule.aggregates):
            rows = table.rows_of_type(agg.event_type)
            if agg.attribute is not None and agg.attribute in table.columns:
                col = table.columns[agg.attribute]
                ok = col.valid[rows]
                if col.kind == "float":
                    ok = ok & ~np.isnan(col.values[rows].astype(np.float64))
                rows = rows[ok]
            aux[("agg", i)] = _filter_rows(table, rows, low.aggregate_filters[i], None, n_pred)
        aux_dev: dict[tuple, Any] = {}
        for key in code.pointers:
            if key[0] == "attr":
                arr = self._attr_array(table, key[1], key[2])
            else:
                rows = aux[(key[0], key[1])]
                if (key[0], key[1], key[2]) not in aux_dev:
                    host = rows if key[2] == "rows" else table.ts[rows]
                    aux_dev[key] = rt.to_device(np.ascontiguousarray(host, dtype=np.int64))
                arr = aux_dev[key]
            keep.append(arr)
            pointers.append(rt.pointer(arr))
        scalars = []
        for key in code.scalars:
            if key[0] == "string":
                scalars.append(table.strings.lookup(key[1]))
            else:
                scalars.append(len(aux[("neg" if key[0] == "neg_len" else "agg", key[1])]))
        tab = rt.to_device(np.array(pointers, dtype=np.uint64))
        scal = rt.to_device(np.array(scalars or [0], dtype=np.int64))
        columns: dict[int, _Column] = {}
        terminators: list[np.ndarray] = []
        for plan in rule.plans:
            for idx in plan.order[1:]:
                if idx not in columns:
                    p = plan.predicates[idx]
                    rows = _filter_rows(table, table.rows_of_type(p.event_type), [rule.conditions[c] for c in low.static_filters[idx]], idx, n_pred)
                    rows = rows[rows < hi]  # later rows can never precede a terminator in [lo, hi)
                    columns[idx] = _Column(
                        rt.to_device(rows.astype(np.int64)),
                        rt.to_device(table.ts[rows].astype(np.int64)),
                        len(rows),
                        rows,
                    )
            term = plan.terminator
            rows = table.rows_of_type(plan.predicates[term].event_type)
            rows = rows[(rows >= lo) & (rows < hi)]
            terminators.append(_filter_rows(table, rows, [rule.conditions[c] for c in low.static_filters[term]], term, n_pred))
        return _RuleData(module, code, tab, scal, columns, terminators, keep)

    # -- consumption: terminator by terminator ---------------------------------------------------------

    def _match_consuming(self, rule: Rule, table: EventTable, data: _RuleData, excl: np.ndarray) -> Matches:
        excl_dev = data.keep[1]
        per_plan = [set(t.tolist()) for t in data.terminators]
        order = np.unique(np.concatenate(data.terminators)) if data.terminators else np.empty(0, np.int64)
        parts: list[tuple[np.ndarray, np.ndarray]] = []
        for row in order:
            if excl[row]:
                continue
            found = []
            for plan_index, rows in enumerate(per_plan):
                if int(row) in rows:
                    found.extend(self._run_split(rule, data, plan_index, np.array([row], np.int64)))
            parts.extend(found)
            consumed = np.unique(np.concatenate([r[:, list(rule.consuming)].ravel() for r, _ in found])) if found else []
            if len(consumed):
                excl[consumed] = True
                self.runtime.set_flags(excl_dev, consumed.astype(np.int64))
        return self._finish(rule, parts)

    # -- one batch -----------------------------------------------------------------------------------

    def _run_split(self, rule: Rule, data: _RuleData, plan_index: int, terms: np.ndarray) -> list:
        """Run a batch; on device OOM split it in halves and retry (recursively)."""
        if len(terms) == 0:
            return []
        try:
            return [self._run_batch(rule, data, plan_index, terms)]
        except DeviceOutOfMemory as err:
            # leave the except block before retrying: its traceback keeps the failed attempt's
            # buffers alive
            failed = err.nbytes
        self._buffers.clear()
        if len(terms) == 1:
            raise DeviceMemoryError(
                f"rule {rule.name!r}: the device ran out of memory for a single terminator "
                f"(row {int(terms[0])}); the failed allocation asked for {failed} bytes "
                f"with {self.runtime.bytes_in_use()} bytes in use"
            )
        self.stats.splits += 1
        mid = len(terms) // 2
        return self._run_split(rule, data, plan_index, terms[:mid]) + self._run_split(rule, data, plan_index, terms[mid:])

    def _buffer(self, name: str, dtype: Any, n: int) -> GrowingBuffer:
        buf = self._buffers.get(name)
        if buf is None:
            buf = GrowingBuffer(self.runtime, dtype, max(n, self.initial_capacity))
            self._buffers[name] = buf
        else:
            buf.ensure(n)
        return buf

    def _launch(self, data: _RuleData, name: str, n_threads: int, *args: Any) -> None:
        if n_threads > 0:
            self.stats.launches += 1
            data.module.launch(name, n_threads, *args)

    def _collect(self, data: _RuleData, name: str, n_threads: int, args_before: tuple, np_: int, slot: str) -> tuple[Any, int]:
        """Launch a kernel writing sequences through the atomic output index; grow and relaunch
        on overflow. Returns (buffer, count)."""
        rt = self.runtime
        out = self._buffer(slot, np.int64, self.initial_capacity * np_)
        counter = rt.full(1, 0, np.uint64)
        cap = out.capacity // np_
        self._launch(data, name, n_threads, *args_before, out.data, counter, cap)
        count = int(rt.to_host(counter)[0])
        if count > cap:
            self.stats.relaunches += 1
            out.grow_exact(count * np_)
            counter = rt.full(1, 0, np.uint64)
            self._launch(data, name, n_threads, *args_before, out.data, counter, count)
            again = int(rt.to_host(counter)[0])
            assert again == count, "a relaunch must produce the same number of sequences"
        return out.data, count

    def _run_batch(self, rule: Rule, data: _RuleData, plan_index: int, terms: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        rt = self.runtime
        self.stats.batches += 1
        steps: tuple[StepSpec, ...] = data.code.lowered.steps[plan_index]
        np_ = rule.n_predicates
        seq_host = np.full((len(terms), np_), -1, dtype=np.int64)
        seq_host[:, steps[0].pred] = terms
        seq = rt.to_device(seq_host.ravel())
        n = len(terms)
        ping = 0
        if steps[0].has_device_checks:
            seq, n = self._collect(data, "cdp_filter", n, (data.tab, data.scal, steps[0].step_id, seq, n), np_, f"seq{ping}")
            ping ^= 1
        for st in steps[1:]:
            if n == 0:
                break
            col = data.columns[st.pred]
            lo = rt.empty(n, np.int64)
            size = rt.empty(n, np.int64)
            self._launch(data, "cdp_ranges", n, data.tab, data.scal, seq, n, np_, st.anchor, st.before, st.window, col.ts, col.n, lo, size)
            offsets, total = rt.scan(size, n)
            if total == 0:
                n = 0
                break
            head = (data.tab, data.scal, st.step_id, st.pred)
            if st.policy == "each":
                seq, n = self._collect(data, "cdp_each", total, (*head, seq, n, col.rows, lo, offsets, total), np_, f"seq{ping}")
            else:
                best = rt.full(n, -1 if st.policy == "last" else int(I64_MAX), np.int64)
                self._launch(data, "cdp_select", total, *head, int(st.policy == "last"), seq, n, col.rows, lo, offsets, total, best)
                seq, n = self._collect(data, "cdp_emit", n, (st.pred, seq, n, col.rows, best), np_, f"seq{ping}")
            ping ^= 1
        self.stats.peak_bytes = max(self.stats.peak_bytes, rt.bytes_in_use())
        if n == 0:
            return np.empty((0, np_), np.int64), np.empty((0, len(rule.aggregates)), np.float64)
        rows = rt.to_host(seq, n * np_).reshape(n, np_).copy()
        n_agg = len(rule.aggregates)
        if n_agg:
            out = rt.empty(n * n_agg, np.float64)
            self._launch(data, "cdp_aggregates", n, data.tab, data.scal, seq, n, out)
            aggs = rt.to_host(out, n * n_agg).reshape(n, n_agg).copy()
        else:
            aggs = np.empty((n, 0), np.float64)
        return rows, aggs

    def _finish(self, rule: Rule, parts: list[tuple[np.ndarray, np.ndarray]]) -> Matches:
        if not parts:
            return Matches.empty(rule)
        rows = np.concatenate([p[0] for p in parts])
        aggs = np.concatenate([p[1] for p in parts])
        if len(rows) > 1:
            # deterministic order: terminator, then the bound events in binding order
            order_cols = rule.plans[0].order
            order = np.lexsort(tuple(rows[:, c] for c in reversed(order_cols)))
            rows, aggs = rows[order], aggs[order]
        return Matches(rows, aggs)


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
    def __init__(self, cupy, raw, block: int, max_blocks: int) -> None:
        self._cupy = cupy
        self._funcs = {name: raw.get_function(name) for name in KERNELS}
        self._block = block
        self._max_blocks = max_blocks

    def launch(self, name: str, n_threads: int, *args: Any) -> None:
        kinds = KERNELS[name]
        conv = tuple(np.int64(a) if k == "i" else a for k, a in zip(kinds, args, strict=True))
        grid = min((n_threads + self._block - 1) // self._block, self._max_blocks)
        self._funcs[name]((max(grid, 1),), (self._block,), conv)


class CupyRuntime:
    """Device memory, pinned async transfers on one stream, and NVRTC-compiled modules."""

    name = "gpu"

    def __init__(self, device: int = 0) -> None:
        cupy = _import_cupy()
        self.cupy = cupy
        self.device = cupy.cuda.Device(device)
        self.device.use()
        self.arch = str(self.device.compute_capability)  # e.g. "90"; part of the module cache key
        self.stream = cupy.cuda.Stream(non_blocking=True)
        self._modules: dict[str, _CupyModule] = {}
        self._inflight: list[np.ndarray] = []
        self._pool = cupy.get_default_memory_pool()

    def compile(self, rule: CudaRule) -> Module:
        key = f"{rule.key}:{sources_digest()}:{self.arch}"
        if key not in self._modules:
            raw = self.cupy.RawModule(
                code=full_source(rule.source),
                options=("-std=c++17", f"-I{cuda_dir()}"),  # CuPy adds the device's architecture
                backend="nvrtc",
            )
            self._modules[key] = _CupyModule(self.cupy, raw, 256, 65535)
        return self._modules[key]

    def _guard(self, fn, nbytes: int):
        try:
            with self.stream:
                return fn()
        except self.cupy.cuda.memory.OutOfMemoryError as err:
            raise DeviceOutOfMemory(nbytes) from err

    def to_device(self, host: np.ndarray) -> Any:
        host = np.ascontiguousarray(host)
        pinned = self._pinned(host)
        out = self._guard(lambda: self.cupy.empty(host.shape, host.dtype), host.nbytes)
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
        out = view.get(stream=self.stream)
        self.stream.synchronize()
        self._inflight.clear()
        return out

    def scan(self, sizes: Any, n: int) -> tuple[Any, int]:
        def run():
            offsets = self.cupy.zeros(n + 1, np.int64)
            self.cupy.cumsum(sizes[:n], out=offsets[1:])
            return offsets

        offsets = self._guard(run, (n + 1) * 8)
        return offsets, int(self.to_host(offsets[n:]).item())

    def pointer(self, buf: Any) -> int:
        return int(buf.data.ptr)

    def set_flags(self, buf: Any, rows: np.ndarray) -> None:
        with self.stream:
            buf[self.cupy.asarray(rows)] = 1

    def bytes_in_use(self) -> int:
        return int(self._pool.used_bytes())


def gpu_available() -> tuple[bool, str]:
    """Whether ``backend="gpu"`` can run here, and if not, why (for skip messages)."""
    try:
        _import_cupy()
    except BackendUnavailableError as err:
        return False, str(err)
    return True, "a CUDA device is available"


def _gpu_backend() -> DeviceMatcher:
    return DeviceMatcher(CupyRuntime(), "gpu")


register("gpu", _gpu_backend)
