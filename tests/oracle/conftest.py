"""Two live workers, vanilla flax and ours, each running programs on request."""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
from pathlib import Path
from typing import Any, Iterator

import pytest

from flaxpq.project import REPO_ROOT
from tests.oracle.programs import Program

TIMEOUT = 300.0


class Worker:
    """``python -m tests.oracle.runner`` with ``site`` (if any) first on PYTHONPATH."""

    def __init__(self, site: Path | None):
        path = [str(REPO_ROOT)] if site is None else [str(site), str(REPO_ROOT)]
        env = {**os.environ, 'PYTHONPATH': os.pathsep.join(path)}
        self.process = subprocess.Popen(
            [sys.executable, '-m', 'tests.oracle.runner'], env=env, text=True,
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)

    def send(self, program: Program) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(program.to_json() + '\n')
        self.process.stdin.flush()

    def receive(self) -> dict[str, Any]:
        assert self.process.stdout is not None
        ready, _, _ = select.select([self.process.stdout], [], [], TIMEOUT)
        line = self.process.stdout.readline() if ready else ''
        if not line:
            raise RuntimeError(f'oracle worker died or timed out (rc={self.process.poll()})')
        return json.loads(line)

    def close(self) -> None:
        if self.process.stdin is not None:
            self.process.stdin.close()
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()


class Pair:
    def __init__(self, vanilla: Worker, ours: Worker):
        self.vanilla, self.ours = vanilla, ours

    def run(self, program: Program) -> tuple[dict[str, Any], dict[str, Any]]:
        """Both flaxes run ``program`` concurrently."""
        self.vanilla.send(program)
        self.ours.send(program)
        return self.vanilla.receive(), self.ours.receive()


@pytest.fixture(scope='session')
def oracle(vanilla_flax: Path) -> Iterator[Pair]:
    """ORACLE_OURS=vanilla runs vanilla as "ours" too: the harness's self-check."""
    ours_site = vanilla_flax if os.environ.get('ORACLE_OURS') == 'vanilla' else None
    pair = Pair(Worker(vanilla_flax), Worker(ours_site))
    yield pair
    pair.vanilla.close()
    pair.ours.close()
