"""The oracle's rules: what ours must give, knowing what vanilla gave.

Every divergence is tagged:
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
from typing import Any

from tests.oracle.programs import Program, apply_axis_entry, expected_metadata, \
    inside_metadata, made_metadata, pass_runs, resolve, stacked_rank

Report = dict[str, Any]
Divergence = tuple[str, str]  # (tag, message)
# The errors vanilla 0.12.12 raises on the #5112 family: stale metadata, one
# entry short (or shifted) after a lifted transform, reaching a sharding
# consumer, or two Variables whose metadata differ only by that entry meeting
# in one pytree op. Seen in the oracle's programs; ``Expected to remove`` is
# decided by the model (``apply_axis_entry``), not here.
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
    r'|^ValueError: pytree structure error: different pytree metadata at key path')
SPEC_IN_MESSAGE = re.compile(r"(P|PartitionSpec)?\([^()]*\)|\[[^\[\]]*\]")
FOUND_IN_MESSAGE = re.compile(r"found [^ ,.]+")
REMOVE_MESSAGE = re.compile(r" from .*, but found .*$")  # vanilla's 'Expected to remove'
STAGES = ('create', 'apply', 'partition_spec', 'named_sharding', 'abstract', 'eval_shape',
          'optimizer', 'train_step')


class Comparison:
    def __init__(self, program: Program, vanilla: Report, ours: Report):
        self.program, self.vanilla, self.ours = program, vanilla, ours
        self.found: list[Divergence] = []
        generic = program.custom is None
        self.expect_v = expected_metadata(program, 'vanilla') if generic else None
        self.expect_o = expected_metadata(program, 'ours') if generic else None

    def add(self, tag: str, message: str) -> None:
        self.found.append((tag, message))

    def intended(self, path: str, field: str = 'out_sharding') -> bool:
        if self.expect_v is None:
            return False
        return self.expect_v[path][field] != self.expect_o[path][field]

    def any_intended(self) -> bool:
        return self.expect_v is not None and self.expect_v != self.expect_o

    def stale_override(self) -> bool:
        """A declared ``optimizer_sharding`` the model leaves shorter than its stacked array.

        Then the optimizer may fail on it on both flaxes alike.
        """
        if self.expect_o is None:
            return False
        return any(leaf.optimizer_spec is not None and self.program.stacks
                   and len(self.expect_o[leaf.name]['optimizer_sharding']['entries'])
                   < stacked_rank(self.program, leaf)
                   for leaf in self.program.leaves)

    def outcome(self, report: Report) -> tuple[str, str, str]:
        """Exception type, stage and first message line.

        Where the model says the metadata differs (the stacked entry, the
        spec's type), the specs and entries quoted in the message are masked.
        """
        message = report.get('message', report['outcome'])
        if self.any_intended():
            message = REMOVE_MESSAGE.sub(' from <spec>, but found <entry>', message)
            while SPEC_IN_MESSAGE.search(message):  # nested specs, innermost first
                message = SPEC_IN_MESSAGE.sub('<spec>', message)
            message = re.sub(r'array axis \d+', 'array axis <n>', message)
            message = FOUND_IN_MESSAGE.sub('found <entry>', message)
        return report['error_type'], report['failed_stage'], message

    # ---------------------------------------------------------------------
    def run(self) -> list[Divergence]:
        v, o = self.vanilla, self.ours
        if self.expect_v is not None and 'variables' in v:
            self.check_metadata('vanilla', v['variables'], self.expect_v, 'model')
        removes = self.expect_o is None or apply_axis_entry(self.program, self.expect_o)
        ours_should_run = self.expect_o is None or pass_runs(self.program, 'ours', self.expect_o)
        vanilla_should_run = self.expect_v is None or apply_axis_entry(
            self.program, self.expect_v, 'vanilla')
        if v['outcome'] == 'ok':
            if not vanilla_should_run:
                self.add('model', 'vanilla ran, but the model expects its forward pass to '
                                  'fail removing the given PARTITION_NAME')
            if not removes:
                # A given PARTITION_NAME that is not the stack's entry at the
                # axis raises vanilla's graph-mode error on ours in every mode,
                # before anything changes.
                if o['outcome'] == 'ok':
                    self.add('intended', 'ours ran, but the model expects its forward pass '
                                         'to fail removing the given PARTITION_NAME')
                elif o.get('failed_stage') != 'apply' or not (
                        'Expected to remove' in o['outcome']
                        or 'pop index out of range' in o['outcome']):
                    self.add('intended', f'ours failed at {o.get("failed_stage")} with '
                                         f'{o["outcome"]}; the model expects the forward '
                                         f'pass to fail removing the given PARTITION_NAME')
                if o['outcome'] != 'ok' and o.get('unmutated') is False:
                    self.add('intended', f'ours mutated the model before failing: '
                                         f'{o["outcome"]}')
            elif o['outcome'] != 'ok':
                self.add('compat', f'ours failed at {o.get("failed_stage")} where vanilla ran: '
                                   f'{o["outcome"]}')
        else:
            message = v['outcome']
            family = bool(FAMILY.search(message)) or (
                ours_should_run and 'Expected to remove' in message)
            if family and ours_should_run and self.stale_override() \
                    and o['outcome'] != 'ok' and self.outcome(o) == self.outcome(v):
                pass  # a named stack leaves optimizer_sharding per-layer, on both
            elif family and ours_should_run:
                if o['outcome'] != 'ok':
                    self.add('intended', f'vanilla failed at {v["failed_stage"]} ({message}); '
                                         f'ours must run but failed at {o.get("failed_stage")}: '
                                         f'{o["outcome"]}')
            elif o['outcome'] == 'ok':
                self.add('compat', f'vanilla failed at {v["failed_stage"]} ({message}); ours ran')
            elif not family and self.outcome(o) != self.outcome(v):
                # a given PARTITION_NAME that is not the stack's entry raises
                # on ours first, in every mode (vanilla's graph-mode error)
                if removes or o.get('failed_stage') != 'apply' \
                        or 'Expected to remove' not in o['outcome']:
                    self.add('compat', f'vanilla failed at {v["failed_stage"]} with '
                                       f'{message}; ours at {o["failed_stage"]} with '
                                       f'{o["outcome"]}')
            if o['outcome'] != 'ok' and o.get('unmutated') is False:
                self.add('compat', f'ours mutated the model before failing: {o["outcome"]}')
        self.check_ours_against_model()
        self.check_equal_to_vanilla()
        self.check_made()
        traces_o = o.get('apply', {}).get('traces', 0)
        traces_v = v.get('apply', {}).get('traces', 0)
        if traces_o > max(traces_v, 1) or (traces_o > 1 and 'apply' not in v):
            self.add('compat', f'ours traced the jitted function {traces_o} times, '
                               f'vanilla {traces_v}: an extra retrace')
        return self.found

    def check_metadata(self, who: str, variables: dict[str, Any],
                       expected: dict[str, Any], tag: str | None, where: str = '') -> None:
        for path, entry in variables.items():
            if path not in expected:
                continue
            for field, want in expected[path].items():
                got = entry['metadata'][field]
                if got != want:
                    t = tag or ('intended' if self.intended(path, field) else 'compat')
                    self.add(t, f'{who}{where} {path}.{field}: {got} expected {want}')

    def check_ours_against_model(self) -> None:
        o, program = self.ours, self.program
        if self.expect_o is not None:
            for key in ('variables', 'after_apply', 'after_train', 'eval_shape'):
                if key in o:
                    self.check_metadata('ours', o[key], self.expect_o, None, f' ({key})')
            self.check_inside()
            for key in ('partition_spec', 'named_sharding', 'abstract'):
                for leaf in program.leaves if key in o else ():
                    got = o[key][leaf.name]
                    got = got['spec'] if key == 'abstract' else got
                    want = resolve(self.expect_o[leaf.name]['out_sharding'], leaf, program)
                    if got != want:
                        tag = 'intended' if want != resolve(
                            self.expect_v[leaf.name]['out_sharding'], leaf, program) else 'compat'
                        self.add(tag, f'ours {key} {leaf.name}: {got} expected {want}')
        overridden = {l.name for l in program.leaves if l.optimizer_spec}
        for state_path, leaf in o.get('optimizer', {}).items():
            param = leaf['mirrors']
            if param is None or param.rsplit('/', 1)[-1] in overridden:
                continue  # optimizer_sharding decides, as on vanilla
            want = o['variables'][param]['sharding']
            if leaf['sharding'] != want:
                vleaf = self.vanilla.get('optimizer', {}).get(state_path)
                vanilla_wrong = vleaf is None or vleaf['sharding'] != \
                    self.vanilla['variables'][param]['sharding']
                self.add('intended' if vanilla_wrong else 'compat',
                         f'ours optimizer {state_path}: {leaf["sharding"]} but parameter '
                         f'{param} is {want}')

    def check_made(self) -> None:
        """Variables a body made (a copy, a gradient, optimizer state) (I2, I4).

        Each one that mirrors a parameter (same path tail and shape) must carry
        that parameter's sharding metadata, as the layer came out of the pass;
        values and array shardings must equal vanilla's.
        """
        v, o = self.vanilla.get('apply', {}), self.ours.get('apply', {})
        if 'made' in v and 'made' in o:
            if sorted(v['made']) != sorted(o['made']):
                self.add('compat', f'made: paths {sorted(o["made"])} vs vanilla {sorted(v["made"])}')
            else:
                for path, ve in v['made'].items():
                    oe = o['made'][path]
                    for field in ('type', 'dtype', 'shape', 'digest', 'sharding',
                                  'metadata_keys'):
                        if field == 'sharding' and self.mirror_check(path):
                            continue
                        if ve[field] != oe[field]:
                            self.add('compat', f'made {path}.{field}: ours {oe[field]}, '
                                               f'vanilla {ve[field]}')
        if 'made' not in o or 'after_apply' not in self.ours:
            return
        # What the body made is stacked on the way out as the pass's call
        # stacks it (stacking_rule): per-slice inside, the call's entry at the
        # axis outside, or (a call that leaves metadata alone) the stacked spec
        # the body saw. Where vanilla's differs from the rule (optimizer state
        # takes its parameter's optimizer_sharding, which the model does not
        # follow), ours' difference counts as intended.
        fields = ('out_sharding',) if self.program.apply.wrap == 'optimizer' else None
        want_o = self.made_expected(self.ours, 'ours')
        want_v = self.made_expected(self.ours, 'vanilla')
        wrong_v = set(want_o)
        if 'made' in v and 'after_apply' in self.vanilla:
            problems_v = self.made_problems(self.vanilla, self.made_expected(
                self.vanilla, 'vanilla'), fields)
            wrong_v = {p for p, _ in problems_v}
        for path, problem in self.made_problems(self.ours, want_o, fields):
            intended = path in wrong_v or want_o[path] != want_v[path]
            self.add('intended' if intended else 'compat', f'ours {problem}')

    @staticmethod
    def mirrored(report: Report, path: str) -> str | None:
        """The parameter a made Variable mirrors: same path tail, same shape."""
        params, entry = report['after_apply'], report['apply']['made'][path]
        return next((p for p, pe in params.items() if (path == p or path.endswith('/' + p))
                     and pe['shape'] == entry['shape']), None)

    def mirror_check(self, path: str) -> bool:
        """Optimizer state made in a body is sharded like its parameter (I4).

        Returns whether the leaf was judged so (then it is not compared with
        vanilla's, whose state may not follow its parameter: #5112).
        """
        v, o = self.vanilla, self.ours
        if self.program.apply.wrap != 'optimizer' or 'after_apply' not in v:
            return False
        if self.program.mesh == 'none':
            # The body's parameter is a tracer and no mesh is set, so the
            # state is as JAX makes it (single-device after an eager vmap of
            # a pmap's stack), on both flaxes alike: compared with vanilla's.
            return False
        param = self.mirrored(o, path)
        if param is None:
            return False
        sharding = lambda r: r['apply']['made'][path]['sharding']  # noqa: E731
        vanilla_ok = sharding(v) == v['after_apply'][param]['sharding']
        if sharding(o) != o['after_apply'][param]['sharding']:
            self.add('compat' if vanilla_ok else 'intended',
                     f'ours made {path}: {sharding(o)} but its parameter {param} is '
                     f'{o["after_apply"][param]["sharding"]}')
        return True

    def made_expected(self, report: Report, flax: str) -> dict[str, Any]:
        """Per made path of ``report``: the metadata ``flax``'s rule gives what the
        body made from the parameter it mirrors (the model's stacked metadata)."""
        meta = self.expect_o if flax == 'ours' else self.expect_v
        leaves = {leaf.name for leaf in self.program.leaves}
        out = {}
        for path in report['apply']['made']:
            param = self.mirrored(report, path)
            if param is None or param not in leaves:
                continue
            want = made_metadata(self.program, flax, meta, param)
            if want is not None:  # else the pass fails (run checks that)
                out[path] = want
        return out

    @staticmethod
    def made_problems(report: Report, expected: dict[str, Any],
                      fields: tuple[str, ...] | None) -> list[tuple[str, str]]:
        found = []
        for path, want in expected.items():
            got = report['apply']['made'][path]['metadata']
            if fields is not None:
                want, got = ({f: d[f] for f in fields} for d in (want, got))
            if got != want:
                found.append((path, f'made {path}: metadata {got}, expected {want}'))
        return found

    def check_inside(self) -> None:
        o, v, program = self.ours, self.vanilla, self.program
        if 'apply' not in o or not o['apply']['inside']:
            return
        # The body sees each mapped leaf as the pass's call removes its entry
        # (stacking_rule), or stacked where the call leaves metadata alone.
        apply = program.apply
        inside_o = inside_metadata(program, 'ours', self.expect_o)
        inside_v = inside_metadata(program, 'vanilla', self.expect_v)
        for leaf in program.leaves:
            want_o = None if inside_o is None else inside_o[leaf.name]['out_sharding']
            want_v = None if inside_v is None else inside_v[leaf.name]['out_sharding']
            got = o['apply']['inside'][0].get(leaf.name)
            if inside_o is not None and got != want_o:  # else run() checks the failure
                self.add('intended' if inside_v is None or want_o != want_v else 'compat',
                         f'ours inside {apply.kind} {leaf.name}: {got} expected {want_o}')
            if inside_v is None:
                continue
            if 'apply' in v and v['apply']['inside'] \
                    and v['apply']['inside'][0].get(leaf.name) != want_v:
                self.add('model', f'vanilla inside {apply.kind} {leaf.name}: '
                                  f'{v["apply"]["inside"][0].get(leaf.name)} expected {want_v}')

    def vanilla_state_missharded(self) -> bool:
        """Vanilla's optimizer state disagrees with its parameter's array (#5112).

        Then the train step moves data on vanilla and not on ours: the shardings
        after training and the last bits of the losses may differ.
        """
        v = self.vanilla
        return any(
            leaf['mirrors'] is not None
            and leaf['sharding'] != v['variables'][leaf['mirrors']]['sharding']
            for leaf in v.get('optimizer', {}).values())

    def check_equal_to_vanilla(self) -> None:
        v, o = self.vanilla, self.ours
        # Downstream of vanilla's mis-sharded optimizer state, not compared.
        fixed = self.vanilla_state_missharded()
        for key in ('variables', 'after_apply', 'after_train'):
            if key not in v or key not in o:
                continue
            if sorted(v[key]) != sorted(o[key]):
                self.add('compat', f'{key}: paths {sorted(o[key])} vs vanilla {sorted(v[key])}')
                continue
            for path, ve in v[key].items():
                oe = o[key][path]
                for field in ('type', 'dtype', 'shape', 'digest', 'sharding'):
                    if ve[field] != oe[field] and not (
                            fixed and key == 'after_train'
                            and field in ('digest', 'sharding')):
                        self.add('compat', f'{key} {path}.{field}: ours {oe[field]}, '
                                           f'vanilla {ve[field]}')
                if ve.get('metadata_keys') != oe.get('metadata_keys'):
                    self.add('compat', f'{key} {path} metadata keys: ours '
                                       f'{oe.get("metadata_keys")}, vanilla {ve.get("metadata_keys")}')
                if self.expect_v is None and ve['metadata'] != oe['metadata']:
                    self.add('compat', f'{key} {path} metadata: ours {oe["metadata"]}, '
                                       f'vanilla {ve["metadata"]}')
        if 'apply' in v and 'apply' in o and v['apply']['output'] != o['apply']['output']:
            self.add('compat', f'apply output: ours {o["apply"]["output"]}, '
                               f'vanilla {v["apply"]["output"]}')
        for key in ('partition_spec', 'named_sharding', 'abstract'):
            if key in v and key in o and self.expect_v is None and v[key] != o[key]:
                self.add('compat', f'{key}: ours {o[key]}, vanilla {v[key]}')
        if 'abstract' in v and 'abstract' in o:
            for path, ve in v['abstract'].items():
                if o['abstract'].get(path, {}).get('shape') != ve['shape']:
                    self.add('compat', f'abstract {path} shape differs')
        if 'eval_shape' in v and 'eval_shape' in o:
            for path, ve in v['eval_shape'].items():
                oe = o['eval_shape'].get(path, {})
                if (oe.get('shape'), oe.get('dtype')) != (ve['shape'], ve['dtype']):
                    self.add('compat', f'eval_shape {path}: ours {oe.get("shape")}, '
                                       f'vanilla {ve["shape"]}')
        for key in ('optimizer', 'optimizer_after_train'):
            if key not in v or key not in o:
                continue
            if sorted(v[key]) != sorted(o[key]):
                self.add('compat', f'{key} leaves: ours {sorted(o[key])}, vanilla {sorted(v[key])}')
                continue
            for path, ve in v[key].items():
                oe = o[key][path]
                if oe['shape'] != ve['shape']:
                    self.add('compat', f'{key} {path}: shape differs from vanilla')
                elif oe['digest'] != ve['digest'] and not (
                        fixed and key == 'optimizer_after_train'):
                    self.add('compat', f'{key} {path}: values differ from vanilla')
                if ve['mirrors'] is None and oe['sharding'] != ve['sharding']:
                    self.add('compat', f'{key} {path}: ours {oe["sharding"]}, '
                                       f'vanilla {ve["sharding"]}')
        if 'losses' in v and 'losses' in o and v['losses'] != o['losses']:
            close = fixed and len(v['losses']) == len(o['losses']) and all(
                math.isclose(float.fromhex(a), float.fromhex(b), rel_tol=1e-5)
                for a, b in zip(v['losses'], o['losses']))
            if not close:
                self.add('compat', f'losses: ours {o["losses"]}, vanilla {v["losses"]}')


def compare(program: Program, vanilla: Report, ours: Report) -> list[Divergence]:
    return Comparison(program, vanilla, ours).run()


def compare_scenario(program: Program, vanilla: Report, ours: Report) -> list[Divergence]:
    """A regression guard of tests/e2e/scenarios.py: ours right, and equal where vanilla ran."""
    from tests.support.checks import metadata_problems, optimizer_problems

    v, o = vanilla['scenario'], ours['scenario']
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
        want = stale if named or not stale else [None, *stale]
        if po['out_sharding'] != want:
            found.append(('intended' if want != stale else 'compat',
                          f'{path}.out_sharding: ours {po["out_sharding"]} expected {want}'))
    if v.get('losses') != o.get('losses'):
        found.append(('compat', f'losses: ours {o.get("losses")}, vanilla {v.get("losses")}'))
    return found


def is_fixed(program: Program, vanilla: Report) -> bool:
    """Vanilla fails with the #5112 family where ours must run (a fixed program)."""
    if vanilla['outcome'] == 'ok':
        return False
    comparison = Comparison(program, vanilla, vanilla)
    ours_should_run = comparison.expect_o is None or pass_runs(program, 'ours', comparison.expect_o)
    return ours_should_run and (bool(FAMILY.search(vanilla['outcome']))
                                or 'Expected to remove' in vanilla['outcome'])


def _entries(spec: dict[str, Any] | None) -> Any:
    return None if spec is None else spec['entries']


def compare_with_workaround(reference: Report, ours: Report) -> list[Divergence]:
    """Ours against vanilla running the program with the documented workaround.

    Values, array shardings, losses, consumers' specs and the ``out_sharding``
    entries must be equal; the spec's type may differ (vanilla makes a tuple)
    and so may ``optimizer_sharding`` (vanilla's workaround leaves it
    per-layer). Tagged ``intended``: vanilla without the workaround differs.
    """
    if reference['outcome'] != 'ok':
        return [('intended', f'vanilla with the workaround failed at '
                             f'{reference.get("failed_stage")}: {reference["outcome"]}')]
    if ours['outcome'] != 'ok':
        return [('intended', f'ours failed where vanilla with the workaround ran: '
                             f'{ours["outcome"]}')]
    found: list[Divergence] = []

    def differ(what: str, mine: Any, theirs: Any) -> None:
        if mine != theirs:
            found.append(('intended', f'{what}: ours {mine}, vanilla+workaround {theirs}'))

    for key in ('variables', 'after_apply', 'after_train', 'eval_shape'):
        r, o = reference.get(key), ours.get(key)
        if r is None or o is None:
            differ(f'{key} present', o is not None, r is not None)
            continue
        differ(f'{key} paths', sorted(o), sorted(r))
        for path in set(r) & set(o):
            for field in ('type', 'dtype', 'shape', 'digest', 'sharding', 'metadata_keys'):
                if field in r[path]:
                    differ(f'{key} {path}.{field}', o[path].get(field), r[path][field])
            differ(f'{key} {path}.out_sharding', _entries(o[path]['metadata']['out_sharding']),
                   _entries(r[path]['metadata']['out_sharding']))
    for key in ('partition_spec', 'named_sharding', 'abstract', 'losses'):
        if key in reference or key in ours:
            differ(key, ours.get(key), reference.get(key))
    for key in ('optimizer', 'optimizer_after_train'):
        if key in reference or key in ours:
            strip = lambda leaves: {p: {f: leaf[f] for f in ('shape', 'digest', 'sharding')}  # noqa: E731
                                    for p, leaf in (leaves or {}).items()}
            differ(key, strip(ours.get(key)), strip(reference.get(key)))
    r, o = reference.get('apply'), ours.get('apply')
    if r is not None and o is not None:
        differ('apply output', o['output'], r['output'])
        differ('apply traces', o['traces'], r['traces'])
        if 'made' in r or 'made' in o:
            strip = lambda made: {p: (e['digest'], e['sharding'],  # noqa: E731
                                      _entries(e['metadata']['out_sharding']))
                                  for p, e in (made or {}).items()}
            differ('made', strip(o.get('made')), strip(r.get('made')))
    return found
