"""Peer rows of a benchmark sweep: the same input, at the same window, right after cep-gpu's runs.

:class:`PeerSession` is opened once per sweep (the JVM start-up is timed there and recorded in the
run's ``peers`` section, never inside a row); :meth:`PeerSession.rows` gives one row per peer for
one workload input, in the shape of :func:`cep_gpu.benchmarks.runner.time_detection`'s rows plus
``variant``, ``mode``, ``semantics``, ``expected_composites`` (what cep-gpu's equivalent rule
implies Flink must count), ``agree`` and ``job_overhead_s`` (a bare ``SELECT COUNT(*)`` over the
same file, batch mode: what every Flink job pays before matching).
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Iterable

from ...errors import ArgumentError, BackendUnavailableError
from . import PEERS

NO_EACH = ("Flink SQL MATCH_RECOGNIZE has no skip-till-any-match, so seq3 {policy} (every "
           "combination / the earliest) has no Flink equivalent; only last is compared")


def check_peers(names: Iterable[str]) -> list[str]:
    """``names`` as a list; :class:`ArgumentError` naming the known peers on an unknown one."""
    names = list(names)
    unknown = [n for n in names if n not in PEERS]
    if unknown:
        raise ArgumentError(f"unknown peer(s) {', '.join(map(repr, unknown))}; choose from {', '.join(PEERS)}")
    return names


def _summary(values: list[float]) -> dict[str, float]:
    return {"min": min(values), "median": statistics.median(values), "max": max(values)}


class PeerSession:
    """The peers of one sweep; ``info`` holds each peer's set-up (version, JVM start-up).

    ``flink``: an already started :class:`~.flink.FlinkPeer` to use (and leave open) instead of
    starting one."""

    def __init__(self, names: Iterable[str], parallelism: int = 1,
                 on_detail: Callable[[str], None] | None = None, workload: str = "seq3",
                 policies: Iterable[str] = ("last",), flink=None):
        self.names = check_peers(names)
        self.on_detail = on_detail
        self.info: dict = {}
        self._flink = flink
        self._own = flink is None
        self._why: str | None = None
        if self.names:
            from .flink import VARIANTS, FlinkPeer, flink_unavailable

            if workload != "seq3":
                self._why = (f"the Flink peers run seq3 only: the {workload} rules (each, negation, "
                             "aggregates, several rules) have no MATCH_RECOGNIZE translation here")
            elif "last" not in policies:  # nothing to run: no JVM
                self._why = NO_EACH.format(policy="/".join(policies))
            else:
                self._why = flink_unavailable()
            if self._why is None and self._flink is None:
                if on_detail:
                    on_detail("starting Flink (JVM)")
                try:
                    self._flink = FlinkPeer(parallelism=parallelism)
                    self._flink.start()
                except (BackendUnavailableError, RuntimeError, OSError) as exc:
                    self._why = f"Flink did not start: {exc}"
                    self._flink = None
            for n in self.names:
                variant, mode = PEERS[n]
                entry = {"engine": "Apache Flink SQL MATCH_RECOGNIZE (PyFlink)", "mode": mode,
                         "variant": variant, "semantics": VARIANTS[variant].semantics}
                if self._flink is not None:
                    entry.update(self._flink.info)
                else:
                    entry["status"] = f"not measured: {self._why}"
                self.info[n] = entry

    def close(self) -> None:
        if self._flink is not None and self._own:
            self._flink.close()
        self._flink = None

    def __enter__(self) -> PeerSession:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def rows(self, workload: str, work, policy: str, size: int, size_name: str, repeat: int,
             warmup: int) -> list[dict]:
        """One row per peer for this input (``work``: a :class:`~cep_gpu.benchmarks.workloads.Workload`)."""
        out = []
        expected = None
        overhead = None
        for name in self.names:
            variant, mode = PEERS[name]
            row = {"backend": name, "peer": True, "policy": policy, "size": size, size_name: size,
                   "variant": variant, "mode": mode}
            if workload != "seq3":
                row.update(status="not measured", reason=f"the {name} peer runs seq3 only: the "
                           f"{workload} rules (negation, aggregates, several rules) are not translated "
                           "to MATCH_RECOGNIZE")
            elif policy != "last":
                row.update(status="not measured", reason=NO_EACH.format(policy=policy))
            elif self._flink is None:
                row.update(status="not measured", reason=self._why)
            else:
                try:
                    if expected is None:
                        expected = _cep_gpu_last(work)
                    if overhead is None:
                        overhead = self._flink.scan(work.events, "batch", repeat=max(1, min(repeat, 3)),
                                                    warmup=min(warmup, 1))
                    row.update(self._measure(name, work, size, variant, mode, repeat, warmup))
                    from .flink import expected_count

                    row["expected_composites"] = expected_count(expected, work.events, variant)
                    row["agree"] = row["composites"] == row["expected_composites"]
                    row["job_overhead_s"] = _summary(overhead)
                except Exception as exc:  # one failing peer must not lose the sweep
                    row.update(status="error", reason=f"{type(exc).__name__}: {exc}")
            out.append(row)
        return out

    def _measure(self, name, work, size, variant, mode, repeat, warmup) -> dict:
        if self.on_detail:
            self.on_detail(f"{name}: {warmup} warm-up + {repeat} runs")
        res = self._flink.count(work.events, size, variant, mode, warmup=warmup, repeat=repeat)
        times = res["times_s"]
        n, terms = work.n_events, work.n_terminators
        return {
            "status": "ok",
            "n_events": n,
            "n_terminators": terms,
            "composites": res["count"],
            "composites_per_terminator": res["count"] / terms if terms else 0.0,
            "semantics": self.info[name]["semantics"],
            "times_s": times,
            "seconds": _summary(times),
            "events_per_s": _summary([n / t for t in times]),
            "us_per_terminator": _summary([t / max(terms, 1) * 1e6 for t in times]),
            "us_per_event": _summary([t / max(n, 1) * 1e6 for t in times]),
        }


def _cep_gpu_last(work):
    """cep-gpu's own seq3 ``last`` matches on this input (untimed; the peers' expected counts)."""
    import cep_gpu

    if work.params.get("policy") != "last":
        raise ArgumentError("the Flink peers compare against seq3 last only")
    return cep_gpu.detect(work.events, work.rules, backend="cpu", time_unit=work.time_unit)


def peers_table(run: dict, baseline: str = "cpu") -> str:
    """Markdown: per (policy, size), the median us per terminator of ``baseline``, each peer and
    each streaming row, the peers' counts against what cep-gpu implies, peer / baseline (median
    times), and the first peer's median job time beside a bare ``SELECT COUNT(*)`` job's."""
    rows = run["results"]
    names = [b for b in dict.fromkeys(r["backend"] for r in rows) if b != baseline]
    by = {(r["policy"], r["size"], r["backend"]): r for r in rows}
    head = ["policy", "window ms", "events", f"{baseline} us/term."]
    head += [f"{n} us/term." for n in names]
    head += [f"{n} matches (expected)" for n in names if n in PEERS]
    head += [f"{n} / {baseline}" for n in names if n in PEERS]
    head += ["Flink job s (bare scan s)"] if any(n in PEERS for n in names) else []
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]

    def us(r):
        return f"{r['us_per_terminator']['median']:.3g}" if r and r.get("status") == "ok" else "n/m"

    for pol, size in dict.fromkeys((r["policy"], r["size"]) for r in rows):
        base = by.get((pol, size, baseline))
        cells = [pol, str(size), f"{base['n_events']:,}" if base and "n_events" in base else "", us(base)]
        cells += [us(by.get((pol, size, n))) for n in names]
        for n in names:
            if n in PEERS:
                r = by.get((pol, size, n)) or {}
                cells.append(f"{r['composites']:,} ({r['expected_composites']:,})"
                             + ("" if r["agree"] else " DIFFERS") if r.get("status") == "ok" else "n/m")
        for n in names:
            if n in PEERS:
                r = by.get((pol, size, n)) or {}
                ok = r.get("status") == "ok" and base and base.get("status") == "ok"
                cells.append(f"{r['seconds']['median'] / base['seconds']['median']:.0f}x" if ok else "n/m")
        peer = next((by[(pol, size, n)] for n in names if n in PEERS
                     and by.get((pol, size, n), {}).get("status") == "ok"), None)
        if any(n in PEERS for n in names):
            cells.append(f"{peer['seconds']['median']:.2f} ({peer['job_overhead_s']['median']:.2f})"
                         if peer else "n/m")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """``python -m cep_gpu.benchmarks.peers.bench RESULTS.json``: the peers table and set-up."""
    import argparse
    import json

    ap = argparse.ArgumentParser(description=main.__doc__)
    ap.add_argument("results")
    ap.add_argument("--baseline", default="cpu")
    args = ap.parse_args(argv)
    with open(args.results) as f:
        run = json.load(f)
    print(peers_table(run, args.baseline))
    for name, info in run.get("peers", {}).items():
        keys = ("flink_version", "java_version", "parallelism", "jvm_start_s", "batch_first_job_s",
                "streaming_first_job_s")
        print(f"\n{name}: " + ", ".join(f"{k}={info[k]:.3g}" if isinstance(info.get(k), float)
                                       else f"{k}={info.get(k)}" for k in keys if k in info))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
