"""One process of the 2-process x 4-CPU-device scan-over-layers run.

``python -m tests.reliability.multiprocess_worker PORT PROCESS_ID OUT_JSON ARGS_JSON``
joins a ``jax.distributed`` cluster of two processes on ``127.0.0.1:PORT``
(gloo CPU collectives, 4 local CPU devices each), runs the e2e scenario
``train_steps_keep_shardings`` with the keyword arguments ``ARGS_JSON`` on a
2x4 mesh spanning both processes and writes its report (shardings, metadata, losses) as JSON to ``OUT_JSON``.
"""

from __future__ import annotations

import json
import os
import sys

# Four local CPU devices come from jax_num_cpu_devices, not from XLA_FLAGS.
os.environ['JAX_PLATFORMS'] = 'cpu'
os.environ['XLA_FLAGS'] = ''

import jax  # noqa: E402

LOCAL_DEVICES = 4
NUM_PROCESSES = 2


def main(port: int, process_id: int, out_path: str, scenario_args: dict) -> None:
    """Join the cluster, run the scenario, write the report."""
    jax.config.update('jax_cpu_collectives_implementation', 'gloo')
    jax.config.update('jax_num_cpu_devices', LOCAL_DEVICES)
    jax.distributed.initialize(
        coordinator_address=f'127.0.0.1:{port}',
        num_processes=NUM_PROCESSES,
        process_id=process_id,
        initialization_timeout=60,
    )
    try:
        assert jax.process_count() == NUM_PROCESSES, jax.process_count()
        assert jax.local_device_count() == LOCAL_DEVICES, jax.local_devices()
        assert jax.device_count() == NUM_PROCESSES * LOCAL_DEVICES, jax.devices()

        from tests.support import scenarios
        from tests.support.scenarios import exact_mesh

        report = scenarios.run('train_steps_keep_shardings', **scenario_args)
        mesh = exact_mesh((2, 4), ('fsdp', 'tensor'), 'auto')
        report['mesh_process_indices'] = sorted(
            {device.process_index for device in mesh.devices.flat})
        report['process_count'] = jax.process_count()
        report['device_count'] = jax.device_count()
        with open(out_path, 'w') as f:
            json.dump(report, f)
    finally:
        jax.distributed.shutdown()


if __name__ == '__main__':
    main(int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], json.loads(sys.argv[4]))
