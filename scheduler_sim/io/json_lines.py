"""One line of a JSON-lines file decoded as every reader of files decodes it:
UTF-8 only, no byte-order mark, no lone surrogates, no key given twice, NaN and
Infinity kept as markers for the field check that meets them, and each reason a
line is not JSON worded the same way (`invalid JSON: ... at column N`).
"""
from __future__ import annotations

import json
from typing import Any, Callable

__all__ = ["NonFiniteConstant", "unique_keys", "decode_line", "json_value", "json_kind"]


def json_kind(value: Any) -> str:
    """What a decoded JSON value is, as a message names it: `null`, `number`, `array`, ..."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"


class NonFiniteConstant:
    """NaN or Infinity read from a line: kept as a value so that the field check
    that meets it names the field (`prompt_tokens must be an integer, got NaN`)."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return self.name


def unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object's pairs as a dict; ValueError naming a key given twice."""
    out = dict(pairs)
    if len(out) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise ValueError(f"duplicate key {key!r}")
            seen.add(key)
    return out


# One decoder for every line: NaN and Infinity are refused (`NonFiniteConstant`), and so
# are duplicate keys (`unique_keys`).
_DECODER = json.JSONDecoder(parse_constant=NonFiniteConstant, object_pairs_hook=unique_keys)


def _lone_surrogate(value: Any) -> str | None:
    """The first lone surrogate in any string of a decoded JSON value, if any."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            for ch in item:
                if "\ud800" <= ch <= "\udfff":
                    return ch
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return None


def decode_line(raw: bytes) -> tuple[Any, str | None]:
    """Parse one line into a JSON value, or return the reason it is not one."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        return None, f"invalid UTF-8 at byte {exc.start + 1}, got {raw[exc.start:exc.start + 1]!r}"
    if text.startswith("\ufeff"):  # as json.loads
        return None, "invalid JSON: Unexpected UTF-8 BOM (decode using utf-8-sig) at column 1"
    value, problem = json_value(_DECODER.decode, text)
    if problem is None and (b"\\ud" in raw or b"\\uD" in raw):
        bad = _lone_surrogate(value)
        if bad is not None:
            return None, (f"invalid text: a string holds a lone surrogate "
                          f"(\\u{ord(bad):04x}), which is not a character, got {ascii(bad)}")
    return value, problem


def json_value(decode: Callable[[str], Any], text: str) -> tuple[Any, str | None]:
    """`decode(text)`, or why the text is not JSON, worded as every reader words it."""
    try:
        return decode(text), None
    except RecursionError:
        return None, "JSON nested too deeply"
    except json.JSONDecodeError as exc:
        return None, f"invalid JSON: {exc.msg} at column {exc.colno}, {_near(exc.doc, exc.pos)}"
    except ValueError as exc:
        return None, f"invalid JSON: {exc}"


def _near(doc: str, pos: int) -> str:
    """What the reader found where the text stops being JSON: up to 20 characters of
    the line from there, or the line's end."""
    end = doc.find("\n", pos)
    rest = doc[pos:end] if end >= 0 else doc[pos:]
    if not rest.strip():
        return "got the end of the line"
    return f"got {rest[:20]!r}" + ("..." if len(rest) > 20 else "")
