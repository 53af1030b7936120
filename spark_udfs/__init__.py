"""Spark pipeline of cep-gpu: exact batch detection over any partitioning, stateful streaming, and
the configuration of RAPIDS-enabled (GPU) executors.

    from cep_gpu.spark_udfs import detect_spark, detect_stream, engine_errors, rapids_conf

``engine_errors()`` re-raises a cep_gpu error raised inside a Spark task as that error, at the
action that ran the task (``with engine_errors(): out.toPandas()``).
"""

from __future__ import annotations

from .failures import engine_errors
from .rapids import rapids_conf, task_gpu, use_task_gpu

__all__ = ["detect_spark", "detect_stream", "engine_errors", "execute_plan_spark", "plan_job", "rapids_conf", "task_gpu",
           "use_task_gpu"]

# imported on first use: they pull in pyspark, which `cep-gpu --help` and `cep-gpu run` (whose
# parser lists the spark subcommand) should not pay for
_LAZY = {"detect_spark": "batch", "plan_job": "batch", "detect_stream": "stream",
         "execute_plan_spark": "decopa"}


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
    raise AttributeError(f"module 'cep_gpu.spark_udfs' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
