"""Benchmark the patched flax against vanilla flax 0.12.12.

The driver: it runs the same measured programs under two interpreters
(``environments.py`` makes or reuses them), case by case (``cases.py``),
then prints tables of the figures, ratios and targets (``report.py``) and
writes everything to
``build/bench/results.json`` (``results-smoke.json`` with ``--smoke``). See
``docs/benchmarks.md``.

``--ours-python`` / ``--vanilla-python`` use existing interpreters instead
of the venvs.

Usage::

    python benchmarks/run.py [--smoke] [--ours-python P --vanilla-python P]

``run_smoke(ours_python, vanilla_python)`` runs the smoke mode from Python
(for a test) and returns the results; it raises ``RuntimeError`` if a program
that must succeed fails.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from report import checks, print_report, tables
from cases import FULL, SMOKE, Config, plan, run_cases, run_instructions
from environments import BUILD, ensure_venvs, machine
# What tests/e2e/test_benchmarks_smoke.py uses of the instruction counting.
from cases import CALLGRIND, compile_marks, instructions_unavailable  # noqa: F401


def run(config: Config, ours_python: str, vanilla_python: str,
        output: Path | None = None, report: bool = True) -> dict[str, Any]:
    """Run every benchmark of ``config``; the results (also written to ``output``)."""
    start = time.perf_counter()
    # Absolute (programs run in benchmarks/) but not resolved: a venv's python
    # is a symlink to the base interpreter.
    pythons = {'ours': os.path.abspath(ours_python),
               'vanilla': os.path.abspath(vanilla_python)}
    results: dict[str, Any] = {
        'mode': config.mode,
        'date': datetime.datetime.now(datetime.timezone.utc).isoformat(timespec='seconds'),
        'machine': machine(),
        'interpreters': pythons,
        'config': asdict(config),
    }
    results.update(tables(run_cases(plan(config), pythons, config, progress=report)))
    if config.instruction_cases:
        results['instructions'] = run_instructions(pythons, config)
        if report:
            print(f'  {results["instructions"].get("seconds", 0):6.1f} s  instructions '
                  '(callgrind, both interpreters at once)', file=sys.stderr, flush=True)
    else:
        results['instructions'] = {'skipped': 'no instruction_cases in this mode'}
    results['checks'] = checks(results)
    results['elapsed_seconds'] = time.perf_counter() - start
    if output is not None:
        output.parent.mkdir(parents=True, exist_ok=True)
        output.write_text(json.dumps(results, indent=2) + '\n')
    if report:
        print_report(results)
    return results


def run_smoke(ours_python: str, vanilla_python: str) -> dict[str, Any]:
    """Smoke mode (tiny sizes, 1 repeat): checks every program executes."""
    return run(SMOKE, ours_python, vanilla_python, output=None, report=False)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--smoke', action='store_true',
                        help='tiny sizes, 1 repeat: check that everything runs')
    parser.add_argument('--ours-python', help='interpreter with our flax (skip venv-ours)')
    parser.add_argument('--vanilla-python', help='interpreter with vanilla flax 0.12.12')
    parser.add_argument('--python', default=sys.executable,
                        help='base interpreter for the venvs (Python >= 3.12)')
    parser.add_argument('--rebuild', action='store_true', help='recreate the venvs')
    parser.add_argument('--output', type=Path, help='results JSON path')
    args = parser.parse_args(argv)
    config = SMOKE if args.smoke else FULL
    ours, vanilla = args.ours_python, args.vanilla_python
    if ours is None or vanilla is None:
        built_ours, built_vanilla = ensure_venvs(args.python, args.rebuild)
        ours, vanilla = ours or built_ours, vanilla or built_vanilla
    output = args.output or BUILD / ('results-smoke.json' if args.smoke else 'results.json')
    run(config, ours, vanilla, output=output)
    print(f'wrote {output}')
    return 0


if __name__ == '__main__':
    sys.exit(main())
