"""Rule text -> lark syntax tree, with parse errors turned into :class:`RuleSyntaxError`.

The grammar (``grammar.lark``) is parsed with lark's LALR parser and contextual lexer: linear time,
no backtracking, and keywords reserved only where the grammar accepts them.
"""

from __future__ import annotations

import re
from functools import lru_cache
from pathlib import Path

from lark import Lark, Tree
from lark.exceptions import UnexpectedCharacters, UnexpectedEOF, UnexpectedInput, UnexpectedToken

from ..errors import ArgumentError, RuleSyntaxError

#: The largest rule text accepted by one call (characters). A thousand typical rules take ~300 kB.
MAX_TEXT_CHARS = 10_000_000
#: The deepest nesting of parentheses accepted (keeps the recursive tree walks far from Python's
#: recursion limit).
MAX_NESTING = 64

# How expected terminals are shown to users.
_TERMINAL_NAMES = {
    "NAME": "a name",
    "PARAM": "a parameter ($name)",
    "NUMBER": "a number",
    "STRING": "a string",
    "UNIT": "a time unit (ms, s, sec, min, h)",
    "POLICY": "each, last or first",
    "TRUE": "true",
    "FALSE": "false",
    "$END": "the end of the text",
}


@lru_cache(maxsize=1)
def _parser() -> Lark:
    grammar = (Path(__file__).parent / "grammar.lark").read_text()
    return Lark(
        grammar,
        parser="lalr",
        lexer="contextual",
        propagate_positions=True,
        maybe_placeholders=True,
    )


def _display(terminal: str) -> str:
    if terminal in _TERMINAL_NAMES:
        return _TERMINAL_NAMES[terminal]
    try:
        pattern = _parser().get_terminal(terminal).pattern
    except KeyError:
        return terminal
    if pattern.type == "str":
        return repr(pattern.value)
    # keyword regexes look like "define(?!...)": show the word itself
    word = re.match(r"[a-z]+", pattern.value)
    return repr(word.group(0)) if word else terminal.strip("_").lower()


def expected_names(terminals) -> tuple[str, ...]:
    """The human names of lark terminal names, sorted, without duplicates."""
    return tuple(sorted({_display(t) for t in terminals}))


def strip_bom(text: str) -> str:
    """``text`` without a leading UTF-8 byte order mark (editors on Windows write one)."""
    return text[1:] if isinstance(text, str) and text.startswith("\ufeff") else text


def parse_tree(text: str) -> Tree:
    """Parse ``text`` (zero or more rules) into a lark tree; raise :class:`RuleSyntaxError`."""
    if not isinstance(text, str):
        hint = ": decode it first, e.g. text.decode('utf-8')" if isinstance(text, (bytes, bytearray)) else ""
        raise ArgumentError(f"rule text must be a str, got {type(text).__name__}{hint}")
    text = strip_bom(text)
    if len(text) > MAX_TEXT_CHARS:
        raise RuleSyntaxError(
            f"rule text too long ({len(text)} characters; at most {MAX_TEXT_CHARS})",
            line=1,
            column=1,
        )
    _check_nesting(text)
    try:
        return _parser().parse(text)
    except UnexpectedInput as exc:
        raise _syntax_error(exc, text) from None


def _syntax_error(exc: UnexpectedInput, text: str) -> RuleSyntaxError:
    if isinstance(exc, UnexpectedCharacters):
        expected = expected_names(exc.allowed or ())
        snippet = text[exc.pos_in_stream : exc.pos_in_stream + 1]
        what = f"unexpected character {snippet!r}"
        line, column = exc.line, exc.column
    elif isinstance(exc, UnexpectedToken):
        expected = expected_names(exc.expected or ())
        tok = exc.token
        if tok.type == "$END":
            what = "unexpected end of rule text"
            line, column = _end_position(text)
        else:
            what = f"unexpected {tok.value!r}"
            line, column = tok.line, tok.column
    elif isinstance(exc, UnexpectedEOF):
        expected = expected_names(exc.expected or ())
        what = "unexpected end of rule text"
        line, column = _end_position(text)
    else:  # pragma: no cover - lark has no other kinds today
        expected, what, line, column = (), str(exc), 1, 1
    message = what
    if expected:
        message += "; expected " + _join(expected)
    return RuleSyntaxError(
        message, line=line or 1, column=column or 1, text=text, expected=expected
    )


def _join(items: tuple[str, ...]) -> str:
    if len(items) == 1:
        return items[0]
    return ", ".join(items[:-1]) + " or " + items[-1]


def _end_position(text: str) -> tuple[int, int]:
    stripped = text.rstrip()
    line = stripped.count("\n") + 1
    column = len(stripped) - (stripped.rfind("\n") + 1) + 1
    return line, column


_STRINGS_AND_COMMENTS = re.compile(r"\"(?:[^\"\\\n]|\\.)*\"|'(?:[^'\\\n]|\\.)*'|(?:#|//)[^\n]*")


def _check_nesting(text: str) -> None:
    """Reject absurdly deep parentheses before the parser builds an absurdly deep tree."""
    if text.count("(") <= MAX_NESTING:
        return
    depth = 0
    for m in re.finditer(r"[()\n]|" + _STRINGS_AND_COMMENTS.pattern, text):
        ch = m.group(0)
        if ch == "(":
            depth += 1
            if depth > MAX_NESTING:
                line = text.count("\n", 0, m.start()) + 1
                column = m.start() - (text.rfind("\n", 0, m.start()) + 1) + 1
                raise RuleSyntaxError(
                    f"parentheses nested too deeply (more than {MAX_NESTING} levels)",
                    line=line,
                    column=column,
                    text=text,
                )
        elif ch == ")":
            depth = max(depth - 1, 0)
