"""The compatibility oracle (docs/design.md, I0): vanilla 0.12.12 vs ours, same programs.

Fixed rows (user reports of #5112), the e2e regression guards, probes and hypothesis
programs. ``ORACLE_OURS=vanilla`` runs vanilla as ours (the self-check, its
own step of ``make test``): then only ``intended`` checks may fail, and every
program with an intended difference must show one.

``ORACLE_EXAMPLES`` (default 50) sets how many random programs run; with
``ORACLE_RANDOM=1`` they are drawn afresh (no ``derandomize``) and every
failing program is collected into ``ORACLE_FINDINGS``, not only the first
(``make oracle-long``; ``ORACLE_COLLECT=1`` collects without ``RANDOM``).
"""

from __future__ import annotations

import collections
import json
import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings

from tests.oracle import probes
from tests.oracle.compare import Divergence, compare, compare_scenario, \
    compare_with_workaround, is_fixed
from tests.oracle.corpus import ROWS, SCENARIOS, WORKAROUND_GAPS
from tests.oracle.programs import Program, apply_axis_entry, expected_metadata
from tests.oracle.strategies import FOCUS, REQUIRED, families, programs
from tests.support.workers import SELF_CHECK, Pair, expected_versions

EXAMPLES = int(os.environ.get('ORACLE_EXAMPLES', '50'))
RANDOM = os.environ.get('ORACLE_RANDOM') == '1'
COLLECT = RANDOM or os.environ.get('ORACLE_COLLECT') == '1'  # all failures, no shrinking
FINDINGS = os.environ.get('ORACLE_FINDINGS', 'build/oracle-findings.jsonl')
FAMILIES = os.environ.get('ORACLE_FAMILIES')  # also written there (pytest-xdist hides prints)


def test_each_side_loaded_its_flax(oracle: Pair) -> None:
    """Vanilla's worker runs the pin, ours the pin plus our label (upstream.toml)."""
    vanilla, ours = expected_versions()
    assert oracle.vanilla.hello['flax_version'] == vanilla, oracle.vanilla.hello
    assert oracle.ours.hello['flax_version'] == ours, oracle.ours.hello
    assert oracle.vanilla.hello['devices'] == oracle.ours.hello['devices'] == 8


def has_intended_difference(program: Program) -> bool:
    """The model says ours differs: its metadata (where ours runs), or ours'
    forward pass failing on a given ``PARTITION_NAME`` where vanilla's runs."""
    if program.custom is not None:
        return False
    ours, vanilla = expected_metadata(program, 'ours'), expected_metadata(program, 'vanilla')
    runs = apply_axis_entry(program, ours)
    return (ours != vanilla and runs) or (not runs and apply_axis_entry(program, vanilla, 'vanilla'))


def problems(program: Program, found: list[Divergence], expect_intended: bool) -> list[str]:
    """What fails the program: any divergence, or (self-check) a wrong tag."""
    if not SELF_CHECK:
        return [f'[{tag}] {message}' for tag, message in found]
    # Self-check: vanilla as ours fails exactly the intended-difference checks.
    wrong = [f'[{tag}] {message}' for tag, message in found if tag != 'intended']
    if expect_intended and not found:
        wrong.append('intended difference not detected')
    return wrong


def judge(program: Program, found: list[Divergence], expect_intended: bool,
          pair: Pair | None = None) -> None:
    lines = problems(program, found, expect_intended)
    stderr = pair.stderr() if lines and pair is not None else ''
    assert not lines, f'{program}\n' + '\n'.join(lines) + stderr


@pytest.mark.parametrize('program', ROWS, ids=[p.name for p in ROWS])
def test_rows(oracle: Pair, program: Program) -> None:
    """Each row as vanilla; a fixed row also as vanilla with the workaround.

    A fixed row (vanilla fails with the #5112 family) must give what vanilla
    gives with ``transform_metadata={nnx.PARTITION_NAME: None}``: values,
    array shardings, losses, consumers' specs, ``out_sharding`` entries. Where
    the workaround cannot be written (``Program.with_workaround`` says why), or
    is written but does not give the program (``corpus.WORKAROUND_GAPS`` says
    why), ours is judged by the model and vanilla's other reports only.
    """
    vanilla, ours = oracle.run(program)
    found = compare(program, vanilla, ours)
    gap = WORKAROUND_GAPS.get(program.name)
    if is_fixed(program, vanilla):
        workaround = program.with_workaround()
        if isinstance(workaround, str):
            print(f'{program.name}: no workaround reference: {workaround}')
        else:
            against = compare_with_workaround(oracle.run_vanilla(workaround), ours)
            if gap is None:
                found += against
            else:  # the gap must be real
                assert SELF_CHECK or against, f'{program.name}: the workaround works: {gap}'
    else:
        assert gap is None, f'{program.name} is not a fixed row (vanilla: {vanilla.outcome})'
    judge(program, found, vanilla.variables is not None and has_intended_difference(program),
          oracle)


@pytest.mark.parametrize('program', SCENARIOS, ids=[p.name for p in SCENARIOS])
def test_e2e_regression_guards(oracle: Pair, program: Program) -> None:
    vanilla, ours = oracle.run(program)
    judge(program, compare_scenario(program, vanilla, ours), False, oracle)


PROBES = probes.load()


@pytest.mark.parametrize('name', sorted(PROBES))
def test_probes(oracle: Pair, name: str) -> None:
    """Hand-written user programs (tests/oracle/probes): as vanilla, or fixed."""
    program = Program(f'probe {name}', custom=f'probe:{name}')
    vanilla, ours = oracle.run(program)
    found = probes.compare(PROBES[name], vanilla.probe, ours.probe)
    judge(program, [(t, m) for t, m in found if t != 'vacuous'],
          PROBES[name].fixed is not None, oracle)
    vacuous = [m for t, m in found if t == 'vacuous']
    assert SELF_CHECK or not vacuous, vacuous


def shares(examples: int) -> list[tuple[str | None, int]]:
    """The derandomized run's examples, each entry of ``FOCUS`` its share
    (hypothesis's derandomized draws of a focus reach few of them, and which
    ones changes with every change of the strategies); fresh programs draw
    the focus (None)."""
    if RANDOM:
        return [(None, examples)]
    n = len(FOCUS)
    return [(focus, examples // n + (i < examples % n)) for i, focus in enumerate(FOCUS)
            if examples // n + (i < examples % n)]


def test_random_programs(oracle: Pair, capsys: pytest.CaptureFixture[str]) -> None:
    """Hypothesis programs; prints the drawn set's family counts."""
    counts: collections.Counter[str] = collections.Counter()
    failures: list[dict[str, object]] = []
    if COLLECT:  # written as found, so a run cut short still tells
        Path(FINDINGS).parent.mkdir(parents=True, exist_ok=True)
        Path(FINDINGS).write_text('')

    def run(program: Program) -> None:
        counts.update(set(families(program)))
        counts['programs'] += 1
        if COLLECT and counts['programs'] % 25 == 0:
            Path(FINDINGS + '.counts').write_text(json.dumps(counts, sort_keys=True) + '\n')
        vanilla, ours = oracle.run(program)
        found = compare(program, vanilla, ours)
        lines = problems(program, found,
                         vanilla.variables is not None and has_intended_difference(program))
        if COLLECT and lines:  # collect them all, do not shrink
            failures.append({'program': json.loads(program.to_json()), 'problems': lines,
                             'vanilla': vanilla.outcome, 'ours': ours.outcome,
                             'stderr': oracle.stderr()[-2000:]})
            with open(FINDINGS, 'a') as f:
                f.write(json.dumps({**failures[-1], 'after': counts['programs']}) + '\n')
            return
        assert not lines, f'{program}\n' + '\n'.join(lines) + oracle.stderr()

    for focus, examples in shares(EXAMPLES):
        settings(max_examples=examples, deadline=None, derandomize=not RANDOM, database=None,
                 suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])(
            given(program=programs(focus))(run))()
    summary = ', '.join(f'{name} {n}' for name, n in sorted(counts.items()))
    drawn = (f'oracle: {counts["programs"]} random programs drawn (ORACLE_EXAMPLES='
             f'{EXAMPLES}); families: {summary}')
    if FAMILIES:
        Path(FAMILIES).parent.mkdir(parents=True, exist_ok=True)
        Path(FAMILIES).write_text(drawn + '\n')
    with capsys.disabled():
        print('\n' + drawn)
        if COLLECT:
            print(f'oracle: {len(failures)} failing programs, written to {FINDINGS}')
    missing = [family for family in REQUIRED if not counts[family]]
    assert not missing, f'the drawn programs never reach {missing}: {summary}'
    assert not failures, f'{len(failures)} failing programs (see {FINDINGS}); first: ' + \
        '\n'.join(failures[0]['problems'])  # type: ignore[arg-type]
