"""JUnit XML for `check --junit FILE`: every expectation a test case, per policy.

CI systems (GitLab, Jenkins, GitHub's test reporters) read this format and
show each expectation as a test with its own pass or fail and message. One
`testsuite` per trace; a `testcase` per expectation and policy it applies
to, named `line N: <what> [<policy>]`; a failed one carries a `failure`
whose text lists every field with expected against actual. No timestamps or
durations are written, so the same check writes the same bytes.
"""
from __future__ import annotations

import re
from xml.sax.saxutils import escape as _escape, quoteattr as _quoteattr

from .expectations import CheckResult

__all__ = ["junit_xml"]

# Characters XML 1.0 cannot carry at all (control characters, lone surrogates):
# written as \uXXXX so that an odd request id never breaks the document.
_ILLEGAL = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")


def _clean(text: str) -> str:
    return _ILLEGAL.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


def escape(text: str) -> str:
    return _escape(_clean(text))


def quoteattr(text: str) -> str:
    return _quoteattr(_clean(text), {"\n": "&#10;"})


def junit_xml(trace_name: str, results: list[CheckResult]) -> str:
    """The JUnit XML document of one trace's check results."""
    failures = sum(1 for r in results if not r.ok)
    lines = ['<?xml version="1.0" encoding="UTF-8"?>',
             f'<testsuites name="scheduler-sim check" tests="{len(results)}" '
             f'failures="{failures}" errors="0">',
             f'  <testsuite name={quoteattr(trace_name)} tests="{len(results)}" '
             f'failures="{failures}" errors="0" skipped="0">']
    for result in results:
        head = (f'    <testcase classname={quoteattr(trace_name)} '
                f'name={quoteattr(result.name)}')
        if result.ok:
            lines.append(head + "/>")
            continue
        messages = result.messages(trace_name)
        summary = "; ".join(f.text() for f in result.failures)
        lines.append(head + ">")
        lines.append(f'      <failure message={quoteattr(summary)} type="expectation">'
                     f'{escape(chr(10).join(messages))}</failure>')
        lines.append("    </testcase>")
    lines += ["  </testsuite>", "</testsuites>"]
    return "\n".join(lines) + "\n"
