"""Kernel generation: lowering, the cache, and safety against hostile rules.

Rule text never becomes code: names turn into slot numbers, string literals into runtime codes,
numbers are emitted by value, and the emitted source is checked before it is compiled.
"""

from __future__ import annotations

import builtins

import numpy as np
import pandas as pd
import pytest

import cep_gpu
from cep_gpu.backends import get_backend
from cep_gpu.codegen import compile_numba, lower, rule_key
from cep_gpu.codegen.numba_src import CodegenError, check_source, emit_source, literal
from cep_gpu.errors import CepError
from cep_gpu.events import EventTable
from cep_gpu.model import (
    SELF,
    Aggregate,
    AggValue,
    Arith,
    Attr,
    Compare,
    Const,
    Negation,
    Plan,
    Predicate,
    Rule,
    Span,
)

SENTINEL = "CEP_GPU_CODEGEN_SENTINEL"
PAYLOADS = [
    f"__import__('builtins').{SENTINEL} = 1",
    f"x'] ; __import__('builtins').{SENTINEL}=1 ; a['",
    f'x"""\n__import__("builtins").{SENTINEL} = 1\n"""',
    "__class__",
    "__globals__",
    "a" * 5000,
    "k\nimport os",
]


def two_step_rule(attr: str, literal_value: str) -> Rule:
    """B(attr = $p and attr2 = literal) and each A(attr = $p) within 5 s from B, as a model."""
    preds = (Predicate("B", "B"), Predicate("A", "A", "each", 5_000_000_000, 0, 0))
    return Rule(
        "Hostile",
        (Plan(preds, (0, 1)),),
        conditions=(
            Compare("=", Attr(1, attr), Attr(0, attr)),
            Compare("=", Attr(0, "tag"), Const(literal_value)),
            Compare(">", Arith("+", Attr(1, attr), Const(1)), Const(0)),
        ),
        negations=(
            Negation("C", Span(0, -2_000_000_000, True, 0, 0, False),
                     (Compare("=", Attr(SELF, attr), Attr(0, attr)),)),
        ),
        aggregates=(
            Aggregate("sum", "A", attr, Span(0, -5_000_000_000, True, 0, 0, False),
                      (Compare("!=", Attr(SELF, "tag"), Const(literal_value)),)),
        ),
    )


def hostile_events(attr: str, literal_value: str) -> pd.DataFrame:
    return pd.DataFrame({
        "type": ["A", "A", "C", "B", "A", "B"],
        "ts": [1, 2, 3, 4, 5, 6],
        attr: [1, 2, 2, 1, 2, 2],
        "tag": ["z", literal_value, "z", literal_value, "z", "other"],
    })


@pytest.mark.parametrize("payload", PAYLOADS)
def test_hostile_names_and_literals_are_data(payload):
    rule = two_step_rule(payload, payload)
    spec = lower(rule)
    kinds = {a: "int" for a in spec.layout.attrs} | {"tag": "string"}
    source = emit_source(spec, kinds)
    assert payload not in source and SENTINEL not in source and "import" not in source
    check_source(source)
    events = hostile_events(payload, payload)
    table = EventTable.from_pandas(events)
    got = get_backend("cpu").match(rule, table)
    want = get_backend("reference").match(rule, table)
    assert not hasattr(builtins, SENTINEL)
    key = lambda m: sorted(map(tuple, np.c_[m.rows, m.aggs].tolist()))  # noqa: E731
    assert key(got) == key(want)
    assert len(got) == 1  # B@4 (tag = payload) with A@1 (same attr); B@6 fails the tag


@pytest.mark.parametrize("payload", PAYLOADS[:3] + ["a\"b", "'", "\\"])
def test_hostile_rule_text_is_rejected_or_matched_as_data(payload):
    escaped = payload.replace("\\", "\\\\").replace('"', '\\"')
    text = (f'define R from B(tag="{escaped}") and each A() within 5 s from B')
    try:
        rule = cep_gpu.parse_rule(text)
    except CepError:
        return  # rejected with a rule error: fine
    events = hostile_events("x", payload)
    out = cep_gpu.detect(events, rule, backend="cpu")
    assert not hasattr(builtins, SENTINEL)
    ref = cep_gpu.detect(events, rule, backend="reference")
    assert out["ids"].tolist() == ref["ids"].tolist()


def test_check_source_refuses_what_the_generator_never_makes():
    for bad in (
        "import os",
        "def valid_0_0(seqs, i, r, env):\n    return __import__('os')",
        "def valid_0_0(seqs, i, r, env):\n    return env.__class__",
        "def evil(seqs):\n    return 1",
        "def valid_0_0(seqs, i, r, env):\n    return open",
        "def valid_0_0(seqs, i, r, env):\n    return (lambda: 1)()",
    ):
        with pytest.raises(CodegenError):
            check_source(bad)


def test_literals_by_value():
    assert literal(3) == "3" and literal(-2.5) == "-2.5" and literal(True) == "True"
    assert literal(float("inf")) == "np.inf" and literal(float("nan")) == "np.nan"
    with pytest.raises(CodegenError):
        literal(2**70)
    with pytest.raises(CodegenError):
        literal("text")


def test_cache_keyed_by_structure_and_kinds():
    a = two_step_rule("x", "u")
    b = Rule("OtherName", a.plans, a.conditions, a.negations, a.aggregates)
    kinds = {"x": "int", "tag": "string"}
    ka, kb = compile_numba(lower(a), kinds), compile_numba(lower(b), kinds)
    assert ka is kb  # same structure, other name: one compilation
    assert rule_key(lower(a), kinds) != rule_key(lower(a), {"x": "float", "tag": "string"})
    assert rule_key(lower(a), kinds) != rule_key(lower(two_step_rule("x", "v")), kinds)


def test_lowering_filters_index_and_residual_checks():
    rule = cep_gpu.parse_rule(
        "define R from B(v > 1.0 and k=$k) and each A(k=$k and v < B.v) within 5 s from B"
    )
    spec = lower(rule)
    step1 = spec.plans[0].steps[1]
    assert step1.key is not None and step1.key.attr == "k"
    assert [rule.conditions[i] for i in step1.conditions] == [
        Compare("<", Attr(1, "v"), Attr(0, "v"))
    ]
    # B's filters: v > 1.0, and k present (the binding of $k)
    assert [len(f) for f in spec.filters] == [2, 0]
    assert lower(rule, use_index=False).plans[0].steps[1].key is None


def test_aggregate_conditions_are_kernel_checks_not_filters():
    rule = Rule(
        "Agg",
        (Plan((Predicate("B", "B"),), (0,)),),
        conditions=(Compare(">", AggValue(0), Const(1.0)),),
        aggregates=(Aggregate("count", "A", None, Span(0, -5, True, 0, 0, False)),),
    )
    spec = lower(rule)
    assert spec.filters == ((),) and spec.plans[0].steps[0].conditions == (0,)


# -- the on-disk kernel cache (issue 11, cold start) ---------------------------------------------

_CHILD = r'''
import json, sys
import numpy as np, pandas as pd
import cep_gpu
from cep_gpu.kernels import cpu

rule = sys.argv[1]
if rule == "museum":
    from cep_gpu.museum import MUSEUM_RULES, generate_museum

    rule, events = MUSEUM_RULES, generate_museum(20000, seed=3)
else:
    rng = np.random.default_rng(5)
    n = 3000
    events = pd.DataFrame({"type": rng.choice(["A", "B"], n), "ts": np.arange(n) * 0.01,
                           "k": rng.integers(0, 5, n), "v": rng.random(n)})
out = cep_gpu.detect(events, rule, backend="cpu")
hits = misses = 0
for _, table in cpu._SPECIALISED.values():
    for disp in table.values():
        hits += sum(disp.stats.cache_hits.values())
        misses += sum(disp.stats.cache_misses.values())
print(json.dumps({"hits": hits, "misses": misses, "rows": [list(map(int, x)) for x in out["ids"]]}))
'''

_RULE = """define P
pattern SEQ(A a, B b)
where a.k = b.k and a.v < b.v
within {w} s"""


def _child(tmp_path, rule: str) -> dict:
    import json
    import os
    import subprocess
    import sys

    env = {**os.environ, "CEP_GPU_CACHE_DIR": str(tmp_path / "kernels")}
    done = subprocess.run([sys.executable, "-c", _CHILD, rule], env=env, capture_output=True,
                          text=True, check=True)
    # Numba compiles what it cannot cache and only warns: that is a miss on every start
    assert "Cannot cache" not in done.stderr, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_kernel_cache_is_hit_in_a_second_process_and_keyed_by_rule(tmp_path):
    import cep_gpu

    first = _child(tmp_path, _RULE.format(w=1))
    assert first["misses"] > 0 and first["hits"] == 0 and first["rows"]
    files = sorted((tmp_path / "kernels").glob("k_*.py"))
    assert files and list((tmp_path / "kernels" / "__pycache__").glob("k_*.nbi"))
    second = _child(tmp_path, _RULE.format(w=1))
    assert second["hits"] > 0 and second["misses"] == 0  # loaded, not compiled
    assert second["rows"] == first["rows"]
    # a different rule: new code, a new file, compiled again
    other = _child(tmp_path, _RULE.format(w=1).replace("a.v < b.v", "a.v > b.v"))
    assert other["misses"] > 0 and other["hits"] == 0
    assert len(sorted((tmp_path / "kernels").glob("k_*.py"))) > len(files)
    # results equal the reference matcher
    import numpy as np
    import pandas as pd

    rng = np.random.default_rng(5)
    n = 3000
    events = pd.DataFrame({"type": rng.choice(["A", "B"], n), "ts": np.arange(n) * 0.01,
                           "k": rng.integers(0, 5, n), "v": rng.random(n)})
    ref = cep_gpu.detect(events, _RULE.format(w=1), backend="reference")
    assert [list(map(int, x)) for x in ref["ids"]] == second["rows"]


def test_kernel_cache_holds_every_kernel_of_the_museum_rules(tmp_path):
    # negations, aggregates, parameters and pair checks: nothing compiled in a second process
    first = _child(tmp_path, "museum")
    assert first["misses"] > 0 and first["rows"]
    second = _child(tmp_path, "museum")
    assert second["hits"] > 0 and second["misses"] == 0
    assert second["rows"] == first["rows"]


def test_kernel_cache_dir_setting(tmp_path, monkeypatch):
    from cep_gpu.codegen.cache import kernel_file
    from cep_gpu.jit import cache_dir

    monkeypatch.setenv("CEP_GPU_CACHE_DIR", str(tmp_path / "k"))
    assert cache_dir() == tmp_path / "k"
    path, name = kernel_file("x = 1\n")
    assert path.parent == tmp_path / "k" and path.read_text() == "x = 1\n" and name.startswith("cep_gpu_kernels_")
    assert kernel_file("x = 2\n")[0] != path  # keyed by the source
    path.write_text("damaged")
    assert kernel_file("x = 1\n")[0].read_text() == "x = 1\n"  # rewritten, never run as found
    monkeypatch.setenv("CEP_GPU_CACHE_DIR", "off")
    assert cache_dir() is None and kernel_file("x = 1\n") is None
    monkeypatch.delenv("CEP_GPU_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_dir() == tmp_path / "xdg" / "cep-gpu" / "kernels"
