"""The machinery the fuzzing campaigns share: one child process per case, resumable
campaigns in shards, and their tables.

A campaign is a function ``make_case(seed, index) -> dict`` (a JSON-able case decided by
its two numbers alone) and a function ``run(case, timeout) -> (status, detail)`` (usually
:func:`run_isolated` around the campaign's ``run_case``).  :func:`campaign` runs a range
of cases, saving its tallies to ``OUT/state.json`` every 100 cases and each failing case
under ``OUT/failures/SEED-I.json``; :func:`merge` and :func:`summary` turn the states of
its shards into one campaign's tables; :func:`arguments` and :func:`main` are the command
line both harnesses share.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import resource
import select
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

#: address space a case may add to the parent's (the per-task host cap is 2 GiB)
AS_HEADROOM = 3 << 30


class Failure(Exception):
    """A case that went wrong; ``status`` names its class in the tallies."""

    status = "failure"


def _vm_bytes() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmSize:"):
                return int(line.split()[1]) * 1024
    return 0


def run_isolated(case: dict, run_case, timeout: float, headroom: int = AS_HEADROOM) -> tuple:
    """``run_case(case)`` in a forked child with ``RLIMIT_AS`` (this process's address
    space plus ``headroom``) and a timeout: ``(status, detail)``, status ``"ok"`` (detail:
    what ``run_case`` returned) or a failure class: a :class:`Failure`'s ``status``,
    ``crash`` (a signal), ``hang`` (no answer in time), ``memory`` (``MemoryError``) or
    ``error`` (any other exception escaping ``run_case``)."""
    import faulthandler

    limit = _vm_bytes() + headroom
    rfd, wfd = os.pipe()
    stack = tempfile.TemporaryFile()  # where a hanging child's stack is dumped
    pid = os.fork()
    if pid == 0:  # the child
        os.close(rfd)
        code = 0
        try:
            faulthandler.disable()  # a crash is reported by the parent, not dumped
            faulthandler.dump_traceback_later(timeout * 0.9, file=stack)
            resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
            signal.alarm(int(timeout) + 5)  # a hard stop if the parent's kill is late
            try:
                res = ("ok", run_case(case))
            except Failure as f:
                res = (f.status, str(f))
            except MemoryError as exc:
                res = ("memory", f"MemoryError: {exc}")
            except BaseException as exc:  # noqa: BLE001
                res = ("error", "".join(traceback.format_exception(exc))[-3000:])
            os.write(wfd, json.dumps(res).encode())
        except BaseException:  # noqa: BLE001
            code = 3
        finally:
            os._exit(code)
    os.close(wfd)
    chunks, deadline = [], time.monotonic() + timeout
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            os.close(rfd)
            return "hang", f"no result within {timeout:g} s" + _stack(stack)
        r, _, _ = select.select([rfd], [], [], min(left, 1.0))
        if r:
            b = os.read(rfd, 1 << 16)
            if not b:
                break
            chunks.append(b)
    os.close(rfd)
    stack.close()
    _, status = os.waitpid(pid, 0)
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        return (
            "hang" if sig == signal.SIGALRM else "crash"
        ), f"killed by signal {sig} ({signal.Signals(sig).name})"
    if not chunks:
        return "crash", f"exit status {os.WEXITSTATUS(status)} without a result"
    st, detail = json.loads(b"".join(chunks))
    return st, detail


def _stack(f) -> str:
    """The innermost frames of the stack a hanging child dumped into ``f`` (faulthandler's
    text, innermost first)."""
    f.seek(0)
    frames = [
        ln.strip() for ln in f.read().decode(errors="replace").splitlines() if ln.strip().startswith("File")
    ]
    f.close()
    return "; stack: " + " < ".join(frames[:4]) if frames else ""


def campaign(
    n: int,
    seed: int,
    out: Path | None,
    resume: bool,
    start: int,
    timeout: float,
    *,
    make_case,
    run,
    warm_up,
    params: dict | None = None,
    bucket=None,
    log=None,
    budget: float | None = None,
) -> dict:
    """Run cases ``start .. start+n-1`` of campaign ``seed``: ``run(make_case(seed, i),
    timeout)`` each; tallies (``bucket(case, detail)`` of the cases that pass, failures by
    class, cases by kind), failures saved under ``out``.  ``params``: the campaign's other
    settings, which a resumed state must share; ``budget``: stop after that many seconds
    (the cases run so far are reported)."""
    params = dict(params or {})
    bucket = bucket or (lambda case, detail: f"{case['kind']}: {detail}")
    state = {
        "seed": seed,
        **params,
        "start": start,
        "next": start,
        "outcomes": {},
        "failures": {},
        "kinds": {},
        "seconds": 0.0,
    }
    sfile = out / "state.json" if out is not None else None
    if out is not None:
        (out / "failures").mkdir(parents=True, exist_ok=True)
        if resume and sfile.exists():
            old = json.loads(sfile.read_text())
            keys = ["seed", "start", *params]
            if [old.get(k, state[k] if k in params else 0) for k in keys] == [state[k] for k in keys]:
                state = old
    end = start + n  # resuming continues the same campaign up to case start + n
    warm_up()
    t0 = time.monotonic()
    outcomes = collections.Counter(state["outcomes"])
    failures = collections.Counter(state["failures"])
    kinds = collections.Counter(state["kinds"])
    began = time.monotonic()

    def save(upto):
        nonlocal t0
        state.update(
            next=upto,
            outcomes=dict(outcomes),
            failures=dict(failures),
            kinds=dict(kinds),
            seconds=state.get("seconds", 0.0) + time.monotonic() - t0,
        )
        t0 = time.monotonic()
        if out is not None:
            sfile.write_text(json.dumps(state, indent=1, sort_keys=True))

    for i in range(state["next"], end):
        if budget is not None and time.monotonic() - began > budget:
            end = i
            break
        case = make_case(seed, i)
        status, detail = run(case, timeout)
        kinds[case["kind"]] += 1
        if status == "ok":
            outcomes[bucket(case, detail)] += 1
        else:
            failures[status] += 1
            if out is not None:
                (out / "failures" / f"{seed}-{i}.json").write_text(
                    json.dumps({"status": status, "detail": detail, "case": case}, indent=1)
                )
            if log:
                log(f"case {i} ({case['kind']} {case.get('base', '')}): {status}: {detail[:500]}")
        if i % 100 == 99:
            save(i + 1)
    save(end)
    return state


def merge(states: list) -> dict:
    """One campaign's figures from its shards (``--start`` ranges of the same seed run
    separately); the ranges must be of one seed and must not overlap."""
    if len({s["seed"] for s in states}) != 1:
        raise ValueError("the shards are of different seeds")
    spans = sorted((s.get("start", 0), s["next"]) for s in states)
    for (_, end), (begin, _) in zip(spans, spans[1:]):
        if begin < end:
            raise ValueError(f"the shards overlap: {spans}")
    out = {"seed": states[0]["seed"], "shards": spans, "seconds": sum(s.get("seconds", 0.0) for s in states)}
    out["cases"] = sum(e - b for b, e in spans)
    for key in ("outcomes", "failures", "kinds"):
        total = collections.Counter()
        for s in states:
            total.update(s[key])
        out[key] = dict(total)
    return out


def table(counts: dict, order=None) -> list:
    """A Markdown table of ``{outcome: cases}`` (most cases first, or by ``order``)."""
    rows = sorted(counts.items(), key=order or (lambda kv: -kv[1]))
    return ["| outcome | cases |", "| --- | ---: |"] + [f"| {k} | {v} |" for k, v in rows]


def summary(state: dict, no_failure: str, outcomes: dict | None = None) -> list:
    """The lines of the campaign's figures as Markdown: cases by kind, failures by class,
    the outcomes (``outcomes``, default the state's, grouped by kind, most cases first)."""
    if "shards" in state:
        ran, spans = state["cases"], state["shards"]
    else:
        ran, spans = state["next"] - state.get("start", 0), [(state.get("start", 0), state["next"])]
    where = ", ".join(f"{b}..{e - 1}" for b, e in spans)
    return [
        f"Cases run: {ran} (seed {state['seed']}, cases {where}; {state.get('seconds', 0) / 60:.0f} min of "
        f"case time); by kind: " + ", ".join(f"{k} {v}" for k, v in sorted(state["kinds"].items())),
        "",
        "Failures: " + (", ".join(f"{k} {v}" for k, v in sorted(state["failures"].items())) or no_failure),
        "",
        *table(state["outcomes"] if outcomes is None else outcomes, lambda kv: (kv[0].split(":")[0], -kv[1])),
    ]


def arguments(description: str, timeout: float, out: str) -> argparse.ArgumentParser:
    """The options of a campaign's command line (a harness adds its own)."""
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--cases", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--start",
        type=int,
        default=0,
        help="the first case (a shard of a campaign: cases START..START+CASES-1)",
    )
    ap.add_argument("--out", type=Path, default=Path(out))
    ap.add_argument("--resume", action="store_true", help="continue the campaign saved in OUT/state.json")
    ap.add_argument("--timeout", type=float, default=timeout)
    ap.add_argument("--budget", type=float, help="stop after this many seconds")
    ap.add_argument("--case", type=int, help="run one case in this process (no isolation) and print it")
    ap.add_argument(
        "--summary",
        nargs="*",
        type=Path,
        metavar="DIR",
        help="print OUT/state.json's figures as Markdown (or the merged figures of the shards' DIRs)",
    )
    return ap


def main(a: argparse.Namespace, summarize, replay, run_campaign, **settings) -> int:
    """Dispatch a parsed command line: ``--summary`` (``summarize(state)``), ``--case``
    (``replay(seed, index)`` in this process) or a campaign (``run_campaign`` with the
    options of :func:`arguments` and the harness's ``settings``)."""
    if a.summary is not None:
        states = [json.loads((d / "state.json").read_text()) for d in (a.summary or [a.out])]
        print(summarize(merge(states) if len(states) > 1 else states[0]))
        return 0
    if a.case is not None:
        print(replay(a.seed, a.case))
        return 0
    st = run_campaign(
        a.cases,
        a.seed,
        a.out,
        a.resume,
        start=a.start,
        timeout=a.timeout,
        budget=a.budget,
        log=lambda m: print(m, file=sys.stderr, flush=True),
        **settings,
    )
    print(
        json.dumps(
            {k: st[k] for k in ("seed", "next", "kinds", "failures", "outcomes")}, indent=1, sort_keys=True
        )
    )
    return 1 if st["failures"] else 0


def misbehave(what: str) -> None:
    """Go wrong as ``what`` says (``crash``, ``hang``, ``memory``): the harnesses' own
    tests check that each is named."""
    if what == "crash":
        signal.signal(signal.SIGSEGV, signal.SIG_DFL)  # no Python-level handler (pytest's faulthandler)
        os.kill(os.getpid(), signal.SIGSEGV)
    if what == "hang":
        time.sleep(3600)
    if what == "memory":
        bytearray(1 << 42)


def run_slice(script: Path, out: Path, budget: float, *args: str) -> tuple:
    """Run a campaign as its script does (a separate process on one core, ``script`` with
    ``--out out --budget budget`` and ``args``): ``(process, state, the first failures)`` (their
    class and detail, and their file's name)."""
    root = Path(__file__).resolve().parent.parent.parent
    env = dict(
        os.environ,
        NUMBA_NUM_THREADS="1",
        OMP_NUM_THREADS="1",
        OPENBLAS_NUM_THREADS="1",
        NUMBA_THREADING_LAYER="workqueue",
        PYTHONPATH=os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")]),
    )
    cmd = [sys.executable, str(script), "--out", str(out), "--budget", str(budget), *args]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=budget + 600)
    state = json.loads((out / "state.json").read_text())
    files = sorted((out / "failures").glob("*.json"))[:10]
    failures = [
        {k: v for k, v in json.loads(f.read_text()).items() if k != "case"} | {"file": f.name} for f in files
    ]
    return proc, state, failures


def single_threaded_numba() -> None:
    """Before fastane (and Numba) load: GNU OpenMP is not fork-safe.  Not at import: the
    workqueue layer is not thread-safe, and the test suite imports the harnesses."""
    os.environ.setdefault("NUMBA_THREADING_LAYER", "workqueue")
