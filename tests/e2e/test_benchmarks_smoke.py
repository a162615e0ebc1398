"""The benchmarks run (smoke mode), ours against vanilla in one run.

Only what is size-independent is asserted: our optimizer state is at the
ideal bytes per device, our train step communicates exactly what vanilla
with the documented workaround does, and the scaling models' Variable count
grows with the number of stacks (4 per stack) for both. Timings and counts at
smoke sizes mean nothing. Smoke mode runs one process per interpreter, the
two at once, and counts no instructions (jax under valgrind takes minutes);
the callgrind counting itself is checked on a small program without jax,
where valgrind and gcc are installed. The accelerator's train-step benchmark
(``benchmarks/train_step.py``) runs at its small size on the devices present.
A run that fails in a section keeps, prints and saves the sections before it.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from flaxpq.project import REPO_ROOT

sys.path.insert(0, str(REPO_ROOT / 'benchmarks'))
import cases  # noqa: E402
import run as bench  # noqa: E402
import train_step  # noqa: E402


def test_a_section_that_times_out_keeps_the_figures_measured_before_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each section's figures are saved and printed as it completes; the one
    that times out is named, the figures before it printed again and kept in
    the results file, and no later section runs."""
    monkeypatch.setattr(bench, 'print_section',
                        lambda name, results: print(f'table {name}: {results[name]}'))
    ran = []

    def timed_out() -> dict[str, object]:
        raise subprocess.TimeoutExpired(['python', 'collectives.py'], 5)

    steps: list[bench.Section] = [
        ('memory', lambda: {'memory': [1, 2]}),
        ('collectives', timed_out),
        ('overhead', lambda: ran.append('overhead') or {'overhead': {}}),
    ]
    output = tmp_path / 'build' / 'results.json'
    with pytest.raises(bench.SectionFailed) as failed:
        bench.measure_sections(steps, {'mode': 'full'}, output, report=True)
    assert failed.value.section == 'collectives' and not ran
    saved = json.loads(output.read_text())
    assert saved['memory'] == [1, 2] and saved['sections_done'] == ['memory'], saved
    assert saved['failed']['section'] == 'collectives', saved
    assert 'TimeoutExpired' in saved['failed']['error'], saved
    printed = capsys.readouterr().out
    assert printed.count('table memory: [1, 2]') == 2, printed  # when done, and at the failure
    assert '== section collectives failed: TimeoutExpired' in printed, printed
    assert f'saved in {output}' in printed, printed


def test_the_full_runs_sections_hold_every_case_in_plan_order() -> None:
    named = cases.sections(cases.FULL)
    assert [name for name, _ in named] == ['memory', 'collectives', 'overhead',
                                           'variable_scaling']
    assert [case for _, part in named for case in part] == cases.plan(cases.FULL)
    assert [name for name, _ in cases.sections(cases.SMOKE)] == ['programs']


def test_the_calls_alone_are_a_flag(monkeypatch: pytest.MonkeyPatch) -> None:
    seen = []
    monkeypatch.setattr(bench, 'run', lambda config, *args, **kwargs: seen.append(
        (config, kwargs['only'])))
    bench.main(['--ours-python', 'o', '--vanilla-python', 'v', '--output', '/dev/null',
                '--sections', 'calls', '--calls', 'tree,record_scan:64x4',
                '--call-processes', '5'])
    config, only = seen[0]
    assert only == {'calls'} and config.call_processes == 5, seen
    assert config.call_cases == (*cases.TREE_CALLS, 'record_scan:64x4'), config


def test_the_program_timeout_is_a_flag(monkeypatch: pytest.MonkeyPatch) -> None:
    seen = []
    monkeypatch.setattr(bench, 'run', lambda config, *args, **kwargs: seen.append(config))
    bench.main(['--ours-python', 'o', '--vanilla-python', 'v', '--output', '/dev/null',
                '--program-timeout', '7200'])
    assert seen[0].program_timeout == 7200 and seen[0].mode == 'full', seen


@pytest.mark.slow
def test_benchmarks_smoke(vanilla_python: str) -> None:
    """Two jax processes at once, 8 cases each: 88 s at load 8-10 (54 s of CPU)."""
    results = bench.run_smoke(sys.executable, vanilla_python)
    versions = results['versions']
    assert versions['ours']['flax'] != versions['vanilla']['flax'], versions
    assert results['checks']['memory: ours at ideal (per device)']
    assert results['checks']['collectives: ours == vanilla+workaround']
    config = results['config']
    for layers in config['variable_scaling']:
        entry = results['variable_scaling'][str(layers)]
        stacks = layers // config['group_size']
        for label in ('ours', 'vanilla+workaround'):
            assert entry[label]['groups'] == stacks, entry[label]
            assert entry[label]['variables'] == 4 * stacks, entry[label]
    assert results['instructions'] == {'skipped': 'no instruction_cases in this mode'}
    assert results['calls'] == {'skipped': 'no call_cases in this mode'}


# Every kind of call the calls section counts, at small sizes.
SMALL_CALLS = ('tree_scan:4x4:b2', 'tree_scan:2x8', 'tree_vmap:4x4', 'simple_scan:4x4:b2',
               'record_scan:4x2', 'record_opt_scan:4x2')


@pytest.mark.slow
def test_the_calls_give_ours_the_metadata_of_vanillas_workaround(vanilla_python: str) -> None:
    """The calls section's cases, traced once without valgrind (one jax
    process per interpreter, 14 s of CPU; 78-194 s beside callgrind runs): every
    one runs, and ours as written leaves the metadata vanilla's workaround
    does, where vanilla as written differs."""
    metadata: dict[str, dict[str, object]] = {}
    for key, python in (('ours', sys.executable), ('vanilla', vanilla_python)):
        runs = [(label, variant) for label, run_key, variant in cases.CALL_RUNS
                if run_key == key]
        rows = iter(cases.run_program(python, 'calls', width=16, cases=','.join(
            f'{variant}/{case}' for _, variant in runs for case in SMALL_CALLS)))
        for label, _ in runs:
            metadata[label] = {}
            for case, row in zip(SMALL_CALLS, rows):
                assert row['ok'] and row['case'] == case, row
                metadata[label][case] = row['metadata']
    for case in SMALL_CALLS:
        assert metadata['ours'][case] == metadata['vanilla+workaround'][case], case
        assert metadata['vanilla'][case] != metadata['ours'][case], case


@pytest.mark.slow
def test_train_step_small(vanilla_python: str) -> None:
    """The accelerator's train-step benchmark at its CPU size, on the devices present.

    Ours as written and vanilla with the workaround train the same stacked
    layers to the same losses, placed alike; every figure and ratio is there.
    """
    report = train_step.run_train_step(sys.executable, vanilla_python, size='small')
    runs = report['runs']
    ours, base = runs['ours'], runs[train_step.BASELINE]
    assert ours['versions']['flax'] != base['versions']['flax'], (ours, base)
    assert ours['device_count'] == base['device_count'] >= 1
    assert ours['kernel_sharding'] == base['kernel_sharding'], (ours, base)
    assert ours['kernel_metadata'] == base['kernel_metadata'], (ours, base)
    assert len(ours['losses']) == ours['steps'] + 1
    assert ours['losses'][-1] < ours['losses'][0], ours['losses']
    comparison = report['against_baseline']['ours']
    assert comparison['losses_agree'], (ours['losses'], base['losses'])
    for key in ('lower', 'compile', 'first_step', 'median_step'):
        assert comparison[key] > 0, comparison
    # The CPU reports no peak memory; an accelerator does.
    assert (comparison['peak_memory'] is None) == (ours['peak_memory_bytes'] is None)
    assert 'vanilla as written' in runs


# Counts a loop of n additions between the marks, for n and 10 n.
COUNTED = '''
import json, sys
from pathlib import Path
sys.path.insert(0, sys.argv[1])
from callgrind import Counter, load_marks
counter = Counter(Path(sys.argv[2]), load_marks(Path(sys.argv[3])))
n = 20000
counts = [counter.count(str(k), lambda: sum(range(k)))[0] for k in (n, 10 * n)]
print(json.dumps(counts))
'''


@pytest.mark.skipif(bench.instructions_unavailable() is not None,
                    reason=f'callgrind counts: {bench.instructions_unavailable()}')
def test_callgrind_counts_the_main_thread_between_the_marks(tmp_path: Path) -> None:
    """The full mode's instruction counting, on plain Python: 10x the work, ~10x the count."""
    marks = bench.compile_marks(tmp_path)
    out_dir = tmp_path / 'out'
    out_dir.mkdir()
    result = subprocess.run(
        [*bench.CALLGRIND, f'--callgrind-out-file={out_dir}/callgrind.out.%p',
         sys.executable, '-c', COUNTED, str(REPO_ROOT / 'benchmarks'), str(out_dir),
         str(marks)], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    small, large = json.loads(result.stdout.splitlines()[-1])
    assert 0 < small and 5 * small < large < 20 * small, (small, large)
