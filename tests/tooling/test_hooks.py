"""Upstream's pre-commit hooks (from the sdist's .pre-commit-config.yaml), run by
pre-commit on the files of upstream-bound patches: only what a patch introduces fails.

pre-commit and the hook tools come from the package registry into build/hook-tools
(shared with `python -m flaxpq check`), so the first run installs them; runs that
start at once wait for one install.
"""

from __future__ import annotations

import concurrent.futures
from pathlib import Path

import pytest

from flaxpq import cli, gitqueue, hooks, patchfile, precommit
from flaxpq.project import REPO_ROOT, Project
from tests.tooling.helpers import SPMD_EDIT, commit_edit, make_queue, message

SPMD_IMPORT = ('flax/nnx/spmd.py', 'import typing as tp\n', 'import typing as tp\nimport os\n')
TRAILING = ('flax/nnx/training/optimizer.py', 'class OptArray(OptState):',
            'class OptArray(OptState):   ')
GUIDE = ('docs_nnx/guides/transforms.md',
         'In general, JAX transformations (transforms) operate on',
         'In general, JAX transforms operate on')


@pytest.fixture(autouse=True)
def shared_tools(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(precommit.TOOLS_ENV, str(REPO_ROOT / 'build' / 'hook-tools'))


@pytest.mark.slow  # runs upstream's pre-commit hooks, as make check-hooks does
def test_hooks_blame_what_each_patch_introduces(
    queue: Project, pristine_sdist: Path, tmp_path: Path
) -> None:
    unused, spaces, guide, ours = make_queue(queue, pristine_sdist, tmp_path, [
        (SPMD_IMPORT, message('import os')),
        (TRAILING, message('pad OptArray')),
        (GUIDE, message('docs: shorten the transforms guide')),
        (SPMD_EDIT, message('our own tweak   ', forwarded='not-needed')),
    ])
    report = cli.run_hooks(queue)
    found = '\n'.join(report.problems)
    assert (f"{unused}: pre-commit hook ruff (ruff==0.1.3) fails on flax/nnx/spmd.py: "
            "would change 'import os'") in found
    assert (f'{spaces}: pre-commit hook trailing-whitespace (pre-commit-hooks==5.0.0) '
            "fails on flax/nnx/training/optimizer.py: would change 'class OptArray(OptState):   '"
            ) in found
    # the .md changed without its paired notebook: jupytext --sync rewrites the .ipynb
    assert (f'{guide}: pre-commit hook jupytext (jupytext==1.13.8) fails on '
            'docs_nnx/guides/transforms.ipynb') in found
    assert ours not in found
    assert len(report.problems) == 3, found
    assert any(n.startswith('pyupgrade (pyupgrade==3.16.0): 2 file(s)') for n in report.notes)


@pytest.mark.slow  # installs upstream's hook tools on a fresh clone (a minute)
def test_hooks_ignore_what_the_base_already_had(
    pristine_sdist: Path, queue: Project, tmp_path: Path
) -> None:
    """A violation already upstream (here: in a stand-in base commit) does
    not count against a patch touching the same file elsewhere."""
    tree = tmp_path / 'tree'
    gitqueue.materialize(queue, pristine_sdist, tree)
    commit_edit(tree, *TRAILING, 'base with trailing whitespace\n')
    gitqueue.git(tree, 'tag', 'base')
    commit_edit(tree, 'flax/nnx/training/optimizer.py', 'class OptVariable(OptState):',
                'class OptVariable(OptState):  # patched', message('mark OptVariable'))
    out = tmp_path / 'patch'
    gitqueue.git(tree, 'format-patch', *gitqueue.FORMAT_PATCH_FLAGS, '-o', str(out), '-1')
    (patch_file,) = out.iterdir()
    report = hooks.run(tree, 'base', 'HEAD', [patchfile.read(patch_file)],
                       precommit.tools_dir(queue))
    assert report.problems == []
    assert any(n.startswith('trailing-whitespace') and 'no new finding' in n
               for n in report.notes)


def test_hook_repos_without_a_pypi_package_are_skipped_with_the_reason() -> None:
    """Upstream's hooks become ``repo: local`` hooks pinned to their PyPI package, each
    with an ``identity`` twin under the same filters; the others are skipped."""
    config = {'exclude': '^build/', 'repos': [
        {'repo': 'https://github.com/asottile/pyupgrade', 'rev': 'v3.16.0',
         'hooks': [{'id': 'pyupgrade', 'args': ['--py310-plus'], 'exclude': '^examples/'}]},
        {'repo': 'https://github.com/example/only-on-github', 'rev': 'v1',
         'hooks': [{'id': 'mystery'}]},
        {'repo': 'https://github.com/asottile/pyupgrade', 'rev': 'v3.16.0',
         'hooks': [{'id': 'pyupgrade-new'}]},
        {'repo': 'local', 'hooks': [{'id': 'mine', 'entry': 'true', 'language': 'system'}]},
    ]}
    ours, skipped = precommit.local_config(config)
    assert ours == {'exclude': '^build/', 'repos': [
        {'repo': 'local', 'hooks': [{
            'id': 'pyupgrade', 'name': 'pyupgrade', 'language': 'python', 'entry': 'pyupgrade',
            'types': ['python'], 'args': ['--py310-plus'], 'exclude': '^examples/',
            'additional_dependencies': ['pyupgrade==3.16.0']}]},
        {'repo': 'meta', 'hooks': [{'id': 'identity', 'alias': 'pyupgrade-files',
                                    'types': ['python'], 'exclude': '^examples/'}]},
    ]}
    assert len(skipped) == 3
    assert skipped[0].startswith('skip mystery (https://github.com/example/only-on-github): '
                                 'no PyPI package known')
    assert skipped[1] == ('skip pyupgrade-new (https://github.com/asottile/pyupgrade): hook '
                          'definition unknown to flaxpq (add it to flaxpq/hook_repos.json)')
    assert skipped[2] == 'skip mine (local): local hooks are not run by flaxpq'


def test_runs_that_want_one_tool_venv_at_once_share_one_install(tmp_path: Path) -> None:
    """Two slow hooks tests on a fresh clone ask for pre-commit at the same time: the
    second waits for the first's install (a lock) instead of removing it midway."""
    requirement = 'pip'  # already satisfied in a new venv: no download
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        venvs = list(pool.map(lambda _: precommit.tool_venv(tmp_path, requirement), range(4)))
    assert len(set(venvs)) == 1 and (venvs[0] / '.ready').is_file()
    assert (venvs[0] / 'bin' / 'python').is_file()
