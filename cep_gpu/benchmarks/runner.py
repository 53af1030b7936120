"""Run benchmark workloads on several backends and collect the results as JSON-ready dicts.

Each configuration (backend, policy, size) is ingested once, run ``warmup`` times unmeasured (Numba
compilation, caches), then ``repeat`` times measured. What is timed is detection on an ingested
event table (``detect_table``: columns, ranges, kernels, composite events), with ``output="count"``
as in ``detect(output="count")`` (the backend may count the last step's matches without building
them) or ``output="arrow"`` (every composite event built, sorted and assembled into an Arrow
table); ingestion is timed once and reported beside it. Backends that cannot run here (``gpu`` without a device) are recorded as
``not measured``, never estimated; ``reference`` (brute force) runs only inputs of at most
:data:`REFERENCE_MAX_EVENTS` events and is recorded as ``skipped`` on larger ones. An unknown
backend name is an error before anything runs.
"""

from __future__ import annotations

import os
import platform
import statistics
import subprocess
import time
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime, timezone

from . import workloads as wl

#: the reference matcher is brute force: only inputs up to this many events
REFERENCE_MAX_EVENTS = 3000
DEFAULT_SIZES = {
    "seq3": wl.SEQ3_WINDOWS_MS,
    "rules1000": wl.RULES1000_LENGTHS,
    "museum": (100_000, 1_000_000),
}
DEFAULT_BACKENDS = {"seq3": ("cpu", "auto", "gpu"), "rules1000": ("cpu", "aip"), "museum": ("cpu", "auto")}
SIZE_NAMES = {"seq3": "window_ms", "rules1000": "length", "museum": "n_events"}
#: the backends ``cep-gpu bench`` knows (``gpu-host``: the host build of the CUDA kernels, which
#: checks the GPU code path but measures nothing about GPUs)
BACKENDS = ("cpu", "aip", "gpu", "auto", "reference", "gpu-host")
#: progress reports from inside one measurement are at most this often (seconds)
DETAIL_EVERY_S = 0.5


def machine_info() -> dict:
    """CPU model, cores, memory, GPU (if any) and library versions of this machine."""
    info: dict = {
        "hostname": platform.node(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "cpu_model": _cpu_model(),
        "cores": os.cpu_count(),
        "memory_gb": _memory_gb(),
        "gpu": _gpu_name(),
        "gpu_backend_usable": _gpu_usable(),
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "versions": {},
    }
    import importlib.metadata as md

    for pkg in ("cep-gpu", "numpy", "pandas", "pyarrow", "numba", "cupy-cuda12x", "cupy", "pyspark",
                "apache-flink"):
        try:
            info["versions"][pkg] = md.version(pkg)
        except md.PackageNotFoundError:
            pass
    return info


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _memory_gb() -> float | None:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal"):
                    return round(int(line.split()[1]) / 1024**2, 1)
    except OSError:
        pass
    return None


def _gpu_name() -> str | None:
    """The first GPU's name from nvidia-smi, or None (no device, no driver)."""
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
            capture_output=True, text=True, timeout=10, check=True,
        )
        names = [n.strip() for n in out.stdout.splitlines() if n.strip()]
        return names[0] if names else None
    except (OSError, subprocess.SubprocessError):
        return None


def _gpu_usable() -> bool:
    from ..planner import gpu_usable

    return gpu_usable()


def check_backends(backends: Iterable[str]) -> list[str]:
    """``backends`` as a list; ``ValueError`` naming the known ones if any name is unknown."""
    backends = list(backends)
    unknown = [b for b in backends if b not in BACKENDS]
    if unknown:
        raise ValueError(f"unknown backend(s) {', '.join(map(repr, unknown))}; "
                         f"choose from {', '.join(BACKENDS)}")
    return backends


def backend_status(name: str) -> str | None:
    """None if ``name`` can run here, else why not."""
    from ..backends import get_backend
    from ..errors import BackendUnavailableError

    try:
        get_backend(name)
    except BackendUnavailableError as exc:
        return f"not measured: {exc}"
    except (ImportError, ValueError) as exc:
        return f"not measured: backend {name!r} unavailable ({exc})"
    return None


def summarise(values: Sequence[float]) -> dict[str, float]:
    return {"min": min(values), "median": statistics.median(values), "max": max(values)}


def time_detection(work: wl.Workload, backend: str, repeat: int, warmup: int, output: str = "count",
                   on_detail: Callable[[str], None] | None = None) -> dict:
    """Run one workload on one backend: times, throughput, per-terminator time, composite counts.

    ``on_detail`` (progress on long runs) receives "warm-up 1/1", "run 2/3" and, at most every
    :data:`DETAIL_EVERY_S` seconds, "run 2/3, rule 340/1000"; it never runs per event.
    """
    import pyarrow as pa

    from ..detect import as_rules, detect_table
    from ..events import EventTable
    from ..output import OutputSchema, assemble

    rules = as_rules(work.rules)
    t0 = time.perf_counter()
    table = EventTable.from_pandas(work.events, time_unit=work.time_unit)
    ingest = time.perf_counter() - t0
    n_terms = work.n_terminators
    composites = 0
    times = []
    on_rule = None
    for i in range(warmup + repeat):
        if on_detail is not None:
            what = f"warm-up {i + 1}/{warmup}" if i < warmup else f"run {i - warmup + 1}/{repeat}"
            on_detail(what)
            if len(rules) > 1:
                on_rule = _rule_progress(what, len(rules), on_detail)
        t0 = time.perf_counter()
        # "count" is detect(output="count"): backends may count without building the matches
        results = detect_table(table, rules, backend, on_rule=on_rule, count_only=output == "count")
        if output == "arrow":
            out = assemble(results, OutputSchema.of(rules), table, arrow=True)
            assert isinstance(out, pa.Table)
        dt = time.perf_counter() - t0
        composites = sum(len(r) for r in results)
        if i >= warmup:
            times.append(dt)
    return {
        "status": "ok",
        "n_events": work.n_events,
        "n_terminators": n_terms,
        "composites": composites,
        "composites_per_terminator": composites / n_terms if n_terms else 0.0,
        "ingest_s": ingest,
        "times_s": times,
        "seconds": summarise(times),
        "events_per_s": summarise([work.n_events / t for t in times]),
        "us_per_terminator": summarise([t / max(n_terms, 1) * 1e6 for t in times]),
        "us_per_event": summarise([t / max(work.n_events, 1) * 1e6 for t in times]),
    }


def _rule_progress(what: str, n_rules: int, on_detail: Callable[[str], None]) -> Callable:
    """A ``detect_table`` ``on_rule`` callback that reports "what, rule i/n" now and then."""
    state = {"done": 0, "next": time.perf_counter() + DETAIL_EVERY_S}

    def on_rule(_rule) -> None:
        state["done"] += 1
        now = time.perf_counter()
        if now >= state["next"]:
            state["next"] = now + DETAIL_EVERY_S
            on_detail(f"{what}, rule {state['done']}/{n_rules}")

    return on_rule


def make_workload(workload: str, size: int, policy: str, n_events: int | None, seed: int,
                  n_rules: int = 1000) -> wl.Workload:
    """The workload ``workload`` at one size (window ms, chain length or event count)."""
    if workload == "seq3":
        n = wl.seq3_events_for(size, policy, n_events or 200_000)
        return wl.seq3(size, policy, n, seed)
    if workload == "rules1000":
        return wl.rules1000(size, policy, n_events or wl.RULES1000_EVENTS, seed, n_rules)
    if workload == "museum":
        return wl.museum(size, seed)
    raise ValueError(f"unknown workload {workload!r}; choose seq3, rules1000 or museum")


def run_bench(
    workload: str,
    backends: Iterable[str] | None = None,
    sizes: Iterable[int] | None = None,
    policies: Iterable[str] = wl.POLICIES,
    n_events: int | None = None,
    repeat: int = 3,
    warmup: int = 1,
    seed: int = 0,
    output: str = "count",
    on_step: Callable[[str], None] | None = None,
    n_rules: int = 1000,
    on_detail: Callable[[str], None] | None = None,
    peers: Iterable[str] = (),
    stream: bool = False,
    stream_events: int = 5000,
    micro_batch: int = 1000,
) -> dict:
    """Sweep one workload over sizes x policies x backends; the whole run as a JSON-ready dict.

    ``sizes``: windows in ms (seq3), chain lengths (rules1000) or event counts (museum).
    ``n_events``: events per seq3/rules1000 input (seq3 uses fewer at large ``each`` windows).
    ``n_rules``: rules of rules1000 (a multiple of 100; smaller only for smoke runs).
    ``on_step`` is called before each (policy, size, backend) configuration, ``on_detail`` with
    progress inside one (see :func:`time_detection`).
    Results of different backends on the same input are compared (``agree``).
    ``peers`` (:mod:`cep_gpu.benchmarks.peers`: ``flink``, ``flink-stream``) run on the same input
    right after the backends, at every size; their JVM start-up is timed once, in ``run["peers"]``.
    ``stream`` (seq3) adds the streaming ``Engine``'s one-event and ``micro_batch`` rows
    (:mod:`cep_gpu.benchmarks.stream_rows`).
    """
    if workload not in DEFAULT_SIZES:
        raise ValueError(f"unknown workload {workload!r}; choose seq3, rules1000 or museum")
    backends = check_backends(backends or DEFAULT_BACKENDS[workload])
    sizes = [int(s) for s in (sizes or DEFAULT_SIZES[workload])]
    policies = list(policies) if workload != "museum" else ["rules"]
    unavailable = {b: backend_status(b) for b in backends}
    results = []
    from .peers.bench import PeerSession

    with PeerSession(peers, on_detail=on_detail, workload=workload, policies=policies) as peer_session:
        _sweep(workload, backends, sizes, policies, n_events, repeat, warmup, seed, output, on_step,
               n_rules, on_detail, unavailable, results, peer_session, stream, stream_events, micro_batch)
    run = {
        "workload": workload,
        "machine": machine_info(),
        "settings": {
            "backends": backends, "sizes": sizes, "policies": policies, "n_events": n_events,
            "repeat": repeat, "warmup": warmup, "seed": seed, "output": output, "n_rules": n_rules,
        },
        "results": results,
    }
    if peer_session.names:
        run["settings"]["peers"] = peer_session.names
        run["peers"] = peer_session.info
    if stream:
        run["settings"].update(stream=True, stream_events=stream_events, micro_batch=micro_batch)
    return run


def _sweep(workload, backends, sizes, policies, n_events, repeat, warmup, seed, output, on_step, n_rules,
           on_detail, unavailable, results, peer_session, stream, stream_events, micro_batch) -> None:
    """The loop of :func:`run_bench`: every (policy, size), backends then peers then streaming."""
    for policy in policies:
        for size in sizes:
            work = make_workload(workload, size, policy if workload != "museum" else "each", n_events, seed,
                                 n_rules)
            counts = {}
            for b in backends:
                row = {"backend": b, "policy": policy, "size": size, SIZE_NAMES[workload]: size}
                if on_step:
                    on_step(f"{workload} {policy} {SIZE_NAMES[workload]}={size} {b}")
                if unavailable[b]:
                    row.update(status="not measured", reason=unavailable[b])
                elif b == "reference" and work.n_events > REFERENCE_MAX_EVENTS:
                    row.update(status="skipped", reason=f"reference (brute force) runs inputs of at most "
                               f"{REFERENCE_MAX_EVENTS} events; this one has {work.n_events}")
                else:
                    try:
                        if b == "auto":
                            _reset_planner_stats()
                        row.update(time_detection(work, b, repeat, warmup, output, on_detail))
                        counts[b] = row["composites"]
                        if b == "auto":
                            row["planner"] = _planner_stats()
                    except Exception as exc:  # one failing backend must not lose the sweep
                        row.update(status="error", reason=f"{type(exc).__name__}: {exc}")
                results.append(row)
            agree = len(set(counts.values())) <= 1
            for row in results[-len(backends):]:
                row["agree"] = agree
            for name in peer_session.names:  # interleaved: the same input, right after cep-gpu
                if on_step:
                    on_step(f"{workload} {policy} {SIZE_NAMES[workload]}={size} {name}")
            results.extend(peer_session.rows(workload, work, policy, size, SIZE_NAMES[workload],
                                             repeat, warmup))
            if stream and workload == "seq3":
                if on_step:
                    on_step(f"{workload} {policy} {SIZE_NAMES[workload]}={size} streaming Engine")
                from .stream_rows import stream_rows

                results.extend(stream_rows(policy, size, SIZE_NAMES[workload], stream_events,
                                           micro_batch, seed=seed))


def _reset_planner_stats() -> None:
    from ..backends import get_backend

    reset = getattr(get_backend("auto"), "reset_stats", None)
    if reset:
        reset()


def _planner_stats() -> dict:
    from ..backends import get_backend

    impl = get_backend("auto")
    stats = getattr(impl, "stats", None)
    return stats() if stats else {}
