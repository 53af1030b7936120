"""The error type of :mod:`cep_gpu.muse`."""

from __future__ import annotations

from ..errors import CepError


class MuseError(CepError, ValueError):
    """A network, query, plan or stream that MuSE planning or simulation cannot use.

    The message names the node, type, query or column at fault.
    """
