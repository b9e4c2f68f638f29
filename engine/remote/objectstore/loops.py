"""The event loops that obstore's async calls run on, and the calls a store still has in
flight on them, so that closing a store never leaves obstore's runtime a Python object to
come back to.

obstore resolves an async call from a thread of its Rust runtime: that thread takes the
GIL, asks the call's future `cancelled()` and, unless it was, hands the result to the
future's loop with `call_soon_threadsafe`. A call still in flight when its store closes (a
GET that outlived `remote.fetch.max.wait.ms`, a LIST past the call timeout) goes wrong in
one of two ways when its answer finally comes:

- its loop was closed meanwhile: `call_soon_threadsafe` raises, and obstore prints that
  traceback ("Event loop is closed") on stderr;
- the interpreter finalized meanwhile: the thread cannot take the GIL and panics (or
  CPython ends it with pthread_exit, which aborts the process).

So every loop here is a `CallLoop`, whose futures (`CallFuture`) note the moment obstore's
thread is done with them; `Calls` keeps a store's calls until then, and its `close` cancels
them (a cancelled future's done callback tells obstore to drop the request at once, and its
thread then only looks at `cancelled()`) and waits, bounded, until obstore's threads have
left every one. An answer for a closed loop is dropped quietly: nobody awaits it any more.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import threading
import time
from collections.abc import Callable
from typing import TypeVarTuple

__all__ = ["CallFuture", "CallLoop", "Calls", "StoreLoop", "thread_loop"]

#: how long `Calls.close` waits for obstore's threads: they need milliseconds once their
#: calls are cancelled; the bound only matters when a loop cannot run its callbacks
CLOSE_WAIT_S = 5.0

#: how long `StoreLoop.close` leaves obstore's threads to finish returning from Python
_SETTLE_S = 0.02

_Ts = TypeVarTuple("_Ts")

# guards every Calls' pending set and CallFuture's state; notified when a call is released
_RELEASED = threading.Condition()


def _foreign() -> bool:
    """Whether the calling thread runs no event loop: obstore's runtime threads."""
    return asyncio._get_running_loop() is None


class CallFuture(asyncio.Future):
    """A future of a CallLoop. `released` once obstore's runtime is done with it: after it
    found it cancelled, or after it handed the loop its answer.

    `keep`: an object only the call holds while it runs (a listing's stream, whose pending
    request must be dropped inside obstore's runtime: dropped elsewhere it panics). A
    cancelled call drops it on obstore's thread as it releases the call; an answered one
    keeps it for the caller."""

    released = False
    keep: object = None
    _owner: set[CallFuture] | None = None

    def cancelled(self) -> bool:
        cancelled = super().cancelled()
        if cancelled and _foreign():  # obstore drops a cancelled call's answer here
            self.release()
        return cancelled

    def release(self) -> None:
        if super().cancelled():
            self.keep = None
        with _RELEASED:
            self.released = True
            if self._owner is not None:
                self._owner.discard(self)
                self._owner = None
            _RELEASED.notify_all()


class CallLoop(asyncio.SelectorEventLoop):
    """An event loop making CallFutures; an answer that obstore hands it once it is closed
    is dropped instead of raising."""

    def create_future(self) -> asyncio.Future:
        return CallFuture(loop=self)

    def call_soon_threadsafe(self, callback: Callable[[*_Ts], object],
                             *args: *_Ts, context: contextvars.Context | None = None
                             ) -> asyncio.Handle:
        # obstore hands an answer as (completor, future, complete, value)
        first = next(iter(args), None)
        fut = first if isinstance(first, CallFuture) and _foreign() else None
        try:
            return super().call_soon_threadsafe(callback, *args, context=context)
        except RuntimeError:
            if fut is None or not self.is_closed():
                raise
            handle = asyncio.Handle(callback, args, self, context)
            handle.cancel()
            return handle
        finally:
            if fut is not None:
                fut.release()


class CallsClosed(Exception):
    """A call started on closed Calls."""


class Calls:
    """The obstore calls of one store that obstore's runtime has not released yet."""

    def __init__(self) -> None:
        self._pending: set[CallFuture] = set()
        self.closed = False

    def start(self, call: Callable[[], asyncio.Future], keep: object = None
              ) -> asyncio.Future:
        """`call()` (an obstore async function, run on the caller's loop), kept until obstore
        releases it, holding `keep` (see CallFuture.keep); CallsClosed once closed (the
        call is then cancelled, or not made)."""
        if self.closed:
            raise CallsClosed
        fut = call()
        with _RELEASED:
            if isinstance(fut, CallFuture):
                fut.keep = keep
            if isinstance(fut, CallFuture) and not fut.released:
                fut._owner = self._pending
                self._pending.add(fut)
            closing = self.closed
        if closing:  # closed while the call was being made: `close` may not have seen it
            fut.cancel()
            raise CallsClosed
        return fut

    def pending(self) -> int:
        with _RELEASED:
            return len(self._pending)

    def close(self, timeout_s: float = CLOSE_WAIT_S) -> bool:
        """Refuses new calls, cancels those in flight on their loops and waits at most
        `timeout_s` until obstore has released them all; whether it has."""
        with _RELEASED:
            self.closed = True
            pending = list(self._pending)
        for fut in pending:
            try:
                fut.get_loop().call_soon_threadsafe(fut.cancel)
            except RuntimeError:  # its loop is closed: obstore's answer will be dropped
                pass
        with _RELEASED:
            return _RELEASED.wait_for(lambda: not self._pending, timeout_s)


class StoreLoop:
    """A store's own CallLoop on a daemon thread, for calls from any thread."""

    def __init__(self, name: str):
        self.loop = CallLoop()
        self._lock = threading.Lock()
        self._stopping = False
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    def submit(self, coro) -> concurrent.futures.Future:
        """Runs `coro` on the loop; RuntimeError once the loop is closing (a coroutine
        submitted then might never run, leaving its caller waiting)."""
        with self._lock:
            if self._stopping:
                coro.close()
                raise RuntimeError("the store's event loop is closed")
            return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def close(self, timeout_s: float = CLOSE_WAIT_S) -> None:
        """Lets the coroutines already submitted finish (at most `timeout_s`: after the
        store's Calls are closed they end at once, their calls refused or cancelled), then
        stops and closes the loop."""
        with self._lock:
            if self._stopping:
                return
            self._stopping = True
        try:
            asyncio.run_coroutine_threadsafe(_others_done(timeout_s), self.loop).result(
                timeout_s + 1)
        except (concurrent.futures.TimeoutError, RuntimeError):
            pass  # stopped below all the same
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=10)
        if not self._thread.is_alive():
            self.loop.close()
        # the obstore thread that released the last call may still be on its way out of
        # Python and wait for the GIL: if the interpreter finalizes first, CPython ends that
        # foreign thread with pthread_exit, which aborts the process. A blocking pause hands
        # it the GIL (seen as exit status -6 right after a last LIST)
        time.sleep(_SETTLE_S)


async def _others_done(timeout_s: float) -> None:
    others = asyncio.all_tasks() - {asyncio.current_task()}
    if others:
        await asyncio.wait(others, timeout=timeout_s)


_THREAD = threading.local()


class _ThreadLoop:
    """A thread's own CallLoop, closed when the thread ends (its thread-local dies)."""

    def __init__(self):
        self.loop = CallLoop()

    def __del__(self):
        if not self.loop.is_closed() and not self.loop.is_running():
            self.loop.close()


def thread_loop() -> asyncio.AbstractEventLoop:
    """The calling thread's own CallLoop."""
    holder = _THREAD.__dict__.get("holder")
    if holder is None or holder.loop.is_closed():
        holder = _THREAD.holder = _ThreadLoop()
    return holder.loop
