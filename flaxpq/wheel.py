"""Build the patched ``flax`` wheel from the verified sdist plus the series."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from flaxpq import QueueError, gitqueue, sdist
from flaxpq.project import Pin, Project

# Run in a fresh interpreter inside the patched tree: setuptools reads its
# configuration (pyproject.toml, setup.cfg) from the working directory.
_SETUPTOOLS_BUILD = (
    'import sys, setuptools.build_meta as b; '
    'print(b.build_wheel(sys.argv[1]))'
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


def build_wheel(project: Project, wheel_dir: Path) -> Path:
    """Materialize the queue in a temporary folder and build its wheel there."""
    pin = project.pin()
    sdist_path = sdist.fetch(pin)
    wheel_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix='flaxpq-build-') as tmp:
        tree = Path(tmp) / 'tree'
        gitqueue.materialize(project, sdist_path, tree)
        # Build from plain files: a git repo would let setuptools file finders
        # (setuptools-scm, if installed) add tracked files to the wheel.
        shutil.rmtree(tree / '.git')
        stamp_version(tree, pin)
        out = Path(tmp) / 'dist'
        result = subprocess.run(
            [sys.executable, '-c', _SETUPTOOLS_BUILD, str(out)],
            cwd=tree, capture_output=True, text=True,
        )
        if result.returncode != 0:
            raise QueueError(
                'setuptools could not build the patched tree:\n'
                + '\n'.join(result.stderr.strip().splitlines()[-25:])
            )
        name = result.stdout.strip().splitlines()[-1]
        target = wheel_dir / name
        shutil.copyfile(out / name, target)
    return target
