"""The ``oracle`` fixture: vanilla's worker and ours (tests/support/workers.py)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Iterator

import pytest

from tests.support.workers import REPORTS, SELF_CHECK, Pair, VanillaReports, Worker, \
    expected_versions


@pytest.fixture(scope='session')
def oracle(vanilla_flax: Path) -> Iterator[Pair]:
    """ORACLE_OURS=vanilla runs vanilla as "ours" too: the harness's self-check.

    Vanilla is deterministic here (the oracle compares bit-exact digests of
    its runs with ours'), so the self-check runs each program once and judges
    that report as both sides'; with ``ORACLE_REPORTS`` it reuses the report
    the suite step kept (``VanillaReports``).
    """
    vanilla = Worker('vanilla', vanilla_flax)
    reports = None
    if REPORTS:
        reports = VanillaReports(Path(REPORTS), expected_versions()[0])
        if SELF_CHECK:
            reports.load()
    pair = Pair(vanilla, vanilla if SELF_CHECK else Worker('ours', None), reports)
    yield pair
    pair.vanilla.close()
    if pair.ours is not vanilla:
        pair.ours.close()
    if reports is not None and SELF_CHECK:
        reports.write_counts()


def pytest_terminal_summary(terminalreporter) -> None:  # type: ignore[no-untyped-def]
    """Under pytest-xdist, the families the random programs reached, which a
    worker wrote to ``ORACLE_FAMILIES`` (its own prints are not shown), and
    how many of vanilla's reports the self-check reused."""
    if os.environ.get('PYTEST_XDIST_WORKER') is not None:
        return
    families = os.environ.get('ORACLE_FAMILIES')
    if families and Path(families).exists():
        terminalreporter.write_line(Path(families).read_text().strip())
    if REPORTS and SELF_CHECK:
        folder = VanillaReports(Path(REPORTS), expected_versions()[0]).folder
        counts = [json.loads(p.read_text()) for p in folder.glob('self-check-*.json')]
        reused, fresh = (sum(c[k] for c in counts) for k in ('reused', 'fresh'))
        terminalreporter.write_line(
            f'oracle self-check: {reused} of vanilla\'s reports from the suite step '
            f'({REPORTS}), {fresh} programs run afresh')
