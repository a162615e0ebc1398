"""The README's copies of outputs are what the programs print (issue 25).

Its opening error block is what vanilla flax 0.12.12 prints for the Quick
start, and its copy of ``make demo``'s table is what ``examples/compare.py``
prints for vanilla (the registry's wheel) and ours (this venv). ``...`` in a
copy elides what varies (``tests/docs/elide.py``). Its duration table's
``make test`` row is of the series main builds, and adds up.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from flaxpq.project import REPO_ROOT, Project
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


# The duration table: its ``make test`` row --------------------------------------

DURATION = r'(?:(\d+) min )?(\d+) s'
MAKE_TEST_STEPS = {  # what the row must name, as `make test` runs it (Makefile)
    'venv': r'venv ',
    'wheel': r'wheel ',
    'install': r'install ',
    'check': r'`flaxpq check --no-hooks` ',
    'suite': r'our suite without the `slow` tests ',
    'self-check': r"the oracle's self-check ",
}


def seconds(match: re.Match[str], first: int = 1) -> int:
    return int(match[first] or 0) * 60 + int(match[first + 1])


def make_test_row() -> str:
    match = re.search(r'^\| `make test` \(fresh clone of series (\d+).*$', README, re.MULTILINE)
    assert match, "README.md's duration table has no `make test` (fresh clone ...) row"
    return match[0]


def collected(*args: str) -> list[str]:
    result = subprocess.run(
        [sys.executable, '-m', 'pytest', '--collect-only', '-q', '-p', 'no:cacheprovider',
         *args], cwd=REPO_ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return [line for line in result.stdout.splitlines() if '::' in line]


def test_the_make_test_duration_is_of_this_series_and_adds_up() -> None:
    """The row is of the series main builds, names each step of ``make test``
    with its duration, and the steps add up to the total, which fits the 12
    minutes the commands block promises (issue 25). Collects our suite (about
    15 s) to check the row's test counts."""
    row = make_test_row()
    series = re.search(r'series (\d+)', row)[1]  # type: ignore[index]
    label = Project().pin().label
    assert label == f'nnxaxis.{series}', (
        f'the row measures series {series}; main builds {label}: measure `make test` '
        'from a fresh clone again and update the row')
    total = re.search(r'\| ' + DURATION + ':', row)
    assert total, row
    parts = {}
    for step, label_re in MAKE_TEST_STEPS.items():
        found = re.search(label_re + DURATION, row)
        assert found, f'the row does not name {step!r} with its duration: {row}'
        parts[step] = seconds(found)
    assert sum(parts.values()) <= seconds(total) <= sum(parts.values()) + 30, (parts, row)
    assert seconds(total) <= 12 * 60, f'make test took {seconds(total)} s, over 12 minutes'
    suite = collected('-m', 'not slow', 'tests')
    oracle = [node for node in suite if node.startswith('tests/oracle/')]
    assert re.search(MAKE_TEST_STEPS['suite'] + DURATION + rf' \({len(suite)} tests\)', row), \
        f'our suite has {len(suite)} tests: {row}'
    assert re.search(MAKE_TEST_STEPS['self-check'] + DURATION + rf' \({len(oracle)} tests', row), \
        f'the self-check has {len(oracle)} tests: {row}'
