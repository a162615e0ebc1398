"""Build the patched ``flax`` wheel (or its metadata) from the verified sdist plus the series.

Builds are reproducible: two builds of one commit give byte-identical wheels.
File modes in the patched tree are normalized (the umask and git do not
matter), and ``SOURCE_DATE_EPOCH`` -- the zip timestamps -- defaults to the
newest file time inside the pinned sdist.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Iterator
from pathlib import Path

from flaxpq import QueueError, gitqueue, sdist
from flaxpq.project import Pin, Project

EPOCH_ENV = 'SOURCE_DATE_EPOCH'

# Run in a fresh interpreter inside the patched tree: setuptools reads its
# configuration (pyproject.toml, setup.cfg) from the working directory. The
# umask fixes the modes of the files setuptools writes (dist-info).
_SETUPTOOLS_HOOK = (
    'import os, sys, setuptools.build_meta as b; os.umask(0o022); '
    'print(getattr(b, sys.argv[1])(sys.argv[2]))'
)


def stamp_version(tree: Path, pin: Pin) -> None:
    """Write our local version label into ``flax/version.py`` of ``tree``."""
    version_py = tree / pin.package / 'version.py'
    text = version_py.read_text()
    line = f"__version__ = '{pin.version}'"
    if text.count(line) != 1:
        raise QueueError(
            f'{version_py} does not hold exactly one `{line}`: the pin in '
            'upstream.toml and the sdist disagree, or a patch touched it.'
        )
    version_py.write_text(
        text.replace(line, f"__version__ = '{pin.local_version}'")
    )


def normalize_modes(tree: Path) -> None:
    """Folders and executables 0755, other files 0644, whatever the umask."""
    for path in [tree, *tree.rglob('*')]:
        if path.is_symlink():
            continue
        executable = path.is_dir() or path.stat().st_mode & stat.S_IXUSR
        path.chmod(0o755 if executable else 0o644)


def source_date_epoch(sdist_path: Path) -> str:
    """``$SOURCE_DATE_EPOCH`` if set, else the newest file time in the sdist."""
    if env := os.environ.get(EPOCH_ENV):
        return env
    with tarfile.open(sdist_path) as tar:
        return str(int(max(member.mtime for member in tar.getmembers())))


@contextlib.contextmanager
def patched_tree(project: Project) -> Iterator[tuple[Path, str]]:
    """A temporary patched, stamped tree without ``.git``, and its epoch."""
    pin = project.pin()
    sdist_path = sdist.fetch(pin)
    with tempfile.TemporaryDirectory(prefix='flaxpq-build-') as tmp:
        tree = Path(tmp) / 'tree'
        try:
            gitqueue.materialize(project, sdist_path, tree)
        except gitqueue.PatchError as e:
            raise QueueError(_patch_error_message(e, pin)) from None
        # Build from plain files: a git repo would let setuptools file finders
        # (setuptools-scm, if installed) add tracked files to the wheel.
        shutil.rmtree(tree / '.git')
        stamp_version(tree, pin)
        normalize_modes(tree)
        yield tree, source_date_epoch(sdist_path)


def _patch_error_message(error: gitqueue.PatchError, pin: Pin) -> str:
    """The failing patch and git's reason, without the deleted temporary tree."""
    reasons = [
        line for line in error.reason.splitlines()
        if line.startswith(('error:', 'Patch failed'))
    ] or error.reason.splitlines()
    return (
        f'patch {error.patch} does not apply to the pristine {pin.sdist}:\n'
        + ''.join(f'  {line}\n' for line in reasons)
        + 'The build tree was temporary. To reproduce and repair it, run '
        '`python -m flaxpq materialize` in a clone of this repository: it '
        'stops at the same patch and leaves build/work/flax mid-`git am` '
        '(docs/maintainers.md, "Editing a patch").'
    )


def _run_setuptools(tree: Path, hook: str, out: Path, epoch: str) -> str:
    """Call ``setuptools.build_meta.<hook>(out)`` in ``tree``; return its result."""
    result = subprocess.run(
        [sys.executable, '-c', _SETUPTOOLS_HOOK, hook, str(out)],
        cwd=tree, capture_output=True, text=True,
        env={**sdist.pip_environment(), EPOCH_ENV: epoch},
    )
    if result.returncode != 0:
        raise QueueError(
            f'setuptools could not run {hook} on the patched tree:\n'
            + sdist.tail(result.stderr, 25)
        )
    return result.stdout.strip().splitlines()[-1]


def build_wheel(project: Project, wheel_dir: Path) -> Path:
    """Materialize the queue in a temporary folder and build its wheel there."""
    wheel_dir.mkdir(parents=True, exist_ok=True)
    with patched_tree(project) as (tree, epoch):
        out = tree.parent / 'dist'
        name = _run_setuptools(tree, 'build_wheel', out, epoch)
        target = wheel_dir / name
        shutil.copyfile(out / name, target)
    return target


def prepare_metadata(project: Project, metadata_dir: Path) -> str:
    """Write the wheel's ``.dist-info`` folder into ``metadata_dir``; return its name.

    The same patched tree and setuptools call as :func:`build_wheel`, minus
    building the wheel: its METADATA is the wheel's, version label included.
    """
    metadata_dir.mkdir(parents=True, exist_ok=True)
    with patched_tree(project) as (tree, epoch):
        return _run_setuptools(tree, 'prepare_metadata_for_build_wheel',
                               metadata_dir.resolve(), epoch)
