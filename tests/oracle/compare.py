"""The oracle's rules: what ours must give, knowing what vanilla gave.

``compare`` runs each check of ``CHECKS`` (one property each, a small
function of a ``Judged``: the program, both reports and the model's
expectations) and collects their divergences. Every divergence is tagged:
- ``intended``: a check where the model says ours differs from vanilla (a
  stacked-axis entry, what consumers derive from it, a #5112-family failure
  of vanilla that ours must not have). With vanilla run as ours, exactly
  these fail.
- ``compat``: ours must equal vanilla here (values, array shardings,
  errors, untouched models) and does not.
- ``model``: vanilla disagrees with the model of vanilla; fix the model.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator
from typing import Any, Callable

from tests.oracle.programs import DEFAULT, EXTRA_KEY, HIDDEN, Program, Spec, after_pass_metadata, \
    apply_axis_entry, \
    build_error, expected_metadata, inside_metadata, longer_than_the_array, \
    longer_than_the_slice_inside, \
    made_metadata, pass_error, pass_runs, placing_field, resolve, stacked_rank, \
    stacked_spec_inside, stale_leaves, \
    unlike_layers_inside, stacking_rule, writes_back_broadcasts
from tests.oracle.reports import Report, VariableReport

Divergence = tuple[str, str]  # (tag, message)
# The errors vanilla 0.12.12 raises on the #5112 family: stale metadata, one
# entry short (or shifted) after a lifted transform, reaching a sharding
# consumer, or two Variables whose metadata differ only by that entry meeting
# in one pytree op, or the stacked axis's entry laid on a slice's dimension
# beside the mesh axis the batch is sharded on. Seen in the oracle's
# programs; ``Expected to remove`` and vanilla's named path on a spec it
# cannot take are decided by the model (``build_error``, ``pass_error``),
# not here.
FAMILY = re.compile(
    r'^IndivisibleError: One of pjit (inputs|outputs) with pytree key path .* was given '
    r'the sharding'
    r'|^ValueError: Sharding spec .* implies that array axis \d+ is partitioned \d+ times, '
    r'but does not evenly divide the dimension'
    r'|^ValueError: Length of sharding\.spec '
    r'|^ValueError: One of with_sharding_constraint arguments is incompatible with its '
    r'sharding annotation .* is only valid for values of rank at least \d+, but was '
    r'applied to a value of rank \d+'
    r'|^IndexError: pop index out of range$'
    r'|^ShardingTypeError: .* produces an illegally sharded result'
    r'|^ShardingTypeError: \w+ got incompatible shardings for broadcasting: '
    r'|^ValueError: pytree structure error: different pytree metadata at key path'
    r'|^DuplicateSpecError: A single NamedSharding spec specification can map every '
    r'mesh axis to at most one positional dimension')
SPEC_IN_MESSAGE = re.compile(r"(P|PartitionSpec)?\([^()]*\)|\[[^\[\]]*\]")
FOUND_IN_MESSAGE = re.compile(r"found [^ ,.]+")
REMOVE_MESSAGE = re.compile(r" from .*, but found .*$")  # vanilla's 'Expected to remove'
# JAX's error for a sharding spec longer than the array it shards (Auto
# meshes and no mesh; Explicit meshes)
RANK_ERROR = re.compile(r'is only valid for values of rank at least'
                        r'|Length of sharding\.spec \(\d+\) must be equal to')
# JAX's error for a spec laid on an array whose dimension it does not divide
DIVIDE_ERROR = re.compile(r'implies that array axis \d+ is partitioned \d+ times, but does '
                          r'not evenly divide the dimension size')
STAGES = ('create', 'apply', 'partition_spec', 'named_sharding', 'abstract', 'eval_shape',
          'optimizer', 'train_step')


class Judged:
    """One program's two reports and the model's expectations, which every check reads.

    ``expect_v`` / ``expect_o``: per Variable path, the metadata the model
    gives on vanilla and on ours (``expected_metadata``); None for a
    hand-written program, which the model does not describe.
    """

    def __init__(self, program: Program, vanilla: Report, ours: Report):
        self.program, self.vanilla, self.ours = program, vanilla, ours
        generic = program.custom is None
        self.expect_v = expected_metadata(program, 'vanilla') if generic else None
        self.expect_o = expected_metadata(program, 'ours') if generic else None
        # after the forward pass (a decorator in its body removes and adds
        # its own entry; series 13: ours gives back what it took)
        self.after_v = after_pass_metadata(program, 'vanilla', self.expect_v) \
            if generic else None
        self.after_o = after_pass_metadata(program, 'ours', self.expect_o) if generic else None
        # The forward pass's removal of its entry succeeds on ours; the pass
        # runs on ours, and on vanilla, by the model (True without a model).
        self.removes = self.expect_o is None or apply_axis_entry(program, self.expect_o)
        self.ours_should_run = self.expect_o is None or pass_runs(program, 'ours', self.expect_o)
        self.vanilla_should_run = self.expect_v is None or apply_axis_entry(
            program, self.expect_v, 'vanilla')
        # what vanilla's build and forward pass raise by the model (None: they run)
        self.vanilla_build_error = build_error(program, 'vanilla') if generic else None
        self.vanilla_pass_error = pass_error(program, 'vanilla', self.expect_v) \
            if generic else None

    def intended(self, path: str, field: str = 'out_sharding', after: bool = False) -> bool:
        if self.expect_v is None:
            return False
        if after:
            return self.after_v[path][field] != self.after_o[path][field]
        return self.expect_v[path][field] != self.expect_o[path][field]

    def any_intended(self) -> bool:
        return self.expect_v is not None and self.expect_v != self.expect_o

    def family(self) -> bool:
        """Vanilla failed with the #5112 family, or where the model says
        vanilla's call raises and ours' does not: its build (the named path on
        a spec vanilla cannot take), or its forward pass where ours' runs (a
        removal that finds another entry, or that named path)."""
        v = self.vanilla
        build = self.vanilla_build_error
        passing = self.vanilla_pass_error
        return bool(FAMILY.search(v.outcome)) or (
            v.failed_stage == 'create' and build is not None and build in v.outcome) or (
            self.ours_should_run and ('Expected to remove' in v.outcome or (
                passing is not None and passing in v.outcome)))

    def stale_override(self) -> bool:
        """A declared ``optimizer_sharding`` the model leaves shorter than its
        stacked array, or an ``out_sharding`` a stacking call of ours left
        without its entry (none since nnxaxis.14: tree mode stacks too).

        Then the optimizer may fail on it on both flaxes alike.
        """
        if self.expect_o is None:
            return False
        return bool(stale_leaves(self.program, 'ours')) or any(
            leaf.optimizer_spec is not None and self.program.stacks
            and len(self.expect_o[leaf.name]['optimizer_sharding']['entries'])
            < stacked_rank(self.program, leaf)
            for leaf in self.program.leaves)

    def outcome(self, report: Report) -> tuple[str, str, str]:
        """Exception type, stage and first message line.

        Where the model says the metadata differs (the stacked entry, the
        spec's type), the specs and entries quoted in the message are masked.
        """
        message = report.outcome if report.message is None else report.message
        if self.any_intended():
            message = REMOVE_MESSAGE.sub(' from <spec>, but found <entry>', message)
            while SPEC_IN_MESSAGE.search(message):  # nested specs, innermost first
                message = SPEC_IN_MESSAGE.sub('<spec>', message)
            message = re.sub(r'array axis \d+', 'array axis <n>', message)
            message = FOUND_IN_MESSAGE.sub('found <entry>', message)
        return report.error_type, report.failed_stage, message

    def metadata(self, who: str, variables: dict[str, VariableReport], expected: dict[str, Any],
                 tag: str | None, where: str = '', after: bool = False) -> list[Divergence]:
        """Each Variable's sharding-like fields against ``expected`` (tag None:
        ``intended`` where the model says ours differs, else ``compat``;
        ``after``: the forward pass's)."""
        found = []
        for path, entry in variables.items():
            for field, want in expected.get(path, {}).items():
                got = entry.metadata[field]
                if got != want:
                    t = tag or ('intended' if self.intended(path, field, after) else 'compat')
                    found.append((t, f'{who}{where} {path}.{field}: {got} expected {want}'))
        return found

    def mirrored(self, report: Report, path: str) -> str | None:
        """The parameter a made Variable mirrors: same path tail, same shape."""
        params, entry = report.after_apply, report.apply.made[path]
        return next((p for p, pe in params.items() if (path == p or path.endswith('/' + p))
                     and pe.shape == entry.shape), None)

    def rank_error_modelled(self) -> bool:
        """Ours failed with JAX's rank error where the model gives ours a spec
        longer than what it shards: an optimizer built in a body that sees a
        stacked spec longer than the slice (a call that leaves the entry of a
        stack ours made, which vanilla made without it, or a tree-mode call
        over an axis a Variable names), or a consumer of a spec longer than the array on ours
        only (a decorator the transform cannot see); or JAX's error for a
        spec that does not divide a dimension, where an optimizer built in the
        body places the slice by the stacked spec (a tree-mode call over an
        axis a Variable names leaves it, as on vanilla, whose stack is left
        per-layer)."""
        o = self.ours
        if self.expect_o is None:
            return False
        if o.failed_stage == 'apply' and DIVIDE_ERROR.search(o.outcome):
            # an optimizer in a tree-mode body over a named axis sees the stacked spec
            return stacked_spec_inside(self.program, 'ours', self.expect_o)
        if not RANK_ERROR.search(o.outcome):
            return False
        if o.failed_stage == 'apply':
            return longer_than_the_slice_inside(self.program, 'ours', self.expect_o)
        return o.failed_stage in STAGES[2:] \
            and longer_than_the_array(self.program, self.expect_o) \
            and not longer_than_the_array(self.program, self.expect_v)

    def made_in_both(self) -> bool:
        """Both bodies made Variables, at the same paths (else ``check_made_paths``)."""
        v, o = self.vanilla.apply, self.ours.apply
        return v is not None and o is not None and v.made is not None \
            and o.made is not None and sorted(v.made) == sorted(o.made)

    def placed_by_a_stacked_spec(self, path: str) -> bool:
        """The spec that places the state made at ``path`` is one the call left
        stacked: its parameter's declared ``optimizer_sharding``, or without
        one an ``out_sharding`` shorter than the stacked array (a stack made
        from specs shorter than its layers has no entry at the axis); or a
        spec the build left off its array (``misaligned_build``), which the
        body sees with an entry removed. Inside the body that spec places the
        state, and neither vanilla's sharding nor the parameter's judges it
        (docs/compatibility.md)."""
        param = self.mirrored(self.ours, path)
        leaf = next((l for l in self.program.leaves if l.name == param), None)
        if leaf is None or self.expect_o is None:
            return False
        field = placing_field(leaf)
        stacked = self.expect_o[leaf.name][field]
        if not stacked:
            return False
        if misaligned_build(self.program, leaf, stacked):
            return True
        if field == 'out_sharding' and len(stacked['entries']) \
                >= stacked_rank(self.program, leaf):
            return False
        inside = inside_metadata(self.program, 'ours', self.expect_o)
        return inside is not None and inside[leaf.name][field] == stacked

    def mirror_judged(self, path: str) -> bool:
        """Optimizer state made in a body at ``path`` is judged by its parameter
        (``check_made_state_mirrors_its_parameter``), not by vanilla's sharding."""
        if self.program.apply.wrap != 'optimizer' or self.vanilla.after_apply is None:
            return False
        if self.program.mesh == 'none':
            # The body's parameter is a tracer and no mesh is set, so the
            # state is as JAX makes it (single-device after an eager vmap of
            # a pmap's stack), on both flaxes alike: compared with vanilla's.
            return False
        param = self.mirrored(self.ours, path)
        # On an Auto mesh the body's traced parameter has no sharding and the
        # state follows the metadata it sees (I4): where the build left the
        # parameter's spec without an entry (none on ours since nnxaxis.14),
        # that is not the array's, and the state is compared with vanilla's.
        if self.program.mesh == 'auto' and self.expect_o is not None \
                and param in stale_leaves(self.program, 'ours'):
            return False
        return param is not None

    def made_expected(self, report: Report, flax: str) -> dict[str, Any]:
        """Per made path of ``report``: the metadata ``flax``'s rule gives what the
        body made from the parameter it mirrors (the model's stacked metadata)."""
        meta = self.expect_o if flax == 'ours' else self.expect_v
        leaves = {leaf.name for leaf in self.program.leaves}
        out = {}
        for path in report.apply.made:
            param = self.mirrored(report, path)
            if param is None or param not in leaves:
                continue
            want = made_metadata(self.program, flax, meta, param)
            if want is not None:  # else the pass fails (the outcome checks say so)
                out[path] = want
        return out

    def train_step_moves_data(self) -> bool:
        """Optimizer state sits apart from its parameter's array on one flax:
        vanilla's (#5112), or ours' where a declared ``optimizer_sharding``
        places it and has the stack's entry, which vanilla's lacks (a named
        transform stacks it; the transform moved no data). Then the train step
        moves data on one flax only: the shardings after training and the
        last bits of the losses may differ."""
        return self.vanilla_state_missharded() or self.declared_state_spec_stacked()

    def declared_state_spec_stacked(self) -> bool:
        o = self.ours
        declared = {l.name for l in self.program.leaves
                    if placing_field(l) == 'optimizer_sharding'}
        return self.expect_v is not None and any(
            leaf.mirrors in declared
            and self.intended(leaf.mirrors, 'optimizer_sharding')
            and leaf.sharding != o.variables[leaf.mirrors].sharding
            for leaf in (o.optimizer or {}).values())

    def vanilla_state_missharded(self) -> bool:
        """Vanilla's optimizer state disagrees with its parameter's array (#5112).

        Then the train step moves data on vanilla and not on ours: the shardings
        after training and the last bits of the losses may differ.
        """
        v = self.vanilla
        return any(
            leaf.mirrors is not None
            and leaf.sharding != v.variables[leaf.mirrors].sharding
            for leaf in (v.optimizer or {}).values())


Check = Callable[[Judged], list[Divergence]]


# Vanilla against the model of vanilla ----------------------------------------

def check_vanilla_metadata_is_modelled(c: Judged) -> list[Divergence]:
    """Vanilla's metadata after the build, and after the forward pass, is
    what the model of vanilla says."""
    if c.expect_v is None or c.vanilla.variables is None:
        return []
    found = c.metadata('vanilla', c.vanilla.variables, c.expect_v, 'model')
    if c.vanilla.after_apply is not None:
        found += c.metadata('vanilla', c.vanilla.after_apply, c.after_v, 'model',
                            ' (after_apply)')
    return found


def check_vanilla_runs_as_modelled(c: Judged) -> list[Divergence]:
    """Vanilla's forward pass runs only where the model of vanilla says it
    removes its entry, and, a simple scan inside ``jax.shard_map``, where it
    does not write its broadcasts back (``writes_back_broadcasts``)."""
    if c.vanilla.ok and not c.vanilla_should_run:
        return [('model', 'vanilla ran, but the model expects its forward pass to '
                          'fail removing the given PARTITION_NAME')]
    if c.vanilla.ok and c.expect_v is not None \
            and writes_back_broadcasts(c.program, 'vanilla'):
        return [('model', 'vanilla ran, but the model expects its scan inside '
                          'jax.shard_map to fail writing its broadcasts back')]
    return []


# Outcomes ------------------------------------------------------------------------

def check_read_only_pass_changes_nothing(c: Judged) -> list[Divergence]:
    """The forward pass's body only reads the stack (I2c): on ours, every
    Variable keeps exactly its type, metadata (each value and its type) and
    pytree structure; ``intended`` where vanilla's pass changed them."""
    o, v = c.ours.apply, c.vanilla.apply
    if o is None or o.kept is not False:
        return []
    if c.after_o is not None and c.after_o != c.expect_o:
        return []  # a decorator in the body changes it, as modelled (check_ours_metadata_...)
    tag = 'compat' if v is not None and v.kept else 'intended'
    return [(tag, "ours' read-only forward pass changed the stack's metadata "
                  f'(vanilla: {"kept" if tag == "compat" else "changed or failed"})')]


def check_mismatched_name_fails_on_ours(c: Judged) -> list[Divergence]:
    """A given PARTITION_NAME that is not the stack's entry at the axis raises
    vanilla's graph-mode error on ours in every mode, before anything changes."""
    o = c.ours
    if not c.vanilla.ok or c.removes:
        return []
    found = []
    if o.ok:
        found.append(('intended', 'ours ran, but the model expects its forward pass '
                                  'to fail removing the given PARTITION_NAME'))
    elif o.failed_stage != 'apply' or not (
            'Expected to remove' in o.outcome or 'pop index out of range' in o.outcome):
        found.append(('intended', f'ours failed at {o.failed_stage} with '
                                  f'{o.outcome}; the model expects the forward '
                                  f'pass to fail removing the given PARTITION_NAME'))
    if not o.ok and o.unmutated is False:
        found.append(('intended', f'ours mutated the model before failing: {o.outcome}'))
    return found


def check_ours_runs_where_vanilla_runs(c: Judged) -> list[Divergence]:
    """Where vanilla runs (and the model's removal succeeds), ours runs (I0);
    but for a pytree op between the layer and an unmapped copy whose metadata
    the model says differ inside (the stacked entry of one of its keys),
    which fails on ours as on vanilla in graph mode, and for JAX's rank
    error where the model gives ours a spec longer than what it shards
    (``Judged.rank_error_modelled``)."""
    o = c.ours
    if not c.vanilla.ok or not c.removes or o.ok:
        return []
    if (not c.ours_should_run and o.failed_stage == 'apply'
            and 'different pytree metadata' in o.outcome):
        return []
    if c.rank_error_modelled():
        return []
    return [('compat', f'ours failed at {o.failed_stage} where vanilla ran: {o.outcome}')]


def check_ours_runs_where_vanilla_has_the_bug(c: Judged) -> list[Divergence]:
    """Where vanilla fails with the #5112 family and the model says ours' pass
    runs, ours runs; but for a stale declared optimizer_sharding or a stack
    left per-layer (by vanilla; on ours, none since nnxaxis.14), which may
    fail ours as it fails vanilla (the same exception, at vanilla's stage or a later one
    that vanilla did not reach; the message may name another state leaf, as
    vanilla fails first on a placeholder of adafactor's that ours places like
    the parameter), and
    for JAX's rank error where the model gives ours a spec longer than what
    it shards (``Judged.rank_error_modelled``)."""
    v, o = c.vanilla, c.ours
    if v.ok or not (c.family() and c.ours_should_run) or o.ok:
        return []
    if c.stale_override() and (o.error_type == v.error_type or FAMILY.search(o.outcome)) \
            and STAGES.index(o.failed_stage) >= STAGES.index(v.failed_stage):
        return []  # a stack left a per-layer spec, on both (ours: the #5112 family)
    if c.rank_error_modelled():
        return []
    return [('intended', f'vanilla failed at {v.failed_stage} ({v.outcome}); '
                         f'ours must run but failed at {o.failed_stage}: {o.outcome}')]


def check_ours_fails_where_vanilla_fails(c: Judged) -> list[Divergence]:
    """Where vanilla fails otherwise, ours fails too, with vanilla's exception,
    stage and message (masked where the model says the metadata differs)."""
    v, o = c.vanilla, c.ours
    if v.ok or (c.family() and c.ours_should_run):
        return []
    if o.ok:
        return [('compat', f'vanilla failed at {v.failed_stage} ({v.outcome}); ours ran')]
    if c.family() or c.outcome(o) == c.outcome(v):
        return []
    # a given PARTITION_NAME that is not the stack's entry raises on ours
    # first, in every mode (vanilla's graph-mode error)
    if not c.removes and o.failed_stage == 'apply' and 'Expected to remove' in o.outcome:
        return []
    # JAX's rank error where the model gives ours a longer spec, at a stage
    # before vanilla's failure (check_ours_runs_where_vanilla_runs)
    if c.rank_error_modelled() and \
            STAGES.index(o.failed_stage) < STAGES.index(v.failed_stage):
        return []
    return [('compat', f'vanilla failed at {v.failed_stage} with {v.outcome}; '
                       f'ours at {o.failed_stage} with {o.outcome}')]


def check_failure_leaves_the_model_alone(c: Judged) -> list[Divergence]:
    """Where both fail, ours leaves the model as it was before the failing stage."""
    o = c.ours
    if not c.vanilla.ok and not o.ok and o.unmutated is False:
        return [('compat', f'ours mutated the model before failing: {o.outcome}')]
    return []


# Ours against the model ----------------------------------------------------------

def check_ours_metadata_is_modelled(c: Judged) -> list[Divergence]:
    """Ours' metadata after each stage is what the model of ours says."""
    if c.expect_o is None:
        return []
    after = {'after_apply': True, 'after_train': True}
    return [d for key in ('variables', 'after_apply', 'after_train', 'eval_shape')
            if getattr(c.ours, key) is not None
            for d in c.metadata('ours', getattr(c.ours, key),
                                c.after_o if key in after else c.expect_o, None, f' ({key})',
                                key in after)]


def check_inside_the_body(c: Judged) -> list[Divergence]:
    """The body sees each mapped leaf as the pass's call removes its entry
    (stacking_rule), or stacked where the call leaves metadata alone."""
    o, v, program = c.ours, c.vanilla, c.program
    if c.expect_o is None or o.apply is None or not o.apply.inside:
        return []
    apply = program.apply
    inside_o = inside_metadata(program, 'ours', c.expect_o)
    inside_v = inside_metadata(program, 'vanilla', c.expect_v)
    found = []
    for leaf in program.leaves:
        want_o = None if inside_o is None else inside_o[leaf.name]['out_sharding']
        want_v = None if inside_v is None else inside_v[leaf.name]['out_sharding']
        got = o.apply.inside[0].get(leaf.name)
        if inside_o is not None and got != want_o:  # else the outcome checks
            found.append(('intended' if inside_v is None or want_o != want_v else 'compat',
                          f'ours inside {apply.kind} {leaf.name}: {got} expected {want_o}'))
        if inside_v is None:
            continue
        if v.apply is not None and v.apply.inside \
                and v.apply.inside[0].get(leaf.name) != want_v:
            found.append(('model', f'vanilla inside {apply.kind} {leaf.name}: '
                                   f'{v.apply.inside[0].get(leaf.name)} expected {want_v}'))
    return found


def check_consumers_read_the_modelled_spec(c: Judged) -> list[Divergence]:
    """get_partition_spec, get_named_sharding and the abstract model give the
    modelled out_sharding, resolved through the logical rules."""
    o, program = c.ours, c.program
    if c.expect_o is None:
        return []
    found = []
    for key in ('partition_spec', 'named_sharding', 'abstract'):
        for leaf in program.leaves if getattr(o, key) is not None else ():
            got = getattr(o, key)[leaf.name]
            got = got.spec if key == 'abstract' else got
            want = resolve(c.after_o[leaf.name]['out_sharding'], leaf, program)
            if got != want:
                tag = 'intended' if want != resolve(
                    c.after_v[leaf.name]['out_sharding'], leaf, program) else 'compat'
                found.append((tag, f'ours {key} {leaf.name}: {got} expected {want}'))
    return found


def check_optimizer_state_mirrors_parameters(c: Judged) -> list[Divergence]:
    """Each optimizer state leaf mirroring a parameter has its array sharding (I4),
    but where a declared optimizer_sharding decides, as on vanilla."""
    o = c.ours
    overridden = {l.name for l in c.program.leaves if l.optimizer_spec}
    found = []
    for state_path, leaf in (o.optimizer or {}).items():
        param = leaf.mirrors
        if param is None or param.rsplit('/', 1)[-1] in overridden:
            continue
        want = o.variables[param].sharding
        if leaf.sharding != want:
            vleaf = (c.vanilla.optimizer or {}).get(state_path)
            vanilla_wrong = vleaf is None or vleaf.sharding != \
                c.vanilla.variables[param].sharding
            found.append(('intended' if vanilla_wrong else 'compat',
                          f'ours optimizer {state_path}: {leaf.sharding} but parameter '
                          f'{param} is {want}'))
    return found


# Ours equal to vanilla -------------------------------------------------------------

def paired_entries(c: Judged, keys: tuple[str, ...],
                   found: list[Divergence]) -> Iterator[tuple[str, str, Any, Any]]:
    """``(key, path, vanilla's entry, ours)`` for each report section of
    ``keys`` that both reports have with the same paths; a section whose paths
    differ goes into ``found`` instead."""
    for key in keys:
        vs, os_ = getattr(c.vanilla, key), getattr(c.ours, key)
        if vs is None or os_ is None:
            continue
        if sorted(vs) != sorted(os_):
            found.append(('compat', f'{key}: paths {sorted(os_)}, vanilla {sorted(vs)}'))
            continue
        for path, ve in vs.items():
            yield key, path, ve, os_[path]


def check_variables_equal_vanilla(c: Judged) -> list[Divergence]:
    """Every Variable after each stage: same paths, types, values, shardings and
    metadata keys (metadata itself too for a hand-written program); after a
    train step that moves data on one flax only, values and shardings are not
    compared."""
    fixed = c.train_step_moves_data()
    found: list[Divergence] = []
    for key, path, ve, oe in paired_entries(c, ('variables', 'after_apply', 'after_train'),
                                            found):
        for field in ('type', 'dtype', 'shape', 'digest', 'sharding'):
            mine, theirs = getattr(oe, field), getattr(ve, field)
            if theirs != mine and not (
                    fixed and key == 'after_train' and field in ('digest', 'sharding')):
                found.append(('compat', f'{key} {path}.{field}: ours {mine}, '
                                        f'vanilla {theirs}'))
        if ve.metadata_keys != oe.metadata_keys:
            found.append(('compat', f'{key} {path} metadata keys: ours '
                                    f'{oe.metadata_keys}, vanilla {ve.metadata_keys}'))
        if c.expect_v is None and ve.metadata != oe.metadata:
            found.append(('compat', f'{key} {path} metadata: ours {oe.metadata}, '
                                    f'vanilla {ve.metadata}'))
    return found


def check_apply_output_equals_vanilla(c: Judged) -> list[Divergence]:
    """The forward pass's output digest."""
    found: list[Divergence] = []
    theirs, mine = c.vanilla.apply, c.ours.apply
    if theirs is not None and mine is not None and theirs.output != mine.output:
        found.append(('compat', f'apply output: ours {mine.output}, vanilla {theirs.output}'))
    return found


def check_consumers_equal_vanilla(c: Judged) -> list[Divergence]:
    """Consumers' specs where the model does not describe them (a hand-written
    program); the abstract model's and eval_shape's shapes (and dtypes) always."""
    v, o = c.vanilla, c.ours
    found = []
    for key in ('partition_spec', 'named_sharding', 'abstract'):
        theirs, mine = getattr(v, key), getattr(o, key)
        if theirs is not None and mine is not None and c.expect_v is None and theirs != mine:
            found.append(('compat', f'{key}: ours {mine}, vanilla {theirs}'))
    if v.abstract is not None and o.abstract is not None:
        for path, ve in v.abstract.items():
            oe = o.abstract.get(path)
            if (None if oe is None else oe.shape) != ve.shape:
                found.append(('compat', f'abstract {path} shape differs'))
    if v.eval_shape is not None and o.eval_shape is not None:
        for path, ve in v.eval_shape.items():
            oe = o.eval_shape.get(path)
            shape, dtype = (None, None) if oe is None else (oe.shape, oe.dtype)
            if (shape, dtype) != (ve.shape, ve.dtype):
                found.append(('compat', f'eval_shape {path}: ours {shape}, vanilla {ve.shape}'))
    return found


def check_optimizer_state_equals_vanilla(c: Judged) -> list[Divergence]:
    """Optimizer state before and after training: same leaves, shapes, values
    (after training: unless the step moves data on one flax only), and the sharding
    of each leaf that mirrors no parameter."""
    fixed = c.train_step_moves_data()
    found: list[Divergence] = []
    for key, path, ve, oe in paired_entries(c, ('optimizer', 'optimizer_after_train'), found):
        if oe.shape != ve.shape:
            found.append(('compat', f'{key} {path}: shape differs from vanilla'))
        elif oe.digest != ve.digest and not (fixed and key == 'optimizer_after_train'):
            found.append(('compat', f'{key} {path}: values differ from vanilla'))
        if ve.mirrors is None and oe.sharding != ve.sharding:
            found.append(('compat', f'{key} {path}: ours {oe.sharding}, '
                                    f'vanilla {ve.sharding}'))
    return found


def check_losses_equal_vanilla(c: Judged) -> list[Divergence]:
    """The train step's losses, bit for bit (close, where the step moves data on one flax only)."""
    v, o = c.vanilla, c.ours
    if v.losses is None or o.losses is None or v.losses == o.losses:
        return []
    close = c.train_step_moves_data() and len(v.losses) == len(o.losses) and all(
        math.isclose(float.fromhex(a), float.fromhex(b), rel_tol=1e-5)
        for a, b in zip(v.losses, o.losses))
    return [] if close else [('compat', f'losses: ours {o.losses}, vanilla {v.losses}')]


# What a body made (a copy, a gradient, optimizer state) (I2, I4) ----------------

def check_made_paths_equal_vanilla(c: Judged) -> list[Divergence]:
    """The body made Variables at vanilla's paths."""
    v, o = c.vanilla.apply, c.ours.apply
    if v is not None and o is not None and v.made is not None and o.made is not None \
            and sorted(v.made) != sorted(o.made):
        return [('compat', f'made: paths {sorted(o.made)} vs vanilla {sorted(v.made)}')]
    return []


def check_made_equal_vanilla(c: Judged) -> list[Divergence]:
    """Each made Variable: vanilla's type, dtype, shape, values, sharding and
    metadata keys (the sharding of optimizer state judged by its parameter
    instead, ``check_made_state_mirrors_its_parameter``)."""
    if not c.made_in_both():
        return []
    v, o = c.vanilla.apply, c.ours.apply
    found = []
    for path, ve in v.made.items():
        oe = o.made[path]
        for field in ('type', 'dtype', 'shape', 'digest', 'sharding', 'metadata_keys'):
            if field == 'sharding' and (c.mirror_judged(path) or c.placed_by_a_stacked_spec(path)):
                continue
            mine, theirs = getattr(oe, field), getattr(ve, field)
            if theirs != mine:
                found.append(('compat', f'made {path}.{field}: ours {mine}, vanilla {theirs}'))
    return found


def check_made_state_mirrors_its_parameter(c: Judged) -> list[Divergence]:
    """Optimizer state made in a body is sharded like its parameter (I4);
    ``intended`` where vanilla's is not (#5112)."""
    if not c.made_in_both():
        return []
    v, o = c.vanilla, c.ours
    found = []
    for path in v.apply.made:
        if not c.mirror_judged(path) or c.placed_by_a_stacked_spec(path):
            continue
        param = c.mirrored(o, path)
        vanilla_ok = v.apply.made[path].sharding == v.after_apply[param].sharding
        mine, want = o.apply.made[path].sharding, o.after_apply[param].sharding
        if mine != want and mine == declared_on_auto(c.program, o.after_apply[param], param):
            continue  # traced on an Auto mesh, the state follows the metadata (I4)
        if mine != want:
            found.append(('compat' if vanilla_ok else 'intended',
                          f'ours made {path}: {mine} but its parameter {param} is {want}'))
    return found


def misaligned_build(program: Program, leaf: Any, stacked: dict[str, Any]) -> bool:
    """Whether the build left ``leaf``'s spec off its array, as
    docs/compatibility.md says it does: a ``jnp.stack`` stack keeps a spec
    shorter than the array, and a decorator the transform cannot see (behind
    a lambda, called in the body) adds its entry beside the transform's."""
    lags = any(s.kind == 'array' for s in program.stacks) \
        and len(stacked['entries']) < stacked_rank(program, leaf)
    return lags or any(s.decorator is not None and s.placement in HIDDEN
                       for s in program.stacks)


def declared_on_auto(program: Program, param: Any, name: str) -> Any:
    """On an Auto mesh, the sharding a parameter's declared ``out_sharding``
    gives its array (a traced parameter has none, so an optimizer built in a
    body places its state by the metadata, I4); None elsewhere, for logical
    names and for a legacy key."""
    leaf = next((leaf for leaf in program.leaves if leaf.name == name), None)
    spec = param.metadata.get('out_sharding')
    if program.mesh != 'auto' or leaf is None or leaf.key != 'out_sharding' \
            or program.context_rules or leaf.local_rules or not isinstance(spec, dict) \
            or not isinstance(param.sharding, dict):
        return None
    entries = list(spec['entries']) + [None] * (len(param.shape) - len(spec['entries']))
    return {**param.sharding, 'spec': entries}


def made_problems(report: Report, expected: dict[str, Any],
                  fields: tuple[str, ...] | None) -> list[tuple[str, str]]:
    found = []
    for path, want in expected.items():
        got = report.apply.made[path].metadata
        if fields is not None:
            want, got = ({f: d[f] for f in fields} for d in (want, got))
        if got != want:
            found.append((path, f'made {path}: metadata {got}, expected {want}'))
    return found


def check_made_metadata_is_modelled(c: Judged) -> list[Divergence]:
    """What the body made is stacked on the way out as the pass's call stacks
    it (stacking_rule): per-slice inside, the call's entry at the axis outside,
    or (a call that leaves metadata alone) the stacked spec the body saw.
    Where vanilla's differs from the rule, ours' difference counts as
    intended."""
    if c.ours.apply is None or c.ours.apply.made is None or c.ours.after_apply is None:
        return []
    fields = ('out_sharding',) if c.program.apply.wrap == 'optimizer' else None
    want_o = c.made_expected(c.ours, 'ours')
    want_v = c.made_expected(c.ours, 'vanilla')
    wrong_v = set(want_o)
    if c.vanilla.apply is not None and c.vanilla.apply.made is not None \
            and c.vanilla.after_apply is not None:
        wrong_v = {p for p, _ in made_problems(
            c.vanilla, c.made_expected(c.vanilla, 'vanilla'), fields)}
    return [('intended' if path in wrong_v or want_o[path] != want_v[path] else 'compat',
             f'ours {problem}') for path, problem in made_problems(c.ours, want_o, fields)]


JITTED_CALLS = 2  # Apply.wrap 'jit': the runner's calls of the jitted function


def check_no_extra_retrace(c: Judged) -> list[Divergence]:
    """A function jitted outside and called in the body traces no more often
    than on vanilla (I7); where vanilla's pass failed, or where the body sees
    other metadata than the layer the function was first called on (a call
    that leaves a stack's entry), no more often than it is called (the runner
    calls it once outside and once in the body)."""
    traces_o = 0 if c.ours.apply is None else c.ours.apply.traces
    if c.vanilla.apply is None:
        traces_v, most = 0, JITTED_CALLS
    elif c.expect_o is not None and unlike_layers_inside(c.program, 'ours', c.expect_o):
        traces_v, most = c.vanilla.apply.traces, JITTED_CALLS
    else:
        traces_v = c.vanilla.apply.traces
        most = max(traces_v, 1)
    if traces_o > most:
        return [('compat', f'ours traced the jitted function {traces_o} times, '
                           f'vanilla {traces_v}: an extra retrace')]
    return []


CHECKS: tuple[Check, ...] = (
    check_vanilla_metadata_is_modelled,
    check_vanilla_runs_as_modelled,
    check_read_only_pass_changes_nothing,
    check_mismatched_name_fails_on_ours,
    check_ours_runs_where_vanilla_runs,
    check_ours_runs_where_vanilla_has_the_bug,
    check_ours_fails_where_vanilla_fails,
    check_failure_leaves_the_model_alone,
    check_ours_metadata_is_modelled,
    check_inside_the_body,
    check_consumers_read_the_modelled_spec,
    check_optimizer_state_mirrors_parameters,
    check_variables_equal_vanilla,
    check_apply_output_equals_vanilla,
    check_consumers_equal_vanilla,
    check_optimizer_state_equals_vanilla,
    check_losses_equal_vanilla,
    check_made_paths_equal_vanilla,
    check_made_equal_vanilla,
    check_made_state_mirrors_its_parameter,
    check_made_metadata_is_modelled,
    check_no_extra_retrace,
)


def compare(program: Program, vanilla: Report, ours: Report) -> list[Divergence]:
    """Every check of ``CHECKS`` on one program's reports."""
    judged = Judged(program, vanilla, ours)
    return [divergence for check in CHECKS for divergence in check(judged)]


def scenario_out_sharding(vanilla: list[Any] | None, rank: int, named: bool) -> list[Any] | None:
    """Ours' out_sharding of a scenario's stacked Variable, by the model.

    A scenario stacks its layers by one graph-mode ``nnx.vmap`` at axis 0 that
    maps no Variable (``stacking_rule``); ``vanilla`` is vanilla's stacked spec
    (as the per-layer spec where the vmap is given no name, which vanilla then
    leaves alone), ``rank`` the per-layer rank.
    """
    if not vanilla:
        return vanilla
    entries = tuple(tuple(e) if isinstance(e, list) else e for e in vanilla)
    partition, per_layer = (entries[0], entries[1:]) if named else (DEFAULT, entries)
    fields = {'out_sharding': Spec('list', per_layer), 'optimizer_sharding': None,
              EXTRA_KEY: None}
    stacked = stacking_rule('ours', 'graph', partition, 0).outside(fields, rank)
    return stacked['out_sharding'].to_json()['entries']


def compare_scenario(program: Program, vanilla: Report, ours: Report) -> list[Divergence]:
    """A regression guard of tests/support/scenarios.py: ours right, and equal where vanilla ran."""
    from tests.support.checks import metadata_problems, optimizer_problems

    v, o = vanilla.scenario, ours.scenario
    found: list[Divergence] = []
    if 'no_mesh' in v or 'no_mesh' in o:
        return found
    named = dict(program.arguments).get('named', False) or 'named' in program.custom
    checks = [metadata_problems] + ([optimizer_problems] if 'opt_state' in v or 'opt_state' in o
                                    or 'error' in v else [])
    for check in checks:
        problems_o = [p for p in check(o) if not p.startswith('no optimizer state leaf')]
        if problems_o:
            tag = 'intended' if check(v) else 'compat'
            found += [(tag, f'ours: {p}') for p in problems_o]
    if 'error' in v or 'error' in o:
        return found
    for path, pv in v['params'].items():
        po = o['params'].get(path)
        if po is None or (po['shape'], po['spec']) != (pv['shape'], pv['spec']):
            found.append(('compat', f'{path}: ours {po}, vanilla {pv}'))
            continue
        stale = pv['out_sharding']
        want = scenario_out_sharding(stale, len(pv['shape']) - 1, named)
        if po['out_sharding'] != want:
            found.append(('intended' if want != stale else 'compat',
                          f'{path}.out_sharding: ours {po["out_sharding"]} expected {want}'))
    if v.get('losses') != o.get('losses'):
        found.append(('compat', f'losses: ours {o.get("losses")}, vanilla {v.get("losses")}'))
    return found


def is_fixed(program: Program, vanilla: Report) -> bool:
    """Vanilla fails with the #5112 family where ours must run (a fixed program)."""
    if vanilla.ok:
        return False
    judged = Judged(program, vanilla, vanilla)
    return judged.ours_should_run and judged.family()


def _entries(spec: dict[str, Any] | None) -> Any:
    return None if spec is None else spec['entries']


def compare_with_workaround(reference: Report, ours: Report) -> list[Divergence]:
    """Ours against vanilla running the program with the documented workaround.

    Values, array shardings, losses, consumers' specs and the ``out_sharding``
    entries must be equal; the spec's type may differ (vanilla makes a tuple)
    and so may ``optimizer_sharding`` (vanilla's workaround leaves it
    per-layer). Tagged ``intended``: vanilla without the workaround differs.
    """
    if not reference.ok:
        return [('intended', f'vanilla with the workaround failed at '
                             f'{reference.failed_stage}: {reference.outcome}')]
    if not ours.ok:
        return [('intended', f'ours failed where vanilla with the workaround ran: '
                             f'{ours.outcome}')]
    found: list[Divergence] = []

    def differ(what: str, mine: Any, theirs: Any) -> None:
        if mine != theirs:
            found.append(('intended', f'{what}: ours {mine}, vanilla+workaround {theirs}'))

    for key in ('variables', 'after_apply', 'after_train', 'eval_shape'):
        r, o = getattr(reference, key), getattr(ours, key)
        if r is None or o is None:
            differ(f'{key} present', o is not None, r is not None)
            continue
        differ(f'{key} paths', sorted(o), sorted(r))
        for path in set(r) & set(o):
            for field in ('type', 'dtype', 'shape', 'digest', 'sharding', 'metadata_keys'):
                if field != 'digest' or r[path].digest is not None:  # eval_shape has none
                    differ(f'{key} {path}.{field}', getattr(o[path], field),
                           getattr(r[path], field))
            differ(f'{key} {path}.out_sharding', _entries(o[path].metadata['out_sharding']),
                   _entries(r[path].metadata['out_sharding']))
    for key in ('partition_spec', 'named_sharding', 'abstract', 'losses'):
        if getattr(reference, key) is not None or getattr(ours, key) is not None:
            differ(key, getattr(ours, key), getattr(reference, key))
    for key in ('optimizer', 'optimizer_after_train'):
        if getattr(reference, key) is not None or getattr(ours, key) is not None:
            strip = lambda leaves: {p: (leaf.shape, leaf.digest, leaf.sharding)  # noqa: E731
                                    for p, leaf in (leaves or {}).items()}
            differ(key, strip(getattr(ours, key)), strip(getattr(reference, key)))
    r, o = reference.apply, ours.apply
    if r is not None and o is not None:
        differ('apply output', o.output, r.output)
        differ('apply traces', o.traces, r.traces)
        if r.made is not None or o.made is not None:
            strip = lambda made: {p: (e.digest, e.sharding,  # noqa: E731
                                      _entries(e.metadata['out_sharding']))
                                  for p, e in (made or {}).items()}
            differ('made', strip(o.made), strip(r.made))
    return found
