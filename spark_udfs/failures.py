"""The cep_gpu error behind a failed Spark action.

An error that the engine (or a row check) raises inside a Spark task reaches the driver only at an
action (``toPandas()``, a write, a streaming query's ``processAllAvailable()``), wrapped in
PySpark's ``PythonException``, ``SparkRuntimeException`` or ``StreamingQueryException`` whose text
holds the worker's whole traceback (and, for a stream, the query's plan). :func:`engine_errors`
turns such a failure back into the cep_gpu error the task raised, with its one-line message; the
``cep-gpu spark`` command reports failed tasks through the same :func:`spark_cep_error`.

No import of PySpark here: the checks import it only when a failure is being looked at.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator

from cep_gpu import errors

__all__ = ["engine_errors", "spark_cep_error"]

#: where the raised exception of a Python worker's traceback is named, or a JVM row check's
#: ``raise_error`` message (``checks.PREFIX``) starts. Not a plain search for
#: ``cep_gpu.errors.X:``, which a stream's error text also holds inside its query plan: the
#: row checks' messages are literals of ``raise_error(...)`` expressions there.
_MARKS = re.compile(r"Traceback \(most recent call last\):|\[USER_RAISED_EXCEPTION\] (?=cep_gpu\.errors\.)")
_OURS = re.compile(r"cep_gpu\.errors\.(\w+): ?(.*)")
#: Spark's SQL states, appended to the message (on its line, or on the next one)
_SQLSTATE = re.compile(r"(\s*SQLSTATE: \w+)+\s*$")


def _raised_line(text: str) -> str | None:
    """The line that names the exception the last failure in ``text`` raised: the first line of
    the last Python traceback that is not one of its frames, or the message of a JVM row check
    (``[USER_RAISED_EXCEPTION] ...``); None when ``text`` has neither."""
    marks = list(_MARKS.finditer(text))
    if not marks:
        return None
    last = marks[-1]
    rest = text[last.end():]
    if last.group().startswith("["):  # a row check that failed in the JVM: its message follows
        return rest.split("\n", 1)[0]
    for line in rest.split("\n")[1:]:
        # frames, their source lines and carets are indented; the exception line is not
        if line and not line[0].isspace():
            return line
    return None


def error_from_text(text: str) -> errors.CepError | None:
    """The cep_gpu error named by the exception a failed Spark action's ``text`` reports as raised
    (see :func:`_raised_line`), with its one-line message; None when that exception is not a
    cep_gpu error (or ``text`` names none). A name this process's ``cep_gpu.errors`` lacks (another
    version on the workers) gives a :class:`~cep_gpu.errors.CepError`."""
    line = _raised_line(text)
    found = _OURS.match(line) if line is not None else None
    if found is None:
        return None
    name, message = found.groups()
    message = _SQLSTATE.sub("", message).strip()
    cls = getattr(errors, name, None)
    if not (isinstance(cls, type) and issubclass(cls, errors.CepError)):
        cls = errors.CepError
    try:
        return cls(message)
    except TypeError:
        # a class made from more than its message (RuleSyntaxError, UsageError): that class, with
        # the text, rather than a wrong class
        err = cls.__new__(cls)
        Exception.__init__(err, message)
        err.message = message
        return err


def _spark_failure_types() -> tuple[type, ...]:
    found: list[type] = []
    try:
        from pyspark.errors import PySparkException

        found.append(PySparkException)
    except ImportError:
        pass
    try:
        from py4j.protocol import Py4JJavaError  # an action PySpark does not convert (RDD API)

        found.append(Py4JJavaError)
    except ImportError:
        pass
    return tuple(found)


def spark_cep_error(err: BaseException) -> errors.CepError | None:
    """The cep_gpu error a Spark task raised, when ``err`` is PySpark's (or Py4J's) report of a
    failed action whose raised exception is one (:func:`error_from_text`); else None."""
    if isinstance(err, errors.CepError):  # raised in this process: nothing to unwrap
        return None
    types = _spark_failure_types()
    if not types or not isinstance(err, types):
        return None
    try:
        text = str(err)  # (a Py4JJavaError asks the JVM for its text)
    except Exception:  # a JVM gone away: the original failure is what the user should see
        return None
    return error_from_text(text)


@contextlib.contextmanager
def engine_errors() -> Iterator[None]:
    """Re-raise a cep_gpu error raised inside a Spark task as that error.

    ::

        with engine_errors():
            out.toPandas()      # or out.write..., query.processAllAvailable(), ...

    A failed action whose task raised a cep_gpu error (the engine's ``RuleError`` for a value
    of the wrong type, a row check's ``EventError`` for a null ``ts``, ...) comes out of the block
    as that class with its one-line message, raised ``from None`` (no PySpark exception and JVM
    trace chained to it). Anything else passes through unchanged: other Spark failures, errors
    the driver raised itself. Also a decorator (``@engine_errors()``).
    """
    import warnings

    try:
        with warnings.catch_warnings():
            # toPandas() warns with the task's whole trace before it raises the same failure,
            # which comes out of this block on one line (or unchanged)
            warnings.filterwarnings("ignore", "toPandas attempted Arrow optimization", UserWarning)
            yield
    except Exception as err:
        ours = spark_cep_error(err)
        if ours is None:
            raise
        raise ours from None
