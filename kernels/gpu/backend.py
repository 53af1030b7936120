"""The GPU backends: CDP over a :class:`GpuCombiner` (``gpu-host``), and ``backend="gpu"`` with one
combiner per CUDA device."""

from __future__ import annotations

from collections.abc import Callable

from ...backends import register
from ...cdp import CDPBackend
from .combiner import GpuCombiner
from .cupy_runtime import current_device, gpu_combiner


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
