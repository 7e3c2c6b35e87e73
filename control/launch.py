"""Run the whole Fjord platform on one machine: what `make run` starts.

    python -m control.launch [--override key=value ...]

Starts the broker (its --override options follow the launcher's own and so win), the ASGI
web server, a Celery worker and beat (over Redis when REDIS_URL is set, over files under var/
otherwise), after making sure a first admin can log in. Each child's output is
forwarded line by line under its name. SIGINT and SIGTERM are forwarded to the children; a
second one kills them. If a child exits on its own the others are stopped and the launcher
exits 1.
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
from dataclasses import dataclass
from types import FrameType
from typing import TextIO

import django
from django.conf import settings
from django.core.management import call_command

# Long enough for the broker to flush and close its logs, short enough for a hung child.
STOP_GRACE_SECONDS = 20.0

LISTENER_RE = re.compile(r"[A-Za-z0-9_]+://[^\s,]+")


@dataclass
class Child:
    name: str
    argv: list[str]
    # Given an output line, returns what to announce once the child is ready, or None.
    ready: Callable[[str], str | None] | None = None


class Supervisor:
    def __init__(self, children: Sequence[Child], out: TextIO = sys.stdout) -> None:
        self.children = list(children)
        self.out = out
        self.out_lock = threading.Lock()
        self.procs: dict[str, subprocess.Popen[str]] = {}
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
        readers = []
        failed = False
        try:
            env = {**os.environ, "PYTHONUNBUFFERED": "1"}
            for child in self.children:
                # Own process group: a Ctrl-C in the terminal reaches only the launcher, which
                # forwards it once (Celery treats a second SIGINT as a cold shutdown).
                proc = subprocess.Popen(
                    child.argv,
                    cwd=settings.BASE_DIR,
                    env=env,
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
                readers.append(reader)
                threading.Thread(target=self._wait, args=(child, proc), daemon=True).start()

            running = set(self.procs)
            stop_deadline: float | None = None
            while running:
                timeout = None
                if stop_deadline is not None:
                    timeout = max(0.0, stop_deadline - time.monotonic())
                try:
                    kind, what = self.events.get(timeout=timeout)
                except queue.Empty:
                    self.say(f"fjord: still running after {STOP_GRACE_SECONDS:.0f}s, killing")
                    self._kill()
                    continue
                if kind == "signal":
                    if stop_deadline is None:
                        self.say(f"fjord: {signal.Signals(what).name} received, stopping")
                        stop_deadline = self._stop(int(what))
                    else:
                        self._kill()
                    continue
                running.discard(str(what))
                if stop_deadline is None:
                    code = self.procs[str(what)].returncode
                    self.say(f"fjord: {what} exited with status {code}, stopping the others")
                    failed = True
                    stop_deadline = self._stop(signal.SIGTERM)
        finally:
            self._kill()
            for sig, handler in previous.items():
                signal.signal(sig, handler)
        for reader in readers:
            # A grandchild that outlived its parent may hold the pipe open.
            reader.join(timeout=2)
        return 1 if failed else 0

    def _forward(self, child: Child, proc: subprocess.Popen[str]) -> None:
        assert proc.stdout is not None
        announce = child.ready
        for line in proc.stdout:
            line = line.rstrip("\n")
            self.say(f"[{child.name}] {line}")
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
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass


def broker_ready(line: str) -> str | None:
    if "started" not in line:
        return None
    listeners = LISTENER_RE.findall(line)
    return f"broker listening on {', '.join(listeners)}" if listeners else "broker started"


def platform_children(web_port: str, broker_overrides: Sequence[str]) -> list[Child]:
    """The processes of a single-machine platform, configured from the control plane's settings
    so that the broker listens where the control plane looks for it."""
    bootstrap = settings.FJORD_BOOTSTRAP.split(",")[0].strip()
    overrides = [
        f"log.dirs={settings.VAR_DIR / 'kafka-logs'}",
        f"listeners=PLAINTEXT://{bootstrap}",
        f"metrics.listener={settings.FJORD_METRICS_URL}",
        # ACLs can be managed from the console from the start; until a resource has one,
        # everybody may use it, as on a broker without an authorizer.
        "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "allow.everyone.if.no.acl.found=true",
        # The pipelines' exactly-once sink prepares transactions for its driver to commit
        # (KIP-939); Kafka leaves two-phase commit off by default.
        "transaction.two.phase.commit.enable=true",
        *broker_overrides,
    ]
    broker_argv = [sys.executable, "-m", "broker"]
    for override in overrides:
        broker_argv += ["--override", override]

    console_url = f"http://127.0.0.1:{web_port}/"
    children = [
        Child("broker", broker_argv, broker_ready),
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
        ),
    ]
    celery = [sys.executable, "-m", "celery", "-A", "control"]
    children += [
        Child("worker", [*celery, "worker", "--loglevel", "INFO"]),
        Child("beat", [*celery, "beat", "--loglevel", "INFO"]),
    ]
    return children


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m control.launch", description="Run the Fjord platform on this machine."
    )
    parser.add_argument(
        "--override",
        action="append",
        default=[],
        metavar="key=value",
        help="broker property, passed on to `python -m broker`",
    )
    args = parser.parse_args(argv)

    django.setup()
    call_command("migrate", interactive=False, verbosity=0)
    call_command("ensure_admin", stdout=PrefixedStdout())
    children = platform_children(os.environ.get("FJORD_WEB_PORT", "8000"), args.override)
    print(f"fjord: starting {', '.join(child.name for child in children)}", flush=True)
    if not settings.REDIS_URL:
        print(
            "fjord: REDIS_URL is not set: Celery queues under var/celery, SQLite holds the rest",
            flush=True,
        )
    return Supervisor(children).run()


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
