"""The README's "Install" blocks, pasted into bash in a fresh clone of ``main``,
then its "Back to vanilla" line for the same installer.

Each block runs as written, in a clone whose ``main`` is this repository's
HEAD (commit first), with this machine's pip and uv caches (the cold-cache
installs are ``test_cold_install.py``'s). Where ``python3.12`` on ``PATH`` is
not a Python 3.12 (a pyenv shim while another version is selected), the
blocks take what the README says to write there with pyenv. uv may not
download a CPython of its own (``UV_PYTHON_DOWNLOADS=never``): the README
gives it the interpreter.
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
from tests.tooling.builds import installed_version, run_ok

pytestmark = pytest.mark.slow

README = (REPO_ROOT / 'README.md').read_text()
PIN = Project().pin()
PYENV_PYTHON = '"$(pyenv prefix 3.12)/bin/python"'


def install_blocks() -> list[str]:
    """The ```bash blocks of the README's "Install" section."""
    return section_blocks('## Install')


def section_blocks(heading: str) -> list[str]:
    start = README.index(heading)
    section = README[start:README.index('\n## ', start)]
    return re.findall(r'^```bash\n(.*?)^```$', section, re.MULTILINE | re.DOTALL)


def back_to_vanilla(which: str) -> str:
    """The README's "Back to vanilla" line for pip or uv (its comment names it)."""
    (block,) = section_blocks('## Back to vanilla')
    (line,) = [line for line in block.splitlines() if line.endswith(f'# {which}')]
    return line


def python312_works() -> bool:
    found = shutil.which('python3.12')
    return found is not None and subprocess.run(
        [found, '-c', 'import sys; assert sys.version_info[:2] == (3, 12)'],
        capture_output=True).returncode == 0


def as_this_machine_needs(block: str) -> str:
    """The block, with pyenv's interpreter where the README says so."""
    if python312_works():
        return block
    if shutil.which('pyenv') is None:
        pytest.skip('no python3.12 on PATH and no pyenv')
    # The blocks' comments: with pyenv: "$(pyenv prefix 3.12)/bin/python" -m venv .venv,
    # and for uv venv: with pyenv: --python "$(pyenv prefix 3.12)/bin/python"
    pyenv_form = (f'# with pyenv: --python {PYENV_PYTHON}' if 'uv venv' in block
                  else f'# with pyenv: {PYENV_PYTHON} -m venv .venv')
    assert pyenv_form in block, block
    block = block.replace('python3.12 -m venv', f'{PYENV_PYTHON} -m venv', 1)
    return block.replace('--python "$(command -v python3.12)"', f'--python {PYENV_PYTHON}', 1)


def test_the_readme_has_a_pip_and_a_uv_block_from_a_clone() -> None:
    pip, uv = install_blocks()
    assert 'git+file://$PWD@main' in pip and 'git+file://$PWD@main' in uv
    assert uv.startswith('uv venv --python "$(command -v python3.12)" .venv')


@pytest.mark.parametrize('which', ['pip', 'uv'])
def test_the_install_block_installs_this_flax_and_back_to_vanilla_reverts_it(
    which: str, tmp_path: Path
) -> None:
    """One block in a fresh clone: a new venv, one wheel build, flax's
    dependencies from the caches; then ``flax.__version__``; then the
    README's way back to vanilla with the same installer."""
    block = as_this_machine_needs(install_blocks()[['pip', 'uv'].index(which)])
    clone = tmp_path / 'clone'
    commit = run_ok('git', '-C', REPO_ROOT, 'rev-parse', 'HEAD').strip()
    run_ok('git', 'clone', '--quiet', '--no-checkout', REPO_ROOT, clone)
    run_ok('git', '-C', clone, 'checkout', '--quiet', '-B', 'main', commit)
    uv_dir = str(Path(sys.executable).parent)  # uv: requirements/test.txt
    env = {**os.environ, 'UV_PYTHON_DOWNLOADS': 'never',
           'PATH': os.pathsep.join([os.environ['PATH'], uv_dir])}
    run_ok('bash', '-euo', 'pipefail', '-c', block, env=env, cwd=clone)
    python = clone / '.venv' / 'bin' / 'python'
    assert installed_version(python) == PIN.local_version
    run_ok('bash', '-euo', 'pipefail', '-c', back_to_vanilla(which), env=env, cwd=clone)
    assert installed_version(python) == PIN.version
