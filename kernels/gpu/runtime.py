"""The runtime protocol the GPU combiner talks to (memory, transfers, launches), its errors,
output buffers that grow, and launch statistics."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from ...codegen.cuda import CudaRule
from ...errors import CepError


class DeviceMemoryError(CepError, MemoryError):
    """The device cannot hold the work of even a single partial sequence."""



class DeviceOutOfMemory(Exception):
    """Raised by a runtime when an allocation fails (caught by the combiner, which splits the batch)."""

    def __init__(self, nbytes: int) -> None:
        super().__init__(f"out of device memory allocating {nbytes} bytes")
        self.nbytes = nbytes



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

    def rows_by_key(self, rows: Any, keys: Any, count: int, width: int) -> np.ndarray:
        """Host copy of the first ``count`` rows of ``rows`` (``width`` values each, row-major),
        in ascending order of their ``keys``: sorted where the data lies, then copied once."""
        ...

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



def launch_grid(n_threads: int, block: int, max_blocks: int) -> int:
    """Blocks of a launch over ``n_threads`` work items: enough for one item a thread, at most
    ``max_blocks`` (the kernels' grid-stride loops, with int64 indices, take the rest), at least 1."""
    return max(min(-(-int(n_threads) // int(block)), int(max_blocks)), 1)

