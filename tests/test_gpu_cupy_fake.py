"""``CupyRuntime`` (the real launch path of ``backend="gpu"``) run on the host through a fake CuPy
whose streams are asynchronous (tests/fake_cupy.py), issue 14 part 2.

The CuPy code has never run on a device. Here it runs unchanged: NVRTC's text compiled (by the
concurrent host build, with no include path), copies and kernels queued on streams and run only
when the runtime synchronises, one memory and set of streams per device. Results equal the
reference: every read of a count or result is ordered after the kernel that wrote it, every copy
into a device column before the kernels that read it, and every operation happens on its runtime's
device whatever device is current. Negative controls show the fake would catch a launch off the
runtime's stream and a launch on the wrong device.
"""

from __future__ import annotations

import itertools
import subprocess
import sys
from pathlib import Path

import fake_cupy
import numpy as np
import pytest
from cep_gpu.kernels import gpu as gpu_mod
from cep_gpu.kernels.gpu import (
    NVRTC_OPTIONS,
    CupyRuntime,
    GpuCombiner,
    GpuDevicesBackend,
    current_device,
)
from hypothesis import HealthCheck, given, settings
from strategies import rules_and_streams
from test_gpu_host import HIERARCHY, SEQ3, _joined, _publish_in_chunks, _sorted, same, seq3_events

import cep_gpu
from cep_gpu.backends import register
from cep_gpu.cdp import CDPBackend
from cep_gpu.events import EventTable
from cep_gpu.reference import ReferenceBackend

_NAMES = itertools.count()
ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def cupy(monkeypatch):
    return fake_cupy.install(monkeypatch)


def fake_gpu_backend(**combiner) -> str:
    """A new backend name: ``GpuDevicesBackend`` over ``CupyRuntime`` on the fake CuPy."""
    name = f"gpu-fake-{next(_NAMES)}"
    backend = GpuDevicesBackend(lambda d: GpuCombiner(CupyRuntime(d), "gpu", **combiner), current_device, name)
    register(name, lambda: backend)
    return name


@settings(max_examples=12, deadline=None, suppress_health_check=list(HealthCheck))
@given(case=rules_and_streams())
def test_cupy_runtime_on_async_streams_equals_reference(cupy, case):
    name = fake_gpu_backend(initial_capacity=1)  # every `each` step overflows and relaunches
    text, events = case
    same(cep_gpu.detect(events, text, backend=name), cep_gpu.detect(events, text, backend="reference"))


def test_nvrtc_gets_the_self_contained_text_and_options(cupy):
    name = fake_gpu_backend()
    events = seq3_events(300)
    text = SEQ3.format(p="each", w=30)
    same(cep_gpu.detect(events, text, backend=name, time_unit="ms"),
         cep_gpu.detect(events, text, backend="reference", time_unit="ms"))
    assert cupy.state.options and all(o == NVRTC_OPTIONS for o in cupy.state.options)
    assert all('#include "' not in src.split("#line 1")[0] for src in cupy.state.sources)
    assert cupy.state.launches > 0


@pytest.mark.parametrize("rules", ["seq3", "hierarchy"])
def test_streaming_device_columns_through_async_copies(cupy, rules):
    """Appends into device columns (asynchronous copies from pinned buffers) and device-to-device
    moves, every column checked against its host array after each update (a download that must
    see every queued copy)."""
    text = SEQ3.format(p="each", w=40) if rules == "seq3" else HIERARCHY
    events = seq3_events(700, seed=5)
    name = fake_gpu_backend(check_columns=True)
    parts, _ = _publish_in_chunks(cep_gpu.Engine(text, backend=name, time_unit="ms"), events)
    same(_joined(parts), cep_gpu.detect(events, text, backend="reference", time_unit="ms"))
    st = cep_gpu.backends.get_backend(name).stats()
    assert st["column_appends"] > 0 and st["column_rows_reused"] > 0


def test_long_stream_compacts_columns_on_the_device(cupy):
    rng = np.random.default_rng(8)
    n = 1600
    ts = np.concatenate([np.sort(rng.integers(0, 30, 800)), 30 + np.arange(n - 800)])
    import pandas as pd

    events = pd.DataFrame({"type": rng.choice(["A", "B", "C"], n), "ts": ts, "k": rng.integers(0, 4, n)})
    text = SEQ3.format(p="last", w=10)
    name = fake_gpu_backend(check_columns=True)
    eng = cep_gpu.Engine(text, backend=name, time_unit="ms")
    parts = [eng.publish(events.iloc[k:k + 6]) for k in range(0, n, 6)] + [eng.flush()]
    same(_joined(parts), cep_gpu.detect(events, text, backend="reference", time_unit="ms"))
    assert cep_gpu.backends.get_backend(name).stats()["column_compactions"] > 0
    assert cupy.state.device_copies > 0  # the moves went through memcpyAsync on the stream


def test_each_device_has_its_own_runtime_and_a_runtime_enters_its_device(cupy):
    table = EventTable.from_pandas(seq3_events(400, seed=3), time_unit="ms")
    rule = cep_gpu.parse_rule(SEQ3.format(p="each", w=30))
    ref = _sorted(ReferenceBackend().match(rule, table).rows)
    backend = GpuDevicesBackend(lambda d: GpuCombiner(CupyRuntime(d), "gpu"), current_device, "gpu-fake-devices")
    for dev in (0, 1, 0):
        cupy.cuda.Device(dev).use()
        assert np.array_equal(_sorted(backend.match(rule, table).rows), ref)
        assert backend.combiner.runtime.device.id == dev
    assert backend.devices == [0, 1]
    # a runtime made for device 0 works while device 1 is current
    zero = CDPBackend(GpuCombiner(CupyRuntime(0), "gpu"), "gpu")
    cupy.cuda.Device(1).use()
    assert np.array_equal(_sorted(zero.match(rule, table).rows), ref)


# -- negative controls: the fake catches what it should ---------------------------------------------


def test_fake_catches_a_launch_off_the_runtime_stream(cupy, monkeypatch):
    """Launched on the legacy default stream, which the runtime's non-blocking stream does not
    wait for, the kernel has not run when the count is read: results go missing."""

    def launch(self, name, n_threads, *args):
        conv = tuple(np.int64(a) if k == "i" else a for k, a in zip(gpu_mod.KERNELS[name], args))
        with self._device:  # no `with self._stream`
            self._funcs[name]((gpu_mod.launch_grid(n_threads, self._block, self._max_blocks),), (self._block,), conv)

    monkeypatch.setattr(gpu_mod.CupyModule, "launch", launch)
    table = EventTable.from_pandas(seq3_events(300, seed=4), time_unit="ms")
    rule = cep_gpu.parse_rule(SEQ3.format(p="each", w=30))
    got = CDPBackend(GpuCombiner(CupyRuntime(0), "gpu"), "gpu").match(rule, table)
    assert len(ReferenceBackend().match(rule, table)) > 0 and len(got) == 0


def test_fake_catches_a_launch_on_the_wrong_device(cupy, monkeypatch):
    def launch(self, name, n_threads, *args):
        conv = tuple(np.int64(a) if k == "i" else a for k, a in zip(gpu_mod.KERNELS[name], args))
        self._funcs[name]((1,), (self._block,), conv)  # neither device nor stream entered

    monkeypatch.setattr(gpu_mod.CupyModule, "launch", launch)
    table = EventTable.from_pandas(seq3_events(200, seed=4), time_unit="ms")
    rule = cep_gpu.parse_rule(SEQ3.format(p="each", w=30))
    backend = CDPBackend(GpuCombiner(CupyRuntime(0), "gpu"), "gpu")
    cupy.cuda.Device(1).use()
    with pytest.raises(fake_cupy.CudaError, match="another device"):
        backend.match(rule, table)


def test_fake_catches_a_moved_column_source_released_before_the_copy_ran(cupy, monkeypatch):
    """A device-to-device move whose source buffer is dropped at once (as the column's old buffer
    is) must keep it alive until the stream runs the copy; without that, the moved rows are junk
    (the memory went back to the allocator), which the column check sees."""

    def copy_within(self, dst, dst_offset, src, src_offset, n):
        if n > 0:
            size = dst.dtype.itemsize
            with self.device:
                self.cupy.cuda.runtime.memcpyAsync(
                    int(dst.data.ptr) + int(dst_offset) * size, int(src.data.ptr) + int(src_offset) * size,
                    int(n) * size, self.cupy.cuda.runtime.memcpyDeviceToDevice, self.stream.ptr)

    monkeypatch.setattr(CupyRuntime, "copy_within", copy_within)
    with pytest.raises(AssertionError, match="differs from its host array"):
        test_long_stream_compacts_columns_on_the_device(cupy)


def test_device_out_of_memory_splits_the_batch(cupy):
    """CuPy's OutOfMemoryError becomes a batch split in the combiner, through the real runtime."""
    table = EventTable.from_pandas(seq3_events(300, seed=1), time_unit="ms")
    rule = cep_gpu.parse_rule(SEQ3.format(p="each", w=30))
    ref = _sorted(ReferenceBackend().match(rule, table).rows)
    import gc

    base = cupy.state.peak = cupy.state.used
    whole = CDPBackend(GpuCombiner(CupyRuntime(0), "gpu", initial_capacity=1), "gpu")
    whole.match(rule, table)
    need = cupy.state.peak - base
    whole.combiner.release()
    del whole
    gc.collect()
    cupy.state.limit = cupy.state.used + need * 2 // 3
    tight = CDPBackend(GpuCombiner(CupyRuntime(0), "gpu", initial_capacity=1), "gpu")
    assert np.array_equal(_sorted(tight.match(rule, table).rows), ref)
    assert tight.combiner.stats.splits >= 1


# -- the GPU-only scripts and tests, run once against the fake --------------------------------------

_RUN_FAKE = """
import runpy, sys
sys.path.insert(0, {tests!r})
import fake_cupy
fake_cupy.install_into(sys.modules)
what, *args = sys.argv[1:]
if what == "pytest":
    import pytest
    sys.exit(pytest.main(args))
sys.argv = [what, *args]
runpy.run_path(what, run_name="__main__")
"""


def _run_fake(*args: str) -> subprocess.CompletedProcess:
    code = _RUN_FAKE.format(tests=str(ROOT / "tests"))
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True,
                          timeout=600, cwd=ROOT)


def test_gpu_only_tests_and_scripts_run_against_the_fake():
    """The device tests, the sanitizer's run, the seq3 GPU sweep and the profile script also run
    against the fake CuPy, so that a GPU run fails only on what a GPU changes, not on a broken
    test or script. (The figures of such a run mean nothing.)"""
    proc = _run_fake("pytest", "-p", "no:cacheprovider", "tests/test_gpu_device.py", "-k", "not equal_reference and not grid_stride")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "skipped" not in proc.stdout and "passed" in proc.stdout
    proc = _run_fake("bench/gpu_sanitize_run.py", "--events", "800")
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    assert proc.stdout.count("ok: ") == 5
    proc = _run_fake("bench/seq3_gpu.py", "--events", "4000", "--windows", "100", "--policies", "last", "--sample", "5")
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    assert "fake-cupy device" in proc.stdout and proc.stdout.strip().splitlines()[-1].startswith("last")
    proc = _run_fake("bench/gpu_profile.py", "--events", "3000", "--window", "200", "--terminator-window", "200",
                     "--terminators", "3", "--top", "2")
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    assert proc.stdout.count("floor ") == 3 and "== per terminator last, window 200 ms, gpu:" in proc.stdout
