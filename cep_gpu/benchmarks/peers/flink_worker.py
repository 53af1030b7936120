"""The Flink side of the Flink peer: a long-lived process that runs seq3 queries on PyFlink.

It is started by :class:`cep_gpu.benchmarks.peers.flink.FlinkPeer` as a plain script
(``python flink_worker.py``) under an interpreter that has ``apache-flink`` installed, which is
usually *not* cep-gpu's own environment: apache-flink 2.3 (with apache-beam) would downgrade
pyarrow, numpy, pandas and py4j there (see docs/performance.md, "Against other engines"). So this
file imports only the standard library and pyflink, never cep_gpu.

Protocol: one JSON object per line on stdin; one answer per request on stdout, on a line that
starts with :data:`TAG` (anything else on stdout is the JVM's or Flink's own output). Requests:

* ``{"op": "start", "parallelism": 1, "warm": true}``: start the JVM and both table
  environments (and, with ``warm``, run a first trivial job in each); answers the start-up times.
* ``{"op": "run", "path": CSV, "mode": "batch"|"streaming", "views": [SQL, ...], "sql": QUERY,
  "warmup": W, "repeat": R, "count_column": true, "rows": false}``: registers the CSV (type, ts,
  k, v) as table ``ev`` (event time ``ts``) and ``evr`` (the same events in reversed time), runs
  the ``views`` statements (temporary views: no job), then ``QUERY`` W + R times; answers every
  measured time, the sum of the first column of the last run's rows (``count_column``) and, with
  ``rows``, the rows themselves.
* ``{"op": "quit"}``.
"""

from __future__ import annotations

import json
import sys
import time
import traceback

TAG = "@@cep-gpu-flink@@ "
#: event time origin of the reversed table: far enough to keep every reversed time positive
REVERSE_ORIGIN_MS = 4_000_000_000_000

_envs: dict = {}
_tables: dict = {}


def _answer(obj: dict) -> None:
    sys.stdout.write(TAG + json.dumps(obj) + "\n")
    sys.stdout.flush()


def _start(parallelism: int, warm: bool = True) -> dict:
    t0 = time.perf_counter()
    from pyflink.table import EnvironmentSettings, TableEnvironment

    t_import = time.perf_counter() - t0
    out = {"import_s": t_import}
    for mode in ("batch", "streaming"):
        t1 = time.perf_counter()
        settings = (EnvironmentSettings.in_batch_mode() if mode == "batch"
                    else EnvironmentSettings.in_streaming_mode())
        env = TableEnvironment.create(settings)
        env.get_config().set("parallelism.default", str(parallelism))
        _envs[mode] = env
        out[f"{mode}_env_s"] = time.perf_counter() - t1
        if warm:  # the first job of a mini-cluster pays its start: not in any measured job
            t1 = time.perf_counter()
            _collect(env, "SELECT 1")
            out[f"{mode}_first_job_s"] = time.perf_counter() - t1
    out["jvm_start_s"] = time.perf_counter() - t0
    import importlib.metadata as md

    out["flink_version"] = md.version("apache-flink")
    out["java_version"] = _java_version()
    return out


def _java_version() -> str:
    from pyflink.java_gateway import get_gateway

    return str(get_gateway().jvm.System.getProperty("java.version"))


def _collect(env, sql: str) -> list:
    with env.execute_sql(sql).collect() as rows:
        return [tuple(r) for r in rows]


def _register(mode: str, path: str) -> None:
    """Tables ``ev`` (event time ts) and ``evr`` (reversed event time) over the CSV file."""
    if _tables.get(mode) == path:
        return
    env = _envs[mode]
    for name, rt in (("ev", "TO_TIMESTAMP_LTZ(ts, 3)"),
                     ("evr", f"TO_TIMESTAMP_LTZ({REVERSE_ORIGIN_MS} - ts, 3)")):
        env.execute_sql(f"DROP TEMPORARY TABLE IF EXISTS {name}")
        path_sql = path.replace("'", "''")
        env.execute_sql(
            f"CREATE TEMPORARY TABLE {name} (type STRING, ts BIGINT, k BIGINT, v DOUBLE, "
            f"rt AS {rt}, WATERMARK FOR rt AS rt) "
            f"WITH ('connector' = 'filesystem', 'path' = '{path_sql}', 'format' = 'csv')")
    _tables[mode] = path


def _run(req: dict) -> dict:
    mode = req["mode"]
    _register(mode, req["path"])
    env = _envs[mode]
    for stmt in req.get("views", []):
        env.execute_sql(stmt)
    times, rows = [], []
    for i in range(int(req.get("warmup", 0)) + int(req.get("repeat", 1))):
        t0 = time.perf_counter()
        rows = _collect(env, req["sql"])
        dt = time.perf_counter() - t0
        if i >= int(req.get("warmup", 0)):
            times.append(dt)
    out = {"times_s": times, "n_rows": len(rows)}
    if req.get("count_column"):
        out["count"] = sum(int(r[0]) for r in rows)
    if req.get("rows"):
        out["rows"] = rows
    return out


def main() -> None:
    for line in sys.stdin:
        if not line.strip():
            continue
        try:
            req = json.loads(line)
            op = req.get("op")
            if op == "quit":
                _answer({"ok": True})
                return
            if op == "start":
                _answer({"ok": True, **_start(int(req.get("parallelism", 1)), bool(req.get("warm", True)))})
            elif op == "run":
                _answer({"ok": True, **_run(req)})
            else:
                _answer({"ok": False, "error": f"unknown op {op!r}"})
        except Exception as exc:  # the parent reports it; the worker stays up for the next request
            _answer({"ok": False, "error": f"{type(exc).__name__}: {exc}",
                     "traceback": traceback.format_exc()[-4000:]})


if __name__ == "__main__":
    main()
