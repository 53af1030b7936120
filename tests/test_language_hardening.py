"""Issue 11, language items: reserved output names, duplicate rule names, int64's minimum literal,
a UTF-8 byte order mark, ``time_unit="sec"`` and source positions of errors found after parsing."""

from __future__ import annotations

import pandas as pd
import pytest

import cep_gpu
from cep_gpu.errors import EventError, RuleError
from cep_gpu.language import parse_rule, parse_rules
from cep_gpu.model import Compare, Const

INT64_MIN = -(2**63)


# ------------------------------------------------------------------ 4. reserved output names


@pytest.mark.parametrize("name", ["rule", "ids", "ts"])
@pytest.mark.parametrize(
    "template, line, column",
    [
        ("define A from X() where {n} = X.v", 1, 25),
        ("define A({n}: int) from X() where {n} = X.v", 1, 10),
        ("define A\npattern SEQ(X a)\nreturn {n} := a.v", 3, 8),
        ("define A pattern SEQ(X a) return k := a.v, {n} = a.v", 1, 44),
    ],
)
def test_reserved_output_names_are_rejected_with_position(name, template, line, column):
    with pytest.raises(RuleError) as info:
        parse_rule(template.format(n=name))
    err = info.value
    assert (err.line, err.column) == (line, column)
    assert f"{name!r} is reserved" in err.message
    assert "^" in str(err)


def test_names_close_to_reserved_ones_are_fine():
    rule = parse_rule("define A pattern SEQ(X a) return rules := a.v, ts2 := a.ts, Ids := 1")
    assert [a.name for a in rule.attributes] == ["rules", "ts2", "Ids"]


def test_reading_ts_of_an_input_is_still_allowed():
    rule = parse_rule("define A from X() where when = X.ts")
    assert rule.attributes[0].name == "when"


# ------------------------------------------------------------------ 5. duplicate define names


def test_duplicate_define_names_name_both_positions():
    text = "define A from X()\n\n  define B from Y()\n\ndefine A pattern SEQ(Z z)"
    with pytest.raises(RuleError) as info:
        parse_rules(text)
    err = info.value
    assert (err.line, err.column) == (5, 8)
    assert "first at line 1, column 8" in err.message
    assert "'A'" in err.message


def test_distinct_define_names_still_parse():
    assert [r.name for r in parse_rules("define A from X(); define B from X()")] == ["A", "B"]


# ------------------------------------------------------------------ 10. small language items


def test_int64_minimum_literal_is_accepted():
    rule = parse_rule("define A pattern SEQ(X a) where a.v > -9223372036854775808")
    assert rule.conditions == (Compare(">", rule.conditions[0].left, Const(INT64_MIN)),)
    assert type(rule.conditions[0].right.value) is int


@pytest.mark.parametrize("literal", ["9223372036854775808", "-9223372036854775809", "--9223372036854775808"])
def test_int64_overflowing_literals_still_fail(literal):
    with pytest.raises(RuleError, match="does not fit in 64 bits"):
        parse_rule(f"define A pattern SEQ(X a) where a.v > {literal}")


@pytest.mark.parametrize("backend", ["reference", "cpu", "aip"])
def test_int64_minimum_literal_matches_on_every_backend(backend):
    events = pd.DataFrame({"type": ["X", "X", "X"], "ts": [1, 2, 3], "v": [INT64_MIN, 0, 5]})
    out = cep_gpu.detect(
        events,
        "define A pattern SEQ(X a) where a.v = -9223372036854775808 return k := a.v - 0",
        backend=backend,
    )
    assert [tuple(i) for i in out["ids"]] == [(0,)]
    assert list(out["k"]) == [INT64_MIN]


def test_byte_order_mark_is_accepted_and_positions_ignore_it():
    text = "define A from X(v > 1)"
    assert parse_rule("\ufeff" + text) == parse_rule(text)
    with pytest.raises(RuleError) as info:
        parse_rules("\ufeffdefine A from X()\ndefine A from Y()")
    assert (info.value.line, info.value.column) == (2, 8)


def test_byte_order_mark_in_a_rule_file(tmp_path):
    from cep_gpu.cli import main

    rules = tmp_path / "rules.cep"
    rules.write_text("define Hit pattern SEQ(X a)", encoding="utf-8-sig")
    events = tmp_path / "events.csv"
    events.write_text("type,ts\nX,1\nY,2\nX,3\n")
    assert rules.read_bytes().startswith(b"\xef\xbb\xbf")
    assert main(["run", str(rules), str(events), "--backend", "reference"]) in (0, None)


def test_byte_order_mark_elsewhere_is_still_an_error():
    with pytest.raises(cep_gpu.RuleSyntaxError):
        parse_rule("define A\ufeff from X()")


def test_time_unit_sec_is_the_same_as_s():
    events = pd.DataFrame({"type": ["X", "Y", "Y"], "ts": [0, 2, 4]})
    rule = "define P pattern SEQ(X a, Y b) within 3 sec"
    by_sec = cep_gpu.detect(events, rule, backend="reference", time_unit="sec")
    by_s = cep_gpu.detect(events, rule, backend="reference", time_unit="s")
    assert [tuple(i) for i in by_sec["ids"]] == [(0, 1)]
    pd.testing.assert_frame_equal(by_sec, by_s)


def test_time_unit_sec_in_the_engine_and_unknown_units_still_fail():
    engine = cep_gpu.Engine("define P pattern SEQ(X a)", backend="reference", time_unit="sec")
    assert engine is not None
    with pytest.raises(EventError, match="unknown time_unit"):
        cep_gpu.detect(pd.DataFrame({"type": ["X"], "ts": [1]}), "define P pattern SEQ(X a)",
                       time_unit="secs")


# ------------------------------------------------------------------ 9. positions of later errors

EVENTS = pd.DataFrame({"type": ["X", "Y"], "ts": [1, 2], "v": [1.0, 2.0], "s": ["a", "b"]})


@pytest.mark.parametrize(
    "text, line, column, words",
    [
        ("define A from X(w > 1)", 1, 17, "reads attribute 'w'"),
        ("define A from X() and each Y() within 1 s from X\nwhere k = Y.zz", 2, 13,
         "reads attribute 'zz'"),
        ("define A\npattern SEQ(X a, Y b)\nwhere a.s = 3 within 1 s", 3, 7,
         "compares a string with a number"),
        ("define A pattern SEQ(X a) where 'x' = a.v", 1, 33, "compares a string with a number"),
        ("define A pattern SEQ(X a) where a.s < 'x'", 1, 33, "only be compared with = and !="),
        ("define A from X() and v=Avg(Y() within 1 s from X).s > 1", 1, 52, "Avg needs a numeric"),
        # an aggregate is a number: comparing it with a string is refused like an attribute
        ("define A from X() and n = Count(Y() within 1 s from X) = 'x'", 1, 56,
         "compares a string with a number"),
        ("define A from X() and n = Count(Y() within 1 s from X) > X.s", 1, 56,
         "compares a string with a number"),
        ("define A pattern SEQ(X a, KL(Y b), X c) where count(b) != 'x' within 1 s", 1, 47,
         "compares a string with a number"),
        ("define A from X() and n = Max(Y() within 1 s from X).s = 'x'", 1, 54, "Max needs a numeric"),
        # a composite's string attribute named like the input's float one: the conflict, not
        # "compares a string with a number" of a comparison of two strings
        ("define P(v: string) from X() where v = 'hi'\n"
         "define Q pattern SEQ(P p, Y b) where p.v = 'hi' within 50 s", 2, 38,
         "holds float values in the input but is declared string by rule 'P'"),
        ("define B from Y()\n\ndefine A(k: string) from X() where k = X.v", 3, 36,
         "declared string but its value is float"),
    ],
)
@pytest.mark.parametrize("backend", ["reference", "cpu"])
def test_errors_after_parsing_point_at_the_rule_text(text, line, column, words, backend):
    with pytest.raises(RuleError) as info:
        cep_gpu.detect(EVENTS, text, backend=backend)
    err = info.value
    assert words in err.message
    assert (err.line, err.column) == (line, column)
    shown = str(err).splitlines()
    assert shown[-2].strip() == text.splitlines()[line - 1].strip()
    assert shown[-1].index("^") - shown[-2].index(text.splitlines()[line - 1][:3]) == column - 1
    assert "Compare(" not in str(err) and "Attr(" not in str(err)


def test_positions_take_no_part_in_equality():
    a = parse_rule("define A from X(v > 1)")
    b = parse_rule("define A\n   from X(  v   >   1 )")
    assert a.conditions[0].pos != b.conditions[0].pos
    assert a == b and hash(a) == hash(b) and repr(a.conditions) == repr(b.conditions)


def test_a_rule_built_by_hand_still_gets_a_plain_error():
    from dataclasses import replace

    rule = replace(parse_rule("define A from X(w > 1)"), source="")
    with pytest.raises(RuleError, match="reads attribute 'w'") as info:
        cep_gpu.detect(EVENTS, [rule], backend="reference")
    assert info.value.line is None


def test_equal_rules_from_different_texts_point_into_their_own_text():
    for text, column in (("define A from X(w > 1)", 17), ("define A from   X(  w > 1)", 21)):
        with pytest.raises(RuleError) as info:
            cep_gpu.detect(EVENTS, text, backend="reference")
        assert info.value.column == column
