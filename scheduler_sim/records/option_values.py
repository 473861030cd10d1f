"""One option value checked against the option table (`check_value`), with a
message that names the option, what it must be and the bad value
(`block_size must be an integer >= 1, got 0`); and how any bad value is quoted
back to the user (`show`: its JSON spelling, short).
"""
from __future__ import annotations

import json
import math
import sys
from typing import Any

from .option_table import OPTIONS, SLO_METRICS, OptionSpec, parse_slo
from .spelling import did_you_mean

__all__ = ["check_value", "show"]


def _describe(spec: OptionSpec) -> str:
    if spec.kind == "int":
        text = "an integer"
        if spec.minimum is not None and spec.maximum is not None:
            text += f" from {int(spec.minimum)} to {int(spec.maximum):,}"
        elif spec.minimum is not None:
            text += f" >= {int(spec.minimum)}"
    elif spec.kind == "float":
        text = "a number"
        if spec.minimum is not None and spec.below is not None:
            text += f" in [{spec.minimum}, {spec.below})"
        elif spec.minimum is not None and spec.maximum is not None:
            text += (f" in {'(' if spec.exclusive_minimum else '['}{spec.minimum:g}, "
                     f"{spec.maximum:g}]")
        elif spec.minimum is not None:
            text += f" {'>' if spec.exclusive_minimum else '>='} {spec.minimum}"
    elif spec.kind == "duration":
        text = "a number"
        if spec.minimum is not None:
            text += f" {'>' if spec.exclusive_minimum else '>='} {spec.minimum:g}"
        text += " and <= 1e15"
    elif spec.kind == "slo":
        text = ("objectives like 'ttft=0.2,tpot=0.05' (metrics " + ", ".join(SLO_METRICS)
                + ", each a number > 0)")
    elif spec.kind == "bool":
        text = "true or false"
    elif spec.kind == "policies":
        text = "a policy name or a non-empty list of policy names"
    elif spec.choices:
        text = "one of " + ", ".join(repr(c) for c in spec.choices)
    else:
        text = "a string"
    if spec.nullable:
        text += " or null"
    return text


def show(value: Any) -> str:
    """How a bad value is quoted back to the user: JSON spelling, short."""
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, str):
        return repr(value) if len(value) <= 40 else repr(value[:37] + "...")
    if _is_int(value) and value.bit_length() > 200:  # its leading digits, whatever its size
        magnitude = abs(value)
        lead = str(magnitude // 10 ** max(0, int(magnitude.bit_length() * 0.30103) - 45))
        return ("-" + lead)[value >= 0:][:37] + "..."
    try:
        text = repr(value)
        if isinstance(value, (dict, list)):
            text = json.dumps(value, separators=(", ", ": "))
    except (TypeError, ValueError):
        pass
    except RecursionError:
        text = "an array" if isinstance(value, list) else "an object"
        text += " nested too deeply to show"
    return text if len(text) <= 40 else text[:37] + "..."


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _finite(value: Any) -> bool:
    """An int or a float that is a finite float (an int beyond 1.8e308 is not)."""
    if _is_int(value):
        return -sys.float_info.max <= value <= sys.float_info.max
    return isinstance(value, float) and math.isfinite(value)


def check_value(name: str, value: Any) -> tuple[Any, str | None]:
    """Validate one option value; return (normalised value, None) or (None, message).

    The message reads `block_size must be an integer >= 1, got 0`.
    """
    spec = OPTIONS[name]
    bad = f"{name} must be {_describe(spec)}, got {show(value)}"
    if value is None:
        return (None, None) if spec.nullable else (None, bad)
    if spec.kind == "int":
        if (not _is_int(value) or (spec.minimum is not None and value < spec.minimum)
                or (spec.maximum is not None and value > spec.maximum)):
            return None, bad
        return value, None
    if spec.kind == "float":
        if not _finite(value):
            return None, bad
        value = float(value)
        if spec.minimum is not None:
            if value < spec.minimum or (spec.exclusive_minimum and value == spec.minimum):
                return None, bad
        if spec.below is not None and value >= spec.below:
            return None, bad
        if spec.maximum is not None and value > spec.maximum:
            return None, bad
        return value, None
    if spec.kind == "duration":
        if not _finite(value):
            return None, bad
        if (value < spec.minimum or (spec.exclusive_minimum and value == spec.minimum)
                or value > 1e15):
            return None, bad
        return (int(value) if float(value).is_integer() else value), None
    if spec.kind == "slo":
        parsed = parse_slo(value)
        return (parsed, None) if parsed is not None else (None, bad)
    if spec.kind == "bool":
        return (value, None) if isinstance(value, bool) else (None, bad)
    if spec.kind == "policies":
        names = [value] if isinstance(value, str) else value
        if (not isinstance(names, list) or not names
                or not all(isinstance(n, str) and n for n in names)):
            return None, bad
        return list(names), None
    if not isinstance(value, str) or not value:
        return None, bad
    if spec.choices and value not in spec.choices:
        return None, bad + did_you_mean(value, spec.choices)
    return value, None
