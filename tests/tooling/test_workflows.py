"""The GitHub Actions workflows pass actionlint, and CI runs the README's command."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from flaxpq.project import REPO_ROOT

WORKFLOWS = sorted((REPO_ROOT / '.github' / 'workflows').glob('*.yml'))


def test_workflows_pass_actionlint() -> None:
    actionlint = Path(sys.executable).parent / 'actionlint'
    assert {w.name for w in WORKFLOWS} >= {'ci.yml', 'tpu.yml', 'upstream-main.yml'}
    result = subprocess.run([str(actionlint), *map(str, WORKFLOWS)],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def readme_test_command() -> str:
    readme = (REPO_ROOT / 'README.md').read_text()
    match = re.search(r'^make test\b', readme, re.MULTILINE)
    assert match, 'README.md names no `make test` command'
    return 'make test'


def test_ci_runs_exactly_the_readme_command() -> None:
    command = readme_test_command()
    ci_run = (REPO_ROOT / '.ci' / 'run').read_text()
    assert [line for line in ci_run.splitlines() if line and not line.startswith(('#', 'set ', 'cd '))] == [command]
    assert f'run: {command}' in (REPO_ROOT / '.github/workflows/ci.yml').read_text()
