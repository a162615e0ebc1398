"""docs/maintainers.md, "Progress": after each pytest step the Makefile's
steps print one line for the whole run so far (scripts/timed with the
Makefile's run log), so ``make test`` ends with it, passed or failed."""

from __future__ import annotations

import os
import re
import subprocess
import time
from pathlib import Path

from flaxpq.project import REPO_ROOT

TIMED = REPO_ROOT / 'scripts' / 'timed'
MAINTAINERS = (REPO_ROOT / 'docs' / 'maintainers.md').read_text()
RUN_LINE = re.compile(r'^== make: (\d+) passed, (\d+) failed, (\d+) skipped(.*) over (\d+) '
                      r'pytest steps?; (?:\d+ min )?\d+ s since \d\d:\d\d:\d\d$')


def step(log: Path, start: int, *command: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, 'TIMED_RUN_LOG': str(log), 'TIMED_RUN_START': str(start)}
    return subprocess.run([str(TIMED), 'a step', *command], env=env, capture_output=True,
                          text=True, timeout=60)


def test_each_pytest_step_ends_with_the_run_so_far(tmp_path: Path) -> None:
    log, start = tmp_path / 'timed' / 'run.log', int(time.time())
    first = step(log, start, 'echo', '==== 3 passed, 1 skipped in 1.25s ====')
    assert first.returncode == 0
    assert RUN_LINE.match(first.stdout.splitlines()[-1]).groups()[:5] == (  # type: ignore[union-attr]
        '3', '0', '1', '', '1')
    step(log, start, 'true')  # not a pytest step: no summary, no run line
    last = step(log, start, 'sh', '-c', 'echo "1 failed, 2 passed, 1 xfailed in 0.50s"; exit 1')
    assert last.returncode == 1
    assert RUN_LINE.match(last.stdout.splitlines()[-1]).groups()[:5] == (  # type: ignore[union-attr]
        '5', '1', '1', ', 1 xfailed', '2')


def test_the_commands_it_runs_do_not_write_to_the_run_log(tmp_path: Path) -> None:
    """A test that runs scripts/timed itself, under ``make test``, does not
    add its counts to the run's line."""
    log, start = tmp_path / 'run.log', int(time.time())
    inner = f'{TIMED} inner echo "7 passed in 0.1s"'
    result = step(log, start, 'sh', '-c', inner)
    assert result.stdout.splitlines()[-1].startswith('== make: 7 passed, 0 failed')
    assert log.read_text().count('passed') == 1


def test_the_guide_shows_the_line_timed_prints() -> None:
    shown = re.search(r'^== make: .*$', MAINTAINERS, re.MULTILINE)
    assert shown, 'docs/maintainers.md shows no `== make:` line'
    form = shown[0].replace('N passed, N failed, N skipped', '1 passed, 0 failed, 0 skipped')
    assert RUN_LINE.match(form.replace('HH:MM:SS', '18:44:02')), shown[0]
