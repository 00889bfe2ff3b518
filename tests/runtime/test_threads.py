"""Native kernels release the GIL, run concurrently and survive fork."""

from __future__ import annotations

import multiprocessing
import os
import signal
import sys
import threading
import time

import numpy as np
import pytest

from dprec import rec
from tests.conftest import requires_native


@requires_native
def test_gil_is_released_during_long_kernels():
    phi = np.ones(1 << 20, np.float32)
    done = threading.Event()
    span = []

    def work():
        t0 = time.perf_counter()
        rec.logits(phi, 1, 0, 8, sigma=1.0, backend="cpu")
        span.extend([t0, time.perf_counter()])
        done.set()

    worker = threading.Thread(target=work)
    stamps = []
    worker.start()
    while not done.is_set():
        stamps.append(time.perf_counter())
    worker.join()
    t0, t1 = span
    assert t1 - t0 > 0.05, "the kernel was too short to tell"
    # Were the GIL held in the kernel, this thread could run only around its start and
    # end (one switch interval each), never in the middle of it.
    middle = [s for s in stamps if t0 + 0.25 * (t1 - t0) < s < t0 + 0.75 * (t1 - t0)]
    assert len(middle) > 100


@requires_native
def test_concurrent_calls_agree_with_serial():
    phis = [np.random.default_rng(i).standard_normal(200_000).astype(np.float32) for i in range(4)]
    serial = [rec.logits(p, 3, i, 4, sigma=1.0, backend="cpu") for i, p in enumerate(phis)]
    results = [None] * 4

    def work(i):
        results[i] = rec.logits(phis[i], 3, i, 4, sigma=1.0, backend="cpu")

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for a, b in zip(serial, results):
        assert np.array_equal(a, b)


def _child(queue):
    out = rec.logits(np.ones(100_000, np.float32), 1, 0, 5, sigma=1.0, backend="cpu")
    queue.put(out.tolist())


@requires_native
@pytest.mark.skipif(sys.platform == "win32" or "fork" not in multiprocessing.get_all_start_methods(), reason="needs fork")
# Forking a process whose pool threads exist is the point of this test (Python >= 3.12 warns).
@pytest.mark.filterwarnings("ignore:This process .* is multi-threaded:DeprecationWarning")
def test_kernels_work_in_a_forked_child():
    expected = rec.logits(np.ones(100_000, np.float32), 1, 0, 5, sigma=1.0, backend="cpu")  # pool is running
    ctx = multiprocessing.get_context("fork")
    queue = ctx.Queue()
    child = ctx.Process(target=_child, args=(queue,))
    child.start()
    child.join(timeout=60)
    if child.is_alive():
        child.kill()
        pytest.fail("a native kernel hung in a forked child")
    assert child.exitcode == 0
    assert np.array_equal(np.array(queue.get(timeout=5)), expected)


@requires_native
@pytest.mark.skipif(sys.platform == "win32", reason="SIGINT to oneself is POSIX")
def test_ctrl_c_stops_a_long_kernel():
    if threading.current_thread() is not threading.main_thread():
        pytest.skip("signals are delivered to the main thread")
    phi = np.ones(1 << 20, np.float32)
    t0 = time.perf_counter()
    rec.logits(phi, 1, 0, 9, sigma=1.0, backend="cpu")
    short = time.perf_counter() - t0  # 2**9 candidates; the call below has 2**13
    timer = threading.Timer(0.1, os.kill, args=(os.getpid(), signal.SIGINT))
    # Python's own handler, even where the process inherited SIGINT ignored (a shell starts
    # background jobs so, and Python then installs no handler).
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    t0 = time.perf_counter()
    try:
        with pytest.raises(KeyboardInterrupt):
            timer.start()  # inside the block, so that the signal can never escape the test
            rec.logits(phi, 1, 0, 13, sigma=1.0, backend="cpu")
    finally:
        timer.join()
        signal.signal(signal.SIGINT, previous)
    # Uninterrupted it would take about 16 x `short`; it must stop soon after the signal.
    assert time.perf_counter() - t0 < 4 * short + 0.5
    # And the pool still works afterwards.
    assert np.array_equal(rec.logits(phi[:1000], 1, 0, 3, sigma=1.0), rec.logits(phi[:1000], 1, 0, 3, sigma=1.0))
