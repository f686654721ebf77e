"""A small FileCheck for frontend tests: ``# CHECK:`` lines written inside the kernel they check.

Directives (in the function's source, in order): ``CHECK:`` (a later line contains the pattern),
``CHECK-NEXT:`` (the very next line does), ``CHECK-NOT:`` (no line between the surrounding matches
does).  Patterns are literal text; ``{{regex}}`` embeds a regular expression.
"""

from __future__ import annotations

import inspect
import re

_DIRECTIVE = re.compile(r"#\s*(CHECK(?:-NEXT|-NOT)?):\s?(.*)$")


def _pattern(text: str) -> re.Pattern:
    parts = re.split(r"\{\{(.*?)\}\}", text.strip())
    return re.compile("".join(re.escape(p) if i % 2 == 0 else f"(?:{p})" for i, p in enumerate(parts)))


def directives(function) -> list[tuple[str, str]]:
    """The (kind, pattern) directives written in ``function``'s source."""
    source = inspect.getsource(getattr(function, "fn", function))
    found = []
    for line in source.splitlines():
        match = _DIRECTIVE.search(line)
        if match:
            found.append((match.group(1), match.group(2)))
    return found


def check(text: str, checks: list[tuple[str, str]]) -> None:
    """Assert that ``text`` satisfies ``checks`` (raises AssertionError with the text on failure)."""
    lines = text.splitlines()
    position = 0
    pending_not: list[str] = []
    last = -1
    for kind, raw in checks:
        pattern = _pattern(raw)
        if kind == "CHECK-NOT":
            pending_not.append(raw)
            continue
        if kind == "CHECK-NEXT":
            candidates = [last + 1] if last + 1 < len(lines) else []
        else:
            candidates = range(position, len(lines))
        found = next((i for i in candidates if pattern.search(lines[i])), None)
        if found is None:
            raise AssertionError(f"{kind}: {raw!r} not found after line {last + 1}:\n{text}")
        for forbidden in pending_not:
            for i in range(position, found):
                if _pattern(forbidden).search(lines[i]):
                    raise AssertionError(f"CHECK-NOT: {forbidden!r} found on line {i + 1}:\n{text}")
        pending_not = []
        last, position = found, found + 1
    for forbidden in pending_not:
        for i in range(position, len(lines)):
            if _pattern(forbidden).search(lines[i]):
                raise AssertionError(f"CHECK-NOT: {forbidden!r} found on line {i + 1}:\n{text}")
