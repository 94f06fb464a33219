"""The Python module's tests (pytest; CTest runs each file with PYTHONPATH=<build>/python).

Every test file skips, with the reason, where the module was not built or NumPy/torch are
missing. Each multi-peer test runs under a hard deadline (a watchdog thread that aborts the
process, as the C++ tests' Watchdog does) so that a hang fails instead of stalling the run.
"""

import faulthandler
import os
import sys
import threading

import pytest


@pytest.fixture
def watchdog(request):
    """Aborts the test process, with every thread's stack, when the test outlives 120 s."""
    done = threading.Event()

    def watch():
        if not done.wait(120):
            sys.stderr.write("WATCHDOG: %s exceeded its deadline of 120 s; aborting\n" % request.node.nodeid)
            faulthandler.dump_traceback(all_threads=True)
            os._exit(70)

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    yield
    done.set()


def run_peers(peers, drive):
    """Runs drive(peer, rank) for every peer on a thread of its own; returns the results in rank
    order and re-raises the first exception."""
    results = [None] * len(peers)
    errors = [None] * len(peers)

    def run(rank):
        try:
            results[rank] = drive(peers[rank], rank)
        except BaseException as e:  # noqa: B902 - reported below
            errors[rank] = e

    threads = [threading.Thread(target=run, args=(r,)) for r in range(len(peers))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for e in errors:
        if e is not None:
            raise e
    return results
