"""Spark pipeline of cep-gpu: exact batch detection over any partitioning, stateful streaming, and
the configuration of RAPIDS-enabled (GPU) executors.

    from cep_gpu.spark_udfs import detect_spark, detect_stream, rapids_conf
"""

from __future__ import annotations

from .batch import detect_spark, plan_job
from .rapids import rapids_conf, task_gpu, use_task_gpu

__all__ = ["detect_spark", "detect_stream", "plan_job", "rapids_conf", "task_gpu", "use_task_gpu"]


def __getattr__(name: str):
    if name == "detect_stream":  # streaming pulls in more of pyspark; import on first use
        from .stream import detect_stream

        return detect_stream
    raise AttributeError(f"module 'cep_gpu.spark_udfs' has no attribute {name!r}")
