"""Orbax round trip of a stacked, sharded model and its optimizer.

Train a scan-over-layers model on a 2-axis mesh of the devices present (2x4
on 8), save ``nnx.state`` of the model and its adamw ``nnx.Optimizer`` with
``orbax.checkpoint.StandardCheckpointer``, and restore into the abstract
target of ``nnx.get_abstract_model`` on that mesh, its transpose and a
one-axis mesh (2x4, 4x2 and 8x1 on 8 devices; one device has only 1x1). Restored values are bit-identical, restored shardings are
those the target asked for (parameter shardings on the optimizer state too),
and training continues with the loss curve of an uninterrupted run.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any

os.environ.setdefault('JAX_PLATFORMS', 'cpu')
os.environ.setdefault('XLA_FLAGS', '--xla_force_host_platform_device_count=8')

import jax  # noqa: E402
import numpy as np  # noqa: E402
import optax  # noqa: E402
import orbax.checkpoint as ocp  # noqa: E402
import pytest  # noqa: E402
from flax import nnx  # noqa: E402

from tests.support.scenarios import exact_mesh  # noqa: E402
from tests.support import checks, scenarios  # noqa: E402

LAYERS, WIDTH = 4, 16
STEPS_BEFORE_SAVE, STEPS_AFTER_SAVE = 2, 2
AXES = ('fsdp', 'tensor')
MESHES = ('saved', 'transposed', 'one-axis')
Path_ = tuple[Any, ...]


def mesh_shape(name: str) -> tuple[int, int]:
    """The mesh ``name`` of ``MESHES`` over the devices present."""
    fsdp, tensor = scenarios.two_axis_shape()
    return {'saved': (fsdp, tensor), 'transposed': (tensor, fsdp),
            'one-axis': (fsdp * tensor, 1)}[name]


def init() -> tuple[scenarios.Block, nnx.Optimizer]:
    """The stacked model and its optimizer, as a fresh run builds them."""
    model = scenarios.stacked_blocks(LAYERS, WIDTH)
    return model, nnx.Optimizer(model, optax.adamw(1e-2), wrt=nnx.Param)


def batch() -> jax.Array:
    return jax.random.normal(jax.random.key(0), (8, WIDTH))


def flat_leaves(state: nnx.State) -> dict[Path_, Any]:
    """Path -> raw leaf (array or ShapeDtypeStruct) of a split state."""
    return {path: var.get_value() for path, var in nnx.to_flat_state(state)}


@dataclasses.dataclass(frozen=True)
class Saved:
    directory: Path
    values: dict[Path_, np.ndarray]  # host copies of what was saved
    losses_after_save: list[float]  # the uninterrupted run's next losses


@pytest.fixture(scope='module')
def saved(tmp_path_factory: pytest.TempPathFactory) -> Saved:
    """Train, checkpoint, then keep training without interruption."""
    directory = tmp_path_factory.mktemp('ckpt') / 'state'
    mesh = exact_mesh(mesh_shape('saved'), AXES, 'auto')
    with jax.set_mesh(mesh):
        model, optimizer = init()
        x = batch()
        for _ in range(STEPS_BEFORE_SAVE):
            scenarios.train_step(model, optimizer, x)
        _, state = nnx.split((model, optimizer))
        values = {path: np.asarray(jax.device_get(leaf))
                  for path, leaf in flat_leaves(state).items()}
        with ocp.StandardCheckpointer() as checkpointer:
            checkpointer.save(directory, state)
            checkpointer.wait_until_finished()
        losses = [float(scenarios.train_step(model, optimizer, x)) for _ in range(STEPS_AFTER_SAVE)]
    return Saved(directory, values, losses)


@pytest.mark.parametrize('mesh_name', MESHES)
def test_restore_and_continue(saved: Saved, mesh_name: str) -> None:
    shape = mesh_shape(mesh_name)
    if mesh_name != 'saved' and shape == mesh_shape('saved'):
        pytest.skip(f'{jax.device_count()} devices form no {mesh_name} mesh other than '
                    f'the saved {shape}')
    mesh = exact_mesh(shape, AXES, 'auto')
    graphdef, target = nnx.get_abstract_model(init, mesh)
    with ocp.StandardCheckpointer() as checkpointer:
        restored = checkpointer.restore(saved.directory, target)

    asked, got = flat_leaves(target), flat_leaves(restored)
    assert sorted(got) == sorted(saved.values)
    for path, leaf in got.items():
        assert leaf.sharding == asked[path].sharding, (path, leaf.sharding, asked[path].sharding)
        expected = saved.values[path]
        host = np.asarray(jax.device_get(leaf))
        assert host.dtype == expected.dtype and host.shape == expected.shape, path
        assert host.tobytes() == expected.tobytes(), f'{path} not bit-identical'

    model, optimizer = nnx.merge(graphdef, restored)
    report = scenarios.describe(model, optimizer)
    assert checks.metadata_problems(report) == []
    assert checks.optimizer_problems(report) == []
    assert int(optimizer.step.get_value()) == STEPS_BEFORE_SAVE

    with jax.set_mesh(mesh):
        x = batch()
        losses = [float(scenarios.train_step(model, optimizer, x)) for _ in range(STEPS_AFTER_SAVE)]
    np.testing.assert_allclose(losses, saved.losses_after_save, rtol=1e-5, atol=1e-6)


# An Orbax save of a live optimizer restores into the abstract
# target of nnx.get_abstract_model with the live layout, leaf by leaf
# (adafactor's factored moments included, on an Explicit mesh too, not
# replicated; vanilla cannot build adafactor on a sharded model).
def sharded_linear() -> nnx.Linear:
    return nnx.Linear(8, 8, rngs=nnx.Rngs(0), kernel_init=nnx.with_partitioning(
        nnx.initializers.lecun_normal(), AXES), bias_init=nnx.with_partitioning(
        nnx.initializers.zeros_init(), ('tensor',)))


OPTIMIZERS = {
    'adam': lambda: optax.adam(1e-3),
    'adafactor': lambda: optax.adafactor(1e-3, min_dim_size_to_factor=4),
    'masked_adam': lambda: optax.masked(
        optax.adam(1e-3), lambda p: jax.tree.map(lambda x: x.ndim > 1, p)),
}


def layout(leaf: Any) -> tuple[Any, ...]:
    spec = tuple(leaf.sharding.spec)
    return (leaf.sharding.mesh.shape_tuple, spec + (None,) * (leaf.ndim - len(spec)))


@pytest.mark.parametrize('axis_type', ['auto', 'explicit'])
@pytest.mark.parametrize('name', sorted(OPTIMIZERS))
def test_abstract_optimizer_restores_the_live_layout(
        tmp_path: Path, name: str, axis_type: str) -> None:
    mesh = exact_mesh(mesh_shape('saved'), AXES, axis_type)
    create = lambda: nnx.Optimizer(sharded_linear(), OPTIMIZERS[name](), wrt=nnx.Param)  # noqa: E731
    with jax.set_mesh(mesh):
        state = nnx.state(create())
    _, target = nnx.get_abstract_model(create, mesh)
    with ocp.StandardCheckpointer() as checkpointer:
        checkpointer.save(tmp_path / 'state', state)
        checkpointer.wait_until_finished()
        restored = checkpointer.restore(tmp_path / 'state', target)
    live, got = flat_leaves(state), flat_leaves(restored)
    arrays = [path for path, leaf in live.items() if hasattr(leaf, 'shape')]
    assert arrays and sorted(arrays) == sorted(p for p, v in got.items() if hasattr(v, 'shape'))
    for path in arrays:
        assert layout(got[path]) == layout(live[path]), path
        np.testing.assert_array_equal(np.asarray(got[path]), np.asarray(live[path]))
