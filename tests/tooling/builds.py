"""Helpers for the build tests: clean environments, fresh venvs, pip's output."""

from __future__ import annotations

import os
import re
import subprocess
import tomllib
import venv
from pathlib import Path

from flaxpq.project import REPO_ROOT

UNREACHABLE_INDEX = 'http://127.0.0.1:9/simple'  # the discard port: refused
_HOOK_OUTPUT = re.compile(
    r'\[\d+ lines? of output\]\n(.*?)\n\s*\[end of output\]', re.DOTALL
)


def isolated_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    """``os.environ`` without pip, uv and flaxpq settings, with empty caches.

    No pip configuration file is read (the machine's may add local indexes
    or wheel folders), and every cache is a new folder under ``tmp_path``, so
    whatever the build needs comes from the registry (or, with ``extra``,
    from where the test says).
    """
    env = {
        name: value for name, value in os.environ.items()
        if not name.startswith(('PIP_', 'UV_', 'FLAXPQ_', 'SOURCE_DATE_EPOCH'))
    }
    caches = tmp_path / 'caches'
    env.update(
        PIP_CONFIG_FILE=os.devnull,
        PIP_DISABLE_PIP_VERSION_CHECK='1',
        PIP_CACHE_DIR=str(caches / 'pip'),
        UV_NO_CONFIG='1',
        UV_CACHE_DIR=str(caches / 'uv'),
        FLAXPQ_CACHE=str(caches / 'flaxpq'),
        XDG_CACHE_HOME=str(caches / 'xdg'),
    )
    env.update(extra)
    return env


def run_ok(*args: str | Path, env: dict[str, str] | None = None,
           cwd: Path | None = None) -> str:
    """Run a command; its stdout and stderr, or fail with their end."""
    result = subprocess.run([str(a) for a in args], env=env, cwd=cwd,
                            capture_output=True, text=True)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-4000:]
    return output


def fresh_clone(dest: Path) -> tuple[Path, str]:
    """A ``git clone`` of this repository at its HEAD commit, and that commit."""
    commit = run_ok('git', '-C', REPO_ROOT, 'rev-parse', 'HEAD').strip()
    run_ok('git', 'clone', '--quiet', '--no-checkout', REPO_ROOT, dest)
    run_ok('git', '-C', dest, 'checkout', '--quiet', commit)
    return dest, commit


def published_clone(tmp_path: Path) -> tuple[Path, Path, str]:
    """A bare repository with ``main`` at this repository's HEAD (the
    published one), a reader's clone of it, and HEAD's commit."""
    commit = run_ok('git', '-C', REPO_ROOT, 'rev-parse', 'HEAD').strip()
    published = tmp_path / 'published' / 'flax-nnxaxis.git'
    run_ok('git', 'clone', '--quiet', '--bare', REPO_ROOT, published)
    run_ok('git', '-C', published, 'update-ref', 'refs/heads/main', commit)
    run_ok('git', '-C', published, 'symbolic-ref', 'HEAD', 'refs/heads/main')
    clone = tmp_path / 'src' / 'flax-nnxaxis'
    run_ok('git', 'clone', '--quiet', published, clone)
    return published, clone, commit


def fresh_venv(path: Path, env: dict[str, str]) -> Path:
    """A new venv of this Python with the latest pip; its python."""
    venv.create(path, with_pip=True)
    python = path / 'bin' / 'python'
    run_ok(python, '-m', 'pip', 'install', '--quiet', '--upgrade', 'pip', env=env)
    return python


def build_requirements() -> list[str]:
    """``[build-system] requires`` of pyproject.toml (the pinned versions)."""
    data = tomllib.loads((REPO_ROOT / 'pyproject.toml').read_text())
    return list(data['build-system']['requires'])


def hook_output(pip_output: str) -> str:
    """What the failed build hook printed, from pip's ``[N lines of output]`` box."""
    match = _HOOK_OUTPUT.search(pip_output)
    assert match, pip_output[-4000:]
    return '\n'.join(line.strip() for line in match.group(1).splitlines())


def installed_version(python: Path, package: str = 'flax') -> str:
    return run_ok(python, '-c', 'import importlib.metadata as m, sys; '
                  'print(m.version(sys.argv[1]))', package).strip()
