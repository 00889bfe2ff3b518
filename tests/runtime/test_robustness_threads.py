"""Thread-pool robustness (issue 12): no deadlock when the runtime settings change while a
kernel runs in another thread, DPREC_NUM_THREADS validated, a failed thread start raises.

Every case runs in a subprocess with a timeout, so a regression (a deadlock, a hang in the
pool, an abort) fails its test instead of hanging or killing the suite.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import dprec
from tests.conftest import requires_native

# The subprocesses import the same dprec as this test run.
_PYTHONPATH = str(Path(dprec.__file__).resolve().parent.parent)


def _run(code: str, timeout: float, env: dict[str, str] | None = None, unset: tuple[str, ...] = ()):
    full_env = {k: v for k, v in os.environ.items() if k not in unset and k != "DPREC_NUM_THREADS"}
    full_env["PYTHONPATH"] = os.pathsep.join(filter(None, [_PYTHONPATH, os.environ.get("PYTHONPATH")]))
    full_env.update(env or {})
    try:
        return subprocess.run(
            [sys.executable, "-c", textwrap.dedent(code)],
            env=full_env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
    except subprocess.TimeoutExpired as exc:  # the child is killed by subprocess.run
        pytest.fail(f"the subprocess did not finish in {timeout} s (deadlock or hang); stderr: {exc.stderr!r}")


def _last_json(proc: subprocess.CompletedProcess) -> dict:
    assert proc.returncode == 0, f"rc={proc.returncode}\nstdout: {proc.stdout}\nstderr: {proc.stderr}"
    return json.loads(proc.stdout.strip().splitlines()[-1])


# ---------------------------------------------------------------------------------------
# 1. set_num_threads / set_isa while a kernel runs in another thread (was a deadlock: the
#    setter held the GIL while waiting for the pool's run lock; the kernel's thread held that
#    lock while waiting for the GIL to check for signals).

_KERNELS = {
    "rec.logits": (
        "import numpy as np; from dprec import rec; phi = np.ones(2**20, np.float32)",
        "rec.logits(phi, s, 0, 7, sigma=0.01)",
    ),
    "codec.encode": (
        "import numpy as np; from dprec.rec.codec import DPRECCodec; "
        "codec = DPRECCodec(sigma=0.01, clip_multiplier=1.0, bits=7); "
        "upd = {'w': np.full(2**20, 1e-6, np.float32)}",
        "codec.encode(upd, seed=s, rng=np.random.default_rng(s))",
    ),
    "philox.normals": ("from dprec import philox", "philox.normals(1, 2**26, offset=s)"),
}

_SETTERS = {
    # Alternating counts makes the pool be rebuilt while the other thread keeps calling kernels.
    "set_num_threads": "dprec.set_num_threads([1, 2, 0][i % 3])",
    "set_isa": "dprec.runtime.set_isa(isas[i % len(isas)])",
}


@requires_native
@pytest.mark.parametrize("kernel", sorted(_KERNELS))
@pytest.mark.parametrize("setter", sorted(_SETTERS))
def test_runtime_setters_do_not_deadlock_with_a_running_kernel(setter, kernel):
    setup, call = _KERNELS[kernel]
    code = f"""
        import json, threading, time
        import dprec, dprec.runtime
        {setup}
        isas = dprec.runtime.available_isas() + ["auto"]
        stop = threading.Event()
        started = threading.Event()
        calls = [0]

        def work():
            s = 0
            while not stop.is_set():
                started.set()
                {call}
                s += 1
                calls[0] += 1

        t = threading.Thread(target=work, daemon=True)
        t.start()
        started.wait()
        t0 = time.perf_counter()
        i = 0
        # Keep setting for ~1 s (the kernel's thread takes the GIL every ~50 ms while it holds
        # the pool's run lock), spaced so that most calls land inside a kernel.
        while time.perf_counter() - t0 < 1.0:
            time.sleep(0.03)
            {_SETTERS[setter]}
            i += 1
        stop.set()
        t.join()
        dprec.set_num_threads(0); dprec.runtime.set_isa("auto")
        print(json.dumps({{"settings": i, "kernels": calls[0]}}))
    """
    out = _last_json(_run(code, timeout=30))
    assert out["settings"] >= 5
    assert out["kernels"] >= 1


@requires_native
def test_issue_reproducer_returns():
    code = """
        import threading, time, numpy as np, dprec
        from dprec import rec
        phi = np.ones(2**20, np.float32)
        t = threading.Thread(target=lambda: [rec.logits(phi, s, 0, 7, sigma=0.01) for s in range(10)])
        t.start()
        time.sleep(0.05); dprec.set_num_threads(1)
        t.join()
        print('{"ok": 1}')
    """
    assert _last_json(_run(code, timeout=30)) == {"ok": 1}


# ---------------------------------------------------------------------------------------
# 3. DPREC_NUM_THREADS: a decimal integer in [0, 4096], whitespace around it allowed, empty =
#    unset; anything else: RuntimeWarning naming the variable and value, default used.

_ENV_PROBE = """
    import json, os, warnings
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        import dprec
        from dprec import rec
    import numpy as np
    n = dprec.get_num_threads()
    out = rec.logits(np.ones(2**16, np.float32), 1, 0, 4, sigma=1.0, backend="cpu")  # uses the pool
    del os.environ["DPREC_NUM_THREADS"]
    dprec.set_num_threads(0)
    default = dprec.get_num_threads()
    print(json.dumps({
        "threads": n, "default": default, "finite": bool(np.isfinite(out).all()),
        "warnings": [(w.category.__name__, str(w.message)) for w in caught],
    }))
"""


@requires_native
@pytest.mark.parametrize(
    "value, threads",
    [("3", 3), (" 2 ", 2), ("\t1\n", 1), ("0", None), ("", None), ("   ", None), ("4096", 4096)],
)
def test_valid_num_threads_env(value, threads):
    out = _last_json(_run(_ENV_PROBE, timeout=60, env={"DPREC_NUM_THREADS": value}))
    assert out["warnings"] == []
    assert out["threads"] == (threads if threads is not None else out["default"])
    assert out["finite"]


@requires_native
@pytest.mark.parametrize("value", ["100000", "4097", "abc", "-1", "1.5", "+2", "2 threads", "99999999999999999999"])
def test_invalid_num_threads_env_warns_and_uses_the_default(value):
    out = _last_json(_run(_ENV_PROBE, timeout=60, env={"DPREC_NUM_THREADS": value}))
    assert out["threads"] == out["default"]
    assert out["finite"]
    assert len(out["warnings"]) == 1, out["warnings"]
    category, message = out["warnings"][0]
    assert category == "RuntimeWarning"
    assert f"DPREC_NUM_THREADS='{value}'" in message
    assert "[0, 4096]" in message and "default" in message


@requires_native
def test_set_num_threads_0_warns_about_a_bad_env():
    code = """
        import json, os, warnings
        import dprec
        os.environ["DPREC_NUM_THREADS"] = "lots"
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            dprec.set_num_threads(0)
        print(json.dumps([str(w.message) for w in caught]))
    """
    proc = _run(code, timeout=60)
    assert proc.returncode == 0, proc.stderr
    (message,) = json.loads(proc.stdout.strip().splitlines()[-1])
    assert "DPREC_NUM_THREADS='lots'" in message


@requires_native
def test_set_num_threads_range_is_checked_natively():
    from dprec._runtime.native import native

    for bad in (-1, 4097):
        with pytest.raises(ValueError, match=r"\[0, 4096\]"):
            native().set_num_threads(bad)
    assert native().MAX_THREADS == 4096


# ---------------------------------------------------------------------------------------
# 3. A thread that cannot be started is a RuntimeError naming the count, never a hang or an
#    abort; the threads already started are joined and a smaller count works afterwards.
#    Thread starts are made to fail with RLIMIT_AS (thread stacks need address space);
#    RLIMIT_NPROC would not do, as it does not bind root.


@requires_native
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="needs Linux (resource limits, /proc)")
def test_failed_thread_start_raises_and_the_pool_recovers():
    code = """
        import json, os, resource
        import numpy as np
        import dprec
        from dprec import rec

        phi = np.random.default_rng(0).standard_normal(2**18).astype(np.float32)
        dprec.set_num_threads(1)
        expected = rec.logits(phi, 5, 0, 6, sigma=1.0, backend="cpu")

        def vm_bytes():
            with open("/proc/self/status") as f:
                for line in f:
                    if line.startswith("VmSize:"):
                        return int(line.split()[1]) * 1024

        threads_before = len(os.listdir("/proc/self/task"))  # the main thread, OpenBLAS's
        soft, hard = resource.getrlimit(resource.RLIMIT_AS)
        # 64 MiB of address space to spare: 1024 thread stacks (2-8 MiB each) cannot fit.
        resource.setrlimit(resource.RLIMIT_AS, (vm_bytes() + 64 * 2**20, hard))
        dprec.set_num_threads(1024)
        error = ""
        try:
            rec.logits(phi, 5, 0, 6, sigma=1.0, backend="cpu")
        except RuntimeError as exc:
            error = str(exc)
        threads_after_failure = len(os.listdir("/proc/self/task"))
        second_error = ""
        try:  # still refused, still an exception
            rec.logits(phi, 5, 0, 6, sigma=1.0, backend="cpu")
        except RuntimeError as exc:
            second_error = str(exc)
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))
        dprec.set_num_threads(2)
        again = rec.logits(phi, 5, 0, 6, sigma=1.0, backend="cpu")
        print(json.dumps({
            "error": error, "second_error": second_error, "threads_after_failure": threads_after_failure - threads_before,
            "recovered": bool(np.array_equal(again, expected)),
        }))
    """
    out = _last_json(_run(code, timeout=60))
    assert "1024 threads" in out["error"], out
    assert "DPREC_NUM_THREADS" in out["error"] and "set_num_threads" in out["error"]
    assert "1024 threads" in out["second_error"]
    assert out["threads_after_failure"] == 0  # every started worker was joined
    assert out["recovered"]
