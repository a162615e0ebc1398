"""Shard the layer axis itself: ``PARTITION_NAME: 'layers'``.

The blocks of ``scan_over_layers.py`` are stacked with
``transform_metadata={nnx.PARTITION_NAME: 'layers'}`` on a 2x2x2 mesh
``('layers', 'fsdp', 'tensor')``: each half of the stack lives on its own
half of the devices (pipeline-style placement of the weights), each
parameter's ``out_sharding`` starts with ``'layers'``. The transform only
declares that layout; the sharded init of the gspmd guide applies it under
``nnx.jit`` (constrain the state to ``nnx.get_partition_spec``). The
optimizer state follows the arrays, and a few training steps run with
``nnx.scan`` over the layers.

Run: ``python examples/pipeline_layers.py``.
"""

from __future__ import annotations

# First: it simulates 8 CPU devices (JAX_PLATFORMS and the device count)
# before anything imports jax.
from scan_over_layers import BATCH, WIDTH, Block, print_shardings

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import optax  # noqa: E402
from flax import nnx  # noqa: E402

NUM_LAYERS = 4


def create_stack() -> Block:
    @nnx.split_rngs(splits=NUM_LAYERS)
    @nnx.vmap(in_axes=0, out_axes=0,
              transform_metadata={nnx.PARTITION_NAME: 'layers'})
    def create(rngs: nnx.Rngs) -> Block:
        return Block(rngs)

    return create(nnx.Rngs(0))


def forward(blocks: Block, x: jax.Array) -> jax.Array:
    @nnx.scan(in_axes=(0, nnx.Carry), out_axes=nnx.Carry,
              transform_metadata={nnx.PARTITION_NAME: 'layers'})
    def apply_block(block: Block, x: jax.Array) -> jax.Array:
        return block(x)

    return apply_block(blocks, x)


@nnx.jit
def train_step(blocks: Block, optimizer: nnx.Optimizer, x: jax.Array, y: jax.Array) -> jax.Array:
    def loss_fn(blocks: Block) -> jax.Array:
        return jnp.mean((forward(blocks, x) - y) ** 2)

    loss, grads = nnx.value_and_grad(loss_fn)(blocks)
    optimizer.update(blocks, grads)
    return loss


def main() -> list[float]:
    mesh = jax.make_mesh((2, 2, 2), ('layers', 'fsdp', 'tensor'),
                         axis_types=(jax.sharding.AxisType.Auto,) * 3)
    with jax.set_mesh(mesh):
        @nnx.jit
        def create_sharded_stack() -> Block:
            blocks = create_stack()
            state = nnx.state(blocks)
            specs = nnx.get_partition_spec(state)
            nnx.update(blocks, jax.lax.with_sharding_constraint(state, specs))
            return blocks

        blocks = create_sharded_stack()
        optimizer = nnx.Optimizer(blocks, optax.adamw(1e-3), wrt=nnx.Param)
        print(f'mesh {dict(mesh.shape)}')
        print_shardings(blocks, optimizer)  # the layer axis is sharded over 'layers'
        kernel = blocks.up.kernel
        print(f'up/kernel out_sharding {kernel.out_sharding}, '
              f'shards per device {kernel.get_value().addressable_shards[0].data.shape}')

        x = jax.random.normal(jax.random.key(1), (BATCH, WIDTH))
        y = jax.random.normal(jax.random.key(2), (BATCH, WIDTH))
        losses = [float(train_step(blocks, optimizer, x, y)) for _ in range(3)]
        for step, loss in enumerate(losses):
            print(f'step {step}: loss {loss:.6f}')
    return losses


if __name__ == '__main__':
    main()
