"""Oracle programs as data, and the independent model of what they must give.

A ``Program`` is JSON-able: the pytest side generates it, both workers
(vanilla flax and ours) run it (``tests.oracle.runner``). No flax import here.

The model (``expected_metadata``) applies each stacking transform's insertion
positionally to the per-layer spec, innermost first:
- vanilla inserts only a ``PARTITION_NAME`` it was given, and only in graph
  mode with graph updates (``nnx.vmap``/``nnx.scan``'s tree and no-updates
  paths ignore ``transform_metadata``), into tuple-valued extra keys only, at
  the raw (possibly negative) ``list.insert`` index after padding with None,
  and always returns a tuple;
- ours, with a ``PARTITION_NAME`` in graph mode, does what vanilla does but
  at the normalized axis and keeping tuple / list / PartitionSpec, and puts
  the name into the ``optimizer_sharding`` of what it creates too; without
  one it inserts ``None`` into ``out_sharding`` and ``optimizer_sharding``;
  tree mode inserts the ``PARTITION_NAME`` (or ``None``) into both; a stack
  whose body is an ``nnx.transform_metadata`` function is left to it.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

DEFAULT = 'default'  # a Stack/Apply partition: no transform_metadata at all
MODES = {'graph': (True, True), 'graph-no-updates': (True, False), 'tree': (False, False)}
EXTRA_KEY = 'extra_sharding'  # a sharding-like key named in transform_metadata
EXTRA_VALUE = 'x'
RULES = (('embed', 'a'), ('mlp', 'b'))  # logical name -> mesh axis
Entry = None | str | tuple[str, ...]


@dataclasses.dataclass(frozen=True)
class Spec:
    form: str  # 'tuple' | 'list' | 'pspec'
    entries: tuple[Entry, ...]

    def to_json(self) -> dict[str, Any]:
        return {'type': self.form, 'entries': [list(e) if isinstance(e, tuple) else e
                                               for e in self.entries]}


@dataclasses.dataclass(frozen=True)
class Leaf:
    name: str
    shape: tuple[int, ...]
    spec: Spec | None  # out_sharding (None: no such metadata)
    key: str = 'out_sharding'  # or the legacy 'sharding_names'
    optimizer_spec: Spec | None = None
    extra_spec: Spec | None = None  # under EXTRA_KEY
    local_rules: bool = False  # sharding_rules=RULES on the Variable


@dataclasses.dataclass(frozen=True)
class Stack:
    kind: str  # 'vmap' | 'scan'
    size: int
    axis: int  # vmap out_axes (may be negative, against the stacked rank); scan: 0
    partition: str | None  # DEFAULT, None or a name
    mode: str = 'graph'
    extra: bool = False  # also name EXTRA_KEY in transform_metadata
    decorator: str | None = None  # nnx.transform_metadata(partition=...) on the body


@dataclasses.dataclass(frozen=True)
class Apply:
    """A forward pass over the outermost stacked axis of the built model."""
    kind: str  # 'vmap' | 'scan'
    partition: str | None = DEFAULT
    mode: str = 'graph'
    # 'none' | 'remat' | 'cond', or (one stack) a body that maps over the layer's
    # and an unmapped copy's state ('tree_map'), updates the layer from its own
    # state ('update'), or calls a function jitted outside first ('jit')
    wrap: str = 'none'
    state_axes: bool = False
    shard_map: bool = False  # run it inside jax.shard_map (replicated inputs)


@dataclasses.dataclass(frozen=True)
class Program:
    name: str
    leaves: tuple[Leaf, ...] = ()
    stacks: tuple[Stack, ...] = ()  # outermost first
    mesh: str = 'auto'  # 'none' | 'auto' | 'explicit'
    context_rules: bool = False  # nnx.logical_axis_rules(RULES) around everything
    apply: Apply | None = None
    consumers: tuple[str, ...] = ()  # partition_spec named_sharding abstract eval_shape train_step
    optimizer: str | None = None  # 'adam' | 'sgd' | 'adafactor'
    custom: str | None = None  # a hand-written program in tests.oracle.runner
    arguments: tuple[tuple[str, Any], ...] = ()  # for scenario programs

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self))

    def with_workaround(self) -> Program | str:
        """The program as a vanilla user writes it: ``{nnx.PARTITION_NAME: None}``.

        Every transform given no ``transform_metadata`` gets the documented
        workaround (a forward pass over a named stack gets that stack's name,
        which vanilla requires to remove). Returns why not where the workaround
        cannot express the program: vanilla reads ``transform_metadata`` only in
        graph mode with graph updates, and a hand-written program has no
        transform keyword to set.
        """
        if self.custom is not None:
            return 'a hand-written program: no transform to give the workaround'
        modes = [s.mode for s in self.stacks] + ([self.apply.mode] if self.apply else [])
        if any(MODES[m] != (True, True) for m in modes):
            return ('vanilla ignores transform_metadata in tree mode and without graph '
                    'updates: the workaround cannot be written there')
        stacks = tuple(dataclasses.replace(s, partition=None) if s.partition == DEFAULT
                       and s.decorator is None else s for s in self.stacks)
        apply = self.apply
        if apply is not None and apply.partition == DEFAULT:
            outer = stacks[0].partition if stacks else None
            name = stacks[0].decorator if stacks and stacks[0].decorator else outer
            apply = dataclasses.replace(apply, partition=None if name == DEFAULT else name)
        return dataclasses.replace(self, name=f'{self.name} (vanilla workaround)',
                                   stacks=stacks, apply=apply)


def program_from_json(text: str) -> Program:
    d = json.loads(text)

    def spec(s: dict | None) -> Spec | None:
        return None if s is None else Spec(s['form'], tuple(
            tuple(e) if isinstance(e, list) else e for e in s['entries']))

    leaves = tuple(Leaf(l['name'], tuple(l['shape']), spec(l['spec']), l['key'],
                        spec(l['optimizer_spec']), spec(l['extra_spec']), l['local_rules'])
                   for l in d['leaves'])
    return Program(
        name=d['name'], leaves=leaves, stacks=tuple(Stack(**s) for s in d['stacks']),
        mesh=d['mesh'], context_rules=d['context_rules'],
        apply=None if d['apply'] is None else Apply(**d['apply']),
        consumers=tuple(d['consumers']), optimizer=d['optimizer'], custom=d['custom'],
        arguments=tuple(tuple(a) for a in d['arguments']))


# The model ------------------------------------------------------------------

def _entry_json(e: Entry) -> Any:
    return list(e) if isinstance(e, tuple) else e


def _vanilla_insert(spec: Spec, index: int, value: Entry) -> Spec:
    entries = list(spec.entries)
    while len(entries) < index:
        entries.append(None)
    entries.insert(index, value)
    return Spec('tuple', tuple(entries))


def _ours_insert(spec: Spec, axis: int, value: Entry) -> Spec:
    entries = list(spec.entries)
    while len(entries) < axis:
        entries.append(None)
    entries.insert(axis, value)
    return Spec(spec.form, tuple(entries))


def stacked_axis(stack: Stack, rank_after: int) -> int:
    return stack.axis % rank_after


def expected_metadata(program: Program, flax: str) -> dict[str, dict[str, Any]]:
    """Per Variable path, each sharding-like field as ``Spec.to_json()`` or None."""
    out: dict[str, dict[str, Any]] = {}
    for leaf in program.leaves:
        fields = {'out_sharding': leaf.spec, 'optimizer_sharding': leaf.optimizer_spec,
                  EXTRA_KEY: leaf.extra_spec}
        rank = len(leaf.shape)
        for stack in reversed(program.stacks):  # innermost stacks first
            rank += 1
            axis = stacked_axis(stack, rank)
            for field, spec in fields.items():
                if not spec or not spec.entries:  # None and () stay as they are
                    continue
                if stack.decorator is not None:  # the decorator inserts at axis 0
                    # into out_sharding only; the transform leaves the axis to it
                    if field == 'out_sharding':
                        insert = _ours_insert if flax == 'ours' else _vanilla_insert
                        fields[field] = insert(spec, 0, stack.decorator)
                    continue
                # Both flaxes read the transform_metadata keyword in graph mode
                # with graph updates only; tree mode ignores it.
                keyword = MODES[stack.mode] == (True, True)
                if field == EXTRA_KEY and not (stack.extra and keyword):
                    continue
                named = stack.partition != DEFAULT and keyword
                if flax == 'vanilla':
                    honoured = named
                    if not honoured:
                        continue
                    if field == 'out_sharding':
                        fields[field] = _vanilla_insert(spec, stack.axis, stack.partition)
                    elif field == EXTRA_KEY and stack.extra and spec.form == 'tuple':
                        fields[field] = _vanilla_insert(spec, stack.axis, EXTRA_VALUE)
                elif named:  # vanilla's, positional and keeping the type; the
                    # optimizer_sharding of what it creates gets the name too;
                    # extra keys, as vanilla, only where they hold a tuple
                    if field == EXTRA_KEY and spec.form != 'tuple':
                        continue
                    value = EXTRA_VALUE if field == EXTRA_KEY else stack.partition
                    fields[field] = _ours_insert(spec, axis, value)
                elif field != EXTRA_KEY:  # tree mode names what it creates
                    value = None if stack.partition == DEFAULT else stack.partition
                    fields[field] = _ours_insert(spec, axis, value)
        out[leaf.name] = {f: None if s is None else s.to_json() for f, s in fields.items()}
    return out


def resolve(spec: dict[str, Any] | None, leaf: Leaf, program: Program) -> list[Any] | None:
    """What nnx.get_partition_spec gives for this metadata (as a list)."""
    if not spec or not spec['entries']:
        return []
    entries = spec['entries']
    if program.context_rules or leaf.local_rules:
        rules = dict(RULES)
        entries = [rules.get(e, e) if isinstance(e, str) else e for e in entries]
    return entries


def apply_axis_entry(program: Program, meta: dict[str, dict[str, Any]]) -> bool:
    """Whether a named Apply can remove its name at the outermost axis (ours)."""
    if program.apply is None or program.apply.partition == DEFAULT or not program.stacks \
            or MODES[program.apply.mode] != (True, True):  # tree mode ignores the name
        return True
    for leaf in program.leaves:
        spec = meta[leaf.name]['out_sharding']
        if spec is None:
            continue
        axis = outer_axis(program, leaf)
        if not spec['entries'] or axis >= len(spec['entries']) \
                or spec['entries'][axis] != program.apply.partition:
            return False
    return True


def outer_axis(program: Program, leaf: Leaf) -> int:
    rank = len(leaf.shape) + len(program.stacks)
    return stacked_axis(program.stacks[0], rank)
