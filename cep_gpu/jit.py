"""Numba compilation with the on-disk cache of cep-gpu (issue 11, cold start).

:func:`cache_dir` is the directory of the generated kernels (:mod:`cep_gpu.codegen.cache`);
:func:`cached_njit` compiles the package's own fixed kernels with Numba's ``cache=True`` (Numba
keeps them in the package's ``__pycache__`` or, where that is read-only, its user cache dir), so
that a second process loads them instead of compiling again. ``CEP_GPU_CACHE_DIR=off`` turns both
off.
"""

from __future__ import annotations

import os
import types
from pathlib import Path

import numba

__all__ = ["cache_dir", "cached_njit"]

_OFF = {"off", "0", "none", "false", "no", ""}


def cache_dir() -> Path | None:
    """``$CEP_GPU_CACHE_DIR`` if set (``off``, ``0``, ``none`` or empty: no disk cache), else
    ``$XDG_CACHE_HOME/cep-gpu/kernels``, else ``~/.cache/cep-gpu/kernels``."""
    env = os.environ.get("CEP_GPU_CACHE_DIR")
    if env is not None:
        return None if env.strip().lower() in _OFF else Path(env).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "cep-gpu" / "kernels"


def cached_njit(func, variant: str = "", **flags):
    """``numba.njit(cache=True, **flags)(func)``; ``variant`` names a separately cached copy (Numba
    keys its cache files by the function's name, not by flags such as ``parallel``). Falls back
    to ``cache=False`` when caching is off or Numba finds no writable location."""
    if variant:
        copy = types.FunctionType(func.__code__, func.__globals__, func.__name__, func.__defaults__,
                                  func.__closure__)
        copy.__qualname__ = f"{func.__qualname__}__{variant}"
        copy.__doc__ = func.__doc__
        func = copy
    if cache_dir() is not None:
        try:
            return numba.njit(cache=True, **flags)(func)
        except RuntimeError:  # "cannot cache function ...: no locator available"
            pass
    return numba.njit(cache=False, **flags)(func)
