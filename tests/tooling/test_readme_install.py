"""The README's "Install" blocks, each pasted alone into ``bash -eu`` in a
fresh project folder outside the clone, then pasted again there, then its
"Back to vanilla" line for the same installer.

The reader's clone (``fork``, which each block's first line asks for) is a
clone of a published repository: a bare repository made from this one with
``main`` at HEAD (commit first), so the requirement the blocks install
(``python -m flaxpq requirement``) is the published URL at HEAD's 40 digits,
as on a clone of a remote. Under pyenv (this machine's ``PATH``), the
clone's folder is pinned to an older Python than 3.12 where pyenv has one
(as where the global Python is 3.11: the pyenv shim there is that Python).
The forms: the pip block, on a plain machine (``python3.12`` on ``PATH``, no
pyenv) and under pyenv in a project folder pinned to 3.12 by
``.python-version``, with its quick check; the uv block in an empty folder
(it makes the uv project and pins its Python), with its quick check, then a
teammate's checkout of that project (its ``pyproject.toml``, ``uv.lock`` and
``.python-version``) through ``uv sync``; the printed requirement in a
``requirements.txt`` and in ``pyproject.toml``'s ``dependencies`` of another
folder, installed with pip. The machine's pip and uv caches serve them (the
cold-cache installs are ``test_cold_install.py``'s); uv may not download a
CPython of its own (``UV_PYTHON_DOWNLOADS=never``): the blocks pin the
interpreter. The blocks' refusals (no ``fork``, no Python 3.12) are
``test_readme_blocks.py``'s.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from flaxpq.project import Project
from tests.tooling.builds import installed_version, published_clone, run_ok
from tests.tooling.helpers import (README, SET_FORK, back_to_vanilla, first_steps, pip_block,
                                   section_blocks, uv_block)

pytestmark = pytest.mark.slow

PIN = Project().pin()
FIRST_LINE = ('[ -x "${fork:-}/scripts/find-python" ] || { echo "%s" >&2; false; } &&'
              % SET_FORK.strip())
PICK = 'py="$("$fork/scripts/find-python")" &&'
REQUIREMENT = 'req="$(cd "$fork" && "$py" -m flaxpq requirement)" &&'


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


def older_pyenv_python() -> str | None:
    """The newest version pyenv has that is older than 3.12, if any."""
    versions = subprocess.run(['pyenv', 'versions', '--bare', '--skip-aliases'],
                              capture_output=True, text=True).stdout.split()
    older = [tuple(map(int, v.split('.'))) for v in versions
             if re.fullmatch(r'3\.\d+\.\d+', v) and int(v.split('.')[1]) < 12]
    return '.'.join(map(str, max(older))) if older else None


def project(tmp_path: Path, path: str | None = None) -> tuple[Path, dict[str, str], str]:
    """A project folder, the environment a reader pastes in (``fork`` set;
    ``PATH``, this machine's unless given, with this venv's ``uv``), and the
    requirement the blocks should install. Under pyenv, the clone's folder
    is pinned to an older Python where pyenv has one."""
    published, clone, commit = published_clone(tmp_path)
    if path is None and shutil.which('pyenv') and (older := older_pyenv_python()):
        (clone.parent / '.python-version').write_text(f'{older}\n')
    folder = tmp_path / 'my-project'
    folder.mkdir()
    env = {**machine_env(path), 'fork': str(clone)}
    return folder, env, f'{PIN.package} @ git+file://{published}@{commit}'


def machine_env(path: str | None = None) -> dict[str, str]:
    uv_dir = str(Path(sys.executable).parent)  # uv: requirements/test.txt
    env = {k: v for k, v in os.environ.items() if k != 'fork'}
    return {**env, 'UV_PYTHON_DOWNLOADS': 'never',
            'PATH': os.pathsep.join([path or os.environ['PATH'], uv_dir])}


def paste(block: str, folder: Path, env: dict[str, str]) -> str:
    """``block`` alone in a new ``bash -eu``, as pasted into a new shell."""
    return run_ok('bash', '-eu', '-c', block, env=env, cwd=folder)


def test_the_install_section_has_each_form() -> None:
    """Each block is one ``&&`` chain (it stops at the first step that
    fails, also pasted into an interactive shell) without comments (zsh
    runs them as words), and ends with the quick check."""
    pip, uv = section_blocks('## Install')
    for block in (pip, uv):
        first, pick, req, *rest = block.splitlines()
        assert (first, pick, req) == (FIRST_LINE, PICK, REQUIREMENT), block
        assert all(line.endswith(' &&') for line in rest[:-1]), block
        assert ' #' not in block, block
    assert pip.endswith('.venv/bin/python -m pip install "$req" &&\n'
                        '.venv/bin/python "$fork/scripts/quick-check"\n'), pip
    assert uv.splitlines()[3:] == [
        '{ [ -e pyproject.toml ] || uv init --bare --python "$py"; } &&',
        'uv python pin "$("$py" -c \'import sys; print("%d.%d" % sys.version_info[:2])\')" &&',
        'uv add --python "$py" "$req" &&',
        'uv run python "$fork/scripts/quick-check"'], uv
    assert section_blocks('## Install', 'text') == [
        'flax @ git+https://github.com/<org>/<repo>.git@<40-digit commit>\n']
    # Which pip a requirements file or pyproject.toml needs, outside the blocks.
    said = ' '.join(README.split())
    assert 'pip installs a `git+file://` one from 24.1' in said


@pytest.mark.parametrize('machine', ['plain', 'pyenv'])
def test_the_pip_block_installs_this_flax_and_back_to_vanilla_reverts_it(
    machine: str, tmp_path: Path
) -> None:
    """A new venv, the pip upgrade, one wheel build, flax's dependencies
    from the cache, the quick check (a jax start-up), and under pyenv, in a
    folder pinned to 3.12, the same block pasted again; then
    ``flax.__version__``; then pip's way back."""
    if machine == 'pyenv' and shutil.which('pyenv') is None:
        pytest.skip('no pyenv on this machine')
    path = plain_machine_path(tmp_path / 'bin') if machine == 'plain' else None
    folder, env, requirement = project(tmp_path, path)
    if machine == 'pyenv':
        (folder / '.python-version').write_text('3.12\n')
    for _ in range(1 if machine == 'plain' else 2):
        output = paste(pip_block(), folder, env)
        assert "quick check: passed (README.md's lines)" in output, output[-3000:]
    python = folder / '.venv' / 'bin' / 'python'
    assert installed_version(python) == PIN.local_version
    assert run_ok(python, '-c', 'import sys; print(sys.version_info[:2])').strip() == '(3, 12)'
    direct_url = run_ok(python, '-c', 'import importlib.metadata as m; '
                        "print(m.distribution('flax').read_text('direct_url.json'))")
    assert requirement.split('@ git+')[1].split('@')[0] in direct_url, direct_url
    paste(back_to_vanilla('pip'), folder, env)
    assert installed_version(python) == PIN.version


def test_the_uv_block_makes_a_project_and_a_teammates_uv_sync_uses_it(
    tmp_path: Path
) -> None:
    """The uv block pasted alone in an empty folder: it makes the uv project
    and pins its Python, with the quick check; pasted again in the folder
    its pin now holds; the project's files name the published URL, not the
    clone; then a teammate's checkout of those files (no ``fork``, this
    machine's ``PATH``, whose ``python3`` is not 3.12 here) runs ``uv sync``
    on the pinned Python without downloading one, and uv's way back."""
    folder, env, requirement = project(tmp_path)
    for _ in range(2):
        output = paste(uv_block(), folder, env)
        assert "quick check: passed (README.md's lines)" in output, output[-3000:]
    python = folder / '.venv' / 'bin' / 'python'
    assert installed_version(python) == PIN.local_version
    version = run_ok(python, '-c', 'import sys; print("%d.%d" % sys.version_info[:2])')
    assert (folder / '.python-version').read_text() == version
    assert 'requires-python = ">=%s"' % version.strip() in (folder / 'pyproject.toml').read_text()
    teammate = tmp_path / 'teammate' / 'my-project'
    teammate.mkdir(parents=True)
    for name in ('pyproject.toml', 'uv.lock', '.python-version'):
        text = (folder / name).read_text()
        assert env['fork'] not in text, (name, text)
        shutil.copy(folder / name, teammate)
    url, commit = requirement.split(' @ git+')[1].rsplit('@', 1)
    sources = (teammate / 'pyproject.toml').read_text()  # uv's [tool.uv.sources]
    assert f'git = "{url}", rev = "{commit}"' in sources, sources
    paste('uv sync --quiet', teammate, machine_env())
    python = teammate / '.venv' / 'bin' / 'python'
    assert installed_version(python) == PIN.local_version
    assert run_ok(python, '-c', 'import sys; print(sys.version_info[:2])').strip() == '(3, 12)'
    paste(back_to_vanilla('uv'), teammate, machine_env())
    assert installed_version(python) == PIN.version


@pytest.mark.parametrize('form', ['requirements.txt', 'pyproject.toml'])
def test_the_printed_requirement_installs_from_another_folder(
    form: str, tmp_path: Path
) -> None:
    """The line ``python -m flaxpq requirement`` prints in the reader's clone
    (the blocks' first three lines), written into another folder's
    ``requirements.txt`` or ``pyproject.toml`` and installed there with pip
    into a new venv, without ``fork``."""
    folder, env, requirement = project(tmp_path)
    printed = paste(first_steps(pip_block(), 'printf "%s\\n" "$req"'), folder, env)
    assert printed == f'{requirement}\n', printed
    assert re.fullmatch(r'flax @ git\+file://\S+@[0-9a-f]{40}\n', printed)
    other = tmp_path / 'teammate'
    other.mkdir()
    if form == 'requirements.txt':
        (other / form).write_text(printed)
        install = '.venv/bin/python -m pip install -r requirements.txt'
    else:
        (other / form).write_text(
            f'[project]\nname = "my-project"\nversion = "0"\ndependencies = ["{printed.strip()}"]\n'
            '\n[build-system]\nrequires = ["setuptools"]\nbuild-backend = '
            '"setuptools.build_meta"\n\n[tool.setuptools]\npy-modules = []\n')
        install = '.venv/bin/python -m pip install .'
    # A new venv's pip may be older than the 24.1 the README asks for.
    venv = f'"{python312()}" -m venv .venv\n.venv/bin/python -m pip install --upgrade pip'
    paste(f'{venv}\n{install}', other, machine_env())
    assert installed_version(other / '.venv' / 'bin' / 'python') == PIN.local_version
