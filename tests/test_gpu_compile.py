"""nvcc compiles every cuda/ source, and the generated rule kernels, for sm_80 and sm_90.

docs/gpu.md ("What is proven where"). Skipped (with the reason printed) only where nvcc is absent. The same
sources also pass g++ with -Wall -Wextra -Werror (the host build of kernels/host.py).
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
from cep_gpu.kernels.gpu import cuda_dir, full_source

import cep_gpu
from cep_gpu.codegen import lower
from cep_gpu.codegen.cuda import generate

NVCC = shutil.which("nvcc")
needs_nvcc = pytest.mark.skipif(NVCC is None, reason="nvcc is not installed on this machine: CUDA compile test not run")
ARCHS = ("-gencode", "arch=compute_80,code=sm_80", "-gencode", "arch=compute_90,code=sm_90")
SOURCES = sorted(p for p in cuda_dir().iterdir() if p.suffix in (".cu", ".cuh"))

# Rules whose generated kernels must compile: the museum rules (examples/museum.tesla), and rules that use
# every expression node, both kinds of negation span, every aggregate, strings, bools and floats.
RULES = {
    "touch": "define Touch(room: string, painting: string) from Vibration(painting=$p and value>3.0) and "
    "each PeopleNear(painting=$p) within 2 min. from Vibration where room=Vibration.room and painting=Vibration.painting",
    "theft": "define Theft(room: string, painting: string) from Vibration(room=$r and painting=$p and value>3.0) and "
    "each PeopleNear(painting=$p) within 5 min. from Vibration and not StaffAt(room=$r) within 1 min. from Vibration "
    "where room=Vibration.room and painting=Vibration.painting",
    "alarm": "define Alarm(painting: string, level: float) from Vibration(room=$r and painting=$p and value>3.0) and "
    "v=Avg(Vibration(room=$r and painting=$p) within 5 min. from Vibration).value > 3.0 where painting=Vibration.painting and level=v",
    "everything": "define E pattern SEQ(A a, NOT(D z), B b, C c) "
    "where (a.s = 'u' or not (a.x * 2 - c.x >= -3)) and b.y / 2 < c.y + 1.5 and z.x = a.x and c.f = true "
    "within 5 s select last return t := a.x, w := c.y",
    "kleene": "define K pattern SEQ(A a, NOT(D z), KL(B b)[2..4], NOT(D w), C c, KL(B d), E e) "
    "where b.x != 2 and b[i].y <= b[i+1].y and sum(b.x) >= c.x and avg(d.y) > min(b.y) and z.x = a.x "
    "and count(d) < 3 and max(b.f) >= 0 within 5 s return n := count(b), m := max(d.y)",
}
KINDS = {"value": "float", "room": "string", "painting": "string", "s": "string", "x": "int", "y": "float", "f": "bool"}


def _nvcc(path: Path, tmp_path: Path) -> None:
    # -fatbin: device code only (SASS for both architectures), as NVRTC builds it; no host pass
    out = tmp_path / (path.stem + ".fatbin")
    cmd = [NVCC, "-x", "cu", "-std=c++17", "-Werror", "all-warnings", *ARCHS, "--threads", "2",
           f"-I{cuda_dir()}", "-fatbin", str(path), "-o", str(out)]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    assert proc.returncode == 0, f"nvcc failed on {path.name}:\n{proc.stderr}"
    assert out.stat().st_size > 0


def _gxx(path: Path, tmp_path: Path) -> None:
    gxx = shutil.which("g++")
    if gxx is None:
        pytest.skip("g++ is not installed: host compile check not run")
    cmd = [gxx, "-std=c++17", "-Wall", "-Wextra", "-Werror", "-fsyntax-only", "-x", "c++", f"-I{cuda_dir()}", str(path)]
    if path.name == "cdp.cuh":  # on its own it declares the rule hooks without defining them
        cmd.insert(1, "-Wno-unused-function")
    proc = subprocess.run(cmd, capture_output=True, text=True)
    assert proc.returncode == 0, f"g++ failed on {path.name}:\n{proc.stderr}"


def _rule_unit(name: str, tmp_path: Path) -> Path:
    rule = cep_gpu.parse_rule(RULES[name])
    path = tmp_path / f"rule_{name}.cu"
    path.write_text(full_source(generate(lower(rule), KINDS).source))
    return path


def test_every_cuda_source_is_listed():
    assert {p.name for p in SOURCES} >= {"cdp.cu", "cdp.cuh", "portable.cuh", "rule_example.cuh"}


@needs_nvcc
@pytest.mark.parametrize("source", SOURCES, ids=lambda p: p.name)
def test_nvcc_compiles_cuda_source_for_sm80_and_sm90(source, tmp_path):
    _nvcc(source, tmp_path)


@needs_nvcc
@pytest.mark.parametrize("name", sorted(RULES))
def test_nvcc_compiles_generated_rule_kernels(name, tmp_path):
    _nvcc(_rule_unit(name, tmp_path), tmp_path)


@pytest.mark.parametrize("source", SOURCES, ids=lambda p: p.name)
def test_host_compiler_accepts_cuda_source(source, tmp_path):
    _gxx(source, tmp_path)


@pytest.mark.parametrize("name", sorted(RULES))
def test_host_compiler_accepts_generated_rule_kernels(name, tmp_path):
    _gxx(_rule_unit(name, tmp_path), tmp_path)


def test_sources_need_no_system_header():
    # NVRTC (CuPy's RawModule) ships no C/C++ standard headers: the device side must not need one.
    for p in SOURCES:
        text = p.read_text()
        device_part = text.split("#else  // ---")[0] if p.name == "portable.cuh" else text
        assert not re.search(r"#\s*include\s*<", device_part), p.name
