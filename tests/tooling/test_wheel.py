"""The PEP 517 build: our wheel is upstream's wheel plus exactly the series.

These build real wheels through pip (isolated build env, our in-tree backend)
and compare them with the registry's flax wheel, so a patch that is silently
not applied, or a build that drifts from upstream's, fails here.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tarfile
import venv
import zipfile
from datetime import datetime, timezone
from pathlib import Path

import pytest
from packaging.version import Version

from flaxpq.project import REPO_ROOT, Project
from tests.support.project_copy import copy_of_our_project
from tests.support.registry import download_registry_wheel
from tests.tooling.builds import build_requirements, run_ok
from tests.tooling.helpers import make_patch, run

pytestmark = pytest.mark.slow  # each test builds a wheel or installs one

PIN = Project().pin()
DIST_INFO = 'DIST-INFO/'
# A frontend without isolation: call one hook of our backend, print its result.
CALL_HOOK = (
    'import sys; sys.path.insert(0, sys.argv[1]); from flaxpq import backend; '
    'print(getattr(backend, sys.argv[2])(sys.argv[3]))'
)


def wheel_files(path: Path) -> dict[str, bytes]:
    """{name: bytes}, with the dist-info folder name made version-neutral."""
    with zipfile.ZipFile(path) as zf:
        return {
            _neutral(name): zf.read(name) for name in zf.namelist()
        }


def _neutral(name: str) -> str:
    top, _, rest = name.partition('/')
    return DIST_INFO + rest if top.endswith('.dist-info') else name


@pytest.fixture(scope='module')
def registry_wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return download_registry_wheel(tmp_path_factory.mktemp('registry'))


def build_with_pip(project_root: Path, out: Path) -> Path:
    run(sys.executable, '-m', 'pip', 'wheel', '--quiet', '--no-deps',
        '--wheel-dir', out, project_root)
    (wheel,) = out.glob('*.whl')
    return wheel


def differing(ours: dict[str, bytes], theirs: dict[str, bytes]) -> set[str]:
    assert ours.keys() == theirs.keys()
    return {name for name in ours if ours[name] != theirs[name]}


def assert_only_version_differs_in_metadata(ours: dict[str, bytes],
                                            theirs: dict[str, bytes]) -> None:
    a = ours[DIST_INFO + 'METADATA'].decode().splitlines()
    b = theirs[DIST_INFO + 'METADATA'].decode().splitlines()
    assert [x for x in a if not x.startswith('Version:')] == [
        x for x in b if not x.startswith('Version:')]
    assert f'Version: {PIN.local_version}' in a


def test_empty_series_wheel_is_upstreams_but_for_the_version(
    queue: Project, registry_wheel: Path, tmp_path: Path
) -> None:
    copy_of_our_project(queue)
    wheel = build_with_pip(queue.root, tmp_path / 'out')
    assert wheel.name == f'{PIN.package}-{PIN.local_version}-py3-none-any.whl'
    ours, theirs = wheel_files(wheel), wheel_files(registry_wheel)
    assert len(ours) > 100
    assert differing(ours, theirs) == {
        'flax/version.py', DIST_INFO + 'METADATA', DIST_INFO + 'RECORD'}
    assert_only_version_differs_in_metadata(ours, theirs)
    assert f"__version__ = '{PIN.local_version}'" in ours['flax/version.py'].decode()


def test_a_patch_changes_exactly_its_file(
    queue: Project, registry_wheel: Path, pristine_sdist: Path, tmp_path: Path
) -> None:
    make_patch(queue, pristine_sdist, tmp_path)
    copy_of_our_project(queue)
    ours = wheel_files(build_with_pip(queue.root, tmp_path / 'out'))
    theirs = wheel_files(registry_wheel)
    assert differing(ours, theirs) == {
        'flax/nnx/spmd.py', 'flax/version.py',
        DIST_INFO + 'METADATA', DIST_INFO + 'RECORD'}
    assert b'# Transform axis change helpers (patched)' in ours['flax/nnx/spmd.py']


def test_pip_install_from_git_url_gives_the_labelled_version(tmp_path: Path) -> None:
    if subprocess.run(['git', 'rev-parse', 'HEAD'], cwd=REPO_ROOT,
                      capture_output=True).returncode != 0:
        pytest.skip('not a git checkout with commits')
    env_dir = tmp_path / 'venv'
    venv.create(env_dir, with_pip=True)
    python = env_dir / 'bin' / 'python'
    # The bundled pip may be older than 24.1, which rejects git+file:/// URLs.
    run(python, '-m', 'pip', 'install', '--quiet', '--upgrade', 'pip')
    run(python, '-m', 'pip', 'install', '--quiet', '--no-deps',
        f'{PIN.package} @ git+file://{REPO_ROOT}')
    version = run(python, '-c',
                  'import importlib.metadata as m; print(m.version("flax"))').strip()
    assert version == PIN.local_version
    assert Version(version) >= Version('0.12') and Version(version).local == PIN.label
    # Something requiring flax>=0.12 accepts ours without fetching anything.
    out = run(python, '-m', 'pip', 'install', '--no-index', '--no-deps', 'flax>=0.12')
    assert 'already satisfied' in out
    # The version file in the installed package carries the label too.
    site = run(python, '-c', 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
    text = (Path(site.strip()) / 'flax' / 'version.py').read_text()
    assert f"__version__ = '{PIN.local_version}'" in text


def test_editable_install_points_at_the_dev_workflow(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, '-m', 'pip', 'install', '--dry-run', '--no-deps',
         '-e', str(REPO_ROOT)], capture_output=True, text=True)
    assert result.returncode != 0
    assert 'docs/maintainers.md' in result.stdout + result.stderr


@pytest.fixture(scope='module')
def frontend(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A venv with our build requirements: it calls the backend's hooks directly."""
    path = tmp_path_factory.mktemp('frontend') / 'venv'
    venv.create(path, with_pip=True)
    python = path / 'bin' / 'python'
    run_ok(python, '-m', 'pip', 'install', '--quiet', *build_requirements())
    return python


def call_hook(frontend: Path, hook: str, directory: Path, umask: int = 0o022,
              **env: str) -> Path:
    """Run ``backend.<hook>(directory)`` under ``umask``; the path it names."""
    directory.mkdir(parents=True)
    environ = {k: v for k, v in os.environ.items() if k != 'SOURCE_DATE_EPOCH'}
    output = subprocess.run(
        [str(frontend), '-c', CALL_HOOK, str(REPO_ROOT), hook, str(directory)],
        env={**environ, **env}, umask=umask, capture_output=True, text=True)
    assert output.returncode == 0, output.stderr[-3000:]
    assert f'flaxpq: {hook}: ' in output.stderr
    return directory / output.stdout.strip().splitlines()[-1]


def test_metadata_hook_writes_the_wheels_metadata(frontend: Path, tmp_path: Path) -> None:
    dist_info = call_hook(frontend, 'prepare_metadata_for_build_wheel', tmp_path / 'meta')
    assert dist_info.name == f'{PIN.package}-{PIN.local_version}.dist-info'
    wheel = call_hook(frontend, 'build_wheel', tmp_path / 'wheel')
    metadata = (dist_info / 'METADATA').read_bytes()
    assert f'Version: {PIN.local_version}\n'.encode() in metadata
    assert wheel_files(wheel)[DIST_INFO + 'METADATA'] == metadata


def test_two_builds_of_one_commit_are_byte_identical(
    frontend: Path, pristine_sdist: Path, tmp_path: Path
) -> None:
    """Whatever the umask and the temporary folders; dated like the sdist."""
    first = call_hook(frontend, 'build_wheel', tmp_path / 'a', umask=0o022,
                      TMPDIR=str(_mkdir(tmp_path / 'tmp-a')))
    second = call_hook(frontend, 'build_wheel', tmp_path / 'b', umask=0o077,
                       TMPDIR=str(_mkdir(tmp_path / 'tmp-b')))
    assert first.read_bytes() == second.read_bytes()
    with tarfile.open(pristine_sdist) as tar:
        newest = max(member.mtime for member in tar.getmembers())
    expected = datetime.fromtimestamp(int(newest), timezone.utc).timetuple()[:6]
    with zipfile.ZipFile(first) as zf:
        assert {info.date_time for info in zf.infolist()} == {expected}
    # The user's SOURCE_DATE_EPOCH wins.
    dated = call_hook(frontend, 'build_wheel', tmp_path / 'c', SOURCE_DATE_EPOCH='1700000000')
    with zipfile.ZipFile(dated) as zf:
        assert {info.date_time for info in zf.infolist()} == {(2023, 11, 14, 22, 13, 20)}


def _mkdir(path: Path) -> Path:
    path.mkdir()
    return path
