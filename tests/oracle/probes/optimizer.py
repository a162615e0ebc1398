"""nnx.Optimizer's state and the mirror rule (docs/design.md, I4).

A state leaf that mirrors a parameter (same shape, e.g. Adam's ``mu``) gets
that parameter array's sharding and its sharding metadata as declared; where
the parameter's sharding is unknown (traced on Auto axes) the metadata
decides; other shapes keep optax's sharding without sharding metadata;
``optimizer_sharding`` overrides. Mesh ``(2, 4)`` ``('a', 'b')`` (Auto unless
said), kernels ``(8, 8)`` declared ``('a', 'b')``, biases ``('b',)``.
"""

from __future__ import annotations

from typing import Any

import jax
import optax

from flax import nnx
from tests.oracle.probes import Report, probe
from tests.oracle.probes.util import mesh, sharding, stack_with_jax_vmap, variables

FIELDS = ('out_sharding', 'optimizer_sharding')


def linear(rngs: nnx.Rngs, use_bias: bool = True, **kernel_metadata: Any) -> nnx.Linear:
    kernel_init = nnx.with_partitioning(
        nnx.initializers.lecun_normal(), ('a', 'b'), **kernel_metadata)
    bias_init = nnx.with_partitioning(nnx.initializers.zeros_init(), ('b',))
    return nnx.Linear(8, 8, kernel_init=kernel_init, bias_init=bias_init,
                      use_bias=use_bias, rngs=rngs)


def jax_vmap_stack(layers: int = 4, **kwargs: Any) -> nnx.Linear:
    """Layers stacked by a plain ``jax.vmap``: the metadata is one layer's."""
    return stack_with_jax_vmap(lambda key: linear(nnx.Rngs(key), **kwargs), layers)


def sharded_init(*nodes: Any) -> None:
    """The flax_gspmd guide's sharded init: constrain to the declared specs."""

    @nnx.jit
    def init(*nodes: Any) -> None:
        for node in nodes:
            state = nnx.state(node)
            nnx.update(node, jax.lax.with_sharding_constraint(
                state, nnx.get_partition_spec(state)))

    init(*nodes)


def report(model: Any, optimizer: Any) -> Report:
    return {'params': variables(model, FIELDS),
            'opt_state': variables(optimizer.opt_state, FIELDS)}


def mirror_problems(stage: Report) -> list[str]:
    """I4 on one report: mirrors have their parameter's sharding and metadata."""
    problems, mirrors = [], 0
    for path, leaf in stage['opt_state'].items():
        for param_path, param in stage['params'].items():
            if path.endswith('/' + param_path) and leaf['shape'] == param['shape']:
                mirrors += 1
                if leaf['sharding'] != param['sharding']:
                    problems.append(f'{path}: sharded {leaf["sharding"]}, '
                                    f'parameter {param["sharding"]}')
                if leaf['out_sharding'] != param['out_sharding']:
                    problems.append(f'{path}: out_sharding {leaf["out_sharding"]}, '
                                    f'parameter {param["out_sharding"]}')
    return problems + ([] if mirrors else ['no state leaf mirrors a parameter'])


def adam_after_sharded_init(model: nnx.Module) -> Report:
    optimizer = nnx.Optimizer(model, optax.adam(1e-3), wrt=nnx.Param)
    before = report(model, optimizer)
    sharded_init(model, optimizer)
    return {'before': before, 'after': report(model, optimizer)}


# Three forms of "layout declared, not yet applied": the sharded init on
# model and optimizer shards Adam's mu like the kernel, as on vanilla (mu
# keeps its declared out_sharding, not the kernel's current layout).
@probe()
def declared_with_eager_sharding_false() -> Report:
    with jax.set_mesh(mesh()):
        return adam_after_sharded_init(linear(nnx.Rngs(0), eager_sharding=False))


@probe()
def declared_under_use_eager_sharding_false() -> Report:
    with jax.set_mesh(mesh()):
        with nnx.use_eager_sharding(False):
            model = linear(nnx.Rngs(0))
        return adam_after_sharded_init(model)


def named_stack_problems(r: Report) -> list[str]:
    """mu mirrors the kernel before and after the sharded init; then both are
    sharded along 'layers' as declared."""
    problems = [f'before: {p}' for p in mirror_problems(r['before'])]
    problems += [f'after: {p}' for p in mirror_problems(r['after'])]
    kernel = r['after']['params']['kernel']['sharding']
    if kernel != ['layers', 'a', 'b']:
        problems.append(f'after: kernel sharded {kernel}')
    return problems


@probe(fixed=named_stack_problems, same=('after',))
def declared_by_a_layers_named_stack() -> Report:
    # vanilla resharded mu by the declared ('layers', 'a', 'b') at once, while
    # the kernel stays (None, 'a', 'b') until the sharded init applies it
    with jax.set_mesh(mesh(shape=(2, 2, 2), names=('layers', 'a', 'b'))):
        @nnx.split_rngs(splits=2)
        @nnx.vmap(in_axes=0, out_axes=0, transform_metadata={nnx.PARTITION_NAME: 'layers'})
        def create(rngs: nnx.Rngs) -> nnx.Linear:
            return linear(rngs)

        return adam_after_sharded_init(create(nnx.Rngs(0)))


# Stacked parameters with eager sharding: the stale per-layer metadata
# resharded (or failed to reshard) mu on vanilla; ours follows the kernel.
def stacked_problems(r: Report) -> list[str]:
    return [f'{axis_type}: {p}' for axis_type, stage in r.items()
            for p in (mirror_problems(stage) if 'error' not in stage
                      else [stage['error']])]


def adam_on_both_axis_types(build: Any) -> Report:
    out: Report = {}
    for axis_type in ('auto', 'explicit'):
        with jax.set_mesh(mesh(axis_type)):
            model = build()
            try:
                out[axis_type] = report(
                    model, nnx.Optimizer(model, optax.adam(1e-3), wrt=nnx.Param))
            except ValueError as e:
                out[axis_type] = {'error': f'{type(e).__name__}: {str(e).splitlines()[0]}'}
    return out


@probe(fixed=stacked_problems)
def stacked_by_jax_vmap_then_adam() -> Report:
    return adam_on_both_axis_types(jax_vmap_stack)


@probe(fixed=stacked_problems)
def stacked_by_nnx_vmap_then_adam() -> Report:
    # 3 layers: vanilla's stale ('a', 'b') on the stacked axis does not divide
    def build() -> nnx.Linear:
        @nnx.split_rngs(splits=3)
        @nnx.vmap(in_axes=0, out_axes=0)
        def create(rngs: nnx.Rngs) -> nnx.Linear:
            return linear(rngs)

        return create(nnx.Rngs(0))

    return adam_on_both_axis_types(build)


# Adafactor: the factored moments and (1,) placeholders have other shapes:
# optax's sharding, and as metadata that sharding's spec where it is sharded.
def adafactor_problems(r: Report) -> list[str]:
    problems = []
    for axis_type, stage in r.items():
        if 'error' in stage:
            problems.append(f'{axis_type}: {stage["error"]}')
            continue
        problems += [f'{axis_type}: {p}' for p in mirror_problems(stage)]
        for path, leaf in stage['opt_state'].items():
            param = stage['params'].get('/'.join(path.split('/')[-1:]))
            if param is None or leaf['shape'] == param['shape']:
                continue
            sharded = [e for e in leaf['sharding'] or [] if e is not None]
            wanted = {'form': 'tuple', 'entries': leaf['sharding']} if sharded else None
            if leaf['out_sharding'] != wanted or leaf['optimizer_sharding']:
                problems.append(f'{axis_type}: {path} {leaf["shape"]} sharded '
                                f'{leaf["sharding"]} has sharding metadata '
                                f'{leaf["out_sharding"]}')
    return problems


@probe(fixed=adafactor_problems)
def adafactor_on_a_sharded_linear() -> Report:
    out: Report = {}
    for axis_type in ('auto', 'explicit'):
        with jax.set_mesh(mesh(axis_type)):
            model = linear(nnx.Rngs(0))
            try:
                tx = optax.adafactor(1e-3, min_dim_size_to_factor=4)
                out[axis_type] = report(model, nnx.Optimizer(model, tx, wrt=nnx.Param))
            except ValueError as e:
                out[axis_type] = {'error': f'{type(e).__name__}: {str(e).splitlines()[0]}'}
    return out


# optimizer_sharding overrides, with JAX's semantics, as on vanilla.
@probe()
def optimizer_sharding_overrides() -> Report:
    out: Report = {}
    for axis_type in ('auto', 'explicit'):
        with jax.set_mesh(mesh(axis_type)):
            model = linear(nnx.Rngs(0), optimizer_sharding=('b', 'a'))
            # no bias: its stale spec would make this a mirror-rule probe
            stacked = jax_vmap_stack(use_bias=False)
            stacked.kernel.set_metadata(optimizer_sharding=(None, 'b', 'a'))
            out[axis_type] = [
                report(m, nnx.Optimizer(m, optax.adam(1e-3), wrt=nnx.Param))
                for m in (model, stacked)]
    return out


# Traced inside nnx.jit on an Auto mesh: the sharding of a traced parameter is
# not known, the metadata decides, as on vanilla.
@probe()
def traced_in_jit_on_auto_mesh_follows_metadata() -> Report:
    with jax.set_mesh(mesh()):
        model = linear(nnx.Rngs(0))
        # the array moved, the metadata still says ('a', 'b')
        model.kernel[...] = jax.device_put(model.kernel[...], jax.P())
        optimizer = nnx.jit(
            lambda m: nnx.Optimizer(m, optax.adam(1e-3), wrt=nnx.Param))(model)

        @nnx.jit
        def build() -> tuple[nnx.Linear, nnx.Optimizer]:
            created = linear(nnx.Rngs(0))
            return created, nnx.Optimizer(created, optax.adamw(1e-3), wrt=nnx.Param)

        return {'moved': report(model, optimizer), 'created': report(*build())}


# optimizer_sharding one entry short on a stacked
# parameter, among a hundred others. JAX's exception and message as on
# vanilla; ours adds a note naming the state Variable.
class Many(nnx.Module):
    def __init__(self, rngs: nnx.Rngs):
        self.layers = nnx.List([linear(rngs) for _ in range(50)])

        @nnx.split_rngs(splits=3)
        @nnx.vmap(in_axes=0, out_axes=0)
        def create(rngs: nnx.Rngs) -> nnx.Linear:
            return linear(rngs, use_bias=False)

        self.stack = create(rngs)
        self.stack.kernel.set_metadata(optimizer_sharding=('a', 'b'))


def short_optimizer_sharding() -> ValueError:
    with jax.set_mesh(mesh()):
        model = Many(nnx.Rngs(0))
        try:
            nnx.Optimizer(model, optax.adam(1e-3), wrt=nnx.Param)
        except ValueError as e:
            return e
    raise AssertionError('nnx.Optimizer raised nothing')


@probe()
def short_optimizer_sharding_raises_jax_error() -> Report:
    e = short_optimizer_sharding()
    message = str(e).splitlines()[0].split(' This error occurs at source')[0]
    return {'type': type(e).__name__, 'message': message}


def note_problems(r: Report) -> list[str]:
    """One note, naming the parameter and the field the user wrote."""
    wanted = ("Raised for the optimizer state of the Param at 'stack/kernel' of "
              "shape (3, 8, 8) with optimizer_sharding=('a', 'b').")
    return [] if r['notes'] == wanted else [f'the notes are not {wanted!r}']


@probe(fixed=note_problems)
def short_optimizer_sharding_note_names_the_variable() -> Report:
    notes = getattr(short_optimizer_sharding(), '__notes__', [])
    # JAX's own note about filtered traceback frames aside
    return {'notes': '\n'.join(n for n in notes if not n.startswith('-' * 20))}


# The state gets the parameter's partitioning, and the memory
# kind vanilla gives it: Optax's on an Explicit mesh, device on an Auto one.
@probe()
def parameter_offloaded_to_pinned_host() -> Report:
    kinds = {m.kind for m in jax.devices()[0].addressable_memories()}
    if 'pinned_host' not in kinds:
        return {'skipped': f'no pinned_host memory: {sorted(kinds)}'}
    out: Report = {}
    for axis_type in ('auto', 'explicit'):
        m = mesh(axis_type)
        with jax.set_mesh(m):
            for kind in ('pinned_host', 'device'):
                model = linear(nnx.Rngs(0))
                model.kernel.set_value(jax.device_put(
                    model.kernel[...], jax.sharding.NamedSharding(
                        m, jax.P('a', 'b'), memory_kind=kind)))
                optimizer = nnx.Optimizer(model, optax.adam(1e-3), wrt=nnx.Param)
                mu = optimizer.opt_state[0].mu['kernel'][...]
                out[f'{axis_type} {kind}'] = {
                    'kernel': model.kernel[...].sharding.memory_kind,
                    'mu': mu.sharding.memory_kind, 'mu_spec': sharding(mu)}
    return out


# An ensemble of optimizers made inside nnx.vmap on an Explicit mesh: the
# parameters are traced, the zeros Optax makes are not.
@probe()
def optimizers_made_in_vmap_explicit() -> Report:
    out: Report = {}
    with jax.set_mesh(mesh('explicit')):
        for graph in (True, False):
            models = nnx.vmap(lambda rngs: nnx.Linear(
                4, 8, kernel_init=nnx.with_partitioning(
                    nnx.initializers.lecun_normal(), (None, 'b')),
                use_bias=False, rngs=rngs), graph=graph)(nnx.Rngs(0).split(2))
            optimizers = nnx.vmap(
                lambda model: nnx.Optimizer(model, optax.adam(1e-3), wrt=nnx.Param),
                graph=graph)(models)
            mu = optimizers.opt_state[0].mu['kernel'][...]
            out[f'graph={graph}'] = {'mu_shape': list(mu.shape),
                                     'mu_spec': sharding(mu)}
    return out


# An abstract optimizer (nnx.eval_shape, get_abstract_model)
# has the shardings of a live one, leaf by leaf, for the optimizers we cover.
def optimizers() -> dict[str, optax.GradientTransformation]:
    # masks and labels made by mapping over the parameters, Variables and all
    return {
        'adam': optax.adam(1e-3),
        'adafactor': optax.adafactor(1e-3, min_dim_size_to_factor=4),
        'lion': optax.lion(1e-3),
        'sgd_momentum': optax.sgd(1e-3, momentum=0.9),
        'masked': optax.masked(optax.adam(1e-3), lambda p: jax.tree.map(
            lambda x: x.ndim > 1, p)),
        'multi_transform': optax.multi_transform(
            {'adam': optax.adam(1e-3), 'sgd': optax.sgd(1e-3, momentum=0.9)},
            lambda p: jax.tree.map(lambda x: 'adam' if x.ndim > 1 else 'sgd', p)),
    }


def layouts(state: Any) -> dict[str, Any]:
    out = {}
    for path, var in nnx.to_flat_state(state):
        value = var.get_value()
        if hasattr(value, 'shape'):
            out['/'.join(map(str, path))] = sharding(value)
    return out


def abstract_problems(r: Report) -> list[str]:
    problems = []
    for key, stage in r.items():
        if 'error' in stage:
            problems.append(f'{key}: {stage["error"]}')
            continue
        for kind in ('eval_shape', 'get_abstract_model'):
            if stage[kind] != stage['live']:
                diff = {p: (v, stage[kind].get(p)) for p, v in stage['live'].items()
                        if stage[kind].get(p) != v}
                problems.append(f'{key}: {kind} differs from live: {diff}')
    return problems


@probe(fixed=abstract_problems)
def abstract_optimizer_shardings_equal_live() -> Report:
    out: Report = {}
    for axis_type in ('auto', 'explicit'):
        m = mesh(axis_type)
        for name, tx in optimizers().items():
            create = lambda: nnx.Optimizer(linear(nnx.Rngs(0)), tx, wrt=nnx.Param)  # noqa: E731,B023
            key = f'{axis_type}/{name}'
            try:
                with jax.set_mesh(m):
                    live = layouts(nnx.state(create()))
                    abstract = layouts(nnx.state(nnx.eval_shape(create)))
                    _, abstract_state = nnx.get_abstract_model(create, m)
                out[key] = {'live': live, 'eval_shape': abstract,
                            'get_abstract_model': layouts(abstract_state)}
            except Exception as e:  # noqa: BLE001 -- the outcome is the report
                out[key] = {'error': f'{type(e).__name__}: {str(e).splitlines()[0][:120]}'}
    return out
