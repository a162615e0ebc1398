"""Scan over a stack of sharded blocks, FSDP x tensor parallel, with an optimizer.

Each block is two ``nnx.Linear`` layers annotated for a ``('fsdp', 'tensor')``
mesh. The stack is created with ``nnx.split_rngs`` + ``nnx.vmap`` (one stacked
array per parameter, layer axis first), applied with ``nnx.scan``, and trained
with ``nnx.Optimizer`` for a few ``nnx.jit`` steps on a 2x4 mesh of 8 simulated
CPU devices. It prints every parameter's and optimizer state's sharding, and
the loss; then saves the model with Orbax and restores it into an abstract
model from ``nnx.get_abstract_model``, checking values and shardings.

Run: ``python examples/scan_over_layers.py`` (``make demo``).
"""

from __future__ import annotations

import os
import tempfile

os.environ.setdefault('JAX_PLATFORMS', 'cpu')

import jax  # noqa: E402

jax.config.update('jax_num_cpu_devices', 8)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import optax  # noqa: E402
import orbax.checkpoint as ocp  # noqa: E402
from flax import nnx  # noqa: E402

NUM_LAYERS = 4
WIDTH = 64
HIDDEN = 128
BATCH = 16
STEPS = 3


class Block(nnx.Module):
    """Two linear layers: column-parallel up, row-parallel down (FSDP x TP)."""

    def __init__(self, rngs: nnx.Rngs):
        init = nnx.initializers.lecun_normal()
        self.up = nnx.Linear(
            WIDTH, HIDDEN, rngs=rngs,
            kernel_init=nnx.with_partitioning(init, ('fsdp', 'tensor')),
            bias_init=nnx.with_partitioning(nnx.initializers.zeros_init(), ('tensor',)),
        )
        self.down = nnx.Linear(
            HIDDEN, WIDTH, rngs=rngs,
            kernel_init=nnx.with_partitioning(init, ('tensor', 'fsdp')),
            bias_init=nnx.with_partitioning(nnx.initializers.zeros_init(), (None,)),
        )

    def __call__(self, x: jax.Array) -> jax.Array:
        return x + self.down(jax.nn.gelu(self.up(x)))


class Stack(nnx.Module):
    """``NUM_LAYERS`` blocks stored as one stacked block (layer axis first)."""

    def __init__(self, rngs: nnx.Rngs):
        # No transform_metadata needed: the stacked Variables get `None` for
        # the layer axis in their out_sharding (the nnxaxis patch series).
        @nnx.split_rngs(splits=NUM_LAYERS)
        @nnx.vmap(in_axes=0, out_axes=0)
        def make_blocks(rngs: nnx.Rngs) -> Block:
            return Block(rngs)

        self.blocks = make_blocks(rngs)

    def __call__(self, x: jax.Array) -> jax.Array:
        @nnx.scan(in_axes=(0, nnx.Carry), out_axes=nnx.Carry)
        def apply_block(block: Block, x: jax.Array) -> jax.Array:
            return block(x)

        return apply_block(self.blocks, x)


def loss_fn(model: Stack, x: jax.Array, y: jax.Array) -> jax.Array:
    return jnp.mean((model(x) - y) ** 2)


@nnx.jit
def train_step(model: Stack, optimizer: nnx.Optimizer, x: jax.Array, y: jax.Array):
    loss, grads = nnx.value_and_grad(loss_fn)(model, x, y)
    optimizer.update(model, grads)
    return loss


def shardings(node) -> dict[str, str]:
    """``{path: PartitionSpec}`` of every array Variable in ``node``."""
    return {
        '/'.join(map(str, path)): str(variable.get_value().sharding.spec)
        for path, variable in nnx.to_flat_state(nnx.state(node))
        if getattr(variable.get_value(), 'ndim', 0) > 0
    }


def print_shardings(model: nnx.Module, optimizer: nnx.Optimizer) -> None:
    """Print the PartitionSpec of every parameter and optimizer-state array."""
    for title, node in (('parameters:', model), ('optimizer state:', optimizer)):
        print(title)
        for path, spec in shardings(node).items():
            print(f'  {path:36s} {spec}')


def main() -> list[float]:
    mesh = jax.make_mesh(
        (2, 4), ('fsdp', 'tensor'),
        axis_types=(jax.sharding.AxisType.Auto,) * 2,
    )
    with jax.set_mesh(mesh):
        model = Stack(nnx.Rngs(0))
        optimizer = nnx.Optimizer(model, optax.adamw(1e-3), wrt=nnx.Param)

        print(f'flax {__import__("flax").__version__}, jax {jax.__version__}, '
              f'mesh {dict(mesh.shape)}')
        print_shardings(model, optimizer)

        key_x, key_y = jax.random.split(jax.random.key(1))
        x = jax.random.normal(key_x, (BATCH, WIDTH))
        y = jax.random.normal(key_y, (BATCH, WIDTH))
        losses = []
        for step in range(STEPS):
            loss = float(train_step(model, optimizer, x, y))
            losses.append(loss)
            print(f'step {step}: loss {loss:.6f}')

        restored, target = save_and_restore(model, mesh)
        leaves = zip(jax.tree.leaves(nnx.state(model)), jax.tree.leaves(nnx.state(restored)),
                     jax.tree.leaves(target))
        for saved, loaded, wanted in leaves:
            np.testing.assert_array_equal(np.asarray(saved), np.asarray(loaded))
            assert loaded.sharding.is_equivalent_to(wanted.sharding, loaded.ndim)
        print('checkpoint: restored into the abstract model: values equal, '
              'shardings as the abstract model asked')
    return losses


def save_and_restore(model: Stack, mesh: jax.sharding.Mesh) -> tuple[Stack, nnx.State]:
    """Orbax round trip into ``nnx.get_abstract_model``'s sharded target."""
    with tempfile.TemporaryDirectory() as directory:
        path = os.path.join(directory, 'model')
        checkpointer = ocp.StandardCheckpointer()
        checkpointer.save(path, nnx.state(model))
        checkpointer.wait_until_finished()
        graphdef, abstract_state = nnx.get_abstract_model(lambda: Stack(nnx.Rngs(0)), mesh)
        state = checkpointer.restore(path, abstract_state)
    return nnx.merge(graphdef, state), abstract_state


if __name__ == '__main__':
    main()
