"""control.launch supervising real child processes."""

import importlib.util
import io
import json
import os
import re
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pytest
from child_processes import child_pid

from control.launch import (
    Child,
    Supervisor,
    broker_ready,
    main,
    platform_children,
    write_cluster_properties,
)

REPO = Path(__file__).resolve().parents[2]

# Says it is ready, then reports the signal that stops it.
WAITS_FOR_A_SIGNAL = textwrap.dedent(
    """
    import signal, sys
    def stop(signum, frame):
        print("got", signum, flush=True)
        sys.exit(0)
    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGTERM, stop)
    print("ready", flush=True)
    while True:
        signal.pause()
    """
)


# Exits with status 7 the first time (leaving a mark in the file named by its argument), then
# behaves as WAITS_FOR_A_SIGNAL.
DIES_ONCE = (
    textwrap.dedent(
        """
    import pathlib, sys
    mark = pathlib.Path(sys.argv[1])
    if not mark.exists():
        mark.touch()
        print("dying", flush=True)
        sys.exit(7)
    """
    )
    + WAITS_FOR_A_SIGNAL
)


class Launched:
    """A process, the launcher or a Supervisor of its own, so that it can be signalled; its
    output collected line by line."""

    def __init__(self, argv: list[str], env: dict[str, str] | None = None) -> None:
        self.proc = subprocess.Popen(
            argv,
            cwd=REPO,
            env=env or {**os.environ, "DJANGO_SETTINGS_MODULE": "control.settings"},
            stdout=subprocess.PIPE,
            text=True,
        )
        self.lines: list[str] = []
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    @classmethod
    def supervisor(cls, children: dict[str, list[str]], **supervisor: object) -> "Launched":
        script = (
            "import sys\n"
            "from control.launch import Child, Supervisor\n"
            f"children = [Child(name, argv) for name, argv in {children!r}.items()]\n"
            f"sys.exit(Supervisor(children, **{supervisor!r}).run())\n"
        )
        return cls([sys.executable, "-c", script])

    def _read(self) -> None:
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))

    def wait_until(self, condition: Callable[[], bool], what: str, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while not condition():
            assert self.reader.is_alive(), f"ended before {what}: {self.lines}"
            assert time.monotonic() < deadline, f"no {what} in {self.lines}"
            time.sleep(0.05)

    def wait_for(self, line: str, count: int = 1, timeout: float = 30) -> None:
        self.wait_until(lambda: self.lines.count(line) >= count, f"{line!r} (x{count})", timeout)

    def exit_code(self) -> int:
        code = self.proc.wait(timeout=60)
        self.reader.join(timeout=10)
        return code

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def test_a_child_that_exits_on_its_own_is_restarted_while_the_others_keep_running(tmp_path):
    launched = Launched.supervisor(
        {
            "steady": [sys.executable, "-c", WAITS_FOR_A_SIGNAL],
            "flaky": [sys.executable, "-c", DIES_ONCE, str(tmp_path / "died")],
        },
        first_backoff=0.1,
    )
    launched.wait_for("[steady] ready")
    launched.wait_for(
        "fjord: flaky exited with status 7; restarting in 0.1 s (restart 1 of 5 in 60 s)"
    )
    launched.wait_for("[flaky] ready")

    launched.proc.send_signal(signal.SIGINT)

    assert launched.exit_code() == 0
    # The steady child was started once and stopped by the signal only.
    assert launched.lines.count("[steady] ready") == 1
    assert launched.lines.index("[steady] got 2") > launched.lines.index(
        "fjord: SIGINT received, stopping"
    )
    assert launched.lines.count("[flaky] got 2") == 1


def test_a_child_that_keeps_exiting_stops_the_others_and_fails():
    out = io.StringIO()
    supervisor = Supervisor(
        [
            Child("waiter", [sys.executable, "-c", WAITS_FOR_A_SIGNAL]),
            Child("quitter", [sys.executable, "-c", "raise SystemExit(3)"]),
        ],
        out=out,
        restart_limit=2,
        restart_window=600,
        first_backoff=0.01,
    )

    assert supervisor.run() == 1

    assert all(proc.returncode is not None for proc in supervisor.procs.values())
    said = [line for line in out.getvalue().splitlines() if line.startswith("fjord: quitter")]
    assert said == [
        "fjord: quitter exited with status 3; restarting in 0.01 s (restart 1 of 2 in 600 s)",
        "fjord: quitter exited with status 3; restarting in 0.02 s (restart 2 of 2 in 600 s)",
        "fjord: quitter exited with status 3, 3 times in 600 s; stopping",
    ]
    assert "[waiter] got 15" in out.getvalue()


def test_a_signal_during_a_backoff_stops_everything_without_restarting():
    launched = Launched.supervisor(
        {
            "waiter": [sys.executable, "-c", WAITS_FOR_A_SIGNAL],
            "quitter": [sys.executable, "-c", "print('started'); raise SystemExit(3)"],
        },
        first_backoff=3600,
        max_backoff=3600,
    )
    launched.wait_for("[waiter] ready")
    launched.wait_for(
        "fjord: quitter exited with status 3; restarting in 3600 s (restart 1 of 5 in 60 s)"
    )

    launched.proc.send_signal(signal.SIGINT)

    assert launched.exit_code() == 0
    assert launched.lines.count("[quitter] started") == 1
    assert "[waiter] got 2" in launched.lines


def test_a_childs_output_is_forwarded_without_credentials():
    """Celery, for one, prints what it logs with a formatter of its own."""
    out = io.StringIO()
    said = "task failed: cannot reach postgresql://fjord:child-pa55word@db:5432/fjord"
    supervisor = Supervisor(
        [Child("worker", [sys.executable, "-c", f"print({said!r})"])], out=out, restart_limit=0
    )

    supervisor.run()

    assert "[worker] task failed: cannot reach postgresql://fjord:****@db:5432/fjord" in (
        out.getvalue()
    )
    assert "child-pa55word" not in out.getvalue()


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_is_forwarded_once_to_every_child(signum):
    script = textwrap.dedent(
        f"""
        import sys
        from control.launch import Child, Supervisor
        child = [sys.executable, "-c", {WAITS_FOR_A_SIGNAL!r}]
        sys.exit(Supervisor([Child("one", child), Child("two", child)]).run())
        """
    )
    launcher = subprocess.Popen(
        [sys.executable, "-c", script],
        cwd=REPO,
        env={**os.environ, "DJANGO_SETTINGS_MODULE": "control.settings"},
        stdout=subprocess.PIPE,
        text=True,
    )
    ready = set()
    for line in launcher.stdout:
        if line.rstrip().endswith("] ready"):
            ready.add(line.split("]")[0])
        if len(ready) == 2:
            break

    launcher.send_signal(signum)
    rest = launcher.stdout.read()

    assert launcher.wait(timeout=60) == 0
    assert rest.count(f"got {int(signum)}") == 2, rest


def test_broker_readiness_names_its_listener():
    line = "INFO broker started, listening on PLAINTEXT://127.0.0.1:19092"

    assert broker_ready("INFO loading logs") is None
    assert broker_ready(line) == "broker listening on PLAINTEXT://127.0.0.1:19092"


def test_the_broker_listens_where_the_control_plane_looks(settings, tmp_path):
    settings.FJORD_BOOTSTRAP = "127.0.0.1:19092,127.0.0.1:19093"
    settings.FJORD_METRICS_URL = "http://127.0.0.1:19308/metrics"
    settings.REDIS_URL = ""

    children = platform_children("8123", [f"log.dirs={tmp_path}"])

    assert [child.name for child in children] == ["broker", "web", "worker", "beat"]
    broker_argv = children[0].argv
    assert broker_argv[:3] == [sys.executable, "-m", "broker"]
    overrides = broker_argv[4::2]
    assert "listeners=PLAINTEXT://127.0.0.1:19092" in overrides
    assert "metrics.listener=http://127.0.0.1:19308/metrics" in overrides
    assert not [o for o in overrides if o.startswith(("node.id=", "metadata.store.url="))]
    # The caller's overrides come last, so the broker lets them win.
    assert overrides[-1] == f"log.dirs={tmp_path}"
    assert children[1].argv[-3:] == ["-p", "8123", "control.asgi:application"]
    assert children[1].env == {
        "FJORD_BOOTSTRAP": "127.0.0.1:19092",
        "FJORD_METRICS_URL": "http://127.0.0.1:19308/metrics",
    }


def test_celery_logs_at_the_level_asked_for(settings, monkeypatch, tmp_path):
    settings.REDIS_URL = ""
    monkeypatch.setenv("CELERY_LOG_LEVEL", "WARNING")
    worker, beat = platform_children("8123", [f"log.dirs={tmp_path}"])[2:]
    assert worker.argv[-3:] == ["worker", "--loglevel", "WARNING"]
    assert beat.argv[-3:] == ["beat", "--loglevel", "WARNING"]


def test_a_cluster_is_brokers_on_consecutive_ports_and_the_control_plane_sees_them(
    settings, tmp_path
):
    settings.FJORD_BOOTSTRAP = "127.0.0.1:19092"
    settings.FJORD_METRICS_URL = "http://127.0.0.1:19308/metrics"
    settings.VAR_DIR = tmp_path
    properties = write_cluster_properties("postgresql://fjord:secret@db:5432/fjord")

    children = platform_children("8123", ["num.partitions=3"], 3, properties)

    names = ["broker-1", "broker-2", "broker-3", "web", "worker", "beat"]
    assert [child.name for child in children] == names
    for node, child in enumerate(children[:3], start=1):
        # The store's URL, password and all, only in a file of the launcher's user.
        assert child.argv[:4] == [sys.executable, "-m", "broker", str(properties)]
        assert not [arg for arg in child.argv if "secret" in arg]
        overrides = child.argv[5::2]
        assert overrides[:7] == [
            f"log.dirs={tmp_path / f'kafka-logs-{node}'}",
            f"listeners=PLAINTEXT://127.0.0.1:{19091 + node}",
            f"metrics.listener=http://127.0.0.1:{19307 + node}/metrics",
            f"node.id={node}",
            "default.replication.factor=3",
            "offsets.topic.replication.factor=3",
            "transaction.state.log.replication.factor=3",
        ]
        assert overrides[-1] == "num.partitions=3"
        assert child.ready("INFO broker started, listening on PLAINTEXT://127.0.0.1:1") == (
            f"broker-{node} listening on PLAINTEXT://127.0.0.1:1"
        )
    assert properties.read_text() == "metadata.store.url=postgresql://fjord:secret@db:5432/fjord\n"
    assert properties.stat().st_mode & 0o777 == 0o600
    control_env = {
        "FJORD_BOOTSTRAP": "127.0.0.1:19092,127.0.0.1:19093,127.0.0.1:19094",
        "FJORD_METRICS_URL": ",".join(
            f"http://127.0.0.1:{port}/metrics" for port in (19308, 19309, 19310)
        ),
    }
    assert [child.env for child in children[3:]] == [control_env] * 3


@pytest.mark.parametrize(
    "database_url", [None, "sqlite:///var/control.sqlite3", "mysql://u:pw@h/db"]
)
def test_a_cluster_needs_postgresql(monkeypatch, capsys, database_url):
    if database_url is None:
        monkeypatch.delenv("DATABASE_URL", raising=False)
    else:
        monkeypatch.setenv("DATABASE_URL", database_url)

    with pytest.raises(SystemExit) as exited:
        main(["--brokers", "3"])

    assert exited.value.code == 2
    error = capsys.readouterr().err
    assert "DATABASE_URL to be a PostgreSQL URL" in error
    assert "pw" not in error


@pytest.mark.parametrize("count", ["0", "-1", "three"])
def test_the_broker_count_is_a_positive_number(capsys, count):
    with pytest.raises(SystemExit) as exited:
        main(["--brokers", count])

    assert exited.value.code == 2
    assert "expected a number of brokers" in capsys.readouterr().err


def free_port() -> int:
    with socket.create_server(("127.0.0.1", 0)) as server:
        return server.getsockname()[1]


def broker_health(web_port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{web_port}/api/v1/health/") as response:
        return json.load(response)["broker"]["status"]


@pytest.mark.skipif(
    importlib.util.find_spec("broker.__main__") is None,
    reason="the broker has no command line yet (broker/__main__.py)",
)
@pytest.mark.timeout(180)
def make_run(tmp_path: Path, kafka_port: int, web_port: int) -> Launched:
    """The launcher as `make run` starts it: no settings in the environment (it asks for
    development mode itself), the plain settings, SQLite (here a throwaway one), no Redis."""
    unset = {
        "REDIS_URL",
        "DATABASE_URL",
        "DJANGO_DEBUG",
        "DJANGO_SECRET_KEY",
        "FJORD_ADMIN_PASSWORD",
    }
    env = {k: v for k, v in os.environ.items() if k not in unset}
    env |= {
        "DJANGO_SETTINGS_MODULE": "control.settings",
        "DATABASE_URL": f"sqlite:///{tmp_path / 'control.sqlite3'}",
        "FJORD_BOOTSTRAP": f"127.0.0.1:{kafka_port}",
        "FJORD_METRICS_URL": f"http://127.0.0.1:{free_port()}/metrics",
        "FJORD_WEB_PORT": str(web_port),
    }
    return Launched(
        [sys.executable, "-m", "control.launch", "--override", f"log.dirs={tmp_path / 'logs'}"],
        env,
    )


def test_launch_runs_the_platform_restarting_what_dies_until_stopped(tmp_path):
    kafka_port, web_port = free_port(), free_port()
    launcher = make_run(tmp_path, kafka_port, web_port)
    broker_up = f"fjord: broker listening on PLAINTEXT://127.0.0.1:{kafka_port}"

    def worker_ready() -> int:
        return len(
            [line for line in launcher.lines if line.startswith("[worker]") and " ready." in line]
        )

    try:
        launcher.wait_for(f"fjord: console at http://127.0.0.1:{web_port}/", timeout=120)
        launcher.wait_for(broker_up, timeout=120)
        launcher.wait_until(lambda: worker_ready() == 1, "a ready worker", timeout=120)
        login = next(line for line in launcher.lines if "first admin login" in line)
        assert re.fullmatch(r"fjord: first admin login: admin / \S{12,}", login)
        assert broker_health(web_port) == "reachable"

        os.kill(child_pid(launcher.proc.pid, "broker"), signal.SIGKILL)
        launcher.wait_for(
            "fjord: broker exited with status -9; restarting in 1 s (restart 1 of 5 in 60 s)"
        )
        launcher.wait_for(broker_up, count=2)
        launcher.wait_until(lambda: broker_health(web_port) == "reachable", "the broker reachable")

        os.kill(child_pid(launcher.proc.pid, "celery", "worker"), signal.SIGKILL)
        launcher.wait_for(
            "fjord: worker exited with status -9; restarting in 1 s (restart 1 of 5 in 60 s)"
        )
        launcher.wait_until(lambda: worker_ready() == 2, "the worker ready again", timeout=60)

        launcher.proc.send_signal(signal.SIGINT)
        assert launcher.exit_code() == 0
        # The console served throughout.
        assert not [line for line in launcher.lines if line.startswith("fjord: web exited")]
    finally:
        launcher.stop()


@pytest.mark.timeout(180)
def test_launch_stops_with_exit_1_when_a_child_keeps_dying(tmp_path):
    """A broker whose port another process holds exits at each start: restarted five times,
    then the launcher says so and stops everything."""
    with socket.create_server(("127.0.0.1", 0)) as taken:
        kafka_port = taken.getsockname()[1]
        launcher = make_run(tmp_path, kafka_port, free_port())
        try:
            launcher.wait_until(
                lambda: any("(restart 5 of 5 in 60 s)" in line for line in launcher.lines),
                "a fifth restart",
                timeout=120,
            )
            assert launcher.exit_code() == 1
        finally:
            launcher.stop()
    restarts = [line for line in launcher.lines if line.startswith("fjord: broker exited")]
    assert [line.rpartition("(")[2] for line in restarts[:5]] == [
        f"restart {n} of 5 in 60 s)" for n in range(1, 6)
    ]
    assert restarts[5].endswith(", 6 times in 60 s; stopping")
