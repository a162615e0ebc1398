"""The compatibility oracle (DESIGN.md I0): vanilla 0.12.12 vs ours, same programs.

Fixed rows (the issue's), the e2e regression guards, and hypothesis programs.
``ORACLE_OURS=vanilla`` runs vanilla as ours: then only ``intended`` checks
may fail, and every program with an intended difference must show one.
"""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, given, settings

from tests.oracle import probes
from tests.oracle.compare import Divergence, compare, compare_scenario
from tests.oracle.conftest import Pair
from tests.oracle.corpus import ROWS, SCENARIOS
from tests.oracle.programs import Program, apply_axis_entry, expected_metadata
from tests.oracle.strategies import programs

SELF_CHECK = os.environ.get('ORACLE_OURS') == 'vanilla'
EXAMPLES = int(os.environ.get('ORACLE_EXAMPLES', '50'))


def has_intended_difference(program: Program) -> bool:
    if program.custom is not None:
        return False
    ours = expected_metadata(program, 'ours')
    return ours != expected_metadata(program, 'vanilla') and apply_axis_entry(program, ours)


def judge(program: Program, found: list[Divergence], expect_intended: bool) -> None:
    lines = [f'[{tag}] {message}' for tag, message in found]
    if not SELF_CHECK:
        assert not found, f'{program}\n' + '\n'.join(lines)
        return
    # Self-check: vanilla as ours fails exactly the intended-difference checks.
    assert all(tag == 'intended' for tag, _ in found), f'{program}\n' + '\n'.join(lines)
    if expect_intended:
        assert found, f'intended difference not detected: {program}'


@pytest.mark.parametrize('program', ROWS, ids=[p.name for p in ROWS])
def test_rows(oracle: Pair, program: Program) -> None:
    vanilla, ours = oracle.run(program)
    judge(program, compare(program, vanilla, ours),
          'variables' in vanilla and has_intended_difference(program))


@pytest.mark.parametrize('program', SCENARIOS, ids=[p.name for p in SCENARIOS])
def test_e2e_regression_guards(oracle: Pair, program: Program) -> None:
    vanilla, ours = oracle.run(program)
    judge(program, compare_scenario(program, vanilla, ours), expect_intended=False)


PROBES = probes.load()


@pytest.mark.parametrize('name', sorted(PROBES))
def test_probes(oracle: Pair, name: str) -> None:
    """Hand-written user programs (tests/oracle/probes): as vanilla, or fixed."""
    program = Program(f'probe {name}', custom=f'probe:{name}')
    vanilla, ours = oracle.run(program)
    found = probes.compare(PROBES[name], vanilla['probe'], ours['probe'])
    judge(program, [(t, m) for t, m in found if t != 'vacuous'],
          expect_intended=PROBES[name].fixed is not None)
    vacuous = [m for t, m in found if t == 'vacuous']
    assert SELF_CHECK or not vacuous, vacuous


@settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture,
                                 HealthCheck.data_too_large])
@given(program=programs())
def test_random_programs(oracle: Pair, program: Program) -> None:
    vanilla, ours = oracle.run(program)
    judge(program, compare(program, vanilla, ours),
          'variables' in vanilla and has_intended_difference(program))
