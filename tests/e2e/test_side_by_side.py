"""The same scenarios under vanilla flax 0.12.12 and under ours, one run.

Vanilla must show the bug (a crash, or metadata / optimizer state that
disagrees with the arrays); ours must be right. If vanilla ever stops showing
the bug, the pin moved and these scenarios need a new look.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from flaxpq.project import REPO_ROOT, Project
from tests.support.checks import VANILLA_BUG_CASES, metadata_problems, optimizer_problems

PIN = Project().pin()


def run_scenario(name: str, arguments: dict[str, Any], vanilla: Path | None) -> dict[str, Any]:
    path = [str(REPO_ROOT)] if vanilla is None else [str(vanilla), str(REPO_ROOT)]
    env = {**os.environ, 'PYTHONPATH': os.pathsep.join(path)}
    result = subprocess.run(
        [sys.executable, '-m', 'tests.support.scenarios', name, json.dumps(arguments)],
        env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


def problems(name: str, report: dict[str, Any]) -> list[str]:
    found = metadata_problems(report)
    if name == 'vmap_stack_with_optimizer':
        found += optimizer_problems(report)
    return found


# slow: a fresh process per flax per case; make test runs the same scenario
# side by side in the oracle (test_e2e_regression_guards).
@pytest.mark.slow
@pytest.mark.parametrize(('name', 'arguments', 'vanilla_symptom'), VANILLA_BUG_CASES)
def test_vanilla_shows_the_bug_and_ours_does_not(
    vanilla_flax: Path, name: str, arguments: dict[str, Any], vanilla_symptom: str
) -> None:
    theirs = run_scenario(name, arguments, vanilla=vanilla_flax)
    if 'no_mesh' in theirs:
        pytest.skip(theirs['no_mesh'])
    ours = run_scenario(name, arguments, vanilla=None)
    assert theirs['flax_version'] == PIN.version
    assert ours['flax_version'] == PIN.local_version
    assert problems(name, theirs), f'vanilla no longer shows: {vanilla_symptom}'
    if vanilla_symptom == 'IndivisibleError':
        assert 'IndivisibleError' in theirs['error']
    assert problems(name, ours) == []
