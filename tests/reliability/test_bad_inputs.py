"""Deliverable 4: what our flax does with bad sharding inputs (docs/bad-inputs.md).

Each test pins the behaviour of one row of the table: the exception type,
the message (Variable, path where known, shape, annotation, the fix), and that
the model and optimizer involved are unchanged afterwards (values, shardings,
metadata). Row 2 (a spec shorter than the array) is accepted at creation, as
JAX and upstream flax allow it, and rejected by the consumers.
"""

from __future__ import annotations

import os
from typing import Any, Callable

os.environ.setdefault('JAX_PLATFORMS', 'cpu')
os.environ.setdefault('XLA_FLAGS', '--xla_force_host_platform_device_count=8')

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import optax  # noqa: E402
import pytest  # noqa: E402
from flax import nnx  # noqa: E402

from tests.e2e.scenarios import exact_mesh  # noqa: E402
from tests.e2e import scenarios  # noqa: E402

AXES = ('fsdp', 'tensor')
Snapshot = dict[tuple[Any, ...], tuple[Any, ...]]


class OneParam(nnx.Module):
    """A single (16, 32) parameter with the given sharding annotations."""

    def __init__(self, out_sharding: tuple[Any, ...], eager_sharding: bool = True,
                 sharding_rules: tuple[tuple[str, str], ...] | None = None):
        rules = {} if sharding_rules is None else {'sharding_rules': sharding_rules}
        self.w = nnx.Param(jnp.ones((16, 32)), out_sharding=out_sharding,
                           eager_sharding=eager_sharding, **rules)


class RawVmapped(nnx.Module):
    """A (3, 16) parameter stacked by a raw ``jax.vmap``: stale ``('fsdp',)``."""

    def __init__(self) -> None:
        def make(x: jax.Array) -> nnx.Param:
            return nnx.Param(x, out_sharding=('fsdp',), eager_sharding=False)

        self.w = jax.vmap(make)(jnp.ones((3, 16)))


def mesh_2x4() -> jax.sharding.Mesh:
    return exact_mesh((2, 4), AXES, 'auto')


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


@pytest.fixture(scope='module')
def good() -> tuple[scenarios.Block, nnx.Optimizer]:
    """A correct stacked model and its adamw optimizer, living next to the bad input."""
    with jax.set_mesh(mesh_2x4()):
        model = scenarios.stacked_blocks(4, 16)
        return model, nnx.Optimizer(model, optax.adamw(1e-3), wrt=nnx.Param)


def raises(call: Callable[[], Any]) -> BaseException:
    """The exception ``call`` raises (fails the test if it raises none)."""
    with pytest.raises(Exception) as info:
        call()
    return info.value


# Row 1: wrong-rank out_sharding given by the user ---------------------------


def test_out_sharding_too_long(good: tuple[Any, Any]) -> None:
    before = snapshot(*good)
    with jax.set_mesh(mesh_2x4()):
        error = raises(lambda: OneParam(('fsdp', 'tensor', None)))
    assert type(error) is ValueError
    message = str(error)
    assert "Cannot shard Param of shape (16, 32) with out_sharding=('fsdp', 'tensor', None)" in message
    assert 'expected one entry per array dimension (2), got 3' in message
    assert snapshot(*good) == before


def test_out_sharding_too_short_is_accepted_eagerly_then_rejected() -> None:
    with jax.set_mesh(mesh_2x4()):
        model = OneParam(('fsdp',))  # not yet clear: no error here
        assert model.w.get_value().sharding.spec == jax.P('fsdp')
        optimizer = nnx.Optimizer(model, optax.adam(1e-3), wrt=nnx.Param)
        assert optimizer.opt_state[0].mu.w.get_metadata()['out_sharding'] == ('fsdp', None)
        assert nnx.find_sharding_mismatches(model) == [
            (('w',), "out_sharding=('fsdp',) has 1 entries but the value has shape "
                     '(16, 32) (2 dimensions)')]
        before = snapshot(model, optimizer)
        error = raises(lambda: nnx.get_partition_spec(nnx.state(model)))
    assert type(error) is ValueError
    message = str(error)
    assert "Param at ['w']" in message
    assert "out_sharding=('fsdp',) has 1 entries but the value has shape (16, 32)" in message
    assert snapshot(model, optimizer) == before


# Row 2: a mesh axis name not in the mesh -------------------------------------


def test_axis_not_in_mesh(good: tuple[Any, Any]) -> None:
    before = snapshot(*good)
    mesh = mesh_2x4()
    with jax.set_mesh(mesh):
        eager = raises(lambda: OneParam(('fsdp', 'bogus')))
        lazy = OneParam(('fsdp', 'bogus'), eager_sharding=False)
        optimizer = nnx.Optimizer(lazy, optax.adam(1e-3), wrt=nnx.Param)  # no error
        lazy_before = snapshot(lazy, optimizer)
        consumer = raises(lambda: nnx.get_named_sharding(nnx.state(lazy), mesh))
        # get_partition_spec has no mesh to check against: returns the spec.
        spec = nnx.get_partition_spec(nnx.state(lazy)).w.get_value()
    for error, where in ((eager, 'Param of shape'), (consumer, "Param at ['w'] of shape")):
        assert type(error) is ValueError
        assert str(error) == (
            f"Cannot shard {where} (16, 32) with out_sharding=('fsdp', 'bogus'): "
            "'bogus' is not an axis of the mesh ('fsdp', 'tensor'). Fix: use only "
            'names of mesh.axis_names or add the axis to the mesh.')
    assert spec == jax.P('fsdp', 'bogus')
    # The optimizer copied the bad names into its own metadata.
    assert [path for path, _ in nnx.find_sharding_mismatches(optimizer)] == [
        ('opt_state', 0, 'mu', 'w'), ('opt_state', 0, 'nu', 'w')]
    assert snapshot(lazy, optimizer) == lazy_before
    assert snapshot(*good) == before


# Row 3: stacked dimension not divisible by the PARTITION_NAME axis ------------


def _three_layers_named() -> scenarios.Block:
    return scenarios.stacked_blocks(3, 16, {nnx.PARTITION_NAME: 'layers'})


def test_stacked_dim_not_divisible(good: tuple[Any, Any]) -> None:
    before = snapshot(*good)
    mesh = exact_mesh((2, 2, 2), ('layers', *AXES), 'auto')
    with jax.set_mesh(mesh):
        eager = raises(_three_layers_named)
        jitted = raises(lambda: nnx.jit(_three_layers_named)())
        abstract = raises(lambda: nnx.get_abstract_model(_three_layers_named, mesh))
    for error in (eager, jitted, abstract):
        assert type(error) is ValueError
        assert str(error) == (
            "Cannot shard Param at out/down/kernel of shape (3, 32, 16) with "
            "out_sharding=('layers', 'tensor', 'fsdp'): the axis stacked with "
            "transform_metadata={nnx.PARTITION_NAME: 'layers'} has size 3, which is "
            "not divisible by the size 2 of mesh axis 'layers'. Fix: make the axis "
            'size a multiple of 2 or leave the stacked axis unnamed.')
    assert snapshot(*good) == before


# Row 4: the same mesh axis used twice in one spec ----------------------------


def test_same_axis_twice(good: tuple[Any, Any]) -> None:
    before = snapshot(*good)
    mesh = mesh_2x4()
    with jax.set_mesh(mesh):
        eager = raises(lambda: OneParam(('fsdp', 'fsdp')))
        stacked = raises(lambda: scenarios.stacked_blocks(2, 16, {nnx.PARTITION_NAME: 'fsdp'}))
        lazy = OneParam(('fsdp', 'fsdp'), eager_sharding=False)
        lazy_before = snapshot(lazy)
        consumer = raises(lambda: nnx.get_named_sharding(nnx.state(lazy), mesh))
    cases = ((eager, "Param of shape (16, 32) with out_sharding=('fsdp', 'fsdp')"),
             (consumer, "Param at ['w'] of shape (16, 32) with out_sharding=('fsdp', 'fsdp')"),
             (stacked, 'Param at out/down/kernel of shape (2, 32, 16) with '
                       "out_sharding=('fsdp', 'tensor', 'fsdp')"))
    for error, what in cases:
        assert type(error) is ValueError
        assert str(error).startswith(f'Cannot shard {what}: ')
        assert "mesh axis 'fsdp' is used more than once" in str(error)
        assert 'Fix: use each mesh axis at most once per out_sharding.' in str(error)
    assert "transform_metadata={nnx.PARTITION_NAME: 'fsdp'} names a mesh axis" in str(stacked)
    assert snapshot(lazy) == lazy_before
    assert snapshot(*good) == before


# Row 5: a logical name missing from the rules --------------------------------


def test_logical_name_missing_from_rules(good: tuple[Any, Any]) -> None:
    before = snapshot(*good)
    mesh = mesh_2x4()
    rules = (('embed', 'fsdp'),)  # 'mlp' has no rule
    with jax.set_mesh(mesh):
        eager = raises(lambda: OneParam(('embed', 'mlp'), sharding_rules=rules))
        lazy = OneParam(('embed', 'mlp'), eager_sharding=False, sharding_rules=rules)
        lazy_before = snapshot(lazy)
        spec = nnx.get_partition_spec(nnx.state(lazy)).w.get_value()  # no mesh: no check
        consumer = raises(lambda: nnx.get_named_sharding(nnx.state(lazy), mesh))
    for error, where in ((eager, 'Param of shape'), (consumer, "Param at ['w'] of shape")):
        assert type(error) is ValueError
        assert str(error) == (
            f"Cannot shard {where} (16, 32) with out_sharding=('embed', 'mlp') "
            "(resolved to P('fsdp', 'mlp') by the logical axis rules): 'mlp' is "
            "neither in the logical axis rules (('embed', 'fsdp'),) nor an axis of "
            "the mesh ('fsdp', 'tensor'). Fix: add a rule for 'mlp' (e.g. "
            "('mlp', None)) or use a name of the rules or of mesh.axis_names.")
    assert spec == jax.P('fsdp', 'mlp')  # unmapped logical name passed through
    assert snapshot(lazy) == lazy_before
    assert snapshot(*good) == before


# Row 6: a raw jax.vmap leaves stale metadata --------------------------------


@pytest.mark.parametrize('consumer', ['get_partition_spec', 'get_named_sharding'])
def test_raw_vmap_stale_metadata(consumer: str) -> None:
    mesh = mesh_2x4()
    with jax.set_mesh(mesh):
        model = RawVmapped()
        optimizer = nnx.Optimizer(model, optax.adam(1e-3), wrt=nnx.Param)
        before = snapshot(model, optimizer)
        calls = {
            'get_partition_spec': lambda: nnx.get_partition_spec(nnx.state(model)),
            'get_named_sharding': lambda: nnx.get_named_sharding(nnx.state(model), mesh),
        }
        error = raises(calls[consumer])
    assert type(error) is ValueError
    message = str(error)
    assert "Sharding metadata of Param at ['w'] does not match its value" in message
    assert "out_sharding=('fsdp',) has 1 entries but the value has shape (3, 16)" in message
    assert 'transform_metadata' in message and 'find_sharding_mismatches' in message
    assert nnx.find_sharding_mismatches(model) == [
        (('w',), "out_sharding=('fsdp',) has 1 entries but the value has shape "
                 '(3, 16) (2 dimensions)')]
    assert snapshot(model, optimizer) == before
