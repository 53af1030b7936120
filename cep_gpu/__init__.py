"""cep-gpu: complex event detection with the Column Delayed Processing algorithm on CPU and GPU.

Public API (docs/api.md)::

    rule = cep_gpu.parse_rule(text)
    rules = cep_gpu.parse_rules(text)
    out = cep_gpu.detect(events, rules, backend="auto", time_unit="s")
    engine = cep_gpu.Engine(rules, backend="auto")
"""

# (no `from __future__ import annotations` here: it would list `annotations` in dir(cep_gpu))
from .detect import detect
from .errors import (
    ArgumentError,
    BackendUnavailableError,
    CepError,
    CepWarning,
    EngineClosedError,
    EventError,
    LateEventError,
    RuleError,
    RuleSyntaxError,
)
from .language import parse_rule, parse_rules
from .model import Rule
from .version import __version__ as __version__

__all__ = [
    "ArgumentError",
    "BackendUnavailableError",
    "CepError",
    "CepWarning",
    "Engine",
    "EngineClosedError",
    "EventError",
    "LateEventError",
    "Rule",
    "RuleError",
    "RuleSyntaxError",
    "detect",
    "parse_rule",
    "parse_rules",
]


def __getattr__(name: str):
    if name == "Engine":  # imported lazily: the streaming engine pulls in the backends
        from .engine import Engine

        return Engine
    raise AttributeError(f"module 'cep_gpu' has no attribute {name!r}")


def __dir__() -> list[str]:
    """The public API (``Engine`` included, which is imported on first use)."""
    return sorted(set(__all__) | {"__version__"} | {k for k in globals() if k.startswith("__")})
