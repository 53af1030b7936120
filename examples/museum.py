"""The museum example lives in the package as :mod:`cep_gpu.museum` (so the CLI and benchmarks can
use it from an installed wheel); this module re-exports it for scripts in examples/."""

from cep_gpu.museum import MIX, MUSEUM_RULES, generate_museum

__all__ = ["MIX", "MUSEUM_RULES", "generate_museum"]
