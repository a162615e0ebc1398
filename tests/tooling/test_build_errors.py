"""A failed build says why in one message of ours, without a traceback.

pip shows a failed build hook's output in a ``[N lines of output]`` box; these
tests read that box (``hook_output``) and expect our message there, first
and alone.
"""

from __future__ import annotations

import glob
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from flaxpq import NEW_PYTHON_HOWTO, QueueError, sdist
from flaxpq.project import REPO_ROOT, Project
from tests.support.project_copy import copy_of_our_project
from tests.tooling.builds import hook_output
from tests.tooling.helpers import make_patch

PIN = Project().pin()


def failed_pip_wheel(project_root: Path, tmp_path: Path, python: str = sys.executable,
                     **env: str) -> str:
    """``pip wheel`` of ``project_root``, which must fail; its hook's output."""
    result = subprocess.run(
        [python, '-m', 'pip', 'wheel', '--no-deps', '--wheel-dir', str(tmp_path / 'out'),
         str(project_root)],
        env={**os.environ, **env}, capture_output=True, text=True)
    assert result.returncode != 0, result.stdout[-3000:]
    return hook_output(result.stdout + result.stderr)


def python_311() -> str | None:
    """A Python 3.11 on PATH or in pyenv's versions, if this machine has one."""
    found = shutil.which('python3.11')
    root = os.environ.get('PYENV_ROOT', os.path.expanduser('~/.pyenv'))
    return found or next(iter(sorted(glob.glob(f'{root}/versions/3.11*/bin/python'))), None)


@pytest.mark.slow
def test_python_older_than_3_12_is_refused_in_one_line(tmp_path: Path) -> None:
    python = python_311()
    if python is None:
        pytest.skip('no Python 3.11 on this machine')
    subprocess.run([python, '-m', 'venv', str(tmp_path / 'venv')], check=True)
    output = failed_pip_wheel(REPO_ROOT, tmp_path, str(tmp_path / 'venv/bin/python'))
    assert output.startswith('error: this flax (upstream release + nnxaxis patches) '
                             'requires Python >= 3.12'), output
    assert len(output.splitlines()) == 1 and 'Python 3.11' in output
    assert 'pyenv prefix 3.12' in output  # python3.12 may be a failing pyenv shim


def test_flaxpq_under_python_older_than_3_12_says_so_first(tmp_path: Path) -> None:
    """Not pip's ``Requires-Python`` download error, which reads as a network
    problem: with an empty cache, ``fetch`` would run pip."""
    python = python_311()
    if python is None:
        pytest.skip('no Python 3.11 on this machine')
    result = subprocess.run(
        [python, '-m', 'flaxpq', 'fetch'], cwd=REPO_ROOT, capture_output=True,
        text=True, env={**os.environ, 'FLAXPQ_CACHE': str(tmp_path / 'cache')})
    assert result.returncode == 2 and result.stdout == '', result
    assert result.stderr.startswith('error: python -m flaxpq requires Python >= 3.12'), \
        result.stderr
    assert len(result.stderr.splitlines()) == 1 and 'Python 3.11' in result.stderr
    assert 'pyenv prefix 3.12' in result.stderr and 'download' not in result.stderr
    assert not (tmp_path / 'cache').exists()


@pytest.mark.slow
def test_patch_that_does_not_apply_is_named_with_how_to_reproduce(
    queue: Project, pristine_sdist: Path, tmp_path: Path
) -> None:
    name = make_patch(queue, pristine_sdist, tmp_path)
    patch = queue.patches_dir / name
    patch.write_bytes(patch.read_bytes().replace(b'\n # ---', b'\n # -x-', 1))
    copy_of_our_project(queue)
    output = failed_pip_wheel(queue.root, tmp_path, FLAXPQ_SDIST=str(pristine_sdist))
    assert output.startswith(f'error: patch {name} does not apply to the pristine '
                             f'{PIN.sdist}:'), output
    assert 'error: flax/nnx/spmd.py: patch does not apply' in output  # git's reason
    assert '`python -m flaxpq materialize`' in output
    assert 'Traceback' not in output and 'flaxpq-build-' not in output


@pytest.mark.slow
def test_foreign_sdist_in_flaxpq_sdist_gets_advice_for_that_file(
    pristine_sdist: Path, tmp_path: Path
) -> None:
    foreign = tmp_path / PIN.sdist
    shutil.copy(pristine_sdist, foreign)
    with foreign.open('ab') as f:
        f.write(b'\0')
    output = failed_pip_wheel(REPO_ROOT, tmp_path, FLAXPQ_SDIST=str(foreign))
    assert output.startswith(f'error: sha256 mismatch for {foreign}:'), output
    assert f'This file is not the pinned release {PIN.sdist}' in output
    assert 'unset FLAXPQ_SDIST' in output
    assert 'Delete' not in output and 'Traceback' not in output


def test_the_nested_pip_gets_no_hook_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    """What pip 26 and uv set for a hook (dumped from inside one) is scrubbed."""
    hook_variables = {
        '_PYPROJECT_HOOKS_BUILD_BACKEND': 'flaxpq.backend',
        '_PYPROJECT_HOOKS_BACKEND_PATH_JSON': f'["{REPO_ROOT}"]',
        '_PYPROJECT_HOOKS_BACKEND_PATH': str(REPO_ROOT),
        'PIP_BUILD_TRACKER': '/tmp/pip-build-tracker-x',
        'PIP_REQ_TRACKER': '/tmp/pip-req-tracker-x',
        'UV_INTERNAL__BUILD_DIR': str(REPO_ROOT),
    }
    kept = {'PIP_INDEX_URL': 'https://mirror.example/simple', 'PYTHONPATH': '/site'}
    for name, value in {**hook_variables, **kept}.items():
        monkeypatch.setenv(name, value)
    env = sdist.pip_environment()
    assert not hook_variables.keys() & env.keys()
    assert kept.items() <= env.items()


PIP_OUTPUT = """Looking in indexes: http://127.0.0.1:9/simple
Collecting flax==0.12.12
WARNING: Retrying (Retry(total=1, ...)) after connection broken by 'NewConnectionError(...)': \
/simple/flax/
WARNING: Retrying (Retry(total=0, ...)) after connection broken by 'NewConnectionError(\
"HTTPConnection(host='127.0.0.1', port=9): Failed to establish a new connection: \
[Errno 111] Connection refused")': /simple/flax/
ERROR: Could not find a version that satisfies the requirement flax==0.12.12 (from versions: none)
ERROR: No matching distribution found for flax==0.12.12
"""


def test_pip_said_is_where_pip_looked_its_last_warning_and_its_errors() -> None:
    assert sdist.pip_said(PIP_OUTPUT).splitlines() == [
        'Looking in indexes: http://127.0.0.1:9/simple',
        "WARNING: Retrying (Retry(total=0, ...)) after connection broken by 'NewConnectionError("
        '"HTTPConnection(host=\'127.0.0.1\', port=9): Failed to establish a new connection: '
        '[Errno 111] Connection refused")\': /simple/flax/',
        'ERROR: Could not find a version that satisfies the requirement flax==0.12.12 '
        '(from versions: none)',
        'ERROR: No matching distribution found for flax==0.12.12',
    ]


def test_pip_said_without_warnings_or_errors_is_its_last_lines() -> None:
    output = ''.join(f'line {i}\n' for i in range(20))
    assert sdist.pip_said(output).splitlines() == [f'line {i}' for i in range(10, 20)]


def test_a_failed_download_shows_pips_lines_the_offline_recipe_and_the_rerun(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The index refuses the connection (the discard port): pip's retry
    warning names why, our advice says how to build offline."""
    for name in [n for n in os.environ if n.startswith(('PIP_', 'FLAXPQ_'))]:
        monkeypatch.delenv(name)
    monkeypatch.setenv('PIP_CONFIG_FILE', os.devnull)
    monkeypatch.setenv('PIP_INDEX_URL', 'http://127.0.0.1:9/simple')
    monkeypatch.setenv('PIP_RETRIES', '1')
    monkeypatch.setenv('FLAXPQ_CACHE', str(tmp_path / 'empty-cache'))
    with pytest.raises(QueueError) as error:
        sdist.fetch(PIN)
    first, *said = str(error.value).splitlines()
    assert first == f'could not download {PIN.sdist}: pip exited with 1. pip said:'
    assert said[0] == '  Looking in indexes: http://127.0.0.1:9/simple'
    assert said[1].startswith('  WARNING: Retrying') and 'Connection refused' in said[1]
    assert said[2].startswith('  ERROR: Could not find a version that satisfies')
    advice = said[-1]
    assert advice.startswith('Offline or behind a firewall? Build offline '
                             f'(docs/install-offline.md): set FLAXPQ_SDIST=/path/to/{PIN.sdist}')
    assert str(tmp_path / 'empty-cache') in advice
    assert advice.endswith("to see all of pip's output, run `python -m pip download --no-deps "
                           '--only-binary=:all: --no-binary=flax --disable-pip-version-check '
                           'flax==0.12.12`.')


def venv_commands() -> list[tuple[str, bool]]:
    """The commands the too-old-Python message gives for making a venv, each
    with whether it is for a machine without pyenv (``python3.12 ...``, or
    followed by "without pyenv")."""
    found = re.findall(r'`([^`]+)`([^`]*)', NEW_PYTHON_HOWTO)
    commands = [(c, c.startswith('python') or 'without pyenv' in after.split(';')[0])
                for c, after in found if ' venv' in c]
    assert len(commands) == 4, commands  # python3.12, pyenv's, uv with each
    return commands


def test_the_venv_advice_works_with_pyenv_offline_on_empty_caches(tmp_path: Path) -> None:
    """Each command of the too-old-Python message makes a 3.12 venv on a
    machine like this one: pyenv with another global Python (``python3.12``
    a failing shim), offline, with empty uv and pip caches, and uv not
    allowed to download a CPython. The commands without pyenv run where
    ``python3.12`` on ``PATH`` is a real one. ``python -m venv`` gives the
    venv pip; uv's venv has none (the message says to use ``uv pip``)."""
    pyenv = shutil.which('pyenv')
    found = subprocess.run([pyenv, 'prefix', '3.12'], capture_output=True,
                           text=True) if pyenv else None
    if found is None or found.returncode != 0:
        pytest.skip('no pyenv with a Python 3.12 on this machine')
    real = tmp_path / 'bin'
    real.mkdir()
    (real / 'python3.12').symlink_to(Path(found.stdout.strip()) / 'bin' / 'python3.12')
    uv_dir = str(Path(sys.executable).parent)  # uv: requirements/test.txt
    offline = {'UV_PYTHON_DOWNLOADS': 'never', 'UV_OFFLINE': '1', 'UV_NO_CONFIG': '1',
               'PIP_NO_INDEX': '1'}
    for index, (command, without_pyenv) in enumerate(venv_commands()):
        path = os.environ['PATH'] if not without_pyenv else os.pathsep.join(
            [str(real), os.path.dirname(pyenv), '/usr/bin', '/bin'])
        folder = tmp_path / f'try{index}'
        folder.mkdir()
        empty_caches = {'UV_CACHE_DIR': str(folder / 'uv-cache'),
                        'PIP_CACHE_DIR': str(folder / 'pip-cache'),
                        'XDG_CACHE_HOME': str(folder / 'cache')}
        result = subprocess.run(
            ['bash', '-c', command], cwd=folder, capture_output=True, text=True,
            env={**os.environ, **offline, **empty_caches,
                 'PATH': os.pathsep.join([uv_dir, path])})
        assert result.returncode == 0, (command, result.stderr[-2000:])
        python = folder / '.venv' / 'bin' / 'python'
        version = subprocess.run([python, '-c', 'import sys; print(sys.version_info[:2])'],
                                 capture_output=True, text=True)
        assert version.stdout.strip() == '(3, 12)', (command, version)
        has_pip = subprocess.run([python, '-c', 'import pip'], capture_output=True).returncode == 0
        assert has_pip == command.startswith(('python', '"')), (command, has_pip)
