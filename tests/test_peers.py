"""The Flink peer of the benchmarks (issue 20): the seq3 translation, its claimed equivalence with
cep-gpu's ``last`` and, where Java and apache-flink are here, Flink's own matches on tiny streams.

The equivalence is checked twice: against a brute-force model of Flink's MATCH_RECOGNIZE written
here from the SQL standard's rules (no Flink needed, hypothesis streams), and against Flink itself
(skipped with the reason when Java or the ``peers`` extra is absent: ``make peers``)."""

from __future__ import annotations

import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import cep_gpu
from cep_gpu.benchmarks.peers import PEERS
from cep_gpu.benchmarks.peers import flink as fl
from cep_gpu.benchmarks.peers.bench import PeerSession, check_peers
from cep_gpu.benchmarks.workloads import seq3, seq3_events, seq3_rule
from cep_gpu.errors import ArgumentError

# hand-worked (one k): ts 0 A, 1 A, 2 B, 3 B, 4 C, 5 C, 6 A, 7 B, 8 C
HAND = pd.DataFrame({"type": list("AABBCCABC"), "ts": range(9), "k": [7] * 9, "v": [0.0] * 9})
HAND_LAST = {(1, 3, 4), (1, 3, 5), (6, 7, 8)}  # per C: the last B before it, the last A before that
HAND_NEXT = {(1, 3, 4), (6, 7, 8)}  # per A: A0 has A1 before any B; A1's earliest C is 4
HAND_LAST_W1 = {(6, 7, 8)}  # window 1 ms, edges inclusive: C4 -> B3 but no A in [2, 3)


def _last(events, window):
    return cep_gpu.detect(events, seq3_rule(window, "last"), time_unit="ms")


# ----------------------------------------------------------------------------------------------
# translation (no Flink needed)


def test_translation_names_partition_pattern_windows_and_skip():
    sql = fl.match_recognize(250, "last")
    assert "PARTITION BY k ORDER BY rt" in sql and "FROM evr" in sql
    assert "PATTERN (C NB* B NA* A)" in sql and "AFTER MATCH SKIP TO NEXT ROW" in sql
    assert "C.ts - B.ts <= 250" in sql and "B.ts - A.ts <= 250" in sql
    fwd = fl.match_recognize(40, "skip-to-next")
    assert "FROM ev " in fwd and "PATTERN (A NA*? B NB*? C)" in fwd  # reluctant: see the module doc
    assert "B.ts - A.ts <= 40" in fwd and "C.ts - B.ts <= 40" in fwd
    views, q = fl.count_query(40, "skip-to-next", "streaming")
    assert "TUMBLE" in q and views[-1].startswith("CREATE TEMPORARY VIEW seq3_matches AS")
    assert fl.count_query(40, "last", "batch")[1] == "SELECT COUNT(*) FROM seq3_matches"


def test_translation_rejects_bad_input():
    with pytest.raises(ArgumentError, match="unknown Flink variant 'each'"):
        fl.match_recognize(10, "each")
    with pytest.raises(ArgumentError, match="bounded input"):
        fl.count_query(10, "last", "streaming")
    with pytest.raises(ArgumentError, match=">= 0"):
        fl.match_recognize(-1)
    with pytest.raises(ArgumentError, match="distinct timestamps"):
        fl.check_events(pd.DataFrame({"type": ["A", "B"], "ts": [1, 1], "k": [0, 0]}))
    with pytest.raises(ArgumentError, match="missing k"):
        fl.check_events(pd.DataFrame({"type": ["A"], "ts": [1]}))
    with pytest.raises(ArgumentError, match="unknown peer"):
        check_peers(["flink", "esper"])


def test_hand_worked_expectations_from_cep_gpu():
    assert fl.expected_matches(_last(HAND, 10), HAND, "last") == HAND_LAST
    assert fl.expected_matches(_last(HAND, 10), HAND, "skip-to-next") == HAND_NEXT
    assert fl.expected_matches(_last(HAND, 1), HAND, "last") == HAND_LAST_W1
    assert fl.expected_count(_last(HAND, 10), HAND, "skip-to-next") == 2


def _flink_model(events, window, variant):
    """MATCH_RECOGNIZE semantics by brute force: per partition, from each start row, the first
    match to complete (AFTER MATCH SKIP TO NEXT ROW); variables as in :mod:`fl`."""
    out = set()
    for _, part in events.sort_values("ts").groupby("k"):
        rows = list(zip(part["type"], part["ts"]))
        if variant == "last":
            rows = rows[::-1]  # reversed event time; C NB* B NA* A
            first, mid, last = "C", "B", "A"
        else:  # A NA*? B NB*? C
            first, mid, last = "A", "B", "C"
        for i, (t0, s0) in enumerate(rows):
            if t0 != first:
                continue
            found = None
            # every way to bind mid at j and last at m; the earliest m completes first
            for m in range(i + 2, len(rows)):
                for j in range(i + 1, m):
                    if rows[j][0] != mid or rows[m][0] != last:
                        continue
                    gap1 = rows[i + 1:j]
                    gap2 = rows[j + 1:m]
                    skip1 = last if variant == "last" else first  # NB in C NB* B / NA in A NA*? B
                    if variant == "last":
                        ok = all(t != mid for t, _ in gap1) and all(t != last for t, _ in gap2)
                    else:
                        ok = all(t != skip1 for t, _ in gap1) and all(t != mid for t, _ in gap2)
                    ok = ok and abs(rows[j][1] - s0) <= window and abs(rows[m][1] - rows[j][1]) <= window
                    if ok:
                        found = (s0, rows[j][1], rows[m][1])
                        break
                if found:
                    break
            if found:
                a, b, c = found if variant != "last" else found[::-1]
                out.add((int(a), int(b), int(c)))
    return out


def test_flink_model_reproduces_the_hand_worked_case():
    assert _flink_model(HAND, 10, "last") == HAND_LAST
    assert _flink_model(HAND, 10, "skip-to-next") == HAND_NEXT
    assert _flink_model(HAND, 1, "last") == HAND_LAST_W1


@settings(max_examples=40, deadline=None)
@given(types=st.lists(st.sampled_from("ABC"), min_size=1, max_size=40),
       ks=st.lists(st.integers(0, 2), min_size=40, max_size=40),
       gaps=st.lists(st.integers(1, 4), min_size=40, max_size=40),
       window=st.integers(1, 12))
def test_translation_equivalence_on_generated_streams(types, ks, gaps, window):
    """The claim of the module doc: Flink's matches are cep-gpu's last ones (or one per A)."""
    n = len(types)
    ts, t = [], 0
    for g in gaps[:n]:
        t += g
        ts.append(t)
    ev = pd.DataFrame({"type": types, "ts": ts, "k": ks[:n], "v": [0.0] * n})
    out = _last(ev, window)
    for variant in fl.VARIANTS:
        assert fl.expected_matches(out, ev, variant) == _flink_model(ev, window, variant), variant


def test_each_and_missing_flink_are_reported_not_measured(monkeypatch):
    monkeypatch.setattr(fl, "flink_unavailable", lambda: "no Java here (test)")
    with PeerSession(["flink", "flink-stream"]) as session:
        assert session.info["flink"]["status"] == "not measured: no Java here (test)"
        work = seq3(100, "each", 500)
        rows = session.rows("seq3", work, "each", 100, "window_ms", 1, 0)
        assert [r["backend"] for r in rows] == ["flink", "flink-stream"]
        assert all(r["status"] == "not measured" and "skip-till-any-match" in r["reason"] for r in rows)
        rows = session.rows("seq3", seq3(100, "last", 500), "last", 100, "window_ms", 1, 0)
        assert all(r["reason"] == "no Java here (test)" for r in rows)
        rows = session.rows("museum", work, "rules", 100, "n_events", 1, 0)
        assert all("seq3 only" in r["reason"] for r in rows)


def test_cli_rejects_an_unknown_peer(capsys):
    from cep_gpu.cli import main

    assert main(["bench", "seq3", "--peers", "esper", "--sizes", "10", "--events", "50"]) == 2
    assert "unknown peer(s) 'esper'" in capsys.readouterr().err


# ----------------------------------------------------------------------------------------------
# Flink itself

WHY = fl.flink_unavailable()
needs_flink = pytest.mark.skipif(WHY is not None, reason=f"Flink peer unavailable: {WHY}")


def test_peers_table_shows_counts_ratio_and_overhead():
    from cep_gpu.benchmarks.peers.bench import peers_table

    def one(v):
        return {"min": v, "median": v, "max": v}

    cpu = {"policy": "last", "size": 100, "backend": "cpu", "status": "ok", "n_events": 1000,
           "seconds": one(0.01), "us_per_terminator": one(30.0)}
    fli = {"policy": "last", "size": 100, "backend": "flink", "status": "ok", "n_events": 1000,
           "seconds": one(2.0), "us_per_terminator": one(6000.0), "composites": 12,
           "expected_composites": 13, "agree": False, "job_overhead_s": one(1.5)}
    each = {"policy": "each", "size": 100, "backend": "flink", "status": "not measured"}
    table = peers_table({"results": [cpu, fli, each]})
    last_row = next(line for line in table.splitlines() if line.startswith("| last"))
    assert "| 30 | 6e+03 |" in last_row and "12 (13) DIFFERS" in last_row
    assert "| 200x |" in last_row and "2.00 (1.50)" in last_row
    assert "n/m" in next(line for line in table.splitlines() if line.startswith("| each"))


def test_no_jvm_when_no_policy_can_be_compared(monkeypatch):
    def boom():
        raise AssertionError("Flink must not be looked for when only each runs")

    monkeypatch.setattr(fl, "flink_unavailable", boom)
    with PeerSession(["flink"], policies=["each"]) as session:
        assert "skip-till-any-match" in session.info["flink"]["status"]


def test_stream_rows_reuse_the_streaming_benchmark():
    """The --stream rows: one-event and micro-batch publishes; bench/stream_latency.py checks the
    micro-batch count against one batch detect and raises when they differ (an error row)."""
    from cep_gpu.benchmarks.stream_rows import stream_rows

    one, micro = stream_rows("last", 30, "window_ms", stream_events=300, micro_batch=70,
                             micro_events=900)
    assert one["backend"] == "stream-1" and one["status"] == "ok", one
    assert one["n_events"] == 300 and one["warm_events"] == 60
    assert one["latency_us"]["terminator"]["median"] > 0
    assert micro["backend"] == "stream-70" and micro["status"] == "ok", micro
    ev = seq3_events(900, seed=1)
    assert micro["composites"] == len(_last(ev, 30)) > 0


def test_run_bench_interleaves_peer_rows_and_records_them(monkeypatch):
    from cep_gpu.benchmarks.runner import run_bench

    monkeypatch.setattr(fl, "flink_unavailable", lambda: "no Java here (test)")
    run = run_bench("seq3", ["cpu"], [10, 20], ["each", "last"], n_events=300, repeat=1, warmup=0,
                    peers=["flink"])
    order = [(r["policy"], r["size"], r["backend"]) for r in run["results"]]
    assert order == [(p, s, b) for p in ("each", "last") for s in (10, 20) for b in ("cpu", "flink")]
    assert run["settings"]["peers"] == ["flink"]
    assert run["peers"]["flink"]["status"] == "not measured: no Java here (test)"
    assert all(r["status"] == "ok" for r in run["results"] if r["backend"] == "cpu")


def test_a_worker_that_does_not_answer_is_stopped_with_a_clear_error(tmp_path, monkeypatch):
    """No Flink needed: a stand-in worker that never answers."""
    import sys

    from cep_gpu.errors import BackendUnavailableError

    script = tmp_path / "silent.py"
    script.write_text("import sys, time\nfor line in sys.stdin:\n    time.sleep(60)\n")
    monkeypatch.setattr(fl, "WORKER", script)
    peer = fl.FlinkPeer(python=sys.executable, timeout_s=1.0)
    with pytest.raises(BackendUnavailableError, match="did not answer 'start' in 1 s"):
        peer.start()
    assert peer._proc.poll() is not None  # killed, not left behind
    peer.close()


def test_a_worker_that_exits_is_reported_with_its_output(tmp_path, monkeypatch):
    import sys

    from cep_gpu.errors import BackendUnavailableError

    script = tmp_path / "dies.py"
    script.write_text("import sys\nsys.stderr.write('no JVM for you\\n')\nsys.exit(3)\n")
    monkeypatch.setattr(fl, "WORKER", script)
    peer = fl.FlinkPeer(python=sys.executable, timeout_s=60)
    with pytest.raises(BackendUnavailableError, match="exited; its output ends with:\nno JVM for you"):
        peer.start()
    peer.close()


@needs_flink
def test_flink_itself_on_tiny_streams():
    """One test, so one JVM even when pytest-xdist spreads this file over workers."""
    with fl.FlinkPeer(warm=False) as flink:
        info = flink.info
        assert info["flink_version"].startswith("2.") and info["java_version"]
        assert info["jvm_start_s"] > 0 and info["parallelism"] == 1
        # the hand-worked stream, both variants (rows given out of time order are accepted; too
        # few here for a periodic watermark to drop any, so this does not test the sort itself)
        assert flink.matches(HAND.iloc[::-1], 10, "skip-to-next", "streaming") == HAND_NEXT
        assert flink.matches(HAND, 10, "last", "batch") == HAND_LAST
        # the benchmark's peer rows on a tiny seq3 stream whose window edges are 1 ms apart
        # (<= against < would show): counts equal what cep-gpu's last output implies
        with PeerSession(list(PEERS), flink=flink) as session:
            work = seq3(40, "last", 600, seed=5)
            rows = session.rows("seq3", work, "last", 40, "window_ms", repeat=1, warmup=0)
        assert flink._proc is not None  # an injected peer is left running
        for r in rows:
            assert r["status"] == "ok" and r["agree"], r
            assert r["composites"] == r["expected_composites"] > 0 and len(r["times_s"]) == 1
            assert r["job_overhead_s"]["median"] > 0
