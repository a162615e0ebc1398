"""The README's "Install" forms, each pasted in a project folder outside the
clone into a fresh venv, then its "Back to vanilla" line for the same
installer.

``fork`` (which the README has the reader set) names a fresh clone whose
``main`` is this repository's HEAD (commit first). The forms: the pip block,
on a plain machine (``python3.12`` on ``PATH``, no pyenv) and under pyenv
(this machine's ``PATH``); the uv block, after the pip block's first line
(which picks the interpreter), in a uv project; the requirements line and
the ``pyproject.toml`` dependency, with the remote URL the clone's
``file://`` URL and ``<commit>`` HEAD's 40 digits, installed with pip into
the venv of the pip block's first three lines. The machine's pip and uv
caches serve them (the cold-cache installs are ``test_cold_install.py``'s);
uv may not download a CPython of its own (``UV_PYTHON_DOWNLOADS=never``):
the README gives it the interpreter.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from flaxpq.project import REPO_ROOT, Project
from tests.tooling.builds import fresh_clone, installed_version, run_ok

pytestmark = pytest.mark.slow

README = (REPO_ROOT / 'README.md').read_text()
PIN = Project().pin()
REMOTE = 'git+https://github.com/<org>/<repo>.git@<commit>'


def section_blocks(heading: str, fence: str = 'bash') -> list[str]:
    start = README.index(heading)
    section = README[start:README.index('\n## ', start)]
    return re.findall(rf'^```{fence}\n(.*?)^```$', section, re.MULTILINE | re.DOTALL)


def back_to_vanilla(which: str) -> str:
    """The README's "Back to vanilla" line for pip or uv (its comment names it)."""
    (block,) = section_blocks('## Back to vanilla')
    (line,) = [line for line in block.splitlines() if line.endswith(f'# {which}')]
    return line


def pip_block() -> str:
    return section_blocks('## Install')[0]


def uv_block() -> str:
    return section_blocks('## Install')[1]


def python312() -> str:
    """A Python 3.12 of this machine: python3.12 on PATH if it is one, else pyenv's."""
    for candidate in (shutil.which('python3.12'),
                      f"{os.popen('pyenv prefix 3.12 2>/dev/null').read().strip()}/bin/python"):
        if candidate and subprocess.run(
                [candidate, '-c', 'import sys; assert sys.version_info[:2] == (3, 12)'],
                capture_output=True).returncode == 0:
            return candidate
    pytest.skip('no Python 3.12 on this machine')


def plain_machine_path(folder: Path) -> str:
    """A PATH as on a machine without pyenv: a python3.12, git and the system's tools."""
    folder.mkdir()
    (folder / 'python3.12').symlink_to(python312())
    return os.pathsep.join([str(folder), '/usr/local/bin', '/usr/bin', '/bin'])


def project(tmp_path: Path, path: str | None = None) -> tuple[Path, dict[str, str]]:
    """A fresh clone of HEAD as ``main``, and a project folder outside it with
    the environment a reader pastes in: ``fork`` set, and ``PATH`` (this
    machine's unless given) with this venv's ``uv``."""
    clone, commit = fresh_clone(tmp_path / 'flax-nnxaxis')
    run_ok('git', '-C', clone, 'checkout', '--quiet', '-B', 'main', commit)
    folder = tmp_path / 'my-project'
    folder.mkdir()
    uv_dir = str(Path(sys.executable).parent)  # uv: requirements/test.txt
    env = {**os.environ, 'fork': str(clone), 'UV_PYTHON_DOWNLOADS': 'never',
           'PATH': os.pathsep.join([path or os.environ['PATH'], uv_dir])}
    return folder, env


def paste(block: str, folder: Path, env: dict[str, str]) -> str:
    return run_ok('bash', '-euo', 'pipefail', '-c', block, env=env, cwd=folder)


def test_the_install_section_has_each_form() -> None:
    pip, uv = section_blocks('## Install')
    assert pip.startswith('py=python3.12; command -v pyenv >/dev/null && '
                          'py="$(pyenv prefix 3.12)/bin/python"\n'), pip
    assert '"flax @ git+file://$fork@main"' in pip
    assert uv == 'uv add --python "$py" "flax @ git+file://$fork@main"\n', uv
    assert section_blocks('## Install', 'text') == [f'flax @ {REMOTE}\n']
    assert section_blocks('## Install', 'toml') == [
        f'[project]\ndependencies = ["flax @ {REMOTE}"]\n']


@pytest.mark.parametrize('machine', ['plain', 'pyenv'])
def test_the_pip_block_installs_this_flax_and_back_to_vanilla_reverts_it(
    machine: str, tmp_path: Path
) -> None:
    """A new venv, the pip upgrade, one wheel build, flax's dependencies
    from the cache; then ``flax.__version__``; then pip's way back."""
    if machine == 'pyenv' and shutil.which('pyenv') is None:
        pytest.skip('no pyenv on this machine')
    path = plain_machine_path(tmp_path / 'bin') if machine == 'plain' else None
    folder, env = project(tmp_path, path)
    paste(pip_block(), folder, env)
    python = folder / '.venv' / 'bin' / 'python'
    assert installed_version(python) == PIN.local_version
    assert run_ok(python, '-c', 'import sys; print(sys.version_info[:2])').strip() == '(3, 12)'
    paste(back_to_vanilla('pip'), folder, env)
    assert installed_version(python) == PIN.version


def test_uv_add_installs_this_flax_into_the_projects_venv_and_back(tmp_path: Path) -> None:
    """A uv project (``uv init --bare``, Python 3.12), the interpreter
    picked by the pip block's first line; then uv's way back."""
    folder, env = project(tmp_path)
    pick = pip_block().splitlines()[0]
    paste(f'{pick}\nuv init --quiet --bare --python "$py"', folder, env)
    assert 'requires-python = ">=3.12"' in (folder / 'pyproject.toml').read_text()
    paste(f'{pick}\n{uv_block()}', folder, env)
    python = folder / '.venv' / 'bin' / 'python'
    assert installed_version(python) == PIN.local_version
    paste(back_to_vanilla('uv'), folder, env)
    assert installed_version(python) == PIN.version


@pytest.mark.parametrize('form', ['requirements.txt', 'pyproject.toml'])
def test_a_requirements_line_or_a_pyproject_dependency_pinned_to_a_commit(
    form: str, tmp_path: Path
) -> None:
    """The README's line with the clone as the remote and HEAD's 40 digits,
    installed with pip (``-r requirements.txt``, or the project itself)."""
    folder, env = project(tmp_path)
    commit = run_ok('git', '-C', env['fork'], 'rev-parse', 'HEAD').strip()
    local = REMOTE.replace('https://github.com/<org>/<repo>.git', f'file://{env["fork"]}'
                           ).replace('<commit>', commit)
    if form == 'requirements.txt':
        (line,) = section_blocks('## Install', 'text')
        (folder / form).write_text(line.replace(REMOTE, local))
        install = '.venv/bin/python -m pip install -r requirements.txt'
    else:
        (toml,) = section_blocks('## Install', 'toml')
        (folder / form).write_text(toml.replace(REMOTE, local).replace(
            '[project]\n', '[project]\nname = "my-project"\nversion = "0"\n') +
            '\n[build-system]\nrequires = ["setuptools"]\nbuild-backend = '
            '"setuptools.build_meta"\n\n[tool.setuptools]\npy-modules = []\n')
        install = '.venv/bin/python -m pip install .'
    venv = '\n'.join(pip_block().splitlines()[:3])
    paste(f'{venv}\n{install}', folder, env)
    assert installed_version(folder / '.venv' / 'bin' / 'python') == PIN.local_version
