"""The scan-over-layers train step on 2 processes x 4 CPU devices.

Two ``jax.distributed`` processes on 127.0.0.1 (gloo collectives) run the
e2e scenario ``train_steps_keep_shardings`` on a 2x4 mesh spanning both; the
shardings and losses must equal the same scenario on 8 local devices.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

os.environ.setdefault('JAX_PLATFORMS', 'cpu')
os.environ.setdefault('XLA_FLAGS', '--xla_force_host_platform_device_count=8')

import jax  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

from tests.support import checks, scenarios  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
WORKER = 'tests.reliability.multiprocess_worker'
TIMEOUT_SECONDS = 240
SCENARIO_ARGS = {'layers': 4, 'steps': 3}


def free_port() -> int:
    """A TCP port on 127.0.0.1 that is free right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(('127.0.0.1', 0))
        return sock.getsockname()[1]


def run_two_processes(out_dir: Path) -> list[dict]:
    """Start both workers, wait with a bound, always reap them; return reports."""
    port = free_port()
    env = {**os.environ, 'PYTHONPATH': os.pathsep.join(filter(None, [str(REPO), os.environ.get('PYTHONPATH')]))}
    logs = [out_dir / f'log_{i}.txt' for i in range(2)]
    outs = [out_dir / f'report_{i}.json' for i in range(2)]
    procs: list[subprocess.Popen] = []
    try:
        for i in range(2):
            with open(logs[i], 'w') as log:
                procs.append(subprocess.Popen(
                    [sys.executable, '-m', WORKER, str(port), str(i), str(outs[i]),
                     json.dumps(SCENARIO_ARGS)],
                    cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT))
        for proc in procs:
            proc.wait(timeout=TIMEOUT_SECONDS)
    except subprocess.TimeoutExpired:
        pytest.fail(f'multi-process run exceeded {TIMEOUT_SECONDS}s:\n' + _tails(logs))
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
            proc.wait()
    codes = [proc.returncode for proc in procs]
    if codes != [0, 0]:
        pytest.fail(f'workers exited with {codes}:\n' + _tails(logs))
    return [json.loads(out.read_text()) for out in outs]


def _tails(logs: list[Path]) -> str:
    return '\n'.join(f'--- {log.name}\n' + '\n'.join(log.read_text().splitlines()[-30:])
                     for log in logs)


def _shardings(report: dict) -> dict:
    keys = ('params', 'get_partition_spec', 'opt_state', 'before')
    return {key: report.get(key) for key in keys}


@pytest.mark.slow
def test_two_processes_match_single_process(tmp_path: Path) -> None:
    if jax.device_count() != 8:
        pytest.skip(f'{jax.device_count()} devices: the two processes are compared with '
                    'the same scenario on 8 local devices')
    single = scenarios.run('train_steps_keep_shardings', **SCENARIO_ARGS)
    assert 'error' not in single, single
    assert checks.metadata_problems(single) == []
    assert checks.optimizer_problems(single) == []

    reports = run_two_processes(tmp_path)
    for process_id, report in enumerate(reports):
        assert 'error' not in report, (process_id, report)
        assert report['process_count'] == 2 and report['device_count'] == 8
        assert report['mesh_process_indices'] == [0, 1], 'mesh must span both processes'
        assert checks.metadata_problems(report) == []
        assert checks.optimizer_problems(report) == []
        assert _shardings(report) == _shardings(single), process_id
        np.testing.assert_allclose(report['losses'], single['losses'], rtol=1e-5, atol=1e-6)
    assert reports[0]['losses'] == reports[1]['losses']
