"""The whole platform as `make run` starts it (python -m control.launch: broker, web, worker,
beat), in a directory of its own, for end-to-end tests; with `--brokers N`, a cluster."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Sequence
from pathlib import Path

from broker_process import REPO, free_port

LOGIN = re.compile(r"fjord: first admin login: (\S+) / (\S+)")


def free_port_run(count: int) -> int:
    """The first of `count` consecutive free ports: the launcher puts a cluster's brokers on
    the ports after the first one's."""
    for _ in range(100):
        first = free_port()
        taken = []
        try:
            for port in range(first, first + count):
                taken.append(socket.create_server(("127.0.0.1", port)))
        except OSError:
            continue
        finally:
            for server in taken:
                server.close()
        return first
    raise RuntimeError(f"found no {count} consecutive free ports")


class Platform:
    def __init__(self, var_dir: Path, brokers: int = 1, **env: str) -> None:
        self.var_dir = var_dir
        self.brokers = brokers
        self.args: Sequence[str] = ("--brokers", str(brokers)) if brokers > 1 else ()
        self.kafka_port, self.metrics_port = free_port_run(brokers), free_port_run(brokers)
        self.web_port = free_port()
        self.env = {
            **{k: v for k, v in os.environ.items() if k not in {"DATABASE_URL", "REDIS_URL"}},
            "DJANGO_SETTINGS_MODULE": "control.settings",
            "FJORD_VAR_DIR": str(var_dir),
            "FJORD_BOOTSTRAP": f"127.0.0.1:{self.kafka_port}",
            "FJORD_METRICS_URL": f"http://127.0.0.1:{self.metrics_port}/metrics",
            "FJORD_WEB_PORT": str(self.web_port),
            "PYTHONUNBUFFERED": "1",
            **env,
        }
        self.output: list[str] = []
        self.proc: subprocess.Popen[str] | None = None
        self.username = self.password = ""

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.web_port}"

    @property
    def bootstrap(self) -> str:
        return self.env["FJORD_BOOTSTRAP"]

    def start(self, timeout: float = 120) -> Platform:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "control.launch", *self.args],
            cwd=REPO,
            env=self.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        # The console, every broker, the worker and a login: then a browser has a platform.
        wanted = {"console": False, "brokers": False, "worker": False, "login": False}
        brokers_up: set[str] = set()
        ready = threading.Event()

        def pump(proc: subprocess.Popen[str] = self.proc) -> None:
            for line in proc.stdout:
                self.output.append(line)
                if match := LOGIN.search(line):
                    self.username, self.password = match.groups()
                    wanted["login"] = True
                wanted["console"] |= line.startswith("fjord: console at")
                if line.startswith("fjord: broker"):
                    brokers_up.add(line.split()[1])
                wanted["brokers"] = len(brokers_up) == self.brokers
                wanted["worker"] |= line.startswith("[worker]") and " ready." in line
                if all(wanted.values()):
                    ready.set()
            ready.set()

        threading.Thread(target=pump, daemon=True).start()
        if not ready.wait(timeout) or self.proc.poll() is not None:
            self.stop()
            raise RuntimeError("the platform did not start:\n" + "".join(self.output))
        return self

    def stop(self) -> int:
        if self.proc is None or self.proc.poll() is not None:
            return self.proc.returncode if self.proc else 0
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise
