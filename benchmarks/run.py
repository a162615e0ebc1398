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
import math
import os
import shutil
import subprocess
import sys
import tempfile
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
# Growth of a timing with the number of Variables, as the exponent k of
# t ~ V**k between the smallest and the largest grouped model: <= 1 is at most
# linear (fixed costs push it below 1). Ours must not grow faster than this.
LINEAR_EXPONENT = 1.10
# Instructions of the main thread under callgrind (instructions.py): the
# steady counterpart of the wall-time targets (compilation is XLA's, the same
# program in both, and reported without a target).
INSTRUCTIONS = ('create', 'scan_trace', 'scan_compile', 'optimizer')
INSTRUCTION_TARGETS = {'create': 1.03, 'scan_trace': 1.03, 'optimizer': 1.00}


@dataclass(frozen=True)
class Config:
    """Sizes of one benchmark mode."""

    mode: str
    layers: int            # memory and collectives (divisible by 4: vanilla runs)
    width: int
    indivisible_layers: int | None  # vanilla without workaround, expected to raise
    overhead_layers: int   # the headline overhead figures
    overhead_width: int
    scaling_layers: tuple[int, ...]     # one stack: array sizes grow, 4 Variables
    variable_scaling: tuple[int, ...]   # layers in stacks of group_size: Variables grow
    group_size: int
    repeats: int           # timed runs per overhead process
    rounds: int            # overhead processes per run and L, ours/vanilla alternating
    warmup: int
    one_process_per_case: bool  # else one process per interpreter (batch.py)
    workers: int           # programs run at once (timings need 1)
    instruction_cases: tuple[str, ...]  # 'layers[:groups]' counted under callgrind
    instruction_repeats: int


FULL = Config(mode='full', layers=8, width=512, indivisible_layers=6,
              overhead_layers=64, overhead_width=64, scaling_layers=(8, 32, 128),
              variable_scaling=(8, 32, 128), group_size=4,
              repeats=3, rounds=4, warmup=1, one_process_per_case=True, workers=1,
              instruction_cases=('64', '32:8'), instruction_repeats=3)
# No instruction counts in smoke mode: jax under valgrind takes minutes even
# at these sizes (802 s at load 8); the test suite checks the counting itself
# on a jax-free program (tests/e2e/test_benchmarks_smoke.py).
SMOKE = Config(mode='smoke', layers=4, width=16, indivisible_layers=None,
               overhead_layers=4, overhead_width=16, scaling_layers=(2, 4),
               variable_scaling=(4, 8), group_size=2,
               repeats=1, rounds=1, warmup=0, one_process_per_case=False, workers=2,
               instruction_cases=(), instruction_repeats=1)

# -- interpreters -----------------------------------------------------------

def _pip(python: Path, *args: str) -> None:
    subprocess.run([str(python), '-m', 'pip', 'install', '--quiet', *args], check=True)


def base_interpreter(python: Path | str) -> str:
    """The real interpreter behind ``python`` (through symlinks, shims, venvs)."""
    code = 'import os, sys; print(os.path.realpath(sys._base_executable))'
    result = subprocess.run([str(python), '-c', code], capture_output=True, text=True)
    return result.stdout.strip() if result.returncode == 0 else ''


def _make_venv(base_python: str, path: Path, rebuild: bool) -> tuple[Path, bool]:
    """``(python, ready)``: the venv's interpreter and whether it is usable as is.

    A venv made with another interpreter than ``base_python`` (a changed
    ``PYTHON=`` of ``make bench``) is made anew, as ``scripts/venv`` does.
    """
    python = path / 'bin' / 'python'
    if (path / '.ready').exists() and not rebuild:
        if base_interpreter(python) == base_interpreter(base_python):
            return python, True
        print(f'{path} was made with another Python than {base_python}: making it anew',
              flush=True)
        rebuild = True
    if rebuild and path.exists():
        shutil.rmtree(path)
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
    groups: int = 1

    @property
    def spec(self) -> str:
        """``variant:layers[:groups]``, the programs' case syntax."""
        suffix = f':{self.groups}' if self.groups != 1 else ''
        return f'{self.variant}:{self.layers}{suffix}'

    @property
    def title(self) -> str:
        stacks = f' in {self.groups} stacks' if self.groups != 1 else ''
        return f'{self.program} {self.label} L={self.layers}{stacks}'

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
    for layers in config.variable_scaling:
        cases += [Case('overhead', label, layers, round_, layers // config.group_size)
                  for round_ in range(config.rounds) for label, _, _ in OVERHEAD_RUNS]
    return cases


def program_options(program: str, config: Config) -> dict[str, Any]:
    if program == 'overhead':
        return {'width': config.overhead_width, 'repeats': config.repeats,
                'warmup': config.warmup}
    return {'width': config.width}


def run_program(python: str, program: str, prefix: tuple[str, ...] = (),
                env: dict[str, str] | None = None, **options: Any) -> list[dict[str, Any]]:
    """Run ``benchmarks/<program>.py`` under ``python`` (after ``prefix``); its JSON lines."""
    env = dict(os.environ, JAX_PLATFORMS='cpu',
               XLA_FLAGS='--xla_force_host_platform_device_count=8', **(env or {}))
    command = [*prefix, python, str(BENCH_DIR / f'{program}.py')]
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
            output = run_program(python, case.program, cases=case.spec,
                                 **program_options(case.program, config))
        else:
            spec = ','.join(f'{case.program}:{case.spec}' for case in group)
            output = run_program(python, 'batch', cases=spec, width=config.width,
                                 overhead_width=config.overhead_width,
                                 repeats=config.repeats, warmup=config.warmup)
        if progress:
            names = ', '.join(case.title for case in group)
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
                    f'{case.title} failed: '
                    f'{result["error"]}')
            results[case] = {'label': case.label, **result}
    return results


def instructions_unavailable() -> str | None:
    """Why the callgrind counts cannot run here, or None if they can."""
    missing = [tool for tool in ('valgrind', 'gcc')
               if shutil.which(tool) is None]
    return f'not found on PATH: {", ".join(missing)}' if missing else None


def compile_marks(directory: Path) -> Path:
    """``callgrind_marks.c`` compiled with gcc into ``directory``; the library."""
    marks = directory / 'callgrind_marks.so'
    subprocess.run(['gcc', '-O1', '-shared', '-fPIC', '-o', str(marks),
                    str(BENCH_DIR / 'callgrind_marks.c')], check=True)
    return marks


CALLGRIND = ('valgrind', '-q', '--tool=callgrind', '--instr-atstart=no',
             '--separate-threads=yes', '--trace-children=yes')


def run_instructions(pythons: dict[str, str], config: Config) -> dict[str, Any]:
    """Main-thread instruction counts (``instructions.py`` under callgrind).

    ``{case: {label: {'instructions': {operation: counts}}, 'ratios': {...}}}``
    with ratios of the medians ours / vanilla+workaround; or ``{'skipped': why}``.
    Both interpreters run at once: counts do not depend on the machine's load.
    """
    reason = instructions_unavailable()
    if reason is not None:
        return {'skipped': reason}

    def count(label: str, key: str, variant: str, marks: Path) -> list[dict[str, Any]]:
        with tempfile.TemporaryDirectory() as out_dir:
            # --trace-children: the interpreter may be a wrapper script that
            # execs Python (the smoke test's vanilla one); %p is its pid.
            prefix = (*CALLGRIND, f'--callgrind-out-file={out_dir}/callgrind.out.%p')
            cases = ','.join(f'{variant}:{case}' for case in config.instruction_cases)
            rows = run_program(pythons[key], 'instructions', prefix=prefix,
                               env={'PYTHONHASHSEED': '0'}, cases=cases,
                               width=config.overhead_width,
                               repeats=config.instruction_repeats, warmup=1, out_dir=out_dir,
                               marks=marks)
        for row in rows:
            if not row['ok']:
                raise RuntimeError(f'instructions failed for {label}: {row["error"]}')
        return rows

    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as build_dir, ThreadPoolExecutor(max_workers=2) as pool:
        marks = compile_marks(Path(build_dir))
        outputs = dict(zip(
            (label for label, _, _ in OVERHEAD_RUNS),
            pool.map(lambda run: count(*run, marks), OVERHEAD_RUNS)))
    table: dict[str, Any] = {'seconds': time.perf_counter() - start}
    for index, case in enumerate(config.instruction_cases):
        entry: dict[str, Any] = {label: rows[index] for label, rows in outputs.items()}
        ours, vanilla = (entry[label]['instructions'] for label, _, _ in OVERHEAD_RUNS)
        entry['ratios'] = {name: statistics.median(ours[name]) / statistics.median(vanilla[name])
                           for name in INSTRUCTIONS}
        table[case] = entry
    return table


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


def overhead_table(results: dict[Case, dict[str, Any]], grouped: bool = False
                   ) -> dict[str, Any]:
    """``{layers: {label: pooled result, 'ratios': {timing: ours / vanilla}}}``.

    One-stack cases, or with ``grouped`` the cases in several stacks.
    """
    rounds: dict[str, dict[str, list[dict[str, Any]]]] = {}
    for case, row in results.items():
        if case.program == 'overhead' and (case.groups > 1) == grouped:
            rounds.setdefault(str(case.layers), {}).setdefault(case.label, []).append(row)
    table: dict[str, Any] = {}
    for layers, by_label in rounds.items():
        entry: dict[str, Any] = {
            label: {'variables': rows[0]['variables'], 'groups': rows[0]['groups'],
                    'versions': rows[0]['versions'],
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


def growth(table: dict[str, Any]) -> dict[str, Any]:
    """How each timing grows with the number of Variables in ``table``.

    Per label and timing: ``exponent``, k of t ~ V**k (log-log slope of the
    medians) between the smallest and the largest model, and
    ``upper_exponent`` between the two largest (where fixed costs weigh
    least); ``per_variable``, the added seconds per added Variable between
    the smallest and the largest; and the ratio ours / vanilla of the latter.
    """
    sizes = sorted(table.values(), key=lambda entry: entry['ours']['variables'])

    def slope(label: str, name: str, small: dict[str, Any], large: dict[str, Any]
              ) -> tuple[float, float]:
        """(log-log slope, seconds per Variable) from ``small`` to ``large``."""
        v0, v1 = small[label]['variables'], large[label]['variables']
        t0, t1 = (small[label]['timings'][name]['median'],
                  large[label]['timings'][name]['median'])
        return math.log(t1 / t0) / math.log(v1 / v0), (t1 - t0) / (v1 - v0)

    result: dict[str, Any] = {}
    for label, _, _ in OVERHEAD_RUNS:
        result[label] = {'variables': [entry[label]['variables'] for entry in sizes]}
        for name in TIMINGS:
            exponent, per_variable = slope(label, name, sizes[0], sizes[-1])
            upper_exponent, _ = slope(label, name, sizes[-2], sizes[-1])
            result[label][name] = {'exponent': exponent, 'upper_exponent': upper_exponent,
                                   'per_variable': per_variable}
    ours, vanilla = (result[label] for label, _, _ in OVERHEAD_RUNS)
    result['per_variable_ratios'] = {
        name: ours[name]['per_variable'] / vanilla[name]['per_variable'] for name in TIMINGS}
    return result


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
        **{f'scaling: ours {name} grows at most linearly in Variables '
           f'(exponent <= {LINEAR_EXPONENT:.2f})':
           results['variable_growth']['ours'][name]['exponent'] <= LINEAR_EXPONENT
           for name in TIMINGS},
        **({f'instructions: {name} ratio <= {target:.2f} (L={case})':
            results['instructions'][case]['ratios'][name] <= target
            for case in results['config']['instruction_cases'][:1]
            for name, target in INSTRUCTION_TARGETS.items()}
           if 'skipped' not in results['instructions'] else {}),
    }


def _print_timings(table: dict[str, Any]) -> None:
    """One row per L of an ``overhead_table``: medians, ratio, (min ratio; CPU ratio)."""
    print(f'{"L":>5s} {"vars":>4s} ' + ' '.join(f'{name:>36s}' for name in TIMINGS))
    for layers, entry in table.items():
        ours, vanilla = entry['ours'], entry['vanilla+workaround']
        cells = [f'{ours["timings"][n]["median"]:.4f}/{vanilla["timings"][n]["median"]:.4f}'
                 f' {entry["ratios"][n]:4.2f} ({entry["ratios_of_min"][n]:4.2f};'
                 f' {entry["cpu_ratios"][n]:4.2f})'
                 for n in TIMINGS]
        print(f'{layers:>5s} {ours["variables"]:4d} ' + ' '.join(f'{c:>36s}' for c in cells))


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
    _print_timings(results['overhead'])

    print(f'\n4. Scaling with the number of Variables: L layers in stacks of '
          f'{config["group_size"]} (one nnx.vmap and one nnx.scan per stack), same columns')
    _print_timings(results['variable_scaling'])
    grown = results['variable_growth']
    counts = grown['ours']['variables']
    print(f'growth with Variables ({", ".join(map(str, counts))}), ours / vanilla+workaround: '
          f'exponent k of t ~ V**k from {counts[0]} to {counts[-1]} [from {counts[-2]}]; '
          f'ms per added Variable from {counts[0]} to {counts[-1]} = ratio')
    for name in TIMINGS:
        ours, vanilla = grown['ours'][name], grown['vanilla+workaround'][name]
        print(f'  {name:13s} k {ours["exponent"]:4.2f} [{ours["upper_exponent"]:4.2f}] / '
              f'{vanilla["exponent"]:4.2f} [{vanilla["upper_exponent"]:4.2f}]   '
              f'{1e3 * ours["per_variable"]:8.3f} / {1e3 * vanilla["per_variable"]:8.3f} '
              f'= {grown["per_variable_ratios"][name]:4.2f}')
    instructions = results['instructions']
    print('\n5. Instructions of the main thread under callgrind (median of '
          f'{config["instruction_repeats"]}, millions): ours/vanilla+workaround, ratio')
    if 'skipped' in instructions:
        print(f'   skipped: {instructions["skipped"]}')
    else:
        print(f'{"case":>6s} {"vars":>4s} ' + ' '.join(f'{name:>24s}' for name in INSTRUCTIONS))
        for case in config['instruction_cases']:
            entry = instructions[case]
            ours, vanilla = entry['ours'], entry['vanilla+workaround']
            cells = [f'{statistics.median(ours["instructions"][n]) / 1e6:.1f}/'
                     f'{statistics.median(vanilla["instructions"][n]) / 1e6:.1f} '
                     f'{entry["ratios"][n]:5.3f}' for n in INSTRUCTIONS]
            print(f'{case:>6s} {ours["variables"]:4d} ' + ' '.join(f'{c:>24s}' for c in cells))
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
    results['versions'] = {case.interpreter: row['versions'] for case, row in measured.items()}
    results['memory'] = memory_rows(measured)
    results['collectives'] = [row for case, row in measured.items()
                              if case.program == 'collectives']
    results['overhead'] = overhead_table(measured)
    results['variable_scaling'] = overhead_table(measured, grouped=True)
    results['variable_growth'] = growth(results['variable_scaling'])
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
