"""The rule language: Several rules in one text, and every error path of the rule language."""

from __future__ import annotations

import pytest
from language_cases import TOUCH, S

import cep_gpu
from cep_gpu.errors import RuleError, RuleSyntaxError
from cep_gpu.language import parse_rule, parse_rules
from cep_gpu.language import parser as parser_module
from cep_gpu.model import (
    Attr,
    Compare,
    Const,
    Predicate,
)

# ------------------------------------------------------------------------------------ several rules


def test_parse_rules_separators_and_hierarchy():
    text = """
    define Hot from T(v > 30) where room = T.room;define Cold from T(v < 0) where room = T.room ;;

    define Swing
    from Cold(room = $r)

      and each Hot(room = $r) within 1 h from Cold
    ; define Seq pattern SEQ(Swing s, Hot h) within 2 h
    """
    rules = parse_rules(text)
    assert [r.name for r in rules] == ["Hot", "Cold", "Swing", "Seq"]
    assert rules[0].text == "define Hot from T(v > 30) where room = T.room"
    assert rules[2].predicates[1] == Predicate("Hot", "Hot", "each", 3600 * S, 0, 0)
    assert parse_rules("") == [] and parse_rules(" ;\n; ") == []


def test_cycle_in_hierarchy_names_the_rules():
    with pytest.raises(RuleError) as err:
        parse_rules("define A from B()\n\ndefine B from C() and each A() within 1 s from C")
    assert "cycle" in err.value.message and "A -> B -> A" in err.value.message
    assert (err.value.line, err.value.column) == (1, 8)
    with pytest.raises(RuleError, match="B -> B"):
        parse_rule("define B from X() and each B() within 1 s from X")


def test_parse_rule_wants_exactly_one():
    with pytest.raises(RuleError, match="found 2; use parse_rules"):
        parse_rule("define A from X() define B from Y()")
    with pytest.raises(RuleError, match="found 0"):
        parse_rule("  # nothing\n")


# ------------------------------------------------------------------------------------ errors


@pytest.mark.parametrize(
    "text, kind, fragment, line, column",
    [
        # syntax
        (
            "define A from X(a = 1",
            RuleSyntaxError,
            "unexpected end of rule text; expected ')' or 'and'",
            1,
            22,
        ),
        (
            "define A from X() and each Y() within 5 minutes from X",
            RuleSyntaxError,
            "unexpected 'minutes'; expected a time unit",
            1,
            41,
        ),
        (
            "define A from X() and each Y() within 2 min\nfrom",
            RuleSyntaxError,
            "expected a name",
            2,
            5,
        ),
        ("define A\nfrom X(a == 1)", RuleSyntaxError, "unexpected '='", 2, 11),
        ("define A from X(a = 1) where b = X.c q", RuleSyntaxError, "unexpected 'q'", 1, 38),
        ("define A from X(a = 'x\ny')", RuleSyntaxError, "unexpected character", 1, 21),
        ("define A from X(a = 1) @", RuleSyntaxError, "unexpected character '@'", 1, 24),
        ("define A pattern SEQ() within 1 s", RuleSyntaxError, "unexpected ')'", 1, 22),
        ("define A from X() X()", RuleSyntaxError, "unexpected 'X'; expected", 1, 19),
        # references
        (
            "define A from X() and each Y() within 1 s from Z",
            RuleError,
            "from 'Z' is not a predicate of this rule (known: X, Y)",
            1,
            48,
        ),
        (
            "define A from X()\n and not N() between X and Q",
            RuleError,
            "between 'Q' is not a predicate",
            2,
            28,
        ),
        ("define A from X(v > Q.v)", RuleError, "reference 'Q' is not a predicate", 1, 21),
        (
            "define A from X() and each Y() within 1 s from Z and each Z() within 1 s from X",
            RuleError,
            "declared later",
            1,
            48,
        ),
        (
            "define A from X() and each Y() as B within 1 s from B",
            RuleError,
            "refers to itself",
            1,
            53,
        ),
        ("define A from X(v > X.v)", RuleError, "refers to itself", 1, 21),
        # a negation or aggregate naming the predicate declared right after it: not "itself"
        (
            "define Q from C() and not Z() between C and Y and each Y() within 1 s from C",
            RuleError,
            "between refers to 'Y', which is declared later",
            1,
            45,
        ),
        (
            "define Q from C() and n = Sum(B() within 5 s from C).x = A.s and last A() within 5 s from C",
            RuleError,
            "reference refers to 'A', which is declared later",
            1,
            58,
        ),
        (
            "define Q from C() and not Z(v > Y.v) within 1 s from C and each Y() within 1 s from C",
            RuleError,
            "reference refers to 'Y', which is declared later",
            1,
            33,
        ),
        (
            "define A from X() and each Y(v > Z.v) within 1 s from X and each Z() within 1 s from X",
            RuleError,
            "declared later",
            1,
            34,
        ),
        (
            "define A from X() and each Y() within 1 s from X\n and each Y() within 1 s from X and each Z() within 1 s from Y",
            RuleError,
            "'Y' is ambiguous: 2 predicates",
            2,
            62,
        ),
        (
            "define A from X() as T and each Y() as T within 1 s from X",
            RuleError,
            "duplicate alias 'T'",
            1,
            40,
        ),
        (
            "define A from X() as Y and each Y() within 1 s from X",
            RuleError,
            "alias 'Y' is also the event type",
            1,
            19,
        ),
        ("define A from X() consuming Q", RuleError, "consuming 'Q' is not a predicate", 1, 29),
        ("define A from X() consuming X, X", RuleError, "consumed twice", 1, 32),
        # parameters
        ("define A from X(a > $p)", RuleError, "parameter $p is used before it is bound", 1, 21),
        (
            "define A from X() and not N(a = $p) within 1 s from X",
            RuleError,
            "parameter $p is used before it is bound",
            1,
            33,
        ),
        (
            "define A from X() and c = Count(N(a = $p) within 1 s from X) > 1",
            RuleError,
            "parameter $p is used before",
            1,
            39,
        ),
        ("define A from X() where b = $q", RuleError, "parameter $q is used before", 1, 29),
        ("define A from X(a = $__p__)", RuleError, "reserved", 1, 21),
        # windows
        (
            "define A from X() and each Y() within 0 s from X",
            RuleError,
            "window must be positive",
            1,
            39,
        ),
        (
            "define A from X() and not Y() within 0.0 min from X",
            RuleError,
            "window must be positive",
            1,
            38,
        ),
        (
            "define A from X() and each Y() within 0.0000000001 s from X",
            RuleError,
            "not a whole number of nanoseconds",
            1,
            39,
        ),
        ("define A pattern SEQ(X a, Y b) within 0 ms", RuleError, "window must be positive", 1, 39),
        ("define A pattern SEQ(X a, Y b) where a.v = b.v", RuleError, "needs a window", 1, 8),
        ("define A pattern SEQ(X a, NOT(Y n))", RuleError, "needs a window", 1, 8),
        # aggregates
        (
            "define A from X() and v = Median(Y() within 1 s from X).a > 1",
            RuleError,
            "unknown aggregate function 'Median'",
            1,
            27,
        ),
        (
            "define A from X() and v = Count(Y() within 1 s from X).a > 1",
            RuleError,
            "Count takes no attribute",
            1,
            56,
        ),
        (
            "define A from X() and v = Avg(Y() within 1 s from X) > 1",
            RuleError,
            "Avg needs the attribute",
            1,
            27,
        ),
        (
            "define A from X() and v = Sum(Y() within 1 s from X).a\n and v = Sum(Y() within 1 s from X).a",
            RuleError,
            "aggregate name 'v' used twice",
            2,
            6,
        ),
        ("define A from X() where b = w", RuleError, "unknown name 'w'", 1, 29),
        (
            "define A from X() and v = Sum(Y() within 1 s from X).a > v2",
            RuleError,
            "unknown name 'v2'",
            1,
            58,
        ),
        # define / where
        ("define A(x: text) from X()", RuleError, "unknown attribute type 'text'", 1, 13),
        ("define A(x: int, x: int) from X() where x = X.x", RuleError, "declared twice", 1, 18),
        (
            "define A(x: int)\nfrom X()",
            RuleError,
            "'x' is declared in define but not assigned in where",
            1,
            10,
        ),
        ("define A from X() where b = X.a, b = X.c", RuleError, "assigned twice", 1, 34),
        ("define A pattern SEQ(X a) return b := a.v, b := a.w", RuleError, "assigned twice", 1, 44),
        (
            "define A(z: int) pattern SEQ(X a) return b := a.v",
            RuleError,
            "'z' is declared in define but not assigned in return",
            1,
            10,
        ),
        # SEQ
        (
            "define A pattern AND(X a, NOT(Y b), Z c) within 1 s",
            RuleError,
            "NOT is not allowed inside AND",
            1,
            27,
        ),
        ("define A pattern SEQ(X a, X a) within 1 s", RuleError, "duplicate alias 'a'", 1, 29),
        (
            "define A pattern SEQ(X, X) within 1 s",
            RuleError,
            "duplicate alias 'X'; give each position its own alias",
            1,
            25,
        ),
        (
            "define A pattern SEQ(NOT(X n)) within 1 s",
            RuleError,
            "at least one event that is not negated",
            1,
            18,
        ),
        (
            "define A pattern SEQ(X a, NOT(Y n), NOT(Y m), X b) where n.a = m.a within 1 s",
            RuleError,
            "only one NOT alias (m, n)",
            1,
            58,
        ),
        (
            "define A pattern SEQ(X a, X b) where q.a = 1 within 1 s",
            RuleError,
            "unknown alias 'q' (aliases: a, b)",
            1,
            38,
        ),
        (
            "define A pattern SEQ(X a, X b) where a = 1 within 1 s",
            RuleError,
            "unknown name 'a'",
            1,
            38,
        ),
        (
            "define A pattern SEQ(X a, X b) where a.v = $p within 1 s",
            RuleError,
            "parameters ($name) are not part",
            1,
            44,
        ),
        (
            "define A pattern SEQ(X a, NOT(Y n), X b) within 1 s return v := n.v",
            RuleError,
            "unknown alias 'n'",
            1,
            65,
        ),
        ("define A pattern SEQ(X a) within 1 s within 2 s", RuleError, "within given twice", 1, 38),
        # timestamps: parameters bind attributes only, and aggregates take no ts (both said
        # "no event in the input has attribute 'ts'" when detecting)
        (
            "define Q from C(ts = $t) and each A(ts < $t) within 10 s from C",
            RuleError,
            "a parameter binds an attribute, not a timestamp (ts = $t)",
            1,
            17,
        ),
        (
            "define Q(z: float) from C() and n = Max(A() within 10 s from C).ts where z = n",
            RuleError,
            "aggregates over timestamps are not supported",
            1,
            65,
        ),
        # hostile / limits
        ("define __import__ from X()", RuleError, "rule name '__import__' is reserved", 1, 8),
        ("define A from __class__()", RuleError, "event type '__class__' is reserved", 1, 15),
        (
            "define A from X(__import__ = 1)",
            RuleError,
            "attribute name '__import__' is reserved",
            1,
            17,
        ),
        ("define A from X() as __x__", RuleError, "alias '__x__' is reserved", 1, 22),
        (
            "define A from X() where __dict__ = X.a",
            RuleError,
            "attribute name '__dict__' is reserved",
            1,
            25,
        ),
        (
            "define A from X() where b = X.__class__",
            RuleError,
            "attribute name '__class__' is reserved",
            1,
            31,
        ),
        ("define A pattern SEQ(X __a__) within 1 s", RuleError, "alias '__a__' is reserved", 1, 24),
        ("define A from X(a = 99999999999999999999)", RuleError, "does not fit in 64 bits", 1, 21),
        ("define A from X(a = 1e999)", RuleError, "out of range", 1, 21),
        ("define A from X(a = 'x\\q')", RuleError, "unknown escape", 1, 21),
        ("define Bé from X()", RuleSyntaxError, "unexpected character", 1, 9),
        ("define A from X(a = 1)\x00", RuleSyntaxError, "unexpected character '\\x00'", 1, 23),
    ],
)
def test_errors(text, kind, fragment, line, column):
    with pytest.raises(kind) as err:
        parse_rules(text)
    assert type(err.value) is kind
    assert fragment in err.value.message, err.value.message
    assert (err.value.line, err.value.column) == (line, column), str(err.value)
    # the message shows the rule line with a caret under the spot
    assert f"(line {line}, column {column})" in str(err.value)
    assert "^" in str(err.value)


def test_syntax_error_lists_expected_tokens_in_human_terms():
    with pytest.raises(RuleSyntaxError) as err:
        parse_rule("define A from X() and each Y() within 2")
    assert err.value.expected == ("a time unit (ms, s, sec, min, h)",)
    with pytest.raises(RuleSyntaxError) as err:
        parse_rule("define A from X() and")
    assert err.value.expected == ("'not'", "a name", "each, last or first")
    assert isinstance(err.value, SyntaxError)  # a RuleSyntaxError is a SyntaxError too


def test_very_long_names_are_rejected():
    long = "A" * 129
    with pytest.raises(RuleError, match="event type too long"):
        parse_rule(f"define R from {long}()")
    with pytest.raises(RuleError, match="attribute name too long"):
        parse_rule(f"define R from X({long.lower()} = 1)")
    ok = "A" * 128
    assert parse_rule(f"define R from {ok}()").predicates[0].event_type == ok


def test_hostile_strings_are_data():
    payload = "'); __import__('os').system('echo pwned'); ('"
    text = 'define R from X(name = "' + payload.replace('"', '\\"') + '")'
    rule = parse_rule(text)
    assert rule.conditions == (Compare("=", Attr(0, "name"), Const(payload)),)
    rule = parse_rule("define R from X(q = \"a'b\" and r = 'c\"d' and s = '\\\\n')")
    assert [c.right.value for c in rule.conditions] == ["a'b", 'c"d', "\\n"]


def test_hostile_structure_is_rejected():
    with pytest.raises(RuleSyntaxError, match="nested too deeply"):
        parse_rule("define R from X(a = " + "(" * 100 + "1" + ")" * 100 + ")")
    # deep but allowed nesting compiles
    rule = parse_rule("define R from X(a = " + "(" * 50 + "1" + ")" * 50 + ")")
    assert rule.conditions == (Compare("=", Attr(0, "a"), Const(1)),)
    # parentheses inside strings do not count
    parse_rule("define R from X(a = '" + "(" * 100 + "')")
    with pytest.raises(RuleSyntaxError, match="unexpected"):
        parse_rule("define R from X(a = 1) where b = X.a; import os")
    with pytest.raises(cep_gpu.ArgumentError, match=r"rule text must be a str, got bytes: decode it first"):
        parse_rule(b"define R from X()")  # type: ignore[arg-type]
    with pytest.raises(cep_gpu.ArgumentError, match="rule text must be a str, got NoneType"):
        cep_gpu.parse_rules(None)  # type: ignore[arg-type]


def test_long_expression_chains_are_rejected_with_position():
    """A long chain a + b + ... parsed, then every backend died with a RecursionError; past about
    1100 terms the parser said "rule nested too deeply" without a position."""
    chain = " + ".join(["a.x"] * 101)
    with pytest.raises(RuleError, match="expression too deep or too long") as err:
        parse_rule(f"define Q pattern SEQ(A a, B b) where {chain} > b.x within 5 s")
    assert (err.value.line, err.value.column) == (1, 38)
    with pytest.raises(RuleError, match="expression too deep or too long") as err:
        parse_rule("define Q\nfrom C(x > " + "-" * 3000 + "x)")
    assert err.value.line == 2 and err.value.column is not None
    with pytest.raises(RuleError, match="expression too deep or too long"):
        parse_rule("define Q from C(x > 1) where z = " + " * ".join(["C.x"] * 1200))
    # grouped with parentheses, as the message says, the same terms are fine
    half = " + ".join(["a.x"] * 60)
    parse_rule(f"define Q pattern SEQ(A a, B b) where ({half}) + ({half}) > b.x within 5 s")


@pytest.mark.parametrize("backend", ["reference", "cpu"])
def test_the_longest_chain_accepted_runs(backend):
    import pandas as pd

    import cep_gpu

    chain = " + ".join(["a.x"] * 100)
    events = pd.DataFrame({"type": ["A", "B"], "ts": [1.0, 2.0], "x": [1, 2]})
    out = cep_gpu.detect(events, f"define Q pattern SEQ(A a, B b) where {chain} > b.x within 5 s",
                         backend=backend)
    assert out["ids"].tolist() == [[0, 1]]


def test_text_size_limit(monkeypatch):
    monkeypatch.setattr(parser_module, "MAX_TEXT_CHARS", 100)
    with pytest.raises(RuleSyntaxError, match="rule text too long"):
        parse_rule("define R from X()" + " " * 100)


def test_many_rules_parse_quickly():
    text = "\n\n".join(
        f"define R{i} from C{i}(k = $k) and each B{i}(k = $k) within 15 s from C{i} "
        f"and each A{i}(k = $k) within 15 s from B{i}"
        for i in range(1000)
    )
    rules = parse_rules(text)
    assert len(rules) == 1000 and rules[999].predicates[2] == Predicate(
        "A999", "A999", "each", 15 * S, 1, 1
    )


def test_every_rule_block_of_the_language_doc_parses():
    import re
    from pathlib import Path

    doc = (Path(__file__).parent.parent / "docs" / "language.md").read_text()
    blocks = re.findall(r"```(tesla|seq)\n(.*?)```", doc, re.S)
    assert len(blocks) >= 7
    for kind, text in blocks:
        rule = parse_rule(text)
        assert rule.syntax == ("tesla" if kind == "tesla" else "seq")
    # the museum rules of the doc are the ones of the examples
    assert parse_rule(blocks[0][1]) == TOUCH
