"""Hypothesis strategies: random oracle programs, as data."""

from __future__ import annotations

from hypothesis import strategies as st

from tests.oracle.programs import DEFAULT, MODES, RULES, Apply, Leaf, Program, Spec, Stack

MESH_SIZES = {'a': 2, 'b': 4}
LOGICAL = dict(RULES)
FORMS = ('tuple', 'list', 'pspec')
WRAPS = ('clone', 'grad', 'optimizer')  # bodies that make Variables
FOCUS = ('free', 'pmap', 'decorator', *WRAPS, 'free')


@st.composite
def programs(draw: st.DrawFn) -> Program:
    # A focus makes sure the few examples CI runs reach each patched path.
    focus = draw(st.sampled_from(FOCUS))
    mesh = 'none' if focus == 'pmap' else draw(st.sampled_from(['none', 'auto', 'explicit']))
    # Variable-local rules do not resolve under jax.sharding.reshard (Explicit)
    logical = draw(st.sampled_from(['no', 'context'] + (['local'] if mesh != 'explicit' else [])))
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
    depth = draw(st.integers(1, 2))  # every program builds a stack
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
        # nnx.pmap needs devices, not a mesh context (jax.set_mesh rejects it):
        # the outermost stack of a mesh-less program, mapped at axis 0
        kinds = ['vmap', 'scan'] + (['pmap'] if mesh == 'none' and level == 0 else [])
        kind = 'pmap' if focus == 'pmap' and level == 0 else draw(st.sampled_from(kinds))
        if focus == 'decorator' and level == 0:
            kind, partition = 'vmap', DEFAULT
        mode = 'graph' if focus == 'decorator' else draw(st.sampled_from(sorted(MODES)))
        rank_after = min_rank + depth - level
        axis = draw(st.integers(-rank_after, rank_after - 1)) if kind == 'vmap' else 0
        if focus == 'optimizer' and level == 0:
            axis = 0  # the optimizer's scalar count comes out at the mapped axis
        decorator = None
        if (kind == 'vmap' and mode == 'graph' and partition == DEFAULT
                and (focus == 'decorator' or draw(st.booleans()))):
            axis = 0  # the decorator stacks at axis 0
            decorator = draw(st.sampled_from([None] + [a for a in sorted(MESH_SIZES) if a not in
                                                       used and size % MESH_SIZES[a] == 0]))
            if decorator:
                used.add(decorator)
            decorator = decorator or 'dec'
            if mesh != 'none' and decorator == 'dec':
                decorator = None  # an unknown mesh axis would fail both flaxes
        extra = partition != DEFAULT and draw(st.booleans())
        stacks.append(Stack(kind, size, axis, partition, mode, extra, decorator))
    apply = None
    if focus in WRAPS or draw(st.integers(0, 3)) > 0:  # a forward pass, most of the time
        outer = stacks[0]
        kinds = ['vmap', 'scan'] if outer.axis == 0 else ['vmap']
        if outer.kind == 'pmap':
            kinds = ['pmap', 'vmap']
        kind = draw(st.sampled_from(kinds))
        if focus == 'grad':
            kind = 'vmap'  # nnx.grad under nnx.vmap
        partitions: list[object] = [DEFAULT, 'layers']
        if outer.partition not in (DEFAULT, None):
            partitions.append(outer.partition)
        if outer.decorator:
            partitions.append(outer.decorator)
        if any(l.spec is not None and not l.spec.entries for l in leaves):
            partitions = [DEFAULT]
        mode = draw(st.sampled_from(sorted(MODES)))
        wraps = ['none', 'remat', 'cond', *(w for w in WRAPS if w != 'optimizer' or outer.axis == 0)]
        if depth == 1:
            wraps += ['tree_map', 'update', 'jit']
        wrap = focus if focus in WRAPS else draw(st.sampled_from(wraps))
        apply = Apply(kind, draw(st.sampled_from(partitions)), mode, wrap,
                      state_axes=mode == 'graph' and draw(st.booleans()),
                      # replicated in_specs: arrays sharded on Explicit meshes are rejected
                      shard_map=mesh == 'auto' and draw(st.booleans()))
    consumers = ['partition_spec', 'eval_shape']
    if mesh != 'none':
        consumers += ['named_sharding', 'abstract']
    chosen = tuple(c for c in consumers if draw(st.booleans()))
    optimizer = draw(st.sampled_from([None, 'adam', 'sgd', 'adafactor']))
    if optimizer and draw(st.booleans()):
        chosen += ('train_step',)
    return Program('hypothesis', tuple(leaves), tuple(stacks), mesh, logical == 'context',
                   apply, chosen, optimizer)


def families(program: Program) -> list[str]:
    """The code paths a program reaches, for the drawn set's counts."""
    found = ['stack'] if program.stacks else []
    found += [f'stack:{s.kind}' for s in program.stacks]
    found += [f'mode:{s.mode}' for s in program.stacks]
    if any(s.decorator is not None for s in program.stacks):
        found.append('decorator')
    if any(s.partition not in (DEFAULT, None) for s in program.stacks):
        found.append('named stack')
    if program.apply is not None:
        a = program.apply
        found += ['forward', f'forward:{a.kind}']
        found += {'clone': ['copy (nnx.clone)'], 'optimizer': ['optimizer in transform'],
                  'grad': ['grad under vmap' if a.kind == 'vmap' else f'grad under {a.kind}']
                  }.get(a.wrap, [f'body:{a.wrap}'])
        if a.shard_map:
            found.append('shard_map')
    if 'pmap' in {s.kind for s in program.stacks} | {getattr(program.apply, 'kind', None)}:
        found.append('pmap')
    found.append(f'mesh:{program.mesh}')
    if program.optimizer:
        found.append('optimizer')
    if 'train_step' in program.consumers:
        found.append('train_step')
    return found


# What the CI examples must reach (tests/oracle/test_oracle.py asserts it).
REQUIRED = ('stack', 'decorator', 'forward', 'copy (nnx.clone)', 'grad under vmap',
            'optimizer in transform', 'pmap')
