"""pre-commit as the runner of upstream's hooks: installed once, given a ``repo: local`` config.

pre-commit would clone each hook repository of the sdist's ``.pre-commit-config.yaml``
from GitHub, which is not reachable. :func:`local_config` gives it each hook instead as
its repository's ``.pre-commit-hooks.yaml`` defines it (``hook_repos.json``),
``language: python``, the repository's PyPI package at the config's ``rev`` pinned in
``additional_dependencies``, with upstream's args and filters. pre-commit itself
(installed into the tools folder, build/hook-tools) installs the hook tools into its
store there, picks each hook's files and runs it (``pre-commit run <id> --files ...``).
"""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import sys
from pathlib import Path

from flaxpq import QueueError
from flaxpq.project import Project

PRE_COMMIT = 'pre-commit==4.7.0'
TOOLS_ENV = 'FLAXPQ_HOOK_TOOLS'
KNOWN_REPOS = json.loads((Path(__file__).parent / 'hook_repos.json').read_text())
# The keys by which pre-commit picks a hook's files: its `identity` twin gets them too.
_FILTERS = ('files', 'exclude', 'types', 'types_or', 'exclude_types', 'stages')
_LOAD_YAML = 'import json, sys, yaml; print(json.dumps(yaml.safe_load(open(sys.argv[1]))))'


def tools_dir(project: Project) -> Path:
    """Where pre-commit and its store live: ``$FLAXPQ_HOOK_TOOLS`` or build/hook-tools."""
    return Path(os.environ.get(TOOLS_ENV) or project.root / 'build' / 'hook-tools')


def tool_venv(tools: Path, requirement: str) -> Path:
    """A venv with ``requirement``, made once per Python, under a lock: runs that ask at
    once (parallel tests, two checks) wait for one install."""
    python = f'py{sys.version_info[0]}.{sys.version_info[1]}'
    venv = tools / python / requirement.replace('==', '-')
    tools.mkdir(parents=True, exist_ok=True)
    with (tools / '.lock').open('w') as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (venv / '.ready').exists():
            checked([sys.executable, '-m', 'venv', '--clear', str(venv)], tools,
                    f'making a venv for {requirement}')
            checked([str(venv / 'bin' / 'python'), '-m', 'pip', 'install', '--quiet',
                     '--no-input', '--disable-pip-version-check', requirement], tools,
                    f'installing {requirement}')
            (venv / '.ready').touch()
    return venv


def local_config(config: dict) -> tuple[dict, list[str]]:
    """Upstream's ``config`` as a ``repo: local`` config of the hooks we know, and a skip
    note for each other hook. Each hook has a twin, pre-commit's ``identity`` under the
    hook's filters, which prints the files the hook picks (``<id>-files``)."""
    hooks, skipped = [], []
    for repo in config.get('repos', []):
        url = repo.get('repo', '')
        known = KNOWN_REPOS.get(url.removesuffix('.git'))
        for spec in repo.get('hooks', []):
            hook_id = spec.get('id', '?')
            if url in ('local', 'meta'):
                skipped.append(f'skip {hook_id} ({url}): {url} hooks are not run by flaxpq')
            elif not known:
                skipped.append(f'skip {hook_id} ({url}): no PyPI package known for this hook '
                               'repository (pre-commit would clone it from GitHub, which is '
                               'not reachable)')
            elif hook_id not in known['hooks']:
                skipped.append(f'skip {hook_id} ({url}): hook definition unknown to flaxpq '
                               '(add it to flaxpq/hook_repos.json)')
            else:
                pinned = f'{known["package"]}=={str(repo.get("rev", "")).removeprefix("v")}'
                extra = spec.get('additional_dependencies', [])
                hooks.append({'name': hook_id, 'language': 'python', **known['hooks'][hook_id],
                              **spec, 'additional_dependencies': [pinned, *extra]})
    twins = [{'id': 'identity', 'alias': f'{hook["id"]}-files',
              **{key: value for key, value in hook.items() if key in _FILTERS}}
             for hook in hooks]
    top = {key: config[key] for key in ('files', 'exclude', 'default_stages') if key in config}
    repos = [{'repo': 'local', 'hooks': hooks}, {'repo': 'meta', 'hooks': twins}]
    return {**top, 'repos': repos}, skipped


class PreCommit:
    """pre-commit in the git tree ``tree`` with our config of its ``.pre-commit-config.yaml``."""

    def __init__(self, tree: Path, tools: Path, config: str = '.pre-commit-config.yaml') -> None:
        venv = tool_venv(tools, PRE_COMMIT)
        upstream = json.loads(checked([str(venv / 'bin' / 'python'), '-c', _LOAD_YAML, config],
                                      tree, f'reading {config}'))
        ours, self.skipped = local_config(upstream)
        # {hook id: its pinned package}, in the config's order
        self.hooks = {h['id']: h['additional_dependencies'][0] for h in ours['repos'][0]['hooks']}
        path = tree / '.git' / 'flaxpq-pre-commit.json'  # no change to the tree; JSON is YAML
        path.write_text(json.dumps(ours, indent=1))
        self.tree, self.env = tree, {**os.environ, 'PRE_COMMIT_HOME': str(tools / 'pre-commit'),
                                     'SKIP': ''}
        self.command = [str(venv / 'bin' / 'pre-commit'), 'run', '--color=never',
                        f'--config={path}']
        checked([self.command[0], 'install-hooks', f'--config={path}'], tree,
                'installing the hook tools', self.env)

    def run(self, hook: str, files: list[str]) -> subprocess.CompletedProcess[str]:
        """``pre-commit run <hook> --files <files>``; ``files`` must not be empty."""
        return subprocess.run([*self.command, hook, '--files', *files], cwd=self.tree,
                              env=self.env, capture_output=True, text=True)

    def picks(self, hook: str, files: list[str]) -> list[str]:
        """The ``files`` pre-commit runs ``hook`` on (its twin's output)."""
        said = set(self.run(f'{hook}-files', files).stdout.splitlines())
        return [file for file in files if file in said]


def checked(command: list[str], cwd: Path, what: str,
            env: dict[str, str] | None = None) -> str:
    """The output of ``command``; a QueueError saying what to do if it fails."""
    result = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True)
    if result.returncode:
        tail = '\n'.join((result.stderr or result.stdout).strip().splitlines()[-3:])
        raise QueueError(f'{what} failed (offline? the tools come from the package registry; '
                         f'`python -m flaxpq check --no-hooks` skips the hooks):\n{tail}')
    return result.stdout
