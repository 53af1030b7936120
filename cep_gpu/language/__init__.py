"""The rule language: TESLA rules and SEQ/AND patterns, parsed with lark into the rule model."""

from __future__ import annotations

from ..model import Rule


def parse_rule(text: str) -> Rule:
    """Parse one rule (TESLA or SEQ pattern) into a :class:`~cep_gpu.model.Rule`."""
    from .compile import compile_rule_text

    return compile_rule_text(text)


def parse_rules(text: str) -> list[Rule]:
    """Parse several rules separated by blank lines or ``;``."""
    from .compile import compile_rules_text

    return compile_rules_text(text)
