"""Hypothesis strategies: random oracle programs, as data."""

from __future__ import annotations

from hypothesis import strategies as st

from tests.oracle.programs import DEFAULT, MODES, RULES, Apply, Leaf, Program, Spec, Stack

MESH_SIZES = {'a': 2, 'b': 4}
LOGICAL = dict(RULES)
FORMS = ('tuple', 'list', 'pspec')


@st.composite
def programs(draw: st.DrawFn) -> Program:
    mesh = draw(st.sampled_from(['none', 'auto', 'explicit']))
    logical = draw(st.sampled_from(['no', 'context', 'local']))
    free = {'a', 'b'}  # mesh axes not used yet: each at most once per spec

    def entry() -> object:
        options: list[object] = [None]
        options += sorted(free)
        if logical != 'no':
            options += [name for name, axis in LOGICAL.items() if axis in free]
        if free == {'a', 'b'}:
            options.append(('a', 'b'))
        e = draw(st.sampled_from(options))
        for axis in (e if isinstance(e, tuple) else (LOGICAL.get(e, e),) if e else ()):
            free.discard(axis)
        return e

    leaves = []
    for i in range(draw(st.integers(1, 2))):
        free.update({'a', 'b'})
        shape = tuple(draw(st.lists(st.sampled_from([8, 16]), min_size=1, max_size=3)))
        kind = draw(st.sampled_from(['none', 'empty', 'full', 'short', 'short', 'full']))
        length = {'none': 0, 'empty': 0, 'full': len(shape),
                  'short': draw(st.integers(1, len(shape)))}[kind]
        form = draw(st.sampled_from(FORMS))
        spec = None if kind == 'none' else Spec(form, tuple(entry() for _ in range(length)))
        optimizer_spec = draw(st.sampled_from([None, spec])) if spec and spec.entries else None
        leaves.append(Leaf(f'w{i}', shape, spec,
                           key=draw(st.sampled_from(['out_sharding', 'sharding_names'])),
                           optimizer_spec=optimizer_spec,
                           extra_spec=draw(st.sampled_from([None, Spec('tuple', ('x0',)),
                                                            Spec('list', ('x0', None))])),
                           local_rules=logical == 'local'))
    used = {LOGICAL.get(e, e) for l in leaves if l.spec for e in l.spec.entries
            if isinstance(e, str)} | {a for l in leaves if l.spec for e in l.spec.entries
                                      if isinstance(e, tuple) for a in e}
    stacks = []
    depth = draw(st.integers(0, 2))
    min_rank = min(len(l.shape) for l in leaves)
    for level in range(depth):
        size = draw(st.sampled_from([1, 2, 4]))
        names: list[object] = [DEFAULT, DEFAULT, None]
        if mesh == 'none':
            names.append(f'l{level}')
        else:
            names += [a for a in sorted(MESH_SIZES) if a not in used and size % MESH_SIZES[a] == 0]
        partition = draw(st.sampled_from(names))
        if isinstance(partition, str) and partition != DEFAULT:
            used.add(partition)
        kind = draw(st.sampled_from(['vmap', 'scan']))
        mode = draw(st.sampled_from(sorted(MODES)))
        rank_after = min_rank + depth - level
        axis = draw(st.integers(-rank_after, rank_after - 1)) if kind == 'vmap' else 0
        decorator = None
        if (kind == 'vmap' and mode == 'graph' and axis == 0 and partition == DEFAULT
                and draw(st.booleans())):
            decorator = draw(st.sampled_from([None] + [a for a in sorted(MESH_SIZES) if a not in
                                                       used and size % MESH_SIZES[a] == 0]))
            if decorator:
                used.add(decorator)
            decorator = decorator or 'dec'
            if mesh != 'none' and decorator == 'dec':
                decorator = None  # an unknown mesh axis would fail both flaxes
        extra = partition != DEFAULT and draw(st.booleans())
        stacks.append(Stack(kind, size, axis, partition, mode, extra,
                            decorator if decorator is not None else None))
    stacks_t = tuple(s for s in stacks if s.decorator is not None or True)
    apply = None
    if stacks_t and draw(st.booleans()):
        outer = stacks_t[0]
        kind = draw(st.sampled_from(['vmap', 'scan'] if outer.axis == 0 else ['vmap']))
        partitions: list[object] = [DEFAULT, 'layers']
        if outer.partition not in (DEFAULT, None):
            partitions.append(outer.partition)
        if outer.decorator:
            partitions.append(outer.decorator)
        if any(l.spec is not None and not l.spec.entries for l in leaves):
            partitions = [DEFAULT]
        mode = draw(st.sampled_from(sorted(MODES)))
        apply = Apply(kind, draw(st.sampled_from(partitions)), mode,
                      draw(st.sampled_from(['none', 'remat', 'cond'] + (
                          ['tree_map', 'update', 'jit'] if depth == 1 else []))),
                      state_axes=mode == 'graph' and draw(st.booleans()),
                      shard_map=mesh != 'none' and draw(st.booleans()))
    consumers = ['partition_spec', 'eval_shape']
    if mesh != 'none':
        consumers += ['named_sharding', 'abstract']
    chosen = tuple(c for c in consumers if draw(st.booleans()))
    optimizer = draw(st.sampled_from([None, 'adam', 'sgd', 'adafactor']))
    if optimizer and draw(st.booleans()):
        chosen += ('train_step',)
    return Program('hypothesis', tuple(leaves), stacks_t, mesh, logical == 'context',
                   apply, chosen, optimizer)
