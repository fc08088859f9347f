"""The handle of one pushed TD chain (:class:`Task`), created by :class:`.TaskManager`."""

from __future__ import annotations

import logging
import threading

#: the callbacks' logger keeps the task manager's name
log = logging.getLogger(__name__.rpartition(".")[0] + ".taskmanager")


class Task:
    """Handle of one pushed TD chain: pollable status, callbacks, ``wait()``."""

    QUEUED, PENDING, RUNNING, DONE, FAULTED = "queued", "pending", "running", "done", "faulted"

    def __init__(self, tm: "TaskManager", qid: int, priority: int, payload=None):  # noqa: F821
        self._tm = tm
        self.qid, self.priority = qid, priority
        self.slot = None  # 0 or 1 once staged in a ping-pong slot
        self.nid = self.addr = self.td_size = self.td_count = 0
        self.bars: list[int] = []
        self.seq = None  # push order
        self.order = None  # execution order (0, 1, ...)
        self.payload = payload  # what the Pythonic interface keeps with the task
        self.status = Task.QUEUED
        self.stats = None
        self.error: BaseException | None = None
        # completion: a flag the TM sets under its lock, and a threading.Event made only
        # when a thread has to block for it (most tasks run in the thread that waits)
        self._finished = False
        self._event = None
        self._callbacks = []

    def done(self) -> bool:
        return self._finished

    def _finish(self) -> None:
        """Mark the task complete (the TM's lock held) and wake a blocked waiter."""
        self._finished = True
        if self._event is not None:
            self._event.set()

    def _blocker(self) -> threading.Event:
        with self._tm._lock:
            if self._event is None:
                self._event = threading.Event()
                if self._finished:
                    self._event.set()
            return self._event

    def wait(self, timeout: float | None = None):
        """Block until the task completes; its Stats, or its fault raised.

        Raises RuntimeError at once when the calling thread itself holds the task manager
        (the task could never run), and TimeoutError after ``timeout`` seconds.
        """
        if not self._finished:
            self._tm.run_pending()
            if not self._finished:
                if self._tm.held_by_me() and timeout is None:
                    raise RuntimeError(
                        f"waiting for {self} inside a hold() of the same thread would "
                        f"never return: leave the hold first"
                    )
                if not self._blocker().wait(timeout):
                    raise TimeoutError(
                        f"task {self} did not complete within {timeout} s"
                        + (" (the task manager is held)" if self._tm.held else "")
                    )
        if self.error is not None:
            raise self.error
        return self.stats

    result = wait

    def exception(self, timeout: float | None = None):
        try:
            self.wait(timeout)
        except TimeoutError:
            raise
        except BaseException as exc:  # noqa: BLE001
            return exc
        return None

    def add_done_callback(self, fn) -> None:
        """Call ``fn(task)`` on completion (at once if already complete)."""
        with self._tm._lock:
            if not self._finished:
                self._callbacks.append(fn)
                return
        run_callback(fn, self)

    def __repr__(self) -> str:
        where = f" slot {self.slot}" if self.slot is not None else ""
        return f"<Task q{self.qid}{where} nid={self.nid} prio={self.priority} {self.status}>"


def run_callback(fn, task):
    """Call a completion callback ``fn(task)``; an exception it raises is logged, not raised."""
    try:
        fn(task)
    except Exception:  # noqa: BLE001  (a callback must not break the device)
        log.exception("exception in a task completion callback")
