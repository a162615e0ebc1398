"""Where the pieces of the patch queue live, and the upstream pin."""

from __future__ import annotations

import dataclasses
import os
import tomllib
from pathlib import Path

from flaxpq import QueueError

REPO_ROOT = Path(__file__).resolve().parent.parent
CACHE_ENV = 'FLAXPQ_CACHE'


@dataclasses.dataclass(frozen=True)
class Pin:
    """The upstream release the series applies to, and our local label."""

    package: str
    version: str
    sdist: str
    sha256: str
    label: str

    @property
    def local_version(self) -> str:
        """The version our wheel carries, e.g. ``0.12.12+nnxaxis.1``."""
        return f'{self.version}+{self.label}'


@dataclasses.dataclass(frozen=True)
class Project:
    """A patch queue: a pin file and a patches folder with its series."""

    root: Path = REPO_ROOT

    @property
    def pin_file(self) -> Path:
        return self.root / 'upstream.toml'

    @property
    def patches_dir(self) -> Path:
        return self.root / 'patches'

    @property
    def series_file(self) -> Path:
        return self.patches_dir / 'series'

    @property
    def work_dir(self) -> Path:
        """The materialized tree developers edit (ignored by git)."""
        return self.root / 'build' / 'work'

    def pin(self) -> Pin:
        try:
            data = tomllib.loads(self.pin_file.read_text())
            upstream, release = data['upstream'], data['release']
            return Pin(
                package=upstream['package'],
                version=upstream['version'],
                sdist=upstream['sdist'],
                sha256=upstream['sha256'].lower(),
                label=release['label'],
            )
        except (OSError, KeyError, tomllib.TOMLDecodeError) as e:
            raise QueueError(
                f'{self.pin_file}: cannot read the pin ({e!r}); it needs '
                '[upstream] package, version, sdist, sha256 and [release] label.'
            ) from e

    def series(self) -> list[str]:
        """Patch file names in application order (blank lines, # comments skip)."""
        if not self.series_file.exists():
            return []
        names = []
        for line in self.series_file.read_text().splitlines():
            line = line.strip()
            if line and not line.startswith('#'):
                names.append(line)
        return names


def cache_dir() -> Path:
    """Where downloaded sdists are kept across builds and clones."""
    if env := os.environ.get(CACHE_ENV):
        return Path(env)
    base = os.environ.get('XDG_CACHE_HOME') or Path.home() / '.cache'
    return Path(base) / 'flaxpq'
