"""RAPIDS-enabled executors: the Spark configuration, and which GPU a task's engine uses.

The configuration keys follow the RAPIDS Accelerator for Apache Spark documentation (plugin,
GPU scheduling, RMM pool of the JVM, and "GPU support for Pandas UDF", which lets the Python
workers share the executor's GPU with memory of their own).

Inside a task, :func:`use_task_gpu` turns the task's GPU address (``TaskContext`` resources) into
the CuPy device ordinal of this process, through ``CUDA_VISIBLE_DEVICES`` when it is set.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

#: the discovery script that ships with Spark (``$SPARK_HOME/examples/src/main/scripts``)
DEFAULT_DISCOVERY_SCRIPT = "/opt/spark/examples/src/main/scripts/getGpusResources.sh"


def rapids_conf(
    *,
    executor_gpus: int = 1,
    tasks_per_gpu: int = 2,
    discovery_script: str = DEFAULT_DISCOVERY_SCRIPT,
    jvm_alloc_fraction: float = 0.3,
    python_alloc_fraction: float = 0.3,
    python_max_alloc_fraction: float = 0.5,
    concurrent_python_workers: int | None = None,
    python_pool: str = "cupy",
    plugin_jar: str | None = None,
    extra: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """Spark configuration for executors with GPUs that run the cep-gpu pandas UDFs.

    * the RAPIDS SQL plugin (``spark.plugins``), so that Spark's own operators (scans, shuffles,
      the range partitioning of time slices) run on the GPU too;
    * GPU scheduling: ``executor_gpus`` GPUs per executor (RAPIDS supports one), and
      ``1/tasks_per_gpu`` of a GPU per task, so ``tasks_per_gpu`` engine tasks share a device;
    * the resource discovery script that reports the executor's GPU addresses;
    * GPU memory: the JVM's RMM pool takes ``jvm_alloc_fraction`` of the device; at most
      ``concurrent_python_workers`` (default ``tasks_per_gpu``) Python workers use the GPU at once
      (``spark.rapids.python.gpu.enabled``), and together they get at most
      ``python_max_alloc_fraction`` of it, so JVM and Python never compete for the same memory:

      - ``python_pool="cupy"`` (default): the engine allocates through CuPy's own memory pool,
        capped per worker by ``CUPY_GPU_MEMORY_LIMIT`` (an executor environment variable: its
        share of ``python_max_alloc_fraction``, as a percentage). RAPIDS' RMM pool for Python is
        off: it would reserve memory that CuPy never draws from, and it needs ``rmm`` installed.
        A kernel that outgrows the cap raises CuPy's out-of-memory error, which the engine
        answers by splitting the batch.
      - ``python_pool="rmm"``: RAPIDS gives each Python worker an RMM pool between
        ``python_alloc_fraction`` and ``python_max_alloc_fraction`` (shared out among the
        workers; needs ``rmm`` on the executors), and :func:`use_task_gpu` points CuPy's
        allocator at it, so the kernels draw from that pool.
    * Arrow transfer of pandas UDF batches (``spark.sql.execution.arrow.pyspark.enabled``).

    ``plugin_jar``, when given, is added to ``spark.jars`` and to the Python workers' path (the
    RAPIDS jar carries the Python daemon used for GPU-scheduled pandas UDFs). ``extra`` entries
    override the defaults. Every value is a string, ready for ``SparkSession.builder.config`` or
    ``spark-submit --conf``.
    """
    if executor_gpus < 1 or tasks_per_gpu < 1:
        raise ValueError("executor_gpus and tasks_per_gpu must be >= 1")
    for name, frac in (
        ("jvm_alloc_fraction", jvm_alloc_fraction),
        ("python_alloc_fraction", python_alloc_fraction),
        ("python_max_alloc_fraction", python_max_alloc_fraction),
    ):
        if not 0.0 < frac <= 1.0:
            raise ValueError(f"{name} must be in (0, 1], got {frac}")
    if python_alloc_fraction > python_max_alloc_fraction:
        raise ValueError("python_alloc_fraction must not exceed python_max_alloc_fraction")
    if jvm_alloc_fraction + python_max_alloc_fraction > 1.0:
        raise ValueError(
            "jvm_alloc_fraction + python_max_alloc_fraction exceeds the device memory (> 1.0)"
        )
    if python_pool not in ("cupy", "rmm"):
        raise ValueError(f"python_pool must be 'cupy' or 'rmm', got {python_pool!r}")
    workers = concurrent_python_workers if concurrent_python_workers is not None else tasks_per_gpu
    if workers < 1:
        raise ValueError("concurrent_python_workers must be >= 1")
    conf = {
        "spark.plugins": "com.nvidia.spark.SQLPlugin",
        "spark.rapids.sql.enabled": "true",
        "spark.executor.resource.gpu.amount": str(executor_gpus),
        "spark.executor.resource.gpu.discoveryScript": discovery_script,
        "spark.task.resource.gpu.amount": _fraction(1.0 / tasks_per_gpu),
        "spark.rapids.sql.concurrentGpuTasks": str(tasks_per_gpu),
        "spark.rapids.memory.gpu.allocFraction": _fraction(jvm_alloc_fraction),
        "spark.rapids.memory.gpu.maxAllocFraction": _fraction(jvm_alloc_fraction),
        "spark.rapids.memory.gpu.minAllocFraction": "0",
        "spark.rapids.memory.pinnedPool.size": "2g",
        "spark.rapids.python.gpu.enabled": "true",
        "spark.rapids.python.concurrentPythonWorkers": str(workers),
        "spark.rapids.python.memory.gpu.pooling.enabled": str(python_pool == "rmm").lower(),
        "spark.rapids.python.memory.gpu.allocFraction": _fraction(python_alloc_fraction),
        "spark.rapids.python.memory.gpu.maxAllocFraction": _fraction(python_max_alloc_fraction),
        "spark.sql.execution.arrow.pyspark.enabled": "true",
        "spark.sql.execution.arrow.maxRecordsPerBatch": "1000000",
    }
    if python_pool == "cupy":
        conf["spark.executorEnv.CUPY_GPU_MEMORY_LIMIT"] = (
            _fraction(100.0 * python_max_alloc_fraction / workers) + "%"
        )
    if plugin_jar:
        conf["spark.jars"] = plugin_jar
        conf["spark.submit.pyFiles"] = plugin_jar
        conf["spark.executorEnv.PYTHONPATH"] = plugin_jar
    conf.update({k: str(v) for k, v in (extra or {}).items()})
    return conf


def _fraction(x: float) -> str:
    return f"{x:.6g}"


def task_gpu(resources: Mapping[str, Any] | None, visible: str | None = None) -> int | None:
    """The CUDA device ordinal (as this process numbers devices) of a task's GPU; ``None`` without one.

    ``resources`` is what ``TaskContext.get().resources()`` returns: resource name ->
    ``ResourceInformation`` (with ``.addresses``, a list of strings). The address is the GPU's
    index on the machine, as the discovery script reports it. ``visible`` is this process's
    ``CUDA_VISIBLE_DEVICES`` (default: read from the environment): when it is set, CUDA numbers
    only those devices, from 0, so the address is looked up in that list. The RAPIDS plugin sets
    it to the executor's single GPU for GPU-scheduled Python workers, so the task's device is then
    ordinal 0 whatever its machine index.
    """
    if not resources or "gpu" not in resources:
        return None
    addresses = list(getattr(resources["gpu"], "addresses", None) or [])
    if not addresses:
        return None
    address = str(addresses[0]).strip()
    if visible is None:
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    shown = [v.strip() for v in visible.split(",") if v.strip()] if visible else []
    if shown:
        if address in shown:
            return shown.index(address)
        if len(shown) == 1:
            return 0  # the process sees one GPU: the one Spark gave the executor (UUIDs, MIG)
        raise ValueError(
            f"the task's GPU {address!r} is not among CUDA_VISIBLE_DEVICES={visible!r}: "
            "the executor's discovery script and the worker's visible devices disagree"
        )
    try:
        return int(address)
    except ValueError as err:
        raise ValueError(f"GPU address {address!r} is not a device ordinal") from err


def current_resources() -> Mapping[str, Any] | None:
    """The running task's resource map (``None`` on the driver or outside a task)."""
    from pyspark import TaskContext

    ctx = TaskContext.get()
    return ctx.resources() if ctx is not None else None


def use_task_gpu(
    resources: Mapping[str, Any] | None = None,
    select=None,
    env: Mapping[str, str] | None = None,
    use_rmm=None,
) -> int | None:
    """Make the task's GPU the current CuPy device; the ordinal, or ``None`` when the task has none.

    ``resources`` defaults to the running task's, ``env`` to ``os.environ``. ``select`` (an
    ordinal -> None function, default ``cupy.cuda.Device(i).use()``) and ``use_rmm`` (a no-argument
    function, default :func:`cupy_on_rmm`) are replaceable for tests. When RAPIDS created an RMM
    pool for this Python worker (``RAPIDS_POOLED_MEM_ENABLED=true``, see ``rapids_conf(
    python_pool="rmm")``), CuPy's allocations are routed to it. Without CuPy nothing is selected
    and the planner keeps the engine on the CPU.
    """
    env = os.environ if env is None else env
    resources = current_resources() if resources is None else resources
    device = task_gpu(resources, env.get("CUDA_VISIBLE_DEVICES"))
    if device is None:
        return None
    if select is None:
        try:
            import cupy
        except ImportError:
            return None
        select = lambda i: cupy.cuda.Device(i).use()  # noqa: E731
    select(device)
    if str(env.get("RAPIDS_POOLED_MEM_ENABLED", "")).lower() == "true":
        (use_rmm or cupy_on_rmm)()
    return device


_ON_RMM = False


def cupy_on_rmm() -> bool:
    """Route CuPy's device allocations to RMM (the pool RAPIDS made for this worker), once.

    Returns whether CuPy now allocates through RMM (``False`` when ``rmm`` or CuPy is missing).
    """
    global _ON_RMM
    if not _ON_RMM:
        try:
            import cupy
            from rmm.allocators.cupy import rmm_cupy_allocator
        except ImportError:
            return False
        cupy.cuda.set_allocator(rmm_cupy_allocator)
        _ON_RMM = True
    return True
