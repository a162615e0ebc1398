"""Which Python `make` picks, and what a changed pick does.

``scripts/find-python`` must pick in the order docs/maintainers.md gives
("The make targets": ``python3`` if >= 3.12, ``python3.12``, pyenv's newest 3.12.x, and
only then newer ones), and ``scripts/venv`` must make a venv anew when the
pick changes (so must ``make bench``'s venvs). They run here against stand-in interpreters: shell scripts that
answer the version check with a given version and make stand-in venvs. What
find-python prints is the interpreter itself, never a pyenv shim, so the
README's blocks run the same Python in the clone as in a project folder
pinned by ``.python-version``: against a test double of pyenv, and against
the machine's pyenv where it has a 3.12.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from flaxpq.project import REPO_ROOT
from tests.tooling.helpers import pyenv_double

sys.path.insert(0, str(REPO_ROOT / 'benchmarks'))
import environments  # noqa: E402

FIND_PYTHON = REPO_ROOT / 'scripts' / 'find-python'
VENV = REPO_ROOT / 'scripts' / 'venv'
# A stand-in interpreter: `-c` code that checks the version exits by VERSION
# and, where it is >= 12, prints the path it was run by (its sys.executable),
# `-c` code asking for the base interpreter prints BASE, `-m venv DIR` makes
# DIR/bin/python, a stand-in with the same BASE, and `-m pip` does nothing.
STUB = '''#!/bin/sh
VERSION={version}; BASE={base}
case "$1 $2" in
  "-c "*version_info*) [ "$VERSION" -ge 12 ] && echo "$0" ;;
  "-c "*_base_executable*) echo "$BASE" ;;
  "-m venv") for dir; do :; done; mkdir -p "$dir/bin" \\
      && sed "s|^VERSION=.*|VERSION=$VERSION; BASE=$BASE|" "$0" > "$dir/bin/python" \\
      && chmod +x "$dir/bin/python" ;;
  "-m pip") exit 0 ;;
  *) exit 3 ;;
esac
'''


def stub(path: Path, minor: int) -> Path:
    """A stand-in for Python 3.<minor> at ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(STUB.format(version=minor, base=path))
    path.chmod(0o755)
    return path


def run(script: Path, *args: str, path: Path, pyenv_root: Path,
        python: str | None = None, cwd: Path | None = None
        ) -> subprocess.CompletedProcess[str]:
    """``script`` with only ``path`` (and the system's tools) on PATH, no pyenv."""
    env = {'PATH': f'{path}:/usr/bin:/bin', 'PYENV_ROOT': str(pyenv_root),
           'HOME': str(pyenv_root.parent)}
    if python is not None:
        env['PYTHON'] = python
    return subprocess.run([str(script), *args], env=env, cwd=cwd, capture_output=True,
                          text=True, timeout=60)


@pytest.fixture
def machine(tmp_path: Path) -> tuple[Path, Path]:
    """``(bin, pyenv root)``: empty, for the test to fill with stand-ins."""
    (tmp_path / 'bin').mkdir()
    return tmp_path / 'bin', tmp_path / 'pyenv'


@pytest.mark.parametrize('on_path, in_pyenv, picked', [
    # python3 >= 3.12 first, as "if `python3 --version` says 3.12 or newer".
    ({'python3': 13, 'python3.12': 12}, ['3.12.9'], 'bin/python3'),
    # python3 too old: python3.12 on PATH before a python3.13 on PATH.
    ({'python3': 11, 'python3.12': 12, 'python3.13': 13}, [], 'bin/python3.12'),
    # no 3.12 on PATH: pyenv's newest 3.12.x before a python3.13 on PATH.
    ({'python3': 11, 'python3.13': 13}, ['3.12.1', '3.12.10', '3.13.0'],
     'pyenv/versions/3.12.10/bin/python'),
    # no 3.12 at all: a newer one.
    ({'python3': 11}, ['3.11.7', '3.13.0'], 'pyenv/versions/3.13.0/bin/python'),
], ids=['python3', 'python3.12', 'pyenv-3.12', 'newer'])
def test_find_python_picks_in_the_install_sections_order(
    machine: tuple[Path, Path], on_path: dict[str, int], in_pyenv: list[str], picked: str
) -> None:
    bin_dir, pyenv_root = machine
    for name, minor in on_path.items():
        stub(bin_dir / name, minor)
    for version in in_pyenv:
        stub(pyenv_root / 'versions' / version / 'bin' / 'python', int(version.split('.')[1]))
    result = run(FIND_PYTHON, path=bin_dir, pyenv_root=pyenv_root)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == str(bin_dir.parent / picked)


def test_find_python_explains_when_there_is_none(machine: tuple[Path, Path]) -> None:
    bin_dir, pyenv_root = machine
    stub(bin_dir / 'python3', 11)
    result = run(FIND_PYTHON, path=bin_dir, pyenv_root=pyenv_root)
    assert result.returncode == 1 and result.stdout == ''
    assert 'no Python >= 3.12 found' in result.stderr and 'PYTHON=' in result.stderr


def test_a_changed_python_makes_the_venv_anew(machine: tuple[Path, Path]) -> None:
    bin_dir, pyenv_root = machine
    first = stub(bin_dir / 'python3.12', 12)
    second = stub(bin_dir.parent / 'other' / 'python3.13', 13)
    venv = bin_dir.parent / 'venv'

    def make(python: str | None = None) -> str:
        result = run(VENV, str(venv), path=bin_dir, pyenv_root=pyenv_root, python=python)
        assert result.returncode == 0, result.stderr
        return result.stdout

    assert make() == f'making {venv} with {first}\n'
    (venv / 'installed').touch()
    assert make() == ''  # the same pick: kept, with what was installed
    assert (venv / 'installed').exists()
    said = make(str(second))
    assert said == (f'{venv} was made with {first}; find-python now picks {second}: '
                    f'making {venv} anew\n')
    assert not (venv / 'installed').exists() and (venv / '.ready').exists()
    assert make(str(second)) == ''
    (venv / '.ready').unlink()  # an interrupted make
    assert 'incomplete' in make(str(second))


def test_the_install_section_and_find_python_name_the_same_order() -> None:
    """The maintainers' guide says the order find-python's own comment gives."""
    readme = ' '.join((REPO_ROOT / 'docs' / 'maintainers.md').read_text().split())
    assert ('`python3` if it is 3.12 or newer, else `python3.12` on `PATH`, else '
            "pyenv's newest 3.12.x; only where none of these is found, "
            "`python3.13`/`python3.14` on `PATH` or pyenv's newest 3.13+") in readme
    script = FIND_PYTHON.read_text()
    assert "on_path python3 python3.12 || in_pyenv '3.12*' \\\n" in script
    assert "|| on_path python3.13 python3.14 || in_pyenv '3.1[3-9]*'" in script
    assert os.access(VENV, os.X_OK)


def test_a_changed_python_makes_the_benchmark_venvs_anew(machine: tuple[Path, Path]) -> None:
    """``make bench`` passes find-python's pick; its venvs follow it too."""
    bin_dir, _ = machine
    first = stub(bin_dir / 'python3.12', 12)
    second = stub(bin_dir / 'python3.13', 13)
    venv = bin_dir.parent / 'venv-ours'
    python, ready = environments.make_venv(str(first), venv, rebuild=False)
    assert not ready and environments.base_interpreter(python) == str(first)
    (venv / '.ready').touch()
    assert environments.make_venv(str(first), venv, rebuild=False) == (python, True)
    assert environments.make_venv(str(second), venv, rebuild=False) == (python, False)
    assert environments.base_interpreter(python) == str(second)


def stub_text(path: Path, minor: int) -> str:
    return STUB.format(version=minor, base=path)


@pytest.mark.parametrize('python', [None, 'python3'])
def test_in_a_pinned_folder_find_python_prints_the_interpreter_not_the_shim(
    tmp_path: Path, python: str | None
) -> None:
    """pyenv (a test double) with 3.11 global and a folder pinned to 3.12:
    the pick is 3.12's own python3, which is 3.12 in any folder, not the shim
    (3.11 in the clone). So is a ``PYTHON`` that names the shim."""
    root = tmp_path / 'pyenv'
    shims = pyenv_double(root, '3.11.7', {
        version: stub_text(root / 'versions' / version / 'bin' / 'python', minor)
        for version, minor in (('3.11.7', 11), ('3.12.1', 12))})
    pinned = tmp_path / 'project'
    pinned.mkdir()
    (pinned / '.python-version').write_text('3.12.1\n')
    result = run(FIND_PYTHON, path=shims, pyenv_root=root, python=python, cwd=pinned)
    assert result.returncode == 0, result.stderr
    assert result.stdout == f'{root}/versions/3.12.1/bin/python3\n'


def test_a_venv_made_through_the_shim_is_kept(tmp_path: Path) -> None:
    """A venv ``make`` made while find-python printed the shim is the same
    interpreter's: ``scripts/venv`` keeps it."""
    root = tmp_path / 'pyenv'
    shims = pyenv_double(root, '3.12.1', {
        '3.12.1': stub_text(root / 'versions' / '3.12.1' / 'bin' / 'python', 12)})
    venv = tmp_path / 'venv'
    subprocess.run([shims / 'python3', '-m', 'venv', venv], check=True, cwd=tmp_path)
    (venv / '.made-by-make').touch()
    (venv / '.ready').touch()
    result = run(VENV, str(venv), path=shims, pyenv_root=root, cwd=tmp_path)
    assert (result.returncode, result.stdout) == (0, ''), result.stdout + result.stderr


def pyenv_312() -> str:
    """An installed pyenv version 3.12.x of this machine, or skip."""
    if shutil.which('pyenv') is None:
        pytest.skip('no pyenv on this machine')
    versions = subprocess.run(['pyenv', 'versions', '--bare', '--skip-aliases'],
                              capture_output=True, text=True).stdout.split()
    found = sorted(v for v in versions if v.startswith('3.12.'))
    if not found:
        pytest.skip("no pyenv 3.12.x on this machine")
    return found[-1]


def test_with_the_machines_pyenv_the_pick_is_the_same_python_everywhere(tmp_path: Path) -> None:
    """In a folder pinned to pyenv's 3.12, find-python prints a path that
    runs that 3.12 also from another folder, whatever the global version."""
    version = pyenv_312()
    pinned = tmp_path / 'project'
    pinned.mkdir()
    (pinned / '.python-version').write_text(f'{version}\n')
    env = {k: v for k, v in os.environ.items() if k not in ('PYTHON', 'PYENV_VERSION')}
    picked = subprocess.run([FIND_PYTHON], env=env, cwd=pinned, capture_output=True,
                            text=True, timeout=60)
    assert picked.returncode == 0, picked.stderr
    python = picked.stdout.strip()
    root = subprocess.run(['pyenv', 'root'], capture_output=True, text=True).stdout.strip()
    assert not python.startswith(f'{root}/shims/'), python
    elsewhere = subprocess.run([python, '-c', 'import platform; print(platform.python_version())'],
                               env=env, cwd=tmp_path, capture_output=True, text=True)
    assert elsewhere.stdout.strip() == version, elsewhere.stdout + elsewhere.stderr
