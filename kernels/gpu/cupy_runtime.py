"""The CuPy runtime: NVRTC compilation of ``cuda/``, device memory, pinned transfers and launches
on one CUDA device."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ...codegen.cuda import CudaRule
from ...errors import BackendUnavailableError
from .combiner import GpuCombiner
from .runtime import DeviceOutOfMemory, Module, launch_grid
from .source import KERNELS, NVRTC_OPTIONS, compile_key, nvrtc_source


def _broken_cupy(err: BaseException) -> BackendUnavailableError:
    first = str(err).strip().splitlines()[0][:300] if str(err).strip() else ""
    return BackendUnavailableError(
        f"backend 'gpu': CuPy is installed but cannot be imported ({type(err).__name__}: {first}); "
        "check that the cupy-cudaNNx package matches the installed CUDA, or use backend='cpu'"
    )


def import_cupy():
    """CuPy and a usable device, or BackendUnavailableError naming what is missing."""
    # Only a missing top-level ``cupy`` means "not installed"; any other failure (CuPy's own
    # ImportError or an OSError/RuntimeError from its CUDA libraries) means a broken install. The
    # reason goes into the message and the chain is cut, so the user sees one error, not CuPy's
    # import internals (and ``auto`` falls back to the CPU instead of crashing).
    try:
        import cupy  # type: ignore[import-not-found]
    except ModuleNotFoundError as err:
        if err.name != "cupy":
            raise _broken_cupy(err) from None
        raise BackendUnavailableError(
            "backend 'gpu' needs CuPy, which is not installed (pip install 'cep-gpu[gpu]', i.e. "
            "cupy-cuda12x); use backend='cpu' on machines without a GPU"
        ) from None
    except Exception as err:
        raise _broken_cupy(err) from None
    try:
        count = cupy.cuda.runtime.getDeviceCount()
    except Exception as err:  # CUDARuntimeError: no driver, or driver too old
        raise BackendUnavailableError(
            f"backend 'gpu': CuPy is installed but the CUDA driver is not usable ({err}); "
            "install an NVIDIA driver that supports CuPy's CUDA version, or use backend='cpu'"
        ) from None
    if count == 0:
        raise BackendUnavailableError(
            "backend 'gpu': the CUDA driver found no GPU device; use backend='cpu'"
        )
    return cupy


class CupyModule:
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


#: Threads per block and the most blocks of a device launch (gridDim.x may reach 2^31 - 1; more
#: blocks than a few waves of the largest GPU would only add scheduling, as the loops are
#: grid-stride).
DEVICE_BLOCK = 256


DEVICE_MAX_BLOCKS = 65535


class CupyRuntime:
    """Device memory, pinned async transfers on one stream, and NVRTC-compiled modules."""

    name = "gpu"

    def __init__(self, device: int | None = None) -> None:
        cupy = import_cupy()
        self.cupy = cupy
        # default: the current device, which a Spark task has set to its assigned GPU
        # (cep_gpu.spark_udfs.rapids.use_task_gpu); backend="gpu" keeps one runtime per device
        # (GpuDevicesBackend), so a reused worker that gets another GPU gets another runtime.
        # Every operation enters this device itself: the current device may change between calls.
        self.device = cupy.cuda.Device() if device is None else cupy.cuda.Device(device)
        self.arch = str(self.device.compute_capability)  # e.g. "90"; part of the module cache key
        with self.device:
            self.stream = cupy.cuda.Stream(non_blocking=True)
        self._modules: dict[str, CupyModule] = {}  # compile_key -> module
        self._by_rule: dict[str, CupyModule] = {}  # CudaRule.key -> module
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
                    mod = self._modules[key] = CupyModule(
                        self.cupy, raw, DEVICE_BLOCK, DEVICE_MAX_BLOCKS, self.device, self.stream
                    )
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
        return self._guard(
            lambda: self.cupy.empty(int(n), dtype), int(n) * np.dtype(dtype).itemsize
        )

    def full(self, n: int, value: int, dtype: Any) -> Any:
        return self._guard(
            lambda: self.cupy.full(int(n), value, dtype), int(n) * np.dtype(dtype).itemsize
        )

    def to_host(self, buf: Any, n: int | None = None) -> np.ndarray:
        view = buf if n is None else buf[: int(n)]
        with self.device:
            # on the stream of the kernels that wrote it, then wait: the host never reads a
            # count or a result before the launch that produced it has finished
            out = view.get(stream=self.stream)
            self.stream.synchronize()
        self._inflight.clear()
        return out

    def rows_by_key(self, rows: Any, keys: Any, count: int, width: int) -> np.ndarray:
        cp, count = self.cupy, int(count)

        def on_device() -> Any:
            # sorting and gathering on the host cost more than the kernel that found the rows
            order = cp.argsort(keys[:count])
            return cp.take(rows[: count * width].reshape(count, width), order, axis=0)

        return self.to_host(self._guard(on_device, count * (width + 1) * 8))

    def copy_in(self, buf: Any, offset: int, host: np.ndarray) -> None:
        pinned = self._pinned(np.ascontiguousarray(host))
        with self.device:
            buf[int(offset) : int(offset) + len(pinned)].set(
                pinned, stream=self.stream
            )  # asynchronous
        self._inflight += (pinned, buf)

    def copy_within(self, dst: Any, dst_offset: int, src: Any, src_offset: int, n: int) -> None:
        if n <= 0:
            return
        size = dst.dtype.itemsize
        with self.device:
            self.cupy.cuda.runtime.memcpyAsync(
                int(dst.data.ptr) + int(dst_offset) * size,
                int(src.data.ptr) + int(src_offset) * size,
                int(n) * size,
                self.cupy.cuda.runtime.memcpyDeviceToDevice,
                self.stream.ptr,
            )
        # the caller may drop ``src`` at once (a column moved into a new buffer): keep both ends
        # alive until the stream has run the copy. CuPy's own pool would only hand the memory to
        # later work on this stream, but an adopted cuDF column lives in RMM, which frees it for
        # work on other streams at once.
        self._inflight += (src, dst)

    def view(self, buf: Any, start: int, stop: int) -> Any:
        return buf[int(start) : int(stop)]

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
        import_cupy()
    except BackendUnavailableError as err:
        return False, str(err)
    return True, "a CUDA device is available"


def gpu_combiner(device: int | None = None) -> GpuCombiner:
    """A combiner over CuPy on ``device`` (default: the current one); BackendUnavailableError
    when no GPU is usable."""
    return GpuCombiner(CupyRuntime(device), "gpu")


def current_device() -> int:
    """The ordinal of CuPy's current CUDA device (what ``use_task_gpu`` selected in a Spark task)."""
    return int(import_cupy().cuda.runtime.getDevice())
