"""Results computed once per test run and shared by its pytest-xdist workers.

A module-scoped fixture runs once per worker that runs a test of its module;
with 2 workers both often do, so a fixture that costs a minute of CPU (a
program on vanilla and on ours) costs two. ``computed_once`` runs it once:
the first worker to ask computes it and writes it as JSON beside the workers'
temporary folders; the others wait on a lock and read it.
"""

from __future__ import annotations

import fcntl
import json
import os
from collections.abc import Callable
from typing import Any

import pytest


def computed_once(name: str, compute: Callable[[], Any],
                  tmp_path_factory: pytest.TempPathFactory) -> Any:
    """``compute()`` once per test run (a JSON-able value), shared by its workers.

    What ``compute`` raises (a failure, ``pytest.skip``) is raised in the
    worker that called it, and the next worker to ask computes afresh.
    """
    folder = tmp_path_factory.getbasetemp()
    if os.environ.get('PYTEST_XDIST_WORKER'):
        folder = folder.parent  # the run's folder, above each worker's own
    result = folder / f'shared-{name}.json'
    with open(folder / f'shared-{name}.lock', 'w') as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if result.exists():
            return json.loads(result.read_text())
        value = compute()
        result.write_text(json.dumps(value))
        return value
