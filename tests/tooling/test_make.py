"""The Makefile's progress lines (scripts/timed), its venvs and what it removes."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

from flaxpq.project import REPO_ROOT

TIMED = REPO_ROOT / 'scripts' / 'timed'
START = re.compile(r'^== \d\d:\d\d:\d\d (.*)$')
END = re.compile(r'^== \d\d:\d\d:\d\d (.*): (done in|FAILED \(exit \d+\) after) \d+ s$')


def timed(*command: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(TIMED), 'a step', *command], capture_output=True,
                          text=True, timeout=60)


def test_timed_prints_a_start_and_an_end_line_and_pytest_summary_last() -> None:
    result = timed('sh', '-c', 'echo "==== 3 passed, 1 skipped in 1.25s ===="; echo done')
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert START.match(lines[0])[1] == 'a step'  # type: ignore[index]
    assert lines[1:3] == ['==== 3 passed, 1 skipped in 1.25s ====', 'done']
    assert END.match(lines[3])[2] == 'done in'  # type: ignore[index]
    assert lines[4:] == ['==== 3 passed, 1 skipped in 1.25s ====']


def test_timed_keeps_a_failing_exit_code_and_says_so() -> None:
    result = timed('sh', '-c', 'echo "1 failed, 2 passed in 0.50s" >&2; exit 3')
    assert result.returncode == 3
    lines = result.stdout.splitlines()  # the command's stderr is merged in
    assert END.match(lines[-2])[2] == 'FAILED (exit 3) after'  # type: ignore[index]
    assert lines[-1] == '1 failed, 2 passed in 0.50s'
    assert timed('true').stdout.splitlines()[-1].endswith(': done in 0 s')


def test_timed_says_a_silent_step_is_still_running() -> None:
    """A heartbeat line for each interval without output, after the partial
    line the command left; none while it prints."""
    result = subprocess.run(
        [str(TIMED), 'a step', 'sh', '-c', 'printf ...; sleep 2.6; echo; echo done'],
        capture_output=True, text=True, timeout=60,
        env={**os.environ, 'TIMED_HEARTBEAT_SECONDS': '1'})
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    beats = [line for line in lines if re.fullmatch(
        r'== \d\d:\d\d:\d\d a step: still running, \d s so far', line)]
    assert len(beats) in (1, 2), lines  # the first interval sees output, then silence
    assert lines[1] == '...' and lines[2] == beats[0], lines
    assert END.match(lines[-1]), lines
    quiet = subprocess.run(
        [str(TIMED), 'a step', 'sh', '-c', 'for i in 1 2 3 4 5 6; do echo $i; sleep 0.4; done'],
        capture_output=True, text=True, timeout=60,
        env={**os.environ, 'TIMED_HEARTBEAT_SECONDS': '1'})
    assert 'still running' not in quiet.stdout, quiet.stdout


def recipe_lines(target: str) -> list[str]:
    """What ``make -n <target>`` would run, continuation lines joined."""
    result = subprocess.run(['make', '-n', '--no-print-directory', target],
                            cwd=REPO_ROOT, capture_output=True, text=True, check=True)
    return result.stdout.replace('\\\n', ' ').splitlines()


def long_steps(target: str) -> list[str]:
    return [line for line in recipe_lines(target) if re.search(
        r'pip wheel|pip install .*-r requirements/test\.txt|-m flaxpq check|pytest', line)]


def test_make_test_runs_each_long_step_under_timed() -> None:
    steps = long_steps('test')
    # wheel, install, the invariants, our suite but the slow tests, self-check
    assert len(steps) == 5, steps
    assert all('scripts/timed ' in line for line in steps), steps
    assert '--no-hooks' in steps[2] and "-m 'not slow and not registry' tests" in steps[3], steps
    assert 'ORACLE_OURS=vanilla' in steps[4] and 'tests/oracle' in steps[4], steps
    # our suite prints progress, failures and a summary: no line per test
    assert ' -q ' in steps[3] and ' -v ' not in steps[3], steps[3]


def test_make_test_full_is_make_test_then_the_slow_steps() -> None:
    steps = long_steps('test-full')
    assert steps[:5] == long_steps('test'), steps
    # the hooks, our slow tests, upstream's suite, upstream's examples, and
    # make test-1dev (one recipe line: our suite, then upstream's three files)
    assert len(steps) == 10 and all('scripts/timed ' in line for line in steps), steps
    assert '--no-hooks' not in steps[5] and "-m 'slow and not registry' tests" in steps[6], steps
    assert 'examples/nnx_toy_examples' in steps[-2]
    assert steps[-1] == long_steps('test-1dev')[-1], steps


def test_make_test_1dev_runs_our_suite_and_upstreams_files_on_one_device() -> None:
    """Both steps under timed with JAX_NUM_CPU_DEVICES=1, the second also
    when the first fails; the target fails if either does."""
    recipe = ' '.join(long_steps('test-1dev')[-1].split())
    ours, upstream = recipe.split(' || status=$?; ')[:2]
    assert 'JAX_NUM_CPU_DEVICES=1 scripts/timed ' in ours, ours
    assert "-m 'not slow and not registry' tests" in ours, ours
    assert 'JAX_NUM_CPU_DEVICES=1' in upstream and '/scripts/timed ' in upstream, upstream
    for name in ('spmd_test.py', 'optimizer_test.py', 'transforms_test.py'):
        assert f'tests/nnx/{name}' in upstream, upstream
    assert recipe.endswith('|| status=$?; exit $status'), recipe


def test_make_test_newest_installs_the_newest_and_compares_with_vanilla() -> None:
    """Its own venv; jax, jaxlib, optax and orbax-checkpoint unpinned (CI's
    pin of requirements/test.txt left out); our suite, then upstream's
    tests/nnx on ours and on the registry's flax first on PYTHONPATH, both
    also when the suite fails; then scripts/compare-failures."""
    lines = recipe_lines('test-newest')
    assert lines[0] == 'scripts/venv .venv-newest', lines
    assert "grep -v '^jax' requirements/test.txt > build/newest/test.txt" in lines, lines
    (install,) = [line for line in lines if '-r build/newest/test.txt' in line]
    assert install.split()[-4:] == ['jax', 'jaxlib', 'optax', 'orbax-checkpoint'], install
    assert '-r requirements/test.txt' not in ' '.join(lines)
    # vanilla's side is the registry's flax, not a wheel of ours found locally
    assert any(line.startswith('PYTHONPATH=build/newest/vanilla/site ')
               and 'sys.exit("+" in flax.__version__)' in line for line in lines), lines
    recipe = ' '.join(lines[-1].split())
    plugin = REPO_ROOT / 'tests' / 'upstream'
    vanilla = REPO_ROOT / 'build' / 'newest' / 'vanilla' / 'site'
    for step in ("-m 'not slow' tests || status=$?;",
                 f'"upstream\'s tests/nnx on ours" env PYTHONPATH={plugin} ',
                 f'"upstream\'s tests/nnx on vanilla" env PYTHONPATH={vanilla}:{plugin} '):
        assert step in recipe, (step, recipe)
    assert recipe.count('tests/nnx || true;') == 2, recipe
    assert recipe.endswith('scripts/compare-failures build/newest/ours.xml '
                           'build/newest/vanilla.xml || status=1; exit $status'), recipe


def junit(path: Path, failed: list[str], passed: list[str]) -> Path:
    """A JUnit XML report as pytest writes it: ``module.Class::test`` names."""
    cases = [f'<testcase classname="{name.split("::")[0]}" name="{name.split("::")[1]}">'
             f'{"<failure message='x'/>" if name in failed else ""}</testcase>'
             for name in failed + passed]
    path.write_text(f'<testsuites><testsuite>{"".join(cases)}</testsuite></testsuites>')
    return path


def test_compare_failures_prints_both_and_ours_only_and_fails_on_ours_only(
    tmp_path: Path
) -> None:
    both, ours_only, vanilla_only = 'a_test.T::both', 'a_test.T::ours', 'a_test.T::vanilla'
    ours = junit(tmp_path / 'ours.xml', [both, ours_only], [vanilla_only])
    vanilla = junit(tmp_path / 'vanilla.xml', [both, vanilla_only], [ours_only])
    script = str(REPO_ROOT / 'scripts' / 'compare-failures')
    result = subprocess.run([script, str(ours), str(vanilla)],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 1, result.stderr
    assert result.stdout.splitlines() == [
        'fails on both: 1', f'  {both}', 'fails on ours only: 1', f'  {ours_only}',
        'fails on vanilla only: 1', f'  {vanilla_only}']
    fixed = junit(tmp_path / 'fixed.xml', [both], [ours_only, vanilla_only])
    result = subprocess.run([script, str(fixed), str(vanilla)],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0 and 'fails on ours only: 0' in result.stdout, result.stdout


def test_make_demo_installs_only_the_demo_requirements_in_its_own_venvs() -> None:
    lines = recipe_lines('demo')
    installs = [line for line in lines if 'pip install' in line]
    ours = [line for line in installs if '.venv-demo/bin/python -m pip install' in line]
    vanilla = [line for line in installs
               if '.venv-demo-vanilla/bin/python -m pip install' in line]
    assert ours and vanilla and len(ours) + len(vanilla) == len(installs), installs
    assert not any('requirements/test.txt' in line or 'upstream-tests' in line
                   for line in lines), lines
    assert all('-r requirements/demo.txt' in line for line in (ours[0], *vanilla))
    # Vanilla's side: the registry's flax, every other package pinned to ours.
    (vanilla_install,) = vanilla
    assert '"flax==$flax"' in vanilla_install and '-c .venv-demo-vanilla/' in vanilla_install
    assert 'pip freeze --exclude flax' in ' '.join(lines)
    assert lines[-1].startswith('.venv-demo/bin/python examples/compare.py --vanilla '
                                '.venv-demo-vanilla/bin/python')


def test_make_test_has_its_own_venv_not_the_readmes() -> None:
    assert recipe_lines('venv') == ['scripts/venv .venv-test']


def a_users_venv(path: Path) -> Path:
    """A venv as a user makes it (no mark of make's), with a file of theirs."""
    (path / 'bin').mkdir(parents=True)
    (path / 'pyvenv.cfg').write_text('home = /usr/bin\n')
    (path / 'mine.txt').write_text('installed by hand\n')
    return path


def test_scripts_venv_refuses_a_directory_it_did_not_make(tmp_path: Path) -> None:
    venv = a_users_venv(tmp_path / '.venv-test')
    result = subprocess.run([str(REPO_ROOT / 'scripts' / 'venv'), str(venv)],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 1, result.stdout + result.stderr
    assert result.stderr.startswith(f'error: {venv} exists and make did not make it'), \
        result.stderr
    assert 'make VENV=<dir>' in result.stderr, result.stderr
    assert sorted(p.name for p in venv.iterdir()) == ['bin', 'mine.txt', 'pyvenv.cfg']


def test_make_clean_removes_build_and_the_venvs_make_made_only(tmp_path: Path) -> None:
    """In a folder holding make's demo and newest-versions venvs (marked),
    a user's ``.venv-test`` (unmarked) and what the tests leave: the marked
    ones, build/, .hypothesis/ and __pycache__/ go, the user's venv stays whole."""
    for name, mark in (('.venv-demo', '.made-by-make'), ('.venv-demo-vanilla', '.ready'),
                       ('.venv-newest', '.ready')):
        (tmp_path / name).mkdir()
        (tmp_path / name / mark).touch()
    users = a_users_venv(tmp_path / '.venv-test')
    (tmp_path / 'build').mkdir()
    (tmp_path / '.hypothesis' / 'examples').mkdir(parents=True)
    (tmp_path / 'tests' / 'docs' / '__pycache__').mkdir(parents=True)
    (users / 'lib' / '__pycache__').mkdir(parents=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith(('MAKE', 'MFLAGS'))}
    result = subprocess.run(['make', '--no-print-directory', '-f', str(REPO_ROOT / 'Makefile'),
                             'clean'], cwd=tmp_path, capture_output=True, text=True,
                            env=env, timeout=60)
    assert result.returncode == 0, result.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ['.venv-test', 'tests'], result.stdout
    assert list((tmp_path / 'tests').rglob('*')) == [tmp_path / 'tests' / 'docs']
    assert (users / 'mine.txt').exists() and (users / 'lib' / '__pycache__').exists()
    assert 'left .venv-test: make did not make it' in result.stdout, result.stdout
