"""A stacked-layer train step on whatever devices JAX sees, ours vs vanilla.

Runs ``train_step_program.py`` three times, one process at a time (one
process holds an accelerator): our flax with the code as written, vanilla
flax 0.12.12 with its documented workaround
(``transform_metadata={nnx.PARTITION_NAME: None}``), and vanilla with the code
as written. Prints the step's tracing and lowering time and XLA compile time
(ahead of time), the first step's time after that, the median
step time and the peak device memory (where ``device.memory_stats()`` reports
one; the CPU does not) of each, their ratios against vanilla with the
workaround, and whether the losses agree; writes everything to
``build/bench/train-step.json`` (``train-step-small.json`` with ``--size
small``). See ``docs/benchmarks.md``.

Usage::

    python benchmarks/train_step.py [--size full|small]
        [--ours-python P --vanilla-python P] [--output F]

Without ``--ours-python``/``--vanilla-python`` the interpreters are the
venvs of ``benchmarks/run.py`` (``environments.py``). The programs inherit
the environment: ``JAX_PLATFORMS``/``XLA_FLAGS`` choose the devices.
``run_train_step(ours, vanilla, size)`` does the same from Python (the smoke
test) and returns the results.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

BENCH_DIR = Path(__file__).resolve().parent
PROGRAM = BENCH_DIR / 'train_step_program.py'
OUTPUT_DIR = BENCH_DIR.parent / 'build' / 'bench'
PROGRAM_TIMEOUT = 1200
BASELINE = 'vanilla+workaround'
# (label, interpreter key, variant), in the order they run.
RUNS = (
    ('ours', 'ours', 'plain'),
    (BASELINE, 'vanilla', 'workaround'),
    ('vanilla as written', 'vanilla', 'plain'),
)
# Vanilla as written may raise (google/flax#5112); the others must not.
MAY_FAIL = {'vanilla as written'}
# Relative tolerance for "losses agree": the same program on the same devices
# gives the same losses; the tolerance only forgives reordered reductions.
LOSS_RTOL = 1e-5


def run_program(python: str, variant: str, size: str) -> dict[str, Any]:
    """One case in its own process: the program's JSON line, or an error."""
    command = [python, str(PROGRAM), '--variant', variant, '--size', size]
    try:
        done = subprocess.run(command, capture_output=True, text=True, cwd=BENCH_DIR,
                              timeout=PROGRAM_TIMEOUT)
    except subprocess.TimeoutExpired:
        return {'ok': False, 'error': f'timed out after {PROGRAM_TIMEOUT} s'}
    lines = [line for line in done.stdout.splitlines() if line.startswith('{')]
    if done.returncode != 0 or not lines:
        return {'ok': False, 'error': f'exit {done.returncode}: {done.stderr[-1500:]}'}
    return json.loads(lines[-1])


def losses_agree(a: list[float], b: list[float]) -> bool:
    """Same number of losses, each within ``LOSS_RTOL`` of the other's."""
    return len(a) == len(b) and all(
        math.isclose(x, y, rel_tol=LOSS_RTOL, abs_tol=0.0) for x, y in zip(a, b))


def ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def compare(results: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Each run against the baseline: ratios (run / baseline) and loss agreement."""
    base = results[BASELINE]
    comparisons = {}
    for label, result in results.items():
        if label == BASELINE or not (result.get('ok') and base.get('ok')):
            continue
        comparisons[label] = {
            'lower': ratio(result['lower_seconds'], base['lower_seconds']),
            'compile': ratio(result['compile_seconds'], base['compile_seconds']),
            'first_step': ratio(result['first_step_seconds'], base['first_step_seconds']),
            'median_step': ratio(result['median_step_seconds'], base['median_step_seconds']),
            'peak_memory': ratio(result['peak_memory_bytes'], base['peak_memory_bytes']),
            'losses_agree': losses_agree(result['losses'], base['losses']),
            'losses_identical': result['losses'] == base['losses'],
        }
    return comparisons


def run_train_step(ours_python: str, vanilla_python: str, size: str = 'full',
                   progress: bool = False) -> dict[str, Any]:
    """Every run of ``RUNS``; raises ``RuntimeError`` if one that must succeed fails."""
    start = time.perf_counter()
    pythons = {'ours': os.path.abspath(ours_python),
               'vanilla': os.path.abspath(vanilla_python)}
    results: dict[str, dict[str, Any]] = {}
    for label, key, variant in RUNS:
        case_start = time.perf_counter()
        results[label] = run_program(pythons[key], variant, size)
        if progress:
            print(f'  {time.perf_counter() - case_start:6.1f} s  {label}', file=sys.stderr,
                  flush=True)
    failed = {label: result.get('error') for label, result in results.items()
              if not result.get('ok') and label not in MAY_FAIL}
    if failed:
        raise RuntimeError(f'train-step runs failed: {failed}')
    return {
        'size': size,
        'date': datetime.datetime.now(datetime.timezone.utc).isoformat(timespec='seconds'),
        'interpreters': pythons,
        'runs': results,
        'against_baseline': compare(results),
        'elapsed_seconds': time.perf_counter() - start,
    }


def _seconds(value: float | None) -> str:
    return '-' if value is None else f'{value:.4f}'


def _ratio(value: float | None) -> str:
    return '-' if value is None else f'{value:.3f}'


def print_report(report: dict[str, Any]) -> None:
    """The figures of each run, then the ratios against the baseline."""
    base = report['runs'][BASELINE]
    print(f"train step ({report['size']}): {base.get('layers')} layers, width "
          f"{base.get('width')}, ffn {base.get('ffn')}, {base.get('tokens')} tokens, "
          f"Adam; {base.get('device_count')} x {base.get('device_kind')} "
          f"({base.get('platform')}), mesh (fsdp, tensor) = {base.get('mesh_shape')}")
    print(f"{'run':<22} {'lower s':>8} {'compile s':>9} {'first step s':>12} "
          f"{'median step s':>13} {'peak bytes':>14}  {'last loss':>10}  kernel sharding")
    for label, result in report['runs'].items():
        if not result.get('ok'):
            print(f'{label:<22} failed: {result.get("error")}')
            continue
        peak = result['peak_memory_bytes']
        print(f"{label:<22} {_seconds(result['lower_seconds']):>8} "
              f"{_seconds(result['compile_seconds']):>9} "
              f"{_seconds(result['first_step_seconds']):>12} "
              f"{_seconds(result['median_step_seconds']):>13} "
              f"{'-' if peak is None else f'{peak:,}':>14}  {result['losses'][-1]:>10.6g}  "
              f"{result['kernel_sharding']}")
    print(f'ratios against {BASELINE} (run / {BASELINE}):')
    for label, entry in report['against_baseline'].items():
        print(f"  {label:<20} lower {_ratio(entry['lower'])}, compile "
              f"{_ratio(entry['compile'])}, first step {_ratio(entry['first_step'])}, median step "
              f"{_ratio(entry['median_step'])}, peak memory {_ratio(entry['peak_memory'])}, "
              f"losses agree: {entry['losses_agree']} "
              f"(identical: {entry['losses_identical']})")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--size', choices=('full', 'small'), default='full',
                        help='full: 16 x (1024 -> 4096) layers; small: a CPU smoke run')
    parser.add_argument('--ours-python', help='interpreter with our flax')
    parser.add_argument('--vanilla-python', help='interpreter with vanilla flax 0.12.12')
    parser.add_argument('--python', default=sys.executable,
                        help='base interpreter for the venvs of benchmarks/run.py')
    parser.add_argument('--output', type=Path, help='results JSON path')
    args = parser.parse_args(argv)
    ours, vanilla = args.ours_python, args.vanilla_python
    if ours is None or vanilla is None:
        sys.path.insert(0, str(BENCH_DIR))
        from environments import ensure_venvs
        built_ours, built_vanilla = ensure_venvs(args.python)
        ours, vanilla = ours or built_ours, vanilla or built_vanilla
    report = run_train_step(ours, vanilla, args.size, progress=True)
    suffix = '' if args.size == 'full' else f'-{args.size}'
    output = args.output or OUTPUT_DIR / f'train-step{suffix}.json'
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(json.dumps(report, indent=2) + '\n')
    print_report(report)
    print(f'wrote {output}')
    return 0


if __name__ == '__main__':
    sys.exit(main())
