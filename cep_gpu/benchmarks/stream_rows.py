"""The streaming ``Engine``'s figures as rows of a seq3 sweep (``cep-gpu bench seq3 --stream``).

Reuses ``bench/stream_latency.py`` of the repository (its ``latency`` and ``throughput``
functions, loaded by path; nothing is duplicated here), so these rows exist only when cep-gpu runs
from a checkout. Two rows per (policy, window):

* ``stream-1``: a fresh ``Engine`` warmed with two windows (at most ``max_warm`` events) of
  one-event publishes, then
  ``stream_events`` more events published one by one (plain dicts, ``output="records"``); the
  row's time is their wall time, and ``latency_us`` has the per-publish percentiles (all events,
  terminators, others).
* ``stream-N``: the same seq3 input published as columnar micro-batches of N events, then
  ``flush``; it must find as many composite events as one batch ``detect`` (checked by
  ``throughput``).

Each is measured once per window (``times_s`` has one value); the us per terminator of both is
comparable with the batch rows' (wall time / terminators in the timed events).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "stream_latency.py"


def _module():
    if not SCRIPT.exists():
        return None
    spec = importlib.util.spec_from_file_location("_cep_gpu_stream_latency", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _one(v: float) -> dict[str, float]:
    return {"min": v, "median": v, "max": v}


def stream_rows(policy: str, window_ms: int, size_name: str, stream_events: int = 5000,
                micro_batch: int = 1000, micro_events: int = 30_000, backend: str = "cpu",
                seed: int = 0, max_warm: int = 20_000) -> list[dict]:
    """The ``stream-1`` and ``stream-<micro_batch>`` rows of one seq3 (policy, window)."""
    from .workloads import seq3_events, seq3_rule

    base = {"policy": policy, "size": window_ms, size_name: window_ms, "stream": True}
    names = ("stream-1", f"stream-{micro_batch}")
    mod = _module()
    if mod is None:
        return [base | {"backend": n, "status": "not measured",
                        "reason": f"{SCRIPT} is not there (streaming figures need a checkout)"} for n in names]
    rule = seq3_rule(window_ms, policy)
    rows = []
    try:
        warm = min(2 * window_ms, max_warm)  # recorded in the row: at 40 s windows it is < 2 windows
        events = seq3_events(warm + stream_events, seed=seed)
        lat = mod.latency(rule, events, backend, warm)
        lat.pop("us")
        terms = int((events["type"].iloc[warm:] == "C").sum())
        wall = lat["publishes"] / lat["events_per_s"]
        rows.append(base | _row(wall, stream_events, terms, lat["composites"]) | {
            "backend": names[0], "warm_events": warm,
            "latency_us": {k: lat[k] for k in ("all", "terminator", "other")}})
    except Exception as exc:
        rows.append(base | {"backend": names[0], "status": "error", "reason": f"{type(exc).__name__}: {exc}"})
    try:
        events = seq3_events(micro_events, seed=seed + 1)
        tp = mod.throughput(rule, events, backend, [micro_batch], "records")
        batch, micro = tp[0], next(r for r in tp if r["size"] == micro_batch)  # (batch rows come first)
        terms = int((events["type"] == "C").sum())
        rows.append(base | _row(micro["seconds"], micro_events, terms, micro["composites"]) | {
            "backend": names[1], "micro_batch": micro_batch, "batch_detect_s": batch["seconds"],
            "vs_batch": micro["vs_batch"]})
    except BaseException as exc:  # throughput() raises SystemExit when the counts differ
        if isinstance(exc, KeyboardInterrupt):
            raise
        rows.append(base | {"backend": names[1], "status": "error", "reason": f"{type(exc).__name__}: {exc}"})
    return rows


def _row(seconds: float, n: int, terms: int, composites: int) -> dict:
    return {"status": "ok", "n_events": n, "n_terminators": terms, "composites": composites,
            "composites_per_terminator": composites / terms if terms else 0.0,
            "times_s": [seconds], "seconds": _one(seconds), "events_per_s": _one(n / seconds),
            "us_per_terminator": _one(seconds / max(terms, 1) * 1e6),
            "us_per_event": _one(seconds / max(n, 1) * 1e6)}
