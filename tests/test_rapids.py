"""rapids_conf content and the choice of a task's GPU from its (faked) resource map."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from cep_gpu.spark_udfs import rapids_conf, task_gpu, use_task_gpu


@dataclass
class FakeResource:
    """Stands in for pyspark.resource.ResourceInformation."""

    name: str
    addresses: list


def test_rapids_conf_enables_plugin_and_gpu_scheduling():
    conf = rapids_conf(tasks_per_gpu=4, discovery_script="/opt/gpus.sh")
    assert conf["spark.plugins"] == "com.nvidia.spark.SQLPlugin"
    assert conf["spark.executor.resource.gpu.amount"] == "1"
    assert conf["spark.task.resource.gpu.amount"] == "0.25"
    assert conf["spark.executor.resource.gpu.discoveryScript"] == "/opt/gpus.sh"
    assert conf["spark.rapids.sql.concurrentGpuTasks"] == "4"
    # the Python workers get the task's GPU and a memory pool of their own
    assert conf["spark.rapids.python.gpu.enabled"] == "true"
    assert conf["spark.rapids.python.memory.gpu.allocFraction"] == "0.3"
    assert conf["spark.rapids.python.memory.gpu.maxAllocFraction"] == "0.5"
    assert conf["spark.rapids.python.concurrentPythonWorkers"] == "4"
    assert conf["spark.rapids.memory.gpu.allocFraction"] == "0.3"
    assert conf["spark.sql.execution.arrow.pyspark.enabled"] == "true"
    assert all(isinstance(v, str) for v in conf.values())


def test_rapids_conf_jar_and_overrides():
    conf = rapids_conf(plugin_jar="/jars/rapids-4-spark.jar", extra={"spark.rapids.sql.enabled": False})
    assert conf["spark.jars"] == "/jars/rapids-4-spark.jar"
    assert conf["spark.executorEnv.PYTHONPATH"] == "/jars/rapids-4-spark.jar"
    assert conf["spark.rapids.sql.enabled"] == "False"


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"tasks_per_gpu": 0}, ">= 1"),
        ({"python_alloc_fraction": 0.0}, "python_alloc_fraction"),
        ({"python_alloc_fraction": 0.6, "python_max_alloc_fraction": 0.5}, "must not exceed"),
        ({"jvm_alloc_fraction": 0.7, "python_max_alloc_fraction": 0.5}, "exceeds the device memory"),
    ],
)
def test_rapids_conf_rejects_bad_fractions(kwargs, message):
    with pytest.raises(ValueError, match=message):
        rapids_conf(**kwargs)


def test_task_gpu_from_resource_map():
    assert task_gpu({"gpu": FakeResource("gpu", ["3"])}) == 3
    assert task_gpu({"gpu": FakeResource("gpu", ["1", "2"])}) == 1
    assert task_gpu({"fpga": FakeResource("fpga", ["0"])}) is None
    assert task_gpu({}) is None
    assert task_gpu(None) is None
    assert task_gpu({"gpu": FakeResource("gpu", [])}) is None
    with pytest.raises(ValueError, match="not a device ordinal"):
        task_gpu({"gpu": FakeResource("gpu", ["gpu-uuid-x"])})


def test_use_task_gpu_selects_the_device():
    picked = []
    assert use_task_gpu({"gpu": FakeResource("gpu", ["2"])}, select=picked.append) == 2
    assert picked == [2]
    assert use_task_gpu({"cpu": FakeResource("cpu", ["0"])}, select=picked.append) is None
    assert picked == [2]


def test_use_task_gpu_outside_a_task_is_a_no_op():
    # on the driver there is no TaskContext: nothing is selected, the engine stays on the CPU
    pytest.importorskip("pyspark")
    assert use_task_gpu(select=lambda i: pytest.fail("no GPU should be selected")) is None
