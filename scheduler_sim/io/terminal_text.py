"""Text from a trace made safe for a terminal: every character that is not
printable shown as its escape (`printable`), so that a request id can neither
move the cursor nor forge a line of a table; and the columns a text takes on a
terminal (`text_width`: CJK characters two, combining marks none), by which
table cells are padded (`ljust`, `rjust`).
"""
from __future__ import annotations


__all__ = ["printable", "text_width", "ljust", "rjust"]

_ESCAPES = {"\n": "\\n", "\r": "\\r", "\t": "\\t", "\\": "\\\\"}


def printable(text: str, backslashes: bool = False) -> str:
    """`text` safe to print on one line of a terminal: every character that is not
    printable (`str.isprintable`: C0 and C1 controls, DEL, line and paragraph
    separators, format characters such as bidi overrides, lone surrogates,
    private and unassigned code points) becomes `\\n`, `\\r`, `\\t`, `\\xNN`,
    `\\uNNNN` or `\\UNNNNNNNN`, as Python's repr writes them; with `backslashes`
    a backslash becomes `\\\\` too, so that distinct strings never look alike.
    Never raises, whatever the str."""
    if text.isprintable() and not (backslashes and "\\" in text):
        return text
    out = []
    for ch in text:
        if ch.isprintable() and (ch != "\\" or not backslashes):
            out.append(ch)
        elif ch in _ESCAPES:
            out.append(_ESCAPES[ch])
        else:
            code = ord(ch)
            out.append(f"\\x{code:02x}" if code < 0x100 else
                       f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}")
    return "".join(out)


def text_width(text: str) -> int:
    """The columns printable `text` takes on a terminal: wide and fullwidth characters
    (CJK) two, combining marks none, every other character one."""
    if text.isascii():
        return len(text)
    import unicodedata  # (here, past ASCII: not loaded by every start)
    width = 0
    for ch in text:
        if unicodedata.combining(ch) or unicodedata.category(ch) in ("Mn", "Me"):
            continue
        width += 2 if unicodedata.east_asian_width(ch) in ("W", "F") else 1
    return width


def ljust(text: str, width: int) -> str:
    """`text` padded on the right to `width` terminal columns."""
    return text + " " * (width - text_width(text))


def rjust(text: str, width: int) -> str:
    """`text` padded on the left to `width` terminal columns."""
    return " " * (width - text_width(text)) + text
