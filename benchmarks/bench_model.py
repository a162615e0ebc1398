"""The model and helpers shared by the measured programs.

Imported by ``memory.py``, ``collectives.py`` and ``overhead.py``, which run as
subprocesses under the interpreter being measured (the script's directory is
first on ``sys.path``). Importing this module sets up 8 simulated CPU devices,
so it must be imported before anything touches JAX's backends.

The model is a stack of ``layers`` blocks, each two ``nnx.Linear`` layers
annotated for a ``('fsdp', 'tensor')`` mesh, created with ``nnx.split_rngs`` +
``nnx.vmap`` (one stacked array per parameter, layer axis first) and applied
with ``nnx.scan``. ``variant`` selects the code the user writes:

``plain``       no ``transform_metadata`` (what the patched flax expects);
``workaround``  ``transform_metadata={nnx.PARTITION_NAME: None}`` on the
                creating ``nnx.vmap`` and on the ``nnx.scan`` (the documented
                workaround for vanilla flax 0.12.12).

With ``groups > 1`` the ``layers`` blocks are split into ``groups`` stacks of
``layers // groups`` blocks each (an ``nnx.List`` of stacks, each created with
its own ``nnx.vmap`` and applied with its own ``nnx.scan``, like pipeline
stages or repeated layer patterns), so the number of Variables grows with
``groups`` (4 per stack) while one stack keeps 4 whatever ``layers`` is.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import sys
from typing import Any, Callable, NamedTuple

os.environ.setdefault('JAX_PLATFORMS', 'cpu')
os.environ.setdefault('XLA_FLAGS', '--xla_force_host_platform_device_count=8')

import jax  # noqa: E402

jax.config.update('jax_num_cpu_devices', 8)

import jax.numpy as jnp  # noqa: E402
from flax import nnx  # noqa: E402

VARIANTS = ('plain', 'workaround')
MESH_SHAPE = (2, 4)
MESH_AXES = ('fsdp', 'tensor')


def make_mesh() -> jax.sharding.Mesh:
    """The 2x4 ``('fsdp', 'tensor')`` mesh over the 8 simulated devices."""
    return jax.make_mesh(
        MESH_SHAPE, MESH_AXES, axis_types=(jax.sharding.AxisType.Auto,) * 2)


def lifted_kwargs(variant: str) -> dict[str, Any]:
    """Extra keyword arguments for ``nnx.vmap`` / ``nnx.scan`` in ``variant``."""
    if variant == 'plain':
        return {}
    if variant == 'workaround':
        return {'transform_metadata': {nnx.PARTITION_NAME: None}}
    raise ValueError(f'unknown variant {variant!r}; expected one of {VARIANTS}')


class Block(nnx.Module):
    """Column-parallel up projection, row-parallel down projection, residual."""

    def __init__(self, width: int, rngs: nnx.Rngs):
        init = nnx.initializers.lecun_normal()
        zeros = nnx.initializers.zeros_init()
        self.up = nnx.Linear(
            width, width, rngs=rngs,
            kernel_init=nnx.with_partitioning(init, ('fsdp', 'tensor')),
            bias_init=nnx.with_partitioning(zeros, ('tensor',)),
        )
        self.down = nnx.Linear(
            width, width, rngs=rngs,
            kernel_init=nnx.with_partitioning(init, ('tensor', 'fsdp')),
            bias_init=nnx.with_partitioning(zeros, (None,)),
        )

    def __call__(self, x: jax.Array) -> jax.Array:
        return x + self.down(jax.nn.gelu(self.up(x)))


def create_blocks(layers: int, width: int, variant: str, seed: int = 0) -> Block:
    """``layers`` stacked blocks (layer axis first), made with ``nnx.vmap``."""

    @nnx.split_rngs(splits=layers)
    @nnx.vmap(in_axes=0, out_axes=0, **lifted_kwargs(variant))
    def create(rngs: nnx.Rngs) -> Block:
        return Block(width, rngs)

    return create(nnx.Rngs(seed))


def apply_blocks(blocks: Block, x: jax.Array, variant: str) -> jax.Array:
    """Apply the stacked blocks in sequence with ``nnx.scan``."""

    @nnx.scan(in_axes=(0, nnx.Carry), out_axes=nnx.Carry, **lifted_kwargs(variant))
    def step(block: Block, carry: jax.Array) -> jax.Array:
        return block(carry)

    return step(blocks, x)


Model = Block | nnx.List


def create_model(layers: int, width: int, variant: str, groups: int = 1) -> Model:
    """The stacked ``Block`` if ``groups == 1``, else an ``nnx.List`` of ``groups`` stacks."""
    if groups == 1:
        return create_blocks(layers, width, variant)
    if groups < 1 or layers % groups:
        raise ValueError(f'groups={groups} must be positive and divide layers={layers}')
    return nnx.List([create_blocks(layers // groups, width, variant, seed=group)
                     for group in range(groups)])


def apply_model(model: Model, x: jax.Array, variant: str) -> jax.Array:
    """Apply every stack of ``model`` in order (see ``create_model``)."""
    stacks = [model] if isinstance(model, Block) else list(model)
    for blocks in stacks:
        x = apply_blocks(blocks, x, variant)
    return x


def loss_fn(blocks: Block, x: jax.Array, y: jax.Array, variant: str) -> jax.Array:
    """Mean squared error of the stack's output."""
    return jnp.mean((apply_blocks(blocks, x, variant) - y) ** 2)


def block_until_ready(node: Any) -> None:
    """Wait for every array in an NNX node (module, optimizer, state)."""
    jax.block_until_ready(jax.tree.leaves(nnx.state(node)))


def count_variables(node: Any) -> int:
    """Number of Variables (state leaves) in ``node``."""
    return len(jax.tree.leaves(nnx.state(node)))


@functools.cache
def versions() -> dict[str, str]:
    """Versions of the packages being measured."""
    from importlib.metadata import version
    import flax
    return {'flax': flax.__version__, 'jax': jax.__version__,
            'jaxlib': version('jaxlib'), 'optax': version('optax'),
            'python': sys.version.split()[0]}


class CaseSpec(NamedTuple):
    """What one measured case runs: the user code, the depth, the stacks."""

    variant: str
    layers: int
    groups: int = 1

    def __str__(self) -> str:
        suffix = f':{self.groups}' if self.groups != 1 else ''
        return f'{self.variant}:{self.layers}{suffix}'


def parse_cases(text: str) -> list[CaseSpec]:
    """``'plain:8,workaround:128:32'`` -> ``[CaseSpec('plain', 8, 1), CaseSpec(..., 32)]``."""
    cases = []
    for item in text.split(','):
        variant, layers, *groups = item.split(':')
        if variant not in VARIANTS:
            raise SystemExit(f'unknown variant {variant!r}; expected one of {VARIANTS}')
        if len(groups) > 1:
            raise SystemExit(f'bad case {item!r}; expected variant:layers[:groups]')
        cases.append(CaseSpec(variant, int(layers), int(groups[0]) if groups else 1))
    return cases


def emit_case(program: str, case: CaseSpec,
              measure: Callable[[CaseSpec], dict[str, Any]], **options: Any) -> None:
    """Measure one case; print its result as one JSON line on stdout.

    One JSON object per line is the protocol the driver reads.
    """
    result = guarded(lambda: measure(case))
    print(json.dumps({'program': program, **case._asdict(), **options,
                      'versions': versions(), **result}), flush=True)


def run_cases(program: str, cases: str, measure: Callable[[CaseSpec], dict[str, Any]],
              **options: Any) -> None:
    """Measure every ``variant:layers[:groups]`` case of ``cases``, one JSON line each."""
    for case in parse_cases(cases):
        emit_case(program, case, measure, **options)


def single_stack(measure: Callable[[int, int, str], dict[str, Any]], width: int
                 ) -> Callable[[CaseSpec], dict[str, Any]]:
    """Adapt ``measure(layers, width, variant)`` of a one-stack program to a case."""

    def measure_case(case: CaseSpec) -> dict[str, Any]:
        if case.groups != 1:
            raise ValueError(f'{case}: this program measures one stack (groups=1)')
        return measure(case.layers, width, case.variant)

    return measure_case


def guarded(measure: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """Run ``measure``; an exception becomes ``{'error': ...}`` in the result.

    Vanilla flax without the workaround is expected to raise in some
    configurations; the driver reports that instead of failing.
    """
    try:
        return {'ok': True, **measure()}
    except Exception as error:  # noqa: BLE001 - reported, not hidden
        return {'ok': False, 'error': f'{type(error).__name__}: {error}'[:500]}


def case_parser(description: str, repeats: int | None = None) -> argparse.ArgumentParser:
    """Options of a measured program: ``--cases``, ``--width``; with a default
    number of ``repeats``, also ``--repeats`` and ``--warmup``."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument('--cases', required=True,
                        help='comma-separated variant:layers[:groups], e.g. plain:8,plain:128:32')
    parser.add_argument('--width', type=int, required=True)
    if repeats is not None:
        parser.add_argument('--repeats', type=int, default=repeats)
        parser.add_argument('--warmup', type=int, default=1)
    return parser


def cli(program: str, description: str,
        measure: Callable[[int, int, str], dict[str, Any]]) -> None:
    """Command line of a one-stack program: ``--cases variant:layers,... --width D``."""
    args = case_parser(description).parse_args()
    run_cases(program, args.cases, single_stack(measure, args.width), width=args.width)

