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
"""

from __future__ import annotations

import hashlib
import weakref
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from ..cdp import StepInput, register_combiner
from ..codegen import RuleSpec
from ..codegen.cuda import CudaRule, generate, step_id
from ..errors import BackendUnavailableError, CepError

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
        """Run kernel ``name`` over ``n_threads`` work items (grid-stride)."""


class Runtime(Protocol):
    """Memory, transfers and launches. Buffers are 1-d arrays of the runtime (NumPy or CuPy)."""

    name: str

    def compile(self, rule: CudaRule) -> Module: ...

    def to_device(self, host: np.ndarray) -> Any: ...

    def empty(self, n: int, dtype: Any) -> Any: ...

    def full(self, n: int, value: int, dtype: Any) -> Any: ...

    def to_host(self, buf: Any, n: int | None = None) -> np.ndarray: ...

    def pointer(self, buf: Any) -> int: ...

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
    """Counters of the launch path (tests check that the overflow and split paths ran)."""

    launches: int = 0
    relaunches: int = 0
    splits: int = 0


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

    def __init__(self, runtime: Runtime, name: str = "gpu", initial_capacity: int = 1 << 14) -> None:
        self.runtime = runtime
        self.name = name
        self.initial_capacity = max(int(initial_capacity), 1)
        self.stats = LaunchStats()
        self._codes: dict[tuple, CudaRule] = {}
        self._buffers: dict[str, GrowingBuffer] = {}
        self._arrays: dict[int, tuple[weakref.ref, Any]] = {}  # id(host array) -> device copy
        self._zeros: dict[int, Any] = {}

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
        seq_dev = rt.to_device(np.ascontiguousarray(seqs, np.int64).ravel())
        out = rt.empty(n * n_agg, np.float64)
        self._launch(kernels, "cdp_aggregates", n, tab, scal, seq_dev, n, out)
        return rt.to_host(out).reshape(n, n_agg)

    def memory_in_use(self) -> int:
        """Bytes of device memory held (reported by ``Engine.stats()`` where it asks)."""
        return self.runtime.bytes_in_use()

    # -- device data ---------------------------------------------------------------------------------

    def _device(self, arr: np.ndarray, dtype: Any) -> Any:
        """Device copy of a long-lived host array (table columns), cached while the array lives."""
        hit = self._arrays.get(id(arr))
        if hit is not None and hit[0]() is arr:
            return hit[1]
        host = np.ascontiguousarray(arr)
        if host.dtype == np.bool_:
            host = host.view(np.uint8)
        dev = self.runtime.to_device(host.astype(dtype, copy=False))
        self._arrays = {k: v for k, v in self._arrays.items() if v[0]() is not None}
        self._arrays[id(arr)] = (weakref.ref(arr), dev)
        return dev

    def _excluded(self, n_rows: int, excluded: np.ndarray | None) -> Any:
        if excluded is None:
            if n_rows not in self._zeros:
                self._zeros = {n_rows: self.runtime.full(max(n_rows, 1), 0, np.uint8)}
            return self._zeros[n_rows]
        # consumption edits the mask between calls: copy it each time
        return self.runtime.to_device(np.ascontiguousarray(excluded).view(np.uint8))

    def _context(self, kernels: GpuKernels, env: tuple, excluded: np.ndarray | None) -> tuple[Any, Any, list]:
        """The pointer and scalar tables of cdp.cuh's Ctx for this env (see codegen.cuda)."""
        spec, lay = kernels.spec, kernels.spec.layout
        keep = [self._device(env[0], np.int64), self._excluded(len(env[0]), excluded)]
        for e in range(1, len(env)):
            if e == lay.strings_at:
                keep.append(keep[0])  # codes travel in the scalar table; keep slots aligned
                continue
            arr = env[e]
            if e < lay.strings_at:
                attr = lay.attrs[(e - 1) // 2]
                kind = kernels.kinds.get(attr)
                is_valid = (e - 1) % 2 == 1
                dtype = np.uint8 if is_valid or kind == "bool" else np.float64 if kind == "float" else np.int64
            else:
                dtype = np.int64
            keep.append(self._device(arr, dtype))
        tab = self.runtime.to_device(np.array([self.runtime.pointer(b) for b in keep], dtype=np.uint64))
        cols = [len(env[lay.neg_at + 2 * k]) for k in range(lay.n_negations)]
        cols += [len(env[lay.agg_at + 2 * k]) for k in range(lay.n_aggregates)]
        codes = list(np.asarray(env[lay.strings_at], np.int64)[: len(lay.strings)])
        scal = self.runtime.to_device(np.array(codes + cols + [0], dtype=np.int64))
        del spec
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
            tab, scal, step_id(step.plan, step.spec.step), step.spec.pred, rt.to_device(seqs.ravel()), n,
            self._device(step.cand, np.int64), rt.to_device(lo), rt.to_device(offsets), total,
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
            int(last), rt.to_device(seqs.ravel()), n, self._device(step.cand, np.int64),
            rt.to_device(lo), rt.to_device(offsets), total, best,
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

    def pointer(self, buf: Any) -> int:
        return int(buf.data.ptr)

    def bytes_in_use(self) -> int:
        return int(self._pool.used_bytes())


def gpu_available() -> tuple[bool, str]:
    """Whether ``backend="gpu"`` can run here, and if not, why (for skip messages)."""
    try:
        _import_cupy()
    except BackendUnavailableError as err:
        return False, str(err)
    return True, "a CUDA device is available"


def gpu_combiner() -> GpuCombiner:
    """The combiner of ``backend="gpu"``; BackendUnavailableError when no GPU is usable."""
    return GpuCombiner(CupyRuntime(), "gpu")


register_combiner("gpu", gpu_combiner)
