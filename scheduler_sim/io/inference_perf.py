"""What an inference-perf client did, from its resolved config (`results/config.yaml`).

inference-perf (kubernetes-sigs/inference-perf) writes the config it ran
with, defaults filled in, as block YAML (PyYAML's dump). The `blis-run`
importer needs a few of its facts, and nothing here runs or imports YAML
code: `parse_yaml` reads the subset PyYAML writes for such a config
(nested mappings, `- ` lists, plain or quoted scalars, `[]` and `{}`) and
refuses anything else with `file:line`. JSON, a subset of YAML, is read as
JSON.

The facts (`ClientConfig`), as the inference-perf that ran them used them
(a version between 2025-10-15 and 2025-11-24; docs/real-vllm-runs.md):

- the `shared_prefix` generator: `num_groups` x `num_prompts_per_group`
  prompts, each a group's random `system_prompt_len`-token system prompt
  and a random `question_len`-token question, shuffled once, then sent
  round robin: the stage's n-th request (from 0) sends prompt n mod that
  count;
- `output_len`, sent as `max_tokens`, with the server's `ignore_eos`: every
  request that completes generates exactly `output_len` tokens;
- a `constant` load: each stage sends int(rate x duration) requests;
- `request_timeout`: null means aiohttp's default total timeout, 300 s.
"""
from __future__ import annotations

import dataclasses
import json
import re
from typing import Any

from ..records.errors import TraceError
from ..records.option_values import show

__all__ = ["ClientConfig", "read_client_config", "client_config", "parse_yaml",
           "AIOHTTP_TIMEOUT"]

# aiohttp's ClientSession default: ClientTimeout(total=300). inference-perf passes no
# timeout of its own when `request_timeout` is null.
AIOHTTP_TIMEOUT = 300.0


@dataclasses.dataclass(frozen=True)
class ClientConfig:
    """The facts of an inference-perf run the importer uses."""

    prompts: int              # num_groups x num_prompts_per_group, sent round robin
    groups: int               # system prompts, each shared by prompts / groups prompts
    system_prompt_len: int    # tokens of a system prompt, as generated (before re-tokenising)
    question_len: int
    output_len: int           # max_tokens of every request, with ignore_eos
    stages: tuple[tuple[float, int], ...]  # (rate, duration s)
    timeout: float            # seconds after which the client gives up on a request

    @property
    def stage_requests(self) -> list[int]:
        """Requests each stage sends: int(rate x duration), as inference-perf counts."""
        return [int(rate * duration) for rate, duration in self.stages]


# --- a YAML subset -----------------------------------------------------------------

_PLAIN = re.compile(r"[A-Za-z0-9_./:@+-][A-Za-z0-9_ ./:@+,()-]*")
_KEY = re.compile(r"([A-Za-z_][A-Za-z0-9_.-]*):(?: (.*))?$")
_INT = re.compile(r"[-+]?[0-9]+")
_FLOAT = re.compile(r"[-+]?([0-9]+\.[0-9]*|\.[0-9]+)([eE][-+]?[0-9]+)?|[-+]?[0-9]+[eE][-+]?[0-9]+")


class _YamlError(Exception):
    def __init__(self, line: int, text: str) -> None:
        super().__init__(text)
        self.line = line


def _scalar(text: str, line: int) -> Any:
    """A YAML scalar as PyYAML writes one: null, a bool, a number, a string."""
    text = text.strip()
    if text in ("null", "~", "Null", "NULL"):
        return None
    if text in ("true", "True", "TRUE"):
        return True
    if text in ("false", "False", "FALSE"):
        return False
    if text == "[]":
        return []
    if text == "{}":
        return {}
    if _INT.fullmatch(text) and len(text) <= 20:
        return int(text)
    if _FLOAT.fullmatch(text) and len(text) <= 40:
        return float(text)
    if len(text) >= 2 and text[0] == text[-1] == "'":
        return text[1:-1].replace("''", "'")
    if len(text) >= 2 and text[0] == text[-1] == '"' and "\\" not in text:
        return text[1:-1]
    if _PLAIN.fullmatch(text) and not text.endswith(":") and ": " not in text \
            and " #" not in text:
        return text
    raise _YamlError(line, f"unsupported YAML value {show(text)} (this reader takes the "
                           "plain mappings, lists and scalars inference-perf writes)")


def _lines(text: str) -> list[tuple[int, int, str]]:
    """(line number, indent, content) of every line that is not blank or a comment."""
    out = []
    for number, raw in enumerate(text.split("\n"), start=1):
        raw = raw.rstrip("\r")
        stripped = raw.lstrip(" ")
        if not stripped or stripped.startswith("#") or stripped in ("---", "..."):
            continue
        if stripped.startswith("\t") or "\t" in raw[:len(raw) - len(stripped)]:
            raise _YamlError(number, "a tab in the indentation")
        out.append((number, len(raw) - len(stripped), stripped.rstrip()))
    return out


def _block(lines: list[tuple[int, int, str]], at: int, indent: int) -> tuple[Any, int]:
    """The mapping or list whose lines start at `lines[at]` with `indent`; the value
    and the index of the first line after it."""
    number, _, content = lines[at]
    if content.startswith("- ") or content == "-":
        return _sequence(lines, at, indent)
    return _mapping(lines, at, indent)


def _value_after(lines, at: int, indent: int, rest: str | None,
                 number: int) -> tuple[Any, int]:
    """The value of a `key:` whose text after the colon is `rest`."""
    if rest is not None and rest.strip():
        return _scalar(rest, number), at + 1
    if at + 1 < len(lines):
        next_indent, content = lines[at + 1][1], lines[at + 1][2]
        # PyYAML writes a mapping's list at the key's own indent: `stages:\n- rate: 5`
        # (an enclosing list's dashes sit further left, so the dash is this key's).
        if next_indent > indent or (next_indent == indent and content.startswith("-")):
            return _block(lines, at + 1, next_indent)
    return None, at + 1


def _mapping(lines, at: int, indent: int) -> tuple[dict, int]:
    out: dict[str, Any] = {}
    while at < len(lines):
        number, ind, content = lines[at]
        if ind < indent or (ind == indent and content.startswith("-")):
            break
        if ind > indent:
            raise _YamlError(number, "unexpected indentation")
        match = _KEY.match(content)
        if match is None:
            raise _YamlError(number, f"expected `key: value`, got {show(content)}")
        key = match[1]
        if key in out:
            raise _YamlError(number, f"duplicate key {key!r}")
        out[key], at = _value_after(lines, at, indent, match[2], number)
    return out, at


def _sequence(lines, at: int, indent: int) -> tuple[list, int]:
    out: list[Any] = []
    while at < len(lines):
        number, ind, content = lines[at]
        if ind != indent or not (content.startswith("- ") or content == "-"):
            if ind > indent:
                raise _YamlError(number, "unexpected indentation")
            break
        item = content[1:].lstrip(" ")
        inner = indent + len(content) - len(item)
        if not item:
            raise _YamlError(number, "an empty list item")
        if _KEY.match(item):
            # `- key: value` opens a mapping whose other keys sit at the item's indent.
            rest = [(number, inner, item)] + lines[at + 1:]
            value, used = _mapping(rest, 0, inner)
            out.append(value)
            at += used
        else:
            out.append(_scalar(item, number))
            at += 1
    return out, at


def parse_yaml(text: str, name: str) -> Any:
    """The value of a YAML document in the subset above (or of a JSON document).
    TraceError `name:line: ...` when it is not in the subset."""
    if text.startswith("\ufeff"):
        text = text[1:]
    if text.lstrip().startswith("{"):
        try:
            return json.loads(text)
        except (ValueError, RecursionError) as exc:
            raise TraceError([f"{name}:1: invalid JSON: {exc}"]) from None
    try:
        lines = _lines(text)
        if not lines:
            raise _YamlError(1, "an empty document")
        value, at = _block(lines, 0, lines[0][1])
        if at < len(lines):
            raise _YamlError(lines[at][0], "text after the document's end (indentation?)")
    except _YamlError as exc:
        raise TraceError([f"{name}:{exc.line}: {exc}"]) from None
    except RecursionError:
        raise TraceError([f"{name}:1: nested too deeply"]) from None
    return value


# --- the facts -----------------------------------------------------------------------

def _get(tree: Any, path: str) -> Any:
    node = tree
    for part in path.split("."):
        if not isinstance(node, dict) or part not in node:
            raise KeyError(path)
        node = node[part]
    return node


def client_config(tree: Any, name: str) -> ClientConfig:
    """The facts of a resolved inference-perf config (a parsed document); TraceError
    naming every field that is missing, of the wrong kind, or not understood."""
    problems: list[str] = []

    def field(path: str, check, want: str, default: Any = KeyError) -> Any:
        try:
            value = _get(tree, path)
        except KeyError:
            if default is not KeyError:
                return default
            problems.append(f"{name}: {path} is missing; {want}")
            return None
        if not check(value):
            problems.append(f"{name}: {path} must be {want}, got {show(value)}")
            return None
        return value

    def count(value: Any, low: int = 1) -> bool:
        return isinstance(value, int) and not isinstance(value, bool) and low <= value <= 10**9

    if not isinstance(tree, dict):
        raise TraceError([f"{name}: expected a mapping (inference-perf's resolved config), "
                          f"got {show(tree)}"])
    field("data.type", lambda v: v == "shared_prefix",
          "'shared_prefix' (the only data generator the importer reproduces)")
    try:
        sp = _get(tree, "data.shared_prefix")
    except KeyError:
        sp = None
    if isinstance(sp, dict) and "num_groups" not in sp and "num_unique_system_prompts" in sp:
        raise TraceError([
            f"{name}: data.shared_prefix names num_unique_system_prompts, not num_groups: "
            "a requested profile (profile.yaml), not the resolved config; the "
            "inference-perf that ran ignored those names (and enable_multi_turn_chat); "
            "give results/config.yaml"])
    groups = field("data.shared_prefix.num_groups", count, "an integer >= 1")
    per_group = field("data.shared_prefix.num_prompts_per_group", count, "an integer >= 1")
    system = field("data.shared_prefix.system_prompt_len", lambda v: count(v, 0),
                   "an integer >= 0")
    question = field("data.shared_prefix.question_len", lambda v: count(v, 0),
                     "an integer >= 0")
    output = field("data.shared_prefix.output_len", count, "an integer >= 1")
    field("data.shared_prefix.enable_multi_turn_chat", lambda v: v is False,
          "false (a multi-turn chat appends each answer to the next prompt)", False)
    field("server.ignore_eos", lambda v: v is True,
          "true (without it the generated lengths are not known)")
    field("load.type", lambda v: v == "constant",
          "'constant' (each stage then sends int(rate x duration) requests)")
    stages = field("load.stages", lambda v: isinstance(v, list) and v != [],
                   "a non-empty list of {rate, duration}")
    parsed: list[tuple[float, int]] = []
    for i, stage in enumerate(stages or []):
        rate = stage.get("rate") if isinstance(stage, dict) else None
        duration = stage.get("duration") if isinstance(stage, dict) else None
        if (isinstance(rate, bool) or not isinstance(rate, (int, float))
                or not 0 < rate <= 1e6 or not count(duration)):
            problems.append(f"{name}: load.stages[{i}] must have a rate > 0 (at most 1e6) "
                            f"and a duration, an integer >= 1, got {show(stage)}")
            continue
        parsed.append((float(rate), duration))
    timeout = field("load.request_timeout",
                    lambda v: v is None or (not isinstance(v, bool)
                                            and isinstance(v, (int, float)) and 0 < v <= 1e9),
                    "null or a number of seconds > 0", None)
    if problems:
        raise TraceError(problems)
    return ClientConfig(groups * per_group, groups, system, question, output, tuple(parsed),
                        AIOHTTP_TIMEOUT if timeout is None else float(timeout))


def read_client_config(text: str, name: str) -> ClientConfig:
    """`client_config` of the text of a resolved inference-perf config."""
    return client_config(parse_yaml(text, name), name)
