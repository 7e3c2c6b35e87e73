"""Run the whole Fjord platform on one machine: what `make run` starts.

    python -m control.launch [--brokers N] [--override key=value ...]

Starts the broker (its --override options follow the launcher's own and so win), the ASGI
web server, a Celery worker and beat (over Redis when REDIS_URL is set, over files under var/
otherwise), after making sure a first admin can log in. It runs the control plane in
development mode (DJANGO_DEBUG=1) unless the environment sets DJANGO_DEBUG. Each child's output is
forwarded line by line under its name. SIGINT and SIGTERM are forwarded to the children; a
second one kills them. A child that exits on its own is restarted, after 1 s, 2 s, 4 s ... (at
most 30 s) while the others keep running; a sixth exit within 60 s stops them all and the
launcher exits 1.

With --brokers N (N > 1) it starts a local cluster instead of the one broker: brokers 1..N
sharing DATABASE_URL, which must then be PostgreSQL, as their metadata store; the first where
the one broker would be, the others on the next ports, each with a log dir of its own. The
control plane is pointed at all of them (FJORD_BOOTSTRAP, FJORD_METRICS_URL).
"""

import argparse
import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import TextIO
from urllib.parse import urlsplit

import django
from django.conf import settings
from django.core.management import call_command

from broker.redaction import redact

# Long enough for the broker to flush and close its logs, short enough for a hung child.
STOP_GRACE_SECONDS = 20.0

LISTENER_RE = re.compile(r"[A-Za-z0-9_]+://[^\s,]+")


@dataclass
class Child:
    name: str
    argv: list[str]
    # Given an output line, returns what to announce once the child is ready, or None.
    ready: Callable[[str], str | None] | None = None
    # Set for this child on top of the launcher's environment.
    env: dict[str, str] = field(default_factory=dict)


class Supervisor:
    """Runs the children in the foreground. A child that exits without being asked to is
    restarted after a backoff that doubles with each restart in the window (supervisord's
    autorestart, systemd's Restart=); past restart_limit restarts in restart_window seconds it
    is given up on and everything stops."""

    def __init__(
        self,
        children: Sequence[Child],
        out: TextIO = sys.stdout,
        restart_limit: int = 5,
        restart_window: float = 60.0,
        first_backoff: float = 1.0,
        max_backoff: float = 30.0,
    ) -> None:
        self.children = {child.name: child for child in children}
        self.out = out
        self.restart_limit = restart_limit
        self.restart_window = restart_window
        self.first_backoff = first_backoff
        self.max_backoff = max_backoff
        self.out_lock = threading.Lock()
        self.procs: dict[str, subprocess.Popen[str]] = {}
        self.readers: list[threading.Thread] = []
        # When each child exited on its own, within the restart window.
        self.exits: dict[str, list[float]] = {name: [] for name in self.children}
        # Child exits and received signals, in order. SimpleQueue.put is reentrant, so the
        # signal handler may use it while the main thread waits in get().
        self.events: queue.SimpleQueue[tuple[str, str | int]] = queue.SimpleQueue()

    def say(self, line: str) -> None:
        with self.out_lock:
            self.out.write(line + "\n")
            self.out.flush()

    def run(self) -> int:
        """Start every child and supervise them until all have exited; return the exit code."""
        signals = (signal.SIGINT, signal.SIGTERM)
        previous = {sig: signal.signal(sig, self._on_signal) for sig in signals}
        failed = False
        try:
            for child in self.children.values():
                self._start(child)
            running = set(self.procs)
            # Children waiting out their backoff: when each is due to start again.
            restarts: dict[str, float] = {}
            stopping = False
            # While stopping, when to kill what has not exited yet.
            kill_at: float | None = None
            while running or restarts:
                # The queue's timeout is the only wait, so signals are handled during a backoff.
                due = [*restarts.values(), *([kill_at] if kill_at is not None else [])]
                timeout = max(0.0, min(due) - time.monotonic()) if due else None
                try:
                    kind, what = self.events.get(timeout=timeout)
                except queue.Empty:
                    now = time.monotonic()
                    if kill_at is not None and kill_at <= now:
                        self.say(f"fjord: still running after {STOP_GRACE_SECONDS:.0f}s, killing")
                        self._kill()
                        kill_at = None
                    for name in [name for name, when in restarts.items() if when <= now]:
                        del restarts[name]
                        self._start(self.children[name])
                        running.add(name)
                    continue
                if kind == "signal":
                    if stopping:
                        self._kill()
                    else:
                        self.say(f"fjord: {signal.Signals(what).name} received, stopping")
                        stopping, kill_at = True, self._stop(int(what))
                        restarts.clear()
                    continue
                name = str(what)
                running.discard(name)
                if stopping:
                    continue
                delay = self._restart_delay(name)
                if delay is None:
                    failed = True
                    stopping, kill_at = True, self._stop(signal.SIGTERM)
                    restarts.clear()
                else:
                    restarts[name] = time.monotonic() + delay
        finally:
            self._kill()
            for sig, handler in previous.items():
                signal.signal(sig, handler)
        for reader in self.readers:
            # A grandchild that outlived its parent may hold the pipe open.
            reader.join(timeout=2)
        return 1 if failed else 0

    def _restart_delay(self, name: str) -> float | None:
        """Say that `name` exited; return the seconds until it restarts, None to give up."""
        proc = self.procs[name]
        # What the child left behind in its process group would hold its ports and pipe.
        self._kill_group(proc)
        now = time.monotonic()
        exits = [t for t in self.exits[name] if now - t < self.restart_window] + [now]
        self.exits[name] = exits
        exited = f"fjord: {name} exited with status {proc.returncode}"
        window = f"{self.restart_window:g} s"
        if len(exits) > self.restart_limit:
            self.say(f"{exited}, {len(exits)} times in {window}; stopping")
            return None
        delay = min(self.max_backoff, self.first_backoff * 2 ** (len(exits) - 1))
        self.say(
            f"{exited}; restarting in {delay:g} s "
            f"(restart {len(exits)} of {self.restart_limit} in {window})"
        )
        return delay

    def _start(self, child: Child) -> None:
        # Own process group: a Ctrl-C in the terminal reaches only the launcher, which
        # forwards it once (Celery treats a second SIGINT as a cold shutdown).
        proc = subprocess.Popen(
            child.argv,
            cwd=settings.BASE_DIR,
            env={**os.environ, "PYTHONUNBUFFERED": "1", **child.env},
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            bufsize=1,
            process_group=0,
        )
        self.procs[child.name] = proc
        reader = threading.Thread(target=self._forward, args=(child, proc), daemon=True)
        reader.start()
        self.readers.append(reader)
        threading.Thread(target=self._wait, args=(child, proc), daemon=True).start()

    def _forward(self, child: Child, proc: subprocess.Popen[str]) -> None:
        assert proc.stdout is not None
        announce = child.ready
        for line in proc.stdout:
            line = line.rstrip("\n")
            # Not every child logs through a masking formatter (Celery has its own).
            self.say(f"[{child.name}] {redact(line)}")
            if announce is not None and (message := announce(line)) is not None:
                self.say(f"fjord: {message}")
                announce = None

    def _wait(self, child: Child, proc: subprocess.Popen[str]) -> None:
        proc.wait()
        self.events.put(("exited", child.name))

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        self.events.put(("signal", signum))

    def _stop(self, signum: int) -> float:
        """Forward signum to the running children; return when to stop waiting for them."""
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.send_signal(signum)
        return time.monotonic() + STOP_GRACE_SECONDS

    def _kill(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                self._kill_group(proc)

    @staticmethod
    def _kill_group(proc: subprocess.Popen[str]) -> None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def broker_ready(line: str, name: str = "broker") -> str | None:
    if "started" not in line:
        return None
    listeners = LISTENER_RE.findall(line)
    return f"{name} listening on {', '.join(listeners)}" if listeners else f"{name} started"


@dataclass(frozen=True)
class BrokerPlace:
    """Where one broker of the platform listens, serves its metrics and keeps its logs."""

    node_id: int
    bootstrap: str
    metrics_url: str
    log_dir: Path


def _port_plus(address: str, offset: int) -> str:
    host, _, port = address.rpartition(":")
    return f"{host}:{int(port) + offset}"


def broker_places(count: int) -> list[BrokerPlace]:
    """The first broker where the control plane's settings look for it (as `make run`'s one
    broker is), the others on the ports after its Kafka and metrics ports; a lone broker keeps
    var/kafka-logs, a cluster's take var/kafka-logs-<node id>."""
    bootstrap = settings.FJORD_BOOTSTRAP.split(",")[0].strip()
    metrics_url = settings.FJORD_METRICS_URL.split(",")[0].strip()
    places = []
    for offset in range(count):
        node_id = offset + 1
        metrics = urlsplit(metrics_url)
        if metrics_url:
            metrics = metrics._replace(netloc=_port_plus(metrics.netloc, offset))
        places.append(
            BrokerPlace(
                node_id=node_id,
                bootstrap=_port_plus(bootstrap, offset),
                # Empty keeps every broker's metrics endpoint off, as it keeps the one's.
                metrics_url=metrics.geturl(),
                log_dir=settings.VAR_DIR
                / ("kafka-logs" if count == 1 else f"kafka-logs-{node_id}"),
            )
        )
    return places


def cluster_store_url() -> str:
    """DATABASE_URL, as the metadata store a local cluster's brokers share (their tables are
    prefixed fjord_meta_, beside Django's); ValueError unless it is PostgreSQL."""
    url = os.environ.get("DATABASE_URL", "")
    scheme = urlsplit(url).scheme
    if scheme not in ("postgres", "postgresql"):
        # The scheme only: the rest of the URL may hold a password.
        found = f"a {scheme}: URL" if scheme else "not set"
        raise ValueError(
            "--brokers above 1 needs DATABASE_URL to be a PostgreSQL URL "
            "(postgresql://user:password@host:5432/database), where the brokers keep the "
            f"cluster's metadata; it is {found}"
        )
    return url


def write_cluster_properties(store_url: str) -> Path:
    """The cluster's shared broker properties, in a file only this user may read: the store's
    URL carries DATABASE_URL's password, which command lines would show every user (ps)."""
    path = settings.VAR_DIR / "cluster.properties"
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w") as f:
        f.write(f"metadata.store.url={store_url}\n")
    # O_CREAT's mode applies to a new file only.
    os.chmod(path, 0o600)
    return path


def platform_children(
    web_port: str,
    broker_overrides: Sequence[str],
    brokers: int = 1,
    cluster_properties: Path | None = None,
) -> list[Child]:
    """The processes of a single-machine platform, configured from the control plane's settings
    so that the brokers listen where the control plane looks for them. Several brokers form a
    cluster through `cluster_properties` (write_cluster_properties)."""
    if brokers > 1 and cluster_properties is None:
        raise ValueError("a cluster's brokers need the cluster's properties file")
    places = broker_places(brokers)
    common = [
        # ACLs can be managed from the console from the start; until a resource has one,
        # everybody may use it, as on a broker without an authorizer.
        "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "allow.everyone.if.no.acl.found=true",
        # The pipelines' exactly-once sink prepares transactions for its driver to commit
        # (KIP-939); Kafka leaves two-phase commit off by default.
        "transaction.two.phase.commit.enable=true",
    ]
    children = []
    for place in places:
        overrides = [
            f"log.dirs={place.log_dir}",
            f"listeners=PLAINTEXT://{place.bootstrap}",
            f"metrics.listener={place.metrics_url}",
        ]
        argv = [sys.executable, "-m", "broker"]
        name = "broker"
        if brokers > 1:
            name = f"broker-{place.node_id}"
            argv.append(str(cluster_properties))
            # Topics created without a replication factor are replicated as in a production
            # cluster (Kafka's default is 1), and the internal topics, whose default of 3 a
            # smaller cluster could never create, on as many brokers as there are up to 3.
            replicas = min(brokers, 3)
            overrides += [
                f"node.id={place.node_id}",
                f"default.replication.factor={replicas}",
                f"offsets.topic.replication.factor={replicas}",
                f"transaction.state.log.replication.factor={replicas}",
            ]
        for override in [*overrides, *common, *broker_overrides]:
            argv += ["--override", override]
        children.append(Child(name, argv, lambda line, name=name: broker_ready(line, name)))

    # The control plane looks where the brokers are.
    control_env = {
        "FJORD_BOOTSTRAP": ",".join(place.bootstrap for place in places),
        "FJORD_METRICS_URL": ",".join(place.metrics_url for place in places if place.metrics_url),
    }
    console_url = f"http://127.0.0.1:{web_port}/"
    children += [
        Child(
            "web",
            [
                sys.executable,
                "-m",
                "daphne",
                "-b",
                "127.0.0.1",
                "-p",
                web_port,
                "control.asgi:application",
            ],
            lambda line: (
                f"console at {console_url}" if "Listening on TCP address" in line else None
            ),
            control_env,
        ),
    ]
    celery = [sys.executable, "-m", "celery", "-A", "control"]
    level = ["--loglevel", os.environ.get("CELERY_LOG_LEVEL", "INFO")]
    children += [
        Child("worker", [*celery, "worker", *level], env=control_env),
        Child("beat", [*celery, "beat", *level], env=control_env),
    ]
    return children


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m control.launch", description="Run the Fjord platform on this machine."
    )
    parser.add_argument(
        "--brokers",
        type=_broker_count,
        default=1,
        metavar="N",
        help="brokers to start; more than one form a cluster on DATABASE_URL (PostgreSQL)",
    )
    parser.add_argument(
        "--override",
        action="append",
        default=[],
        metavar="key=value",
        help="broker property, passed on to every `python -m broker`",
    )
    args = parser.parse_args(argv)
    store_url = None
    if args.brokers > 1:
        try:
            store_url = cluster_store_url()
        except ValueError as e:
            parser.error(str(e))

    # The launcher is development's one-command start: plain HTTP on 127.0.0.1 and the first
    # admin's password on this terminal. Outside development settings want a secret key and
    # TLS, and nothing prints the password; DJANGO_DEBUG=0 asks for that here too.
    os.environ.setdefault("DJANGO_DEBUG", "1")
    django.setup()
    call_command("migrate", interactive=False, verbosity=0)
    call_command("ensure_admin", stdout=PrefixedStdout())
    children = platform_children(
        os.environ.get("FJORD_WEB_PORT", "8000"),
        args.override,
        args.brokers,
        write_cluster_properties(store_url) if store_url else None,
    )
    print(f"fjord: starting {', '.join(child.name for child in children)}", flush=True)
    if not settings.REDIS_URL:
        on_sqlite = settings.DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3"
        print(
            "fjord: REDIS_URL is not set: Celery queues under var/celery"
            + (", SQLite holds the rest" if on_sqlite else ""),
            flush=True,
        )
    return Supervisor(children).run()


def _broker_count(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"expected a number of brokers (1 or more), got {text!r}")
    return int(text)


class PrefixedStdout:
    """A management command's output, under the launcher's own prefix."""

    def write(self, text: str) -> None:
        for line in text.splitlines():
            print(f"fjord: {line}", flush=True)

    def flush(self) -> None:
        sys.stdout.flush()


if __name__ == "__main__":
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "control.settings")
    sys.exit(main())
