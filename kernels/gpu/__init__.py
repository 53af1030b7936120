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
:class:`~cep_gpu.events.EventTable` carries (its ``lineage`` field, :mod:`cep_gpu.events.lineage`,
handed to the combiner by :meth:`GpuCombiner.bind_lineage`) proves which rows of
a device column are still those of the new table, so only the new tail is copied (asynchronously,
from pinned memory on the runtime's stream) and the expired prefix is released by moving the
column's start (and moving the rows into a smaller buffer once it holds eight times what is live).
Whatever the lineage cannot prove is uploaded in full. Arrays without a tag (batch tables, and the
per-call negation, aggregate and candidate columns) are copied once per array object. A column
whose device copy was made at ingestion (:func:`provide_device_copy`: a table that went to the
device through cuDF, see :mod:`cep_gpu.ingest_cudf`) is taken from that copy instead of uploaded.

Files: :mod:`.source` (the CUDA sources and cache keys), :mod:`.runtime` (the runtime protocol,
errors, output buffers, statistics), :mod:`.columns` (device columns), :mod:`.combiner`
(:class:`GpuCombiner`), :mod:`.cupy_runtime` (:class:`CupyRuntime`), :mod:`.backend` (the
backends). This package exports the names below.
"""

from .backend import GpuBackend, GpuDevicesBackend, register_gpu_backend
from .columns import (
    MIN_COLUMN_CAPACITY,
    ArrayNotes,
    DeviceColumn,
    column_dtype,
    provide_device_copy,
    provided_copy,
)
from .combiner import GpuCombiner, GpuRule
from .cupy_runtime import (
    DEVICE_BLOCK,
    DEVICE_MAX_BLOCKS,
    CupyModule,
    CupyRuntime,
    current_device,
    gpu_available,
    gpu_combiner,
)
from .runtime import (
    DeviceMemoryError,
    DeviceOutOfMemory,
    GrowingBuffer,
    LaunchStats,
    Module,
    Runtime,
    launch_grid,
)
from .source import (
    KERNELS,
    NVRTC_OPTIONS,
    compile_key,
    cuda_dir,
    full_source,
    nvrtc_source,
    sources_digest,
)

__all__ = [
    "DEVICE_BLOCK",
    "DEVICE_MAX_BLOCKS",
    "KERNELS",
    "MIN_COLUMN_CAPACITY",
    "NVRTC_OPTIONS",
    "ArrayNotes",
    "CupyModule",
    "CupyRuntime",
    "DeviceColumn",
    "DeviceMemoryError",
    "DeviceOutOfMemory",
    "GpuBackend",
    "GpuCombiner",
    "GpuDevicesBackend",
    "GpuRule",
    "GrowingBuffer",
    "LaunchStats",
    "Module",
    "Runtime",
    "column_dtype",
    "compile_key",
    "cuda_dir",
    "current_device",
    "full_source",
    "gpu_available",
    "gpu_combiner",
    "launch_grid",
    "nvrtc_source",
    "provide_device_copy",
    "provided_copy",
    "register_gpu_backend",
    "sources_digest",
]
