"""The import graph of the source tree: no cycles, no import of a higher layer from a lower one,
no private name imported across modules (docs/architecture.md).

The graph is read with :mod:`ast` from the files (nothing is imported), so every import counts:
module level, inside functions (lazy imports), and ``importlib.import_module("literal")``. Imports
under ``if TYPE_CHECKING:`` are left out (they never run).
"""

from __future__ import annotations

import ast
from fnmatch import fnmatchcase
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

#: repository folder -> import name (setup.py's package_dir)
FOLDERS = {
    "cep_gpu": "cep_gpu",
    "kernels": "cep_gpu.kernels",
    "spark_udfs": "cep_gpu.spark_udfs",
    "cuda": "cep_gpu.cuda",
}

#: The layers, lowest first; a module may import its own layer and the layers below. Patterns are
#: fnmatch patterns over module names; the first layer whose pattern matches wins. A ``cep_gpu``
#: module no pattern names (an application package such as ``cep_gpu.muse``) is in the top layer.
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    ("base", ("cep_gpu.errors", "cep_gpu.jit", "cep_gpu.version")),
    ("model", ("cep_gpu.model", "cep_gpu.analysis", "cep_gpu.language", "cep_gpu.language.*",
               "cep_gpu.rule_text", "cep_gpu.kleene")),
    ("data", ("cep_gpu.events", "cep_gpu.events.*", "cep_gpu.evaluate", "cep_gpu.columns",
              "cep_gpu.ranges", "cep_gpu.output", "cep_gpu.stream_buffer", "cep_gpu.io",
              "cep_gpu.museum")),
    # the backends, in the order of their seams: the generic Numba kernels (they know nothing of
    # rules), the backend contract and code generation (rule -> kernel source, compiled around the
    # generic kernels), the matchers (CDP host loop, reference, automaton), the GPU combiner, the
    # planner
    ("cpu kernels", ("cep_gpu.kernels", "cep_gpu.kernels.cpu", "cep_gpu.kernels.kleene")),
    ("backend contract", ("cep_gpu.backends", "cep_gpu.codegen", "cep_gpu.codegen.*")),
    ("matchers", ("cep_gpu.cdp", "cep_gpu.cdp.*", "cep_gpu.reference", "cep_gpu.aip",
                  "cep_gpu.aip.*")),
    ("gpu backend", ("cep_gpu.cuda", "cep_gpu.kernels.*", "cep_gpu.ingest_cudf")),
    ("planner", ("cep_gpu.planner", "cep_gpu.planner.*")),
    ("detect", ("cep_gpu.detect", "cep_gpu.engine", "cep_gpu.engine.*", "cep_gpu.stream_match",
                "cep_gpu.stream_held")),
    ("top", ("cep_gpu", "cep_gpu.*")),
]


def _module_name(path: Path) -> str:
    rel = path.relative_to(ROOT)
    parts = [FOLDERS[rel.parts[0]], *rel.parts[1:]]
    parts[-1] = parts[-1].removesuffix(".py")
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _sources() -> dict[str, Path]:
    out = {}
    for folder in FOLDERS:
        for path in sorted((ROOT / folder).rglob("*.py")):
            out[_module_name(path)] = path
    return out


SOURCES = _sources()


def layer_of(module: str) -> int:
    for i, (_, patterns) in enumerate(LAYERS):
        if any(fnmatchcase(module, p) for p in patterns):
            return i
    raise AssertionError(f"{module} is in no layer")


def _is_package(module: str) -> bool:
    return SOURCES[module].name == "__init__.py"


def _resolve(module: str, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    base = module.split(".")
    if not _is_package(module):
        base = base[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def _type_checking_nodes(tree: ast.AST) -> set[int]:
    skip: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for child in node.body:
                skip.update(id(n) for n in ast.walk(child))
    return skip


def imports_of(module: str) -> list[tuple[str, tuple[str, ...], int]]:
    """(imported module, names imported from it, line) of every import of ``module`` that lands
    in the tree."""
    tree = ast.parse(SOURCES[module].read_text(), str(SOURCES[module]))
    skip = _type_checking_nodes(tree)
    found: list[tuple[str, tuple[str, ...], int]] = []
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Import):
            found += [(a.name, (), node.lineno) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            target = _resolve(module, node)
            plain = []
            for a in node.names:
                sub = f"{target}.{a.name}"
                if sub in SOURCES:  # `from pkg import submodule`
                    found.append((sub, (), node.lineno))
                else:
                    plain.append(a.name)
            if plain:
                found.append((target, tuple(plain), node.lineno))
        elif (
            isinstance(node, ast.Call)
            and ast.unparse(node.func).endswith("import_module")
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            name = node.args[0].value
            if name.startswith("."):
                package = module if _is_package(module) else module.rsplit(".", 1)[0]
                name = f"{package}{name}"
            found.append((name, (), node.lineno))
    return [(t, names, line) for t, names, line in found if t in SOURCES]


GRAPH = {m: imports_of(m) for m in SOURCES}


def _where(module: str, line: int) -> str:
    return f"{SOURCES[module].relative_to(ROOT)}:{line}"


def find_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (or a self-import)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    counter = [0]

    def visit(v: str) -> None:  # Tarjan; the graph has < 200 nodes, recursion is fine
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1 or v in graph[v]:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_tree_is_read():
    # the test must see the modules it guards (a broken path would pass every check vacuously)
    for name in ("cep_gpu.detect", "cep_gpu.kernels.cpu", "cep_gpu.spark_udfs.batch", "cep_gpu.model"):
        assert name in SOURCES
    assert len(SOURCES) > 50
    assert any(t == "cep_gpu.model" for t, _, _ in GRAPH["cep_gpu.detect"])


def test_every_module_has_a_layer():
    for module in SOURCES:
        layer_of(module)


def test_no_cycles():
    graph = {m: {t for t, _, _ in edges} for m, edges in GRAPH.items()}
    assert find_cycles(graph) == []


def test_no_import_of_a_higher_layer():
    bad = []
    for module, edges in GRAPH.items():
        for target, _, line in edges:
            if layer_of(target) > layer_of(module):
                bad.append(
                    f"{_where(module, line)}: {module} ({LAYERS[layer_of(module)][0]}) imports "
                    f"{target} ({LAYERS[layer_of(target)][0]})"
                )
    assert not bad, "\n".join(bad)


def test_no_private_names_across_modules():
    bad = []
    for module, edges in GRAPH.items():
        for target, names, line in edges:
            private = [n for n in names if n.startswith("_") and not n.startswith("__")]
            if private and target != module:
                bad.append(f"{_where(module, line)}: {module} imports {private} from {target}")
    assert not bad, "\n".join(bad)


# -- the checker itself must be able to fail ---------------------------------------------------------


def test_find_cycles_sees_a_cycle():
    assert find_cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert find_cycles({"a": {"a"}}) == [["a"]]
    assert find_cycles({"a": {"b"}, "b": set()}) == []


@pytest.mark.parametrize(
    ("module", "layer"),
    [("cep_gpu.model", "model"), ("cep_gpu.events", "data"), ("cep_gpu.cdp", "matchers"),
     ("cep_gpu.detect", "detect"), ("cep_gpu.spark_udfs.batch", "top"), ("cep_gpu.muse.query", "top"),
     ("cep_gpu.shedding.anything", "top"), ("cep_gpu", "top")],
)
def test_layer_map(module, layer):
    assert LAYERS[layer_of(module)][0] == layer


#: The oracle may read only the model, the event table and the backend contract: a bug in the
#: evaluator, the columns, the ranges, the code generator or the kernels must not hide in it.
# cep_gpu.kleene: the output-size limit of Kleene rules (a policy every backend applies the same
# way), not matcher code
ORACLE_MAY_IMPORT = {"cep_gpu.backends", "cep_gpu.errors", "cep_gpu.events", "cep_gpu.kleene", "cep_gpu.model"}


def test_the_reference_shares_no_matcher_code():
    used = {t for t, _, _ in GRAPH["cep_gpu.reference"]}
    assert used <= ORACLE_MAY_IMPORT, sorted(used - ORACLE_MAY_IMPORT)
