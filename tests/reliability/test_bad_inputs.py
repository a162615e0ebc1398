"""What our flax does with bad sharding inputs (docs/bad-inputs.md).

Every case below is one cell of the table in docs/bad-inputs.md: a bad input
run on one flax, summarised as an outcome (the exception's type and message,
or what the program got). The tests

- pin ours' outcome (exception type, key parts of the message, or the
  result), and that the model and optimizer living next to the bad input are
  unchanged afterwards;
- run the same cases under vanilla flax 0.12.12 (the ``vanilla_flax`` fixture
  of tests/conftest.py, one subprocess for all cases) and require the same
  outcome, exception type and message, for every case where the series must
  behave as vanilla (I0, the drop-in rule), and a different one only where
  the #5112 fix deliberately changes it.

``python -m tests.reliability.test_bad_inputs`` prints the outcomes of all
cases as JSON for the flax it imports.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable

os.environ.setdefault('JAX_PLATFORMS', 'cpu')
os.environ.setdefault('XLA_FLAGS', '--xla_force_host_platform_device_count=8')

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import optax  # noqa: E402
import pytest  # noqa: E402
from flax import nnx  # noqa: E402

from tests.support import scenarios  # noqa: E402
from tests.support.devices import CPU_DEVICES, simulated_cpu_env  # noqa: E402
from tests.support.scenarios import exact_mesh  # noqa: E402
from tests.support.shared import computed_once  # noqa: E402

REPO_ROOT = Path(__file__).resolve().parents[2]
AXES = ('fsdp', 'tensor')
Snapshot = dict[tuple[Any, ...], tuple[Any, ...]]
Outcome = dict[str, str]


class OneParam(nnx.Module):
    """A single (16, 32) parameter with the given sharding annotations."""

    def __init__(self, out_sharding: Any, eager_sharding: bool = True,
                 sharding_rules: tuple[tuple[str, str], ...] | None = None,
                 **metadata: Any):
        if sharding_rules is not None:
            metadata['sharding_rules'] = sharding_rules
        self.w = nnx.Param(jnp.ones((16, 32)), out_sharding=out_sharding,
                           eager_sharding=eager_sharding, **metadata)


class RawVmapped(nnx.Module):
    """A (3, 16) parameter stacked by a raw ``jax.vmap``: stale ``('fsdp',)``."""

    def __init__(self) -> None:
        def make(x: jax.Array) -> nnx.Param:
            return nnx.Param(x, out_sharding=('fsdp',), eager_sharding=False)

        self.w = jax.vmap(make)(jnp.ones((3, 16)))


def mesh_2x4() -> jax.sharding.Mesh:
    return exact_mesh((2, 4), AXES, 'auto')


def mesh_layers(axis_type: str = 'auto') -> jax.sharding.Mesh:
    return exact_mesh((2, 2, 2), ('layers', *AXES), axis_type)


def snapshot(*nodes: Any) -> Snapshot:
    """Every Variable of ``nodes``: value bytes, dtype, shape, sharding, metadata."""
    result: Snapshot = {}
    for index, node in enumerate(nodes):
        for path, var in nnx.to_flat_state(nnx.state(node)):
            value = var.get_value()
            result[(index, *path)] = (
                np.asarray(value).tobytes(), str(value.dtype), value.shape,
                getattr(value, 'sharding', None), dict(var.get_metadata()))
    return result


def spec(value: Any) -> Any:
    return value.sharding.spec


def mu_w(optimizer: nnx.Optimizer) -> tuple[Any, Any]:
    """Adam's ``mu`` of ``w``: its array's spec and its ``out_sharding`` metadata."""
    mu = optimizer.opt_state[0].mu.w
    return spec(mu.get_value()), mu.get_metadata().get('out_sharding')


def adam(model: nnx.Module) -> nnx.Optimizer:
    return nnx.Optimizer(model, optax.adam(1e-3), wrt=nnx.Param)


# The cases: one per cell of the table ------------------------------------------
# Each returns something whose repr() is the outcome, or raises.


def _1a_create() -> Any:
    with jax.set_mesh(mesh_2x4()):
        return spec(OneParam(('fsdp', 'tensor', None)).w.get_value())


def _1a_abstract_model() -> Any:
    mesh = mesh_2x4()
    return nnx.get_abstract_model(lambda: OneParam(('fsdp', 'tensor', None)), mesh)[1]


def _1a_lazy_consumers() -> Any:
    mesh = mesh_2x4()
    with jax.set_mesh(mesh):
        state = nnx.state(OneParam(('fsdp', 'tensor', None), eager_sharding=False))
        return (nnx.get_partition_spec(state).w.get_value(),
                nnx.get_named_sharding(state, mesh).w.get_value().spec)


def _1a_lazy_optimizer() -> Any:
    with jax.set_mesh(mesh_2x4()):
        return mu_w(adam(OneParam(('fsdp', 'tensor', None), eager_sharding=False)))


def _1b_short_spec() -> Any:
    mesh = mesh_2x4()
    with jax.set_mesh(mesh):
        model = OneParam(('fsdp',))
        state = nnx.state(model)
        return (spec(model.w.get_value()), mu_w(adam(model)),
                nnx.get_partition_spec(state).w.get_value(),
                nnx.get_named_sharding(state, mesh).w.get_value().spec)


def _2_create() -> Any:
    with jax.set_mesh(mesh_2x4()):
        return OneParam(('fsdp', 'bogus'))


def _2_lazy() -> Any:
    with jax.set_mesh(mesh_2x4()):
        model = OneParam(('fsdp', 'bogus'), eager_sharding=False)
        return nnx.get_partition_spec(nnx.state(model)).w.get_value(), mu_w(adam(model))


def _2_named_sharding() -> Any:
    mesh = mesh_2x4()
    with jax.set_mesh(mesh):
        return nnx.get_named_sharding(
            nnx.state(OneParam(('fsdp', 'bogus'), eager_sharding=False)), mesh)


def _three_layers_named() -> scenarios.Block:
    return scenarios.stacked_blocks(3, 16, {nnx.PARTITION_NAME: 'layers'})


def _down_kernel(model: scenarios.Block) -> Any:
    kernel = model.down.kernel
    return kernel.get_metadata()['out_sharding'], spec(kernel.get_value())


def _3_eager() -> Any:
    with jax.set_mesh(mesh_layers()):
        return _down_kernel(_three_layers_named())


def _3_jit() -> Any:
    with jax.set_mesh(mesh_layers()):
        return _down_kernel(nnx.jit(_three_layers_named)())


def _3_abstract_model() -> Any:
    mesh = mesh_layers()
    return spec(nnx.get_abstract_model(_three_layers_named, mesh)[1].down.kernel.get_value())


def _3_device_put() -> Any:
    mesh = mesh_layers()
    with jax.set_mesh(mesh):
        state = nnx.state(_three_layers_named())
        return jax.device_put(state, nnx.get_named_sharding(state, mesh))


def _3_recipe_auto() -> Any:
    with jax.set_mesh(mesh_layers()):
        @nnx.jit
        def build() -> scenarios.Block:
            model = _three_layers_named()
            state = nnx.state(model)
            nnx.update(model, jax.lax.with_sharding_constraint(
                state, nnx.get_partition_spec(state)))
            return model

        return _down_kernel(build())


def _3_recipe_explicit() -> Any:
    with jax.set_mesh(mesh_layers('explicit')):
        @nnx.jit
        def build() -> scenarios.Block:
            model = _three_layers_named()
            state = nnx.state(model)
            nnx.update(model, jax.sharding.reshard(state, nnx.get_partition_spec(state)))
            return model

        return _down_kernel(build())


def _three_tp_layers_on_fsdp() -> nnx.Linear:
    """Three tensor-parallel layers stacked on the 'fsdp' axis (of size 2)."""
    @nnx.split_rngs(splits=3)
    @nnx.vmap(transform_metadata={nnx.PARTITION_NAME: 'fsdp'})
    def create(rngs: nnx.Rngs) -> nnx.Linear:
        init = nnx.with_partitioning(nnx.initializers.lecun_normal(), (None, 'tensor'))
        return nnx.Linear(16, 32, kernel_init=init, use_bias=False, rngs=rngs)

    return create(nnx.Rngs(0))


def _fsdp_stack_with_adam(axis_type: str) -> Any:
    """Adam for the stack, then one jitted step: the metadata and the specs
    of the kernel and of its state."""
    with jax.set_mesh(exact_mesh((2, 4), AXES, axis_type)):
        model = _three_tp_layers_on_fsdp()
        optimizer = adam(model)

        @nnx.jit
        def step(model: nnx.Linear, optimizer: nnx.Optimizer) -> None:
            optimizer.update(model, jax.tree.map(jnp.ones_like, nnx.state(model, nnx.Param)))

        step(model, optimizer)
        mu = optimizer.opt_state[0].mu.kernel
        return (model.kernel.get_metadata()['out_sharding'], spec(model.kernel.get_value()),
                spec(mu.get_value()), mu.get_metadata()['out_sharding'])


def _3_fsdp_optimizer() -> Any:
    return _fsdp_stack_with_adam('auto')


def _3_fsdp_optimizer_explicit() -> Any:
    return _fsdp_stack_with_adam('explicit')


def _3_fsdp_sharded_init_explicit() -> Any:
    with jax.set_mesh(exact_mesh((2, 4), AXES, 'explicit')):
        @nnx.jit
        def build() -> nnx.Linear:
            model = _three_tp_layers_on_fsdp()
            state = nnx.state(model)
            nnx.update(model, jax.sharding.reshard(state, nnx.get_partition_spec(state)))
            return model

        return spec(build().kernel.get_value())


def _3_fsdp_device_put() -> Any:
    mesh = mesh_2x4()
    with jax.set_mesh(mesh):
        state = nnx.state(_three_tp_layers_on_fsdp())
        return jax.device_put(state, nnx.get_named_sharding(state, mesh))


def _4_create() -> Any:
    with jax.set_mesh(mesh_2x4()):
        return OneParam(('fsdp', 'fsdp'))


def _4_named_sharding() -> Any:
    mesh = mesh_2x4()
    with jax.set_mesh(mesh):
        return nnx.get_named_sharding(
            nnx.state(OneParam(('fsdp', 'fsdp'), eager_sharding=False)), mesh)


def _4_stack_on_used_axis() -> Any:
    with jax.set_mesh(mesh_2x4()):
        return _down_kernel(scenarios.stacked_blocks(2, 16, {nnx.PARTITION_NAME: 'fsdp'}))


def _4_stack_on_used_axis_named_sharding() -> Any:
    mesh = mesh_2x4()
    with jax.set_mesh(mesh):
        model = scenarios.stacked_blocks(2, 16, {nnx.PARTITION_NAME: 'fsdp'})
        return nnx.get_named_sharding(nnx.state(model), mesh)


RULES = (('embed', 'fsdp'),)  # 'mlp' has no rule


def _5_create() -> Any:
    with jax.set_mesh(mesh_2x4()):
        return OneParam(('embed', 'mlp'), sharding_rules=RULES)


def _5_partition_spec() -> Any:
    with jax.set_mesh(mesh_2x4()):
        model = OneParam(('embed', 'mlp'), eager_sharding=False, sharding_rules=RULES)
        return nnx.get_partition_spec(nnx.state(model)).w.get_value()


def _5_named_sharding() -> Any:
    mesh = mesh_2x4()
    with jax.set_mesh(mesh):
        model = OneParam(('embed', 'mlp'), eager_sharding=False, sharding_rules=RULES)
        return nnx.get_named_sharding(nnx.state(model), mesh)


def _6_consumers() -> Any:
    mesh = mesh_2x4()
    with jax.set_mesh(mesh):
        state = nnx.state(RawVmapped())
        return (nnx.get_partition_spec(state).w.get_value(),
                nnx.get_named_sharding(state, mesh).w.get_value().spec,
                spec(nnx.get_abstract_model(RawVmapped, mesh)[1].w.get_value()))


def _6_device_put() -> Any:
    mesh = mesh_2x4()
    with jax.set_mesh(mesh):
        state = nnx.state(RawVmapped())
        return jax.device_put(state, nnx.get_named_sharding(state, mesh))


def _6_optimizer() -> Any:
    with jax.set_mesh(mesh_2x4()):
        return mu_w(adam(RawVmapped()))


def _6_find_sharding_mismatches() -> Any:
    return nnx.find_sharding_mismatches


def _7_optimizer_sharding_too_long() -> Any:
    with jax.set_mesh(mesh_2x4()):
        return mu_w(adam(OneParam(('fsdp', 'tensor'),
                                  optimizer_sharding=('fsdp', 'tensor', None))))


def _7_stale_too_long_in_jit() -> Any:
    with jax.set_mesh(mesh_2x4()):
        @nnx.jit
        def build() -> nnx.Optimizer:
            model = OneParam(('fsdp', 'tensor'))
            model.w.set_metadata(out_sharding=('fsdp', 'tensor', None))
            return adam(model)

        return mu_w(build())


def _7_stale_too_long_eager() -> Any:
    with jax.set_mesh(mesh_2x4()):
        model = OneParam(('fsdp', 'tensor'))
        model.w.set_metadata(out_sharding=('fsdp', 'tensor', None))
        return mu_w(adam(model))


def _scan_through(stack_metadata: dict | None, scan_metadata: dict) -> Any:
    """Scan over a 2-layer stack; returns (or attaches to the error) its metadata after."""
    with jax.set_mesh(mesh_layers()):
        model = scenarios.stacked_blocks(2, 16, stack_metadata)

        @nnx.scan(in_axes=(0, nnx.Carry), out_axes=nnx.Carry,
                  transform_metadata=scan_metadata)
        def forward(block: scenarios.Block, x: jax.Array) -> jax.Array:
            return block(x)

        try:
            forward(model, jnp.ones((4, 16)))
        except ValueError as error:
            after = ValueError(f'{error} [after: {model.down.kernel.out_sharding}]')
            for note in getattr(error, '__notes__', ()):
                after.add_note(note)
            raise after from None
        return model.down.kernel.out_sharding


def _8_wrong_name() -> Any:
    return _scan_through({nnx.PARTITION_NAME: 'layers'}, {nnx.PARTITION_NAME: 'other'})


def _8_name_on_unnamed_stack() -> Any:
    return _scan_through(None, {nnx.PARTITION_NAME: 'layers'})


# Every function named _<row>_<what> above, in order: '1a_create', ...
CASES: dict[str, Callable[[], Any]] = {
    name[1:]: fn for name, fn in list(globals().items())
    if callable(fn) and name[:2] in {f'_{row}' for row in range(1, 9)}
}


def outcome(call: Callable[[], Any]) -> Outcome:
    try:
        result = call()
    except Exception as error:  # noqa: BLE001 -- the outcome is the point
        found: Outcome = {'raised': type(error).__name__, 'message': str(error)}
        # PEP 678 notes, but JAX's own one about filtered traceback frames.
        notes = [note for note in getattr(error, '__notes__', ())
                 if not note.startswith('-' * 20)]
        if notes:
            found['notes'] = '\n'.join(notes)
        return found
    return {'result': repr(result)}


def all_outcomes() -> dict[str, Outcome]:
    return {name: outcome(call) for name, call in CASES.items()}


# Where ours must differ from vanilla (the #5112 fix), and why; every other
# case must give vanilla's outcome exactly (I0).
DIFFERS_FROM_VANILLA = {
    '3_fsdp_optimizer': 'works: the state follows the array, layer axis unsharded (I4)',
    '3_fsdp_optimizer_explicit': 'works: the state follows the array, layer axis unsharded (I4)',
    '7_stale_too_long_eager': 'works: the state follows the array (I4)',
    '8_name_on_unnamed_stack': 'the stack has its None entry (I1, I2)',
}


# Ours -------------------------------------------------------------------------


@pytest.fixture(scope='module')
def ours(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Outcome]:
    """Outcomes on ours; a good model and optimizer next to them stay unchanged.
    Computed once per test run (half a minute of CPU), shared by the workers."""
    if jax.device_count() != CPU_DEVICES:
        pytest.skip(f'{jax.device_count()} devices: the cases and the outcomes the page '
                    f'quotes are those of {CPU_DEVICES} devices (2x4 and 2x2x2 meshes, '
                    'axes of size 2 that 3 rows do not divide); vanilla runs them on '
                    f'{CPU_DEVICES} simulated CPU devices')
    return computed_once('bad-inputs-ours', outcomes_on_ours, tmp_path_factory)


def outcomes_on_ours() -> dict[str, Outcome]:
    with jax.set_mesh(mesh_2x4()):
        model = scenarios.stacked_blocks(4, 16)
        optimizer = nnx.Optimizer(model, optax.adamw(1e-3), wrt=nnx.Param)
    before = snapshot(model, optimizer)
    outcomes = all_outcomes()
    assert snapshot(model, optimizer) == before
    return outcomes


def without_notes(outcome_: Outcome) -> Outcome:
    """The outcome as code catching the exception sees it: type and message."""
    return {k: v for k, v in outcome_.items() if k != 'notes'}


def raised(outcome_: Outcome, kind: str, *parts: str) -> None:
    assert outcome_.get('raised') == kind, outcome_
    for part in parts:
        assert part in outcome_['message'], (part, outcome_['message'])


def test_1a_out_sharding_too_long(ours: dict[str, Outcome]) -> None:
    for case in ('1a_create', '1a_abstract_model'):
        raised(ours[case], 'ValueError',
               'One of with_sharding_constraint arguments is incompatible',
               "spec=P('fsdp', 'tensor', None)) is only valid for values of rank at least 3, "
               'but was applied to a value of rank 2')
    assert ours['1a_lazy_consumers'] == {
        'result': "(P('fsdp', 'tensor', None), P('fsdp', 'tensor', None))"}
    # The state follows the replicated array and keeps the declared metadata.
    assert ours['1a_lazy_optimizer'] == {'result': "(P(), ('fsdp', 'tensor', None))"}


def test_1b_short_spec_is_accepted_everywhere(ours: dict[str, Outcome]) -> None:
    assert ours['1b_short_spec'] == {'result': (
        "(P('fsdp',), (P('fsdp',), ('fsdp',)), "
        "P('fsdp',), P('fsdp',))")}


def test_2_axis_not_in_mesh(ours: dict[str, Outcome]) -> None:
    for case in ('2_create', '2_named_sharding'):
        assert without_notes(ours[case]) == {'raised': 'ValueError', 'message': (
            "Resource axis: bogus of P('fsdp', 'bogus') is not found in mesh: "
            "('fsdp', 'tensor').")}
    # No mesh to check against, and the optimizer copies the names.
    assert ours['2_lazy'] == {'result': (
        "(P('fsdp', 'bogus'), (P(), ('fsdp', 'bogus')))")}


def test_3_stacked_dim_not_divisible(ours: dict[str, Outcome]) -> None:
    declared = "(('layers', 'tensor', 'fsdp'), P(None, 'tensor', 'fsdp'))"
    # The transform only declares the layout: nothing is resharded, nothing raises.
    for case in ('3_eager', '3_jit', '3_recipe_auto'):
        assert ours[case] == {'result': declared}, case
    assert ours['3_abstract_model'] == {'result': "P('layers', 'tensor', 'fsdp')"}
    raised(ours['3_device_put'], 'IndivisibleError',
           'implies that array axis 0 is partitioned 2 times, but the dimension size is 3')
    raised(ours['3_recipe_explicit'], 'ValueError',
           "Sharding spec ('layers',) implies that array axis 0 is partitioned 2 times, "
           'but does not evenly divide the dimension size 3')


def test_3_bad_named_layout_surfaces_at_the_sharded_init(ours: dict[str, Outcome]) -> None:
    # The optimizer follows the arrays: it builds and trains with the layer
    # axis unsharded while the metadata (of the kernel and its state) says 'fsdp'.
    for case in ('3_fsdp_optimizer', '3_fsdp_optimizer_explicit'):
        assert ours[case] == {'result': (
            "(('fsdp', None, 'tensor'), P(None, None, 'tensor'), "
            "P(None, None, 'tensor'), ('fsdp', None, 'tensor'))")}, case
    # Applying the declared layout raises JAX's error, as on vanilla.
    raised(ours['3_fsdp_sharded_init_explicit'], 'ValueError',
           "Sharding spec ('fsdp',) implies that array axis 0 is partitioned 2 times, "
           'but does not evenly divide the dimension size 3')
    raised(ours['3_fsdp_device_put'], 'IndivisibleError',
           'implies that array axis 0 is partitioned 2 times, but the dimension size is 3')


def test_4_same_axis_twice(ours: dict[str, Outcome]) -> None:
    for case in ('4_create', '4_named_sharding', '4_stack_on_used_axis_named_sharding'):
        raised(ours[case], 'DuplicateSpecError', 'has duplicate entries for `fsdp`')
    assert ours['4_stack_on_used_axis'] == {
        'result': "(('fsdp', 'tensor', 'fsdp'), P(None, 'tensor', 'fsdp'))"}


def test_5_logical_name_missing_from_rules(ours: dict[str, Outcome]) -> None:
    for case in ('5_create', '5_named_sharding'):
        assert without_notes(ours[case]) == {'raised': 'ValueError', 'message': (
            "Resource axis: mlp of P('fsdp', 'mlp') is not found in mesh: "
            "('fsdp', 'tensor').")}
    assert ours['5_partition_spec'] == {'result': "P('fsdp', 'mlp')"}


def test_6_raw_vmap_stale_metadata(ours: dict[str, Outcome]) -> None:
    # Short spec: positional, so 'fsdp' lands on the stacked axis of size 3.
    assert ours['6_consumers'] == {'result': (
        "(P('fsdp',), P('fsdp',), P('fsdp',))")}
    raised(ours['6_device_put'], 'IndivisibleError',
           'implies that array axis 0 is partitioned 2 times, but the dimension size is 3')
    assert ours['6_optimizer'] == {'result': "(P(), ('fsdp',))"}
    raised(ours['6_find_sharding_mismatches'], 'AttributeError',
           'find_sharding_mismatches')


def test_7_optimizer_spec_longer_than_rank(ours: dict[str, Outcome]) -> None:
    # JAX's error (the same as vanilla's, test_same_as_vanilla), with the note
    # of the state Variable created with that spec (optimizer_sharding
    # becomes the state's out_sharding)
    for case in ('7_optimizer_sharding_too_long', '7_stale_too_long_in_jit'):
        raised(ours[case], 'ValueError',
               'One of with_sharding_constraint arguments is incompatible',
               'is only valid for values of rank at least 3, but was applied to a value of rank 2')
    # one note: the parameter's path and the field the user wrote
    assert ours['7_optimizer_sharding_too_long']['notes'] == (
        "Raised for the optimizer state of the Param at 'w' of shape (16, 32) "
        "with optimizer_sharding=('fsdp', 'tensor', None).")
    assert ours['7_stale_too_long_in_jit']['notes'] == (
        "Raised for the optimizer state of the Param at 'w' of shape (16, 32) "
        "with out_sharding=('fsdp', 'tensor', None).")
    # A concrete array's sharding is known: the state follows it, and keeps the
    # metadata as declared, like the parameter.
    assert ours['7_stale_too_long_eager'] == {
        'result': "(P('fsdp', 'tensor'), ('fsdp', 'tensor', None))"}


def test_8_partition_name_mismatch_in_pass_through(ours: dict[str, Outcome]) -> None:
    # Raised before anything is mutated: the metadata after is the one before.
    assert without_notes(ours['8_wrong_name']) == {'raised': 'ValueError', 'message': (
        "Expected to remove 'other' at index 0 from ('layers', 'tensor', 'fsdp'), "
        "but found 'layers'. [after: ('layers', 'tensor', 'fsdp')]")}
    assert without_notes(ours['8_name_on_unnamed_stack']) == {
        'raised': 'ValueError', 'message': (
            "Expected to remove 'layers' at index 0 from (None, 'tensor', 'fsdp'), "
            "but found None. [after: (None, 'tensor', 'fsdp')]")}
    # One note: the Variable's path and spec, the axis, and that an unnamed
    # stack has None there (the whole note, as NOTES has it).
    for case in ('8_wrong_name', '8_name_on_unnamed_stack'):
        assert ours[case]['notes'] == NOTES[case] + '.', ours[case]


# Where nnx's own code meets a sharding error (JAX's, or remove_axis's own):
# one note naming the Variable (I6).
REMOVE_AXIS_ADVICE = ('Name axis 0 as it was stacked (None for a stack made without a name): '
                      'transform_metadata={nnx.PARTITION_NAME: ...}')
NOTES = {
    '1a_create': "a new Param of shape (16, 32) with out_sharding=('fsdp', 'tensor', None)",
    '1a_abstract_model': "a new Param of shape (16, 32) with "
                         "out_sharding=('fsdp', 'tensor', None)",
    '2_create': "a new Param of shape (16, 32) with out_sharding=('fsdp', 'bogus')",
    '2_named_sharding': "Param at 'w' of shape (16, 32) with out_sharding=('fsdp', 'bogus')",
    '4_create': "a new Param of shape (16, 32) with out_sharding=('fsdp', 'fsdp')",
    '4_named_sharding': "Param at 'w' of shape (16, 32) with out_sharding=('fsdp', 'fsdp')",
    '4_stack_on_used_axis_named_sharding': (
        "Param at 'down/kernel' of shape (2, 32, 16) with "
        "out_sharding=('fsdp', 'tensor', 'fsdp')"),
    '5_create': "a new Param of shape (16, 32) with out_sharding=('embed', 'mlp'), "
                "sharding_rules=(('embed', 'fsdp'),)",
    '5_named_sharding': "Param at 'w' of shape (16, 32) with out_sharding=('embed', 'mlp'), "
                        "sharding_rules=(('embed', 'fsdp'),)",
    # Inside the transform: the Variable's path in the scanned module, no shape
    # (its value is the body's slice), the transform's axis.
    '8_wrong_name': (
        "Raised for the Param at 'down/kernel' with out_sharding=('layers', 'tensor', 'fsdp'). "
        + REMOVE_AXIS_ADVICE),
    '8_name_on_unnamed_stack': (
        "Raised for the Param at 'down/kernel' with out_sharding=(None, 'tensor', 'fsdp'). "
        + REMOVE_AXIS_ADVICE),
}


# The note's advice fits the error: a name that is not a mesh axis; none else.
ADVICE = {
    '2_create': "'bogus' is not an axis of the mesh, whose axes are ('fsdp', 'tensor')",
    '2_named_sharding': "'bogus' is not an axis of the mesh",
    '5_create': "'mlp' is not an axis of the mesh",
    '5_named_sharding': "'mlp' is not an axis of the mesh",
}


def test_sharding_errors_carry_a_note_naming_the_variable(
        ours: dict[str, Outcome]) -> None:
    for case, part in NOTES.items():
        assert part in ours[case].get('notes', ''), (case, ours[case])
    for case, part in ADVICE.items():
        assert part in ours[case]['notes'], (case, ours[case])
    for case, outcome_ in ours.items():
        notes = outcome_.get('notes', '')
        # the stack's name is the advice of row 8's note only
        assert ('transform_metadata={nnx.PARTITION_NAME' in notes) == case.startswith('8_'), case
        assert 'OptVariable' not in notes, case
        # one note per error, with advice only where ADVICE says
        assert notes.count('Raised for') <= 1, (case, notes)
        if case not in ADVICE:
            assert 'axis of the mesh' not in notes, (case, notes)


# Side by side with vanilla -------------------------------------------------------


@pytest.fixture(scope='module')
def vanilla(vanilla_flax: Path, tmp_path_factory: pytest.TempPathFactory
            ) -> dict[str, Outcome]:
    """The same cases under vanilla flax 0.12.12, in one subprocess, once per
    test run (shared by the workers)."""
    def outcomes() -> dict[str, Outcome]:
        env = simulated_cpu_env(
            PYTHONPATH=os.pathsep.join([str(vanilla_flax), str(REPO_ROOT)]))
        result = subprocess.run(
            [sys.executable, '-m', 'tests.reliability.test_bad_inputs'], cwd=REPO_ROOT,
            env=env, capture_output=True, text=True, timeout=300)
        assert result.returncode == 0, result.stderr[-3000:]
        report = json.loads(result.stdout.strip().splitlines()[-1])
        assert report['flax_version'] == '0.12.12'
        return report['outcomes']
    return computed_once('bad-inputs-vanilla', outcomes, tmp_path_factory)


@pytest.mark.parametrize('case', sorted(set(CASES) - set(DIFFERS_FROM_VANILLA)))
def test_same_as_vanilla(case: str, ours: dict[str, Outcome],
                         vanilla: dict[str, Outcome]) -> None:
    # Same exception type and message; ours may add a note (I6).
    assert without_notes(ours[case]) == vanilla[case]
    assert set(ours[case]) - set(vanilla[case]) <= {'notes'}


def test_differs_from_vanilla_only_by_the_fix(ours: dict[str, Outcome],
                                              vanilla: dict[str, Outcome]) -> None:
    assert set(vanilla) == set(ours)
    assert not [case for case in NOTES if 'notes' in vanilla[case]]
    for case in DIFFERS_FROM_VANILLA:
        assert ours[case] != vanilla[case], case
    # JAX's error on a concrete array whose sharding is known.
    for case in ('7_stale_too_long_eager',):
        raised(vanilla[case], 'ValueError',
               'One of with_sharding_constraint arguments is incompatible',
               'is only valid for values of rank at least 3, but was applied to a value of rank 2')
    # Vanilla shards the optimizer state by the declared layout at nnx.Optimizer.
    raised(vanilla['3_fsdp_optimizer'], 'IndivisibleError',
           'implies that array axis 0 is partitioned 2 times, but the dimension size is 3')
    raised(vanilla['3_fsdp_optimizer_explicit'], 'ValueError',
           "Sharding spec ('fsdp',) implies that array axis 0 is partitioned 2 times, "
           'but does not evenly divide the dimension size 3')
    # Vanilla's stack has no entry for the layer axis: found the per-layer one.
    assert vanilla['8_name_on_unnamed_stack'] == {'raised': 'ValueError', 'message': (
        "Expected to remove 'layers' at index 0 from ('tensor', 'fsdp'), "
        "but found 'tensor'. [after: ('tensor', 'fsdp')]")}


# docs/bad-inputs.md quotes exceptions (in ``text`` blocks and in backticks):
# each one, its fragments between ``...``, must be the outcome of a case on
# vanilla or ours (a quoted note: one of ours' PEP 678 notes).
EXCEPTION = re.compile(r'^(?:[\w.]+\.)?(\w*(?:Error|Exception)): (.*)$')


def quoted_exceptions(text: str) -> list[tuple[str, str]]:
    """Exceptions docs/bad-inputs.md quotes: in ``text`` blocks and in backticks."""
    quoted: list[tuple[str, str]] = []
    for block in re.findall(r'```text\n(.*?)```', text, re.S):
        current: list[str] | None = None
        for line in block.splitlines():
            m = EXCEPTION.match(line)
            if m:
                current = [m.group(1), m.group(2)]
                quoted.append(current)  # type: ignore[arg-type]
            elif current is not None and line.strip():
                current[1] += ' ' + line.strip()
            else:
                current = None
    for span in re.findall(r'`([^`]+)`', re.sub(r'```.*?```', '', text, flags=re.S)):
        m = EXCEPTION.match(span)
        if m:
            quoted.append([m.group(1), m.group(2)])  # type: ignore[arg-type]
    return [(kind, message) for kind, message in quoted]



def test_doc_quotes_real_outcomes(ours: dict[str, Outcome],
                                  vanilla: dict[str, Outcome]) -> None:
    text = (REPO_ROOT / 'docs' / 'bad-inputs.md').read_text()
    quoted = quoted_exceptions(text)
    assert len(quoted) >= 5, quoted
    notes = lambda o: o.get('notes') if isinstance(o.get('notes'), str) else ' '.join(  # noqa: E731
        o.get('notes', []))
    # what Python prints: the message (without row 8's ``[after: ...]`` of
    # _scan_through), then the notes
    message = lambda o: re.sub(r' \[after: .*\]$', '', o['message'])  # noqa: E731
    raised = [(o['raised'], f'{message(o)} {notes(o)}')
              for outcomes in (vanilla, ours) for o in outcomes.values() if 'raised' in o]
    flat = lambda s: ' '.join(s.split())  # noqa: E731
    missing = []
    for kind, message in quoted:
        fragments = [flat(f).strip(' ,.():') for f in message.split('...')]
        fragments = [f for f in fragments if len(f) > 3]
        if not any(kind == got and all(f in flat(text_) for f in fragments)
                   for got, text_ in raised):
            missing.append(f'{kind}: {message}')
    assert not missing, 'docs/bad-inputs.md quotes outcomes no case gives:\n' + '\n'.join(missing)


if __name__ == '__main__':
    import flax

    print(json.dumps({'flax_version': flax.__version__, 'outcomes': all_outcomes()}))
