"""The one-call GPU check (bench/gpu_check.sh runs this; docs/gpu.md, "The one-call GPU check").

Runs, on a machine with a CUDA GPU, each step below and writes everything into one folder:
``summary.txt`` / ``summary.json`` (each step: ok / FAILED / skipped, why, seconds, its command),
one ``<step>.log`` per step, and the step's own outputs (``device-tests.xml``, ``seq3_gpu.txt``,
``profile.json``, the sanitizer logs). Standard library only: it must start before the project is
importable, and makes it importable from the tree when it is not installed.

Steps (``--steps`` picks some; the default is all but ``compile``):

=============  =====  =========================================================================
env            -      machine, driver, CUDA, library versions (``env.txt``)
compile        -      nvcc/g++ compile tests and the host launch tests (what CI also runs)
device-tests   GPU    ``tests/test_gpu_device.py`` through CuPy (a missing GPU is an error)
memcheck       GPU    ``compute-sanitizer --tool memcheck`` over ``bench/gpu_sanitize_run.py``
racecheck      GPU    ``compute-sanitizer --tool racecheck`` (shared-memory hazards) over the same
initcheck      GPU    ``compute-sanitizer --tool initcheck`` (reads of uninitialised device memory)
seq3           GPU    ``bench/seq3_gpu.py``: batched and per-terminator, GPU next to CPU
profile        GPU    ``bench/gpu_profile.py``: where the GPU path's time goes (cProfile, CuPy floors)
calibrate      GPU    ``cep-gpu calibrate --quick`` on the GPU: the planner profile (``profile.json``)
cudf           GPU    ``tests/test_gpu_cudf.py`` against the real cuDF (skipped if not importable)
=============  =====  =========================================================================

Each step has a time limit, and the whole check a budget (default 570 s), so that it ends in under
ten minutes; a step cut off by its limit counts as FAILED (its partial output stays). Exit status:
0 when no step failed, 1 when one did, 2 for bad arguments.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import shutil
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

#: (name, needs a GPU, time limit in s, time limit with --quick)
STEPS: list[tuple[str, bool, int, int]] = [
    ("env", False, 30, 30),
    ("compile", False, 120, 90),
    ("device-tests", True, 150, 100),
    ("memcheck", True, 75, 60),
    ("racecheck", True, 40, 40),
    ("initcheck", True, 50, 45),
    ("seq3", True, 100, 50),
    ("profile", True, 90, 60),
    ("calibrate", True, 90, 90),
    ("cudf", True, 60, 45),
]
STEP_NAMES = [s[0] for s in STEPS]
DEFAULT_STEPS = [s for s in STEP_NAMES if s != "compile"]
#: what the device tests and the project need beyond CUDA, CuPy, Numba, pandas, pyarrow, pytest
NEEDED = ("lark", "hypothesis")


@dataclass
class Result:
    step: str
    status: str  # ok | FAILED | skipped
    reason: str = ""
    seconds: float = 0.0
    command: list[str] = field(default_factory=list)
    log: str = ""


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        prog="bench/gpu_check.sh",
        description="The one-call GPU check: device tests, compute-sanitizer, the seq3 GPU sweep "
        "against the CPU, the planner's calibration on the GPU, real cuDF; everything into one folder.",
        epilog=f"steps: {', '.join(STEP_NAMES)} (default: {','.join(DEFAULT_STEPS)})",
    )
    ap.add_argument("--out", type=Path, default=None,
                    help="output folder (default: out/gpu-check-<UTC time>); created, must be empty if it exists")
    ap.add_argument("--steps", default=",".join(DEFAULT_STEPS), help="comma-separated steps to run")
    ap.add_argument("--quick", action="store_true", help="smaller inputs and shorter limits (about 5 minutes)")
    ap.add_argument("--budget", type=float, default=570.0, help="seconds for the whole check (default 570)")
    ap.add_argument("--python", default=None, help="the Python to use (default: .venv/bin/python if it exists, else this one)")
    ap.add_argument("--wheels", type=Path, default=None,
                    help="a folder of wheels (pip download ...) to install offline, all of them, ahead "
                         "of the machine's own packages (missing ones, or other versions: pandas 2 where "
                         "the machine has pandas 3)")
    ap.add_argument("--allow-no-gpu", action="store_true",
                    help="skip the GPU steps where no GPU is usable instead of failing them (to check the script itself)")
    ap.add_argument("--dry-run", action="store_true", help="print the plan and the commands, run nothing")
    args = ap.parse_args(argv)
    steps = [s for s in args.steps.replace(" ", "").split(",") if s]
    unknown = [s for s in steps if s not in STEP_NAMES]
    if unknown or not steps:
        ap.error(f"unknown step(s) {', '.join(unknown) or '(none given)'}; choose from {', '.join(STEP_NAMES)}")
    args.steps = [s for s in STEP_NAMES if s in steps]  # in the check's order
    if args.budget <= 0:
        ap.error(f"--budget must be positive, not {args.budget}")
    if args.wheels is not None and not args.wheels.is_dir():
        ap.error(f"--wheels {args.wheels}: not a folder")
    if args.out is None:
        args.out = ROOT / "out" / time.strftime("gpu-check-%Y%m%dT%H%M%SZ", time.gmtime())
    if args.out.exists() and (not args.out.is_dir() or any(args.out.iterdir())) and not args.dry_run:
        ap.error(f"--out {args.out}: exists and is not an empty folder")
    return args


def pick_python(given: str | None) -> str:
    if given:
        return given
    venv = ROOT / ".venv" / "bin" / "python"
    return str(venv) if venv.exists() else sys.executable


def run(cmd: list[str], env: dict[str, str], timeout: float, log: Path | None = None) -> tuple[int, str]:
    """Run ``cmd`` in the repository root; (exit status, output). 124 when cut off by ``timeout``."""
    try:
        proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)
        rc, text = proc.returncode, proc.stdout + proc.stderr
    except subprocess.TimeoutExpired as exc:
        out = exc.stdout or b""
        err = exc.stderr or b""
        text = (out.decode(errors="replace") if isinstance(out, bytes) else out) + (
            err.decode(errors="replace") if isinstance(err, bytes) else err)
        rc, text = 124, text + f"\n[gpu_check] cut off after {timeout:.0f} s\n"
    except OSError as exc:  # the program itself is missing
        rc, text = 127, f"[gpu_check] cannot run {cmd[0]}: {exc}\n"
    if log is not None:
        log.write_text(f"$ {shlex.join(cmd)}\n{text}")
    return rc, text


class Check:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.out: Path = args.out
        self.python = pick_python(args.python)
        self.env = dict(os.environ)
        self.env.setdefault("PYTHONUNBUFFERED", "1")
        self.start = time.monotonic()
        self.results: list[Result] = []
        self.setup_error = ""
        self.gpu_error = ""
        self.cudf_error = ""

    # -- preparation -----------------------------------------------------------------------------

    def _py(self, code: str, timeout: float = 120) -> tuple[int, str]:
        return run([self.python, "-c", code], self.env, timeout)

    def make_importable(self) -> None:
        """Put the project (from the tree) and the packages of --wheels on PYTHONPATH."""
        paths = [p for p in self.env.get("PYTHONPATH", "").split(os.pathsep) if p]
        rc, _ = self._py("import cep_gpu.kernels.gpu, cep_gpu.cuda")
        if rc != 0:  # not installed: import it from the tree
            paths.insert(0, str(import_farm(self.out / "_import")))
            # and keep the steps' working folder (the root) off sys.path: its own cep_gpu/ there,
            # first on the path, would win over the farm's and lack cep_gpu.kernels (Python 3.11+)
            self.env["PYTHONSAFEPATH"] = "1"
        wheels = sorted(self.args.wheels.glob("*.whl")) if self.args.wheels is not None else []
        if wheels:
            # every wheel given, without its dependencies (bring those too): what is missing, and
            # versions the project needs instead of the machine's own
            site = self.out / "_site"
            run([self.python, "-m", "pip", "install", "--no-index", "--no-deps", "--no-compile",
                 "--target", str(site), *map(str, wheels)], self.env, 300, self.out / "wheels.log")
            paths.insert(0, str(site))
        self.env["PYTHONPATH"] = os.pathsep.join(paths)
        tried = {m: self._py(f"import {m}") for m in (*NEEDED, "cep_gpu.kernels.gpu")}
        missing = {m: _last_line(text) for m, (rc, text) in tried.items() if rc != 0}
        if missing:
            self.setup_error = (
                f"cannot import {', '.join(missing)} with {self.python} "
                f"({'; '.join(f'{m}: {why}' for m, why in missing.items())}): bring the wheels "
                "along (pip download lark hypothesis -d wheels/ on a machine with internet; then "
                "--wheels wheels/)"
            )
        rc, text = self._py(
            "from cep_gpu.kernels.gpu import gpu_available\nok, why = gpu_available()\nprint(why)\n"
            "raise SystemExit(0 if ok else 1)")
        if rc != 0:
            self.gpu_error = _last_line(text) or "no usable GPU"
        rc, text = self._py("import cudf")
        if rc != 0:
            self.cudf_error = "cudf is not importable (pip install cudf-cu12, or bring its wheels along)"

    # -- the steps -------------------------------------------------------------------------------

    def commands(self, step: str) -> list[str]:
        q = self.args.quick
        py, out = self.python, self.out
        pytest = [py, "-m", "pytest", "-p", "no:cacheprovider", "-rs"]
        if step == "env":
            return [py, str(ROOT / "bench" / "gpu_check.py"), "--print-env"]
        if step == "compile":
            return [*pytest, "tests/test_gpu_compile.py", "tests/test_gpu_launch.py",
                    f"--junitxml={out / 'compile.xml'}"]
        if step == "device-tests":
            return [*pytest, "tests/test_gpu_device.py", f"--junitxml={out / 'device-tests.xml'}"]
        if step in ("memcheck", "racecheck", "initcheck"):
            return [sanitizer() or "compute-sanitizer", "--tool", step, "--error-exitcode", "3",
                    "--print-limit", "100", "--log-file", str(out / f"{step}.txt"),
                    py, "bench/gpu_sanitize_run.py", "--events", "1500" if q else "3000"]
        if step == "seq3":
            return [py, "bench/seq3_gpu.py", "--events", "50000" if q else "200000",
                    "--windows", "100,4000,40000" if q else "100,1000,4000,10000,40000",
                    "--policies", "each,last", "--sample", "100" if q else "200"]
        if step == "profile":
            return [py, "bench/gpu_profile.py", "--events", "50000" if q else "200000"]
        if step == "calibrate":
            # --quick: the full calibration takes longer than the check's budget allows; run
            # `cep-gpu calibrate` on its own for the profile to keep
            return [py, "-m", "cep_gpu.benchmarks.cli", "calibrate", "--quick", "--out", str(out / "profile.json")]
        if step == "cudf":
            return [*pytest, "tests/test_gpu_cudf.py", f"--junitxml={out / 'cudf.xml'}"]
        raise ValueError(step)

    def run_step(self, step: str, needs_gpu: bool, limit: float) -> Result:
        cmd = self.commands(step)
        left = self.args.budget - (time.monotonic() - self.start)
        if step != "env" and self.setup_error:
            return Result(step, "FAILED", self.setup_error, command=cmd)
        if needs_gpu and self.gpu_error:
            status = "skipped" if self.args.allow_no_gpu else "FAILED"
            return Result(step, status, f"no usable GPU: {self.gpu_error}", command=cmd)
        if step in ("memcheck", "racecheck", "initcheck") and sanitizer() is None:
            return Result(step, "FAILED", "compute-sanitizer not found (PATH, $CUDA_HOME/bin, /usr/local/cuda/bin)", command=cmd)
        if step == "cudf" and self.cudf_error:
            return Result(step, "skipped", self.cudf_error, command=cmd)
        if left < 5:
            return Result(step, "FAILED", f"the check's budget of {self.args.budget:.0f} s ran out", command=cmd)
        env = dict(self.env)
        if step == "device-tests":
            env["CEP_REQUIRE_GPU"] = "1"
        if step == "cudf":
            env["CEP_REQUIRE_CUDF"] = "1"
        log = self.out / f"{step}.log"
        t0 = time.monotonic()
        rc, text = run(cmd, env, min(limit, left), log)
        secs = time.monotonic() - t0
        copy = {"seq3": "seq3_gpu.txt", "env": "env.txt", "profile": "profile.txt"}.get(step)
        if copy:
            (self.out / copy).write_text(text)
        if rc == 0:
            return Result(step, "ok", "", secs, cmd, log.name)
        why = f"cut off after {min(limit, left):.0f} s" if rc == 124 else f"exit status {rc}"
        tail = [line for line in text.strip().splitlines() if line.strip()][-1:] or [""]
        report = self.out / f"{step}.txt"
        if step in ("memcheck", "racecheck", "initcheck") and report.exists():
            # the sanitizer's own verdict (its report went to <step>.txt, not to the output)
            summary = [line for line in report.read_text(errors="replace").splitlines() if "ERROR SUMMARY" in line]
            tail = summary[-1:] or tail
        return Result(step, "FAILED", f"{why}: {tail[0][:200]}", secs, cmd, log.name)

    def main(self) -> int:
        plan = [(name, gpu, quick if self.args.quick else normal)
                for name, gpu, normal, quick in STEPS if name in self.args.steps]
        if self.args.dry_run:
            print(f"gpu_check plan (python {self.python}, out {self.out}, budget {self.args.budget:.0f} s):")
            for name, gpu, limit in plan:
                print(f"  {name:13} {'GPU' if gpu else '-  '} {limit:4d} s  $ {shlex.join(self.commands(name))}")
            return 0
        self.out.mkdir(parents=True, exist_ok=True)
        self.make_importable()
        for name, gpu, limit in plan:
            res = self.run_step(name, gpu, limit)
            self.results.append(res)
            print(f"[gpu_check] {name:13} {res.status:8} {res.seconds:6.1f} s  {res.reason}", flush=True)
            self.write_summary()
        failed = [r.step for r in self.results if r.status == "FAILED"]
        print(f"[gpu_check] {'FAILED: ' + ', '.join(failed) if failed else 'all steps passed or skipped'}"
              f" -> {self.out / 'summary.txt'}")
        return 1 if failed else 0

    def write_summary(self) -> None:
        lines = [f"cep-gpu GPU check, {time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())}",
                 f"python: {self.python}", f"budget: {self.args.budget:.0f} s, quick: {self.args.quick}", ""]
        for r in self.results:
            lines.append(f"{r.step:13} {r.status:8} {r.seconds:6.1f} s  {r.reason}")
        (self.out / "summary.txt").write_text("\n".join(lines) + "\n")
        (self.out / "summary.json").write_text(json.dumps({
            "python": self.python, "quick": self.args.quick, "budget_s": self.args.budget,
            "gpu": self.gpu_error or "usable", "cudf": self.cudf_error or "importable",
            "steps": [asdict(r) for r in self.results],
        }, indent=2) + "\n")


def _last_line(text: str) -> str:
    """The last non-blank line of a program's output (where Python puts the error), shortened."""
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[-1][:200] if lines else ""


def import_farm(dest: Path) -> Path:
    """A folder that makes the tree importable without installing it: ``dest/cep_gpu`` links to
    each entry of ``cep_gpu/`` and maps ``kernels/``, ``cuda/`` and ``spark_udfs/`` into the
    namespace as setup.py does. Returns ``dest`` (for PYTHONPATH)."""
    farm = dest / "cep_gpu"
    farm.mkdir(parents=True, exist_ok=True)
    for entry in (ROOT / "cep_gpu").iterdir():
        if entry.name != "__pycache__" and not (farm / entry.name).exists():
            (farm / entry.name).symlink_to(entry)
    for sub in ("kernels", "cuda", "spark_udfs"):
        if not (farm / sub).exists():
            (farm / sub).symlink_to(ROOT / sub)
    return dest


def sanitizer() -> str | None:
    """The compute-sanitizer executable, or None."""
    found = shutil.which("compute-sanitizer")
    if found:
        return found
    for base in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        if base and (Path(base) / "bin" / "compute-sanitizer").exists():
            return str(Path(base) / "bin" / "compute-sanitizer")
    return None


def print_env() -> int:
    """The ``env`` step: machine, driver, CUDA and library versions."""
    print(f"host: {platform.node()} {platform.platform()} python {sys.version.split()[0]}")
    for tool in (["nvidia-smi"], ["nvcc", "--version"], [sanitizer() or "compute-sanitizer", "--version"]):
        rc, text = run(tool, dict(os.environ), 30)
        print(f"$ {' '.join(tool)} (exit {rc})\n{text.strip()}\n")
    for mod in ("numpy", "pandas", "pyarrow", "numba", "lark", "hypothesis", "pytest", "cupy", "cudf", "pyspark"):
        try:
            m = __import__(mod)
            print(f"{mod}: {getattr(m, '__version__', '?')}")
        except Exception as exc:  # ImportError, or CUDA errors from cupy/cudf
            print(f"{mod}: not importable ({type(exc).__name__}: {str(exc)[:120]})")
    try:
        from cep_gpu.kernels.gpu import gpu_available

        print(f"cep_gpu gpu backend: {gpu_available()[1]}")
        import cupy  # type: ignore[import-not-found]

        for i in range(cupy.cuda.runtime.getDeviceCount()):
            props = cupy.cuda.runtime.getDeviceProperties(i)
            print(f"device {i}: {props['name'].decode()}, cc {props['major']}.{props['minor']}, "
                  f"{props['totalGlobalMem'] / 2**30:.1f} GiB")
    except Exception as exc:
        print(f"devices: {type(exc).__name__}: {str(exc)[:200]}")
    return 0


if __name__ == "__main__":
    if sys.argv[1:] == ["--print-env"]:
        sys.exit(print_env())
    sys.exit(Check(parse_args()).main())
