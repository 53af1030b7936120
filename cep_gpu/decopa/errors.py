"""The error type of :mod:`cep_gpu.decopa`."""

from __future__ import annotations

from ..errors import CepError


class DecompositionError(CepError, ValueError):
    """A rule, statistics, units or plan that DecoPa cannot plan or execute.

    The message names the feature, alias, operator or argument at fault.
    """
