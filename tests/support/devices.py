"""The devices of the programs a test starts.

A test that starts a program of its own with 8 simulated CPU devices
(vanilla's side of a comparison, the oracle's workers) gives it one of these
environments, so that the program has those devices whatever the test run
has: ``JAX_NUM_CPU_DEVICES`` is removed, as it overrides the count that
``XLA_FLAGS`` asks for (``make test-1dev`` sets it to 1 for the test
processes, whose own meshes are built from the devices present).
"""

from __future__ import annotations

import os
from collections.abc import Mapping

CPU_DEVICES = 8
SIMULATED_CPU = {
    'JAX_PLATFORMS': 'cpu',
    'XLA_FLAGS': f'--xla_force_host_platform_device_count={CPU_DEVICES}',
}
# Overrides the device count of XLA_FLAGS (jax's jax_num_cpu_devices).
COUNT_OVERRIDE = 'JAX_NUM_CPU_DEVICES'


def without_count_override(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """``env`` (this process's environment by default) without ``JAX_NUM_CPU_DEVICES``."""
    return {k: v for k, v in (os.environ if env is None else env).items()
            if k != COUNT_OVERRIDE}


# What gives a program devices it does not set up itself.
DEVICE_VARIABLES = ('XLA_FLAGS', 'JAX_PLATFORMS', COUNT_OVERRIDE)


def user_env() -> dict[str, str]:
    """This process's environment without ``DEVICE_VARIABLES``: as a user's
    shell, where a program that wants 8 simulated CPU devices sets them up
    itself (the examples, the doc pages)."""
    return {k: v for k, v in os.environ.items() if k not in DEVICE_VARIABLES}


def simulated_cpu_env(**extra: str) -> dict[str, str]:
    """This process's environment for a program on 8 simulated CPU devices, plus ``extra``."""
    return {**without_count_override(), **SIMULATED_CPU, **extra}
