"""Collectives in the compiled HLO of one scan-over-layers train step.

The step (``jax.jit`` over ``nnx.split`` state) merges the stacked blocks and
an adam ``nnx.Optimizer``, takes ``nnx.value_and_grad`` of a loss that applies
the blocks with ``nnx.scan``, calls ``optimizer.update`` and returns the loss
and the new state. Output shardings are pinned to the input shardings, as a
training loop that feeds the state back in needs. The program counts the
all-gather / all-reduce / reduce-scatter / all-to-all / collective-permute
instructions in ``lower(...).compile().as_text()`` and the bytes of their
results. Counts are static: an instruction inside the scan's while-loop body
counts once although it runs once per layer (``in_loop`` splits them out).

Usage: ``python collectives.py --cases plain:8,workaround:8 --width D`` (one JSON
line per ``variant:layers`` case).
"""

from __future__ import annotations

import re
from typing import Any

import bench_model
from bench_model import jax, jnp, nnx

import numpy as np
import optax

KINDS = ('all-gather', 'all-reduce', 'reduce-scatter', 'all-to-all', 'collective-permute')
BATCH = 16

_INSTRUCTION = re.compile(
    r'=\s*(?P<type>\(.*?\)|\S+)\s+(?P<op>' + '|'.join(KINDS) + r')(?P<start>-start)?\(')
_ARRAY_TYPE = re.compile(r'(?P<dtype>[a-z]+\d*)\[(?P<dims>[\d,]*)\]')
_COMPUTATION = re.compile(r'^(?:ENTRY\s+)?%?(?P<name>[\w.\-]+)\s.*\{\s*$')
_WHILE_BODY = re.compile(r'body=%?(?P<name>[\w.\-]+)')

_ITEMSIZE = {'pred': 1, 's8': 1, 'u8': 1, 'bf16': 2, 'f16': 2, 's16': 2, 'u16': 2,
             'f32': 4, 's32': 4, 'u32': 4, 'f64': 8, 's64': 8, 'u64': 8}


def type_bytes(hlo_type: str, is_start: bool) -> int:
    """Bytes of an HLO result type; for ``*-start`` ops, of its last array."""
    arrays = [(match['dtype'], match['dims']) for match in _ARRAY_TYPE.finditer(hlo_type)]
    if is_start:
        arrays = arrays[-1:]
    total = 0
    for dtype, dims in arrays:
        size = int(np.prod([int(d) for d in dims.split(',') if d], dtype=np.int64))
        total += size * _ITEMSIZE.get(dtype, 4)
    return total


def count_collectives(hlo_text: str) -> dict[str, dict[str, int]]:
    """``{kind: {count, bytes, in_loop}}`` for every collective kind."""
    bodies = set(_WHILE_BODY.findall(hlo_text))
    counts = {kind: {'count': 0, 'bytes': 0, 'in_loop': 0} for kind in KINDS}
    computation = ''
    for line in hlo_text.splitlines():
        header = _COMPUTATION.match(line)
        if header and not line.startswith(' '):
            computation = header['name']
            continue
        match = _INSTRUCTION.search(line)
        if match is None:
            continue
        entry = counts[match['op']]
        entry['count'] += 1
        entry['bytes'] += type_bytes(match['type'], bool(match['start']))
        entry['in_loop'] += computation in bodies
    return counts


def measure(layers: int, width: int, variant: str) -> dict[str, Any]:
    mesh = bench_model.make_mesh()
    with jax.set_mesh(mesh):
        blocks = bench_model.create_blocks(layers, width, variant)
        optimizer = nnx.Optimizer(blocks, optax.adam(1e-3), wrt=nnx.Param)
        graphdef, state = nnx.split((blocks, optimizer))
        state_shardings = jax.tree.map(lambda array: array.sharding, state)
        replicated = jax.sharding.NamedSharding(mesh, jax.P())

        def train_step(state: nnx.State, x: jax.Array, y: jax.Array
                       ) -> tuple[jax.Array, nnx.State]:
            model, opt = nnx.merge(graphdef, state)
            loss, grads = nnx.value_and_grad(bench_model.loss_fn)(model, x, y, variant)
            opt.update(model, grads)
            return loss, nnx.state((model, opt))

        step = jax.jit(train_step, out_shardings=(replicated, state_shardings))
        x = jnp.ones((BATCH, width))
        hlo = step.lower(state, x, x).compile().as_text()
    collectives = count_collectives(hlo)
    return {
        'collectives': collectives,
        'total_count': sum(entry['count'] for entry in collectives.values()),
        'total_bytes': sum(entry['bytes'] for entry in collectives.values()),
    }


def main() -> None:
    bench_model.cli('collectives', __doc__.splitlines()[0], measure)


if __name__ == '__main__':
    main()
