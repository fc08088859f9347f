"""The command line in a child process with an address-space limit: for reproducers that
would exhaust the host's memory or hang if a check were missing."""

from __future__ import annotations

import os
import resource
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
#: the child's address space (RLIMIT_AS)
AS_LIMIT = 4 << 30
CLI = "import sys; from fastane.cli import main; sys.exit(main(sys.argv[1:]))"


def cli(*argv, timeout=120):
    """``fastane ARGV`` in a child limited to 4 GiB of address space: (status, stderr)."""

    def limit():
        resource.setrlimit(resource.RLIMIT_AS, (AS_LIMIT, AS_LIMIT))

    env = dict(os.environ, NUMBA_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1")
    p = subprocess.run(
        [sys.executable, "-c", CLI, *map(str, argv)],
        cwd=ROOT,
        env=env,
        preexec_fn=limit,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    return p.returncode, p.stderr


def one_line(err):
    """The last line of the command's stderr that starts with "fastane" (a traceback fails)."""
    lines = [ln for ln in err.splitlines() if ln.startswith("fastane")]
    assert lines and "Traceback" not in err, err[-2000:]
    return lines[-1]
