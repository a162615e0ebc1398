"""Property tests of the metadata invariants over random transform nests.

I1: after any lifted transform, every non-empty ``out_sharding`` has exactly
one entry per array axis, inside the transform and out of it.
I2: a created axis gets ``None`` by default, or the ``PARTITION_NAME`` given.
I2c: a read-only pass of a default (or named) transform leaves every spec form
as it was (value, type, tree structure).
I3: passing stacked Variables through vmap/scan with equal in/out axes and no
``transform_metadata`` leaves their metadata exactly as it was.

Eager sharding is off: these are properties of the metadata bookkeeping; the
sharded end-to-end cases live in test_user_reports.py.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax.numpy as jnp
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from flax import nnx

MODES = {  # name: (graph, graph_updates)
    'graph': (True, True),
    'graph-no-updates': (True, False),
    'tree': (False, False),
}
Metadata = tuple[Any, ...] | None


@dataclasses.dataclass(frozen=True)
class Layer:
    kind: str  # 'vmap' or 'scan'
    mode: str
    size: int
    out_axis: int  # may be negative: normalized against the stacked rank
    partition: Any  # 'default' (no transform_metadata), None, or a name

    def transform_metadata(self) -> dict[str, Any]:
        if self.partition == 'default':
            return {}
        return {'transform_metadata': {nnx.PARTITION_NAME: self.partition}}


class Leaf(nnx.Module):
    def __init__(self, shape: tuple[int, ...], metadata: Metadata):
        kwargs = {} if metadata is None else {'out_sharding': metadata}
        self.w = nnx.Param(jnp.zeros(shape), **kwargs)


@st.composite
def base_metadata(draw: st.DrawFn, ndim: int) -> Metadata:
    kind = draw(st.sampled_from(['none', 'empty', 'names']))
    if kind == 'none':
        return None
    if kind == 'empty':
        return ()
    names = draw(st.permutations(['a', 'b', 'c']))
    return tuple(draw(st.sampled_from([names[i], None])) for i in range(ndim))


@st.composite
def nests(draw: st.DrawFn) -> tuple[tuple[int, ...], Metadata, list[Layer]]:
    shape = tuple(draw(st.lists(st.sampled_from([2, 3]), min_size=1, max_size=3)))
    metadata = draw(base_metadata(len(shape)))
    depth = draw(st.integers(1, 3))
    layers = []
    rank = len(shape) + depth  # rank after all layers; inner layers see less
    for level in range(depth):
        stacked_rank = rank - level  # rank right after this layer stacks
        kind = draw(st.sampled_from(['vmap', 'scan']))
        mode = draw(st.sampled_from(sorted(MODES)))
        out_axis = draw(st.integers(-stacked_rank, stacked_rank - 1)) if kind == 'vmap' else 0
        # Explicit names only where every mode documents them: graph mode.
        partitions = ['default', None, f'l{level}'] if mode == 'graph' else ['default']
        layers.append(Layer(kind, mode, draw(st.integers(1, 3)), out_axis,
                            draw(st.sampled_from(partitions))))
    return shape, metadata, layers


def create(shape: tuple[int, ...], metadata: Metadata, layers: list[Layer]) -> Leaf:
    """Leaf stacked by ``layers[0]`` (outermost) ... ``layers[-1]`` (innermost)."""
    if not layers:
        return Leaf(shape, metadata)
    layer, inner = layers[0], layers[1:]
    graph, graph_updates = MODES[layer.mode]
    xs = jnp.zeros((layer.size,))
    if layer.kind == 'vmap':
        @nnx.vmap(in_axes=0, out_axes=layer.out_axis, graph=graph,
                  graph_updates=graph_updates, **layer.transform_metadata())
        def stack(x: Any) -> Leaf:
            return create(shape, metadata, inner)

        return stack(xs)

    @nnx.scan(in_axes=(nnx.Carry, 0), out_axes=(nnx.Carry, 0), graph=graph,
              graph_updates=graph_updates, **layer.transform_metadata())
    def scan_stack(carry: Any, x: Any) -> tuple[Any, Leaf]:
        return carry, create(shape, metadata, inner)

    return scan_stack(jnp.zeros(()), xs)[1]


def expected_metadata(metadata: Metadata, layers: list[Layer]) -> Metadata:
    if not metadata:
        return metadata
    entries = list(metadata)
    for layer in reversed(layers):  # innermost stacks first
        axis = layer.out_axis % (len(entries) + 1)
        entries.insert(axis, None if layer.partition == 'default' else layer.partition)
    return tuple(entries)


SETTINGS = settings(max_examples=60, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(nests())
def test_created_stacks_have_one_entry_per_axis(nest: Any) -> None:
    shape, metadata, layers = nest
    with nnx.use_eager_sharding(False):
        leaf = create(shape, metadata, layers)
    assert leaf.w.ndim == len(shape) + len(layers)
    assert leaf.w.get_metadata().get('out_sharding') == expected_metadata(metadata, layers)


@SETTINGS
@given(nests(), st.sampled_from(['vmap', 'scan']), st.sampled_from(sorted(MODES)),
       st.integers(-4, 3))
def test_pass_through_keeps_metadata_exactly(
    nest: Any, kind: str, mode: str, axis: int
) -> None:
    shape, metadata, layers = nest
    with nnx.use_eager_sharding(False):
        leaf = create(shape, metadata, layers)
        before = leaf.w.get_metadata().get('out_sharding')
        ndim = leaf.w.ndim
        axis = axis % ndim if kind == 'vmap' else 0
        graph, graph_updates = MODES[mode]
        seen: list[tuple[Any, int]] = []

        def body(module: Leaf) -> Leaf:
            seen.append((module.w.get_metadata().get('out_sharding'), module.w.ndim))
            # A copy: modes without graph updates refuse returning inputs.
            return nnx.clone(module)

        if kind == 'vmap':
            out = nnx.vmap(body, in_axes=axis, out_axes=axis, graph=graph,
                           graph_updates=graph_updates)(leaf)
        else:
            out = nnx.scan(lambda c, m: (c, body(m)), in_axes=(nnx.Carry, 0),
                           out_axes=(nnx.Carry, 0), graph=graph,
                           graph_updates=graph_updates)(jnp.zeros(()), leaf)[1]
    assert out.w.get_metadata().get('out_sharding') == before
    assert leaf.w.get_metadata().get('out_sharding') == before
    for inside, inner_ndim in seen:
        assert inner_ndim == ndim - 1
        if inside:
            assert len(inside) == inner_ndim, (inside, inner_ndim)
    if before:
        expected_inside = before[:axis] + before[axis + 1:]
        assert all(inside == expected_inside for inside, _ in seen)


# I2c: a read-only pass of a default transform changes nothing, for every
# spec form vanilla accepts, ref or not, any axis, any mode, any callable,
# and a given name whose entry the spec has at the axis.
SPEC_FORMS = ('full', 'short', 'one entry', '(None,)', 'empty', 'list', 'pspec',
              'named sharding')


def spec_of(form: str) -> Any:
    import jax
    return {
        'full': ('a', None, 'b'), 'short': ('a',), 'one entry': ('b',),
        '(None,)': (None,), 'empty': (), 'list': ['a', None],
        'pspec': jax.P('a', None, unreduced={'b'}),
        'named sharding': jax.NamedSharding(jax.make_mesh((1,), ('a',)), jax.P('a')),
    }[form]


@dataclasses.dataclass
class Reader:  # an unhashable callable object
    scale: float

    def __call__(self, w: nnx.Param) -> Any:
        return w[...].sum() * self.scale

    def method(self, w: nnx.Param) -> Any:
        return self(w)


def callable_of(kind: str) -> Any:
    import functools

    def read(w: nnx.Param) -> Any:
        return w[...].sum()

    return {'function': read, 'object': Reader(1.0), 'method': Reader(1.0).method,
            'partial': functools.partial(read)}[kind]


@SETTINGS
@given(st.sampled_from(SPEC_FORMS + ('none',)), st.booleans(), st.integers(-3, 2),
       st.sampled_from(['vmap', 'scan']), st.sampled_from(sorted(MODES)),
       st.sampled_from(['function', 'object', 'method', 'partial']), st.booleans())
def test_read_only_pass_leaves_metadata(
    form: str, ref: bool, axis: int, kind: str, mode: str, fn: str, named: bool
) -> None:
    import jax

    metadata = {} if form == 'none' else {'out_sharding': spec_of(form)}
    w = nnx.Param(jnp.ones((2, 3, 4)), eager_sharding=False, ref=ref, **metadata)
    before = w.get_metadata()
    structure = jax.tree.structure(w)
    graph, graph_updates = MODES[mode]
    axis = axis if kind == 'vmap' else 0
    spec = metadata.get('out_sharding')
    entries = [] if isinstance(spec, jax.NamedSharding) else list(
        getattr(spec, 'partitions', spec or ()))
    index = axis % 3
    # a given name is the entry at the axis (vanilla's named path checks it)
    extra = {'transform_metadata': {nnx.PARTITION_NAME: (
        entries[index] if index < len(entries) else None)}} if named else {}
    read = callable_of(fn)
    if kind == 'vmap':
        nnx.vmap(read, in_axes=axis, graph=graph, graph_updates=graph_updates,
                 **extra)(w)
    else:
        def body(c: Any, w: nnx.Param) -> Any:
            return c + read(w), None
        nnx.scan(body, in_axes=(nnx.Carry, 0), graph=graph,
                 graph_updates=graph_updates, **extra)(jnp.zeros(()), w)
    assert w.get_metadata() == before
    assert type(w.get_metadata().get('out_sharding')) is type(spec)
    assert jax.tree.structure(w) == structure
