"""The error types of the public API."""

from __future__ import annotations

import math
import numbers


class CepError(Exception):
    """Base class of every error cep-gpu raises on purpose."""


class RuleSyntaxError(CepError, SyntaxError):
    """Rule text that does not parse.

    Carries ``line`` and ``column`` (1-based), the offending ``text`` and the tokens that were
    ``expected`` there; ``str(err)`` shows the rule line with a caret under the spot.
    """

    def __init__(
        self,
        message: str,
        *,
        line: int,
        column: int,
        text: str = "",
        expected: tuple[str, ...] = (),
    ) -> None:
        self.message = message
        self.line = line
        self.column = column
        self.rule_text = text
        self.expected = tuple(expected)
        super().__init__(_located(message, line, column, text))

    def __str__(self) -> str:  # SyntaxError would otherwise format its own way
        return self.args[0]


class RuleError(CepError, ValueError):
    """A rule that parses but makes no sense (unknown reference, unbound parameter, ...).

    ``line``/``column`` point at the spot in the rule text when known.
    """

    def __init__(
        self, message: str, *, line: int | None = None, column: int | None = None, text: str = ""
    ) -> None:
        self.message = message
        self.line = line
        self.column = column
        self.rule_text = text
        super().__init__(_located(message, line, column, text) if line else message)


class EventError(CepError, ValueError):
    """Event input that cannot be processed; the message names the column or event at fault."""


class LateEventError(EventError):
    """An event older than the newest one already published, with no ``allowed_lateness``."""


class ArgumentError(CepError, ValueError):
    """A bad argument to a public function or class (``Engine``, ``subscribe``, ...); the message
    names the argument and what it accepts."""


class UsageError(ArgumentError):
    """A bad command-line argument found after parsing: ``cep_gpu.cli.main`` prints it on one
    line, as argparse prints its own (``PROG: error: argument OPTION: MESSAGE``), and returns 2.
    Here rather than in ``cli``, so that ``python -m cep_gpu.cli`` has the same class."""

    def __init__(self, option: str, message: str) -> None:
        self.option = option
        super().__init__(f"argument {option}: {message}")


class EngineClosedError(CepError, RuntimeError):
    """An :class:`~cep_gpu.Engine` used after :meth:`~cep_gpu.Engine.flush` ended its input."""


class BackendUnavailableError(CepError, RuntimeError):
    """The requested backend cannot run here (for example ``gpu`` without a usable device)."""


def _located(message: str, line: int | None, column: int | None, text: str) -> str:
    if not line:
        return message
    out = f"{message} (line {line}, column {column})"
    lines = text.splitlines()
    if text and 1 <= line <= len(lines):
        src = lines[line - 1]
        out += f"\n    {src}\n    {' ' * max((column or 1) - 1, 0)}^"
    return out


class MatchLimitError(CepError, RuntimeError):
    """A rule whose estimated number of matches exceeds ``max_matches`` (Kleene closure: the
    subsets of a long candidate range). Raised before the matches are built; nothing is truncated.
    The message names the rule, the estimate and how to bound it."""


class UnsupportedFeatureError(CepError, NotImplementedError):
    """A rule uses a feature that the chosen backend does not implement; the message names the
    feature and the backends that do."""


class CepWarning(UserWarning):
    """Something in the input that cep-gpu handled by a documented rule the user may not expect
    (a value that its declared type cannot hold becomes null, say); the message names it."""


def is_finite_nonnegative(value: object) -> bool:
    """A real number (a bool is not one) that is finite and >= 0: what every duration, cost and
    rate argument takes. One test for all of them, so that they accept the same values (NumPy
    scalars included)."""
    return (isinstance(value, numbers.Real) and not isinstance(value, bool)
            and math.isfinite(value) and value >= 0)


def is_finite_positive(value: object) -> bool:
    """As :func:`is_finite_nonnegative`, and > 0: what every bound, rate and capacity that
    divides something takes."""
    return is_finite_nonnegative(value) and value > 0
