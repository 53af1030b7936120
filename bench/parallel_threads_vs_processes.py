"""Threads or processes for HYPERSONIC's units? Measure both (docs/parallel.md, docs/performance.md).

1. Hand-over of a batch of 256 partial matches (256 x 4 int64) to another unit and back:
   a deque under a condition variable between threads, a multiprocessing queue between processes.
2. The same data-parallel work (the stock workload split in two halves with the window's
   overlap, each half through the inline chain) on two threads and on two processes (the events
   shipped to the workers, the matches shipped back).

    .venv/bin/python bench/parallel_threads_vs_processes.py [--out docs/perf/parallel_threads_vs_processes.json]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import threading
import time
from collections import deque
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor

import numpy as np

from cep_gpu.parallel.baselines import run
from cep_gpu.parallel.bench import stock_events, stock_rule


def _echo_thread(inq: deque, outq: deque, cv: threading.Condition, n: int) -> None:
    for _ in range(n):
        with cv:
            while not inq:
                cv.wait()
            x = inq.popleft()
            outq.append(x)
            cv.notify_all()


def handover_threads(n: int = 2000) -> float:
    inq, outq = deque(), deque()
    cv = threading.Condition()
    t = threading.Thread(target=_echo_thread, args=(inq, outq, cv, n))
    t.start()
    batch = np.zeros((256, 4), np.int64)
    t0 = time.perf_counter()
    for _ in range(n):
        with cv:
            inq.append(batch)
            cv.notify_all()
            while not outq:
                cv.wait()
            outq.popleft()
    dt = time.perf_counter() - t0
    t.join()
    return dt / n


def _echo_process(inq, outq, n: int) -> None:
    for _ in range(n):
        outq.put(inq.get())


def handover_processes(n: int = 2000) -> float:
    ctx = mp.get_context("fork")
    inq, outq = ctx.Queue(), ctx.Queue()
    p = ctx.Process(target=_echo_process, args=(inq, outq, n))
    p.start()
    batch = np.zeros((256, 4), np.int64)
    t0 = time.perf_counter()
    for _ in range(n):
        inq.put(batch)
        outq.get()
    dt = time.perf_counter() - t0
    p.join()
    return dt / n


def _half(args):
    rule, frame = args
    res = run("rip", rule, frame, 1)
    return len(res.output)


def split_work(events: int = 30_000, window: float = 1.0, length: int = 4):
    ev = stock_events(events, seed=0)
    rule = stock_rule(length, window)
    mid = len(ev) // 2
    cut = int(np.searchsorted(ev.ts.to_numpy(), ev.ts.iloc[mid] + window, side="right"))
    halves = [(rule, ev.iloc[:cut]), (rule, ev.iloc[mid:])]  # (matches may repeat: timing only)
    _half(halves[0])  # warm the kernels in this process (the fork children inherit them)
    out = {}
    for name, pool in (("threads", ThreadPoolExecutor), ("processes", ProcessPoolExecutor)):
        best = float("inf")
        for _ in range(3):
            t0 = time.perf_counter()
            kw = {"mp_context": mp.get_context("fork")} if name == "processes" else {}
            with pool(max_workers=2, **kw) as ex:
                list(ex.map(_half, halves))
            best = min(best, time.perf_counter() - t0)
        out[name] = best
    t0 = time.perf_counter()
    for h in halves:
        _half(h)
    out["one_thread_both_halves"] = time.perf_counter() - t0
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="docs/perf/parallel_threads_vs_processes.json")
    args = ap.parse_args()
    res = {
        "machine": {"cpus": os.cpu_count(), "load_average": os.getloadavg(),
                    "description": "2-core shared dev machine (other jobs running)",
                    "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())},
        "handover_us": {"threads": handover_threads() * 1e6, "processes": handover_processes() * 1e6},
        "split_work_s": split_work(),
    }
    with open(args.out, "w") as f:
        json.dump(res, f, indent=1)
    print(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
