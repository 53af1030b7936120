"""The CUDA sources of the kernels: the ``cuda/`` folder, the translation unit of one rule, the text
NVRTC compiles, and the hashes that key the compile caches."""

from __future__ import annotations

import hashlib
import re
from importlib import resources
from pathlib import Path

#: Parameter kinds of each kernel in cuda/cdp.cu: "p" pointer, "i" int64.
KERNELS: dict[str, str] = {
    "cdp_each": "ppiipipppipppi",
    "cdp_select": "ppiiipipppip",
    "cdp_aggregates": "pppip",
    "cdp_kleene_elements": "ppipipppip",
    "cdp_kleene_sets": "ppiiiiiipipppipippppppppii",
}



def cuda_dir() -> Path:
    """The folder holding cdp.cuh, portable.cuh, cdp.cu (installed as package data)."""
    return Path(str(resources.files("cep_gpu.cuda")))



def full_source(rule_source: str) -> str:
    """The translation unit for one rule: its generated header, then the kernel wrappers."""
    return f'#include "cdp.cuh"\n{rule_source}\n#include "cdp.cu"\n'



def sources_digest(folder: Path | None = None) -> str:
    """A hash of every file in cuda/ (or ``folder``), part of every compile-cache key."""
    h = hashlib.sha256()
    for p in sorted((cuda_dir() if folder is None else Path(folder)).iterdir()):
        if p.suffix in (".cu", ".cuh", ".h"):
            h.update(p.name.encode())
            h.update(p.read_bytes())
    return h.hexdigest()[:24]



_INCLUDE = re.compile(r'^[ \t]*#[ \t]*include[ \t]*"([^"]+)"[ \t]*$', re.MULTILINE)



#: NVRTC options of the device build (CuPy adds the device's ``-arch``). No fast-math: the kernels'
#: null semantics rely on IEEE NaN comparisons and exact division.
NVRTC_OPTIONS: tuple[str, ...] = ("-std=c++17",)



def nvrtc_source(rule_source: str, folder: Path | None = None) -> str:
    """The translation unit of one rule with every ``#include "..."`` of ``cuda/`` written out, so
    that the text NVRTC compiles is everything it depends on: CuPy's on-disk kernel cache keys on
    that text and the options, and never reads the headers an ``-I`` path would bring in (an
    edited or upgraded ``cuda/`` would otherwise load a stale binary). Each file is written out
    once, where it is first included (they all have include guards); ``#line`` keeps compiler
    messages pointing at the right file and line. ``folder`` replaces ``cuda/`` (tests)."""
    folder = cuda_dir() if folder is None else Path(folder)
    done: set[str] = set()

    def expand(text: str, name: str) -> str:
        out, pos = [], 0
        for m in _INCLUDE.finditer(text):
            out.append(text[pos:m.start()])
            pos = m.end()
            inc = m.group(1)
            path = folder / inc
            if not path.is_file():
                raise FileNotFoundError(f"{name}: #include \"{inc}\" is not a file of {folder}")
            if inc in done:
                continue
            done.add(inc)
            line = text.count("\n", 0, m.end()) + 2  # the line after the directive
            out.append(f'#line 1 "{inc}"\n{expand(path.read_text(), inc)}\n#line {line} "{name}"')
        out.append(text[pos:])
        return "".join(out)

    digest = sources_digest(folder)
    return f"// cep-gpu kernels, cuda/ sources {digest}\n" + expand(full_source(rule_source), "rule.cu")



def compile_key(source: str, arch: str, options: tuple[str, ...], versions: tuple[str, ...]) -> str:
    """The key of one compiled module: the whole source text (:func:`nvrtc_source`), the device's
    compute capability, the NVRTC options, and the versions of CuPy, NVRTC and the CUDA driver."""
    h = hashlib.sha256()
    for part in (source, arch, *options, "|", *versions):
        h.update(part.encode())
        h.update(b"\0")
    return h.hexdigest()[:32]

