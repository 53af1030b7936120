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
    # default: CuPy's pool, capped per worker at its share of the Python fraction (0.5 / 4)
    assert conf["spark.rapids.python.memory.gpu.pooling.enabled"] == "false"
    assert conf["spark.executorEnv.CUPY_GPU_MEMORY_LIMIT"] == "12.5%"
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


def test_rapids_conf_rmm_pool_for_python_workers():
    conf = rapids_conf(python_pool="rmm", python_alloc_fraction=0.2, python_max_alloc_fraction=0.4,
                       concurrent_python_workers=3)
    assert conf["spark.rapids.python.memory.gpu.pooling.enabled"] == "true"
    assert conf["spark.rapids.python.memory.gpu.allocFraction"] == "0.2"
    assert conf["spark.rapids.python.memory.gpu.maxAllocFraction"] == "0.4"
    assert conf["spark.rapids.python.concurrentPythonWorkers"] == "3"
    assert "spark.executorEnv.CUPY_GPU_MEMORY_LIMIT" not in conf


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"python_pool": "arena"}, "python_pool"),
        ({"concurrent_python_workers": 0}, "concurrent_python_workers"),
        ({"tasks_per_gpu": 0}, ">= 1"),
        ({"python_alloc_fraction": 0.0}, "python_alloc_fraction"),
        ({"python_alloc_fraction": 0.6, "python_max_alloc_fraction": 0.5}, "must not exceed"),
        ({"jvm_alloc_fraction": 0.7, "python_max_alloc_fraction": 0.5}, "exceeds the device memory"),
    ],
)
def test_rapids_conf_rejects_bad_fractions(kwargs, message):
    with pytest.raises(ValueError, match=message):
        rapids_conf(**kwargs)


def test_task_gpu_from_resource_map(monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert task_gpu({"gpu": FakeResource("gpu", ["3"])}) == 3
    assert task_gpu({"gpu": FakeResource("gpu", ["1", "2"])}) == 1
    assert task_gpu({"fpga": FakeResource("fpga", ["0"])}) is None
    assert task_gpu({}) is None
    assert task_gpu(None) is None
    assert task_gpu({"gpu": FakeResource("gpu", [])}) is None
    with pytest.raises(ValueError, match="not a device ordinal"):
        task_gpu({"gpu": FakeResource("gpu", ["gpu-uuid-x"])})


def test_task_gpu_through_cuda_visible_devices(monkeypatch):
    # CUDA numbers only the visible devices, from 0: machine GPU 3 of "1,3" is ordinal 1
    gpu3 = {"gpu": FakeResource("gpu", ["3"])}
    assert task_gpu(gpu3, visible="1,3") == 1
    # RAPIDS shows a GPU-scheduled Python worker just the executor's GPU: ordinal 0
    assert task_gpu(gpu3, visible="3") == 0
    assert task_gpu(gpu3, visible="GPU-8f0c2a") == 0
    with pytest.raises(ValueError, match="not among CUDA_VISIBLE_DEVICES"):
        task_gpu(gpu3, visible="0,1")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,3")
    assert task_gpu(gpu3) == 1
    picked = []
    assert use_task_gpu(gpu3, select=picked.append) == 1 and picked == [1]


def test_use_task_gpu_selects_the_device():
    picked, rmm = [], []
    env = {}
    assert use_task_gpu({"gpu": FakeResource("gpu", ["2"])}, select=picked.append, env=env) == 2
    assert picked == [2]
    assert use_task_gpu({"cpu": FakeResource("cpu", ["0"])}, select=picked.append, env=env) is None
    assert picked == [2]
    # a worker with a RAPIDS RMM pool: CuPy's allocations go to it
    env = {"RAPIDS_POOLED_MEM_ENABLED": "true", "CUDA_VISIBLE_DEVICES": "2"}
    gpu2 = {"gpu": FakeResource("gpu", ["2"])}
    assert use_task_gpu(gpu2, select=picked.append, env=env, use_rmm=lambda: rmm.append(1)) == 0
    assert picked == [2, 0] and rmm == [1]


def test_task_gpu_comes_from_the_task_context(monkeypatch):
    # inside a UDF: TaskContext resources -> the CuPy device, before the engine runs
    import sys
    import types

    import pyarrow as pa

    pytest.importorskip("pyspark")
    from cep_gpu.spark_udfs import rapids, task

    used = []
    fake_cupy = types.ModuleType("cupy")
    fake_cupy.cuda = types.SimpleNamespace(
        Device=lambda i: types.SimpleNamespace(use=lambda: used.append(i))
    )
    monkeypatch.setitem(sys.modules, "cupy", fake_cupy)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.delenv("RAPIDS_POOLED_MEM_ENABLED", raising=False)
    monkeypatch.setattr(rapids, "current_resources", lambda: {"gpu": FakeResource("gpu", ["1"])})
    table = pa.table({"type": ["A", "B"], "ts": [1, 2], "id": [0, 1], "x": [5, 5]})
    rule = "define AB(x: int) from B(x=$x) and each A(x=$x) within 5 s from B where x=B.x"
    import cep_gpu

    schema = pa.schema([("rule", pa.string()), ("ts", pa.int64()), ("ids", pa.list_(pa.int64())),
                        ("x", pa.int64())])
    out = task.run_group(table, cep_gpu.parse_rules(rule), "reference", "s", schema)
    assert used == [1]
    assert out.to_pylist() == [{"rule": "AB", "ts": 2, "ids": [1, 0], "x": 5}]


def test_use_task_gpu_outside_a_task_is_a_no_op():
    # on the driver there is no TaskContext: nothing is selected, the engine stays on the CPU
    pytest.importorskip("pyspark")
    assert use_task_gpu(select=lambda i: pytest.fail("no GPU should be selected")) is None


def test_docs_spark_submit_example_is_rapids_conf():
    # docs/spark.md: "Every --conf above (and --jars, --py-files) is what rapids_conf(...) returns"
    import re
    import shlex
    from pathlib import Path

    text = (Path(__file__).resolve().parents[1] / "docs" / "spark.md").read_text()
    block = next(b for b in re.findall(r"```bash\n(.*?)```", text, re.S) if "spark-submit" in b)
    jar = re.search(r"^RAPIDS_JAR=(\S+)", block, re.M).group(1)
    words = shlex.split(block.replace("\\\n", " ").replace("$RAPIDS_JAR", jar).replace('"', ""))
    words = words[words.index("spark-submit"):]
    given = {}
    for flag, value in zip(words, words[1:]):
        if flag == "--conf":
            key, _, val = value.partition("=")
            given[key] = val
        elif flag == "--jars":
            given["spark.jars"] = value
        elif flag == "--py-files":
            given["spark.submit.pyFiles"] = value
    want = rapids_conf(tasks_per_gpu=2, plugin_jar=jar)
    assert {k: v for k, v in given.items() if k in want} == want
    assert "examples/museum_spark.py" in words
