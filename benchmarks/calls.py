"""One lifted call at a time: the calls of the tree-mode and recording rows.

Each case is one ``nnx.scan`` or ``nnx.vmap`` call, traced by
``jax.make_jaxpr`` of a fresh function (so nothing comes from JAX's tracing
caches), under the 2x4 ``('fsdp', 'tensor')`` mesh of ``bench_model``.
A case is ``kind:LxV[:bN]``: ``L`` stacked layers of ``V`` Variables each,
and ``N`` broadcast Variables (``in_axes=None``, the body only reads them):

``tree_scan``    ``nnx.scan(graph=False)`` over a stack of ``V // 4``
                 ``bench_model.Block`` s a layer (4 Variables each);
``simple_scan``  the same with ``graph=True, graph_updates=False``;
``tree_vmap``    the stack's creation, ``nnx.vmap(graph=False)`` of a
                 ``V // 4`` block layer from split keys;
``record_scan``  a graph-mode ``nnx.scan`` over ``V`` Variables whose
                 ``out_sharding`` is one entry, the stacked axis's ``(None,)``;
``record_opt_scan`` the same over ``V`` kernels ``(None, 'fsdp', 'tensor')``
                 whose ``optimizer_sharding`` ``('fsdp', 'tensor')`` lacks the
                 stacked entry.

``plain`` is the code ours expects. ``workaround`` is vanilla's way to the
same metadata: in tree mode FLIP 5310's decorator,
``nnx.transform_metadata(in_axes=..., out_axes=..., partition=None)``, on the
body (and on the creating body of the stack), in graph mode
``transform_metadata={nnx.PARTITION_NAME: None}`` on the transform.

``--count``: run under callgrind (through ``run.py``), it prints the main
thread's instructions of ``--repeats`` traces after ``--warmup`` uncounted
ones. Without it, it traces each case once and prints the metadata the body
saw and the stack has after the call (what the smoke test compares).
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

import bench_model
from bench_model import Block, jax, jnp, nnx

KINDS = ('tree_scan', 'simple_scan', 'tree_vmap', 'record_scan', 'record_opt_scan')
BATCH = 8


class CallSpec(NamedTuple):
    """``kind:LxV[:bN]``: the call, its stack's depth and Variables a layer,
    the broadcast Variables."""

    kind: str
    layers: int
    variables: int
    broadcasts: int = 0

    def __str__(self) -> str:
        suffix = f':b{self.broadcasts}' if self.broadcasts else ''
        return f'{self.kind}:{self.layers}x{self.variables}{suffix}'


def parse_call(text: str) -> CallSpec:
    """``'tree_scan:64x4:b8'`` -> ``CallSpec('tree_scan', 64, 4, 8)``."""
    kind, shape, *rest = text.split(':')
    layers, _, variables = shape.partition('x')
    if kind not in KINDS or not variables or len(rest) > 1 or (
            rest and not rest[0].startswith('b')):
        raise ValueError(f'bad call case {text!r}; expected kind:LxV[:bN], kind in {KINDS}')
    call = CallSpec(kind, int(layers), int(variables), int(rest[0][1:]) if rest else 0)
    if call.kind.startswith(('tree', 'simple')) and call.variables % 4:
        raise ValueError(f'{text}: a layer of blocks has a multiple of 4 Variables')
    return call


class Layer(nnx.Module):
    """Blocks applied in turn, or Variables the body reads one after the other."""

    def __init__(self, parts: list[Any]) -> None:
        self.parts = nnx.List(parts)

    def __call__(self, x: jax.Array) -> jax.Array:
        for part in self.parts:
            x = part(x) if isinstance(part, Block) else read(part, x)
        return x


def read(variable: nnx.Variable, x: jax.Array) -> jax.Array:
    """``x`` after one operation reading ``variable`` (a vector or a matrix)."""
    value = variable[...]
    return x @ value if value.ndim == 2 else x + value


def block_layer(blocks: int, width: int, key: jax.Array) -> Layer:
    rngs = nnx.Rngs(key)
    return Layer([Block(width, rngs) for _ in range(blocks)])


def create_stack(call: CallSpec, width: int, variant: str) -> Layer:
    """The stacked layers of ``call`` (layer axis first), as ``variant`` makes them."""
    if call.kind.startswith('record'):
        return stacked_variables(call, width)
    return stack_creation(call, width, variant)(stack_keys(call))


def stack_keys(call: CallSpec) -> jax.Array:
    return jax.random.split(jax.random.key(0), call.layers)


def stack_creation(call: CallSpec, width: int, variant: str) -> Callable[..., Layer]:
    """A fresh ``nnx.vmap(graph=False)`` creating the stack from its keys."""
    blocks = call.variables // 4

    def body(key: jax.Array) -> Layer:
        return block_layer(blocks, width, key)

    if variant == 'workaround':
        body = nnx.transform_metadata(body, in_axes=0, out_axes=0, partition=None,
                                      graph=False)
    return nnx.vmap(body, in_axes=0, out_axes=0, graph=False)


def stacked_variables(call: CallSpec, width: int) -> Layer:
    """``V`` stacked Variables with the specs of a recording call."""
    if call.kind == 'record_scan':
        return Layer([nnx.Param(jnp.zeros((call.layers, width)), out_sharding=(None,))
                      for _ in range(call.variables)])
    return Layer([nnx.Param(jnp.zeros((call.layers, width, width)),
                            out_sharding=(None, 'fsdp', 'tensor'),
                            optimizer_sharding=('fsdp', 'tensor'))
                  for _ in range(call.variables)])


def broadcast_layer(call: CallSpec, width: int) -> Layer:
    """``call.broadcasts`` vectors, ``('tensor',)``, that every step reads."""
    return Layer([nnx.Param(jnp.full((width,), 0.01), out_sharding=('tensor',))
                  for _ in range(call.broadcasts)])


def scan_call(call: CallSpec, variant: str, seen: list[Any] | None
              ) -> Callable[..., jax.Array]:
    """A fresh ``nnx.scan`` of ``call`` over ``(stack, broadcasts, x)``;
    ``seen``, if given, gets the stacked Variables' sharding metadata inside
    the body."""

    def step(layer: Layer, shared: Layer, x: jax.Array) -> jax.Array:
        if seen is not None:
            seen.append(shardings(layer))
        return shared(layer(x))

    axes = (0, None, nnx.Carry)
    if call.kind.startswith('record'):
        lifted = bench_model.lifted_kwargs(variant)
        return nnx.scan(step, in_axes=axes, out_axes=nnx.Carry, **lifted)
    graph = call.kind == 'simple_scan'
    if variant == 'workaround':
        step = nnx.transform_metadata(step, in_axes=(0, None, None), out_axes=None,
                                      partition=None, graph=graph)
    return nnx.scan(step, in_axes=axes, out_axes=nnx.Carry, graph=graph,
                    graph_updates=False)


class Call:
    """The inputs of one case, made once; ``trace()`` traces a fresh call on
    them (the lifted transform made inside the traced function, as
    ``bench_model.apply_blocks`` makes it). With ``watch``, the body records
    the metadata it sees (outside the counts only: it costs a walk)."""

    def __init__(self, call: CallSpec, width: int, variant: str, watch: bool = False) -> None:
        self.call, self.width, self.variant = call, width, variant
        self.seen: list[Any] | None = [] if watch else None
        if call.kind == 'tree_vmap':
            self.args: tuple[Any, ...] = (jax.eval_shape(lambda: stack_keys(call)),)
            return
        # Abstract arrays (shape, dtype, sharding): tracing needs no more, and
        # computing them eagerly under valgrind took most of a process's time.
        self.stack = nnx.eval_shape(lambda: create_stack(call, width, variant))
        shared = nnx.eval_shape(lambda: broadcast_layer(call, width))
        x = jax.ShapeDtypeStruct((BATCH, width), jnp.float32)
        if call.kind.startswith('record'):  # graph mode: split once, merged inside
            self.graphdef, state = nnx.split((self.stack, shared))
            self.args = (state, x)
        else:
            self.args = (self.stack, shared, x)

    def function(self) -> Callable[..., Any]:
        """A new function of ``self.args`` making the call (no cache hit)."""
        call, variant, seen = self.call, self.variant, self.seen
        if call.kind == 'tree_vmap':
            return lambda keys: stack_creation(call, self.width, variant)(keys)
        if call.kind.startswith('record'):
            graphdef = self.graphdef
            return lambda state, x: scan_call(call, variant, seen)(
                *nnx.merge(graphdef, state), x)
        return lambda stack, shared, x: scan_call(call, variant, seen)(stack, shared, x)

    def trace(self) -> Any:
        return jax.make_jaxpr(self.function())(*self.args)

    def metadata(self) -> dict[str, Any]:
        """The metadata the body saw and that the stack has after one trace."""
        if self.call.kind == 'tree_vmap':
            after = nnx.eval_shape(self.function(), *self.args)
        else:
            self.trace()
            after = self.stack
        seen = self.seen or [None]
        return {'body': seen[0], 'after': shardings(after)}


def shardings(node: Any) -> dict[str, Any]:
    """The sharding metadata of each Variable of ``node``, by path."""
    leaves = jax.tree.leaves_with_path(node, is_leaf=lambda x: isinstance(x, nnx.Variable))
    return {jax.tree_util.keystr(path): {
        key: list(value) if isinstance(value, tuple) else value
        for key, value in variable.get_metadata().items() if key.endswith('sharding')}
        for path, variable in leaves if isinstance(variable, nnx.Variable)}


def count(call: Call, repeats: int, warmup: int, counter: Any) -> dict[str, Any]:
    """Main-thread instructions of ``repeats`` traces after ``warmup`` ones."""
    for _ in range(warmup):
        call.trace()
    counts = [counter.count('trace', call.trace)[0] for _ in range(repeats)]
    return {'instructions': {'trace': counts}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--cases', required=True,
                        help='comma-separated variant/kind:LxV[:bN], e.g. '
                             'plain/tree_scan:64x4:b8')
    parser.add_argument('--width', type=int, required=True)
    parser.add_argument('--repeats', type=int, default=3)
    parser.add_argument('--warmup', type=int, default=1)
    parser.add_argument('--count', action='store_true', help='count under callgrind')
    parser.add_argument('--out-dir', type=Path, help="valgrind's --callgrind-out-file dir")
    parser.add_argument('--marks', type=Path, help='callgrind_marks.c as a shared library')
    args = parser.parse_args()
    counter = None
    if args.count:
        from callgrind import Counter, load_marks
        counter = Counter(args.out_dir, load_marks(args.marks))
    with jax.set_mesh(bench_model.make_mesh()):
        for item in args.cases.split(','):
            variant, _, text = item.partition('/')
            spec = parse_call(text)

            def measure() -> dict[str, Any]:
                call = Call(spec, args.width, variant, watch=counter is None)
                if counter is None:
                    return {'metadata': call.metadata()}
                return count(call, args.repeats, args.warmup, counter)

            print(json.dumps({'program': 'calls', 'case': str(spec), 'variant': variant,
                              'width': args.width, 'versions': bench_model.versions(),
                              **bench_model.guarded(measure)}), flush=True)


if __name__ == '__main__':
    main()
