"""``python -m flaxpq``: fetch, materialize, export, check, wheel, and the upstream PR kit."""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

from flaxpq import QueueError, checks, gitqueue, sdist, wheel
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
        'apply-upstream', help='create a branch in a clone of upstream flax and git am the series')
    up.add_argument('--checkout', type=Path, required=True)
    up.add_argument('--branch', default='nnx-axis-metadata')
    up.add_argument('--three-way', action='store_true', help='let git am try a 3-way merge')
    commands.add_parser('check', help='the invariants CI enforces')
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
        elif args.command == 'apply-upstream':
            applied = gitqueue.apply_to_checkout(
                project, args.checkout, args.branch, three_way=args.three_way)
            print(f'{args.checkout}: branch {args.branch} with {len(applied)} patch(es)')
        elif args.command == 'check':
            problems = checks.run_all(project, sdist.fetch(project.pin()))
            for problem in problems:
                print(f'FAIL {problem}')
            if problems:
                return 1
            print(f'check: {len(project.series())} patch(es), all invariants hold')
        elif args.command == 'wheel':
            print(wheel.build_wheel(project, args.out))
        elif args.command == 'version':
            print(project.pin().local_version)
    except QueueError as e:
        print(f'error: {e}', file=sys.stderr)
        return 2
    return 0
