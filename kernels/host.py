"""The host build of ``cuda/``: the GPU kernels compiled as plain C++ and run on the CPU (tests).

docs/gpu.md: the kernel sources also build for the host (``cuda/portable.cuh`` supplies
thread indices and atomics), and a host build runs every kernel over its whole grid.
:class:`HostRuntime` implements the runtime interface of :mod:`cep_gpu.kernels.gpu` with NumPy
arrays as "device" buffers and a g++-built shared library loaded through ``ctypes`` as the
"module", so :class:`~cep_gpu.kernels.gpu.GpuCombiner` runs unchanged: same launches, same atomic
output index, same overflow relaunch, same batch split on out-of-memory (simulated with
``memory_limit``).

Three builds (``HostRuntime(mode=...)``):

* ``"serial"`` (``backend="gpu-host"``): every kernel thread one after the other; the fast one.
* ``"threads"`` (``backend="gpu-host-threads"``): the threads of a launch run concurrently, one
  ``std::thread`` per group of ``group`` threads of a block (a whole block by default), started
  together, each group in an order shuffled from a seed; atomics are relaxed GCC atomics (CUDA's
  memory order, not stronger). Results must still equal the serial build's.
* ``"tsan"``: the concurrent build under ThreadSanitizer (``-fsanitize=thread``); it can only be
  loaded into a process started with the TSan runtime preloaded (:func:`tsan_env`), which is how
  ``tests/test_gpu_emulation.py`` runs it, in a subprocess.

Libraries are cached in ``$CEP_GPU_CACHE`` (default: a ``cep_gpu`` folder in the user's cache
directory) under a hash of the full source, the ``cuda/`` headers and the compiler command, so each
rule compiles once per machine and build.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from ..codegen.cuda import CudaRule
from ..errors import BackendUnavailableError, CepError
from .gpu import (
    KERNELS,
    DeviceOutOfMemory,
    GpuBackend,
    GpuCombiner,
    cuda_dir,
    nvrtc_source,
    register_gpu_backend,
    sources_digest,
)

#: Compiler command (the source file and output are appended). -fno-strict-aliasing: the kernels
#: read NumPy int64 buffers (long) through long long pointers.
CXXFLAGS = ("-std=c++17", "-O1", "-shared", "-fPIC", "-fno-strict-aliasing", "-Wall", "-Wno-unused-function")

#: Extra compiler flags of each build mode (see the module docstring).
MODE_FLAGS: dict[str, tuple[str, ...]] = {
    "serial": (),
    "threads": ("-DCEP_HOST_CONCURRENT=1", "-pthread"),
    "tsan": ("-DCEP_HOST_CONCURRENT=1", "-pthread", "-fsanitize=thread", "-g"),
}


class HostRuntimeError(CepError, ValueError):
    """A :class:`HostRuntime` option that names no build or grid (the message says which)."""


def cache_dir() -> Path:
    """Where compiled host libraries are kept."""
    env = os.environ.get("CEP_GPU_CACHE")
    if env:
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "cep_gpu"


def compiler() -> str:
    """The C++ compiler (``$CXX`` or g++); BackendUnavailableError when there is none."""
    cxx = os.environ.get("CXX", "g++")
    path = shutil.which(cxx)
    if path is None:
        raise BackendUnavailableError(f"backend 'gpu-host' needs a C++ compiler; {cxx!r} was not found on PATH")
    return path


def build(source: str, flags: tuple[str, ...] = (), include: Path | None = None) -> Path:
    """Compile a translation unit (text) into a shared library, cached by content; its path.

    ``flags`` are added to :data:`CXXFLAGS` (see :data:`MODE_FLAGS`); ``include`` replaces the
    installed ``cuda/`` folder as the one the source's ``#include "cdp.cuh"`` reads (tests build
    deliberately broken variants of the kernels from a copy).
    """
    cxx = compiler()
    inc = cuda_dir() if include is None else Path(include)
    cmd_tail = (*CXXFLAGS, *flags, f"-I{inc}", "-x", "c++")
    h = hashlib.sha256()
    h.update(source.encode())
    h.update(" ".join((cxx, *CXXFLAGS, *flags)).encode())
    h.update(sources_digest(inc).encode())
    out = cache_dir() / f"cdp-host-{h.hexdigest()[:32]}.so"
    if out.exists():
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=out.parent) as tmp:
        src = Path(tmp) / "rule.cu"
        src.write_text(source)
        lib = Path(tmp) / "rule.so"
        proc = subprocess.run([cxx, *cmd_tail, str(src), "-o", str(lib)], capture_output=True, text=True)
        if proc.returncode != 0:
            raise RuntimeError(f"host build of the CUDA kernels failed:\n{proc.stderr[-4000:]}")
        os.replace(lib, out)  # atomic: parallel test workers never see a half-written library
    return out


def tsan_runtime() -> str:
    """Path of the compiler's ThreadSanitizer runtime (``libtsan.so``); BackendUnavailableError
    when the compiler has none."""
    proc = subprocess.run([compiler(), "-print-file-name=libtsan.so"], capture_output=True, text=True)
    path = proc.stdout.strip()
    if proc.returncode != 0 or not os.path.isabs(path) or not os.path.exists(path):
        raise BackendUnavailableError("the C++ compiler has no ThreadSanitizer runtime (libtsan.so)")
    return os.path.realpath(path)


def tsan_env(base: dict[str, str] | None = None, options: str = "") -> dict[str, str]:
    """An environment for a subprocess that loads the ``"tsan"`` build: the TSan runtime preloaded
    (a sanitized library cannot be loaded into a process started without it) and ``TSAN_OPTIONS``
    (reports go to stderr; ``options`` are appended)."""
    env = dict(os.environ if base is None else base)
    env["LD_PRELOAD"] = tsan_runtime()
    env["TSAN_OPTIONS"] = " ".join(x for x in ("halt_on_error=0 report_signal_unsafe=0", options) if x)
    return env


def _tsan_loaded() -> bool:
    try:
        with open("/proc/self/maps") as maps:
            return "libtsan" in maps.read()
    except OSError:  # not Linux: let the loader say what is wrong
        return True


class HostModule:
    """The kernels of one rule, loaded from the host library (serial or concurrent, see
    :data:`MODE_FLAGS`); each launch passes a new seed for the concurrent build's shuffles."""

    def __init__(self, path: Path, block: int, max_blocks: int, seed: int = 0) -> None:
        self._lib = ctypes.CDLL(str(path))
        self._block = block
        self._max_blocks = max_blocks
        self._seed = int(seed)
        self._funcs = {}
        for name, kinds in KERNELS.items():
            fn = getattr(self._lib, name)
            fn.restype = None
            fn.argtypes = [ctypes.c_uint, ctypes.c_uint, ctypes.c_uint64] + [
                ctypes.c_void_p if k == "p" else ctypes.c_int64 for k in kinds
            ]
            self._funcs[name] = fn
        self.grids: list[tuple[str, int, int]] = []  # (kernel, grid, block) of each launch

    def launch(self, name: str, n_threads: int, *args: Any) -> None:
        kinds = KERNELS[name]
        conv = [_pointer(a) if k == "p" else int(a) for k, a in zip(kinds, args, strict=True)]
        grid = max(min((n_threads + self._block - 1) // self._block, self._max_blocks), 1)
        self.grids.append((name, grid, self._block))
        seed = (self._seed * 1_000_003 + len(self.grids)) & 0xFFFF_FFFF_FFFF_FFFF
        self._funcs[name](grid, self._block, seed, *conv)


def _pointer(buf: np.ndarray) -> int:
    if not isinstance(buf, np.ndarray) or not buf.flags.c_contiguous:
        raise TypeError("host kernels take C-contiguous NumPy buffers")
    return buf.ctypes.data


class HostRuntime:
    """The runtime interface over host memory (see module docstring).

    ``block``/``max_blocks`` shape the launch grid; the defaults are small so that the kernels'
    grid-stride loops run several rounds, as they do on a device for large batches.
    ``memory_limit`` (bytes of live buffers) makes allocations fail like a full device.
    ``mode`` picks the build (``"serial"``, ``"threads"``, ``"tsan"``); in the concurrent ones
    ``group`` kernel threads of a block share one ``std::thread`` (0: the whole block), and
    ``seed`` seeds the shuffled order of each group.
    """

    name = "gpu-host"

    def __init__(
        self,
        block: int = 32,
        max_blocks: int = 4,
        memory_limit: int | None = None,
        mode: str = "serial",
        group: int = 0,
        seed: int = 0,
        include: Path | None = None,
    ) -> None:
        compiler()
        if mode not in MODE_FLAGS:
            raise HostRuntimeError(f"HostRuntime mode must be one of {sorted(MODE_FLAGS)}, not {mode!r}")
        if mode == "tsan" and not _tsan_loaded():
            raise BackendUnavailableError(
                "the 'tsan' host build needs the ThreadSanitizer runtime loaded at process start: "
                "run Python with the environment of cep_gpu.kernels.host.tsan_env() (LD_PRELOAD)"
            )
        if int(group) < 0 or int(block) < 1 or int(max_blocks) < 1:
            raise HostRuntimeError(
                f"HostRuntime needs block >= 1, max_blocks >= 1 and group >= 0 (0: a whole block); "
                f"got block={block}, max_blocks={max_blocks}, group={group}"
            )
        self.block = block
        self.max_blocks = max_blocks
        self.memory_limit = memory_limit
        self.mode = mode
        self.seed = int(seed)
        self.include = include
        self._flags = MODE_FLAGS[mode] + ((f"-DCEP_HOST_GROUP={int(group)}",) if mode != "serial" else ())
        self._modules: dict[str, HostModule] = {}
        self._live: dict[int, int] = {}  # id(buffer) -> bytes, for the simulated limit
        self.peak_bytes = 0

    def compile(self, rule: CudaRule) -> HostModule:
        if rule.key not in self._modules:
            # the very text NVRTC compiles on a device (every cuda/ header written out)
            path = build(nvrtc_source(rule.source, self.include), self._flags, self.include)
            self._modules[rule.key] = HostModule(path, self.block, self.max_blocks, self.seed)
        return self._modules[rule.key]

    def _alloc(self, n: int, dtype: Any, fill: int | None = None) -> np.ndarray:
        nbytes = int(n) * np.dtype(dtype).itemsize
        if self.memory_limit is not None:
            if self.bytes_in_use() + nbytes > self.memory_limit:
                raise DeviceOutOfMemory(nbytes)
        arr = np.empty(int(n), dtype) if fill is None else np.full(int(n), fill, dtype)
        self._track(arr)
        self.peak_bytes = max(self.peak_bytes, self.bytes_in_use())
        return arr

    def _track(self, arr: np.ndarray) -> None:
        import weakref

        key = id(arr)
        self._live[key] = arr.nbytes
        weakref.finalize(arr, self._live.pop, key, None)

    def to_device(self, host: np.ndarray) -> np.ndarray:
        out = self._alloc(host.size, host.dtype)
        out[...] = np.ascontiguousarray(host).ravel()
        return out

    def empty(self, n: int, dtype: Any) -> np.ndarray:
        return self._alloc(n, dtype)

    def full(self, n: int, value: int, dtype: Any) -> np.ndarray:
        return self._alloc(n, dtype, value)

    def to_host(self, buf: np.ndarray, n: int | None = None) -> np.ndarray:
        return (buf if n is None else buf[: int(n)]).copy()

    def copy_in(self, buf: np.ndarray, offset: int, host: np.ndarray) -> None:
        buf[int(offset): int(offset) + len(host)] = host

    def rows_by_key(self, rows: np.ndarray, keys: np.ndarray, count: int, width: int) -> np.ndarray:
        count = int(count)
        order = np.argsort(keys[:count], kind="stable")
        return rows[: count * width].reshape(count, width)[order]

    def copy_within(self, dst: np.ndarray, dst_offset: int, src: np.ndarray, src_offset: int, n: int) -> None:
        dst[int(dst_offset): int(dst_offset) + int(n)] = src[int(src_offset): int(src_offset) + int(n)]

    def view(self, buf: np.ndarray, start: int, stop: int) -> np.ndarray:
        return buf[int(start): int(stop)]

    def pointer(self, buf: np.ndarray) -> int:
        return _pointer(buf)

    def adopt(self, buf: Any) -> np.ndarray | None:
        """NumPy arrays are this runtime's buffers (counted from now on as its memory)."""
        if not isinstance(buf, np.ndarray) or not buf.flags.c_contiguous:
            return None
        if id(buf) not in self._live:
            self._track(buf)
            self.peak_bytes = max(self.peak_bytes, self.bytes_in_use())
        return buf

    def bytes_in_use(self) -> int:
        return sum(self._live.values())


def host_combiner(initial_capacity: int = 1 << 14, check_columns: bool = False, **runtime: Any) -> GpuCombiner:
    """A :class:`~cep_gpu.kernels.gpu.GpuCombiner` over a :class:`HostRuntime` (keyword
    arguments ``block``, ``max_blocks``, ``memory_limit``, ``mode``, ``group``, ``seed`` go to
    the runtime; ``check_columns``
    compares each device column with its host array after every update)."""
    return GpuCombiner(HostRuntime(**runtime), "gpu-host", initial_capacity, check_columns)


def host_backend(**kwargs: Any) -> GpuBackend:
    """The CDP backend over the host build (what ``backend="gpu-host"`` gives, with options)."""
    return GpuBackend(host_combiner(**kwargs), "gpu-host")


register_gpu_backend("gpu-host", host_combiner)
register_gpu_backend("gpu-host-threads", lambda: host_combiner(mode="threads"))
