"""``fastane roofline`` run in-process on parsed arguments (:mod:`fastane.networks.cli`)."""

import argparse

from fastane.networks import cli


def run_roofline(argv) -> int:
    """The exit status of ``fastane roofline`` with ``argv``."""
    p = argparse.ArgumentParser()
    cli.add_arguments(p)
    return cli.run(p.parse_args(argv))
