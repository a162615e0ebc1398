"""``python -m flaxpq``: fetch, materialize, export, check, wheel, and the upstream PR kit."""

from __future__ import annotations

import argparse
import os
import shlex
import shutil
import sys
import tempfile
from pathlib import Path

from flaxpq import QueueError, checks, gitqueue, hooks, sdist, upstream, wheel
from flaxpq.project import Project


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog='python -m flaxpq', description=__doc__)
    parser.add_argument(
        '--root', type=Path, default=None,
        help='the patch queue (folder with upstream.toml and patches/); '
        'default: this repository',
    )
    commands = parser.add_subparsers(dest='command', required=True)
    commands.add_parser('fetch', help='download and verify the pinned sdist; print its path')
    mat = commands.add_parser('materialize', help='pristine sdist + git am of the series')
    mat.add_argument('--dest', type=Path, help='default: build/work/flax')
    mat.add_argument('--force', action='store_true', help='replace an existing tree')
    exp = commands.add_parser('export', help='regenerate patches/ from the materialized tree')
    exp.add_argument('--src', type=Path, help='default: build/work/flax')
    tt = commands.add_parser(
        'tests-tree', help="the patched tree without flax/, to run upstream's tests "
        'against the installed wheel')
    tt.add_argument('--dest', type=Path, required=True)
    tt.add_argument('--force', action='store_true', help='replace an existing tree')
    mb = commands.add_parser('mbox', help='write the series as one mbox (for git am or a PR)')
    mb.add_argument('--out', type=Path, required=True)
    up = commands.add_parser(
        'apply-upstream', help='in a clone of upstream flax, one branch per '
        'upstream-bound patch (<prefix>/<patch stem>), committed by the sender')
    rep = commands.add_parser(
        'upstream-report', help='each upstream-bound patch on a clone of upstream '
        '(strict, then three-way), its touched tests run; a markdown table')
    for sub in (up, rep):
        sub.add_argument('--checkout', type=Path, required=True)
        sub.add_argument('--author', help='"Name <email>" of the sender; default: '
                         "git's user.name and user.email in the checkout")
        sub.add_argument('--prefix', help='branch prefix; default: the label name '
                         'of upstream.toml (e.g. nnxaxis)')
    up.add_argument('--three-way', action='store_true', help='let git am try a 3-way merge')
    rep.add_argument('--test-command', help='e.g. "python -m pytest -q"; the '
                     'touched test files are appended; default: no tests')
    rep.add_argument('--summary', type=Path, help='append the table to this file '
                     '(default: $GITHUB_STEP_SUMMARY if set)')
    chk = commands.add_parser('check', help='the invariants CI enforces')
    chk.add_argument('--no-hooks', action='store_true',
                     help="skip upstream's pre-commit hooks")
    commands.add_parser('hooks', help="upstream's pre-commit hooks on the files of "
                        'the upstream-bound patches (new findings only)')
    whl = commands.add_parser('wheel', help='build the patched flax wheel')
    whl.add_argument('--out', type=Path, default=Path('dist'))
    commands.add_parser('version', help="print our wheel's version")
    args = parser.parse_args(argv)

    project = Project(args.root.resolve()) if args.root else Project()
    default_tree = project.work_dir / project.pin().package
    try:
        if args.command == 'fetch':
            print(sdist.fetch(project.pin()))
        elif args.command == 'materialize':
            dest = args.dest or default_tree
            applied = gitqueue.materialize(
                project, sdist.fetch(project.pin()), dest, force=args.force
            )
            print(f'{dest}: upstream + {len(applied)} patch(es)')
            for name in applied:
                print(f'  {name}')
        elif args.command == 'tests-tree':
            gitqueue.materialize(
                project, sdist.fetch(project.pin()), args.dest, force=args.force
            )
            shutil.rmtree(args.dest / project.pin().package)
            print(f'{args.dest}: patched upstream tests (no {project.pin().package}/)')
        elif args.command == 'export':
            changed = gitqueue.export(project, args.src or default_tree)
            print('\n'.join(changed) if changed else 'patches/ unchanged')
        elif args.command == 'mbox':
            args.out.write_bytes(gitqueue.mbox(project))
            print(f'{args.out}: {len(project.series())} patch(es)')
        elif args.command in ('apply-upstream', 'upstream-report'):
            who = upstream.sender(args.checkout, args.author)
            prefix = args.prefix or project.pin().label.split('.')[0]
            if args.command == 'apply-upstream':
                branches = upstream.apply_upstream(
                    project, args.checkout, who, prefix, three_way=args.three_way)
                for branch, names in branches.items():
                    print(f'{args.checkout}: {branch}: {", ".join(names)}')
            else:
                command = shlex.split(args.test_command) if args.test_command else None
                rows = upstream.report(project, args.checkout, who, prefix, command)
                table = upstream.markdown(rows, str(args.checkout))
                print(table)
                summary = args.summary or os.environ.get('GITHUB_STEP_SUMMARY')
                if summary:
                    with open(summary, 'a') as f:
                        f.write(table)
                return 1 if any(r.applies == 'conflicts' or r.tests == 'FAIL'
                                for r in rows) else 0
        elif args.command == 'check':
            results = checks.run_checks(
                project, sdist.fetch(project.pin()), hooks=not args.no_hooks,
                on_start=print_slow_start, on_done=print_check)
            return print_verdict(results, len(project.series()))
        elif args.command == 'hooks':
            report = run_hooks(project)
            print('\n'.join([*report.notes, *(f'FAIL {p}' for p in report.problems)]))
            return 1 if report.problems else 0
        elif args.command == 'wheel':
            print(wheel.build_wheel(project, args.out))
        elif args.command == 'version':
            print(project.pin().local_version)
    except QueueError as e:
        print(f'error: {e}', file=sys.stderr)
        return 2
    return 0


def print_slow_start(name: str) -> None:
    """A line before the one check that can take a minute (the hooks)."""
    if name == checks.HOOKS_CHECK:
        print(f'== {name}: running (the first run installs the hook tools, '
              'about a minute)', flush=True)


def print_check(check: checks.Check) -> None:
    """One check's name, time, verdict, info lines and problems."""
    verdict = f'{len(check.problems)} problem(s)' if check.problems else 'ok'
    print(f'== {check.name} ({check.seconds:.1f} s): {verdict}')
    for line in check.info:
        print(f'   {line}')
    for problem in check.problems:
        print(f'FAIL {problem}')
    sys.stdout.flush()


def print_verdict(results: list[checks.Check], patches: int) -> int:
    """The closing line of ``check``; 1 if any check failed."""
    failed = sum(len(check.problems) for check in results)
    if failed:
        print(f'check: {failed} problem(s) in {patches} patch(es)')
        return 1
    print(f'check: {patches} patch(es), all invariants hold')
    return 0


def run_hooks(project: Project) -> hooks.Report:
    """The hooks step of ``check`` on a fresh materialized tree."""
    sdist_path = sdist.fetch(project.pin())
    with tempfile.TemporaryDirectory(prefix='flaxpq-hooks-') as tmp:
        tree = Path(tmp) / 'tree'
        gitqueue.materialize(project, sdist_path, tree)
        head = gitqueue.git(tree, 'rev-parse', 'HEAD').stdout.strip()
        return checks.upstream_hooks(project, tree, head)
