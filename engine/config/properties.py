"""Java `.properties` syntax (`=`, `:` or whitespace separators, `#`/`!` comments, `\\` line
continuations, `\\t \\n \\r \\f \\uXXXX` escapes, duplicate keys: the last wins): the format of
Kafka's server.properties and of `--*-config` files, parsed without any knowledge of keys.
"""

from __future__ import annotations

import re

from engine.errors import ConfigError

_NEWLINE = re.compile(r"\r\n|\r|\n")
_WS = " \t\f"
_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0e-\x1f\x7f]")


def parse_properties(text: str) -> dict[str, str]:
    """Parse Java `.properties` text (java.util.Properties.load rules) into a dict.

    Raises ConfigError on a malformed `\\uXXXX` escape (naming the line number), and on a
    control character other than tab, form feed and line ends: a text file never holds
    one, so the input is binary (or the wrong file) and every "key" in it would be garbage.
    """
    bad = _CONTROL.search(text)
    if bad is not None:
        line = text.count("\n", 0, bad.start()) + 1
        raise ConfigError(None, bad.group(), f"not a properties file: control character "
                          f"0x{ord(bad.group()):02x} on line {line} (binary data?)")
    result: dict[str, str] = {}
    for lineno, line in _logical_lines(text):
        key_raw, value_raw = _split_key_value(line)
        try:
            result[_unescape(key_raw)] = _unescape(value_raw)
        except ValueError as exc:
            raise ConfigError(None, line, f"line {lineno}: {exc}") from None
    return result


def load_properties(path: str, encoding: str = "iso-8859-1") -> dict[str, str]:
    """Read a `.properties` file. ISO-8859-1 by default, as Kafka's loader reads it.

    Raises OSError if the file cannot be read, ConfigError if it is malformed.
    """
    with open(path, encoding=encoding, newline="") as f:
        return parse_properties(f.read())


def _logical_lines(text: str):
    """Yield (first line number, logical line) with comments, blanks and continuations done."""
    lines = _NEWLINE.split(text)
    i = 0
    while i < len(lines):
        lineno = i + 1
        line = lines[i].lstrip(_WS)
        i += 1
        if not line or line[0] in "#!":
            continue
        parts = []
        while _ends_with_odd_backslashes(line):
            parts.append(line[:-1])
            if i >= len(lines):
                line = ""
                break
            line = lines[i].lstrip(_WS)
            i += 1
        parts.append(line)
        yield lineno, "".join(parts)


def _ends_with_odd_backslashes(line: str) -> bool:
    return (len(line) - len(line.rstrip("\\"))) % 2 == 1


def _split_key_value(line: str) -> tuple[str, str]:
    """Split at the first unescaped `=`, `:` or whitespace (escapes are kept for later)."""
    j, n = 0, len(line)
    while j < n:
        c = line[j]
        if c == "\\":
            j += 2
            continue
        if c in "=:" or c in _WS:
            break
        j += 1
    key = line[:j]
    k = j
    while k < n and line[k] in _WS:
        k += 1
    if k < n and line[k] in "=:":
        k += 1
        while k < n and line[k] in _WS:
            k += 1
    return key, line[k:]


def _unescape(s: str) -> str:
    if "\\" not in s:
        return s
    out, i, n = [], 0, len(s)
    while i < n:
        c = s[i]
        if c != "\\" or i + 1 >= n:
            out.append(c if c != "\\" else "")
            i += 1
            continue
        nxt = s[i + 1]
        if nxt == "u":
            digits = s[i + 2:i + 6]
            if len(digits) != 4 or not all(d in "0123456789abcdefABCDEF" for d in digits):
                raise ValueError(f"malformed \\uxxxx encoding: {s[i:i + 6]!r}")
            out.append(chr(int(digits, 16)))
            i += 6
        else:
            out.append(_ESCAPES.get(nxt, nxt))
            i += 2
    return "".join(out)
