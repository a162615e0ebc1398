"""docs/maintainers.md's duration table: its ``make test`` row is of the
series main builds, measured from a fresh clone with empty caches, names
each step of ``make test``, and adds up; the README, the guide's command
block and the Makefile quote its total, machine and load."""

from __future__ import annotations

import re
import subprocess
import sys

from flaxpq.project import REPO_ROOT, Project

MAINTAINERS = (REPO_ROOT / 'docs' / 'maintainers.md').read_text()
README = (REPO_ROOT / 'README.md').read_text()
MAKEFILE = (REPO_ROOT / 'Makefile').read_text()

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
    """The first ``make test`` row of the table, which is the newest."""
    match = re.search(r'^\| `make test` .*$', MAINTAINERS, re.MULTILINE)
    assert match, "docs/maintainers.md's duration table has no `make test` row"
    assert match[0].startswith('| `make test` (fresh clone of `nnxaxis.'), match[0]
    assert 'empty pip, uv and flaxpq caches' in match[0], \
        f'the row is measured from a fresh clone with empty caches: {match[0]}'
    return match[0]


def collected(*args: str) -> list[str]:
    result = subprocess.run(
        [sys.executable, '-m', 'pytest', '--collect-only', '-q', '-p', 'no:cacheprovider',
         *args], cwd=REPO_ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return [line for line in result.stdout.splitlines() if '::' in line]


def test_the_make_test_duration_is_of_this_series_and_adds_up() -> None:
    """The row is of the series main builds, names each step of ``make test``
    with its duration, and the steps add up to the total. Collects our suite
    (about 15 s) to check the row's test counts."""
    row = make_test_row()
    series = re.search(r'nnxaxis\.(\d+)', row)[1]  # type: ignore[index]
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
    suite = collected('-m', 'not slow and not registry', 'tests')
    oracle = [node for node in suite if node.startswith('tests/oracle/')]
    assert re.search(MAKE_TEST_STEPS['suite'] + DURATION + rf' \({len(suite)} tests\)', row), \
        f'our suite has {len(suite)} tests: {row}'
    assert re.search(MAKE_TEST_STEPS['self-check'] + DURATION + rf' \({len(oracle)} tests', row), \
        f'the self-check has {len(oracle)} tests: {row}'


def test_the_make_test_time_is_quoted_alike() -> None:
    """The README, the guide's command block and the Makefile's comment give
    the row's total, on the row's machine (2 cores) at the row's load: one
    measured figure. The row's CPU time (user + system: what the run costs
    whatever the load) is at most 2 cores x 8 minutes."""
    row = make_test_row()
    total = re.search(r'\| (' + DURATION + '):', row)
    assert total, row
    cpu = re.search(r'CPU time ' + DURATION, row)
    assert cpu, f'the row gives the CPU time of the run: {row}'
    assert seconds(cpu) <= 2 * 8 * 60, f'make test takes over 16 minutes of CPU: {row}'
    load = re.search(r'load ([\d.]+(?:-[\d.]+)?) on (\d+) cores', row)
    assert load, f'the row says the load and the cores it ran on: {row}'
    quoted = f'{total[1]} on {load[2]} cores at load {load[1]}'
    guide = re.search(r'^make test +# (.*)$', MAINTAINERS, re.MULTILINE)
    assert guide, 'the guide\'s command block has no make test line'
    makefile = ' '.join(line.lstrip('# ') for line in MAKEFILE.splitlines()
                        if line.startswith('#'))
    # The CPU time comes first: the figure that holds whatever the load.
    cpu_quoted = f'{cpu[0].removeprefix("CPU time ")} of CPU'
    for where, said in (('README.md', ' '.join(README.split())),
                        ("the guide's command block", guide[1]),
                        ("the Makefile's comment on make test", makefile)):
        assert quoted in said, (quoted, where)
        assert cpu_quoted in said and said.index(cpu_quoted) < said.index(quoted), (
            f'{where} quotes {cpu_quoted!r} before {quoted!r}')
    assert not re.search(r'\b12(?:-| )minute', README + makefile + MAINTAINERS), \
        'a figure other than the measured one'
