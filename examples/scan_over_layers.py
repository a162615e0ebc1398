"""Scan over a stack of sharded blocks, FSDP x tensor parallel, with an optimizer.

Each block is two ``nnx.Linear`` layers annotated for a ``('fsdp', 'tensor')``
mesh. The stack is created with ``nnx.split_rngs`` + ``nnx.vmap`` (one stacked
array per parameter, layer axis first), applied with ``nnx.scan``, and trained
with ``nnx.Optimizer`` for a few ``nnx.jit`` steps on a 2x4 mesh of 8 simulated
CPU devices. It prints every parameter's and optimizer state's sharding, and
the loss.

Run: ``python examples/scan_over_layers.py`` (``make demo``).
"""

from __future__ import annotations

import os

os.environ.setdefault('JAX_PLATFORMS', 'cpu')

import jax  # noqa: E402

jax.config.update('jax_num_cpu_devices', 8)

import jax.numpy as jnp  # noqa: E402
import optax  # noqa: E402
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
        @nnx.split_rngs(splits=NUM_LAYERS)
        # WORKAROUND(google/flax#5112): vanilla flax 0.12.12 does not add the
        # layer axis to `out_sharding` unless told; removed once the
        # transform patch lands.
        @nnx.vmap(in_axes=0, out_axes=0,
                  transform_metadata={nnx.PARTITION_NAME: None})
        def make_blocks(rngs: nnx.Rngs) -> Block:
            return Block(rngs)

        self.blocks = make_blocks(rngs)

    def __call__(self, x: jax.Array) -> jax.Array:
        # WORKAROUND(google/flax#5112): see make_blocks.
        @nnx.scan(in_axes=(0, nnx.Carry), out_axes=nnx.Carry,
                  transform_metadata={nnx.PARTITION_NAME: None})
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
        print('parameters:')
        for path, spec in shardings(model).items():
            print(f'  {path:36s} {spec}')
        print('optimizer state:')
        for path, spec in shardings(optimizer).items():
            print(f'  {path:36s} {spec}')

        key_x, key_y = jax.random.split(jax.random.key(1))
        x = jax.random.normal(key_x, (BATCH, WIDTH))
        y = jax.random.normal(key_y, (BATCH, WIDTH))
        losses = []
        for step in range(STEPS):
            loss = float(train_step(model, optimizer, x, y))
            losses.append(loss)
            print(f'step {step}: loss {loss:.6f}')
    return losses


if __name__ == '__main__':
    main()
