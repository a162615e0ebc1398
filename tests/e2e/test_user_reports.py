"""The reports from google/flax#5112, end to end on the installed flax.

Every test here fails on vanilla flax 0.12.12 except
test_named_layer_axis_sharded_by_the_gspmd_recipe, a regression guard that
vanilla passes: tests/oracle/test_readme.py runs this file under vanilla
(``make oracle-long``) and requires exactly that. test_side_by_side.py runs
the same scenarios under both.
"""

from __future__ import annotations

import pytest

from tests.support import scenarios
from tests.support.checks import metadata_problems, optimizer_problems


def run(name: str, **kwargs: object) -> dict:
    """Run a scenario; skip (with the reason) where the devices form no mesh."""
    report = scenarios.run(name, **kwargs)
    if 'no_mesh' in report:
        pytest.skip(report['no_mesh'])
    return report


@pytest.mark.parametrize('axis_type', ['auto', 'explicit'])
@pytest.mark.parametrize('layers', [1, 3, 4])
# Under nnx.jit, the same six in make test-full (slow): each compiles afresh.
@pytest.mark.parametrize('under_jit', [False, pytest.param(True, marks=pytest.mark.slow)])
def test_vmap_stack_then_optimizer(layers: int, axis_type: str, under_jit: bool) -> None:
    """L=1 and L=3 crashed, L=4 (divisible by 'tensor') silently mis-sharded."""
    report = run('vmap_stack_with_optimizer', layers=layers,
                           axis_type=axis_type, under_jit=under_jit)
    assert metadata_problems(report) == []
    assert optimizer_problems(report) == []
    kernel = report['params']['up/kernel']
    assert kernel['out_sharding'] == [None, 'fsdp', 'tensor']
    assert kernel['spec'] == [None, 'fsdp', 'tensor']


@pytest.mark.parametrize('axis_type', ['auto', 'explicit'])
def test_named_layer_axis_sharded_by_the_gspmd_recipe(axis_type: str) -> None:
    report = run('named_layers_under_jit', axis_type=axis_type)
    assert metadata_problems(report) == []
    kernel = report['params']['up/kernel']
    assert kernel['out_sharding'] == ['layers', 'fsdp', 'tensor']
    assert kernel['spec'] == ['layers', 'fsdp', 'tensor']


@pytest.mark.parametrize('axis_type', ['auto', 'explicit'])
@pytest.mark.parametrize('optimizer', ['adamw', 'adafactor'])
def test_logical_names_model_and_optimizer_created_in_jit(axis_type: str, optimizer: str) -> None:
    """The thread's repro: logical names + sharding_rules, all inside nnx.jit."""
    report = run('logical_names_in_jit', axis_type=axis_type, optimizer=optimizer)
    assert metadata_problems(report) == []
    kernel = report['params']['linear/kernel']
    assert kernel['out_sharding'] == [None, 'embed', 'mlp']
    assert kernel['spec'] == [None, 'fsdp', 'tensor']
    if optimizer == 'adamw':
        assert optimizer_problems(report) == []


def test_train_steps_keep_parameter_and_state_shardings() -> None:
    # Auto axes only: on Explicit meshes the FSDP matmuls themselves need
    # out_sharding annotations (JAX refuses the ambiguous contraction),
    # which is independent of this fix.
    report = run('train_steps_keep_shardings', axis_type='auto')
    assert metadata_problems(report) == []
    assert optimizer_problems(report) == []
    before = report['before']
    assert {k: v['spec'] for k, v in report['params'].items()} == {
        k: v['spec'] for k, v in before['params'].items()}
    assert {k: v['spec'] for k, v in report['opt_state'].items()} == {
        k: v['spec'] for k, v in before['opt_state'].items()}
    losses = report['losses']
    assert len(losses) == 3 and losses[-1] < losses[0]
