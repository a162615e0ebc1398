"""Which Python `make` picks, and what a changed pick does.

``scripts/find-python`` must pick in the order docs/maintainers.md gives
("The make targets": ``python3`` if >= 3.12, ``python3.12``, pyenv's newest 3.12.x, and
only then newer ones), and ``scripts/venv`` must make a venv anew when the
pick changes (so must ``make bench``'s venvs). They run here against stand-in interpreters: shell scripts that
answer the version check with a given version and make stand-in venvs.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from flaxpq.project import REPO_ROOT

sys.path.insert(0, str(REPO_ROOT / 'benchmarks'))
import environments  # noqa: E402

FIND_PYTHON = REPO_ROOT / 'scripts' / 'find-python'
VENV = REPO_ROOT / 'scripts' / 'venv'
# A stand-in interpreter: `-c` code that checks the version exits by VERSION,
# `-c` code asking for the base interpreter prints BASE, `-m venv DIR` makes
# DIR/bin/python, a stand-in with the same BASE, and `-m pip` does nothing.
STUB = '''#!/bin/sh
VERSION={version}; BASE={base}
case "$1 $2" in
  "-c "*version_info*) [ "$VERSION" -ge 12 ] ;;
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
