"""The README's copies of outputs are what the programs print.

Its opening error block is what vanilla flax 0.12.12 prints for the Quick
start, and its copy of ``make demo``'s table is what ``examples/compare.py``
prints for vanilla (the registry's wheel) and ours (this venv). ``...`` in a
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
DEVICE_VARIABLES = ('XLA_FLAGS', 'JAX_PLATFORMS')


def block_after(heading: str, fence: str) -> str:
    """The first ```fence block after the line matching ``heading``."""
    match = re.search(heading + r'.*?^```' + fence + r'\n(.*?)^```$', README,
                      re.MULTILINE | re.DOTALL)
    assert match, f'no ```{fence} block after {heading!r} in README.md'
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
    assert_matches(opening_error, result.stderr, 'the Quick start on vanilla')


@pytest.mark.slow
def test_the_demo_table_is_what_make_demo_prints(vanilla_python: str) -> None:
    """``make demo``'s last step with this venv as ours (``make demo`` adds venvs)."""
    copy = block_after(r'^`make demo` prints', 'text')
    result = subprocess.run(
        [sys.executable, str(REPO_ROOT / 'examples' / 'compare.py'),
         '--vanilla', vanilla_python, '--ours', sys.executable],
        capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr[-3000:]
    assert_matches(copy, result.stdout, 'examples/compare.py')
