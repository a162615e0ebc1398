"""``python -m flaxpq``: fetch, materialize, export, check, wheel, and the upstream PR kit.

Each command is one function below, taking the queue and the parsed
arguments and returning the exit code; :func:`parser` wires it to its
sub-parser with ``set_defaults(func=...)``.
"""

from __future__ import annotations

import argparse
import os
import shlex
import shutil
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

from flaxpq import QueueError, checks, gitqueue, hooks, requirement, sdist, upstream, wheel
from flaxpq.project import Project

Command = Callable[[Project, argparse.Namespace], int]


def fetch(project: Project, args: argparse.Namespace) -> int:
    print(sdist.fetch(project.pin()))
    return 0


def materialize(project: Project, args: argparse.Namespace) -> int:
    dest = args.dest or default_tree(project)
    applied = gitqueue.materialize(project, sdist.fetch(project.pin()), dest, force=args.force)
    print(f'{dest}: upstream + {len(applied)} patch(es)')
    for name in applied:
        print(f'  {name}')
    return 0


def tests_tree(project: Project, args: argparse.Namespace) -> int:
    package = project.pin().package
    gitqueue.materialize(project, sdist.fetch(project.pin()), args.dest, force=args.force)
    shutil.rmtree(args.dest / package)
    print(f'{args.dest}: patched upstream tests (no {package}/)')
    return 0


def export(project: Project, args: argparse.Namespace) -> int:
    changed = gitqueue.export(project, args.src or default_tree(project))
    print('\n'.join(changed) if changed else 'patches/ unchanged')
    return 0


def mbox(project: Project, args: argparse.Namespace) -> int:
    args.out.write_bytes(gitqueue.mbox(project))
    print(f'{args.out}: {len(project.series())} patch(es)')
    return 0


def apply_upstream(project: Project, args: argparse.Namespace) -> int:
    who = upstream.sender(args.checkout, args.author)
    branches = upstream.apply_upstream(
        project, args.checkout, who, branch_prefix(project, args), three_way=args.three_way)
    for branch, names in branches.items():
        print(f'{args.checkout}: {branch}: {", ".join(names)}')
    return 0


def upstream_report(project: Project, args: argparse.Namespace) -> int:
    who = upstream.sender(args.checkout, args.author)
    command = shlex.split(args.test_command) if args.test_command else None
    rows = upstream.report(project, args.checkout, who, branch_prefix(project, args), command)
    table = upstream.markdown(rows, str(args.checkout))
    print(table)
    summary = args.summary or os.environ.get('GITHUB_STEP_SUMMARY')
    if summary:
        with open(summary, 'a') as f:
            f.write(table)
    return 1 if any(r.applies == 'conflicts' or r.tests == 'FAIL' for r in rows) else 0


def check(project: Project, args: argparse.Namespace) -> int:
    results = checks.run_checks(
        project, sdist.fetch(project.pin()), hooks=not args.no_hooks,
        on_start=print_slow_start, on_done=print_check)
    return print_verdict(results, len(project.series()))


def hooks_command(project: Project, args: argparse.Namespace) -> int:
    report = run_hooks(project)
    print('\n'.join([*report.notes, *(f'FAIL {p}' for p in report.problems)]))
    return 1 if report.problems else 0


def build_wheel(project: Project, args: argparse.Namespace) -> int:
    print(wheel.build_wheel(project, args.out))
    return 0


def version(project: Project, args: argparse.Namespace) -> int:
    print(project.pin().local_version)
    return 0


def requirement_command(project: Project, args: argparse.Namespace) -> int:
    line, note = requirement.requirement(project.root, project.pin().package)
    print(line)
    if note:
        print(note, file=sys.stderr)
    return 0


def default_tree(project: Project) -> Path:
    """build/work/flax: the tree ``materialize`` makes and ``export`` reads."""
    return project.work_dir / project.pin().package


def branch_prefix(project: Project, args: argparse.Namespace) -> str:
    return args.prefix or project.pin().label.split('.')[0]


def parser() -> argparse.ArgumentParser:
    """The command line: one sub-parser per command, its function as ``func``."""
    top = argparse.ArgumentParser(prog='python -m flaxpq', description=__doc__.split('\n')[0])
    top.add_argument('--root', type=Path, default=None, help=(
        'the patch queue (folder with upstream.toml and patches/); default: this repository'))
    commands = top.add_subparsers(dest='command', required=True)

    def command(name: str, func: Command, help: str) -> argparse.ArgumentParser:
        sub = commands.add_parser(name, help=help)
        sub.set_defaults(func=func)
        return sub

    command('fetch', fetch, 'download and verify the pinned sdist; print its path')
    sub = command('materialize', materialize, 'pristine sdist + git am of the series')
    sub.add_argument('--dest', type=Path, help='default: build/work/flax')
    sub.add_argument('--force', action='store_true', help='replace an existing tree')
    sub = command('export', export, 'regenerate patches/ from the materialized tree')
    sub.add_argument('--src', type=Path, help='default: build/work/flax')
    sub = command('tests-tree', tests_tree, "the patched tree without flax/, to run "
                  "upstream's tests against the installed wheel")
    sub.add_argument('--dest', type=Path, required=True)
    sub.add_argument('--force', action='store_true', help='replace an existing tree')
    sub = command('mbox', mbox, 'write the series as one mbox (for git am or a PR)')
    sub.add_argument('--out', type=Path, required=True)
    apply = command('apply-upstream', apply_upstream, 'in a clone of upstream flax, one '
                    'branch per upstream-bound patch (<prefix>/<patch stem>), committed '
                    'by the sender')
    apply.add_argument('--three-way', action='store_true', help='let git am try a 3-way merge')
    report = command('upstream-report', upstream_report, 'each upstream-bound patch on a '
                     'clone of upstream (strict, then three-way), its touched tests run; '
                     'a markdown table')
    report.add_argument('--test-command', help='e.g. "python -m pytest -q"; the touched '
                        'test files are appended; default: no tests')
    report.add_argument('--summary', type=Path, help='append the table to this file '
                        '(default: $GITHUB_STEP_SUMMARY if set)')
    for sub in (apply, report):
        sub.add_argument('--checkout', type=Path, required=True)
        sub.add_argument('--author', help='"Name <email>" of the sender; default: '
                         "git's user.name and user.email in the checkout")
        sub.add_argument('--prefix', help='branch prefix; default: the label name of '
                         'upstream.toml (e.g. nnxaxis)')
    sub = command('check', check, 'the invariants CI enforces')
    sub.add_argument('--no-hooks', action='store_true', help="skip upstream's pre-commit hooks")
    command('hooks', hooks_command, "upstream's pre-commit hooks on the files of the "
            'upstream-bound patches (new findings only)')
    sub = command('wheel', build_wheel, 'build the patched flax wheel')
    sub.add_argument('--out', type=Path, default=Path('dist'))
    command('version', version, "print our wheel's version")
    command('requirement', requirement_command, 'print the requirement that installs this '
            "clone's commit (its remote URL at the 40-digit commit) for requirements.txt "
            'or pyproject.toml')
    return top


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    project = Project(args.root.resolve()) if args.root else Project()
    try:
        return args.func(project, args)
    except QueueError as e:
        print(f'error: {e}', file=sys.stderr)
        return 2


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
