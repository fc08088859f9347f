"""The built-in workloads planned on the one path once per test process: the modules that
read the same plan share it (the SD 2.1 UNet at batch 2, several seconds to plan, is read by
tests/test_unet.py and tests/networks/test_plan.py).  A shared plan is read, never changed."""

import functools

from fastane.networks.plan import NetworkResult, analyze


@functools.cache
def planned(name: str) -> NetworkResult:
    """``analyze(name)``: the built-in workload ``name`` planned for the M1 with the calibrated
    parameters, once."""
    return analyze(name)
