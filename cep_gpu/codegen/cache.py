"""The on-disk kernel cache: compiled Numba kernels survive the process (issue 11, cold start).

A rule's generated source (:func:`cep_gpu.codegen.numba_src.emit_source`) is written to
``<cache dir>/k_<hash>.py`` and run from there with ``cache=True`` on every function, so that
Numba keeps their machine code next to it (``__pycache__/*.nbi`` / ``*.nbc``) and a second process
loads it instead of compiling again.

The hash covers the source itself (a function of the rule's structure and attribute kinds, see
:func:`cep_gpu.codegen.rule_key`) and the versions it was compiled against: cep-gpu, Numba, NumPy,
Python, and the text of the generic kernels (:mod:`cep_gpu.kernels.cpu`) and of the generator,
since Numba checks only the generated file's own time stamp. A different rule, or an upgrade, is
a different file; stale files are never read (delete the directory to reclaim space).

The generic combination kernels take the rule's ``valid`` function as an argument, which Numba
cannot cache across processes (the argument's type is the function object of one process, and a
cached function may not even call such a kernel: "dynamic globals"). So each generated file also
holds the kernels' loops written out once per (kernel, serial/parallel, ``valid``), with the rule's
own function in place of the argument; their compiled code is what is cached. :func:`cep_gpu.kernels.cpu.specialise`
routes the generic calls to them.

Directory: ``$CEP_GPU_CACHE_DIR`` if set (``off``, ``0`` or ``none``: no disk cache), else
``$XDG_CACHE_HOME/cep-gpu/kernels``, else ``~/.cache/cep-gpu/kernels``. When the directory cannot
be written, kernels are compiled in memory as before (same results, slower start).
"""

from __future__ import annotations

import hashlib
import inspect
import os
import re
import sys
import tempfile
import textwrap
import types
from pathlib import Path

import numba
import numpy as np

from ..jit import cache_dir

__all__ = ["cache_dir", "kernel_file", "load_kernels", "specialise_all", "specialise_trivial", "versions_key"]

#: The generic kernels a generated file wraps per ``valid`` function: name -> its arguments
#: after ``valid`` (see :mod:`cep_gpu.kernels.cpu`), and whether a parallel variant exists.
STEP_KERNELS = {
    "_each_count": ("seqs, lo, hi, cand, excl, use_excl, env, counts", True),
    "_each_fill": ("seqs, lo, hi, cand, excl, use_excl, env, check, offsets, pred, out", True),
    "_select": ("seqs, lo, hi, cand, excl, use_excl, env, last, chosen", True),
    "_pair_mask": ("seqs, pair_seq, pair_row, env, mask", False),
}
AGG_KERNELS = {"_aggregates": ("seqs, env, out", True)}

_VERSIONS: str | None = None


def versions_key() -> str:
    """What every cached kernel depends on besides its own source (see the module docs)."""
    global _VERSIONS
    if _VERSIONS is None:
        from ..kernels import cpu
        from ..version import __version__
        from . import numba_src

        parts = [__version__, numba.__version__, np.__version__, sys.version, sys.platform]
        for mod in (cpu, numba_src, sys.modules[__name__], sys.modules[cache_dir.__module__]):
            parts.append(hashlib.blake2b(Path(mod.__file__).read_bytes(), digest_size=16).hexdigest())
        _VERSIONS = "|".join(parts)
    return _VERSIONS


def _inlined_kernel(name: str, fn: str, par: int, args: str) -> str:
    """Generic kernel ``name`` written out with ``fn`` in place of its function argument.

    Numba refuses to cache a function that calls a generic kernel with a function argument
    ("dynamic globals"), so the cached wrapper is the kernel's own loop, taken from its source in
    :mod:`cep_gpu.kernels.cpu` (one text for both: the versions key hashes that file)."""
    from ..kernels import cpu

    py = cpu._pair_mask if name == "_pair_mask" else cpu._SERIAL[name].py_func
    head, _, body = textwrap.dedent(inspect.getsource(py)).partition("\n")
    param = head[len(f"def {name}("):].split(",")[0].strip()  # valid / aggs_all
    body = re.sub(rf"\b{param}\(", f"{fn}(", body)
    body = re.sub(r"\bprange\(", "numba.prange(" if par else "range(", body)
    flags = "cache=True, parallel=True" if par else "cache=True"
    return f"@numba.njit({flags})\ndef {fn}{name}_{par}({args}):\n{body}"


def wrapper_source(funcs: list[str], kernels: dict[str, tuple[str, bool]]) -> str:
    """Cached kernels ``<func><kernel>_<0|1>(args)``: each generic kernel specialised to ``func``."""
    return "\n\n".join(
        _inlined_kernel(name, fn, par, args)
        for fn in funcs
        for name, (args, has_parallel) in kernels.items()
        for par in ((0, 1) if has_parallel else (0,))
    )


def kernel_file(source: str) -> tuple[Path, str] | None:
    """The file that holds ``source`` in the cache (written if missing or different), and the
    module name to run it under; None when the cache is disabled or cannot be written."""
    root = cache_dir()
    if root is None:
        return None
    key = hashlib.blake2b((versions_key() + "\n" + source).encode("utf-8"), digest_size=16).hexdigest()
    path = root / f"k_{key}.py"
    try:
        if not path.is_file() or path.read_text(encoding="utf-8") != source:
            # a new file (or a damaged one): write it whole, atomically; an unchanged file keeps
            # its time stamp, which Numba's cache index checks
            root.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=root, prefix=".k_", suffix=".tmp")
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(source)
            os.replace(tmp, path)
    except OSError:
        return None
    return path, f"cep_gpu_kernels_{key}"


def load_kernels(source: str, label: str, namespace: dict[str, object]) -> dict[str, object]:
    """Run ``source`` (checked generated code with ``cache=True``) in ``namespace`` from a file of
    the cache directory, so that Numba caches what it compiles; returns the namespace. Falls back
    to running it in memory with caching off when there is no usable cache directory."""
    found = kernel_file(source)
    if found is None:
        exec(compile(source.replace("cache=True", "cache=False"), label, "exec"), namespace)  # noqa: S102
        return namespace
    path, modname = found
    module = sys.modules.get(modname)
    if module is not None:  # already run in this process (the in-memory cache was cleared)
        return module.__dict__
    module = types.ModuleType(modname)
    module.__file__ = str(path)
    # Numba rebuilds a cached function's environment by importing its module by name
    sys.modules[modname] = module
    module.__dict__.update(namespace)
    exec(compile(source, str(path), "exec"), module.__dict__)  # noqa: S102
    return module.__dict__


def specialise_all(namespace: dict[str, object], funcs: list[str], kernels: dict[str, tuple[str, bool]]) -> None:
    """Route the generic kernels' calls with each of ``funcs`` to its wrappers in ``namespace``."""
    from ..kernels.cpu import specialise

    for fn in funcs:
        table = {}
        for name, (_, has_parallel) in kernels.items():
            for par in (0, 1) if has_parallel else (0,):
                table[(name, bool(par))] = namespace[f"{fn}{name}_{par}"]
        specialise(namespace[fn], table)


_TRIVIAL_DONE = False


def specialise_trivial() -> None:
    """Cached wrappers for :func:`cep_gpu.kernels.cpu.always_valid` (steps with nothing to check),
    made once per process."""
    global _TRIVIAL_DONE
    if _TRIVIAL_DONE:
        return
    from ..kernels.cpu import always_valid

    source = wrapper_source(["always_valid"], STEP_KERNELS)
    ns = load_kernels(source, "<cep_gpu always_valid kernels>", {"numba": numba, "always_valid": always_valid})
    specialise_all(ns, ["always_valid"], STEP_KERNELS)
    _TRIVIAL_DONE = True
