"""kubectl's label selector (`-l`), checked before it reaches the API server.

The grammar is apimachinery's (k8s.io/apimachinery/pkg/labels/selector.go): requirements
separated by commas, each `key`, `!key`, `key=value`, `key==value`, `key!=value`,
`key in (v1,v2)`, `key notin (v1,v2)`, `key>N` or `key<N`; keys are qualified names and values
label values. A malformed selector is bad input (exit 2), not a server's 400 (exit 1).
"""

from __future__ import annotations

import re

from nccl_k8s.errors import UsageError
from nccl_k8s.spec._values import LABEL_VALUE, is_qualified_name, quote

_FORM = (
    "expected kubectl's label selector: key, !key, key=value, key!=value, key in (a,b), "
    "key notin (a,b), key>N or key<N, separated by commas"
)
# The lexer's tokens: the operators and brackets, or an identifier (no space, no operator char).
_TOKEN = re.compile(r"\s*(!=|==|=|!|\(|\)|,|>|<|[^\s!=(),<>]+)")


def _tokens(text: str) -> list[str] | None:
    out: list[str] = []
    pos = 0
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if m is None:  # only trailing spaces are left
            return out if not text[pos:].strip() else None
        out.append(m.group(1))
        pos = m.end()
    return out


def _value(flag: str, text: str, value: str) -> None:
    if len(value) > 63 or not LABEL_VALUE.match(value):
        raise UsageError(
            f"{flag} {quote(text)}: {quote(value)} is not a label value (at most 63 letters, "
            "digits, '-', '_', '.', starting and ending with a letter or digit)",
            key=flag,
        )


def _requirement(flag: str, text: str, toks: list[str], i: int) -> int:
    """Check the requirement at toks[i]; return the index after it."""

    def bad(why: str) -> UsageError:
        return UsageError(f"{flag} {quote(text)}: {why}; {_FORM}", key=flag)

    def at(j: int) -> str:
        return toks[j] if j < len(toks) else ""

    negated = at(i) == "!"
    key = at(i + negated)
    if not is_qualified_name(key):
        raise bad(f"{quote(key) if key else 'nothing'} is not a label key")
    j = i + negated + 1
    op = at(j)
    if negated or op in ("", ","):
        return j
    if op in ("=", "==", "!="):
        value = at(j + 1)
        if value in ("", ","):
            return j + 1  # key= selects an empty value
        _value(flag, text, value)
        return j + 2
    if op in (">", "<"):
        if not at(j + 1).isdigit():
            raise bad(f"{key}{op} needs a whole number")
        return j + 2
    if op in ("in", "notin"):
        if at(j + 1) != "(":
            raise bad(f"{key} {op} needs a list in brackets")
        k, values = j + 2, 0
        while at(k) not in (")", ""):
            if at(k) != ",":
                _value(flag, text, at(k))
                values += 1
            k += 1
        if at(k) != ")" or values == 0:
            raise bad(f"{key} {op} needs values and a closing ')'")
        return k + 1
    raise bad(f"{quote(op)} after {quote(key)} is not an operator")


def label_selector(flag: str, text: str) -> str:
    """`text` when it is a valid label selector; UsageError naming what is wrong otherwise."""
    toks = _tokens(text)
    if toks is None or not toks:
        raise UsageError(f"{flag} {quote(text)}: {_FORM}", key=flag)
    i = 0
    while True:
        i = _requirement(flag, text, toks, i)
        if i == len(toks):
            return text
        if toks[i] != "," or i + 1 == len(toks):
            raise UsageError(
                f"{flag} {quote(text)}: unexpected {quote(toks[i])}; {_FORM}", key=flag
            )
        i += 1
