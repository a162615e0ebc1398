"""The README's copies of outputs are what the programs print.

Its opening error block is what vanilla flax 0.12.12 prints for the Quick
start, and the maintainers' guide's copy of ``make demo``'s table is what
``examples/compare.py`` prints for vanilla (the registry's wheel) and ours
(this venv). ``...`` in a
copy elides what varies (``tests/docs/elide.py``). The duration table's guard
is in ``tests/docs/test_durations.py``.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from flaxpq.project import REPO_ROOT
from tests.docs.elide import assert_matches

README = (REPO_ROOT / 'README.md').read_text()
MAINTAINERS = (REPO_ROOT / 'docs' / 'maintainers.md').read_text()
DEVICE_VARIABLES = ('XLA_FLAGS', 'JAX_PLATFORMS', 'JAX_NUM_CPU_DEVICES')
TRACEBACK = 'Traceback (most recent call last):'
# A line of Python's warnings module: "path:line: SomeWarning: message".
WARNING_LINE = re.compile(r'^\S.*:\d+: \w*Warning: ')


def from_the_traceback(stderr: str) -> str:
    """``stderr`` from its traceback on, where only warnings come before it.

    On a TPU host, jax warns at import that transparent hugepages are not
    enabled (a ``UserWarning``, its line and the source line under it) before
    any traceback; any other text before the traceback is kept and fails the
    comparison.
    """
    start = stderr.find(TRACEBACK)
    if start <= 0:
        return stderr
    before = stderr[:start].splitlines()
    if all(WARNING_LINE.match(line) or line.startswith(' ') for line in before):
        return stderr[start:]
    return stderr


def test_warnings_before_the_traceback_are_dropped_and_nothing_else() -> None:
    warning = ('/x/jax/_src/cloud_tpu_init.py:90: UserWarning: Transparent hugepages are '
               'not enabled. TPU runtime startup ...\n  warnings.warn(\n')
    error = f'{TRACEBACK}\n  File "q.py", line 1\nValueError: x\n'
    assert from_the_traceback(warning + error) == error
    assert from_the_traceback(error) == error
    assert from_the_traceback('something else\n' + error) == 'something else\n' + error


def block_after(heading: str, fence: str, text: str = README) -> str:
    """The first ```fence block after the line matching ``heading``."""
    match = re.search(heading + r'.*?^```' + fence + r'\n(.*?)^```$', text,
                      re.MULTILINE | re.DOTALL)
    assert match, f'no ```{fence} block after {heading!r}'
    return match[1]


def test_the_opening_error_is_what_vanilla_prints_for_the_quick_start(
    vanilla_flax: Path, tmp_path: Path
) -> None:
    opening_error = block_after(r'\A', 'text')
    quick_start = block_after(r'^## Quick start$', 'python')
    script = tmp_path / 'quickstart.py'
    script.write_text(quick_start)
    env = {k: v for k, v in os.environ.items() if k not in DEVICE_VARIABLES}
    env['PYTHONPATH'] = str(vanilla_flax)
    result = subprocess.run([sys.executable, str(script)], env=env, cwd=tmp_path,
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 1, result.stdout
    assert_matches(opening_error, from_the_traceback(result.stderr),
                   'the Quick start on vanilla')
    # It stops at nnx.Optimizer, as its comment and "Is my model affected?" say.
    assert re.search(r'^    optimizer = nnx\.Optimizer\(model', result.stderr, re.MULTILINE), \
        result.stderr


@pytest.mark.slow
def test_the_demo_table_is_what_make_demo_prints(vanilla_python: str) -> None:
    """``make demo``'s last step with this venv as ours (``make demo`` adds venvs)."""
    copy = block_after(r'^`make demo` prints', 'text', MAINTAINERS)
    result = subprocess.run(
        [sys.executable, str(REPO_ROOT / 'examples' / 'compare.py'),
         '--vanilla', vanilla_python, '--ours', sys.executable],
        capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr[-3000:]
    assert_matches(copy, result.stdout, 'examples/compare.py')
