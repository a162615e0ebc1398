"""Lifted transforms and the sharding metadata of what they map, copy and make.

Mesh ``(2, 4)`` ``('a', 'b')`` (Auto unless said), per-layer kernels
``(4, 8)`` declared ``('a', 'b')`` or ``(None, 'b')``.
"""

from __future__ import annotations

import functools
import hashlib
import re
import warnings
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax

from flax import nnx
from tests.oracle.probes import Report, probe
from tests.oracle.probes.util import mesh, sharding, spec, stack_with_jax_vmap

SPEC = ('a', 'b')


def layer(rngs: nnx.Rngs, out_sharding: Any = SPEC) -> nnx.Linear:
    init = nnx.with_partitioning(nnx.initializers.lecun_normal(), out_sharding)
    return nnx.Linear(4, 8, use_bias=False, kernel_init=init, rngs=rngs)


def stack(size: int = 3, out_sharding: Any = SPEC, **vmap_kwargs: Any) -> nnx.Linear:
    @nnx.split_rngs(splits=size)
    @nnx.vmap(**{'in_axes': 0, 'out_axes': 0, **vmap_kwargs})
    def create(rngs: nnx.Rngs) -> nnx.Linear:
        return layer(rngs, out_sharding)

    return create(nnx.Rngs(0))


def digest(x: Any) -> str:
    """Values rounded to 5 decimals, hashed: equal across flaxes or not."""
    rounded = np.round(np.asarray(jax.device_get(x), dtype=np.float64), 5)
    return f'{list(rounded.shape)}:' + hashlib.sha256(rounded.tobytes()).hexdigest()[:16]


def kernel(model: Any) -> Report:
    value = model.kernel.get_value()
    return {'shape': list(value.shape), 'sharding': sharding(value),
            'out_sharding': spec(model.kernel.out_sharding)}


def stacked_problems(*kernels: Report) -> list[str]:
    """A stacked kernel's metadata must be as long as its rank, and say where it lives."""
    problems = []
    for k in kernels:
        entries = k['out_sharding']['entries']
        if len(entries) != len(k['shape']):
            problems.append(f'{entries} on a {k["shape"]} array')
        elif isinstance(k['sharding'], list) and entries != k['sharding']:
            problems.append(f'metadata {entries}, array {k["sharding"]}')
    return problems


# Pytree ops between mapped and unmapped Variables inside a body.
@probe()
def tree_map_mapped_and_shared_in_scan() -> Report:
    with jax.set_mesh(mesh()):
        layers = stack()
        shared = layer(nnx.Rngs(1))

        @nnx.scan(in_axes=(0, None, nnx.Carry), out_axes=nnx.Carry)
        def body(layer_: nnx.Linear, shared_: nnx.Linear, total: jax.Array) -> jax.Array:
            added = jax.tree.map(lambda p, s: p + s, nnx.state(layer_), nnx.state(shared_))
            return total + jnp.sum(added['kernel'][...])

        total = body(layers, shared, jnp.zeros(()))
    return {'total': digest(total)}


# Nothing of the bookkeeping shows inside a body.
@probe()
def metadata_seen_inside_scan_body() -> Report:
    seen: dict[str, Any] = {}
    with jax.set_mesh(mesh()):
        layers = stack()

        @nnx.scan(in_axes=(0, nnx.Carry), out_axes=nnx.Carry)
        def body(layer_: nnx.Linear, x: jax.Array) -> jax.Array:
            metadata = layer_.kernel.get_metadata()
            seen['keys'] = sorted(metadata)
            seen['out_sharding'] = spec(metadata['out_sharding'])
            seen['graphdef'] = re.sub(r' at 0x[0-9a-f]+', '', str(nnx.graphdef(layer_)))
            seen['repr'] = repr(layer_.kernel).count('\n')
            return layer_(x)[:, :4]

        body(layers, jnp.ones((2, 4)))
    return seen


# One jitted function, inside and outside a transform: one trace.
@probe()
def jitted_layer_inside_and_outside_scan() -> Report:
    traces = []

    @nnx.jit
    def apply(layer_: nnx.Linear, x: jax.Array) -> jax.Array:
        traces.append(1)
        return layer_(x)

    with nnx.use_eager_sharding(False):
        plain = layer(nnx.Rngs(1))
        layers = stack()
        x = jnp.ones((8, 4))
        apply(plain, x)

        @nnx.scan(in_axes=(0, nnx.Carry), out_axes=nnx.Carry)
        def body(layer_: nnx.Linear, x: jax.Array) -> jax.Array:
            return apply(layer_, x)[:, :4]

        y = body(layers, x)
    return {'traces': len(traces), 'y': digest(y)}


# The decorator under jit, used under nnx.vmap and under jax.vmap.
def decorated_create(graph: bool) -> Any:
    @nnx.transform_metadata(in_axes=0, out_axes=0, partition='a', graph=graph)
    def create(key: jax.Array) -> nnx.Linear:
        return layer(nnx.Rngs(key), (None, 'b'))

    return nnx.jit(create, graph=graph) if graph else jax.jit(create)


# The decorator behind jax.jit (functools.wraps): the transform sees it.
@probe()
def decorator_under_jit_nnx_vmap_then_jax_vmap() -> Report:
    keys = jax.random.split(jax.random.key(0), 2)
    out: Report = {}
    with nnx.use_eager_sharding(False):
        g = decorated_create(graph=False)
        out['nnx_vmap'] = spec(nnx.vmap(g, graph=False)(keys).kernel.out_sharding)
        out['jax_vmap'] = spec(jax.vmap(g)(keys).kernel.out_sharding)
        out['nnx_vmap_again'] = spec(nnx.vmap(g, graph=False)(keys).kernel.out_sharding)
        model = jax.vmap(g)(keys)
        out['keys'] = sorted(model.kernel.get_metadata())
    return out


@probe()
def decorator_jax_vmap_then_nnx_vmap() -> Report:
    keys = jax.random.split(jax.random.key(0), 2)
    out: Report = {}
    with nnx.use_eager_sharding(False):
        g = decorated_create(graph=False)
        out['jax_vmap'] = spec(jax.vmap(g)(keys).kernel.out_sharding)
        out['nnx_vmap'] = spec(nnx.vmap(g, graph=False)(keys).kernel.out_sharding)
    return out


# The recipe: the decorator outermost, right under the transform.
@probe()
def decorator_over_jit_under_nnx_vmap() -> Report:
    @nnx.transform_metadata(in_axes=0, out_axes=0, partition='a', graph=False)
    @jax.jit
    def create(key: jax.Array) -> nnx.Linear:
        return layer(nnx.Rngs(key), (None, 'b'))

    keys = jax.random.split(jax.random.key(0), 2)
    with nnx.use_eager_sharding(False):
        model = nnx.vmap(create, graph=False)(keys)
    return {'kernel': spec(model.kernel.out_sharding)}


@probe()
def decorator_flip_recipe_graph_mode() -> Report:
    """FLIP 5310's recipe: the decorator right under nnx.vmap, short spec too."""
    out: Report = {}
    for name, per_layer in (('full', ('a', 'b')), ('short', ('b',)), ('none', None)):
        for partition in ('layers', None):
            with nnx.use_eager_sharding(False):
                @nnx.split_rngs(splits=3)
                @nnx.vmap(in_axes=0, out_axes=0)
                @nnx.transform_metadata(in_axes=0, out_axes=0, partition=partition)
                def create(rngs: nnx.Rngs) -> nnx.Linear:
                    return layer(rngs, per_layer)

                model = create(nnx.Rngs(0))
                seen = {}

                @nnx.scan(in_axes=(0, nnx.Carry), out_axes=nnx.Carry)
                @nnx.transform_metadata(in_axes=(0, None), out_axes=None,
                                        partition=partition)
                def forward(layer_: nnx.Linear, x: jax.Array) -> jax.Array:
                    seen['body'] = spec(layer_.kernel.out_sharding)
                    return layer_(x)[:, :4]

                forward(model, jnp.ones((2, 4)))
            out[f'{name}-{partition}'] = [spec(model.kernel.out_sharding), seen['body']]
    return out


# The decorator under jax.vmap inside a default nnx.vmap over layers.
def experts_in_layers_problems(r: Report) -> list[str]:
    return stacked_problems(r['kernel']) + (
        [] if r['kernel']['out_sharding']['entries'][:2] == [None, 'expert'] else
        [f'experts axis not second: {r["kernel"]}'])


@probe(fixed=experts_in_layers_problems)
def decorator_under_jax_vmap_inside_nnx_vmap() -> Report:
    with nnx.use_eager_sharding(False):
        @nnx.transform_metadata(in_axes=0, out_axes=0, partition='expert', graph=False)
        def expert(key: jax.Array) -> nnx.Linear:
            return layer(nnx.Rngs(key), ('a', None))

        @nnx.vmap(in_axes=0, out_axes=0)
        def create_layer(key: jax.Array) -> nnx.Linear:
            return jax.vmap(expert)(jax.random.split(key, 2))

        model = create_layer(jax.random.split(jax.random.key(0), 3))
    return {'kernel': kernel(model)}


# nnx.update inside an unnamed vmap over a 'layers'-named stack.
def named_kept_problems(r: Report) -> list[str]:
    found = r['kernel']['out_sharding']['entries']
    return [] if found == ['layers', 'a', None] else [f'out_sharding {found}']


@probe(fixed=named_kept_problems, same=('values',))
def update_in_body_keeps_named_entry() -> Report:
    with nnx.use_eager_sharding(False):
        layers = stack(out_sharding=('a', None),
                       transform_metadata={nnx.PARTITION_NAME: 'layers'})
        pretrained = layer(nnx.Rngs(7), ('a', None))

        @nnx.vmap(in_axes=(0, None), out_axes=0)
        def load(layer_: nnx.Linear, block: nnx.Linear) -> None:
            nnx.update(layer_, nnx.state(block))

        load(layers, pretrained)
    return {'kernel': kernel(layers), 'values': digest(layers.kernel[...])}


# Copies with in_axes != out_axes; the default equals an explicit None.
def copies_problems(r: Report) -> list[str]:
    problems = stacked_problems(r['default'], r['explicit'], r['rebuilt'])
    if r['default'] != r['explicit']:
        problems.append(f'default {r["default"]} != explicit None {r["explicit"]}')
    return problems


@probe(fixed=copies_problems, same=('values',))
def copy_with_other_out_axes() -> Report:
    out: Report = {}
    with jax.set_mesh(mesh()):
        layers = stack(3, ('a', 'b'), out_axes=1,
                       transform_metadata={nnx.PARTITION_NAME: None})
        clone = lambda p: nnx.clone(p)  # noqa: E731
        rebuild = lambda p: nnx.Param(p.get_value(), **p.get_metadata())  # noqa: E731
        for name, fn, kwargs in (('default', clone, {}), ('rebuilt', rebuild, {}),
                                 ('explicit', clone,
                                  {'transform_metadata': {nnx.PARTITION_NAME: None}})):
            copy = nnx.vmap(fn, in_axes=1, out_axes=0, **kwargs)(layers.kernel)
            value = copy.get_value()
            out[name] = {'shape': list(value.shape), 'sharding': sharding(value),
                         'out_sharding': spec(copy.out_sharding)}
        out['values'] = digest(copy[...])
    return out


@probe()
def copy_with_other_out_axes_explicit_none() -> Report:
    with jax.set_mesh(mesh()):
        layers = stack(3, ('a', 'b'), out_axes=1,
                       transform_metadata={nnx.PARTITION_NAME: None})
        copy = nnx.vmap(lambda p: nnx.clone(p), in_axes=1, out_axes=0,
                        transform_metadata={nnx.PARTITION_NAME: None})(layers.kernel)
    return {'copy': spec(copy.out_sharding), 'input': spec(layers.kernel.out_sharding),
            'sharding': sharding(copy.get_value())}


def named_scan_over_optimizer_sharding(optimizer_sharding: Any) -> Report:
    seen: dict[str, Any] = {}
    with nnx.use_eager_sharding(False):
        model = nnx.Module()
        model.kernel = nnx.Param(jnp.ones((3, 4, 8)), out_sharding=('layers', 'a', 'b'),
                                 optimizer_sharding=optimizer_sharding)

        @nnx.scan(in_axes=(0, nnx.Carry), out_axes=nnx.Carry,
                  transform_metadata={nnx.PARTITION_NAME: 'layers'})
        def body(m: nnx.Module, x: jax.Array) -> jax.Array:
            seen['body'] = [spec(m.kernel.out_sharding), spec(m.kernel.optimizer_sharding)]
            return x @ m.kernel[...][:, :4]

        y = body(model, jnp.ones((2, 4)))
    return {'seen': seen['body'][0], 'after': spec(model.kernel.out_sharding),
            'y': digest(y)}


# A stack whose optimizer_sharding lacks the given name keeps it as written.
@probe()
def named_scan_over_an_unnamed_optimizer_sharding() -> Report:
    try:
        return named_scan_over_optimizer_sharding(('a', None, 'b'))
    except ValueError as e:
        return {'raised': f'ValueError: {str(e).splitlines()[0]}'}


# The recipe: the stacked optimizer_sharding names the layer axis too.
@probe()
def named_scan_over_a_named_optimizer_sharding() -> Report:
    return named_scan_over_optimizer_sharding(('layers', None, 'b'))


# Tree mode ignores a given transform_metadata, as vanilla does: ours stacks
# the default name, and the apply pass gives back what it took.
def tree_mode_named_problems(r: Report) -> list[str]:
    entries = r['created']['entries']
    problems = [] if len(entries) == len(r['shape']) else [
        f'{entries} on a {r["shape"]} array']
    return problems + ([] if r['apply_kept_metadata'] else ['apply changed it'])


@probe(fixed=tree_mode_named_problems, same=('y', 'apply_kept_metadata'))
def tree_mode_named_create_and_apply() -> Report:
    with nnx.use_eager_sharding(False):
        @nnx.vmap(in_axes=0, out_axes=0, graph=False,
                  transform_metadata={nnx.PARTITION_NAME: 'layers'})
        def create(key: jax.Array) -> nnx.Linear:
            return layer(nnx.Rngs(key))

        model = create(jax.random.split(jax.random.key(0), 3))
        created = spec(model.kernel.out_sharding)

        @nnx.vmap(in_axes=(0, None), out_axes=0, graph=False,
                  transform_metadata={nnx.PARTITION_NAME: 'layers'})
        def apply(m: nnx.Linear, x: jax.Array) -> jax.Array:
            return m(x)

        y = apply(model, jnp.ones((2, 4)))
    return {'created': created, 'y': digest(y), 'shape': model.kernel.shape,
            'apply_kept_metadata': spec(model.kernel.out_sharding) == created}


# spmd_axis_name names and shards the stacked axis.
def spmd_problems(r: Report) -> list[str]:
    return stacked_problems(*r.values()) + [
        f'{name}: layer axis not sharded: {k["sharding"]}'
        for name, k in r.items() if k['sharding'][0] != k['axis']]


@probe(fixed=spmd_problems)
def spmd_axis_name_under_jit_auto() -> Report:
    with jax.set_mesh(mesh()):
        @nnx.jit
        def create() -> nnx.Linear:
            return stack(2, (None, 'b'), spmd_axis_name='a')

        return {'jit': {**kernel(create()), 'axis': 'a'},
                'eager': {**kernel(stack(2, (None, 'b'), spmd_axis_name='a')),
                          'axis': 'a'}}


# spmd_axis_name names the axis on Explicit meshes and moves no data
# (JAX does not batch reshard along it): metadata stacked, arrays as vanilla.
def spmd_named_problems(r: Report) -> list[str]:
    return [f'{name}: {k["out_sharding"]}' for name, k in r.items()
            if name != 'arrays' and k['out_sharding']['entries'][:1] != [k['axis']]]


@probe(fixed=spmd_named_problems, same=('arrays',))
def spmd_axis_name_explicit_mesh() -> Report:
    names = ('layers', 'fsdp', 'tensor')
    with jax.set_mesh(mesh('explicit', (2, 2, 2), names)):
        eager = stack(2, ('fsdp', 'tensor'), spmd_axis_name='layers')
        jitted = jax.jit(lambda: nnx.state(stack(2, ('fsdp', 'tensor'),
                                                 spmd_axis_name='layers')))()
        jit_kernel = jitted['kernel']
        value = jit_kernel.get_value()
        return {'eager': {**kernel(eager), 'axis': 'layers'},
                'jit': {'shape': list(value.shape), 'sharding': sharding(value),
                        'out_sharding': spec(jit_kernel.out_sharding), 'axis': 'layers'},
                'arrays': [sharding(eager.kernel.get_value()), sharding(value)]}


# Families: nested transforms, unnamed pass-through of named stacks.
@probe(same=('y',))
def named_stack_through_default_scan() -> Report:
    seen: dict[str, Any] = {}
    with jax.set_mesh(mesh()):
        layers = stack(2, (None, 'b'), transform_metadata={nnx.PARTITION_NAME: 'a'})
        before = spec(layers.kernel.out_sharding)

        @nnx.scan(in_axes=(0, nnx.Carry), out_axes=nnx.Carry)
        def body(layer_: nnx.Linear, x: jax.Array) -> jax.Array:
            seen['body'] = spec(layer_.kernel.out_sharding)
            return layer_(x)[:, :4]

        y = body(layers, jnp.ones((2, 4)))
    return {'before': before, 'after': spec(layers.kernel.out_sharding),
            'y': digest(y)}


def nested_problems(r: Report) -> list[str]:
    return stacked_problems(r['kernel'])


@probe(fixed=nested_problems, same=('values',))
def nested_vmap_in_vmap() -> Report:
    with jax.set_mesh(mesh()):
        @nnx.vmap(in_axes=0, out_axes=0)
        def outer(key: jax.Array) -> nnx.Linear:
            @nnx.vmap(in_axes=0, out_axes=1)
            def inner(key: jax.Array) -> nnx.Linear:
                return layer(nnx.Rngs(key), (None, 'b'))

            return inner(jax.random.split(key, 2))

        model = outer(jax.random.split(jax.random.key(0), 2))
    return {'kernel': kernel(model), 'values': digest(model.kernel[...])}


# A one-entry spec mapped by a default transform keeps its entry.
@probe()
def length1_spec_through_a_default_vmap() -> Report:
    with jax.set_mesh(mesh()):
        p = nnx.Param(jnp.ones((4,)), out_sharding=('a',))
        y = nnx.vmap(lambda p: p[...] * 2)(p)
    return {'after': spec(p.out_sharding), 'y': digest(y)}


# The recipe: map the array, not the Variable.
@probe()
def length1_spec_survives_a_forward_pass() -> Report:
    traces = []

    @nnx.jit
    def step(p: nnx.Param) -> jax.Array:
        traces.append(1)
        return p[...].sum()

    with jax.set_mesh(mesh()):
        p = nnx.Param(jnp.ones((4,)), out_sharding=('a',))
        ref = nnx.clone(p)
        step(p)
        y = nnx.vmap(lambda v: v * 2)(p[...])
        summed = jax.tree.map(lambda a, b: a + b, ref, p)
        step(p)
    return {'after': spec(p.out_sharding), 'sum': digest(summed[...]),
            'traces': len(traces), 'y': digest(y)}


@probe()
def spmd_axis_name_indivisible_explicit() -> Report:
    with jax.set_mesh(mesh('explicit')):
        w = nnx.vmap(lambda r: nnx.Param(jnp.zeros((8,)), out_sharding=('b',)),
                     spmd_axis_name='a', axis_size=3, in_axes=None)(nnx.Rngs(0))
    return {'sharding': sharding(w.get_value()), 'shape': list(w.shape)}


# A NamedSharding as out_sharding is left alone.
@probe()
def spmd_axis_name_with_named_sharding_metadata() -> Report:
    named = jax.sharding.NamedSharding(mesh(), jax.P(None, 'b'))  # no context mesh
    try:
        w = nnx.vmap(lambda x: nnx.Param(x * jnp.ones((4, 8)), out_sharding=named),
                     spmd_axis_name='a')(jnp.arange(2.0))
    except TypeError as e:
        return {'raised': f'TypeError: {e}'}
    return {'sharding': sharding(w.get_value())}


# The recipe: the spec as out_sharding, the mesh as mesh.
@probe()
def spmd_axis_name_with_spec_and_mesh_metadata() -> Report:
    m = mesh()
    w = nnx.vmap(lambda x: nnx.Param(x * jnp.ones((4, 8)), out_sharding=(None, 'b'),
                                     mesh=m),
                 spmd_axis_name='a', transform_metadata={nnx.PARTITION_NAME: 'a'},
                 )(jnp.arange(2.0))
    return {'sharding': sharding(w.get_value()), 'out_sharding': spec(w.out_sharding)}


@probe()
def ref_variables_through_default_transforms() -> Report:
    """A ``ref=True`` Variable's output carries no value: its entry comes back."""
    def ref_param() -> nnx.Param:
        return nnx.Param(jnp.ones((2, 3)), out_sharding=('layers', None),
                         eager_sharding=False, ref=True)

    report: Report = {}
    for graph in (True, False):
        w = ref_param()
        nnx.vmap(lambda w: None, graph=graph)(w)
        report[f'vmap graph={graph}'] = spec(w.out_sharding)
        w = ref_param()
        nnx.scan(lambda c, w: (c, None), in_axes=(nnx.Carry, 0), graph=graph)(0, w)
        report[f'scan graph={graph}'] = spec(w.out_sharding)
    return report


@probe()
def spec_with_unreduced_axes_through_default_vmap() -> Report:
    w = nnx.Param(jnp.ones((2, 3)), out_sharding=jax.P('layers', None, unreduced={'u'}),
                  eager_sharding=False)
    nnx.vmap(lambda w: None)(w)
    return {'after': repr(w.out_sharding)}


# The stacked axis's entry follows the data: copies, gradients, optimizer state.
def sharded_init(node: Any, mesh_: jax.sharding.Mesh) -> None:
    """The flax_gspmd guide's recipe: put each array where its metadata says."""
    state = nnx.state(node)
    specs = nnx.get_partition_spec(state)
    nnx.update(node, jax.device_put(
        state, jax.tree.map(lambda s: jax.NamedSharding(mesh_, s), specs)))


def named_stack(name: Any = 'a', size: int = 2) -> nnx.Linear:
    return stack(size, (None, 'b'), transform_metadata={nnx.PARTITION_NAME: name})


# A copy of a named stack through default transforms keeps the name.
@probe()
def named_stack_copied_through_default_transforms() -> Report:
    out: Report = {}
    with nnx.use_eager_sharding(False):
        layers = named_stack()
        copies = {
            'vmap': nnx.vmap(lambda m: nnx.clone(m))(layers),
            'tree_vmap': nnx.vmap(lambda m: nnx.clone(m), graph=False)(layers),
            'scan': nnx.scan(lambda c, m: (c, nnx.clone(m)), in_axes=(nnx.Carry, 0),
                             out_axes=(nnx.Carry, 0))(None, layers)[1],
        }
    m = mesh()
    with jax.set_mesh(m):
        for name, copy in copies.items():
            sharded_init(copy, m)
            out[name] = kernel(copy)
    out['input'] = spec(layers.kernel.out_sharding)
    return out


# Ensemble gradients under nnx.jit keep the name; tree ops line up.
@probe()
def ensemble_gradients_keep_the_name() -> Report:
    with nnx.use_eager_sharding(False):
        ensemble = named_stack('ens')

        def loss(m: nnx.Linear, x: jax.Array) -> jax.Array:
            return jnp.sum(m(x))

        @nnx.jit
        def step(m: nnx.Linear, x: jax.Array) -> tuple[Any, Any]:
            grads = nnx.vmap(nnx.grad(loss), in_axes=(0, None))(m, x)
            params = nnx.state(m, nnx.Param)
            return grads, jax.tree.map(lambda p, g: p - 0.1 * g, params, grads)

        grads, params = step(ensemble, jnp.ones((3, 4)))
    return {'grads': spec(grads['kernel'].out_sharding),
            'params': spec(params['kernel'].out_sharding),
            'values': digest(params['kernel'][...])}


# The decorator through NNX's autodiff wrappers under a default nnx.vmap over
# a stack it names: no `Expected to remove 'a' ...` from the default call.
# Series 13: nnx.grad and nnx.value_and_grad keep their wrapped function
# (functools.wraps), so the default nnx.vmap sees the decorator behind them,
# as behind nnx.remat, and every one runs as on vanilla.
@probe()
def decorator_through_grad_and_remat() -> Report:
    out: Report = {}
    with nnx.use_eager_sharding(False):
        layers = named_stack('a')
        x = jnp.ones((3, 4))
        seen: list[Any] = []

        def loss(m: nnx.Linear, x: jax.Array) -> jax.Array:
            seen.append(spec(m.kernel.out_sharding))
            return jnp.sum(m(x))

        named = nnx.transform_metadata(loss, in_axes=(0, None), partition='a')
        wrappers = {'grad': nnx.grad, 'value_and_grad': nnx.value_and_grad,
                    'remat': nnx.remat,
                    'tree_grad': functools.partial(nnx.grad, graph=False)}
        for name, wrap in wrappers.items():
            try:
                result = nnx.vmap(wrap(named), in_axes=(0, None))(layers, x)
            except ValueError as e:
                out[name] = f'ValueError: {str(e).splitlines()[0]}'
                continue
            out[name] = [digest(leaf) for leaf in jax.tree.leaves(result)]
            if name == 'grad':
                out['grads'] = spec(result['kernel'].out_sharding)
    out['seen'] = sorted(set(map(str, seen)))
    out['values'] = digest(layers.kernel[...])
    out['input'] = spec(layers.kernel.out_sharding)
    return out


# The recipe: the decorator over the wrapper, passed to the transform.
@probe()
def decorator_over_grad_under_nnx_vmap() -> Report:
    with nnx.use_eager_sharding(False):
        layers = named_stack('a')

        def loss(m: nnx.Linear, x: jax.Array) -> jax.Array:
            return jnp.sum(m(x))

        grad = nnx.transform_metadata(nnx.grad(loss), in_axes=(0, None), partition='a')
        grads = nnx.vmap(grad, in_axes=(0, None))(layers, jnp.ones((3, 4)))
    return {'grads': spec(grads['kernel'].out_sharding),
            'values': digest(grads['kernel'][...])}


# An error raised in a default transform's body about a
# mapped Variable's spec names the spec the body sees, the per-layer one
# (vanilla: the stacked one); same exception type (README, Compatibility).
# In tree mode a named stack is left to nnx.transform_metadata: the
# stacked spec, as on vanilla.
def body_error_problems(r: Report) -> list[str]:
    want = {'graph=True': "ValueError: Resource axis: c of P(None, 'c') is not found",
            'graph=False': "ValueError: Resource axis: c of P('a', None, 'c') is not"}
    return [f'{mode}: {error}' for mode, error in r.items()
            if not str(error).startswith(want[mode])]


@probe(fixed=body_error_problems)
def error_in_a_body_names_the_per_layer_spec() -> Report:
    with nnx.use_eager_sharding(False):
        layers = stack(2, (None, 'c'), transform_metadata={nnx.PARTITION_NAME: 'a'})
    out: Report = {}
    for graph in (True, False):
        def body(m: nnx.Linear) -> nnx.Linear:
            nnx.get_named_sharding(nnx.state(m), mesh())
            return m

        try:
            nnx.vmap(body, graph=graph)(layers)
            out[f'graph={graph}'] = 'ran'
        except ValueError as e:
            out[f'graph={graph}'] = f'ValueError: {str(e).splitlines()[0]}'
    return out


# optimizer_sharding of layers created under a named (or None) vmap.
def optimizer_sharding_problems(r: Report) -> list[str]:
    return [f'{form}: optimizer_sharding {k["optimizer_sharding"]} on {k["shape"]}'
            for form, k in r.items()
            if len(k['optimizer_sharding']['entries']) != len(k['shape'])
            or k['optimizer_sharding']['entries'][0] != k['out_sharding']['entries'][0]]


@probe(fixed=optimizer_sharding_problems)
def optimizer_sharding_of_named_create() -> Report:
    out: Report = {}
    with nnx.use_eager_sharding(False):
        for form, metadata in (('default', {}), ('none', {nnx.PARTITION_NAME: None}),
                               ('name', {nnx.PARTITION_NAME: 'a'})):
            @nnx.vmap(in_axes=None, axis_size=2, transform_metadata=metadata)
            def create(_: None) -> nnx.Param:
                return nnx.Param(jnp.ones((4, 8)), out_sharding=(None, 'b'),
                                 optimizer_sharding=('b', None))

            w = create(None)
            out[form] = {'shape': list(w.shape), 'out_sharding': spec(w.out_sharding),
                         'optimizer_sharding': spec(w.optimizer_sharding)}
    return out


# A mesh-axis name stacked into a declared optimizer_sharding: the sharded
# init puts the kernels where the name says, and the state sits with them
# before and after a step (vanilla's per-layer spec shards the wrong axes).
def state_apart_problems(r: Report) -> list[str]:
    return [f'{when}: state {k["state"]}, kernel {k["kernel"]}'
            for when, k in r.items() if k['state'] != k['kernel']]


@probe(fixed=state_apart_problems)
def mesh_axis_name_in_optimizer_sharding_after_sharded_init() -> Report:
    init = nnx.with_metadata(nnx.initializers.lecun_normal(), out_sharding=(None, 'b'),
                             optimizer_sharding=(None, 'b'))

    @nnx.split_rngs(splits=2)
    @nnx.vmap(transform_metadata={nnx.PARTITION_NAME: 'a'})
    def create(rngs: nnx.Rngs) -> nnx.Linear:
        return nnx.Linear(4, 8, use_bias=False, kernel_init=init, rngs=rngs)

    m = mesh()
    out: Report = {}
    with jax.set_mesh(m):
        model = create(nnx.Rngs(0))
        sharded_init(model, m)
        optimizer = nnx.Optimizer(model, optax.adam(1e-2), wrt=nnx.Param)
        for when in ('built', 'stepped'):
            state = optimizer.opt_state[0].mu['kernel'].get_value()
            out[when] = {'kernel': sharding(model.kernel.get_value()),
                         'state': sharding(state)}
            grads = nnx.grad(lambda m: jnp.sum(m.kernel[...] ** 2))(model)
            optimizer.update(model, grads)
    return out


# nnx.transform_metadata used alone on a stack with another name.
@probe(raises="ValueError: Expected to remove 'layers'")
def decorator_alone_on_another_name() -> Report:
    with nnx.use_eager_sharding(False):
        layers = named_stack('data')
        forward = nnx.transform_metadata(lambda m: m.kernel[...].sum(), in_axes=0,
                                         out_axes=0, partition='layers')
        forward(layers)
    return {'after': spec(layers.kernel.out_sharding)}


# The decorator through functools.partial with a short spec.
def through_partial(decorate_partial: bool) -> Report:
    def create(key: jax.Array) -> nnx.Linear:
        return layer(nnx.Rngs(key), ('b',))

    if decorate_partial:
        named = nnx.transform_metadata(functools.partial(create), partition='a')
    else:
        named = functools.partial(nnx.transform_metadata(create, partition='a'))
    with nnx.use_eager_sharding(False):
        model = nnx.vmap(named)(jax.random.split(jax.random.key(0), 2))
    m = mesh()
    with jax.set_mesh(m):
        sharded_init(model, m)
    return {'kernel': kernel(model)}


@probe()
def decorator_through_partial_short_spec() -> Report:
    return through_partial(decorate_partial=False)


# The recipe: the decorator over the partial.
@probe()
def decorator_over_partial_short_spec() -> Report:
    return through_partial(decorate_partial=True)


# Documented consequence (compatibility.md, "A name the spec already
# uses"): spmd_axis_name whose mesh axis the per-layer spec uses already is
# the stacked entry all the same, as the same name given is.
def kernel_problems(r: Report) -> list[str]:
    found = r['kernel']['out_sharding']['entries']
    return [] if found == ['a', 'a', 'b'] else [f'out_sharding {found}']


@probe(fixed=kernel_problems, same=('sharding', 'values'))
def spmd_axis_name_spec_uses_the_axis_explicit() -> Report:
    with jax.set_mesh(mesh('explicit')):
        w = nnx.vmap(lambda x: nnx.Param(x * jnp.ones((4, 8)), out_sharding=('a', 'b')),
                     spmd_axis_name='a')(jnp.arange(2.0))
        value = w.get_value()
    return {'kernel': {'shape': list(value.shape), 'sharding': sharding(value),
                       'out_sharding': spec(w.out_sharding)},
            'sharding': sharding(value), 'values': digest(value)}


# The recipe: name the stacked axis None where the spec uses spmd_axis_name.
@probe()
def spmd_axis_name_spec_uses_the_axis_named_none() -> Report:
    with jax.set_mesh(mesh('explicit')):
        w = nnx.vmap(lambda x: nnx.Param(x * jnp.ones((4, 8)), out_sharding=('a', 'b')),
                     spmd_axis_name='a', transform_metadata={nnx.PARTITION_NAME: None},
                     )(jnp.arange(2.0))
        value = w.get_value()
    return {'out_sharding': spec(w.out_sharding), 'sharding': sharding(value),
            'values': digest(value)}


# Pipeline stages from spmd_axis_name on an Explicit mesh, run by nnx.scan.
def stages_problems(r: Report) -> list[str]:
    found = r['stages']['entries']
    return [] if found[:1] == ['stage'] and len(found) == 3 else [f'stages {found}']


@probe(fixed=stages_problems, same=('sharding', 'y'))
def spmd_axis_name_stages_then_scan_explicit() -> Report:
    with jax.set_mesh(mesh('explicit', (2, 4), ('stage', 'b'))):
        stages = stack(2, (None, None), spmd_axis_name='stage')

        @nnx.scan(in_axes=(0, nnx.Carry), out_axes=nnx.Carry)
        def run(s: nnx.Linear, x: jax.Array) -> jax.Array:
            return s(x)[:, :4]

        y = run(stages, jnp.ones((2, 4)))
    return {'stages': spec(stages.kernel.out_sharding),
            'sharding': sharding(stages.kernel.get_value()), 'y': digest(y)}


# Array ops on a stacked state keep its metadata (they cannot see it); the
# README's recipe runs on vanilla with the documented workaround and on ours.
def unstack_slice(state: Any) -> Any:
    """Slice 0 of a stacked state, its metadata one entry shorter."""
    return nnx.spmd.remove_axis(jax.tree.map(lambda a: a[0], state), 0,
                                {nnx.PARTITION_NAME: None})


@probe()
def unroll_stack_recipe() -> Report:
    m = mesh()
    with nnx.use_eager_sharding(False):
        layers = stack(2, (None, 'b'), transform_metadata={nnx.PARTITION_NAME: None})
        first = layer(nnx.Rngs(5), (None, 'b'))
        nnx.update(first, unstack_slice(nnx.state(layers)))
        graphdef, _ = nnx.split(first)
        merged = nnx.merge(graphdef, unstack_slice(nnx.state(layers)))
    with jax.set_mesh(m):
        sharded_init(first, m)
        sharded_init(merged, m)
    return {'update': kernel(first), 'merge': kernel(merged)}


@probe()
def raw_lax_scan_recipe() -> Report:
    with jax.set_mesh(mesh()):
        layers = stack(2, (None, 'b'), transform_metadata={nnx.PARTITION_NAME: None})
        graphdef, state = nnx.split(layers)

        def body(x: jax.Array, one: Any) -> tuple[jax.Array, None]:
            one = nnx.spmd.remove_axis(one, 0, {nnx.PARTITION_NAME: None})
            specs = nnx.get_partition_spec(one)
            one = jax.lax.with_sharding_constraint(one, specs)
            return nnx.merge(graphdef, one)(x)[:, :4], None

        y, _ = jax.lax.scan(body, jnp.ones((2, 4)), state)
    return {'y': digest(y)}


def stacked_by_hand(spec_: Any, how: str) -> nnx.Linear:
    """Three layers stacked with jax.vmap or jnp.stack: each kernel keeps
    the per-layer spec on its stacked array."""
    if how == 'jax.vmap':
        return stack_with_jax_vmap(lambda key: layer(nnx.Rngs(key), spec_), 3)
    states = [nnx.state(layer(nnx.Rngs(i), spec_)) for i in range(3)]
    state = jax.tree.map(lambda *xs: jnp.stack(xs), *states)
    return nnx.merge(nnx.graphdef(layer(nnx.Rngs(0), spec_)), state)


def constrain_by_metadata(layer_: nnx.Linear) -> None:
    state = nnx.state(layer_)
    nnx.update(layer_, jax.lax.with_sharding_constraint(state, nnx.get_partition_spec(state)))


# Documented consequence (compatibility.md, "A stack made by jax.vmap or
# jnp.stack"): a default transform reads each layer's spec positionally, so
# its body sees the spec with its first entry removed.
def hand_made_consequence(r: Report) -> list[str]:
    return [f'{key}: inside {v["inside"]["entries"]}' for key, v in r.items()
            if v['inside']['entries'] != v['kernel']['out_sharding']['entries'][1:]]


def add_stacked_entry(node: Any) -> None:
    """The recipe: give every spec of a hand-made stack its stacked entry."""
    for _, v in nnx.iter_graph(node):
        if isinstance(v, nnx.Variable) and v.get_metadata('out_sharding', None):
            v.set_metadata(out_sharding=(None, *v.out_sharding))


@probe(fixed=hand_made_consequence)
def per_layer_specs_of_a_hand_made_stack() -> Report:
    return through_hand_made_stack(recipe=False)


@probe()
def per_layer_specs_of_a_hand_made_stack_with_its_entry() -> Report:
    return through_hand_made_stack(recipe=True)


def through_hand_made_stack(recipe: bool) -> Report:
    """Default transforms over a stack whose metadata is each layer's (or,
    with the recipe, has the stacked entry and the transforms name it None):
    what the body sees and applies, and where an optimizer made there goes."""
    metadata = {nnx.PARTITION_NAME: None} if recipe else {}
    out: Report = {}
    with jax.set_mesh(mesh()):
        for spec_ in ((None, 'b'), ('a', 'b')):
            for how in ('jax.vmap', 'jnp.stack'):
                key = f'{spec_} {how}'
                layers = stacked_by_hand(spec_, how)
                if recipe:
                    add_stacked_entry(layers)
                seen: list[Any] = []

                @nnx.vmap(transform_metadata=metadata)
                def in_vmap(layer_: nnx.Linear) -> Any:
                    seen.append(spec(layer_.kernel.out_sharding))
                    constrain_by_metadata(layer_)
                    optimizer = nnx.Optimizer(layer_, optax.adam(1e-2), wrt=nnx.Param)
                    return optimizer.opt_state[0].mu['kernel'][...]

                mu = in_vmap(layers)
                out[f'{key} vmap'] = {'inside': seen[0], 'mu': sharding(mu), 'kernel': kernel(layers)}

                @nnx.scan(in_axes=(0, nnx.Carry), out_axes=nnx.Carry,
                          transform_metadata=metadata)
                def in_scan(layer_: nnx.Linear, x: jax.Array) -> jax.Array:
                    seen.append(spec(layer_.kernel.out_sharding))
                    constrain_by_metadata(layer_)
                    return x

                in_scan(layers, jnp.ones(()))
                out[f'{key} scan'] = {'inside': seen[-1], 'kernel': kernel(layers)}
    return out


def zip_problems(r: Report) -> list[str]:
    return [f'{key}: {outcome}' for key, outcome in r.items() if outcome != 'ok']


@probe(fixed=zip_problems)
def hand_stacked_state_with_the_stacked_entry() -> Report:
    """A state stacked with jnp.stack, given the stacked entry by
    nnx.spmd.add_axis, zips with a stack made by nnx.vmap and updates it
    without changing its metadata."""
    out: Report = {}
    with jax.set_mesh(mesh()):
        model = stack(3, (None, 'b'))
        states = [nnx.state(layer(nnx.Rngs(i), (None, 'b'))) for i in range(3)]
        by_hand = jax.tree.map(lambda *xs: jnp.stack(xs), *states)
        by_hand = nnx.spmd.add_axis(by_hand, 0, {nnx.PARTITION_NAME: None})
        try:
            jax.tree.map(lambda a, b: a - b, nnx.state(model), by_hand)
            out['zip'] = 'ok'
        except ValueError as e:
            out['zip'] = str(e).split('\n')[0]
        before = spec(model.kernel.out_sharding)
        nnx.update(model, by_hand)
        after = spec(model.kernel.out_sharding)
        out['update'] = 'ok' if after == before else f'{before} became {after}'
    return out


# Documented consequence (compatibility.md, "A decorated function behind
# another wrapper"): a decorator around the transform, not given to it, names
# the axis after the transform stacked its own None.
def decorator_outside_consequence(r: Report) -> list[str]:
    found = r['kernel']['entries']
    return [] if found == ['layers', None, 'a', 'b'] else [f'kernel {found}']


def decorator_and_default_vmap(outside: bool) -> Report:
    def create(key: jax.Array) -> nnx.Linear:
        return layer(nnx.Rngs(key))

    named = functools.partial(nnx.transform_metadata, partition='layers')
    with nnx.use_eager_sharding(False):
        f = named(nnx.vmap(create)) if outside else nnx.vmap(named(create))
        model = f(jax.random.split(jax.random.key(0), 3))
    return {'kernel': spec(model.kernel.out_sharding),
            'values': digest(model.kernel[...])}


@probe(fixed=decorator_outside_consequence, same=('values',))
def decorator_around_a_default_vmap() -> Report:
    return decorator_and_default_vmap(outside=True)


# The recipe: the decorator given to the transform.
@probe()
def decorator_given_to_a_default_vmap() -> Report:
    return decorator_and_default_vmap(outside=False)


def ref_param_through_vmap(in_axes: int) -> Report:
    w = nnx.Param(jnp.ones((4, 3)), out_sharding=('a', None), eager_sharding=False,
                  ref=True)
    seen: list[Any] = []

    def body(w: nnx.Param) -> jax.Array:
        seen.append(spec(w.out_sharding))
        return w[...].sum()

    y = nnx.vmap(body, in_axes=in_axes)(w)
    return {'after': spec(w.out_sharding)['entries'], 'y': digest(y)}


# A ref=True Variable mapped at a negative axis keeps its metadata.
@probe()
def ref_param_through_a_negative_axis() -> Report:
    return ref_param_through_vmap(-1)


# The recipe: the non-negative axis.
@probe()
def ref_param_through_a_non_negative_axis() -> Report:
    return ref_param_through_vmap(1)


# Heads made by nnx.transform_metadata inside layers made by an outer vmap:
# vanilla's stack is ('h', 'a', 'b'), ours (None, 'h', 'a', 'b'), and ours'
# outer default pass over vanilla's metadata raises (docs/compatibility.md).
# The recipe for one layout on both: the outer transforms named None
# (vanilla's workaround), at creation and in the pass.
@probe()
def decorated_heads_in_layers_named_none() -> Report:
    none = {nnx.PARTITION_NAME: None}

    @nnx.transform_metadata(partition='h')
    def make_head(x: jax.Array) -> nnx.Param:
        return nnx.Param(x * jnp.ones((4, 8)), out_sharding=('a', 'b'),
                         eager_sharding=False)

    @nnx.transform_metadata(partition='h')
    def forward(w: nnx.Param) -> jax.Array:
        return w[...].sum()

    heads = nnx.vmap(nnx.vmap(make_head), transform_metadata=none)(jnp.ones((3, 2)))
    made = spec(heads.out_sharding)['entries']
    y = nnx.vmap(nnx.vmap(forward), transform_metadata=none)(heads)
    return {'made': made, 'after': spec(heads.out_sharding)['entries'], 'y': digest(y)}


def _by_hand_fields(x: nnx.Variable) -> Report:
    meta = x.get_metadata()
    return {k: [type(meta[k]).__name__, spec(meta[k])] if meta.get(k) is not None else None
            for k in ('out_sharding', 'optimizer_sharding')}


@probe()
def public_pair_by_hand_where_vanilla_is_the_identity() -> Report:
    """nnxaxis.16: ``nnx.spmd.remove_axis`` then ``add_axis``, and ``add_axis``
    then ``remove_axis``, by hand, with ``optimizer_sharding`` named in the
    mapping, at non-negative axes on a full tuple ``out_sharding`` (where
    vanilla's pair is the identity): each step as vanilla's. The public pair
    updates other keys only where they are tuples, as vanilla: a ``jax.P``
    or list ``optimizer_sharding`` is left alone (the transforms still stack
    it). A negative axis counts from the stacked value's end on ours (the
    intended difference), so none is drawn here."""
    with nnx.use_eager_sharding(False):  # metadata only
        return _public_pair_by_hand()


def _public_pair_by_hand() -> Report:
    out: Report = {}
    name = 'l'
    tm = {nnx.PARTITION_NAME: name, 'optimizer_sharding': name}
    for form, opt in (('tuple', ('a', None, 'b')), ('pspec', jax.P('a', None, 'b')),
                      ('list', ['a', None, 'b'])):
        for axis in (0, 1, 2):
            # remove then add: the stacked Variable, its spec with the name at axis
            stacked = [None, 'b']
            stacked.insert(axis, name)
            o = list(opt)
            o[axis] = name
            x = nnx.Param(jnp.zeros((2, 3, 4)), out_sharding=tuple(stacked),
                          optimizer_sharding=type(opt)(o) if form != 'pspec' else jax.P(*o))
            # add then remove: the per-layer spec of the stacked value
            y = nnx.Param(jnp.zeros((2, 3, 4)), out_sharding=('a', 'b'),
                          optimizer_sharding=opt)
            remove, add = nnx.spmd.remove_axis, nnx.spmd.add_axis
            for label, v, fns in (('remove-add', x, (remove, add)),
                                  ('add-remove', y, (add, remove))):
                steps = [_by_hand_fields(v)]
                for fn in fns:
                    v = fn(v, axis, tm)
                    steps.append(_by_hand_fields(v))
                out[f'{label} {form} {axis}'] = steps
    return out


@probe()
def public_pair_reads_other_keys_through_the_attribute() -> Report:
    """The public pair reads a mapping's other keys as vanilla: through the
    Variable's attribute, after the name, in the mapping's order, where that
    is a non-empty tuple: ``out_sharding`` read again after the name,
    ``sharding_names`` (its deprecated alias), ``shape`` (the value's: an
    add writes a metadata key 'shape', a removal finds a dimension and
    raises), each alone and in two orders; full tuple specs, axis 0 and 1."""
    with nnx.use_eager_sharding(False), warnings.catch_warnings():
        warnings.simplefilter('ignore', DeprecationWarning)  # sharding_names
        return _public_pair_other_keys()


def _public_pair_other_keys() -> Report:
    out: Report = {}
    pn = nnx.PARTITION_NAME
    mappings = {
        'out_sharding z': {pn: 'l', 'out_sharding': 'z'},
        'out_sharding None': {pn: 'l', 'out_sharding': None},
        'sharding_names z': {pn: 'l', 'sharding_names': 'z'},
        'shape 3': {pn: 'l', 'shape': 3},
        'shape, out_sharding': {pn: 'l', 'shape': 3, 'out_sharding': 'z'},
        'out_sharding, optimizer_sharding': {pn: 'l', 'out_sharding': 'z',
                                             'optimizer_sharding': 'l'},
    }
    for label, tm in mappings.items():
        for axis in (0, 1):
            for name, fn in (('add', nnx.spmd.add_axis), ('remove', nnx.spmd.remove_axis)):
                spec = [None, 'b']  # per layer; stacked for a removal
                if name == 'remove':
                    spec.insert(axis, 'l')
                x = nnx.Param(jnp.zeros((2, 3, 4)), out_sharding=tuple(spec),
                              optimizer_sharding=tuple(spec))
                try:
                    x = fn(x, axis, tm)
                    meta = x.get_metadata()
                    result: Any = {**_by_hand_fields(x),
                                   'shape': repr(meta.get('shape')), 'keys': sorted(meta)}
                except Exception as e:  # noqa: BLE001 -- the outcome is the report
                    result = f'{type(e).__name__}: {str(e).splitlines()[0]}'
                out[f'{name} {label} at {axis}'] = result
    return out
