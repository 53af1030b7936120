"""RAPIDS-enabled executors: the Spark configuration, and which GPU a task's engine uses.

The configuration keys follow the RAPIDS Accelerator for Apache Spark documentation (plugin,
GPU scheduling, RMM pool of the JVM, and "GPU support for Pandas UDF", which lets the Python
workers share the executor's GPU with a pool of their own).
"""

from __future__ import annotations

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
    plugin_jar: str | None = None,
    extra: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """Spark configuration for executors with GPUs that run the cep-gpu pandas UDFs.

    * the RAPIDS SQL plugin (``spark.plugins``), so that Spark's own operators (scans, shuffles,
      the range partitioning of time slices) run on the GPU too;
    * GPU scheduling: ``executor_gpus`` GPUs per executor (RAPIDS supports one), and
      ``1/tasks_per_gpu`` of a GPU per task, so ``tasks_per_gpu`` engine tasks share a device;
    * the resource discovery script that reports the executor's GPU addresses;
    * GPU memory: the JVM's RMM pool takes ``jvm_alloc_fraction`` of the device; the Python
      workers (where the CDP kernels run through CuPy) get a pool of their own between
      ``python_alloc_fraction`` and ``python_max_alloc_fraction``, and are pinned to the task's GPU
      (``spark.rapids.python.gpu.enabled``);
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
        "spark.rapids.python.memory.gpu.pooling.enabled": "true",
        "spark.rapids.python.memory.gpu.allocFraction": _fraction(python_alloc_fraction),
        "spark.rapids.python.memory.gpu.maxAllocFraction": _fraction(python_max_alloc_fraction),
        "spark.rapids.python.concurrentPythonWorkers": str(
            concurrent_python_workers if concurrent_python_workers is not None else tasks_per_gpu
        ),
        "spark.sql.execution.arrow.pyspark.enabled": "true",
        "spark.sql.execution.arrow.maxRecordsPerBatch": "1000000",
    }
    if plugin_jar:
        conf["spark.jars"] = plugin_jar
        conf["spark.submit.pyFiles"] = plugin_jar
        conf["spark.executorEnv.PYTHONPATH"] = plugin_jar
    conf.update({k: str(v) for k, v in (extra or {}).items()})
    return conf


def _fraction(x: float) -> str:
    return f"{x:.6g}"


def task_gpu(resources: Mapping[str, Any] | None) -> int | None:
    """The CUDA device ordinal assigned to a task, from its resource map; ``None`` without one.

    ``resources`` is what ``TaskContext.get().resources()`` returns: resource name ->
    ``ResourceInformation`` (with ``.addresses``, a list of strings).
    """
    if not resources or "gpu" not in resources:
        return None
    addresses = list(getattr(resources["gpu"], "addresses", None) or [])
    if not addresses:
        return None
    try:
        return int(addresses[0])
    except ValueError as err:
        raise ValueError(f"GPU address {addresses[0]!r} is not a device ordinal") from err


def current_resources() -> Mapping[str, Any] | None:
    """The running task's resource map (``None`` on the driver or outside a task)."""
    from pyspark import TaskContext

    ctx = TaskContext.get()
    return ctx.resources() if ctx is not None else None


def use_task_gpu(resources: Mapping[str, Any] | None = None, select=None) -> int | None:
    """Make the task's GPU the current CuPy device; the ordinal, or ``None`` when the task has none.

    ``resources`` defaults to the running task's; ``select`` (an ordinal -> None function,
    default ``cupy.cuda.Device(i).use()``) is replaceable for tests. Without CuPy nothing is
    selected and the planner keeps the engine on the CPU.
    """
    device = task_gpu(current_resources() if resources is None else resources)
    if device is None:
        return None
    if select is None:
        try:
            import cupy
        except ImportError:
            return None
        select = lambda i: cupy.cuda.Device(i).use()  # noqa: E731
    select(device)
    return device
