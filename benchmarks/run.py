"""Benchmark the patched flax against vanilla flax 0.12.12.

The driver: it runs the same measured programs under two interpreters
(``environments.py`` makes or reuses them), case by case (``cases.py``),
section by section (memory, collectives, overhead, scaling with the number
of Variables, instruction counts, one traced call a case). As each section completes, its table is
printed and the results so far are written to ``build/bench/results.json``
(``results-smoke.json`` with ``--smoke``); a section that fails or runs past
``--program-timeout`` stops the run, which says which section and keeps the
figures of those before it. At the end come the figures' targets
(``report.py``). See ``docs/benchmarks.md``.

``--ours-python`` / ``--vanilla-python`` use existing interpreters instead
of the venvs; ``--ours-pythonpath`` / ``--vanilla-pythonpath`` put a folder
first on their ``PYTHONPATH`` (``--vanilla-registry``: the registry's wheel,
unpacked). ``--sections`` runs only the sections named, ``--calls`` only
those cases of the calls section.

Usage::

    python benchmarks/run.py [--smoke] [--ours-python P --vanilla-python P]
                             [--program-timeout SECONDS] [--sections S,...]
                             [--calls CASE|tree|recording|all,...]
                             [--call-processes N] [--call-workers N]
                             [--ours-pythonpath DIR]
                             [--vanilla-pythonpath DIR | --vanilla-registry]

``run_smoke(ours_python, vanilla_python)`` runs the smoke mode from Python
(for a test) and returns the results; it raises ``RuntimeError`` if a program
that must succeed fails.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from report import checks, print_header, print_report, print_section, tables
from cases import (CALL_CASES, FULL, PROGRAM_TIMEOUT, RECORDING_CALLS, SMOKE, TREE_CALLS, Case,
                   Config, run_call_instructions, run_cases, run_instructions, sections)
from environments import BUILD, ensure_venvs, machine, registry_flax, with_pythonpath
# What tests/e2e/test_benchmarks_smoke.py uses of the instruction counting.
from cases import CALLGRIND, compile_marks, instructions_unavailable  # noqa: F401

# One section of a run: its name and what measures it, returning the keys it
# adds to the results.
Section = tuple[str, Callable[[], dict[str, Any]]]


class SectionFailed(RuntimeError):
    """A section raised or timed out; the results keep the sections before it."""

    def __init__(self, section: str, error: BaseException) -> None:
        super().__init__(f'section {section} failed: {type(error).__name__}: {error}')
        self.section = section


def measure_sections(steps: list[Section], results: dict[str, Any],
                     output: Path | None, report: bool) -> None:
    """Run ``steps`` in order, adding each one's figures to ``results``.

    After each, ``results`` (with ``sections_done``) is written to ``output``
    and, with ``report``, the section's table printed. When one raises (a
    program's ``subprocess.TimeoutExpired`` too), ``results`` is written with
    ``failed`` naming it, the figures so far are printed, and
    :class:`SectionFailed` raised.
    """
    results.setdefault('sections_done', [])
    for name, measure in steps:
        start = time.perf_counter()
        try:
            results.update(measure())
        except Exception as error:
            failure = SectionFailed(name, error)
            results['failed'] = {'section': name, 'error': str(failure),
                                 'seconds': time.perf_counter() - start}
            write(results, output)
            if report:
                print(f'\n== {failure} after {time.perf_counter() - start:.0f} s; '
                      f'the figures of the sections before it '
                      f'({", ".join(results["sections_done"]) or "none"}):', flush=True)
                for done in results['sections_done']:
                    print_section(done, results)
                if output is not None:
                    print(f'saved in {output}', flush=True)
            raise failure from error
        results['sections_done'].append(name)
        write(results, output)
        if report:
            print(f'\n== section {name}: done in {time.perf_counter() - start:.0f} s'
                  + (f', saved in {output}' if output is not None else ''))
            print_section(name, results)
            sys.stdout.flush()


def write(results: dict[str, Any], output: Path | None) -> None:
    if output is not None:
        output.parent.mkdir(parents=True, exist_ok=True)
        output.write_text(json.dumps(results, indent=2) + '\n')


def run(config: Config, ours_python: str, vanilla_python: str,
        output: Path | None = None, report: bool = True,
        only: set[str] | None = None) -> dict[str, Any]:
    """Run every benchmark of ``config`` (of the sections in ``only``, if
    given); the results (also written to ``output``, section by section).
    :class:`SectionFailed` if one fails."""
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
        'config': dataclasses.asdict(config),
    }
    if report:
        print_header(results)
    measured: dict[Case, dict[str, Any]] = {}

    def programs(cases: list[Case]) -> Callable[[], dict[str, Any]]:
        def measure() -> dict[str, Any]:
            measured.update(run_cases(cases, pythons, config, progress=report))
            return tables(measured)
        return measure

    def instructions() -> dict[str, Any]:
        if not config.instruction_cases:
            return {'instructions': {'skipped': 'no instruction_cases in this mode'}}
        counted = run_instructions(pythons, config)
        if report:
            print(f'  {counted.get("seconds", 0):6.1f} s  instructions '
                  '(callgrind, both interpreters at once)', file=sys.stderr, flush=True)
        return {'instructions': counted}

    def calls() -> dict[str, Any]:
        if not config.call_cases:
            return {'calls': {'skipped': 'no call_cases in this mode'}}
        return {'calls': run_call_instructions(pythons, config, progress=report)}

    steps: list[Section] = [*((name, programs(cases)) for name, cases in sections(config)),
                            ('instructions', instructions), ('calls', calls)]
    if only is not None:
        steps = [step for step in steps if step[0] in only]
    measure_sections(steps, results, output, report)
    results['checks'] = checks(results)
    results['elapsed_seconds'] = time.perf_counter() - start
    write(results, output)
    if report:
        print_report(results)
    return results


def run_smoke(ours_python: str, vanilla_python: str) -> dict[str, Any]:
    """Smoke mode (tiny sizes, 1 repeat): checks every program executes."""
    return run(SMOKE, ours_python, vanilla_python, output=None, report=False)


def call_cases(text: str) -> tuple[str, ...]:
    """``--calls``: case names, or the groups ``tree``, ``recording``, ``all``."""
    groups = {'tree': TREE_CALLS, 'recording': RECORDING_CALLS, 'all': CALL_CASES}
    return tuple(case for item in text.split(',') for case in groups.get(item, (item,)))


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
    parser.add_argument('--program-timeout', type=int, default=PROGRAM_TIMEOUT,
                        help='seconds one measured program may run (the instruction '
                             f'counts: this per case they count; default {PROGRAM_TIMEOUT})')
    parser.add_argument('--sections', type=lambda text: set(text.split(',')),
                        help='run only these sections (comma-separated: memory, collectives, '
                             'overhead, variable_scaling, programs, instructions, calls)')
    parser.add_argument('--calls', type=call_cases,
                        help='the calls section\'s cases: comma-separated kind:LxV[:bN] '
                             'or tree, recording, all (default all)')
    parser.add_argument('--call-processes', type=int,
                        help=f'processes a run of the calls (default {FULL.call_processes})')
    parser.add_argument('--call-workers', type=int,
                        help='processes of the calls at once (default '
                             f'{FULL.call_workers}; each holds about 1.4 GB under valgrind)')
    parser.add_argument('--ours-pythonpath',
                        help='put this first on PYTHONPATH of ours (a flax source tree)')
    parser.add_argument('--vanilla-pythonpath',
                        help='put this first on PYTHONPATH of vanilla (an unpacked wheel)')
    parser.add_argument('--vanilla-registry', action='store_true',
                        help="vanilla: the registry's flax 0.12.12 wheel unpacked first on "
                             'PYTHONPATH of --vanilla-python, else of the ours interpreter')
    args = parser.parse_args(argv)
    config = dataclasses.replace(SMOKE if args.smoke else FULL,
                                 program_timeout=args.program_timeout)
    if args.calls is not None:
        config = dataclasses.replace(config, call_cases=args.calls)
    if args.call_processes is not None:
        config = dataclasses.replace(config, call_processes=args.call_processes)
    if args.call_workers is not None:
        config = dataclasses.replace(config, call_workers=args.call_workers)
    ours, vanilla = args.ours_python, args.vanilla_python
    if args.vanilla_registry and vanilla is None:
        vanilla = ours
    if ours is None or vanilla is None:
        built_ours, built_vanilla = ensure_venvs(args.python, args.rebuild)
        ours, vanilla = ours or built_ours, vanilla or built_vanilla
    vanilla_path = args.vanilla_pythonpath
    if args.vanilla_registry:
        vanilla_path = str(registry_flax(vanilla))
    if args.ours_pythonpath:
        ours = with_pythonpath(ours, args.ours_pythonpath, 'ours')
    if vanilla_path:
        vanilla = with_pythonpath(vanilla, vanilla_path, 'vanilla')
    output = args.output or BUILD / ('results-smoke.json' if args.smoke else 'results.json')
    try:
        run(config, ours, vanilla, output=output, only=args.sections)
    except SectionFailed:
        return 1
    print(f'wrote {output}')
    return 0


if __name__ == '__main__':
    sys.exit(main())
