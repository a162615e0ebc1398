"""Compare a page's copy of some output with the output, ``...`` eliding.

In the copy, a line that is only ``...`` stands for any number of lines
(frames of a traceback), and ``...`` inside a line for any text on that line
(a path, a version): what varies from one machine or run to the next.
"""

from __future__ import annotations

import difflib
import re


def pattern(copy: str) -> re.Pattern[str]:
    parts = []
    for line in copy.splitlines():
        if line.strip() == '...':
            parts.append(r'(?:[^\n]*\n)*?')
        else:
            parts.append('[^\\n]*?'.join(map(re.escape, line.split('...'))) + r'\n')
    return re.compile(''.join(parts))


def assert_matches(copy: str, output: str, what: str) -> None:
    """Fail with a diff unless ``output`` is ``copy`` with its elisions filled."""
    if output and not output.endswith('\n'):
        output += '\n'
    if pattern(copy).fullmatch(output):
        return
    diff = '\n'.join(difflib.unified_diff(
        copy.splitlines(), output.splitlines(), 'the page', what, lineterm=''))
    raise AssertionError(f'the page does not show what {what} prints:\n{diff}')
