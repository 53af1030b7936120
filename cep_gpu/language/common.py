"""What both syntaxes share when compiling a syntax tree: names, literals, durations, expressions,
the ``define`` header and the composite event's attributes.

Rule text never becomes code: every name is checked against a strict pattern here, and literals
become :class:`~cep_gpu.model.Const` values.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from fractions import Fraction

from lark import Token, Tree

from ..errors import RuleError
from ..model import Arith, Compare, Const, Expr, Neg, OutputAttribute, ValueType

#: Identifiers: ASCII letters, digits and underscores, not starting with a digit.
IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
#: The longest identifier accepted.
MAX_NAME_LENGTH = 128
VALUE_TYPES: tuple[ValueType, ...] = ("string", "int", "float", "bool")
#: Nanoseconds per duration unit (the trailing period and case are ignored).
UNITS = {"ms": 10**6, "s": 10**9, "sec": 10**9, "min": 60 * 10**9, "h": 3600 * 10**9}
_INT64_MAX = 2**63 - 1
#: Output attribute names that would collide with the output's own columns.
RESERVED_OUTPUT_NAMES = ("rule", "ids", "ts", "id_counts")
_ESCAPES = {"\\": "\\", "'": "'", '"': '"', "n": "\n", "t": "\t"}


class Source:
    """The whole rule text being compiled, for error positions."""

    def __init__(self, text: str) -> None:
        self.text = text

    def error(self, message: str, at: Tree | Token | None = None) -> RuleError:
        """A :class:`RuleError` pointing at ``at`` (a token or a tree with positions)."""
        line, column = position(at)
        return RuleError(message, line=line, column=column, text=self.text)

    def name(self, tok: Token, what: str = "name") -> str:
        """``tok`` as an identifier, checked: pattern, length, no dunder names."""
        value = str(tok)
        if len(value) > MAX_NAME_LENGTH:
            raise self.error(
                f"{what} too long ({len(value)} characters; at most {MAX_NAME_LENGTH})", tok
            )
        if not IDENTIFIER.match(value):
            raise self.error(f"invalid {what} {value!r}", tok)
        if value.startswith("__") and value.endswith("__"):
            raise self.error(
                f"{what} {value!r} is reserved (names may not start and end with '__')", tok
            )
        return value


def position(at: Tree | Token | None) -> tuple[int | None, int | None]:
    """The 1-based (line, column) of a token or tree, or (None, None)."""
    if isinstance(at, Token):
        return at.line, at.column
    if isinstance(at, Tree) and not at.meta.empty:
        return at.meta.line, at.meta.column
    return None, None


def pos_of(at: Tree | Token | None) -> tuple[int, int] | None:
    """The position of ``at`` for a model object's ``pos`` field (None when unknown)."""
    line, column = position(at)
    return None if line is None else (line, column)


def tokens(tree: Tree, type_: str | None = None) -> list[Token]:
    """The direct token children of ``tree`` (of one terminal type if given)."""
    return [c for c in tree.children if isinstance(c, Token) and (type_ is None or c.type == type_)]


def subtrees(tree: Tree, data: str | None = None) -> list[Tree]:
    """The direct subtree children of ``tree`` (with one rule name if given)."""
    return [c for c in tree.children if isinstance(c, Tree) and (data is None or c.data == data)]


# ------------------------------------------------------------------------------------ literals


def number(src: Source, tok: Token) -> int | float:
    """A NUMBER token as an int (no point or exponent) or a finite float."""
    text = str(tok)
    if re.fullmatch(r"[0-9]+", text):
        value = int(text)
        if value > _INT64_MAX:
            raise src.error(f"integer {text} does not fit in 64 bits", tok)
        return value
    value = float(text)
    if not math.isfinite(value):
        raise src.error(f"number {text} is out of range", tok)
    return value


def string(src: Source, tok: Token) -> str:
    """A STRING token ('...' or "...") with its escapes (\\\\ \\' \\" \\n \\t) decoded."""
    body = str(tok)[1:-1]
    out: list[str] = []
    i = 0
    while i < len(body):
        ch = body[i]
        if ch == "\\":
            esc = body[i + 1]
            if esc not in _ESCAPES:
                raise src.error(f"unknown escape '\\{esc}' in string", tok)
            out.append(_ESCAPES[esc])
            i += 2
        else:
            out.append(ch)
            i += 1
    return "".join(out)


def duration(src: Source, tree: Tree) -> int:
    """A ``duration`` tree (NUMBER UNIT) as a positive whole number of nanoseconds."""
    num, unit = tree.children
    key = str(unit).lower().rstrip(".")
    ns = Fraction(str(num)) * UNITS[key]
    if ns <= 0:
        raise src.error(f"window must be positive, got {num} {unit}", tree)
    if ns.denominator != 1:
        raise src.error(f"window {num} {unit} is not a whole number of nanoseconds", tree)
    if ns > _INT64_MAX:
        raise src.error(f"window {num} {unit} is too long", tree)
    return int(ns)


# ------------------------------------------------------------------------------------ expressions


class Resolver:
    """How the names inside an expression are resolved; each syntax and context supplies one."""

    def bare(self, tok: Token) -> Expr:
        raise NotImplementedError

    def qualified(self, name: Token, attr: Token) -> Expr:
        raise NotImplementedError

    def param(self, tok: Token) -> Expr:
        raise NotImplementedError


def compile_expr(src: Source, tree: Tree | Token, res: Resolver) -> Expr:
    """An arithmetic expression tree -> model expression (unary minus on literals folded)."""
    kind = tree.data
    if kind == "number":
        return Const(number(src, tree.children[0]))
    if kind == "string":
        return Const(string(src, tree.children[0]))
    if kind == "true":
        return Const(True)
    if kind == "false":
        return Const(False)
    if kind == "param":
        return res.param(tree.children[0])
    if kind == "bare":
        return res.bare(tree.children[0])
    if kind == "qualified":
        return res.qualified(tree.children[0], tree.children[1])
    if kind in ("indexed", "call"):
        # Kleene closure: `b[i].v`, `b[i+1].v` and `count(b)`, `sum(b.v)` (SEQ patterns only)
        handler = getattr(res, kind, None)
        if handler is None:
            what = "indexed references (b[i].v)" if kind == "indexed" else "function calls"
            raise src.error(
                f"{what} are only for Kleene positions KL(T b) of SEQ patterns", tree
            )
        return handler(tree)
    if kind == "neg":
        inner = tree.children[1]
        if inner.data == "number" and str(inner.children[0]) == str(_INT64_MAX + 1):
            return Const(-(_INT64_MAX + 1))  # int64's minimum: only its negation fits
        arg = compile_expr(src, inner, res)
        if (
            isinstance(arg, Const)
            and isinstance(arg.value, (int, float))
            and not isinstance(arg.value, bool)
        ):
            if isinstance(arg.value, int) and -arg.value > _INT64_MAX:  # `--9223372036854775808`
                raise src.error(f"integer {-arg.value} does not fit in 64 bits", tree)
            return Const(-arg.value)
        return Neg(arg)
    if kind == "arith":
        left, op, right = tree.children
        return Arith(str(op), compile_expr(src, left, res), compile_expr(src, right, res))
    if kind == "unary":  # unary plus: `+x` is x
        return compile_expr(src, tree.children[-1], res)
    if kind == "comparison":
        return compile_comparison(src, tree, res)
    raise src.error(f"unexpected expression {kind}", tree)  # pragma: no cover - grammar bug


def compile_comparison(src: Source, tree: Tree, res: Resolver) -> Compare:
    """``expr op expr`` -> :class:`Compare`."""
    left, op, right = tree.children
    return Compare(
        str(op.children[0]),
        compile_expr(src, left, res),
        compile_expr(src, right, res),
        pos=pos_of(tree),
    )


# ------------------------------------------------------------------------------------ header, output


def attr_decls(src: Source, tree: Tree | None) -> dict[str, tuple[ValueType, Token]]:
    """``define Name(attr: type, ...)`` -> {attr: (type, token)} in declaration order."""
    out: dict[str, tuple[ValueType, Token]] = {}
    if tree is None:
        return out
    for decl in subtrees(tree, "attr_decl"):
        name_tok, type_tok = decl.children
        name = src.name(name_tok, "attribute name")
        _check_output_name(src, name, name_tok)
        type_ = str(type_tok).lower()
        if type_ not in VALUE_TYPES:
            raise src.error(
                f"unknown attribute type {str(type_tok)!r} for {name!r}; "
                f"expected one of {', '.join(VALUE_TYPES)}",
                type_tok,
            )
        if name in out:
            raise src.error(f"attribute {name!r} declared twice", name_tok)
        out[name] = (type_, name_tok)  # type: ignore[assignment]
    return out


def output_attributes(
    src: Source,
    declared: dict[str, tuple[ValueType, Token]],
    assignments: list[tuple[Token, Tree]],
    compile_value: Callable[[Tree], Expr],
    clause: str,
) -> tuple[OutputAttribute, ...]:
    """The composite event's attributes: declared ones in ``define`` order, then the others in
    the order written (type ``None``). Every declared attribute must be assigned."""
    values: dict[str, Expr] = {}
    where: dict[str, Token] = {}
    for name_tok, expr_tree in assignments:
        name = src.name(name_tok, "attribute name")
        _check_output_name(src, name, name_tok)
        if name in values:
            raise src.error(f"attribute {name!r} assigned twice in {clause}", name_tok)
        values[name] = compile_value(expr_tree)
        where[name] = name_tok
    out: list[OutputAttribute] = []
    for name, (type_, tok) in declared.items():
        if name not in values:
            raise src.error(
                f"attribute {name!r} is declared in define but not assigned in {clause}", tok
            )
        out.append(OutputAttribute(name, type_, values[name], pos=pos_of(where[name])))
    out.extend(
        OutputAttribute(n, None, e, pos=pos_of(where[n]))
        for n, e in values.items()
        if n not in declared
    )
    return tuple(out)


def _check_output_name(src: Source, name: str, tok: Token) -> None:
    """Reject attribute names that the output already uses for its own columns."""
    if name in RESERVED_OUTPUT_NAMES:
        raise src.error(
            f"attribute name {name!r} is reserved: the output has its own {name!r} column "
            f"(reserved: {', '.join(RESERVED_OUTPUT_NAMES)}); choose another name",
            tok,
        )
