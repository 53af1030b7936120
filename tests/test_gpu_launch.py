"""What differs on real hardware, checked on the host where a host test can show it (issue 14,
part 2): the self-contained NVRTC source and its compile key, launch grids and 64-bit thread and
pair indices past 2^32, and one combiner per CUDA device for Spark workers that change GPUs.
docs/gpu.md ("What is proven where") lists what only a device can prove.
"""

from __future__ import annotations

import ctypes
import re
import shutil
import subprocess

import numpy as np
import pytest
from cep_gpu.kernels.gpu import (
    DEVICE_BLOCK,
    DEVICE_MAX_BLOCKS,
    NVRTC_OPTIONS,
    GpuDevicesBackend,
    compile_key,
    cuda_dir,
    launch_grid,
    nvrtc_source,
    sources_digest,
)
from cep_gpu.kernels.host import MODE_FLAGS, build, host_combiner
from test_gpu_host import SEQ3, _extended, _sorted, seq3_events

import cep_gpu
from cep_gpu.codegen import lower
from cep_gpu.codegen.cuda import generate
from cep_gpu.reference import ReferenceBackend

NVCC = shutil.which("nvcc")
GXX = shutil.which("g++")
RULE = "define R pattern SEQ(A a, NOT(D z), B b) where a.x < b.x and z.x = a.x within 5 s select last"


def _rule_source() -> str:
    return generate(lower(cep_gpu.parse_rule(RULE)), {"x": "int"}).source


# -- the source NVRTC compiles ----------------------------------------------------------------------


def test_nvrtc_source_writes_out_every_cuda_header_once():
    text = nvrtc_source(_rule_source())
    # nothing left for an -I path (or a stale cache) to supply
    assert not re.search(r'^\s*#\s*include\s*"', text, re.MULTILINE)
    assert sources_digest() in text.splitlines()[0]
    for name in ("portable.cuh", "cdp.cuh", "cdp.cu"):
        assert text.count(f'#line 1 "{name}"') == 1
        body = (cuda_dir() / name).read_text()
        assert body.strip().splitlines()[-1] in text
    # a rule header was given: the hand-written example rule is written out, but guarded off
    assert text.count("#define CEP_RULE_DEFINED 1") == 2


def test_nvrtc_source_changes_with_any_cuda_file(tmp_path):
    """A kernel-header edit must change the text (and so CuPy's on-disk cache key) even when the
    rule header is the same."""
    copy = tmp_path / "cuda"
    shutil.copytree(cuda_dir(), copy)
    src = _rule_source()
    before = nvrtc_source(src, copy)
    assert before == nvrtc_source(src)
    (copy / "cdp.cuh").write_text((copy / "cdp.cuh").read_text() + "\n// edited\n")
    after = nvrtc_source(src, copy)
    assert after != before and "// edited" in after
    versions = ("cupy 13.3.0", "nvrtc (12, 4)", "driver 12040")
    assert compile_key(after, "90", NVRTC_OPTIONS, versions) != compile_key(before, "90", NVRTC_OPTIONS, versions)


def test_nvrtc_source_names_a_missing_header(tmp_path):
    with pytest.raises(FileNotFoundError, match='nothing.cuh'):
        nvrtc_source('#include "nothing.cuh"\n')


def test_compile_key_covers_device_options_and_versions():
    src = nvrtc_source(_rule_source())
    base = ("90", NVRTC_OPTIONS, ("cupy 13.3.0", "nvrtc (12, 4)", "driver 12040"))
    key = compile_key(src, *base)
    assert key == compile_key(src, *base)
    assert compile_key(src + " ", *base) != key
    assert compile_key(src, "80", *base[1:]) != key
    assert compile_key(src, base[0], (*NVRTC_OPTIONS, "-G"), base[2]) != key
    assert compile_key(src, base[0], base[1], ("cupy 13.3.0", "nvrtc (12, 6)", "driver 12040")) != key
    assert compile_key(src, base[0], base[1], ("cupy 14.0.0", "nvrtc (12, 4)", "driver 12040")) != key
    assert not any("fast-math" in o or "fmad" in o for o in NVRTC_OPTIONS)  # NaN semantics rely on IEEE


@pytest.mark.skipif(NVCC is None, reason="nvcc is not installed: device compile of the NVRTC text not run")
def test_nvcc_compiles_the_nvrtc_text_without_include_paths(tmp_path):
    unit = tmp_path / "unit.cu"
    unit.write_text(nvrtc_source(_rule_source()))
    out = tmp_path / "unit.fatbin"
    proc = subprocess.run(
        [NVCC, "-x", "cu", "-std=c++17", "-Werror", "all-warnings", "-gencode", "arch=compute_80,code=sm_80",
         "-fatbin", str(unit), "-o", str(out)],
        capture_output=True, text=True, cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    assert out.stat().st_size > 0


# -- grids and 64-bit indices ----------------------------------------------------------------------


def test_launch_grid_is_bounded_and_covers_small_launches():
    assert launch_grid(0, 256, 65535) == 1
    assert launch_grid(1, 256, 65535) == 1
    assert launch_grid(257, 256, 65535) == 2
    assert launch_grid(256 * 65535, 256, 65535) == 65535
    # more pairs than 2^32: the grid stays within limits, the grid-stride loop takes the rest
    assert launch_grid(3 * 2**32, DEVICE_BLOCK, DEVICE_MAX_BLOCKS) == DEVICE_MAX_BLOCKS
    assert DEVICE_MAX_BLOCKS <= 2**31 - 1 and DEVICE_BLOCK <= 1024


BIG = r"""
#include "cdp.cu"
// One kernel thread placed far out in a huge grid: thread id = bx * bdim + tx (past 2^32).
extern "C" void one_thread_each(unsigned bx, unsigned bdim, unsigned gdim, unsigned tx,
                                const cep_u64* tab, const cep_i64* scal, const cep_i64* seq_in,
                                cep_i64 n_in, const cep_i64* col_rows, const cep_i64* lo,
                                const cep_i64* offsets, cep_i64 total, cep_i64* seq_out,
                                cep_i64* keys, cep_u64* count, cep_i64 cap) {
    gridDim = cep_dim3{gdim, 1, 1};
    blockDim = cep_dim3{bdim, 1, 1};
    blockIdx = cep_dim3{bx, 0, 0};
    threadIdx = cep_dim3{tx, 0, 0};
    cdp_each_body<CEP_NPRED>(tab, scal, 1, 1, seq_in, n_in, col_rows, lo, offsets, total, seq_out,
                             keys, count, cap);
}
"""


def test_pair_indices_past_two_to_the_32_stay_exact():
    """A pair index beyond 2^32 (sequence 1 of a batch whose sequence 0 has 2^32 candidates)
    finds its sequence and candidate and is written as its key: no 32-bit truncation anywhere
    between the thread index and the output (the seq3 rule of cuda/rule_example.cuh)."""
    lib = ctypes.CDLL(str(build(BIG, MODE_FLAGS["serial"])))
    fn = lib.one_thread_each
    fn.restype = None
    fn.argtypes = [ctypes.c_uint] * 4 + [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64,
                                         ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64,
                                         ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64]
    ts = np.arange(6, dtype=np.int64)
    excluded = np.zeros(6, np.uint8)
    k = np.array([7, 7, 5, 7, 7, 7], np.int64)  # row 2 has another k: rejected by the check
    valid = np.ones(6, np.uint8)
    tab = np.array([a.ctypes.data for a in (ts, excluded, k, valid)], np.uint64)
    scal = np.zeros(1, np.int64)
    seq_in = np.array([[0, -1, -1], [5, -1, -1]], np.int64)
    col_rows = np.array([1, 2, 3, 4], np.int64)
    lo = np.array([0, 0], np.int64)
    offsets = np.array([0, 2**32, 2**32 + 4], np.int64)
    seq_out = np.full(3 * 4, -9, np.int64)
    keys = np.full(4, -9, np.int64)
    count = np.zeros(1, np.uint64)

    def run(t: int):
        bdim, gdim = 1 << 13, 1 << 21  # 2^34 threads: each runs one pair only
        fn(t // bdim, bdim, gdim, t % bdim, tab.ctypes.data, scal.ctypes.data, seq_in.ctypes.data, 2,
           col_rows.ctypes.data, lo.ctypes.data, offsets.ctypes.data, int(offsets[-1]),
           seq_out.ctypes.data, keys.ctypes.data, count.ctypes.data, 4)

    # candidates 3 and 2 of sequence 1 (rows 4 and 3: valid) and 1 (row 2: another k, rejected)
    for t in (2**32 + 3, 2**32 + 1, 2**32 + 2):
        run(t)
    assert int(count[0]) == 2
    assert keys[:2].tolist() == [2**32 + 3, 2**32 + 2]
    assert seq_out[:6].reshape(2, 3).tolist() == [[5, 4, -1], [5, 3, -1]]


# -- one combiner per device -------------------------------------------------------------------------


def test_gpu_backend_follows_the_current_device():
    """A reused Spark worker whose next task got another GPU: the backend runs on that device's
    combiner (not the first one's), and finds each device's state again when it comes back."""
    current = {"device": 0}
    made: list[int] = []

    def factory(device: int):
        made.append(device)
        return host_combiner(check_columns=True)

    backend = GpuDevicesBackend(factory, lambda: current["device"], "gpu-devices-test")
    table = _extended(seq3_events(300, seed=12), 150, 300)  # a table with a row lineage: device columns
    rule = cep_gpu.parse_rule(SEQ3.format(p="each", w=30))
    ref = _sorted(ReferenceBackend().match(rule, table).rows)
    assert np.array_equal(_sorted(backend.match(rule, table).rows), ref)
    first = backend.combiner
    first_bytes = first.stats.bytes_uploaded
    assert first.stats.column_full_uploads == 3
    current["device"] = 1
    assert np.array_equal(_sorted(backend.match(rule, table).rows), ref)
    second = backend.combiner
    assert second is not first and made == [0, 1] and backend.devices == [0, 1]
    assert first.stats.launches > 0 and second.stats.launches > 0
    assert backend.stats()["launches"] == second.stats.launches  # the current device's counters
    # device 1 needed its own copy of everything: the table was not taken from device 0's memory
    assert second.stats.bytes_uploaded == first_bytes
    current["device"] = 0
    assert np.array_equal(_sorted(backend.match(rule, table).rows), ref)
    assert backend.combiner is first and made == [0, 1]
    # device 0 kept the table's columns while away: no column was uploaded again
    assert first.stats.column_full_uploads == 3 and first.stats.column_appends == 0
    assert second.stats.column_full_uploads == 3
    backend.release()
    assert first.runtime.bytes_in_use() == 0 and second.runtime.bytes_in_use() == 0
