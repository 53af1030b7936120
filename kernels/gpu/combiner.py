"""The GPU side of the Combiner seam of :mod:`cep_gpu.cdp` (see :mod:`cep_gpu.kernels.gpu`)."""

from __future__ import annotations

import weakref
from dataclasses import dataclass
from typing import Any

import numpy as np

from ...cdp import StepInput
from ...codegen import RuleSpec
from ...codegen.cuda import CudaRule, generate, step_id
from ...errors import MatchLimitError
from ...events.lineage import MAX_ANCESTORS, Lineage, array_role
from .columns import (
    I64_MAX,
    ArrayNotes,
    DeviceColumn,
    as_device_dtype,
    column_capacity,
    column_dtype,
    provided_copy,
)
from .runtime import (
    DeviceMemoryError,
    DeviceOutOfMemory,
    GrowingBuffer,
    LaunchStats,
    Module,
    Runtime,
)


@dataclass
class GpuRule:
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
        self._lineage: Lineage | None = None  # row lineage of the table of the current call

    # -- the Combiner protocol ---------------------------------------------------------------------

    def prepare(self, spec: RuleSpec, kinds: dict[str, str | None]) -> GpuRule:
        """Generate and compile (cached by source hash, and by architecture on a device)."""
        key = (spec, tuple(sorted(kinds.items())))
        code = self._codes.get(key)
        if code is None:
            code = self._codes[key] = generate(spec, kinds)
        return GpuRule(spec, code, self.runtime.compile(code), dict(kinds))

    #: evaluates Kleene positions (:meth:`kleene_elements`, :meth:`kleene_sets`)
    supports_kleene = True

    def bind_lineage(self, lineage: Lineage | None) -> None:
        """The row lineage (``EventTable.lineage``) of the table the next steps read: which rows
        of the device columns are still those of the table's arrays (see module docstring)."""
        self._lineage = lineage

    def each(self, compiled: GpuRule, step: StepInput) -> np.ndarray:
        """Every valid (sequence, candidate) pair, extended, in (sequence, candidate) order."""
        return self._split(self._each, compiled, step)

    def count_each(self, compiled: GpuRule, step: StepInput) -> int:
        """``len(each(...))`` without building the sequences (``detect(..., output="count")``):
        nothing to check is the sum of the ranges, as on the CPU; else ``cdp_each`` runs with no
        room for output, so each valid pair only bumps the atomic index (no writes, no copy back,
        no sort: the last step of a large ``each`` is most of the output)."""
        if step.spec.trivial and not step.use_excluded:
            return int(_range_sizes(step).sum())
        return int(self._split(self._count_each, compiled, step).sum())

    def select(self, compiled: GpuRule, step: StepInput, last: bool) -> np.ndarray:
        """The latest/earliest valid candidate row per sequence, -1 where none."""
        return self._split(lambda k, s: self._select(k, s, last), compiled, step)

    def aggregates(self, compiled: GpuRule, spec: RuleSpec, seqs: np.ndarray, kernel_args: tuple) -> np.ndarray:
        """(n, n_aggregates) aggregate values of complete sequences (NaN = null)."""
        n, n_agg = len(seqs), len(spec.rule.aggregates)
        if n == 0 or n_agg == 0:
            return np.full((n, n_agg), np.nan)
        rt = self.runtime
        tab, scal, _keep = self._context(compiled, kernel_args, None)
        seq_dev = self._upload(np.ascontiguousarray(seqs, np.int64).ravel())
        out = rt.empty(n * n_agg, np.float64)
        self._launch(compiled, "cdp_aggregates", n, tab, scal, seq_dev, n, out)
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
            dev = self._upload(as_device_dtype(arr, dtype))
            self._arrays.set(arr, dev)
        return dev

    def _column(self, arr: np.ndarray, role: str, dtype: Any) -> Any:
        """The device copy of table array ``arr`` (role ``role``), updated incrementally.

        The array's row tag says which lineage and global rows it holds; the rows the device column
        holds that the tag proves unchanged stay, the expired prefix is dropped, and only the rows
        after them are copied. Anything the tag cannot prove is uploaded in full.
        """
        tag = self._lineage.tag(role, arr) if self._lineage is not None else None
        if tag is None:
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
            self._append(col, tag.base - col.start, keep, as_device_dtype(arr[keep:], dtype))
        else:
            col = self._adopt(role, dtype, arr) or self._fill(col, role, dtype, as_device_dtype(arr, dtype))
        col.n, col.start, col.relatives = n, tag.base, relatives
        col.host, col.used = weakref.ref(arr), self._version
        view = rt.view(col.buf, col.head, col.head + n)
        if self.check_columns:
            got = rt.to_host(view)
            if not np.array_equal(got, as_device_dtype(arr, dtype), equal_nan=dtype.kind == "f"):
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
        if col is None or col.dtype != dtype or column_capacity(col.capacity, n) != col.capacity:
            cap = column_capacity(0 if col is None or col.dtype != dtype else col.capacity, n)
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
        cap = column_capacity(col.capacity, 2 * need)
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
                cap = column_capacity(0 if self._zeros is None else len(self._zeros), n)
                self._zeros = None
                self._zeros = self.runtime.full(cap, 0, np.uint8)
            return self.runtime.view(self._zeros, 0, n)
        # consumption edits the mask between calls: copy it each time
        return self._upload(np.ascontiguousarray(excluded).view(np.uint8))

    def _context(self, compiled: GpuRule, kernel_args: tuple, excluded: np.ndarray | None) -> tuple[Any, Any, list]:
        """The pointer and scalar tables of cdp.cuh's Ctx for this kernel_args (see codegen.cuda)."""
        lay = compiled.spec.layout
        keep = [self._column(kernel_args[0], "ts", column_dtype("ts")), self._excluded(len(kernel_args[0]), excluded)]
        for e in range(1, len(kernel_args)):
            if e == lay.strings_at:
                keep.append(keep[0])  # codes travel in the scalar table; keep slots aligned
                continue
            arr = kernel_args[e]
            if e < lay.strings_at:
                attr = lay.attrs[(e - 1) // 2]
                kind = compiled.kinds.get(attr)
                part = "valid" if (e - 1) % 2 == 1 else "values"
                dtype = column_dtype(part, kind)
                if kind is None:  # no such column: a constant null stand-in
                    keep.append(self._device(arr, dtype))
                else:
                    keep.append(self._column(arr, array_role(part, attr), dtype))
            else:
                keep.append(self._device(arr, np.int64))  # negation/aggregate columns of this call
        tab = self._upload(np.array([self.runtime.pointer(b) for b in keep], dtype=np.uint64))
        cols = [len(kernel_args[lay.neg_at + 2 * k]) for k in range(lay.n_negations)]
        cols += [len(kernel_args[lay.agg_at + 2 * k]) for k in range(lay.n_aggregates)]
        codes = list(np.asarray(kernel_args[lay.strings_at], np.int64)[: len(lay.strings)])
        scal = self._upload(np.array(codes + cols + [0], dtype=np.int64))
        return tab, scal, keep

    # -- launches ------------------------------------------------------------------------------------

    def _launch(self, compiled: GpuRule, name: str, n_threads: int, *args: Any) -> None:
        if n_threads > 0:
            self.stats.launches += 1
            compiled.module.launch(name, n_threads, *args)

    def _buffer(self, name: str, dtype: Any, n: int) -> GrowingBuffer:
        buf = self._buffers.get(name)
        if buf is None:
            buf = self._buffers[name] = GrowingBuffer(self.runtime, dtype, max(n, 1))
        else:
            buf.ensure(n)
        return buf

    def _split(self, fn, compiled: GpuRule, step: StepInput):
        """Run ``fn`` on the step; on device OOM split the sequences in halves and retry."""
        try:
            return fn(compiled, step)
        except DeviceOutOfMemory as err:
            # leave the except block first: its traceback would keep the failed buffers alive
            failed = err.nbytes
        self._buffers.clear()
        n = len(step.seqs)
        if n <= 1:
            raise DeviceMemoryError(
                f"rule {compiled.spec.rule.name!r}: the device ran out of memory for a "
                f"single partial sequence (step {step.spec.step}, {int(np.sum(step.hi - step.lo))} "
                f"candidates); the failed allocation asked for {failed} bytes with "
                f"{self.runtime.bytes_in_use()} bytes in use"
            )
        self.stats.splits += 1
        mid = n // 2
        halves = [
            StepInput(step.spec, step.plan, step.seqs[a:b], step.lo[a:b], step.hi[a:b], step.cand,
                      step.excluded, step.use_excluded, step.kernel_args)
            for a, b in ((0, mid), (mid, n))
        ]
        return np.concatenate([self._split(fn, compiled, h) for h in halves])

    def _pairs(self, step: StepInput) -> tuple[np.ndarray, np.ndarray, int]:
        """Range starts, exclusive prefix sum of range sizes (n + 1), and the number of pairs."""
        lo = np.ascontiguousarray(step.lo, np.int64)
        sizes = _range_sizes(step)
        offsets = np.zeros(len(lo) + 1, np.int64)
        np.cumsum(sizes, out=offsets[1:])
        return lo, offsets, int(offsets[-1])

    def _each_args(self, compiled: GpuRule, step: StepInput) -> tuple[tuple, list, int]:
        """``cdp_each``'s arguments up to ``total``, what must outlive the launch, and ``total``
        (nothing is uploaded when ``total`` is 0: there is nothing to launch)."""
        seqs = np.ascontiguousarray(step.seqs, np.int64)
        lo, offsets, total = self._pairs(step)
        if total == 0:
            return (), [], 0
        tab, scal, keep = self._context(compiled, step.kernel_args, step.excluded if step.use_excluded else None)
        args = (
            tab, scal, step_id(step.plan, step.spec.step), step.spec.pred, self._upload(seqs.ravel()),
            len(seqs), self._device(step.cand, np.int64), self._upload(lo), self._upload(offsets), total,
        )
        return args, keep, total

    def _count_each(self, compiled: GpuRule, step: StepInput) -> np.ndarray:
        args, _keep, total = self._each_args(compiled, step)
        if total == 0:
            return np.zeros(1, np.int64)
        counter = self.runtime.full(1, 0, np.uint64)
        dummy = self._buffer("count_dummy", np.int64, 1)  # never written: the capacity is 0
        self._launch(compiled, "cdp_each", total, *args, dummy.data, dummy.data, counter, 0)
        return self.runtime.to_host(counter).astype(np.int64)

    def _each(self, compiled: GpuRule, step: StepInput) -> np.ndarray:
        rt = self.runtime
        np_ = step.seqs.shape[1]
        args, _keep, total = self._each_args(compiled, step)
        if total == 0:
            return np.empty((0, np_), np.int64)
        out = self._buffer("seqs", np.int64, self.initial_capacity * np_)
        keys = self._buffer("keys", np.int64, self.initial_capacity)
        cap = min(out.capacity // np_, keys.capacity)
        counter = rt.full(1, 0, np.uint64)
        self._launch(compiled, "cdp_each", total, *args, out.data, keys.data, counter, cap)
        count = int(rt.to_host(counter)[0])
        if count > cap:
            # the atomic index ran past the buffer: grow to the exact count and launch again
            self.stats.relaunches += 1
            out.grow_exact(count * np_)
            keys.grow_exact(count)
            counter = rt.full(1, 0, np.uint64)
            self._launch(compiled, "cdp_each", total, *args, out.data, keys.data, counter, count)
            assert int(rt.to_host(counter)[0]) == count, "a relaunch must find the same pairs"
        if count == 0:
            return np.empty((0, np_), np.int64)
        # the pair keys order the rows as the CPU backend does: (sequence, candidate)
        return rt.rows_by_key(out.data, keys.data, count, np_)

    def _select(self, compiled: GpuRule, step: StepInput, last: bool) -> np.ndarray:
        rt = self.runtime
        seqs = np.ascontiguousarray(step.seqs, np.int64)
        n = len(seqs)
        lo, offsets, total = self._pairs(step)
        if total == 0:
            return np.full(n, -1, np.int64)
        tab, scal, _keep = self._context(compiled, step.kernel_args, step.excluded if step.use_excluded else None)
        best = rt.full(n, -1 if last else int(I64_MAX), np.int64)
        self._launch(
            compiled, "cdp_select", total, tab, scal, step_id(step.plan, step.spec.step), step.spec.pred,
            int(last), self._upload(seqs.ravel()), n, self._device(step.cand, np.int64),
            self._upload(lo), self._upload(offsets), total, best,
        )
        idx = rt.to_host(best)
        found = (idx >= 0) & (idx != I64_MAX)
        cand = np.asarray(step.cand)
        return np.where(found, cand[np.where(found, idx, 0)] if len(cand) else -1, -1).astype(np.int64)

    # -- Kleene closure (docs/language.md) ------------------------------------------------------------

    def _kleene_oom(self, compiled: GpuRule, k: int, n: int, failed: int) -> None:
        """After a device OOM in a Kleene step: forget the output buffers, and raise
        :class:`DeviceMemoryError` when a single sequence cannot be split further."""
        self._buffers.clear()
        if n <= 1:
            raise DeviceMemoryError(
                f"rule {compiled.spec.rule.name!r}: the device ran out of memory for the Kleene "
                f"sets of position {compiled.spec.rule.predicates[k].alias!r} of a single partial "
                f"sequence; the failed allocation asked for {failed} bytes with "
                f"{self.runtime.bytes_in_use()} bytes in use (bound the set size)"
            )
        self.stats.splits += 1

    def kleene_elements(
        self, compiled: GpuRule, k: int, seqs: np.ndarray, lo: np.ndarray, hi: np.ndarray,
        cand: np.ndarray, kernel_args: tuple,
    ) -> tuple[np.ndarray, np.ndarray]:
        """(offsets (n+1,), rows): each sequence's candidates in ``[lo, hi)`` of ``cand`` that
        pass Kleene position ``k``'s per-element conditions (``cdp_kleene_elements``, one thread
        per (sequence, candidate) pair), in row order. On device OOM the sequences are split in
        halves and retried, as for ``each``."""
        try:
            return self._kleene_elements(compiled, k, seqs, lo, hi, cand, kernel_args)
        except DeviceOutOfMemory as err:
            failed = err.nbytes  # (outside the except block: its traceback holds the buffers)
        n = len(seqs)
        self._kleene_oom(compiled, k, n, failed)
        mid = n // 2
        (off_a, rows_a), (off_b, rows_b) = (
            self.kleene_elements(compiled, k, seqs[a:b], lo[a:b], hi[a:b], cand, kernel_args)
            for a, b in ((0, mid), (mid, n))
        )
        return np.concatenate([off_a, off_b[1:] + off_a[-1]]), np.concatenate([rows_a, rows_b])

    def _kleene_elements(self, compiled, k, seqs, lo, hi, cand, kernel_args):
        seqs = np.ascontiguousarray(seqs, np.int64)
        n = len(seqs)
        lo = np.ascontiguousarray(lo, np.int64)
        sizes = np.maximum(np.asarray(hi, np.int64) - lo, 0)
        offsets = np.zeros(n + 1, np.int64)
        np.cumsum(sizes, out=offsets[1:])
        total = int(offsets[-1])
        cand = np.asarray(cand, np.int64)
        pos = np.arange(total, dtype=np.int64) - np.repeat(offsets[:-1] - lo, sizes)
        rows = cand[pos] if total else np.empty(0, np.int64)
        if total and compiled.spec.rule.predicates[k].kleene.conditions:
            rt = self.runtime
            tab, scal, _keep = self._context(compiled, kernel_args, None)
            mask = rt.empty(total, np.uint8)
            self._launch(
                compiled, "cdp_kleene_elements", total, tab, scal, k, self._upload(seqs.ravel()), n,
                self._device(cand, np.int64), self._upload(lo), self._upload(offsets), total, mask,
            )
            keep = rt.to_host(mask).view(np.bool_)
            kept = np.zeros(total + 1, np.int64)
            np.cumsum(keep, out=kept[1:])
            return kept[offsets], rows[keep]
        return offsets, rows  # no per-element condition: every candidate is an element

    def kleene_sets(
        self, compiled: GpuRule, plan: int, step: int, k: int, seqs: np.ndarray, e_off: np.ndarray,
        e_rows: np.ndarray, aggs_in: np.ndarray, kernel_args: tuple,
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """The sets of Kleene position ``k`` that pass its consecutive conditions and the step's
        set conditions and negations, as ``(set_seq, set_start, set_len, flat, set_aggs)`` (set
        ``s`` of sequence ``set_seq[s]`` is ``flat[set_start[s]:set_start[s] + set_len[s]]``;
        ``set_aggs[s]`` the values of every aggregate the set was checked with: this set's
        computed on the device, the others from ``aggs_in``), sets in the CPU kernel's order
        (:func:`cep_gpu.kernels.kleene.enumerate_sets`).

        ``cdp_kleene_sets`` runs one thread per (sequence, set index) pair over the exclusive
        prefix sum of the per-sequence set counts; the output (sets and their elements) goes
        through two atomic indices, and an overflow of either buffer grows both to the exact
        counts and relaunches. ``aggs_in`` (n, n_aggregates): the values of the aggregates over
        the other Kleene positions' sets (NaN where unbound), for set conditions that read them.
        On device OOM the sequences are split in halves and retried, as for ``each``.
        """
        try:
            return self._kleene_sets(compiled, plan, step, k, seqs, e_off, e_rows, aggs_in, kernel_args)
        except DeviceOutOfMemory as err:
            failed = err.nbytes  # (outside the except block: its traceback holds the buffers)
        n = len(seqs)
        self._kleene_oom(compiled, k, n, failed)
        parts, seq_base, flat_base = [], 0, 0
        for a, b in ((0, n // 2), (n // 2, n)):
            off = np.asarray(e_off[a:b + 1], np.int64)
            s_seq, s_start, s_len, flat, s_aggs = self.kleene_sets(
                compiled, plan, step, k, seqs[a:b], off - off[0], e_rows[off[0]:off[-1]], aggs_in[a:b], kernel_args
            )
            parts.append((s_seq + seq_base, s_start + flat_base, s_len, flat, s_aggs))
            seq_base, flat_base = seq_base + (b - a), flat_base + len(flat)
        return tuple(np.concatenate([p[j] for p in parts]) for j in range(5))

    def _kleene_sets(self, compiled, plan, step, k, seqs, e_off, e_rows, aggs_in, kernel_args):
        from ..kleene import MAX_INDEXED_SETS, subset_counts, subset_table

        rule = compiled.spec.rule
        kl = rule.predicates[k].kleene
        rt = self.runtime
        seqs = np.ascontiguousarray(seqs, np.int64)
        n = len(seqs)
        sizes = np.diff(e_off)
        counts = subset_counts(sizes, kl.min_size, kl.max_size, kl.greedy)
        offsets = np.zeros(n + 1, np.int64)
        if float(counts.sum(dtype=np.float64)) >= MAX_INDEXED_SETS:  # (counts saturate, never wrap)
            raise MatchLimitError(
                f"rule {rule.name!r}: Kleene position {rule.predicates[k].alias!r} has more than "
                f"2^62 candidate sets in one call, more than the GPU kernels can number; bound the "
                f"set size or use 'select greedy'"
            )
        np.cumsum(counts, out=offsets[1:])
        total = int(offsets[-1])
        n_agg = len(rule.aggregates)
        none = (*(np.empty(0, np.int64),) * 4, np.empty((0, n_agg)))
        if total == 0:
            return none
        n_max = int(sizes.max())
        table = np.zeros((1, 1), np.int64) if kl.greedy else subset_table(n_max, kl.min_size, kl.max_size)
        max_s = n_max if kl.max_size is None else int(kl.max_size)
        aggs = np.ascontiguousarray(aggs_in, np.float64).ravel() if n_agg and n else np.full(1, np.nan)
        tab, scal, _keep = self._context(compiled, kernel_args, None)
        args = (
            tab, scal, step_id(plan, step), k, compiled.spec.kleene_base(k) + 2, int(kl.greedy),
            int(kl.min_size), max_s, self._upload(seqs.ravel()), n, self._upload(np.asarray(e_off, np.int64)),
            self._upload(np.r_[np.asarray(e_rows, np.int64), -1]), self._upload(table.ravel()), table.shape[1],
            self._upload(offsets), total, self._upload(aggs),
        )
        names = ("kl_seq", "kl_start", "kl_len", "kl_keys")
        bufs = [self._buffer(b, np.int64, self.initial_capacity) for b in names]
        flat = self._buffer("kl_flat", np.int64, self.initial_capacity)
        width = max(n_agg, 1)
        values = self._buffer("kl_aggs", np.float64, self.initial_capacity * width)
        cap = min(min(b.capacity for b in bufs), values.capacity // width)
        ecap = flat.capacity
        counter = rt.full(2, 0, np.uint64)
        self._launch(compiled, "cdp_kleene_sets", total, *args, *(b.data for b in bufs), flat.data, values.data,
                     counter, cap, ecap)
        count, ecount = (int(x) for x in rt.to_host(counter))
        if count > cap or ecount > ecap:
            # an atomic index ran past its buffer: grow both to the exact counts and launch again
            self.stats.relaunches += 1
            for b in bufs:
                b.grow_exact(count)
            flat.grow_exact(ecount)
            values.grow_exact(count * width)
            counter = rt.full(2, 0, np.uint64)
            self._launch(compiled, "cdp_kleene_sets", total, *args, *(b.data for b in bufs), flat.data, values.data,
                         counter, count, ecount)
            again = tuple(int(x) for x in rt.to_host(counter))
            assert again == (count, ecount), "a relaunch must find the same sets"
        if count == 0:
            return none
        set_seq, set_start, set_len, keys = (rt.to_host(b.data, count) for b in bufs)
        order = np.argsort(keys, kind="stable")
        set_aggs = rt.to_host(values.data, count * width).reshape(count, width)[order, :n_agg]
        return set_seq[order], set_start[order], set_len[order], rt.to_host(flat.data, ecount), set_aggs


def _range_sizes(step: StepInput) -> np.ndarray:
    """Candidates per sequence of a step: its window ranges' sizes."""
    return np.maximum(np.asarray(step.hi, np.int64) - np.asarray(step.lo, np.int64), 0)
