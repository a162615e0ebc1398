"""pytest plugin for upstream's tests and examples, run from the patched tree.

Loaded with ``-p upstream_plugin`` (this folder on PYTHONPATH) by pytest
running in the tree that ``python -m flaxpq tests-tree`` makes (no flax/, so
only the installed wheel imports):

- ``skips.txt`` beside this file lists what cannot run here, one
  ``path-or-nodeid  # reason`` a line, relative to the tree's root. A path is
  not collected (and listed with its reason at the end of the run); a node id,
  or a prefix of node ids, is reported skipped with its reason. A reason
  starting with ``xfail:`` marks the path's or node's tests strict xfail
  instead (they run; passing is an error), for what fails on vanilla flax
  too. An entry whose file is missing from the tree is an error, so the list
  cannot go stale.
- Every script of ``examples/nnx_toy_examples`` is one test (``PATH::run``),
  run unmodified in its own Python process, in its own folder, with
  matplotlib's non-interactive backend.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

SKIPS_FILE = Path(__file__).with_name('skips.txt')
SCRIPT_FOLDER = 'nnx_toy_examples'
SCRIPT_TIMEOUT = 900  # seconds


def read_skips(path: Path) -> dict[str, str]:
    """``{path-or-nodeid: reason}`` from a skip list; every entry needs a reason."""
    skips = {}
    for number, line in enumerate(path.read_text().splitlines(), 1):
        entry, _, reason = line.partition('#')
        if not entry.strip():
            continue
        if not reason.strip():
            raise pytest.UsageError(f'{path}:{number}: {entry.strip()} has no # reason')
        skips[entry.strip()] = reason.strip()
    return skips


SKIPS = read_skips(SKIPS_FILE)
XFAIL = 'xfail:'
SKIPPED_PATHS = {entry: reason for entry, reason in SKIPS.items()
                 if '::' not in entry and not reason.startswith(XFAIL)}
MARKED = {entry: reason for entry, reason in SKIPS.items() if entry not in SKIPPED_PATHS}


def pytest_configure(config: pytest.Config) -> None:
    missing = [entry for entry in SKIPS
               if not (config.rootpath / entry.split('::')[0]).exists()]
    if missing:
        raise pytest.UsageError(f'{SKIPS_FILE}: not in {config.rootpath}: {missing}')


def _relative(path: Path, config: pytest.Config) -> str:
    return path.relative_to(config.rootpath).as_posix()


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    return True if _relative(collection_path, config) in SKIPPED_PATHS else None


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        for entry, reason in MARKED.items():
            if item.nodeid == entry or item.nodeid.startswith((entry + '::', entry + '[')):
                item.add_marker(
                    pytest.mark.xfail(reason=reason, strict=True)
                    if reason.startswith(XFAIL) else pytest.mark.skip(reason=reason))


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter,
                            config: pytest.Config) -> None:
    arguments = [Path(a.split('::')[0]).resolve() for a in config.args]
    ignored = [(entry, reason) for entry, reason in SKIPPED_PATHS.items()
               if any((config.rootpath / entry).is_relative_to(a) for a in arguments)]
    if ignored:
        terminalreporter.section(f'not collected ({SKIPS_FILE.name})')
        for entry, reason in ignored:
            terminalreporter.line(f'{entry}  # {reason}')


def is_script(path: Path) -> bool:
    return path.suffix == '.py' and path.parent.name == SCRIPT_FOLDER


def pytest_collect_file(file_path: Path, parent: pytest.Collector) -> pytest.File | None:
    # A script named on the command line comes through pytest_pycollect_makemodule.
    if is_script(file_path) and not parent.session.isinitpath(file_path):
        return ScriptFile.from_parent(parent, path=file_path)
    return None


def pytest_pycollect_makemodule(module_path: Path, parent: pytest.Collector) -> pytest.File | None:
    return ScriptFile.from_parent(parent, path=module_path) if is_script(module_path) else None


class ScriptFile(pytest.File):
    """An example script: one test that runs it."""

    def collect(self) -> list[pytest.Item]:
        return [ScriptRun.from_parent(self, name='run')]


class ScriptFailed(Exception):
    """The script exited non-zero (or timed out)."""


class ScriptRun(pytest.Item):
    def runtest(self) -> None:
        env = {**os.environ, 'MPLBACKEND': 'Agg'}
        try:
            result = subprocess.run(
                [sys.executable, self.path.name], cwd=self.path.parent, env=env,
                capture_output=True, text=True, timeout=SCRIPT_TIMEOUT)
        except subprocess.TimeoutExpired as e:
            raise ScriptFailed(f'timed out after {SCRIPT_TIMEOUT} s') from e
        if result.returncode:
            raise ScriptFailed(f'exit {result.returncode}\n{result.stderr[-4000:]}')

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException],
                     style: str | None = None) -> str:
        if isinstance(excinfo.value, ScriptFailed):
            return f'{self.path.name}: {excinfo.value}'
        return super().repr_failure(excinfo, style=style)

    def reportinfo(self) -> tuple[Path, int | None, str]:
        return self.path, None, f'python {self.path.name}'
