"""A listener on Numba's ``numba:compile`` event (fired only for a real compilation, not for
a load from the cache): per compiled function its signatures and the CPU seconds of the
compiling thread (load on the machine does not inflate them), exclusive of nested
compilations (a callee compiled while its caller compiles is its own row), and Numba's
wall-clock pass timings.  scripts/compile_profile.py prints its rows; scripts/torch_zoo.py's
measuring child reads its total.

    compiles = Compiles()
    event.register("numba:compile", compiles)
"""

import time
from collections import defaultdict

from numba.core import event


class Compiles(event.Listener):
    def __init__(self):
        self.stack = []  # [name, signature, start, seconds of nested compiles, event data]
        #: function -> {"signatures": [...], "seconds": exclusive CPU seconds, "passes": {pass: s}}
        self.rows = defaultdict(lambda: {"signatures": [], "seconds": 0.0})

    @property
    def seconds(self) -> float:
        """CPU seconds of every compilation (the outermost ones', nested ones inside them)."""
        return sum(r["seconds"] for r in self.rows.values())

    def on_start(self, ev):
        d = ev.data
        name = f"{d['dispatcher'].py_func.__module__}.{d['dispatcher'].py_func.__qualname__}"
        sig = "(" + ", ".join(str(a) for a in d["args"]) + ")"
        self.stack.append([name, sig, time.thread_time(), 0.0, d])

    def on_end(self, ev):
        name, sig, t0, nested, d = self.stack.pop()
        total = time.thread_time() - t0
        row = self.rows[name]
        row["signatures"].append(sig)
        row["seconds"] += total - nested
        cres = d["dispatcher"].overloads.get(tuple(d["args"]))
        times = cres.metadata.get("pipeline_times", {}) if cres is not None else {}
        for passes in times.values():  # the front end's passes (LLVM is "native_lowering")
            for k, v in passes.items():
                key = k.split("_", 1)[1]
                row.setdefault("passes", {}).setdefault(key, 0.0)
                row["passes"][key] += v.init + v.run + v.finalize
        if self.stack:
            self.stack[-1][3] += total
