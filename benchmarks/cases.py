"""The cases of a benchmark run and how they run.

Each case is one measured program (``memory.py``, ``collectives.py``,
``overhead.py``; each prints one JSON line per case) under one of the two
interpreters, in a variant (plain, or vanilla's documented workaround), at a
number of layers, on 8 simulated CPU devices. The full mode runs every case
in its own process, one at a time, ours and vanilla alternating; the smoke
mode runs all cases of an interpreter in one ``batch.py`` process, both
interpreters at once. ``instructions.py`` counts the main thread's
instructions under callgrind; ``calls.py`` those of one traced call a case
(``run_call_instructions``).
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

BENCH_DIR = Path(__file__).resolve().parent
# Seconds one measured program may run (--program-timeout); the instruction
# counts get this per case they count (run_instructions).
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
# Instructions of the main thread under callgrind (instructions.py): the
# steady counterpart of the wall-time targets (compilation is XLA's, the same
# program in both, and reported without a target).
INSTRUCTIONS = ('create', 'scan_trace', 'scan_compile', 'optimizer')
# One lifted call a case (calls.py, ``kind:LxV[:bN]``), its tracing counted
# under callgrind: tree mode (graph=False) scans at L=64 with 4 Variables
# and 8 layers of 32, with 0, 8 and 64 broadcasts; tree-mode vmap creation;
# a graph=True, graph_updates=False scan; graph-mode scans that record
# (one-entry specs, optimizer_sharding without the name), 4 and 64 Variables.
TREE_CALLS = tuple(f'tree_scan:{shape}{broadcasts}' for shape in ('64x4', '8x32')
                   for broadcasts in ('', ':b8', ':b64')) + (
    'tree_vmap:64x4', 'simple_scan:64x4')
RECORDING_CALLS = ('record_scan:64x4', 'record_scan:64x64',
                   'record_opt_scan:64x4', 'record_opt_scan:64x64')
CALL_CASES = TREE_CALLS + RECORDING_CALLS
# The runs of each call: ours as written, vanilla as written (no metadata
# work, stale metadata), vanilla with its workaround (tree mode: FLIP 5310's
# decorator on the body; graph mode: transform_metadata={PARTITION_NAME: None}).
CALL_RUNS = (('ours', 'ours', 'plain'), ('vanilla', 'vanilla', 'plain'),
             ('vanilla+workaround', 'vanilla', 'workaround'))


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
    program_timeout: int = PROGRAM_TIMEOUT  # seconds per measured program
    call_cases: tuple[str, ...] = ()  # calls.py's cases counted under callgrind
    call_processes: int = 3  # processes a run of them (the range of the counts)
    call_workers: int = 2    # of those processes at once (counts do not depend on load)


FULL = Config(mode='full', layers=8, width=512, indivisible_layers=6,
              overhead_layers=64, overhead_width=64, scaling_layers=(8, 32, 128),
              variable_scaling=(8, 32, 128), group_size=4,
              repeats=3, rounds=4, warmup=1, one_process_per_case=True, workers=1,
              instruction_cases=('64', '32:8'), instruction_repeats=3,
              call_cases=CALL_CASES)
# No instruction counts in smoke mode: jax under valgrind takes minutes even
# at these sizes (802 s at load 8); the test suite checks the counting itself
# on a jax-free program (tests/e2e/test_benchmarks_smoke.py).
SMOKE = Config(mode='smoke', layers=4, width=16, indivisible_layers=None,
               overhead_layers=4, overhead_width=16, scaling_layers=(2, 4),
               variable_scaling=(4, 8), group_size=2,
               repeats=1, rounds=1, warmup=0, one_process_per_case=False, workers=2,
               instruction_cases=(), instruction_repeats=1)


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


def sections(config: Config) -> list[tuple[str, list[Case]]]:
    """The cases of ``plan(config)`` in the sections that run one after the
    other, each named by the results table it fills: ``memory``,
    ``collectives``, ``overhead`` (one stack), ``variable_scaling`` (several);
    in smoke mode one section, ``programs``, since it runs every case of an
    interpreter in one process."""
    cases = plan(config)
    if not config.one_process_per_case:
        return [('programs', cases)]
    named: dict[str, list[Case]] = {}
    for case in cases:
        named.setdefault(section_of(case), []).append(case)
    return list(named.items())


def section_of(case: Case) -> str:
    if case.program != 'overhead':
        return case.program
    return 'variable_scaling' if case.groups > 1 else 'overhead'


def program_options(program: str, config: Config) -> dict[str, Any]:
    if program == 'overhead':
        return {'width': config.overhead_width, 'repeats': config.repeats,
                'warmup': config.warmup}
    return {'width': config.width}


def run_program(python: str, program: str, prefix: tuple[str, ...] = (),
                env: dict[str, str] | None = None, timeout: float = PROGRAM_TIMEOUT,
                **options: Any) -> list[dict[str, Any]]:
    """Run ``benchmarks/<program>.py`` under ``python`` (after ``prefix``); its
    JSON lines. ``subprocess.TimeoutExpired`` after ``timeout`` seconds."""
    env = dict(os.environ, JAX_PLATFORMS='cpu',
               XLA_FLAGS='--xla_force_host_platform_device_count=8', **(env or {}))
    command = [*prefix, python, str(BENCH_DIR / f'{program}.py')]
    for name, value in options.items():  # True: a flag alone
        flag = f'--{name.replace("_", "-")}'
        command += [flag] if value is True else [flag, str(value)]
    completed = subprocess.run(command, env=env, cwd=BENCH_DIR, capture_output=True,
                               text=True, timeout=timeout)
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
                                 timeout=config.program_timeout,
                                 **program_options(case.program, config))
        else:
            spec = ','.join(f'{case.program}:{case.spec}' for case in group)
            output = run_program(python, 'batch', cases=spec, width=config.width,
                                 timeout=config.program_timeout * len(group),
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


def callgrind_rows(python: str, program: str, label: str, marks: Path, timeout: float,
                   **options: Any) -> list[dict[str, Any]]:
    """``program``'s JSON lines, run under callgrind with ``marks``; raises if a
    case failed."""
    with tempfile.TemporaryDirectory() as out_dir:
        # --trace-children: the interpreter may be a wrapper script that
        # execs Python (the smoke test's vanilla one); %p is its pid.
        prefix = (*CALLGRIND, f'--callgrind-out-file={out_dir}/callgrind.out.%p')
        rows = run_program(python, program, prefix=prefix, env={'PYTHONHASHSEED': '0'},
                           timeout=timeout, out_dir=out_dir, marks=marks, **options)
    for row in rows:
        if not row['ok']:
            raise RuntimeError(f'{program} failed for {label}: {row["error"]}')
    return rows


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
        cases = ','.join(f'{variant}:{case}' for case in config.instruction_cases)
        return callgrind_rows(pythons[key], 'instructions', label, marks,
                              timeout=config.program_timeout * len(config.instruction_cases),
                              cases=cases, width=config.overhead_width,
                              repeats=config.instruction_repeats, warmup=1)

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


def run_call_instructions(pythons: dict[str, str], config: Config,
                          progress: bool = False) -> dict[str, Any]:
    """Main-thread instructions of one traced call a case (``calls.py``).

    Each run of ``CALL_RUNS`` counts every case of ``config.call_cases`` in
    ``config.call_processes`` processes (median of ``instruction_repeats``
    traces after one uncounted, each), ``config.call_workers`` processes at
    once, the runs interleaved. ``{case: {label: {'medians': [one a process], 'samples':
    [...]}, 'ratios': {label: {'median': ..., 'range': [low, high]}}}}``:
    ours over the median of the other run's process medians, and its range
    (ours' lowest over their highest, ours' highest over their lowest).
    ``{'skipped': why}`` without valgrind.
    """
    reason = instructions_unavailable()
    if reason is not None:
        return {'skipped': reason}
    cases = config.call_cases
    jobs = [(process, run) for process in range(config.call_processes) for run in CALL_RUNS]

    def count(job: tuple[int, tuple[str, str, str]], marks: Path) -> list[dict[str, Any]]:
        process, (label, key, variant) = job
        started = time.perf_counter()
        rows = callgrind_rows(pythons[key], 'calls', label, marks,
                              timeout=config.program_timeout * len(cases),
                              cases=','.join(f'{variant}/{case}' for case in cases),
                              width=config.overhead_width,
                              repeats=config.instruction_repeats, warmup=1, count=True)
        if progress:
            print(f'  {time.perf_counter() - started:6.1f} s  calls {label} '
                  f'process {process + 1}/{config.call_processes}', file=sys.stderr, flush=True)
        return rows

    start = time.perf_counter()
    with (tempfile.TemporaryDirectory() as build_dir,
          ThreadPoolExecutor(max_workers=config.call_workers) as pool):
        marks = compile_marks(Path(build_dir))
        outputs = list(pool.map(lambda job: count(job, marks), jobs))
    table: dict[str, Any] = {'seconds': time.perf_counter() - start}
    for index, case in enumerate(cases):
        entry: dict[str, Any] = {}
        for (_, (label, _, _)), rows in zip(jobs, outputs):
            samples = rows[index]['instructions']['trace']
            run = entry.setdefault(label, {'medians': [], 'samples': [],
                                           'versions': rows[index]['versions']})
            run['samples'].append(samples)
            run['medians'].append(statistics.median(samples))
        ours = entry['ours']['medians']
        entry['ratios'] = {
            label: {'median': statistics.median(ours) / statistics.median(other),
                    'range': [min(ours) / max(other), max(ours) / min(other)]}
            for label, _, _ in CALL_RUNS[1:] for other in [entry[label]['medians']]}
        table[case] = entry
    return table
