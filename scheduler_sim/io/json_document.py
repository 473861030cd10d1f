"""A JSON document read element by element, so that each problem names its line:
a run of inference-sim/training (one object whose `requests` list is read item
by item) or a list of per-request objects (a run's ground truth), each item
with the line it starts on. NaN, Infinity and a key given twice are refused
(`DECODER`, also the decoder of a measured file's lines).
"""
from __future__ import annotations

import json
import re
from typing import Any

from ..records.errors import TraceError
from .json_lines import unique_keys

__all__ = ["JSONDocument", "DECODER"]

_WS = re.compile(r"[ \t\n\r]*")


class _Refused(ValueError):
    """A JSON constant (NaN, Infinity) the files never hold."""


def _refuse(name: str) -> Any:
    raise _Refused(f"{name} is not a number a run holds")


DECODER = json.JSONDecoder(object_pairs_hook=unique_keys, parse_constant=_refuse)


class JSONDocument:
    """A JSON document read element by element: the top level's values, and the
    items of one list with the line each starts on."""

    def __init__(self, text: str, name: str) -> None:
        self.text = text
        self.name = name
        self._pos = 0
        self._line = 1

    def line_at(self, pos: int) -> int:
        """The line of the text at `pos` (positions are asked for in increasing order)."""
        self._line += self.text.count("\n", self._pos, pos)
        self._pos = pos
        return self._line

    def fail(self, pos: int, what: str) -> TraceError:
        """The error naming the line of `pos`: `name:line: what`."""
        return TraceError([f"{self.name}:{self.line_at(pos)}: {what}"])

    def skip(self, pos: int) -> int:
        """The position after the JSON whitespace at `pos`."""
        return _WS.match(self.text, pos).end()

    def value(self, pos: int) -> tuple[Any, int]:
        """The JSON value at `pos` and the position after it; TraceError when it is not one."""
        try:
            return DECODER.raw_decode(self.text, pos)
        except RecursionError:
            raise self.fail(pos, "JSON nested too deeply") from None
        except json.JSONDecodeError as exc:
            raise TraceError([f"{self.name}:{exc.lineno}: invalid JSON: {exc.msg} at "
                              f"column {exc.colno}"]) from None
        except ValueError as exc:
            raise self.fail(pos, f"invalid JSON: {exc}") from None

    def items(self, pos: int) -> tuple[list[tuple[int, Any]], int]:
        """The items of the list opening at `pos`, each (line, value)."""
        out = []
        pos = self.skip(pos + 1)
        if self.text.startswith("]", pos):
            return out, pos + 1
        while True:
            line = self.line_at(pos)
            item, pos = self.value(pos)
            out.append((line, item))
            pos = self.skip(pos)
            if self.text.startswith("]", pos):
                return out, pos + 1
            if not self.text.startswith(",", pos):
                raise self.fail(pos, "invalid JSON: expected ',' or ']' in a list")
            pos = self.skip(pos + 1)

    def read(self, list_key: str | None) -> tuple[dict[str, Any], list[tuple[int, Any]]]:
        """A top-level object whose `list_key` list is read item by item, or (with
        `list_key` None) a top-level list."""
        text = self.text[1:] if self.text.startswith("\ufeff") else self.text
        self.text = text
        pos = self.skip(0)
        if list_key is None:
            if not text.startswith("[", pos):
                raise self.fail(pos, "expected a JSON list of per-request objects")
            items, pos = self.items(pos)
            top: dict[str, Any] = {}
        else:
            if not text.startswith("{", pos):
                raise self.fail(pos, "expected a JSON object (a run of inference-sim/training)")
            top, items, pos = self._object(pos, list_key)
        pos = self.skip(pos)
        if pos < len(text):
            raise self.fail(pos, "invalid JSON: text after the document")
        return top, items

    def _object(self, pos: int, list_key: str):
        top: dict[str, Any] = {}
        items: list[tuple[int, Any]] = []
        pos = self.skip(pos + 1)
        if self.text.startswith("}", pos):
            return top, items, pos + 1
        while True:
            key, pos = self.value(pos)
            if not isinstance(key, str):
                raise self.fail(pos, "invalid JSON: expected a key")
            if key in top:
                raise self.fail(pos, f"invalid JSON: duplicate key {key!r}")
            pos = self.skip(pos)
            if not self.text.startswith(":", pos):
                raise self.fail(pos, "invalid JSON: expected ':'")
            pos = self.skip(pos + 1)
            if key == list_key and self.text.startswith("[", pos):
                items, pos = self.items(pos)
                top[key] = None
            else:
                top[key], pos = self.value(pos)
            pos = self.skip(pos)
            if self.text.startswith("}", pos):
                return top, items, pos + 1
            if not self.text.startswith(",", pos):
                raise self.fail(pos, "invalid JSON: expected ',' or '}'")
            pos = self.skip(pos + 1)
