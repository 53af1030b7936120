"""bench/gpu_check.sh, the one-call GPU check (issue 14, part 3): what can run without a GPU.

Its argument handling, its plan, the steps that need no GPU (env, compile), how it records a step
that fails, is cut off or has no GPU, and the import path it builds for an uninstalled tree. The
GPU steps themselves (device tests, compute-sanitizer, seq3 sweep, calibration, real cuDF) run only
on a GPU machine.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from cep_gpu.kernels.gpu import gpu_available

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "bench" / "gpu_check.sh"
HAVE_GPU = gpu_available()[0]


def _module():
    spec = importlib.util.spec_from_file_location("gpu_check", ROOT / "bench" / "gpu_check.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("gpu_check", mod)  # dataclasses look their module up while it loads
    spec.loader.exec_module(mod)
    return mod


def check(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHON=sys.executable)
    return subprocess.run([str(SCRIPT), *args], capture_output=True, text=True, timeout=timeout, env=env)


def test_help_lists_the_steps():
    proc = check("--help")
    assert proc.returncode == 0
    for step in ("device-tests", "memcheck", "racecheck", "initcheck", "seq3", "calibrate", "cudf"):
        assert step in proc.stdout


@pytest.mark.parametrize("args, message", [
    (("--steps", "env,warp"), "unknown step(s) warp"),
    (("--steps", ","), "unknown step(s) (none given)"),
    (("--budget", "0"), "--budget must be positive"),
    (("--wheels", "/no/such/folder"), "not a folder"),
    (("--frobnicate",), "unrecognized arguments"),
])
def test_bad_arguments_exit_2_naming_the_problem(args, message):
    proc = check(*args)
    assert proc.returncode == 2
    assert message in proc.stderr


def test_out_must_be_new_or_empty(tmp_path):
    (tmp_path / "old.txt").write_text("x")
    proc = check("--out", str(tmp_path), "--steps", "env")
    assert proc.returncode == 2 and "not an empty folder" in proc.stderr


def test_dry_run_prints_the_plan_in_order_and_runs_nothing(tmp_path):
    out = tmp_path / "check"
    proc = check("--dry-run", "--out", str(out), "--steps", "seq3,env,memcheck")
    assert proc.returncode == 0
    lines = [line.split()[0] for line in proc.stdout.splitlines()[1:]]
    assert lines == ["env", "memcheck", "seq3"]  # the check's order, not the argument's
    assert "compute-sanitizer --tool memcheck" in proc.stdout
    assert "--events 200000" in proc.stdout and not out.exists()
    quick = check("--dry-run", "--quick", "--out", str(out), "--steps", "seq3,calibrate")
    assert "--events 50000" in quick.stdout and "calibrate --quick" in quick.stdout


def test_default_steps_are_all_but_compile():
    proc = check("--dry-run")
    steps = [line.split()[0] for line in proc.stdout.splitlines()[1:]]
    assert steps == [s for s in _module().STEP_NAMES if s != "compile"]


def test_cpu_steps_run_and_write_one_folder(tmp_path):
    out = tmp_path / "check"
    proc = check("--out", str(out), "--steps", "env,compile", "--quick")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    summary = json.loads((out / "summary.json").read_text())
    assert [(s["step"], s["status"]) for s in summary["steps"]] == [("env", "ok"), ("compile", "ok")]
    assert "numpy:" in (out / "env.txt").read_text()
    assert "passed" in (out / "compile.log").read_text()
    assert (out / "compile.xml").exists()
    assert "compile" in (out / "summary.txt").read_text()


@pytest.mark.skipif(HAVE_GPU, reason="a GPU is usable here: the no-GPU path cannot be shown")
def test_gpu_steps_fail_without_a_gpu_unless_allowed(tmp_path):
    proc = check("--out", str(tmp_path / "a"), "--steps", "env,device-tests,seq3")
    assert proc.returncode == 1
    steps = {s["step"]: s for s in json.loads((tmp_path / "a" / "summary.json").read_text())["steps"]}
    assert steps["env"]["status"] == "ok"
    assert steps["device-tests"]["status"] == "FAILED" and "no usable GPU" in steps["device-tests"]["reason"]
    assert "FAILED: device-tests, seq3" in proc.stdout
    allowed = check("--out", str(tmp_path / "b"), "--steps", "device-tests,cudf", "--allow-no-gpu")
    assert allowed.returncode == 0
    assert {s["status"] for s in json.loads((tmp_path / "b" / "summary.json").read_text())["steps"]} == {"skipped"}


def _failing_python(tmp_path: Path, steps: str, say: str = "") -> tuple[subprocess.CompletedProcess, list]:
    """The check run with a "python" that fails every call (printing ``say`` to stderr first);
    the finished process and the summary's steps."""
    fake = tmp_path / "python"
    fake.write_text("#!/bin/sh\n" + (f"echo '{say}' >&2\n" if say else "") + "exit 1\n")
    fake.chmod(0o755)
    proc = check("--out", str(tmp_path / "c"), "--steps", steps, "--python", str(fake))
    return proc, json.loads((tmp_path / "c" / "summary.json").read_text())["steps"]


def test_a_python_that_cannot_import_the_project_fails_every_step_with_advice(tmp_path):
    proc, steps = _failing_python(tmp_path, "compile,seq3")
    assert proc.returncode == 1
    assert all(s["status"] == "FAILED" and "--wheels" in s["reason"] for s in steps)


def test_a_failed_import_says_why(tmp_path):
    """The reason names each module that failed and the error Python gave for it."""
    proc, (step,) = _failing_python(tmp_path, "seq3", "ModuleNotFoundError: No module named cuda.pathfinder")
    assert proc.returncode == 1
    assert "cep_gpu.kernels.gpu: ModuleNotFoundError: No module named cuda.pathfinder" in step["reason"]


def _wheel(folder: Path, module: str, version: str) -> Path:
    """A minimal pure-Python wheel holding ``module`` (``VERSION = version``)."""
    import zipfile

    dist = f"{module}-{version}.dist-info"
    path = folder / f"{module}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr(f"{module}.py", f"VERSION = {version!r}\n")
        z.writestr(f"{dist}/METADATA", f"Metadata-Version: 2.1\nName: {module}\nVersion: {version}\n")
        z.writestr(f"{dist}/WHEEL", "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
        z.writestr(f"{dist}/RECORD", "")
    return path


def test_wheels_are_all_installed_ahead_of_the_machines_packages(tmp_path):
    """--wheels installs every wheel in the folder (a missing package, or another version of one the
    machine has, as pandas 2 where it has pandas 3) first on the steps' PYTHONPATH."""
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    _wheel(wheels, "cep_probe_pkg", "2.0")
    mod = _module()
    chk = mod.Check(mod.parse_args(["--out", str(tmp_path / "out"), "--steps", "env", "--wheels", str(wheels),
                                    "--python", sys.executable]))
    chk.out.mkdir(parents=True)
    chk.make_importable()
    assert chk.env["PYTHONPATH"].split(os.pathsep)[0] == str(chk.out / "_site")
    rc, text = chk._py("import cep_probe_pkg; print(cep_probe_pkg.VERSION, cep_probe_pkg.__file__)")
    assert rc == 0, text
    version, where = text.split()
    assert version == "2.0" and where.startswith(str(chk.out / "_site"))


def test_profile_script_prints_where_the_time_goes():
    """bench/gpu_profile.py (the check's ``profile`` step) on the host build: both policies,
    batched next to the CPU, and per terminator with the combiner's counters."""
    proc = subprocess.run([sys.executable, str(ROOT / "bench" / "gpu_profile.py"), "--backend", "gpu-host",
                           "--events", "3000", "--window", "500", "--terminator-window", "500",
                           "--terminators", "5", "--top", "3"], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert out.startswith("# host build of the GPU kernels: NOT a GPU measurement")
    for policy in ("each", "last"):
        assert f"== batched {policy}, window 500 ms, 3000 events, gpu-host:" in out
        assert f"== batched {policy}, window 500 ms, 3000 events, cpu:" in out
        assert f"== per terminator {policy}, window 500 ms, gpu-host:" in out
    assert out.count("'launches': ") == 2 and "ncalls" in out
    bad = subprocess.run([sys.executable, str(ROOT / "bench" / "gpu_profile.py"), "--events", "0"],
                         capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "--events must be at least 1" in bad.stderr


def test_the_budget_stops_the_check(tmp_path):
    proc = check("--out", str(tmp_path / "d"), "--steps", "env,compile", "--budget", "0.5")
    assert proc.returncode == 1
    steps = json.loads((tmp_path / "d" / "summary.json").read_text())["steps"]
    assert all("budget" in s["reason"] for s in steps)


def test_a_step_past_its_limit_is_cut_off_and_logged(tmp_path):
    mod = _module()
    rc, text = mod.run([sys.executable, "-c", "import time; print('started', flush=True); time.sleep(30)"],
                       dict(os.environ), 1.0, tmp_path / "slow.log")
    assert rc == 124 and "cut off after 1 s" in text
    assert "started" in (tmp_path / "slow.log").read_text()
    rc, text = mod.run(["/no/such/program"], dict(os.environ), 5)
    assert rc == 127 and "cannot run" in text


def test_import_farm_makes_the_uninstalled_tree_importable(tmp_path):
    dest = _module().import_farm(tmp_path / "_import")
    code = ("import cep_gpu, cep_gpu.kernels.host as h; from cep_gpu.kernels.gpu import cuda_dir; "
            "print(cep_gpu.__file__); print(h.__file__); print(sorted(p.name for p in cuda_dir().iterdir()))")
    env = dict(os.environ, PYTHONPATH=str(dest))
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    first, second, names = proc.stdout.splitlines()
    assert first.startswith(str(dest)) and second.startswith(str(dest))  # not the installed copy
    assert "cdp.cuh" in names and "portable.cuh" in names


def test_farm_steps_run_with_the_root_off_sys_path(tmp_path, monkeypatch):
    """Steps run in the repository root; a ``python -c`` or ``python -m pytest`` there puts the root
    first on sys.path, where its own cep_gpu/ (without cep_gpu.kernels) would win over the farm's."""
    mod = _module()
    chk = mod.Check(mod.parse_args(["--out", str(tmp_path / "out"), "--steps", "env"]))
    chk.out.mkdir(parents=True)
    calls: list[str] = []

    def py(code: str, timeout: float = 120) -> tuple[int, str]:
        calls.append(code)
        return (1 if len(calls) == 1 else 0), ""  # the tree is not installed; all else imports

    monkeypatch.setattr(chk, "_py", py)
    chk.make_importable()
    assert chk.env["PYTHONSAFEPATH"] == "1"
    farm = chk.env["PYTHONPATH"].split(os.pathsep)[0]
    proc = subprocess.run([sys.executable, "-c", "import cep_gpu; print(cep_gpu.__file__)"],
                          capture_output=True, text=True, env=chk.env, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith(farm)


def test_the_cuda_folder_does_not_hide_nvidias_cuda_namespace(tmp_path):
    """From the repository root, ``cuda`` is this project's folder too; NVIDIA's ``cuda`` namespace
    (cuda.pathfinder, cuda.bindings: CuPy 14 imports them) must still be found beside it."""
    site = tmp_path / "site"
    (site / "cuda" / "pathfinder").mkdir(parents=True)  # a namespace portion, as NVIDIA ships it
    (site / "cuda" / "pathfinder" / "__init__.py").write_text("FOUND = 'nvidia'\n")
    env = dict(os.environ, PYTHONPATH=str(site))
    code = "import cuda.pathfinder as p; print(p.FOUND)"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "nvidia"


@pytest.mark.skipif(HAVE_GPU, reason="a GPU is usable here")
def test_sanitize_run_says_why_it_cannot_run():
    proc = subprocess.run([sys.executable, str(ROOT / "bench" / "gpu_sanitize_run.py")],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "not run" in proc.stderr
