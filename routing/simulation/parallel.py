"""Independent computations at once, in forked children.

`predict` under load replays one workload onto two fleets (the picker's and round-robin's)
that share nothing but their inputs. On a machine with a second core the round-robin fleet
runs in a child forked for it (`run_beside`), so a large prediction takes about as long as its
slower fleet. A sweep's settings are independent too: `map_in_order` spreads them over a child
per core. A fork inherits the inputs as they are (nothing is pickled on the way in); only the
children's results come back, pickled through a pipe.
"""

from __future__ import annotations

import gc
import multiprocessing
import os
import pickle
import threading
from typing import Callable, Iterator, Sequence, TypeVar

Here = TypeVar("Here")
Beside = TypeVar("Beside")
Item = TypeVar("Item")
Result = TypeVar("Result")


def cores() -> int:
    """The cores this process may run on."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def can_fork() -> bool:
    """Whether a forked child would run beside this process: fork exists (not on Windows), this
    process may use a second core, it is not a multiprocessing worker itself (those may not
    have children), and it runs no other thread (a fork copies only the calling one)."""
    if "fork" not in multiprocessing.get_all_start_methods():
        return False
    return cores() > 1 and not multiprocessing.current_process().daemon and threading.active_count() == 1


# What the pool's children compute: set before they are forked, so they inherit it as it is.
_task: Callable | None = None
_items: Sequence = ()


def _run_task(index: int) -> object:
    return _task(_items[index])


def map_in_order(compute: Callable[[Item], Result], items: Sequence[Item], *, parallel: bool) -> Iterator[Result]:
    """`compute` of each item, yielded in the items' order as each is done: in a forked child
    per core when `parallel` and `can_fork()`, else here. An error is raised here, as if
    `compute` had run here."""
    global _task, _items
    if not (parallel and can_fork() and len(items) > 1):
        yield from map(compute, items)
        return
    _task, _items = compute, items
    # The children share this process's objects until they write to them: a collection walking
    # them all would copy every page in every child, so what exists now is left out of it.
    gc.freeze()
    try:
        with multiprocessing.get_context("fork").Pool(min(cores(), len(items))) as pool:
            yield from pool.imap(_run_task, range(len(items)))
    finally:
        gc.unfreeze()
        _task, _items = None, ()


def run_beside(here: Callable[[], Here], beside: Callable[[], Beside], *, parallel: bool) -> tuple[Here, Beside]:
    """`(here(), beside())`, with `beside` in a forked child when `parallel` and `can_fork()`.

    Errors are raised as if both had run here, `here` first: an exception `beside` raises in the
    child is re-raised in this process, and one from `here` stops the child.
    """
    if not (parallel and can_fork()):
        return here(), beside()
    context = multiprocessing.get_context("fork")
    receiver, sender = context.Pipe(duplex=False)
    child = context.Process(target=_send_result, args=(beside, sender), daemon=True)
    child.start()
    sender.close()
    try:
        result = here()
    except BaseException:
        child.terminate()
        child.join()
        raise
    try:
        succeeded, value = pickle.loads(receiver.recv_bytes())
    except EOFError:
        child.join()
        raise RuntimeError(f"the forked child computing beside this process exited (code {child.exitcode}) "
                           "before sending its result") from None
    finally:
        receiver.close()
    child.join()
    if not succeeded:
        raise value
    return result, value


def _send_result(compute: Callable[[], object], sender) -> None:
    try:
        outcome = (True, compute())
    except Exception as error:  # re-raised by the parent, which reports it
        outcome = (False, error)
    try:
        payload = pickle.dumps(outcome)
        if not outcome[0]:
            # An error whose class cannot be rebuilt from its pickled args (an __init__ with
            # other parameters) pickles, then fails to load: here, not in the parent's recv.
            pickle.loads(payload)
    except Exception as error:  # a result or an error that does not travel: checked before sending
        detail = f"{outcome[1]!r} ({error!r})" if not outcome[0] else repr(error)
        payload = pickle.dumps((False, RuntimeError(f"the forked child's outcome could not be sent back: {detail}")))
    sender.send_bytes(payload)
    sender.close()
