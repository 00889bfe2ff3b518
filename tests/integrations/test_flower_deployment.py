"""dprec.flower on Flower's deployment runtime: a SuperLink, three SuperNodes and ``flwr run``.

Every Flower component runs in a process of its own on 127.0.0.1 (insecure mode, ports chosen
at run time), as it would across machines: the SuperLink, one SuperNode per data partition, the
SuperExec processes they start, and the ServerApp and ClientApp processes of the run. The test
runs once per app, each on a SuperLink and SuperNodes of its own: ``examples/flower-app`` (Message
API: ``DPRECStrategy``, ``ClientApp(mods=[dprec_mod])``) and ``examples/flower-legacy-app`` (legacy
API: ``ServerApp(server_fn=...)`` with ``DPRECLegacyStrategy(flwr.server.strategy.FedAvg(...))`` in
Flower's legacy ``Server``, a ``NumPyClient`` in ``ClientApp(client_fn=..., mods=[dprec_mod])``), and
``examples/flower-secagg-app`` (distributed DP under Flower's SecAgg+: ``DistributedDPStrategy`` in a
``DefaultWorkflow``, ``mods=[secaggplus_mod, distributed_dp_mod]``), checked by a test of its own.
Both ServerApps write what they saw (global arrays before and after each round, the DP-REC
messages they aggregated, which dprec they imported) to a JSON file named in the run config, in
the same form (the legacy app's arrays, a list, keyed "0", "1", ... as DP-REC lays them out), and
the test recomputes each round's global model from the messages.

Processes: each is started with ``subprocess.Popen`` in a session (process group) of its own,
with a marker in its environment that every process it starts inherits (Flower starts its
SuperExec processes in new sessions, and they outlive a killed parent for a moment: the marker
finds them wherever they were reparented; without /proc, the process tree does). Every one is
stopped by its PID (SIGTERM, then SIGKILL) in a ``finally`` block, and the test checks that none
is left. The whole test has a hard deadline (DEADLINE_S); on failure it prints the tail of every
process's log (stdout and stderr go to files under tmp_path).
"""

from __future__ import annotations

import base64
import contextlib
import importlib.metadata
import json
import os
import signal
import socket
import subprocess
import sys
import sysconfig
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

if sys.version_info < (3, 11):
    pytest.skip("dprec.flower is tested with flwr's Message API on Python >= 3.11", allow_module_level=True)
if os.name != "posix":
    pytest.skip("the deployment test stops its processes with POSIX signals", allow_module_level=True)
pytest.importorskip("flwr")

import dprec  # noqa: E402
from dprec import DPRECCodec, DPRECMessage  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
# Each app and the names of its global arrays in the record (the legacy strategy's list: "0", "1").
APPS = {
    "message-api": (REPO / "examples" / "flower-app", {"weight", "bias"}),
    "legacy-api": (REPO / "examples" / "flower-legacy-app", {"0", "1"}),
}
SECAGG_APP = REPO / "examples" / "flower-secagg-app"

DEADLINE_S = 240.0  # the whole test, processes included
NUM_NODES = 3
NUM_ROUNDS = 2
FRACTION_TRAIN = 0.67  # FedAvg samples int(0.67 * 3) = 2 of the 3 nodes per round
MARKER_VAR = "DPREC_DEPLOYMENT_TEST"
PROC = os.path.isdir("/proc/self")  # Linux: processes are found by the marker in their environment

# The CLI of this Python environment: the console scripts pip installed with flwr, which run the
# apps with this environment's packages. flower-superexec, flwr-serverapp and flwr-clientapp are
# started by Flower itself, looked up on PATH.
CLI = ("flower-superlink", "flower-supernode", "flower-superexec", "flwr", "flwr-serverapp", "flwr-clientapp")
SCRIPT_DIRS = list(dict.fromkeys([Path(sys.executable).parent, Path(sysconfig.get_path("scripts"))]))


def _find_cli(name: str) -> Path | None:
    for d in SCRIPT_DIRS:
        if (d / name).is_file() and os.access(d / name, os.X_OK):
            return d / name
    return None


BINARIES = {name: _find_cli(name) for name in CLI}
MISSING = [name for name, path in BINARIES.items() if path is None]
FLWR_VERSION = importlib.metadata.version("flwr")

pytestmark = [
    pytest.mark.skipif(
        bool(MISSING),
        reason=f"Flower's deployment CLI ({', '.join(MISSING)}) is not installed next to {sys.executable} "
        f"(looked in {', '.join(map(str, SCRIPT_DIRS))}): pip install 'flwr>=1.42'",
    ),
    # One HTTP port per SuperLink (Fleet, Control and Runtime APIs: --host/--port) and SuperLink
    # connections in $FLWR_HOME/config.toml are the CLI of flwr 1.42; older CLIs take other flags.
    pytest.mark.skipif(
        tuple(int(p) for p in FLWR_VERSION.split(".")[:2] if p.isdigit()) < (1, 42),
        reason=f"the deployment test drives the CLI of flwr >= 1.42, found flwr {FLWR_VERSION}",
    ),
]


# --------------------------------------------------------------------------------------
# Processes
# --------------------------------------------------------------------------------------


def _free_ports(n: int) -> list[int]:
    """n distinct ports that were free on 127.0.0.1 a moment ago (held together while chosen)."""
    socks = []
    try:
        for _ in range(n):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def _alive(pid: int) -> bool:
    """Whether pid is a process that has not exited (a zombie has exited: only its entry is left)."""
    if PROC:
        try:
            with open(f"/proc/{pid}/stat", "rb") as f:
                return f.read().rsplit(b")", 1)[1].split()[0] != b"Z"
        except OSError:
            return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _descendants(roots: set[int]) -> set[int]:
    """The processes below roots in the process tree now (``ps``; for systems without /proc)."""
    try:
        out = subprocess.run(["ps", "-A", "-o", "pid=", "-o", "ppid="], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return set()
    children: dict[int, list[int]] = {}
    for line in out.stdout.splitlines():
        fields = line.split()
        if len(fields) == 2 and all(f.isdigit() for f in fields):
            children.setdefault(int(fields[1]), []).append(int(fields[0]))
    found, todo = set(), list(roots)
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


class Processes:
    """The processes of one test: started, logged to files, found again and stopped by PID."""

    def __init__(self, logs: Path, env: dict[str, str], deadline: float) -> None:
        self.logs = logs
        self.marker = uuid.uuid4().hex
        self.env = {**env, MARKER_VAR: self.marker}
        self.deadline = deadline
        self.started: list[tuple[str, subprocess.Popen, Path]] = []

    def remaining(self) -> float:
        return self.deadline - time.monotonic()

    def start(self, name: str, args: list[str], cwd: Path) -> subprocess.Popen:
        log = self.logs / f"{name}.log"
        with open(log, "wb") as out:
            proc = subprocess.Popen(
                args,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                env=self.env,
                cwd=cwd,
                start_new_session=True,  # a session and process group of its own
            )
        self.started.append((name, proc, log))
        return proc

    def marked(self) -> set[int]:
        """Every live process started by this test or by one of its processes, at any depth.

        Linux: the processes whose environment holds this test's marker, wherever they were
        reparented. Elsewhere: the live descendants of the processes started here (``ps``).
        """
        if not PROC:
            return {pid for pid in _descendants({proc.pid for _, proc, _ in self.started}) if _alive(pid)}
        needle = f"{MARKER_VAR}={self.marker}".encode()
        found: set[int] = set()
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                with open(f"/proc/{entry}/environ", "rb") as f:
                    if needle in f.read().split(b"\0"):
                        found.add(int(entry))
            except OSError:  # exited meanwhile, or not ours
                continue
        return {pid for pid in found if _alive(pid)}

    def live(self) -> set[int]:
        for _, proc, _ in self.started:
            proc.poll()  # reap the direct children that exited
        return {proc.pid for _, proc, _ in self.started if proc.returncode is None} | self.marked()

    def stop(self, grace: float = 10.0) -> set[int]:
        """SIGTERM every live process, SIGKILL those still there after `grace` s; returns those left."""
        for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 5.0)):
            pids = self.live()
            for pid in pids:
                try:
                    os.kill(pid, sig)
                except ProcessLookupError:
                    pass
            end = time.monotonic() + wait
            while self.live() and time.monotonic() < end:
                time.sleep(0.1)
        for _, proc, _ in self.started:
            try:
                proc.wait(timeout=1.0)
            except subprocess.TimeoutExpired:
                pass
        return self.live()

    def tails(self, lines: int = 40) -> str:
        parts = []
        for name, proc, log in self.started:
            text = log.read_text(encoding="utf-8", errors="replace").splitlines() if log.exists() else []
            parts.append(f"----- {name} (pid {proc.pid}, exit code {proc.returncode}): last {lines} lines of {log}")
            parts.extend(text[-lines:])
        return "\n".join(parts)


def _wait_for_port(port: int, procs: Processes, proc: subprocess.Popen, timeout: float) -> None:
    end = time.monotonic() + min(timeout, procs.remaining())
    while time.monotonic() < end:
        if proc.poll() is not None:
            pytest.fail(f"the SuperLink exited with code {proc.returncode} before listening")
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.settimeout(0.5)
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.2)
    pytest.fail(f"the SuperLink did not listen on 127.0.0.1:{port} in time")


def _environment(home: Path) -> dict[str, str]:
    env = dict(os.environ)
    # The app processes must import the dprec under test, the one this process imported: its
    # directory goes first on PYTHONPATH unless it is this environment's site-packages anyway.
    # Relative entries would be resolved against each process's working directory: made absolute.
    root = Path(dprec.__file__).resolve().parent.parent
    site = {Path(p).resolve() for p in (sysconfig.get_path("purelib"), sysconfig.get_path("platlib"))}
    paths = [str(Path(p).resolve()) for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    if root not in site:
        paths.insert(0, str(root))
    env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))
    env["PATH"] = os.pathsep.join([*map(str, SCRIPT_DIRS), env.get("PATH", "")])
    env.update(
        FLWR_HOME=str(home),  # Flower's config, installed apps and state: not the user's ~/.flwr
        FLWR_TELEMETRY_ENABLED="0",
        FLWR_DISABLE_UPDATE_CHECK="1",
        FLWR_SUPEREXEC_TASK_POLL_INTERVAL="0.2",  # SuperExec polls for app tasks (default 1 s)
        PYTHONDONTWRITEBYTECODE="1",  # `flwr run` imports the app's package: no __pycache__ in examples/
        PYTHONUNBUFFERED="1",
    )
    return env


def _tree(path: Path) -> list[tuple[str, int, int]]:
    return sorted((str(p.relative_to(path)), p.stat().st_size, p.stat().st_mtime_ns) for p in path.rglob("*"))


def _array(entry: dict) -> np.ndarray:
    return np.frombuffer(base64.b64decode(entry["data"]), dtype=np.dtype(entry["dtype"])).reshape(entry["shape"])


# --------------------------------------------------------------------------------------
# The test
# --------------------------------------------------------------------------------------


@contextlib.contextmanager
def _deployed_run(tmp_path: Path, app: Path, overrides_text: str) -> Iterator[dict]:
    """Run ``app`` with ``flwr run`` on a SuperLink and NUM_NODES SuperNodes of its own; yields the record its
    ServerApp wrote (run config ``out``). On leaving, every process is stopped (their logs' tails printed when
    the body failed) and none may be left; the run must have changed no file of examples/."""
    if not (app / "pyproject.toml").is_file():
        pytest.skip(f"the example app {app} is not next to the tests (tests/ copied alone)")
    deadline = time.monotonic() + DEADLINE_S
    home, logs = tmp_path / "flwr-home", tmp_path / "logs"
    home.mkdir()
    logs.mkdir()
    link_port, *node_ports = _free_ports(1 + NUM_NODES)
    link = f"127.0.0.1:{link_port}"
    # The SuperLink connection `flwr run` uses, in the Flower configuration file of FLWR_HOME.
    (home / "config.toml").write_text(
        f'[superlink]\ndefault = "dprec-test"\n\n[superlink.dprec-test]\naddress = "{link}"\ninsecure = true\n',
        encoding="utf-8",
    )
    record_path = tmp_path / "record.json"
    overrides = tmp_path / "run-config.toml"
    overrides.write_text(
        f"out = {json.dumps(str(record_path))}\nnum-server-rounds = {NUM_ROUNDS}\nmin-nodes = {NUM_NODES}\n"
        + overrides_text,
        encoding="utf-8",
    )
    examples_files = _tree(app.parent)  # examples/: the run leaves no file in either app

    procs = Processes(logs, _environment(home), deadline)
    ok = False
    try:
        superlink = procs.start(
            "superlink",
            [
                str(BINARIES["flower-superlink"]),
                "--insecure",
                "--host",
                "127.0.0.1",
                "--port",
                str(link_port),
                # dprec and NumPy come from this environment: no `uv sync` of the app's dependencies.
                "--disable-runtime-dependency-installation",
            ],
            tmp_path,
        )
        for i, port in enumerate(node_ports):
            procs.start(
                f"supernode-{i}",
                [
                    str(BINARIES["flower-supernode"]),
                    "--insecure",
                    "--superlink",
                    link,
                    "--host",
                    "127.0.0.1",
                    "--port",
                    str(port),  # each SuperNode's own Runtime API (ClientApps)
                    "--node-config",
                    f"partition-id={i} num-partitions={NUM_NODES}",
                ],
                tmp_path,
            )
        _wait_for_port(link_port, procs, superlink, timeout=60.0)

        # The ServerApp waits for min-nodes SuperNodes (FedAvg's min_available_nodes, or the legacy FedAvg's
        # min_available_clients) before round 1.
        run = procs.start(
            "flwr-run",
            [str(BINARIES["flwr"]), "run", str(app), "dprec-test", "--stream", "--run-config", str(overrides)],
            tmp_path,
        )
        while run.poll() is None:
            for name, proc, _ in procs.started:
                if proc is not run and proc.poll() is not None:
                    pytest.fail(f"{name} exited with code {proc.returncode} during the run")
            if procs.remaining() <= 0:
                pytest.fail(f"the run did not finish within the {DEADLINE_S:.0f} s deadline")
            time.sleep(0.2)
        assert run.returncode == 0, f"flwr run exited with code {run.returncode}"
        # `flwr run --stream` exits with 0 when the ServerApp fails too: the record is the evidence.
        assert record_path.is_file(), "the ServerApp wrote no record (did it fail? see its log in flwr-run)"
        record = json.loads(record_path.read_text(encoding="utf-8"))

        # The ServerApp ran this environment's Python and the dprec under test.
        assert Path(record["dprec_file"]).resolve() == Path(dprec.__file__).resolve(), record["dprec_file"]
        assert Path(record["prefix"]).resolve() == Path(sys.prefix).resolve(), record["prefix"]
        yield record
        ok = True
    finally:
        left = procs.stop()
        if not ok:  # the logs' tails, shown by pytest with the failure
            print(procs.tails(80))
    assert not left, f"processes still running after SIGKILL: {sorted(left)}\n{procs.tails()}"
    assert _tree(app.parent) == examples_files, f"the run of {app.name} changed files in {app.parent}"


@pytest.mark.parametrize("api", list(APPS))
def test_flwr_run_on_a_superlink_and_supernodes(tmp_path, api):
    import tomllib  # Python >= 3.11, as the module requires

    app, names = APPS[api]
    overrides = f"fraction-train = {FRACTION_TRAIN}\nfraction-evaluate = 0.0\n"
    with _deployed_run(tmp_path, app, overrides) as record:

            # The codec and delta of the app's run config defaults (the test overrides neither).
            config = tomllib.loads((app / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["flwr"]["app"]["config"]
            codec = DPRECCodec(
                sigma=config["sigma"],
                clip_multiplier=config["clip-multiplier"],
                bits=config["bits"],
                max_group_size=config["max-group-size"],
            )
            assert record["codec"] == {
                "sigma": codec.sigma,
                "clip_multiplier": codec.clip_multiplier,
                "bits": codec.bits,
                "max_group_size": codec.max_group_size,
            }
            rounds = record["rounds"]
            assert [r["round"] for r in rounds] == list(range(1, NUM_ROUNDS + 1))
            sampled = int(FRACTION_TRAIN * NUM_NODES)
            seeds = []
            for r in rounds:
                where = f"round {r['round']}"
                assert (r["num_available"], r["num_sampled"]) == (NUM_NODES, sampled), where
                assert (r["num_aggregated"], r["num_rejected"], r["num_failed"]) == (sampled, 0, 0), where
                assert len(r["messages"]) == sampled, where
                before = {k: _array(v) for k, v in r["before"].items()}
                after = {k: _array(v) for k, v in r["after"].items()}
                assert list(before) == list(after) and set(before) == names, where
                # Adaptive clipping (on by default): the round's codec has sigma = C_t / c, C_t from the previous round.
                assert r["sigma"] == pytest.approx(r["clip_norm"] / codec.clip_multiplier, rel=1e-15), where
                if r["round"] == 1:
                    assert r["clip_norm"] == pytest.approx(codec.clip_norm, rel=1e-15), where
                else:
                    # The round's clip norm is its codec's, sigma c: the previous round's next clip norm to rounding.
                    assert r["clip_norm"] == pytest.approx(rounds[r["round"] - 2]["next_clip_norm"], rel=1e-15), where
                round_codec = DPRECCodec(
                    sigma=r["sigma"],
                    clip_multiplier=codec.clip_multiplier,
                    bits=codec.bits,
                    max_group_size=codec.max_group_size,
                )
                msgs = [DPRECMessage.from_bytes(base64.b64decode(m), round_codec.layout(before)) for m in r["messages"]]
                seeds += [m.seed for m in msgs]
                # The global model after the round is the one before plus the mean of the round's messages, as the
                # strategy computes it: float64 sums in aggregation order (codec.accumulate) over their count, as
                # float32, added in the model's dtype: exactly. (And codec.aggregate to float64 rounding.)
                sums = round_codec.accumulate(msgs, {k: np.zeros(g.shape) for k, g in before.items()})
                mean = {k: (v / len(msgs)).astype(np.float32) for k, v in sums.items()}
                reference = round_codec.aggregate(msgs, before)
                for k in mean:
                    np.testing.assert_allclose(mean[k], reference[k], rtol=1e-6, atol=1e-7 * round_codec.sigma)
                for k, g in before.items():
                    assert after[k].dtype == g.dtype == np.float32, (where, k)
                    np.testing.assert_array_equal(after[k], np.asarray(g + mean[k], dtype=g.dtype), err_msg=f"{where}: {k}")
                    assert not np.array_equal(after[k], g), f"{where}: {k} did not move"
            # Round 2 starts from round 1's result; every message has its own seed.
            for k in rounds[0]["after"]:
                np.testing.assert_array_equal(_array(rounds[1]["before"][k]), _array(rounds[0]["after"][k]))
            assert len(set(seeds)) == len(seeds)

            # Epsilon is the codec's accountant for 2 of 3 nodes without replacement with the quantile bits, composed
            # per round.
            template = {k: _array(v) for k, v in rounds[0]["before"].items()}
            assert {r["delta"] for r in rounds} == {config["delta"]}
            assert record["quantile_noise"] == 2.0 / codec.clip_multiplier  # AdaptiveClipping's default
            acc = codec.accountant(
                template,
                num_clients=NUM_NODES,
                clients_per_round=sampled,
                delta=config["delta"],
                sampling="without_replacement",
                rounds=NUM_ROUNDS,
                quantile_noise=record["quantile_noise"],
            )
            expected = [acc.step().epsilon for _ in rounds]
            assert [r["epsilon"] for r in rounds] == pytest.approx(expected, rel=1e-12)
            assert 0 < expected[0] < expected[1] < np.inf



def test_distributed_dp_over_secagg_on_a_superlink_and_supernodes(tmp_path):
    """examples/flower-secagg-app: distributed DP under Flower's SecAgg+ across processes (gRPC). Every round the
    server's mean is the pipeline's decode of the modular sum SecAgg+ revealed, the global model moves by exactly
    that mean, and epsilon is the accounting recomputed from the round's public parameters."""
    import tomllib

    from dprec.accounting import Accountant, DDGEvent, SecAggRoundEvent
    from dprec.secagg import DDGPipeline

    config = tomllib.loads((SECAGG_APP / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["flwr"]["app"]["config"]
    with _deployed_run(tmp_path, SECAGG_APP, "") as record:
        rounds = record["rounds"]
        assert [r["round"] for r in rounds] == list(range(1, NUM_ROUNDS + 1))
        acc = Accountant(threat_model="server")
        for r in rounds:
            where = f"round {r['round']}"
            assert (r["status"], r["num_sampled"], r["num_aggregated"]) == ("aggregated", NUM_NODES, NUM_NODES), where
            dim = sum(_array(a).size for a in r["before"])
            pipe = DDGPipeline(dim, clip=r["clip_norm"], bits=r["bits"], num_clients=r["num_sampled"], seed=r["seed"],
                               noise_stddev=r["noise_stddev"], granularity=r["granularity"])
            assert (pipe.clip, pipe.bits) == (config["clip-norm"], config["bits"]), where
            assert pipe.noise_stddev == pytest.approx(config["noise-multiplier"] * config["clip-norm"] / NUM_NODES**0.5,
                                                      rel=1e-15), where
            total = _array(r["modular_sum"])
            mean = _array(r["mean"])
            np.testing.assert_array_equal(mean, pipe.decode(total, num_clients=NUM_NODES), err_msg=where)
            before, after = [_array(a) for a in r["before"]], [_array(a) for a in r["after"]]
            offset = 0
            for g, h in zip(before, after):
                piece = mean[offset: offset + g.size].reshape(g.shape)
                offset += g.size
                np.testing.assert_array_equal(h, (g.astype(np.float64) + piece).astype(np.float32), err_msg=where)
            acc.compose(SecAggRoundEvent([DDGEvent(l2_sensitivity=pipe.l2_sensitivity, noise_stddev=pipe.noise_stddev,
                                                   num_clients=NUM_NODES, dim=pipe.padded_dim,
                                                   granularity=pipe.granularity)], participation_rate=1.0))
            assert r["epsilon"] == pytest.approx(acc.get_epsilon(config["delta"]), rel=1e-12), where
        assert len({r["seed"] for r in rounds}) == NUM_ROUNDS  # a fresh public seed every round
