"""The two interpreters of a benchmark run, and the machine it runs on.

By default two venvs under ``build/bench/``, made on first use and reused
afterwards (``--rebuild`` makes them anew, and so does a changed base
interpreter, as ``scripts/venv`` does):

- ``venv-ours``: ``pip install <repo>`` (our patched flax, with its deps);
- ``venv-vanilla``: ``flax==0.12.12`` from the registry, with the same jax,
  jaxlib and optax versions as ``venv-ours``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import zipfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
BUILD = REPO / 'build' / 'bench'
VANILLA_FLAX = 'flax==0.12.12'
SHARED_DEPS = ('jax', 'jaxlib', 'optax')


def _pip(python: Path, *args: str) -> None:
    subprocess.run([str(python), '-m', 'pip', 'install', '--quiet', *args], check=True)


def base_interpreter(python: Path | str) -> str:
    """The real interpreter behind ``python`` (through symlinks, shims, venvs)."""
    code = 'import os, sys; print(os.path.realpath(sys._base_executable))'
    result = subprocess.run([str(python), '-c', code], capture_output=True, text=True)
    return result.stdout.strip() if result.returncode == 0 else ''


def make_venv(base_python: str, path: Path, rebuild: bool) -> tuple[Path, bool]:
    """``(python, ready)``: the venv's interpreter and whether it is usable as is.

    A venv made with another interpreter than ``base_python`` (a changed
    ``PYTHON=`` of ``make bench``) is made anew, as ``scripts/venv`` does.
    """
    python = path / 'bin' / 'python'
    if (path / '.ready').exists() and not rebuild:
        if base_interpreter(python) == base_interpreter(base_python):
            return python, True
        print(f'{path} was made with another Python than {base_python}: making it anew',
              flush=True)
        rebuild = True
    if rebuild and path.exists():
        shutil.rmtree(path)
    subprocess.run([base_python, '-m', 'venv', '--clear', str(path)], check=True)
    return python, False


def package_versions(python: Path | str, names: tuple[str, ...]) -> dict[str, str]:
    """Installed versions of ``names`` in ``python``'s environment."""
    code = ('import json, sys; from importlib.metadata import version; '
            'print(json.dumps({n: version(n) for n in sys.argv[1:]}))')
    output = subprocess.run([str(python), '-c', code, *names], check=True,
                            capture_output=True, text=True).stdout
    return json.loads(output)


def ensure_venvs(base_python: str, rebuild: bool = False) -> tuple[str, str]:
    """Create (or reuse) ``build/bench/venv-ours`` and ``venv-vanilla``."""
    BUILD.mkdir(parents=True, exist_ok=True)
    ours, ready = make_venv(base_python, BUILD / 'venv-ours', rebuild)
    if not ready:
        print(f'building venv-ours: pip install {REPO}', flush=True)
        _pip(ours, str(REPO))
        (BUILD / 'venv-ours' / '.ready').touch()
    vanilla, ready = make_venv(base_python, BUILD / 'venv-vanilla', rebuild)
    if not ready:
        pins = [f'{name}=={version}'
                for name, version in package_versions(ours, SHARED_DEPS).items()]
        print(f'building venv-vanilla: pip install {VANILLA_FLAX} {" ".join(pins)}',
              flush=True)
        _pip(vanilla, VANILLA_FLAX, *pins)
        (BUILD / 'venv-vanilla' / '.ready').touch()
    return str(ours), str(vanilla)


def machine() -> dict[str, Any]:
    cpu = 'unknown'
    try:
        for line in Path('/proc/cpuinfo').read_text().splitlines():
            if line.startswith('model name'):
                cpu = line.split(':', 1)[1].strip()
                break
    except OSError:
        pass
    return {'nproc': os.cpu_count(), 'cpu': cpu}


def with_pythonpath(python: str, path: str, name: str) -> str:
    """A wrapper script ``build/bench/python-<name>`` that runs ``python`` with
    ``path`` first on ``PYTHONPATH`` (a source tree, an unpacked wheel)."""
    BUILD.mkdir(parents=True, exist_ok=True)
    wrapper = BUILD / f'python-{name}'
    wrapper.write_text(
        '#!/bin/sh\n'
        f'PYTHONPATH="{os.path.abspath(path)}${{PYTHONPATH:+:$PYTHONPATH}}" '
        f'exec "{os.path.abspath(python)}" "$@"\n')
    wrapper.chmod(0o755)
    return str(wrapper)


def registry_flax(python: str) -> Path:
    """The registry's ``flax==0.12.12`` wheel unpacked in ``build/bench/vanilla-site``
    (downloaded with ``python``'s pip on first use), to put first on a path."""
    site = BUILD / 'vanilla-site'
    if (site / 'flax').is_dir():
        return site
    wheels = BUILD / 'vanilla-wheel'
    subprocess.run([python, '-m', 'pip', 'download', '--quiet', '--no-deps',
                    '--only-binary', ':all:', VANILLA_FLAX, '-d', str(wheels)], check=True)
    (wheel,) = wheels.glob('flax-*.whl')
    with zipfile.ZipFile(wheel) as archive:
        archive.extractall(site)
    return site
