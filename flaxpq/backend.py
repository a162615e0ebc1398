"""PEP 517 in-tree build backend: ``pip install .`` builds the patched flax.

``pyproject.toml`` names this module with ``backend-path = ["."]``. The wheel
is the pinned upstream sdist, verified by sha256, with ``patches/series``
applied and our local version label stamped into ``flax/version.py``.
"""

from __future__ import annotations

import tarfile
import tempfile
from pathlib import Path
from typing import Any

from flaxpq import QueueError
from flaxpq.project import Project
from flaxpq.wheel import build_wheel as _build_wheel

ConfigSettings = dict[str, Any] | None


def get_requires_for_build_wheel(config_settings: ConfigSettings = None) -> list[str]:
    return []


def get_requires_for_build_sdist(config_settings: ConfigSettings = None) -> list[str]:
    return []


def build_wheel(
    wheel_directory: str,
    config_settings: ConfigSettings = None,
    metadata_directory: str | None = None,
) -> str:
    return _build_wheel(Project(), Path(wheel_directory)).name


def build_sdist(sdist_directory: str, config_settings: ConfigSettings = None) -> str:
    """An sdist of this repository (tooling + patches), not of upstream flax.

    Building a wheel from it fetches the pinned upstream sdist like any build.
    """
    project = Project()
    pin = project.pin()
    base = f'{pin.package}-{pin.local_version}'
    target = Path(sdist_directory) / f'{base}.tar.gz'
    pkg_info = (
        'Metadata-Version: 2.1\n'
        f'Name: {pin.package}\n'
        f'Version: {pin.local_version}\n'
        'Summary: Flax with the nnxaxis patch series applied at build time\n'
    )
    files = [
        path for path in ('pyproject.toml', 'upstream.toml', 'README.md',
                          'CHANGELOG.md', 'LICENSE', 'flaxpq', 'patches')
        if (project.root / path).exists()
    ]
    with tempfile.TemporaryDirectory() as tmp:
        info = Path(tmp) / 'PKG-INFO'
        info.write_text(pkg_info)
        with tarfile.open(target, 'w:gz') as tar:
            tar.add(info, f'{base}/PKG-INFO')
            for path in files:
                tar.add(project.root / path, f'{base}/{path}', filter=_skip_caches)
    return target.name


def _skip_caches(info: tarfile.TarInfo) -> tarfile.TarInfo | None:
    return None if '__pycache__' in info.name else info


def build_editable(
    wheel_directory: str,
    config_settings: ConfigSettings = None,
    metadata_directory: str | None = None,
) -> str:
    raise QueueError(
        'Editable installs of the patched flax are not supported: the flax '
        'sources are not in this repository. For development, run '
        '`python -m flaxpq materialize`, edit and commit in build/work/flax, '
        'test with PYTHONPATH=build/work/flax, then `python -m flaxpq export` '
        '(see docs/maintainers.md).'
    )
