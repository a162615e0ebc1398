"""Benchmark the patched flax against vanilla flax 0.12.12.

Runs the same measured programs (``memory.py``, ``collectives.py``,
``overhead.py``; each prints one JSON line per case) as subprocesses under two
interpreters, on 8 simulated CPU devices, prints tables of the figures and
ratios, and writes everything to ``build/bench/results.json``
(``results-smoke.json`` with ``--smoke``). The full mode runs every case in
its own process, one at a time, ours and vanilla alternating; the smoke mode
runs all cases of an interpreter in one ``batch.py`` process, both
interpreters at once. See ``docs/benchmarks.md``.

By default the interpreters are two venvs under ``build/bench/``, created on
first use and reused afterwards (``--rebuild`` recreates them):

- ``venv-ours``: ``pip install <repo>`` (our patched flax, with its deps);
- ``venv-vanilla``: ``flax==0.12.12`` from the registry, with the same jax,
  jaxlib and optax versions as ``venv-ours``.

``--ours-python`` / ``--vanilla-python`` use existing interpreters instead.

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
import shutil
import subprocess
import sys
import time
import statistics
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

BENCH_DIR = Path(__file__).resolve().parent
REPO = BENCH_DIR.parent
BUILD = REPO / 'build' / 'bench'
VANILLA_FLAX = 'flax==0.12.12'
SHARED_DEPS = ('jax', 'jaxlib', 'optax')
PROGRAM_TIMEOUT = 1800

# (label, interpreter key, variant). Vanilla without the workaround may raise;
# every other run must succeed.
RUNS = (
    ('ours', 'ours', 'plain'),
    ('ours+workaround', 'ours', 'workaround'),
    ('vanilla+workaround', 'vanilla', 'workaround'),
    ('vanilla (no workaround)', 'vanilla', 'plain'),
)
MAY_FAIL = {'vanilla (no workaround)'}
OVERHEAD_RUNS = (('ours', 'ours', 'plain'), ('vanilla+workaround', 'vanilla', 'workaround'))
TIMINGS = ('create', 'scan_trace', 'scan_compile', 'scan_total', 'optimizer')
TARGETS = {'create': 1.03, 'scan_trace': 1.03, 'scan_total': 1.03, 'optimizer': 1.00}


@dataclass(frozen=True)
class Config:
    """Sizes of one benchmark mode."""

    mode: str
    layers: int            # memory and collectives (divisible by 4: vanilla runs)
    width: int
    indivisible_layers: int | None  # vanilla without workaround, expected to raise
    overhead_layers: int   # the headline overhead figures
    overhead_width: int
    scaling_layers: tuple[int, ...]
    repeats: int           # timed runs per overhead process
    rounds: int            # overhead processes per run and L, ours/vanilla alternating
    warmup: int
    one_process_per_case: bool  # else one process per interpreter (batch.py)
    workers: int           # programs run at once (timings need 1)


FULL = Config(mode='full', layers=8, width=512, indivisible_layers=6,
              overhead_layers=64, overhead_width=64, scaling_layers=(8, 32, 128),
              repeats=4, rounds=2, warmup=1, one_process_per_case=True, workers=1)
SMOKE = Config(mode='smoke', layers=4, width=16, indivisible_layers=None,
               overhead_layers=4, overhead_width=16, scaling_layers=(2, 4),
               repeats=1, rounds=1, warmup=0, one_process_per_case=False, workers=2)

# -- interpreters -----------------------------------------------------------

def _pip(python: Path, *args: str) -> None:
    subprocess.run([str(python), '-m', 'pip', 'install', '--quiet', *args], check=True)


def _make_venv(base_python: str, path: Path, rebuild: bool) -> tuple[Path, bool]:
    """``(python, ready)``: the venv's interpreter and whether it is usable as is."""
    python = path / 'bin' / 'python'
    if rebuild and path.exists():
        shutil.rmtree(path)
    if (path / '.ready').exists():
        return python, True
    subprocess.run([base_python, '-m', 'venv', '--clear', str(path)], check=True)
    return python, False


def package_versions(python: Path | str, names: tuple[str, ...]) -> dict[str, str]:
    """Installed versions of ``names`` in ``python``'s environment."""
    code = ('import json, sys; from importlib.metadata import version; '
            'print(json.dumps({n: version(n) for n in sys.argv[1:]}))')
    output = subprocess.run([str(python), '-c', code, *names], check=True,
                            capture_output=True, text=True).stdout
    return json.loads(output)


def ensure_venvs(base_python: str, rebuild: bool = False) -> tuple[str, str]:
    """Create (or reuse) ``build/bench/venv-ours`` and ``venv-vanilla``."""
    BUILD.mkdir(parents=True, exist_ok=True)
    ours, ready = _make_venv(base_python, BUILD / 'venv-ours', rebuild)
    if not ready:
        print(f'building venv-ours: pip install {REPO}', flush=True)
        _pip(ours, str(REPO))
        (BUILD / 'venv-ours' / '.ready').touch()
    vanilla, ready = _make_venv(base_python, BUILD / 'venv-vanilla', rebuild)
    if not ready:
        pins = [f'{name}=={version}'
                for name, version in package_versions(ours, SHARED_DEPS).items()]
        print(f'building venv-vanilla: pip install {VANILLA_FLAX} {" ".join(pins)}',
              flush=True)
        _pip(vanilla, VANILLA_FLAX, *pins)
        (BUILD / 'venv-vanilla' / '.ready').touch()
    return str(ours), str(vanilla)


# -- running programs -------------------------------------------------------

@dataclass(frozen=True)
class Case:
    """One measurement: a program, a labelled run (interpreter + variant), L."""

    program: str
    label: str
    layers: int
    round: int = 0

    @property
    def interpreter(self) -> str:
        return LABELS[self.label][0]

    @property
    def variant(self) -> str:
        return LABELS[self.label][1]


LABELS = {label: (key, variant) for label, key, variant in RUNS}


def plan(config: Config) -> list[Case]:
    """Every case of ``config``, in the order they run."""
    cases = [Case('memory', label, config.layers) for label, _, _ in RUNS]
    if config.indivisible_layers is not None:
        cases.append(Case('memory', 'vanilla (no workaround)', config.indivisible_layers))
    cases += [Case('collectives', label, config.layers) for label, _, _ in RUNS]
    for layers in sorted({config.overhead_layers, *config.scaling_layers}):
        cases += [Case('overhead', label, layers, round_)
                  for round_ in range(config.rounds) for label, _, _ in OVERHEAD_RUNS]
    return cases


def program_options(program: str, config: Config) -> dict[str, Any]:
    if program == 'overhead':
        return {'width': config.overhead_width, 'repeats': config.repeats,
                'warmup': config.warmup}
    return {'width': config.width}


def run_program(python: str, program: str, **options: Any) -> list[dict[str, Any]]:
    """Run ``benchmarks/<program>.py`` under ``python``; its JSON lines."""
    env = dict(os.environ, JAX_PLATFORMS='cpu',
               XLA_FLAGS='--xla_force_host_platform_device_count=8')
    command = [python, str(BENCH_DIR / f'{program}.py')]
    for name, value in options.items():
        command += [f'--{name.replace("_", "-")}', str(value)]
    completed = subprocess.run(command, env=env, cwd=BENCH_DIR, capture_output=True,
                               text=True, timeout=PROGRAM_TIMEOUT)
    lines = [line for line in completed.stdout.splitlines() if line.startswith('{')]
    if completed.returncode != 0 or not lines:
        raise RuntimeError(f'{" ".join(command)} exited {completed.returncode}:\n'
                           f'{completed.stderr[-3000:]}')
    return [json.loads(line) for line in lines]


def run_cases(cases: list[Case], pythons: dict[str, str], config: Config,
              progress: bool = False) -> dict[Case, dict[str, Any]]:
    """Run ``cases`` (grouped into processes per ``config``); result per case."""
    if config.one_process_per_case:
        groups = [[case] for case in cases]
    else:
        by_interpreter: dict[str, list[Case]] = {}
        for case in cases:
            by_interpreter.setdefault(case.interpreter, []).append(case)
        groups = list(by_interpreter.values())

    def run_group(group: list[Case]) -> list[dict[str, Any]]:
        start = time.perf_counter()
        python = pythons[group[0].interpreter]
        if len(group) == 1:
            case = group[0]
            output = run_program(python, case.program, cases=f'{case.variant}:{case.layers}',
                                 **program_options(case.program, config))
        else:
            spec = ','.join(f'{case.program}:{case.variant}:{case.layers}' for case in group)
            output = run_program(python, 'batch', cases=spec, width=config.width,
                                 overhead_width=config.overhead_width,
                                 repeats=config.repeats, warmup=config.warmup)
        if progress:
            names = ', '.join(f'{case.program} {case.label} L={case.layers}' for case in group)
            print(f'  {time.perf_counter() - start:6.1f} s  {names}', file=sys.stderr,
                  flush=True)
        return output

    with ThreadPoolExecutor(max_workers=config.workers) as pool:
        outputs = list(pool.map(run_group, groups))
    results: dict[Case, dict[str, Any]] = {}
    for group, output in zip(groups, outputs):
        for case, result in zip(group, output, strict=True):
            if not result['ok'] and case.label not in MAY_FAIL:
                raise RuntimeError(
                    f'{case.program} failed for {case.label}, L={case.layers}: '
                    f'{result["error"]}')
            results[case] = {'label': case.label, **result}
    return results


def memory_rows(results: dict[Case, dict[str, Any]]) -> list[dict[str, Any]]:
    rows = [row for case, row in results.items() if case.program == 'memory']
    for row in rows:
        if row['ok']:
            row['per_device_ratio'] = row['per_device_bytes'] / row['ideal_bytes']
            if row['compiled_output_bytes'] is not None:
                row['compiled_ratio'] = row['compiled_output_bytes'] / row['ideal_bytes']
    return rows


def _pooled(rows: list[dict[str, Any]], key: str) -> dict[str, Any]:
    """Timings of ``rows`` (one per round) pooled: all samples, their median and min."""
    pooled = {}
    for name in TIMINGS:
        samples = [value for row in rows for value in row[key][name]['samples']]
        pooled[name] = {'median': statistics.median(samples), 'min': min(samples),
                        'samples': samples}
    return pooled


def overhead_table(results: dict[Case, dict[str, Any]]) -> dict[str, Any]:
    """``{layers: {label: pooled result, 'ratios': {timing: ours / vanilla}}}``."""
    rounds: dict[str, dict[str, list[dict[str, Any]]]] = {}
    for case, row in results.items():
        if case.program == 'overhead':
            rounds.setdefault(str(case.layers), {}).setdefault(case.label, []).append(row)
    table: dict[str, Any] = {}
    for layers, by_label in rounds.items():
        entry: dict[str, Any] = {
            label: {'variables': rows[0]['variables'], 'versions': rows[0]['versions'],
                    'processes': len(rows), 'timings': _pooled(rows, 'timings'),
                    'cpu_timings': _pooled(rows, 'cpu_timings')}
            for label, rows in by_label.items()}
        ours, vanilla = (entry[label] for label, _, _ in OVERHEAD_RUNS)
        for key, ratio_key, statistic in (('timings', 'ratios', 'median'),
                                          ('timings', 'ratios_of_min', 'min'),
                                          ('cpu_timings', 'cpu_ratios', 'median')):
            entry[ratio_key] = {name: ours[key][name][statistic] / vanilla[key][name][statistic]
                                for name in TIMINGS}
        table[layers] = entry
    return table


# -- report -----------------------------------------------------------------

def _collective_summary(row: dict[str, Any]) -> str:
    parts = [f'{kind} {entry["count"]}x/{entry["bytes"]}B'
             for kind, entry in row['collectives'].items() if entry['count']]
    return ', '.join(parts) or 'none'


def checks(results: dict[str, Any]) -> dict[str, bool]:
    """The targets of the issue, each True if met by these results."""
    memory = {row['label']: row for row in results['memory'] if row['layers']
              == results['config']['layers']}
    collectives = {row['label']: row for row in results['collectives']}
    headline = results['overhead'][str(results['config']['overhead_layers'])]['ratios']
    return {
        'memory: ours at ideal (per device)': memory['ours']['per_device_ratio'] == 1.0,
        'collectives: ours == vanilla+workaround':
            collectives['ours']['collectives']
            == collectives['vanilla+workaround']['collectives'],
        **{f'overhead: {name} median ratio <= {target:.2f}': headline[name] <= target
           for name, target in TARGETS.items()},
    }


def print_report(results: dict[str, Any]) -> None:
    config = results['config']
    print(f'\n== {results["mode"]} mode, {results["date"]}, '
          f'{results["machine"]["nproc"]} cores, {results["machine"]["cpu"]}')
    for key, versions in results['versions'].items():
        print(f'   {key}: ' + ', '.join(f'{n} {v}' for n, v in versions.items()))

    print(f'\n1. Optimizer-state bytes per device (adam, d={config["width"]}, '
          'mesh 2x4 fsdp x tensor)')
    print(f'{"run":26s} {"L":>4s} {"ideal":>10s} {"shards":>10s} {"ratio":>6s} '
          f'{"compiled":>10s} {"ratio":>6s} {"mis":>4s}  state spec (up.kernel)')
    for row in results['memory']:
        if not row['ok']:
            print(f'{row["label"]:26s} {row["layers"]:4d}  raised {row["error"][:90]}')
            continue
        compiled = row['compiled_output_bytes']
        print(f'{row["label"]:26s} {row["layers"]:4d} {row["ideal_bytes"]:10d} '
              f'{row["per_device_bytes"]:10d} {row["per_device_ratio"]:6.3f} '
              f'{compiled if compiled is not None else "n/a":>10} '
              f'{row.get("compiled_ratio", float("nan")):6.3f} '
              f'{row["mismatched_leaves"]:4d}  {row["state_spec"]}')

    print(f'\n2. Collectives in the compiled train step (L={config["layers"]}, '
          f'static count in HLO)')
    print(f'{"run":26s} {"count":>6s} {"bytes":>10s}  detail (count x / result bytes)')
    for row in results['collectives']:
        if not row['ok']:
            print(f'{row["label"]:26s} raised {row["error"][:90]}')
            continue
        print(f'{row["label"]:26s} {row["total_count"]:6d} {row["total_bytes"]:10d}  '
              f'{_collective_summary(row)}')

    runs = config['repeats'] * config['rounds']
    print(f'\n3-4. Overhead, median of {runs} runs: wall s ours/vanilla+workaround, '
          'ratio; (ratio of minima; ratio of median CPU times)')
    print(f'{"L":>5s} {"vars":>4s} ' + ' '.join(f'{name:>36s}' for name in TIMINGS))
    for layers, entry in results['overhead'].items():
        ours, vanilla = entry['ours'], entry['vanilla+workaround']
        cells = [f'{ours["timings"][n]["median"]:.4f}/{vanilla["timings"][n]["median"]:.4f}'
                 f' {entry["ratios"][n]:4.2f} ({entry["ratios_of_min"][n]:4.2f};'
                 f' {entry["cpu_ratios"][n]:4.2f})'
                 for n in TIMINGS]
        print(f'{layers:>5s} {ours["variables"]:4d} ' + ' '.join(f'{c:>36s}' for c in cells))
    print('\nTargets:' + (' (smoke mode: the timing targets mean nothing)'
                         if results['mode'] == 'smoke' else ''))
    for name, met in results['checks'].items():
        print(f'  {"met    " if met else "NOT MET"}  {name}')
    print(f'\nelapsed {results["elapsed_seconds"]:.1f} s')


def machine() -> dict[str, Any]:
    cpu = 'unknown'
    try:
        for line in Path('/proc/cpuinfo').read_text().splitlines():
            if line.startswith('model name'):
                cpu = line.split(':', 1)[1].strip()
                break
    except OSError:
        pass
    return {'nproc': os.cpu_count(), 'cpu': cpu}


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
    measured = run_cases(plan(config), pythons, config, progress=report)
    results['versions'] = {
        row['label'].split()[0].split('+')[0]: row['versions']
        for row in measured.values() if row['label'] in ('ours', 'vanilla+workaround')}
    results['memory'] = memory_rows(measured)
    results['collectives'] = [row for case, row in measured.items()
                              if case.program == 'collectives']
    results['overhead'] = overhead_table(measured)
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
