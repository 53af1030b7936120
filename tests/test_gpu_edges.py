"""Edge cases of the GPU path without a GPU: the host build of the kernels (``gpu-host``) and the
missing-CuPy paths of ``backend="gpu"`` / ``"auto"``, each compared against the reference matcher."""

from __future__ import annotations

import importlib.abc
import sys
import traceback

import numpy as np
import pandas as pd
import pytest

import cep_gpu
from cep_gpu.backends import get_backend, gpu_usable
from cep_gpu.errors import BackendUnavailableError

EVENTS = pd.DataFrame({"type": list("ABC"), "ts": [1.0, 2.0, 3.0]})
SEQ3 = "define R pattern SEQ(A a, B b, C c) within 10 s select each"


class _BrokenCupy(importlib.abc.MetaPathFinder):
    """``import cupy`` fails the way a CuPy with missing or mismatched CUDA libraries can: not
    with ImportError but with the loader's own error."""

    def __init__(self, exc: BaseException):
        self.exc = exc

    def find_spec(self, name, path=None, target=None):
        if name == "cupy" or name.startswith("cupy."):
            raise self.exc
        return None


@pytest.fixture(
    params=[
        OSError("libcudart.so.12: cannot open shared object file"),
        RuntimeError("CUDA init"),
        ImportError("CuPy failed to load libnvrtc.so.12\nlong details"),
    ]
)
def broken_cupy(request, monkeypatch):
    monkeypatch.delitem(sys.modules, "cupy", raising=False)
    monkeypatch.setattr(sys, "meta_path", [_BrokenCupy(request.param), *sys.meta_path])
    return request.param


def test_gpu_backend_with_a_broken_cupy_names_the_problem(broken_cupy):
    with pytest.raises(BackendUnavailableError, match="CuPy") as info:
        get_backend("gpu")
    msg = str(info.value)
    assert str(broken_cupy).splitlines()[0] in msg and "backend='cpu'" in msg
    assert "not installed" not in msg  # it is installed, just broken
    # one clear error: no chained traceback from inside CuPy's import
    text = "".join(traceback.format_exception(info.value))
    assert "find_spec" not in text and "above exception" not in text


def test_auto_falls_back_to_the_cpu_with_a_broken_cupy(broken_cupy):
    assert gpu_usable() is False
    ref = cep_gpu.detect(EVENTS, SEQ3, backend="reference")
    out = cep_gpu.detect(EVENTS, SEQ3, backend="auto")
    assert [tuple(i) for i in out["ids"]] == [tuple(i) for i in ref["ids"]] == [(0, 1, 2)]


def test_gpu_backend_with_an_unusable_driver_is_one_clear_error(monkeypatch):
    import fake_cupy

    cupy = fake_cupy.install(monkeypatch)

    def no_driver():
        raise RuntimeError("cudaErrorInsufficientDriver: CUDA driver version is insufficient")

    monkeypatch.setattr(cupy.cuda.runtime, "getDeviceCount", no_driver)
    with pytest.raises(BackendUnavailableError, match="driver is not usable.*insufficient") as info:
        get_backend("gpu")
    assert "no_driver" not in "".join(traceback.format_exception(info.value))


# -- inputs that stress the host-built kernels: all equal to the reference ---------------------------

_BIG = np.array(
    [-(2**63) + 1, -(2**63) + 5, -(2**63) + 6, 2**63 - 3, 2**63 - 2, 2**63 - 1], np.int64
)
_RNG = np.random.default_rng(0)
_MANY = pd.DataFrame({"type": _RNG.choice(list("ABC"), 200), "ts": np.arange(200.0)})
_TIES = pd.DataFrame(
    {"type": list("AAABBBC"), "ts": [1.0, 1, 1, 2, 2, 2, 3], "x": [1, 2, 3, 1, 2, 3, 0]}
)
_CASES = {
    # output far beyond the first buffer of one row: overflow -> regrow -> relaunch, never truncated
    "big-output": (_MANY, SEQ3.replace("10 s", "1000 s"), "s"),
    "terminators-without-candidates": (
        pd.DataFrame({"type": list("CCC"), "ts": [1.0, 2, 3]}),
        SEQ3,
        "s",
    ),
    "one-type-only": (pd.DataFrame({"type": ["A"] * 30, "ts": np.arange(30.0)}), SEQ3, "s"),
    "empty": (
        pd.DataFrame({"type": pd.Series([], dtype=object), "ts": pd.Series([], dtype=float)}),
        SEQ3,
        "s",
    ),
    "single-event": (pd.DataFrame({"type": ["C"], "ts": [1.0]}), SEQ3, "s"),
    "int64-ends": (
        pd.DataFrame({"type": list("ABCABC"), "ts": _BIG}),
        "define R from C() as c and last B() as b within 9000000000 s from c and each A() within 1 s from b",
        "ns",
    ),
    "ties-last": (
        _TIES,
        "define R from C() as c and last B() as b within 9 s from c and last A() within 9 s from b",
        "s",
    ),
    "ties-first": (
        _TIES,
        "define R from C() as c and first B() as b within 9 s from c and first A() within 9 s from b",
        "s",
    ),
}


@pytest.mark.parametrize("name", sorted(_CASES))
def test_host_kernels_equal_reference_on_edge_inputs(name):
    from test_gpu_host import same

    events, rule, unit = _CASES[name]
    ref = cep_gpu.detect(events, rule, backend="reference", time_unit=unit)
    same(cep_gpu.detect(events, rule, backend="gpu-host-tiny", time_unit=unit), ref)
    same(cep_gpu.detect(events, rule, backend="gpu-host-threads", time_unit=unit), ref)
