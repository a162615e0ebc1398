"""The patch rules `flaxpq check` enforces, each failing and passing on a
throwaway queue (docs/maintainers.md, "Patch rules")."""

from __future__ import annotations

from pathlib import Path

import pytest

from flaxpq import checks, gitqueue, patchfile
from flaxpq.project import Project
from tests.tooling.helpers import SPMD_EDIT, make_queue, message

# Non-overlapping edits of pristine upstream files.
OPTIMIZER_EDIT = ('flax/nnx/training/optimizer.py', 'class OptArray(OptState):',
                  'class OptArray(OptState):  # patched')
SPMD_IMPORT = ('flax/nnx/spmd.py', 'import typing as tp\n', 'import typing as tp  # patched\n')
LONG_LINE = ('flax/nnx/spmd.py', '# Transform axis change helpers',
             '# Transform axis change helpers ' + 'x' * 60)


def problems(queue: Project, sdist: Path) -> str:
    return '\n'.join(checks.run_all(queue, sdist, hooks=False))


def test_good_headers_pass_and_the_trailers_parse(
    queue: Project, pristine_sdist: Path, tmp_path: Path
) -> None:
    (first, second) = make_queue(queue, pristine_sdist, tmp_path, [
        (SPMD_EDIT, message('clarify add_axis docstring')),
        (SPMD_IMPORT, message('mark the typing import', 'Needs the first.',
                              'Depends-on: clarify-add_axis-docstring.patch')),
    ])
    assert checks.patch_headers(queue) == []
    assert problems(queue, pristine_sdist) == ''
    patch = patchfile.read(queue.patches_dir / second)
    assert patch.depends_on == [first]
    assert patch.upstream_message() == 'mark the typing import\n\nNeeds the first.\n'


@pytest.mark.parametrize('msg, expected', [
    (message('[nnx] clarify add_axis docstring'),
     "starts with '[nnx]': upstream subjects have no `[area]` prefix"),
    (message('clarify add_axis docstring.'), 'ends with a period'),
    (message('clarify add_axis docstring', '\n'.join(['Why.'] * 13)),
     'body has 13 lines (at most 12)'),
    (message('clarify add_axis docstring', 'x' * 73), 'over 72 columns: message lines 3 (line 1 is the subject)'),
    ('clarify add_axis docstring\n\nBody.\n\nBug: #12\nForwarded: no\n',
     '`Bug: #12` is not a URL'),
    (message('clarify add_axis docstring', forwarded='maybe'),
     '`Forwarded: maybe` is not no, not-needed or a PR URL'),
    ('clarify add_axis docstring\n\nBody.\n\nBug: https://x.org/1\n',
     'needs one `Forwarded: no|<PR URL>|not-needed` trailer, has 0'),
    (message('clarify add_axis docstring', 'Body.', 'Depends-on: nope.patch'),
     '`Depends-on: nope.patch` names no earlier patch'),
])
def test_bad_header_is_named(
    queue: Project, pristine_sdist: Path, tmp_path: Path, msg: str, expected: str
) -> None:
    (name,) = make_queue(queue, pristine_sdist, tmp_path, [(SPMD_EDIT, msg)])
    found = [p for p in checks.patch_headers(queue) if expected in p]
    assert found and found[0].startswith(f'{name}: '), checks.patch_headers(queue)


def test_bug_trailer_is_optional(
    queue: Project, pristine_sdist: Path, tmp_path: Path
) -> None:
    # a change with no upstream issue (e.g. a better error message)
    make_queue(queue, pristine_sdist, tmp_path, [
        (SPMD_EDIT, 'clarify add_axis docstring\n\nBody.\n\nForwarded: no\n')])
    assert checks.patch_headers(queue) == []


def test_ours_only_patches_come_last_and_are_not_depended_on(
    queue: Project, pristine_sdist: Path, tmp_path: Path
) -> None:
    ours, bound = make_queue(queue, pristine_sdist, tmp_path, [
        (SPMD_EDIT, message('our local tweak', forwarded='not-needed')),
        (SPMD_IMPORT, message('mark the typing import', 'Body.',
                              'Depends-on: our-local-tweak.patch')),
    ])
    found = '\n'.join(checks.patch_headers(queue))
    assert f'{bound}: goes upstream but comes after {ours}' in found
    assert f'{bound}: goes upstream but depends on {ours}' in found


def test_dep3_fields_in_the_body_would_leak_upstream(
    queue: Project, pristine_sdist: Path, tmp_path: Path
) -> None:
    leaky = message('clarify add_axis docstring',
                    'Body.\nOrigin: vendor\n\nForwarded: no\n\nMore prose.')
    (name,) = make_queue(queue, pristine_sdist, tmp_path, [(SPMD_EDIT, leaky)])
    found = checks.trailer_leaks(queue)
    assert any(p.startswith(f"{name}: 'Origin: vendor' would reach") for p in found)
    assert any(p.startswith(f"{name}: 'Forwarded: no' would reach") for p in found)


def test_patch_that_needs_another_must_say_depends_on(
    queue: Project, pristine_sdist: Path, tmp_path: Path
) -> None:
    # the second patch edits the line the first one added
    second_edit = ('flax/nnx/spmd.py', 'helpers (patched)', 'helpers (patched twice)')
    first, second = make_queue(queue, pristine_sdist, tmp_path, [
        (SPMD_EDIT, message('clarify add_axis docstring')),
        (second_edit, message('clarify it again')),
    ])
    found = problems(queue, pristine_sdist)
    assert (f'{second}: does not apply alone to pristine upstream (strict git am: '
            'error: patch failed: flax/nnx/spmd.py:29') in found
    assert first not in found.replace(second, '')
    # naming the dependency fixes it
    path = queue.patches_dir / second
    path.write_bytes(path.read_bytes().replace(
        b'Forwarded: no\n', f'Forwarded: no\nDepends-on: {first}\n'.encode()))
    tree = tmp_path / 'alone'
    gitqueue.materialize(queue, pristine_sdist, tree)
    assert checks.applies_alone(queue, tree) == []


def test_added_python_lines_over_upstream_line_length_are_reported(
    queue: Project, pristine_sdist: Path, tmp_path: Path
) -> None:
    assert checks.upstream_line_length(pristine_sdist) == 80
    (name,) = make_queue(queue, pristine_sdist, tmp_path, [
        (LONG_LINE, message('clarify add_axis docstring'))])
    assert checks.long_lines(queue, 80) == [
        f'{name}: flax/nnx/spmd.py:32: 92 columns (upstream allows 80)']
    (name,) = make_queue(queue, pristine_sdist, tmp_path, [
        (LONG_LINE, message('clarify add_axis docstring', forwarded='not-needed'))])
    assert checks.long_lines(queue, 80) == []  # ours only: upstream never sees it


def test_line_count_table(queue: Project, pristine_sdist: Path, tmp_path: Path) -> None:
    make_queue(queue, pristine_sdist, tmp_path, [
        (SPMD_EDIT, message('clarify add_axis docstring')),
        (OPTIMIZER_EDIT, message('mark OptArray', forwarded='not-needed')),
    ])
    header, first, second = checks.line_counts(queue)
    assert header.split() == ['patch', 'flax/', 'tests/', 'other', 'forwarded']
    assert first.split() == ['clarify-add_axis-docstring.patch', '+1', '-1',
                             '+0', '-0', '+0', '-0', 'no']
    assert second.split()[-1] == 'not-needed'


def test_upstream_bound_patches_leave_upstream_changelog_alone(
    queue: Project, pristine_sdist: Path, tmp_path: Path
) -> None:
    changelog_line = ('CHANGELOG.md', '(Add your change to a random empty line '
                      'to avoid merge conflicts)\n-\n',
                      '(Add your change to a random empty line to avoid merge '
                      'conflicts)\n- clarified add_axis\n')
    (name,) = make_queue(queue, pristine_sdist, tmp_path, [
        (changelog_line, message('clarify add_axis docstring'))])
    assert checks.patch_headers(queue) == [
        f"{name}: touches CHANGELOG.md: upstream-bound patches leave upstream's "
        'changelog alone (our CHANGELOG.md keeps the series history)']
    make_queue(queue, pristine_sdist, tmp_path, [
        (changelog_line, message('[nnx] clarify add_axis docstring',
                                 forwarded='not-needed'))])
    assert checks.patch_headers(queue) == []  # ours only: upstream never sees it
