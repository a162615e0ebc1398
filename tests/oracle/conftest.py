"""Two live workers, vanilla flax and ours, each running programs on request."""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, Iterator

import pytest

from flaxpq.project import REPO_ROOT, Project
from tests.oracle.programs import Program

TIMEOUT = 300.0
SELF_CHECK = os.environ.get('ORACLE_OURS') == 'vanilla'


class WorkerError(RuntimeError):
    pass


class Worker:
    """``python -m tests.oracle.runner`` with ``site`` (if any) first on PYTHONPATH.

    Its stderr goes to a file, shown when the worker dies or a program fails.
    The worker's first line says which flax it imported (``hello``).
    """

    def __init__(self, name: str, site: Path | None):
        self.name = name
        path = [str(REPO_ROOT)] if site is None else [str(site), str(REPO_ROOT)]
        env = {**os.environ, 'PYTHONPATH': os.pathsep.join(path)}
        self.stderr = tempfile.NamedTemporaryFile(
            mode='w+', prefix=f'oracle-{name}-', suffix='.stderr', delete=False)
        self.process = subprocess.Popen(
            [sys.executable, '-m', 'tests.oracle.runner'], env=env, text=True,
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.stderr)
        self.mark = 0
        self.hello = self.receive()

    def send(self, program: Program) -> None:
        assert self.process.stdin is not None
        self.mark = os.path.getsize(self.stderr.name)
        self.process.stdin.write(program.to_json() + '\n')
        self.process.stdin.flush()

    def receive(self) -> dict[str, Any]:
        assert self.process.stdout is not None
        ready, _, _ = select.select([self.process.stdout], [], [], TIMEOUT)
        line = self.process.stdout.readline() if ready else ''
        if not line:
            raise WorkerError(f'oracle worker {self.name} died or timed out '
                              f'(rc={self.process.poll()}); its stderr:\n'
                              f'{self.stderr_tail(0)}')
        return json.loads(line)

    def stderr_tail(self, start: int | None = None, limit: int = 4000) -> str:
        """What the worker wrote to stderr since the last program (or ``start``)."""
        with open(self.stderr.name, errors='replace') as f:
            f.seek(self.mark if start is None else start)
            return f.read()[-limit:]

    def close(self) -> None:
        if self.process.stdin is not None:
            self.process.stdin.close()
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
        os.unlink(self.stderr.name)


class Pair:
    def __init__(self, vanilla: Worker, ours: Worker):
        self.vanilla, self.ours = vanilla, ours

    def run(self, program: Program) -> tuple[dict[str, Any], dict[str, Any]]:
        """Both flaxes run ``program`` concurrently (the self-check: one worker)."""
        self.vanilla.send(program)
        if self.ours is self.vanilla:
            report = self.vanilla.receive()
            return report, json.loads(json.dumps(report))
        self.ours.send(program)
        return self.vanilla.receive(), self.ours.receive()

    def run_vanilla(self, program: Program) -> dict[str, Any]:
        """Vanilla alone runs ``program`` (the workaround's reference)."""
        self.vanilla.send(program)
        return self.vanilla.receive()

    def stderr(self) -> str:
        """Both workers' stderr of the last program, for a failure message."""
        workers = (self.vanilla,) if self.ours is self.vanilla else (self.vanilla, self.ours)
        return ''.join(f'\n--- {w.name} worker stderr ---\n{tail}'
                       for w in workers if (tail := w.stderr_tail()).strip())


def expected_versions() -> tuple[str, str]:
    """``flax.__version__`` of vanilla and of ours: the pin, and the pin + label."""
    pin = Project().pin()
    return pin.version, pin.version if SELF_CHECK else pin.local_version


@pytest.fixture(scope='session')
def oracle(vanilla_flax: Path) -> Iterator[Pair]:
    """ORACLE_OURS=vanilla runs vanilla as "ours" too: the harness's self-check.

    Vanilla is deterministic here (the oracle compares bit-exact digests of
    its runs with ours'), so the self-check runs each program once and judges
    that report as both sides'.
    """
    vanilla = Worker('vanilla', vanilla_flax)
    pair = Pair(vanilla, vanilla if SELF_CHECK else Worker('ours', None))
    yield pair
    pair.vanilla.close()
    if pair.ours is not vanilla:
        pair.ours.close()


def pytest_terminal_summary(terminalreporter) -> None:  # type: ignore[no-untyped-def]
    """Under pytest-xdist, the families the random programs reached, which a
    worker wrote to ``ORACLE_FAMILIES`` (its own prints are not shown)."""
    families = os.environ.get('ORACLE_FAMILIES')
    if families and os.environ.get('PYTEST_XDIST_WORKER') is None and Path(families).exists():
        terminalreporter.write_line(Path(families).read_text().strip())
