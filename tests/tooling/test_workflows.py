"""The GitHub Actions workflows pass actionlint, and CI runs the command the
maintainers' guide says it runs."""

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


def documented_ci_command() -> str:
    """The command docs/maintainers.md's command block says CI runs."""
    guide = (REPO_ROOT / 'docs' / 'maintainers.md').read_text()
    match = re.search(r'^(make [\w-]+) +# what CI runs', guide, re.MULTILINE)
    assert match, 'docs/maintainers.md names no command as what CI runs'
    assert re.search(r'^make test +#', guide, re.MULTILINE), \
        'docs/maintainers.md names no `make test`'
    return match[1]


def test_ci_runs_exactly_the_documented_command() -> None:
    command = documented_ci_command()
    ci_run = (REPO_ROOT / '.ci' / 'run').read_text()
    assert [line for line in ci_run.splitlines() if line and not line.startswith(('#', 'set ', 'cd '))] == [command]
    assert f'run: {command}' in (REPO_ROOT / '.github/workflows/ci.yml').read_text()


def test_the_tpu_workflow_is_described_as_what_it_is() -> None:
    """Written for a self-hosted TPU runner, which nobody attached: no
    schedule that would queue runs for it, and the maintainers' guide gives
    the workflow's own runner label, Python and jax[tpu] pin, and the record
    of the run of its commands on a chip."""
    workflow = (REPO_ROOT / '.github' / 'workflows' / 'tpu.yml').read_text()
    active = '\n'.join(line for line in workflow.splitlines() if not line.startswith('#'))
    assert 'runs-on: [self-hosted, "${{ inputs.runner-label || \'tpu\' }}"]' in active
    assert 'default: tpu' in active and 'schedule:' not in active
    guide = ' '.join((REPO_ROOT / 'docs' / 'maintainers.md').read_text().split())
    section = guide[guide.index('## The TPU workflow'):guide.index('## Commands')]
    assert 'never run' in section and '--labels tpu' in section
    for needed in ('PYTHON: python3.12', 'jax[tpu]==0.12.0.1'):
        assert needed in section and needed in active, needed
    assert re.search(r'ran (by hand )?on .*TPU v5e.*20\d\d-\d\d-\d\d', section), section
    readme = ' '.join((REPO_ROOT / 'README.md').read_text().split())
    assert 'runs the sharding tests on real TPU chips' not in readme + guide


def test_the_tpu_workflow_filters_the_hugepages_warning_and_runs_one_process() -> None:
    """Upstream's pytest config turns warnings into errors: every pytest of
    the workflow filters the runtime's one warning; one process holds the chip."""
    workflow = (REPO_ROOT / '.github' / 'workflows' / 'tpu.yml').read_text()
    runs = [line for line in workflow.splitlines()
            if ' -m pytest ' in line and not line.lstrip().startswith('#')]
    assert len(runs) == 2, runs
    for line in runs:
        assert "-W 'ignore:Transparent hugepages'" in line, line
        assert not re.search(r' -n ', line), line


def test_the_newest_versions_run_is_its_own_workflow_not_the_gate() -> None:
    """make test-newest runs weekly and on demand in a workflow of its own;
    CI's gate keeps the pinned jax (make test-full, which never runs it)."""
    workflow = (REPO_ROOT / '.github' / 'workflows' / 'newest.yml').read_text()
    active = '\n'.join(line for line in workflow.splitlines() if not line.startswith('#'))
    assert 'schedule:' in active and 'workflow_dispatch:' in active
    assert re.findall(r'run: (.*)', active) == ['make test-newest']
    others = [w.read_text() for w in WORKFLOWS if w.name != 'newest.yml']
    assert not any('test-newest' in text for text in others)
    makefile = (REPO_ROOT / 'Makefile').read_text()
    gate = re.search(r'^test-full: (.*)$', makefile, re.MULTILINE)
    assert gate and 'test-newest' not in gate[1], gate
