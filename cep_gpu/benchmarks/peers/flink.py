"""Apache Flink as a peer on the seq3 benchmark: the pattern in Flink SQL ``MATCH_RECOGNIZE``.

Flink SQL has no skip-till-any-match (it would be needed for seq3's ``each``): a
``MATCH_RECOGNIZE`` match is a run of rows of one partition that a regular expression over
pattern variables accepts, and ``AFTER MATCH SKIP TO NEXT ROW`` keeps only the first match that
completes for each starting row. So only seq3's ``last`` is measured, in two translations
(``PARTITION BY k`` gives the ``k=$k`` parameter; ``NA`` / ``NB`` are "any row that is not an A /
not a B" and give relaxed contiguity where it is needed and strict exclusion where ``last`` needs
it; windows are ``DEFINE`` conditions on the bound rows, edges inclusive as in DESIGN.md 3.3):

``last`` (batch only), anchored at C, over the events in *reversed* time::

    PATTERN (C NB* B NA* A)   C: type='C'   B: type='B' AND C.ts - B.ts <= WIN
                              A: type='A' AND B.ts - A.ts <= WIN
    AFTER MATCH SKIP TO NEXT ROW

  Read backwards from each C, the first B is the most recent B before C and the first A after it
  the most recent A before that B: exactly cep-gpu's ``last B within WIN from C and last A within
  WIN from B``, one match per C; the match sets are equal, so the counts must be equal. Reversed
  event time is only possible on a bounded input, hence batch only.

``skip-to-next`` (batch and streaming), anchored at A, in event time::

    PATTERN (A NA*? B NB*? C)   B: type='B' AND B.ts - A.ts <= WIN
                                C: type='C' AND C.ts - B.ts <= WIN
    AFTER MATCH SKIP TO NEXT ROW

  No A between A and B and no B between B and C makes B the last B before C and A the last A
  before B, so every Flink match is a cep-gpu ``last`` match; SKIP TO NEXT ROW reports one per A,
  the one with the earliest C. Its count equals the number of distinct A in cep-gpu's ``last``
  output, and its matches are those with the earliest C per A (:func:`expected_matches`).
  (``NA*`` must be reluctant: greedy, it would swallow the B that ``B`` needs and nothing matches.)

The Flink side runs in a separate process (:mod:`.flink_worker`) under an interpreter that has
``apache-flink``; the JVM start-up is timed once per peer and reported apart from the queries.
"""

from __future__ import annotations

import importlib.util
import json
import os
import queue
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from ...errors import ArgumentError, BackendUnavailableError

#: where ``make peers`` puts the Flink environment (relative to the repository root)
FLINK_VENV = ".venv-flink"
#: environment variable naming the Python interpreter that has apache-flink
FLINK_PYTHON_ENV = "CEP_GPU_FLINK_PYTHON"
WORKER = Path(__file__).with_name("flink_worker.py")
TAG = "@@cep-gpu-flink@@ "


@dataclass(frozen=True)
class Variant:
    """One translation of seq3 ``last`` into ``MATCH_RECOGNIZE``."""

    name: str
    table: str
    pattern: str
    define: str
    modes: tuple[str, ...]
    anchor: str
    semantics: str


VARIANTS = {
    "last": Variant(
        "last", "evr", "(C NB* B NA* A)",
        "C AS C.type = 'C', NB AS NB.type <> 'B', B AS B.type = 'B' AND C.ts - B.ts <= {w}, "
        "NA AS NA.type <> 'A', A AS A.type = 'A' AND B.ts - A.ts <= {w}",
        ("batch",), "C",
        "PATTERN (C NB* B NA* A) over reversed event time, AFTER MATCH SKIP TO NEXT ROW: one match "
        "per C, the same matches as cep-gpu seq3 last",
    ),
    "skip-to-next": Variant(
        "skip-to-next", "ev", "(A NA*? B NB*? C)",
        "A AS A.type = 'A', NA AS NA.type <> 'A', B AS B.type = 'B' AND B.ts - A.ts <= {w}, "
        "NB AS NB.type <> 'B', C AS C.type = 'C' AND C.ts - B.ts <= {w}",
        ("batch", "streaming"), "A",
        "PATTERN (A NA*? B NB*? C) in event time, AFTER MATCH SKIP TO NEXT ROW: one match per A "
        "(its earliest C), the distinct A of cep-gpu seq3 last",
    ),
}


def _check_variant(variant: str, mode: str | None = None) -> Variant:
    if variant not in VARIANTS:
        raise ArgumentError(f"unknown Flink variant {variant!r}; choose {', '.join(VARIANTS)}")
    v = VARIANTS[variant]
    if mode is not None and mode not in v.modes:
        raise ArgumentError(f"Flink variant {variant!r} runs in {' or '.join(v.modes)} mode, not {mode!r}"
                            + (" (reversed event time needs a bounded input)" if variant == "last" else ""))
    return v


def match_recognize(window_ms: int, variant: str = "last") -> str:
    """The ``SELECT`` that finds seq3 matches in Flink SQL: columns a_ts, b_ts, c_ts, mrt."""
    v = _check_variant(variant)
    window_ms = int(window_ms)
    if window_ms < 0:
        raise ArgumentError(f"window must be >= 0 ms, got {window_ms}")
    return (
        f"SELECT a_ts, b_ts, c_ts, k, mrt FROM {v.table} MATCH_RECOGNIZE (\n"
        "  PARTITION BY k ORDER BY rt\n"
        "  MEASURES A.ts AS a_ts, B.ts AS b_ts, C.ts AS c_ts, MATCH_ROWTIME() AS mrt\n"
        "  ONE ROW PER MATCH\n"
        "  AFTER MATCH SKIP TO NEXT ROW\n"
        f"  PATTERN {v.pattern}\n"
        f"  DEFINE {v.define.format(w=window_ms)}\n"
        ") AS m"
    )


def count_query(window_ms: int, variant: str, mode: str) -> tuple[list[str], str]:
    """(view statements, query) that count the matches; the query's rows sum to the count.

    Streaming mode counts per one-day event-time window (an append-only result; a plain
    ``COUNT(*)`` would stream every update of the count back)."""
    _check_variant(variant, mode)
    views = ["DROP TEMPORARY VIEW IF EXISTS seq3_matches",
             f"CREATE TEMPORARY VIEW seq3_matches AS {match_recognize(window_ms, variant)}"]
    if mode == "batch":
        return views, "SELECT COUNT(*) FROM seq3_matches"
    return views, ("SELECT COUNT(*) FROM TABLE(TUMBLE(TABLE seq3_matches, DESCRIPTOR(mrt), "
                   "INTERVAL '1' DAY)) GROUP BY window_start, window_end")


def expected_matches(composites, events, variant: str = "last") -> set[tuple[int, int, int]]:
    """The (A.ts, B.ts, C.ts) that Flink must find, from cep-gpu's seq3 ``last`` output.

    ``composites``: ``cep_gpu.detect(events, seq3_rule(W, "last"))`` (its ``ids`` are row
    indices of ``events`` in the order C, B, A).
    """
    v = _check_variant(variant)
    ts = events["ts"].to_numpy()
    triples = [(int(ts[i[2]]), int(ts[i[1]]), int(ts[i[0]])) for i in composites["ids"]]
    if v.anchor == "C":
        return set(triples)
    earliest: dict[int, tuple[int, int, int]] = {}
    for t in triples:
        if t[0] not in earliest or t[2] < earliest[t[0]][2]:
            earliest[t[0]] = t
    return set(earliest.values())


def expected_count(composites, events, variant: str = "last") -> int:
    """How many matches Flink's ``variant`` must count (see :func:`expected_matches`)."""
    if _check_variant(variant).anchor == "C":
        return len(composites)
    return len(expected_matches(composites, events, variant))


def check_events(events) -> None:
    """:class:`ArgumentError` unless ``events`` can go to Flink: columns type, ts (integer ms), k,
    and distinct timestamps (Flink orders equal event times arbitrarily, while cep-gpu never
    lets one precede another, so the match sets could differ)."""
    missing = [c for c in ("type", "ts", "k") if c not in events.columns]
    if missing:
        raise ArgumentError(f"seq3 events for Flink need columns type, ts, k; missing {', '.join(missing)}")
    if events["ts"].dtype.kind not in "iu":
        raise ArgumentError(f"seq3 events for Flink need integer ts (ms), got dtype {events['ts'].dtype}")
    if not events["ts"].is_unique:
        raise ArgumentError("the Flink comparison needs distinct timestamps (Flink orders equal event "
                            "times arbitrarily; cep-gpu never sequences them)")


# ----------------------------------------------------------------------------------------------
# finding Flink


def find_flink_python() -> str | None:
    """An interpreter that can import pyflink: ``$CEP_GPU_FLINK_PYTHON``, this one, or
    ``.venv-flink/bin/python`` of the current directory or of the repository; None if none."""
    env = os.environ.get(FLINK_PYTHON_ENV)
    if env:
        return env
    if importlib.util.find_spec("pyflink") is not None:
        return sys.executable
    for root in (Path.cwd(), Path(__file__).resolve().parents[3]):
        cand = root / FLINK_VENV / "bin" / "python"
        if cand.exists():
            return str(cand)
    return None


def flink_unavailable() -> str | None:
    """None if the Flink peer can run here, else why not (Java or apache-flink missing)."""
    dirs = [str(Path(os.environ["JAVA_HOME"]) / "bin")] if os.environ.get("JAVA_HOME") else []
    java = shutil.which("java", path=os.pathsep.join([*dirs, os.environ.get("PATH", "")]))
    if java is None:
        return "Java is not installed (Flink needs Java 11 or 17 on PATH or in JAVA_HOME)"
    py = find_flink_python()
    if py is None:
        return (f"apache-flink is not installed: run `make peers` (a separate {FLINK_VENV}: in "
                f"cep-gpu's own environment it would downgrade pyarrow, numpy, pandas and py4j), or "
                f"set {FLINK_PYTHON_ENV} to a Python that has it")
    try:
        subprocess.run([py, "-c", "import pyflink"], check=True, capture_output=True, timeout=120)
    except (OSError, subprocess.SubprocessError) as exc:
        return f"{py} cannot import pyflink ({type(exc).__name__})"
    return None


class FlinkPeer:
    """A running Flink worker: ``start()`` (JVM start-up, timed), ``count(...)``, ``close()``.

    Use as a context manager. ``parallelism``: Flink's default parallelism (1: one task slot per
    operator, like cep-gpu's single-threaded CPU backend). ``warm``: run a first trivial job in
    each mode at start (its cost is start-up, not any query's); tests skip it. ``timeout_s``: the
    longest one request may take; past it the worker (and its JVM) is killed and
    :class:`BackendUnavailableError` raised.
    """

    def __init__(self, python: str | None = None, parallelism: int = 1, warm: bool = True,
                 timeout_s: float = 1800.0):
        why = None if python else flink_unavailable()
        if why:
            raise BackendUnavailableError(f"Flink peer unavailable: {why}")
        self.python = python or find_flink_python()
        self.parallelism = int(parallelism)
        self.warm = warm
        self.timeout_s = float(timeout_s)
        self._lines: queue.Queue = queue.Queue()
        self.info: dict = {}
        self._proc: subprocess.Popen | None = None
        self._log = tempfile.TemporaryFile(mode="w+")
        self._dir = tempfile.TemporaryDirectory(prefix="cep-gpu-flink-")
        self._csv_key: tuple | None = None

    def __enter__(self) -> FlinkPeer:
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def start(self) -> dict:
        """Start the worker, its JVM and the batch and streaming environments; the times."""
        t0 = time.perf_counter()
        # its own process group: the JVM that pyflink starts goes with it if it must be killed
        self._proc = subprocess.Popen([self.python, str(WORKER)], stdin=subprocess.PIPE,
                                      stdout=subprocess.PIPE, stderr=self._log, text=True, bufsize=1,
                                      start_new_session=True)
        threading.Thread(target=self._read, args=(self._proc.stdout,), daemon=True).start()
        self.info = self._ask({"op": "start", "parallelism": self.parallelism, "warm": self.warm})
        self.info["process_start_s"] = time.perf_counter() - t0
        self.info["parallelism"] = self.parallelism
        self.info["python"] = self.python
        return self.info

    def close(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            try:
                self._ask({"op": "quit"})
                self._proc.wait(timeout=60)
            except Exception:  # a worker that hangs on exit is killed, not waited for
                self._kill()
        self._proc = None
        self._dir.cleanup()

    def _kill(self) -> None:
        if self._proc is not None:
            try:
                os.killpg(self._proc.pid, signal.SIGKILL)  # the group of the worker we started
            except OSError:
                pass
            self._proc.wait()

    def _read(self, stream) -> None:
        """Reader thread: the worker's stdout lines into a queue (None at its end)."""
        for line in stream:
            self._lines.put(line)
        self._lines.put(None)

    def _ask(self, req: dict) -> dict:
        if self._proc is None or self._proc.poll() is not None:
            raise BackendUnavailableError("the Flink worker is not running" + self._log_tail())
        try:
            self._proc.stdin.write(json.dumps(req) + "\n")
            self._proc.stdin.flush()
        except OSError:  # it died since: say what it printed
            self._proc.wait()
            raise BackendUnavailableError("the Flink worker exited" + self._log_tail()) from None
        deadline = time.monotonic() + self.timeout_s
        while True:
            try:
                line = self._lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                self._kill()
                raise BackendUnavailableError(f"the Flink worker did not answer {req.get('op')!r} in "
                                              f"{self.timeout_s:g} s and was stopped"
                                              + self._log_tail()) from None
            if line is None:
                raise BackendUnavailableError("the Flink worker exited" + self._log_tail())
            if line.startswith(TAG):
                ans = json.loads(line[len(TAG):])
                if not ans.pop("ok"):
                    raise RuntimeError(f"Flink: {ans.get('error')}\n{ans.get('traceback', '')}")
                return ans

    def _log_tail(self) -> str:
        self._log.seek(0)
        tail = self._log.read()[-2000:]
        return f"; its output ends with:\n{tail}" if tail else ""

    def _csv(self, events) -> str:
        """The events as the CSV the worker reads (written once per distinct input)."""
        check_events(events)
        import pandas as pd

        # by content, not identity: a new frame may reuse a freed one's id
        key = (len(events), int(pd.util.hash_pandas_object(events[["type", "ts", "k"]], index=False).sum()))
        if self._csv_key != key:
            frame = events[["type", "ts", "k"]].copy()
            frame["v"] = events["v"] if "v" in events.columns else 0.0
            # in time order: streaming mode's watermark (WATERMARK FOR rt AS rt) drops late rows
            frame = frame.sort_values("ts", kind="stable")
            # a fresh file name per input: the worker keys its tables on the path
            path = Path(self._dir.name) / f"events-{time.perf_counter_ns()}.csv"
            frame.to_csv(path, index=False, header=False)
            self._csv_key, self._csv_path = key, str(path)
        return self._csv_path

    def count(self, events, window_ms: int, variant: str = "last", mode: str = "batch",
              warmup: int = 1, repeat: int = 3) -> dict:
        """Count the seq3 matches of ``variant``: {count, times_s, ...}. Each time is one whole
        Flink job (planning, CSV read, sort, match, count), the JVM already running."""
        views, sql = count_query(window_ms, variant, mode)
        ans = self._ask({"op": "run", "path": self._csv(events), "mode": mode, "views": views,
                         "sql": sql, "warmup": warmup, "repeat": repeat, "count_column": True})
        return {"count": ans["count"], "times_s": ans["times_s"]}

    def matches(self, events, window_ms: int, variant: str = "last",
                mode: str = "batch") -> set[tuple[int, int, int]]:
        """The (A.ts, B.ts, C.ts) of every match Flink finds (for tests, on small inputs)."""
        views, _ = count_query(window_ms, variant, mode)
        ans = self._ask({"op": "run", "path": self._csv(events), "mode": mode, "views": views,
                         "sql": "SELECT a_ts, b_ts, c_ts FROM seq3_matches", "repeat": 1,
                         "rows": True})
        return {tuple(int(x) for x in r) for r in ans["rows"]}

    def scan(self, events, mode: str = "batch", repeat: int = 3, warmup: int = 1) -> list[float]:
        """Times of ``SELECT COUNT(*)`` over the input: the per-job overhead and CSV read."""
        ans = self._ask({"op": "run", "path": self._csv(events), "mode": mode,
                         "sql": "SELECT COUNT(*) FROM ev", "warmup": warmup, "repeat": repeat})
        return ans["times_s"]
