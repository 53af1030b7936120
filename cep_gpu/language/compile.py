"""Rule text -> :class:`~cep_gpu.model.Rule` objects: parse, compile each rule, check the set."""

from __future__ import annotations

from lark import Tree

from ..analysis import rule_order
from ..errors import RuleError
from ..model import Rule
from .common import Source
from .parser import parse_tree, strip_bom
from .seq import compile_seq
from .tesla import compile_tesla

#: The deepest nesting of operations in one expression: ``a + b + ... + z`` nests one level per
#: operator (so does a chain of unary minus signs or of ``not``). Every backend walks and generates
#: code for expressions recursively; this keeps them far from Python's recursion limit.
MAX_EXPR_DEPTH = 100
_EXPR_NODES = frozenset(
    {"arith", "neg", "unary", "comparison", "or_expr", "and_expr", "not_expr"}
)
_WRAPPERS = frozenset({"or_expr", "and_expr"})


def compile_tree(src: Source, tree: Tree) -> Rule:
    """Compile one ``tesla_rule`` or ``seq_rule`` tree."""
    if tree.data == "tesla_rule":
        return compile_tesla(src, tree)
    return compile_seq(src, tree)


def compile_rules_text(text: str) -> list[Rule]:
    """Parse and compile every rule in ``text`` (separated by blank lines or ``;``).

    Each rule starts with ``define``, so a rule may itself contain blank lines. Raises
    :class:`~cep_gpu.errors.RuleSyntaxError` or :class:`~cep_gpu.errors.RuleError`, the latter also
    for a cycle in the composite-event hierarchy (a rule reading its own output, directly or
    through other rules).
    """
    text = strip_bom(text)
    src = Source(text)
    tree = parse_tree(text)
    _check_unique_names(src, tree)
    _check_expression_depth(src, tree)
    try:
        rules = [compile_tree(src, t) for t in tree.children if isinstance(t, Tree)]
    except RecursionError:
        raise RuleError("rule nested too deeply") from None
    _check_hierarchy(src, tree, rules)
    return rules


def compile_rule_text(text: str) -> Rule:
    """Parse and compile exactly one rule."""
    rules = compile_rules_text(text)
    if len(rules) != 1:
        raise RuleError(
            f"expected exactly one rule, found {len(rules)}"
            + ("; use parse_rules for several" if rules else "")
        )
    return rules[0]


def _check_unique_names(src: Source, tree: Tree) -> None:
    """Two rules defining the same composite type would give equal ids to different composite
    events and feed both into consumers: reject the second, naming both positions."""
    seen: dict[str, tuple[int, int]] = {}
    for t in tree.children:
        if not isinstance(t, Tree):
            continue
        tok = t.children[0]
        name = str(tok)
        if name in seen:
            line, column = seen[name]
            raise src.error(
                f"rule {name!r} is defined twice (first at line {line}, column {column}); "
                f"give each rule its own name",
                tok,
            )
        seen[name] = (tok.line, tok.column)


def _check_expression_depth(src: Source, tree: Tree) -> None:
    """Reject an expression nested deeper than :data:`MAX_EXPR_DEPTH` operations (a very long
    chain ``a + b + ...``), pointing at the operation that goes over; without recursion, as the
    tree may be deeper than Python's limit."""
    stack = [(tree, 0)]
    while stack:
        node, depth = stack.pop()
        # an or/and of one operand is only the grammar's wrapper, not an operation
        if node.data in _EXPR_NODES and (len(node.children) > 1 or node.data not in _WRAPPERS):
            depth += 1
            if depth > MAX_EXPR_DEPTH:
                raise src.error(
                    f"expression too deep or too long: more than {MAX_EXPR_DEPTH} nested "
                    "operations (a chain a + b + c + ... nests one per operator); "
                    "group a long chain with parentheses, (a + b + c) + (d + e + f)",
                    node,
                )
        stack.extend((c, depth) for c in node.children if isinstance(c, Tree))


def _check_hierarchy(src: Source, tree: Tree, rules: list[Rule]) -> None:
    """Reject cycles among the rules' composite types, pointing at the first rule of the cycle."""
    try:
        rule_order(rules)
    except RuleError as exc:
        trees = [t for t in tree.children if isinstance(t, Tree)]
        names = exc.message.rpartition(": ")[2].split(" -> ")
        at = next((t for t, r in zip(trees, rules) if r.name == names[0]), None)
        if at is None:
            raise
        raise src.error(exc.message, at.children[0]) from None
