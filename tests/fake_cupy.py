"""A fake ``cupy`` whose streams really are asynchronous, for running ``CupyRuntime`` without a GPU.

Only what ``cep_gpu.kernels.gpu.CupyRuntime`` calls is modelled, with the semantics of CUDA that
matter to it:

* Every copy, fill and kernel launch is *queued* on the current stream of the current device and
  runs only when that stream is synchronised (``Stream.synchronize``, ``Device.synchronize``, or a
  blocking ``ndarray.get(stream=s)``, which queues the copy on ``s`` and waits for ``s``). Work on
  another stream, including the legacy default stream (no stream entered), is not waited for. A
  host read that was not ordered after the kernel that wrote the data sees stale memory, as it can
  on a device.
* Asynchronous host-to-device copies from pinned memory (``cupyx.empty_pinned``) read it when they
  run, not when queued; from pageable memory, CUDA stages the data before the call returns, so
  the fake takes a snapshot.
* Memory is handed back when the last array over it dies, and at once: a device buffer or pinned
  buffer dropped while queued work still reads or writes it is filled with junk first (and kept,
  so nothing crashes), as another allocation reusing it would. Queued work holds raw addresses,
  not references, as on a device.
* Each device has its own memory and streams. A kernel launched while another device is current,
  on a stream of another device, with a module loaded on another device, or with an array of
  another device raises, as CUDA does ("invalid resource handle" / illegal address).
* ``RawModule(code=...)`` compiles the text with the concurrent host build of ``cuda/`` and an
  empty include path: the text must be self-contained, as NVRTC needs it. Kernels run with their
  threads concurrent (``kernels/host.py``, mode ``threads``).

``install(monkeypatch, devices=2)`` puts the fake ``cupy`` and ``cupyx`` in ``sys.modules`` and
returns the fake ``cupy`` (its ``state`` has the compiled sources and options, and counters).
"""

from __future__ import annotations

import ctypes
import tempfile
import types
import weakref
from pathlib import Path
from typing import Any

import numpy as np
from cep_gpu.kernels.host import MODE_FLAGS, build


class CudaError(RuntimeError):
    """What the fake raises where CUDA would fail a call."""


class _State:
    def __init__(self, devices: int) -> None:
        self.devices = [_Device(self, i) for i in range(devices)]
        self.current = 0
        self.streams: dict[int, _Stream] = {}
        self.sources: list[str] = []
        self.options: list[tuple] = []
        self.launches = 0
        self.device_copies = 0
        self.used = 0
        self.limit: int | None = None  # bytes of device memory (None: unlimited)
        self.peak = 0
        self.include = Path(tempfile.mkdtemp(prefix="fake-cupy-include-"))  # stays empty

    @property
    def device(self) -> _Device:
        return self.devices[self.current]


class _Device:
    def __init__(self, state: _State, i: int) -> None:
        self._state = state
        self.id = i
        self.compute_capability = "90"
        self._saved: list[int] = []
        self.stream_stack: list[_Stream] = []
        self.legacy = _Stream(state, self, legacy=True)

    def use(self) -> None:
        self._state.current = self.id

    def __enter__(self) -> _Device:
        self._saved.append(self._state.current)
        self._state.current = self.id
        return self

    def __exit__(self, *exc) -> None:
        self._state.current = self._saved.pop()

    def synchronize(self) -> None:
        for s in [self.legacy, *[s for s in self._state.streams.values() if s.device is self]]:
            s.synchronize()

    @property
    def current_stream(self) -> _Stream:
        return self.stream_stack[-1] if self.stream_stack else self.legacy


class _Stream:
    _next = 1000

    def __init__(self, state: _State, device: _Device | None = None, non_blocking: bool = False,
                 legacy: bool = False) -> None:
        self._state = state
        self.device = device if device is not None else state.device
        self.non_blocking = non_blocking
        self.queue: list = []
        _Stream._next += 1
        self.ptr = 0 if legacy else _Stream._next
        if not legacy:
            state.streams[self.ptr] = self

    def __enter__(self) -> _Stream:
        if self._state.device is not self.device:
            raise CudaError("entering a stream of another device than the current one")
        self.device.stream_stack.append(self)
        return self

    def __exit__(self, *exc) -> None:
        self.device.stream_stack.pop()

    def enqueue(self, op) -> None:
        self.queue.append(op)

    def synchronize(self) -> None:
        queue, self.queue = self.queue, []
        for op in queue:
            op()


class _Ptr:
    def __init__(self, arr: np.ndarray) -> None:
        self.ptr = arr.ctypes.data


class FakeArray:
    """A device array: a NumPy buffer that only queued work touches."""

    def __init__(self, a: np.ndarray, device: _Device, base: FakeArray | None = None) -> None:
        self._a = a
        self.device = device
        self._base = base  # a view keeps its allocation alive, as in CuPy

    @property
    def dtype(self) -> np.dtype:
        return self._a.dtype

    @property
    def shape(self) -> tuple:
        return self._a.shape

    @property
    def size(self) -> int:
        return self._a.size

    @property
    def data(self) -> _Ptr:
        return _Ptr(self._a)

    def __len__(self) -> int:
        return len(self._a)

    def __getitem__(self, key) -> FakeArray:
        if not isinstance(key, slice):
            raise TypeError("the fake supports slices only")
        return FakeArray(self._a[key], self.device, self._base or self)

    def reshape(self, *shape) -> FakeArray:
        return FakeArray(self._a.reshape(*shape), self.device, self._base or self)

    def _stream(self, stream) -> _Stream:
        state = self.device._state
        if state.device is not self.device:
            raise CudaError("array of another device than the current one")
        s = stream if stream is not None else self.device.current_stream
        if s.device is not self.device:
            raise CudaError("stream of another device")
        return s

    def set(self, host: np.ndarray, stream=None) -> None:
        src = np.ascontiguousarray(host)
        if src.size != self._a.size or src.dtype != self._a.dtype:
            raise ValueError("size or dtype mismatch in set")
        dst, n = self._a.ctypes.data, self._a.nbytes
        if _is_pinned(src):
            at = src.ctypes.data  # read when the copy runs
        else:
            keep = src.copy()  # pageable: staged before the call returns
            at = keep.ctypes.data
            _GRAVEYARD.append(keep)
        self._stream(stream).enqueue(lambda: ctypes.memmove(dst, at, n))

    def get(self, stream=None) -> np.ndarray:
        out = np.empty_like(self._a)
        src, n = self._a.ctypes.data, self._a.nbytes
        s = self._stream(stream)
        s.enqueue(lambda: ctypes.memmove(out.ctypes.data, src, n))
        s.synchronize()  # blocking=True: wait for that stream (only)
        return out


class _Kernel:
    def __init__(self, fn, device: _Device, state: _State) -> None:
        self._fn = fn
        self._device = device
        self._state = state

    def __call__(self, grid: tuple, block: tuple, args: tuple) -> None:
        state = self._state
        dev = state.device
        if dev is not self._device:
            raise CudaError("kernel of a module loaded on another device")
        conv = []
        for a in args:
            if isinstance(a, FakeArray):
                if a.device is not dev:
                    raise CudaError("kernel argument on another device")
                conv.append(a.data.ptr)
            else:
                conv.append(int(a))
        # at most 8 blocks: the kernels' grid-stride loops make any grid size give the same
        # result, and each block is a std::thread in the concurrent host build
        fn, g, b = self._fn, min(int(grid[0]), 8), int(block[0])
        state.launches += 1
        dev.current_stream.enqueue(lambda: fn(g, b, 0, *conv))


class _RawModule:
    def __init__(self, code: str, options: tuple = (), backend: str = "nvrtc") -> None:
        state = _STATE
        state.sources.append(code)
        state.options.append(tuple(options))
        if any(o.startswith("-I") for o in options):
            raise CudaError("the fake NVRTC has no file system: -I is not allowed")
        self._path = build(code, MODE_FLAGS["threads"], include=state.include)
        self._lib = None

    def get_function(self, name: str) -> _Kernel:
        state = _STATE
        if self._lib is None:
            self._lib = ctypes.CDLL(str(self._path))
            self._device = state.device
        from cep_gpu.kernels.gpu import KERNELS

        fn = getattr(self._lib, name)
        fn.restype = None
        fn.argtypes = [ctypes.c_uint, ctypes.c_uint, ctypes.c_uint64] + [
            ctypes.c_void_p if k == "p" else ctypes.c_int64 for k in KERNELS[name]]
        return _Kernel(fn, self._device, state)


_STATE: _State


def make(devices: int = 2) -> types.ModuleType:
    """A fresh fake ``cupy`` module (see the module docstring)."""
    global _STATE
    state = _STATE = _State(devices)
    cupy = types.ModuleType("cupy")
    cupy.__version__ = "0.0-fake"
    cupy.state = state
    cupy.ndarray = FakeArray
    cuda = types.SimpleNamespace()
    cupy.cuda = cuda

    def device(i: int | None = None) -> _Device:
        if i is None:
            return state.device
        if not 0 <= int(i) < len(state.devices):
            raise CudaError(f"invalid device ordinal {i}")
        return state.devices[int(i)]

    def memcpy_async(dst: int, src: int, nbytes: int, kind: int, stream_ptr: int) -> None:
        s = state.streams.get(stream_ptr) if stream_ptr else state.device.legacy
        if s is None or s.device is not state.device:
            raise CudaError("memcpyAsync on a stream of another device (or no such stream)")
        state.device_copies += 1
        s.enqueue(lambda: ctypes.memmove(dst, src, nbytes))

    cuda.Device = device
    cuda.set_allocator = lambda allocator=None: None
    cuda.set_pinned_memory_allocator = lambda allocator=None: None
    cuda.Stream = lambda non_blocking=False: _Stream(state, non_blocking=non_blocking)
    cuda.runtime = types.SimpleNamespace(
        getDeviceCount=lambda: len(state.devices),
        getDevice=lambda: state.current,
        driverGetVersion=lambda: 12040,
        runtimeGetVersion=lambda: 12040,
        memcpyAsync=memcpy_async,
        memcpyDeviceToDevice=3,
        getDeviceProperties=lambda i: {"name": b"fake-cupy device", "major": 9, "minor": 0,
                                       "totalGlobalMem": 1 << 30},
    )

    class OutOfMemoryError(MemoryError):
        pass

    cuda.memory = types.SimpleNamespace(OutOfMemoryError=OutOfMemoryError)

    def _alloc(a: np.ndarray) -> FakeArray:
        if state.limit is not None and state.used + a.nbytes > state.limit:
            raise OutOfMemoryError(f"out of memory allocating {a.nbytes} bytes")
        state.used += a.nbytes
        state.peak = max(state.peak, state.used)
        arr = FakeArray(a, state.device)
        weakref.finalize(arr, _release, a, state)
        return arr

    def empty(shape, dtype=np.float64) -> FakeArray:
        return _alloc(np.empty(shape, dtype))

    def full(shape, value, dtype=np.float64) -> FakeArray:
        out = _alloc(np.empty(shape, dtype))
        fill = np.full(shape, value, dtype)
        _GRAVEYARD.append(fill)
        dst, at, n = out._a.ctypes.data, fill.ctypes.data, fill.nbytes
        state.device.current_stream.enqueue(lambda: ctypes.memmove(dst, at, n))  # a fill kernel, queued
        return out

    def _queued(out: FakeArray, compute) -> FakeArray:
        """``out`` filled by ``compute()`` when the current stream runs it (a kernel, queued)."""
        dst = out._a
        state.device.current_stream.enqueue(lambda: dst.__setitem__(Ellipsis, compute()))
        return out

    def argsort(a: FakeArray) -> FakeArray:
        src = a._a
        return _queued(_alloc(np.empty(src.shape, np.int64)), lambda: np.argsort(src, kind="stable"))

    def take(a: FakeArray, order: FakeArray, axis: int = 0) -> FakeArray:
        src, idx = a._a, order._a
        shape = (len(idx), *src.shape[1:])
        return _queued(_alloc(np.empty(shape, src.dtype)), lambda: np.take(src, idx, axis=axis))

    cupy.empty = empty
    cupy.full = full
    cupy.argsort = argsort
    cupy.take = take
    cupy.ascontiguousarray = lambda a: a
    cupy.RawModule = _RawModule
    cupy.get_default_memory_pool = lambda: types.SimpleNamespace(used_bytes=lambda: state.used)
    return cupy


#: Memory handed back: kept (filled with junk) so that late queued work reads junk, not freed pages.
_GRAVEYARD: list[np.ndarray] = []
_PINNED: set[int] = set()


def _release(a: np.ndarray, state: _State | None) -> None:
    if state is not None:
        state.used -= a.nbytes
    _PINNED.discard(a.ctypes.data)
    a.view(np.uint8).fill(0xA5)
    _GRAVEYARD.append(a)


def _is_pinned(a: np.ndarray) -> bool:
    return a.ctypes.data in _PINNED


class _Pinned(np.ndarray):
    """A pinned host buffer (its death hands the memory back, see ``_release``)."""


def empty_pinned(shape, dtype=np.float64) -> np.ndarray:
    base = np.empty(shape, dtype)
    out = base.view(_Pinned)
    _PINNED.add(base.ctypes.data)
    weakref.finalize(out, _release, base, None)
    return out


def install_into(modules: dict, devices: int = 2) -> types.ModuleType:
    """Put a fresh fake ``cupy`` and ``cupyx`` into ``modules`` (``sys.modules`` of a script)."""
    cupy = make(devices)
    cupyx = types.ModuleType("cupyx")
    cupyx.empty_pinned = empty_pinned
    modules["cupy"], modules["cupyx"] = cupy, cupyx
    return cupy


def install(monkeypatch, devices: int = 2) -> types.ModuleType:
    """Put a fresh fake ``cupy`` (and ``cupyx``) in ``sys.modules``; returns the fake ``cupy``."""
    cupy = make(devices)
    cupyx = types.ModuleType("cupyx")
    cupyx.empty_pinned = empty_pinned
    monkeypatch.setitem(__import__("sys").modules, "cupy", cupy)
    monkeypatch.setitem(__import__("sys").modules, "cupyx", cupyx)
    return cupy


def any_pending(cupy: Any) -> bool:
    """Whether queued work is left on any stream (a test's end should leave none unread)."""
    st = cupy.state
    return any(s.queue for s in st.streams.values()) or any(d.legacy.queue for d in st.devices)
