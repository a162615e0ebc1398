"""The oracle's two live workers, vanilla flax and ours, each running programs on request.

``Pair`` runs one ``Program`` on both (``tests.oracle.runner`` in each
worker); ``VanillaReports`` keeps vanilla's reports from the suite step for
the self-check (``ORACLE_OURS=vanilla``). The ``oracle`` fixture of
tests/oracle/conftest.py starts them.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import os
import select
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from flaxpq.project import REPO_ROOT, Project
from tests.oracle.programs import Program
from tests.support.devices import without_count_override
from tests.oracle.reports import Report

TIMEOUT = 300.0
SELF_CHECK = os.environ.get('ORACLE_OURS') == 'vanilla'
REPORTS = os.environ.get('ORACLE_REPORTS')  # vanilla's reports, kept for the self-check


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
        # The runner simulates 8 CPU devices itself (XLA_FLAGS); a count
        # override of the test run (make test-1dev) would leave it 1.
        env = {**without_count_override(), 'PYTHONPATH': os.pathsep.join(path)}
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


class VanillaReports:
    """Vanilla's reports by program, kept from the suite step to the self-check.

    In ``make test`` the suite step (vanilla vs ours) writes each report
    vanilla's worker gives into the ``ORACLE_REPORTS`` folder, and the
    self-check judges those as both sides' instead of running the same
    programs on vanilla again: vanilla is deterministic here (the oracle
    compares bit-exact digests). A program not found runs afresh. The
    reports sit under a fingerprint of the sources of tests/oracle and
    tests/support, jax's version and the device flags, so a changed runner,
    probe or scenario never reads old ones.
    """

    def __init__(self, folder: Path, vanilla_version: str):
        digest = hashlib.sha256()
        sources = [*(REPO_ROOT / 'tests' / 'oracle').rglob('*.py'),
                   *Path(__file__).parent.rglob('*.py')]  # the runner's and the scenarios'
        for source in sorted(sources):
            digest.update(source.relative_to(REPO_ROOT).as_posix().encode())
            digest.update(source.read_bytes())
        digest.update('\0'.join([vanilla_version, importlib.metadata.version('jax'),
                                  os.environ.get('XLA_FLAGS', '')]).encode())
        self.folder = folder / digest.hexdigest()[:16]
        self.worker = os.environ.get('PYTEST_XDIST_WORKER', 'main')
        self.reports: dict[str, dict[str, Any]] = {}
        self.reused = self.fresh = 0

    @staticmethod
    def key(program: Program) -> str:
        return hashlib.sha256(program.to_json().encode()).hexdigest()

    def load(self) -> None:
        for path in sorted(self.folder.glob('reports-*.jsonl')):
            for line in path.read_text().splitlines():
                entry = json.loads(line)
                self.reports[entry['key']] = entry['report']

    def get(self, program: Program) -> Report | None:
        report = self.reports.get(self.key(program))
        if report is None:
            self.fresh += 1
            return None
        self.reused += 1
        return Report.from_json(report)

    def add(self, program: Program, report: Report) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        with open(self.folder / f'reports-{self.worker}.jsonl', 'a') as f:
            f.write(json.dumps({'key': self.key(program), 'report': report.to_json()}) + '\n')

    def write_counts(self) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        (self.folder / f'self-check-{self.worker}.json').write_text(
            json.dumps({'reused': self.reused, 'fresh': self.fresh}))


class Pair:
    def __init__(self, vanilla: Worker, ours: Worker,
                 reports: VanillaReports | None = None):
        self.vanilla, self.ours = vanilla, ours
        self.reports = reports
        self.reused = False  # the last vanilla report came from ``reports``

    def run(self, program: Program) -> tuple[Report, Report]:
        """Both flaxes run ``program`` concurrently (the self-check: one worker)."""
        if self.ours is self.vanilla:
            report = self.run_vanilla(program)
            return report, Report.from_json(report.to_json())
        self.reused = False
        self.vanilla.send(program)
        self.ours.send(program)
        vanilla = Report.from_json(self.vanilla.receive())
        ours = Report.from_json(self.ours.receive())
        if self.reports is not None:
            self.reports.add(program, vanilla)
        return vanilla, ours

    def run_vanilla(self, program: Program) -> Report:
        """Vanilla alone runs ``program`` (the workaround's reference)."""
        report = self.reports.get(program) if SELF_CHECK and self.reports else None
        self.reused = report is not None
        if report is None:
            self.vanilla.send(program)
            report = Report.from_json(self.vanilla.receive())
            if self.reports is not None and not SELF_CHECK:
                self.reports.add(program, report)
        return report

    def stderr(self) -> str:
        """Both workers' stderr of the last program, for a failure message."""
        if self.reused:
            return '\n(vanilla\'s report of the suite step, ORACLE_REPORTS: no stderr)'
        workers = (self.vanilla,) if self.ours is self.vanilla else (self.vanilla, self.ours)
        return ''.join(f'\n--- {w.name} worker stderr ---\n{tail}'
                       for w in workers if (tail := w.stderr_tail()).strip())


def expected_versions() -> tuple[str, str]:
    """``flax.__version__`` of vanilla and of ours: the pin, and the pin + label."""
    pin = Project().pin()
    return pin.version, pin.version if SELF_CHECK else pin.local_version
