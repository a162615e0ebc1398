"""Upstream's own flax wheel from the package registry, for comparisons."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from flaxpq.project import Project


def download_registry_wheel(dest: Path) -> Path:
    """Download the registry's wheel of the pinned flax release into ``dest``."""
    pin = Project().pin()
    subprocess.run(
        [sys.executable, '-m', 'pip', 'download', '--quiet', '--no-deps',
         '--only-binary', ':all:', f'{pin.package}=={pin.version}', '-d', str(dest)],
        check=True, capture_output=True, text=True)
    (wheel,) = dest.glob('*.whl')
    return wheel
