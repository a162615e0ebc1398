"""nnx.Optimizer side by side: vanilla flax 0.12.12 and ours on the same programs.

Where vanilla is right (a Python-scalar parameter, a spec that names no mesh
axis, malformed rules) ours gives its outcome, plus a note; where the
metadata is stale (#5112) ours places each state leaf like its parameter.
The programs are in tests/reliability/optimizer_rows.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from flaxpq.project import REPO_ROOT
from tests.support.devices import simulated_cpu_env
from tests.support.shared import computed_once


def run_rows(vanilla: Path | None) -> dict[str, Any]:
    path = [str(REPO_ROOT)] if vanilla is None else [str(vanilla), str(REPO_ROOT)]
    # The rows are programs on 8 simulated CPU devices (2x4 and 4x2 meshes).
    env = simulated_cpu_env(PYTHONPATH=os.pathsep.join(path))
    result = subprocess.run([sys.executable, '-m', 'tests.reliability.optimizer_rows'],
                            env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


@pytest.fixture(scope='module')
def both(vanilla_flax: Path, tmp_path_factory: pytest.TempPathFactory
         ) -> tuple[dict[str, Any], dict[str, Any]]:
    """The rows on vanilla and on ours (a minute of CPU), once per test run."""
    vanilla, ours = computed_once(
        'optimizer-rows', lambda: [run_rows(vanilla_flax), run_rows(None)], tmp_path_factory)
    return vanilla, ours


def same_error(vanilla: dict[str, Any], ours: dict[str, Any]) -> None:
    assert 'error' in vanilla, vanilla
    assert (ours.get('error'), ours.get('message')) == (vanilla['error'], vanilla['message'])
    assert not ours['context'], 'a note builder raised while handling the error'


@pytest.mark.parametrize('optimizer', ['masked', 'chain_masked', 'multi_steps_masked', 'multi_transform'])
def test_state_under_masked_node_placeholders_is_sharded_like_its_parameter(
        both: tuple[dict[str, Any], dict[str, Any]], optimizer: str) -> None:
    vanilla, ours = (report['masked_state'][optimizer] for report in both)
    assert vanilla.get('error') or vanilla['mismatches'], 'vanilla no longer mis-shards this state'
    assert ours == {'mismatches': []}


def test_python_scalar_parameter_trains_as_on_vanilla(both: tuple[dict[str, Any], dict[str, Any]]) -> None:
    vanilla, ours = (report['python_scalar_param'] for report in both)
    assert 'error' not in vanilla, vanilla
    assert ours == vanilla


def test_declared_name_that_is_no_mesh_axis_fails_at_the_optimizer(
        both: tuple[dict[str, Any], dict[str, Any]]) -> None:
    vanilla, ours = (report['layer_name_not_a_mesh_axis'] for report in both)
    same_error(vanilla, ours)
    assert any("the optimizer state of the Param at 'kernel'" in note and "'layers' is not an axis" in note
               for note in ours['notes']), ours['notes']


def test_malformed_sharding_rules_fail_as_on_vanilla_with_a_note(
        both: tuple[dict[str, Any], dict[str, Any]]) -> None:
    vanilla, ours = (report['malformed_sharding_rules'] for report in both)
    same_error(vanilla, ours)
    assert any("sharding_rules={'x': 'a'}" in note for note in ours['notes']), ours['notes']


def test_optimizer_sharding_error_names_the_parameter_and_field(
        both: tuple[dict[str, Any], dict[str, Any]]) -> None:
    vanilla, ours = (report['optimizer_sharding_that_does_not_fit'] for report in both)
    same_error(vanilla, ours)
    assert any("the optimizer state of the Param at 'kernel' of shape (2, 8, 16) with "
               "optimizer_sharding=('b', 'a')" in note for note in ours['notes']), ours['notes']


def test_live_jitted_and_abstract_state_are_placed_like_their_parameters(
        both: tuple[dict[str, Any], dict[str, Any]]) -> None:
    vanilla, ours = (report['live_jit_abstract'] for report in both)
    assert vanilla['live'] != vanilla['param'], 'vanilla no longer mis-shards the live state'
    assert ours['live'] == ours['jit'] == ours['param']
    assert ours['abstract'] == ours['abstract_param']


@pytest.mark.parametrize('row', ['lbfgs_memory', 'lbfgs_memory_of_a_jax_vmap_stack',
                                 'lbfgs_memory_sharded_later', 'state_of_numpy_arrays',
                                 'state_of_a_parameter_in_host_memory',
                                 'optimizer_on_another_mesh', 'variable_holding_none'])
def test_state_whose_metadata_fits_is_sharded_as_on_vanilla(
        both: tuple[dict[str, Any], dict[str, Any]], row: str) -> None:
    vanilla, ours = (report[row] for report in both)
    assert 'error' not in vanilla, vanilla
    assert ours == vanilla


def test_named_sharding_of_a_tree_with_a_float_is_as_on_vanilla(
        both: tuple[dict[str, Any], dict[str, Any]]) -> None:
    vanilla, ours = (report['named_sharding_of_a_train_state'] for report in both)
    assert vanilla == {'lr': None, 'kernel': "P('a', 'b')", 'ema': ['P()', None]}, vanilla
    assert ours == vanilla


def test_spec_resolved_later_does_not_raise_at_the_optimizer(
        both: tuple[dict[str, Any], dict[str, Any]]) -> None:
    """An eager_sharding=False spec that does not resolve (an axis named
    twice) raises nothing at nnx.Optimizer, and the state is vanilla's."""
    vanilla, ours = (report['spec_resolved_later_names_an_axis_twice'] for report in both)
    assert 'error' not in vanilla, vanilla
    assert ours == vanilla


def test_factored_moments_of_a_short_spec_keep_their_optax_sharding(
        both: tuple[dict[str, Any], dict[str, Any]]) -> None:
    vanilla, ours = (report['adafactor_spec_shorter_than_the_parameter'] for report in both)
    assert 'does not evenly divide the dimension size 1' in vanilla.get('message', ''), vanilla
    assert 'error' not in ours, ours
    assert ours['made'] == ours['optax']
    assert ours['kernel'] == ['a', 'None']


def test_parameters_keep_their_layout_through_a_step(
        both: tuple[dict[str, Any], dict[str, Any]]) -> None:
    vanilla, ours = (report['named_stack_after_a_jitted_step'] for report in both)
    assert vanilla['before'] == ours['before'] == ['None', 'None', 'b']
    assert vanilla['after'] == ['a', 'None', 'b'], 'vanilla no longer moves the kernel'
    assert ours['after'] == ours['before']
    assert ours['loss'] == vanilla['loss']
    assert ours['sum'] == pytest.approx(vanilla['sum'], rel=1e-6)
