"""PEP 517 in-tree build backend: ``pip install .`` builds the patched flax.

``pyproject.toml`` names this module with ``backend-path = ["."]``. The wheel
is the pinned upstream sdist, verified by sha256, with ``patches/series``
applied and our local version label stamped into ``flax/version.py``.
"""

from __future__ import annotations

import sys

from flaxpq import python_too_old  # imports on any Python 3

_TOO_OLD = python_too_old(
    'this flax (upstream release + nnxaxis patches)',
    'Install it with the pip or uv of a Python 3.12+ environment.')
if _TOO_OLD:  # before anything else can fail on this Python
    sys.stderr.write(_TOO_OLD + '\n')
    raise SystemExit(1)

import functools
import tarfile
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from flaxpq import QueueError, wheel
from flaxpq.project import Project

ConfigSettings = dict[str, Any] | None
Hook = TypeVar('Hook', bound=Callable[..., Any])


def _user_facing(hook: Hook) -> Hook:
    """Report a :class:`QueueError` as one message on stderr, no traceback.

    pip and uv show a failed hook's output and exit code; our message is what
    the user needs, so it is all the hook prints then. A hook that succeeds
    says so in one line (``flaxpq: <hook>: <result>``) for the build log
    (pip -v, uv -v), so the log shows which hooks ran, and how often.
    """
    @functools.wraps(hook)
    def run(*args: Any, **kwargs: Any) -> Any:
        try:
            result = hook(*args, **kwargs)
        except QueueError as e:
            sys.stderr.write(f'error: {e}\n')
            sys.stderr.flush()
            raise SystemExit(1) from None
        sys.stderr.write(f'flaxpq: {hook.__name__}: {result}\n')
        sys.stderr.flush()
        return result
    return run  # type: ignore[return-value]


def get_requires_for_build_wheel(config_settings: ConfigSettings = None) -> list[str]:
    return []


def get_requires_for_build_sdist(config_settings: ConfigSettings = None) -> list[str]:
    return []


@_user_facing
def prepare_metadata_for_build_wheel(
    metadata_directory: str, config_settings: ConfigSettings = None
) -> str:
    """The wheel's ``.dist-info`` without building the wheel (PEP 517)."""
    return wheel.prepare_metadata(Project(), Path(metadata_directory))


@_user_facing
def build_wheel(
    wheel_directory: str,
    config_settings: ConfigSettings = None,
    metadata_directory: str | None = None,
) -> str:
    """The patched wheel; its METADATA equals what the metadata hook wrote."""
    return wheel.build_wheel(Project(), Path(wheel_directory)).name


@_user_facing
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


@_user_facing
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
