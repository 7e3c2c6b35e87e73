"""A cluster of `python -m broker` processes sharing a throwaway PostgreSQL database, and the
faults a test injects into it: SIGKILL and restart, SIGTERM, SIGSTOP/SIGCONT (a zombie leader
or controller), an emptied log dir, one broker cut from PostgreSQL, and network partitions
between brokers.

Each broker reaches PostgreSQL through a TCP proxy of its own in the test process, which is
how a test cuts one broker from the store without touching the others. Partitions need
network namespaces: each broker runs in one, joined to a bridge in the test's namespace by a
veth pair, and nftables rules inside the namespaces drop traffic between brokers of different
groups. Every address the brokers use there is one the test made; the test and the store
proxies stay reachable from every broker throughout. Without namespaces (not root, no nft),
brokers listen on 127.0.0.1 and everything but partitions works."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import itertools
import os
import re
import shutil
import socket
import struct
import subprocess
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import psycopg
from broker_process import BrokerProcess
from confluent_kafka.admin import AdminClient, NewTopic
from kafka_requests import req
from polling import wait_for
from postgres_database import throwaway_database
from raw_client import SIZE, RawClient

from broker.protocol import codec

POSTGRES = ("127.0.0.1", 5432)
STORE_TABLE_PREFIX = "fjord_meta_"
# Failure detection in seconds rather than Kafka's production defaults, so that a test that
# kills or pauses a broker sees the cluster react within its deadlines.
FAST_FAILOVER_OVERRIDES = (
    "broker.session.timeout.ms=4000",
    "broker.heartbeat.interval.ms=500",
    "replica.lag.time.max.ms=6000",
    # Two fetch sessions per leader: the clusters built with these replicate through both.
    "num.replica.fetchers=2",
)
BROKER_PORT = 9092
METADATA_VERSION = 12
_PARTITION_TABLE = "fjord_partition"
_COUNTER = itertools.count()
W = TypeVar("W")


def assert_formed(cluster: Cluster) -> None:
    """The brokers joined the cluster: they created its tables in its database (a broker
    that went on alone with an embedded store would create none)."""
    assert cluster.store_tables(), "the brokers created no fjord_meta_ tables: no cluster formed"


def _run(*args: str, stdin: str | None = None) -> str:
    done = subprocess.run(args, input=stdin, capture_output=True, text=True)
    if done.returncode:
        raise RuntimeError(f"{' '.join(args)} failed ({done.returncode}): {done.stderr.strip()}")
    return done.stdout


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@functools.cache
def netns_unsupported() -> str | None:
    """Why network namespaces with nftables cannot be used here, or None when they can (tried
    for real once per process: root alone does not mean the kernel lets us)."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    for tool in ("ip", "nft"):
        if shutil.which(tool) is None:
            return f"`{tool}` is not installed (Debian: iproute2, nftables)"
    probe = f"fjord-{os.getpid()}-probe"
    try:
        _run("ip", "netns", "add", probe)
        _run("ip", "netns", "exec", probe, "nft", "list", "ruleset")
    except RuntimeError as e:
        return str(e)
    finally:
        subprocess.run(["ip", "netns", "del", probe], capture_output=True)
    return None


class ProxyLoop:
    """An asyncio event loop on a daemon thread, for the store proxies."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    def run(self, coro, timeout: float = 30):
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(30)
        self.loop.close()


def _reset(transport: asyncio.BaseTransport) -> None:
    """Close a connection with a TCP reset, as a broken network path ends it, rather than
    with an orderly FIN."""
    sock = transport.get_extra_info("socket")
    if sock is not None:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    transport.abort()


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    with contextlib.suppress(OSError):
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()


class StoreProxy:
    """A TCP proxy between one broker and PostgreSQL, on a port that stays the same for its
    life. `cut()` resets every connection through it and then every new one as soon as it is
    accepted (the listener stays, so the port cannot be lost), or with `blackhole=True` holds
    new ones open without forwarding a byte until `heal()`, when they go through as a delayed
    connection would."""

    def __init__(self, loop: ProxyLoop, host: str = "127.0.0.1", target=POSTGRES) -> None:
        self._loop = loop
        self.host = host
        self.target = target
        self._refusing = False
        self._closing = False
        self._links: set[tuple[asyncio.Transport, asyncio.Transport]] = set()
        self._held: set[asyncio.StreamWriter] = set()
        self._handlers: set[asyncio.Task] = set()
        self._server, self._flowing = loop.run(self._listen())
        self.port: int = self._server.sockets[0].getsockname()[1]

    async def _listen(self) -> tuple[asyncio.Server, asyncio.Event]:
        flowing = asyncio.Event()
        flowing.set()
        return await asyncio.start_server(self._serve, self.host, 0), flowing

    @property
    def connections(self) -> int:
        """Connections forwarded to PostgreSQL right now."""
        return len(self._links)

    @property
    def held(self) -> int:
        """Connections accepted during a blackhole cut and waiting for the heal."""
        return len(self._held)

    def upstream_ports(self) -> set[int]:
        """The local ports of the connections forwarded to PostgreSQL right now: what
        PostgreSQL knows them by (pg_stat_activity.client_port)."""

        async def ports() -> set[int]:
            names = (upstream.get_extra_info("sockname") for _, upstream in self._links)
            return {name[1] for name in names if name}

        return self._loop.run(ports())

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._handlers.add(asyncio.current_task())
        try:
            if self._refusing:
                _reset(writer.transport)
                return
            if not self._flowing.is_set():
                self._held.add(writer)
                try:
                    await self._flowing.wait()
                finally:
                    self._held.discard(writer)
                if self._closing:
                    return
            try:
                up_reader, up_writer = await asyncio.open_connection(*self.target)
            except OSError:
                writer.transport.abort()
                return
            if self._closing:
                up_writer.transport.abort()
                writer.transport.abort()
                return
            link = (writer.transport, up_writer.transport)
            self._links.add(link)
            pipes = [
                asyncio.create_task(_pipe(reader, up_writer)),
                asyncio.create_task(_pipe(up_reader, writer)),
            ]
            try:
                await asyncio.wait(pipes, return_when=asyncio.FIRST_COMPLETED)
            finally:
                self._links.discard(link)
                for transport in link:
                    transport.abort()
                for task in pipes:
                    task.cancel()
                await asyncio.gather(*pipes, return_exceptions=True)
        finally:
            self._handlers.discard(asyncio.current_task())

    def cut(self, blackhole: bool = False) -> None:
        async def cut() -> None:
            self._refusing = not blackhole
            self._flowing.clear()
            for link in self._links:
                for transport in link:
                    _reset(transport)
            self._links.clear()

        self._loop.run(cut())

    def heal(self) -> None:
        async def heal() -> None:
            self._refusing = False
            self._flowing.set()

        self._loop.run(heal())

    def close(self) -> None:
        # Handlers end on their own once their sockets are gone (cancelling them instead
        # makes Python 3.11's stream server log each as an error).
        async def close() -> None:
            self._server.close()
            self._closing = True
            self._flowing.set()
            for writer in self._held:
                writer.transport.abort()
            for link in self._links:
                for transport in link:
                    transport.abort()
            await asyncio.gather(*self._handlers, return_exceptions=True)
            await self._server.wait_closed()

        self._loop.run(close())


def _subnets_in_use() -> set[tuple[int, int]]:
    routes = _run("ip", "-4", "-o", "route", "show", "table", "all")
    return {(int(a), int(b)) for a, b in re.findall(r"\b10\.(\d+)\.(\d+)\.\d+", routes)}


def remove_stale_networks() -> None:
    """Remove the namespaces and bridges that a harness in a process that no longer exists
    left behind (a test process killed before its teardown)."""
    for name in _run("ip", "netns", "list").split():
        m = re.fullmatch(r"fjord-(\d+)-(\d+|probe)(-\d+)?", name)
        if m and not _pid_alive(int(m[1])):
            subprocess.run(["ip", "netns", "del", name], capture_output=True)
    for name in re.findall(r"^\d+: (fb\d+-\d+)[:@]", _run("ip", "-o", "link"), re.M):
        if not _pid_alive(int(name[2:].split("-")[0])):
            subprocess.run(["ip", "link", "del", name], capture_output=True)


class Network:
    """A bridge in the test's namespace and one network namespace per node joined to it by a
    veth pair: node n is 10.a.b.n, the test (and the store proxies) 10.a.b.254, on a /24 that
    no route of this machine uses yet."""

    def __init__(self, nodes: Iterable[int]) -> None:
        self.nodes = sorted(nodes)
        if not self.nodes or self.nodes[0] < 1 or self.nodes[-1] > 9:
            raise ValueError("nodes are numbered 1 to 9 (interface names are short)")
        remove_stale_networks()
        self.tag = f"{os.getpid()}-{next(_COUNTER) % 100}"
        self.bridge = f"fb{self.tag}"
        self._made: list[tuple[str, ...]] = []
        used = _subnets_in_use()
        start = os.getpid() * 7 + int(self.tag.split("-")[1])
        candidates = ((200 + i // 256 % 50, i % 256) for i in range(start, start + 12800))
        self.subnet = next(s for s in candidates if s not in used)
        try:
            self._create()
        except BaseException:
            self.close()
            raise

    def address(self, node: int) -> str:
        a, b = self.subnet
        return f"10.{a}.{b}.{node}"

    @property
    def host_address(self) -> str:
        """The test's own address on the bridge, reachable from every namespace."""
        return self.address(254)

    def namespace(self, node: int) -> str:
        return f"fjord-{self.tag}-{node}"

    def exec_prefix(self, node: int) -> list[str]:
        return ["ip", "netns", "exec", self.namespace(node)]

    def _create(self) -> None:
        _run("ip", "link", "add", self.bridge, "type", "bridge")
        self._made.append(("ip", "link", "del", self.bridge))
        _run("ip", "addr", "add", f"{self.host_address}/24", "dev", self.bridge)
        _run("ip", "link", "set", self.bridge, "up")
        for n in self.nodes:
            ns = self.namespace(n)
            _run("ip", "netns", "add", ns)
            self._made.append(("ip", "netns", "del", ns))
            veth = f"fv{self.tag}-{n}"
            _run("ip", "link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", ns)
            # Deleting the namespace would delete the pair too, but later, in the background.
            self._made.append(("ip", "link", "del", veth))
            _run("ip", "link", "set", veth, "master", self.bridge, "up")
            _run("ip", "-n", ns, "addr", "add", f"{self.address(n)}/24", "dev", "eth0")
            _run("ip", "-n", ns, "link", "set", "eth0", "up")
            _run("ip", "-n", ns, "link", "set", "lo", "up")

    def partition(self, groups: Sequence[Iterable[int]]) -> None:
        """Cut the network between the groups (every node in exactly one): packets between
        nodes of different groups are dropped, in both directions, on open connections too.
        Replaces any earlier partition."""
        groups = [set(g) for g in groups]
        named = [n for g in groups for n in g]
        if sorted(named) != self.nodes:
            raise ValueError(f"groups {groups} must name each of {self.nodes} exactly once")
        for group in groups:
            others = ", ".join(self.address(n) for n in self.nodes if n not in group)
            for n in group:
                rules = (
                    f"table inet {_PARTITION_TABLE} {{\n"
                    f"  chain input {{ type filter hook input priority 0; policy accept;\n"
                    f"    ip saddr {{ {others} }} drop; }}\n"
                    f"  chain output {{ type filter hook output priority 0; policy accept;\n"
                    f"    ip daddr {{ {others} }} drop; }}\n"
                    f"}}\n"
                )
                self._nft(n, (self._flush_rules() + rules) if others else self._flush_rules())

    def heal(self) -> None:
        for n in self.nodes:
            self._nft(n, self._flush_rules())

    @staticmethod
    def _flush_rules() -> str:
        # Adding the table first makes the delete valid whether or not it exists.
        return f"table inet {_PARTITION_TABLE}\ndelete table inet {_PARTITION_TABLE}\n"

    def _nft(self, node: int, script: str) -> None:
        _run(*self.exec_prefix(node), "nft", "-f", "-", stdin=script)

    def close(self) -> None:
        """Remove everything this network made; what could not be removed is an error."""
        failures = []
        for command in reversed(self._made):
            done = subprocess.run(command, capture_output=True, text=True)
            gone = "No such file" in done.stderr or "Cannot find device" in done.stderr
            if done.returncode and not gone:
                failures.append(f"{' '.join(command)}: {done.stderr.strip()}")
        self._made.clear()
        if failures:
            raise RuntimeError("could not remove: " + "; ".join(failures))


class Cluster:
    """`size` brokers, node ids 1..size, sharing a throwaway PostgreSQL database; each with its
    own log dir under `base_dir` and the same address across restarts. `network` is
    "netns" (brokers in network namespaces: partitions work), "loopback" (brokers on
    127.0.0.1: no partitions) or "auto" (netns where this machine allows it).

    Use as a context manager, or call start() and close(): close() kills the brokers and
    removes the database, the proxies and the namespaces, also after a failed start."""

    def __init__(
        self,
        base_dir: Path,
        size: int = 3,
        overrides: Sequence[str] = (),
        network: str = "auto",
    ) -> None:
        if network == "auto":
            network = "loopback" if netns_unsupported() else "netns"
        if network not in ("netns", "loopback"):
            raise ValueError(f"network must be netns, loopback or auto, not {network!r}")
        self.base_dir = base_dir
        self.nodes = list(range(1, size + 1))
        self.overrides = list(overrides)
        self.network_mode = network
        self.network: Network | None = None
        self.database: str | None = None  # its name
        self.proxies: dict[int, StoreProxy] = {}
        self.brokers: dict[int, BrokerProcess] = {}
        self._paused: set[int] = set()
        self._admin: AdminClient | None = None
        self._clients: list = []
        self._cleanup = contextlib.ExitStack()

    def __enter__(self) -> Cluster:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.close()

    def start(self, timeout: float = 90) -> Cluster:
        try:
            self._setup()
            for n in self.nodes:
                self.brokers[n].spawn()
            for n in self.nodes:
                self.brokers[n].wait_started(timeout)
        except BaseException:
            self.close()
            raise
        return self

    def _setup(self) -> None:
        url = self._cleanup.enter_context(throwaway_database("fjord_cluster"))
        self.database = url.rpartition("/")[2]
        if self.network_mode == "netns":
            self.network = Network(self.nodes)
            self._cleanup.callback(self.network.close)
        loop = ProxyLoop()
        self._cleanup.callback(loop.close)
        proxy_host = self.network.host_address if self.network else "127.0.0.1"
        for n in self.nodes:
            self.proxies[n] = StoreProxy(loop, proxy_host)
            self._cleanup.callback(self.proxies[n].close)
        for n in self.nodes:
            log_dir = self.base_dir / f"broker-{n}"
            log_dir.mkdir(parents=True, exist_ok=True)
            proxy = self.proxies[n]
            overrides = [
                f"node.id={n}",
                f"metadata.store.url=postgresql://postgres@{proxy.host}:{proxy.port}/"
                f"{self.database}",
                *self.overrides,
            ]
            if self.network:
                self.brokers[n] = BrokerProcess(
                    log_dir,
                    *overrides,
                    host=self.network.address(n),
                    port=BROKER_PORT,
                    prefix=self.network.exec_prefix(n),
                )
            else:
                self.brokers[n] = BrokerProcess(log_dir, *overrides)
        self._cleanup.callback(self._kill_all)

    def track(self, client: W) -> W:
        """Have close() abort a workload client (tests/cluster/workload.py) first, whatever
        happened: a client left running after the network is gone would go on connecting
        to the brokers' addresses, which then lead out of this machine."""
        self._clients.append(client)
        return client

    def abort_clients(self) -> None:
        """Abort the workload clients tracked so far, and forget them."""
        try:
            for client in self._clients:
                client.abort()
        finally:
            self._clients.clear()

    def close(self) -> None:
        try:
            self.abort_clients()
        finally:
            self._admin = None
            self._cleanup.close()

    def _kill_all(self) -> None:
        for broker in self.brokers.values():
            if broker.proc and broker.proc.poll() is None:
                broker.proc.kill()
                broker.proc.wait()

    # -- addresses and state ------------------------------------------------------------------

    @property
    def database_url(self) -> str:
        """The URL of the cluster's database, straight to PostgreSQL (not through a proxy)."""
        return f"postgresql://postgres@127.0.0.1:5432/{self.database}"

    @property
    def bootstrap(self) -> str:
        return ",".join(self.brokers[n].bootstrap for n in self.nodes)

    def running(self, node: int) -> bool:
        proc = self.brokers[node].proc
        return proc is not None and proc.poll() is None

    def alive(self) -> list[int]:
        """The nodes whose process runs and is not paused."""
        return [n for n in self.nodes if self.running(n) and n not in self._paused]

    def logs(self, tail: int = 40) -> str:
        """The last lines each broker printed, for failure messages."""
        return "\n".join(
            f"--- broker {n} ---\n" + "".join(self.brokers[n].output[-tail:]) for n in self.nodes
        )

    def store_tables(self) -> list[str]:
        """The cluster's tables in its database (the brokers create them)."""
        with psycopg.connect(self.database_url) as conn:
            rows = conn.execute(
                "SELECT tablename FROM pg_tables WHERE tablename LIKE %s ORDER BY 1",
                (STORE_TABLE_PREFIX.replace("_", r"\_") + "%",),
            ).fetchall()
        return [r[0] for r in rows]

    def store_sessions(self, node: int) -> list[StoreSession]:
        """Broker `node`'s sessions in PostgreSQL now (those through its proxy)."""
        ports = sorted(self.proxies[node].upstream_ports())
        with psycopg.connect(self.database_url) as conn:
            rows = conn.execute(
                "SELECT pid, state, backend_xid IS NOT NULL, query FROM pg_stat_activity "
                "WHERE datname = current_database() AND client_port = ANY(%s) ORDER BY pid",
                (ports,),
            ).fetchall()
        return [StoreSession(*row) for row in rows]

    # -- faults -------------------------------------------------------------------------------

    def kill(self, node: int) -> None:
        """SIGKILL: the broker dies at once, with whatever it had not written."""
        self._paused.discard(node)
        self.brokers[node].kill()

    def stop(self, node: int) -> int:
        """SIGTERM, waiting for a clean shutdown (controlled shutdown, in cluster mode); the
        exit status."""
        if node in self._paused:
            self.resume(node)
        return self.brokers[node].stop()

    def restart(self, node: int, timeout: float = 90) -> None:
        """Start a broker that is down again, on the same log dir and address."""
        if self.running(node):
            raise RuntimeError(f"broker {node} is running: kill or stop it first")
        self.brokers[node].start(timeout)

    def pause(self, node: int) -> None:
        """SIGSTOP: the broker keeps its connections and leases but does nothing, as a long
        GC pause or a stalled VM would: past the session timeout it is a zombie. Returns once
        the process is stopped (signals are delivered asynchronously)."""
        self.brokers[node].pause()
        self._paused.add(node)
        wait_for(lambda: self.process_state(node) == "T", 30, f"broker {node} to stop")

    def resume(self, node: int) -> None:
        self.brokers[node].resume()
        self._paused.discard(node)
        wait_for(lambda: self.process_state(node) != "T", 30, f"broker {node} to continue")

    def process_state(self, node: int) -> str:
        """The broker process' state letter in /proc (R running, S sleeping, T stopped)."""
        stat = Path(f"/proc/{self.brokers[node].proc.pid}/stat").read_text()
        return stat.rpartition(")")[2].split()[0]

    def wipe(self, node: int) -> None:
        """Empty a stopped broker's log dir, as a replaced disk would be."""
        if self.running(node):
            raise RuntimeError(f"broker {node} is running: kill or stop it before wiping")
        log_dir = self.brokers[node].log_dir
        shutil.rmtree(log_dir)
        log_dir.mkdir()

    def cut_from_store(self, node: int, blackhole: bool = False) -> None:
        """Cut one broker from PostgreSQL: its connections close and new ones are refused
        (or, with `blackhole`, hang) until heal_store."""
        self.proxies[node].cut(blackhole)

    def heal_store(self, node: int) -> None:
        self.proxies[node].heal()

    def partition(self, groups: Sequence[Iterable[int]]) -> None:
        """Drop the traffic between brokers of different groups; the test still reaches all."""
        if self.network is None:
            raise RuntimeError("network partitions need network=netns")
        self.network.partition(groups)

    def isolate(self, node: int) -> None:
        self.partition([[node], [n for n in self.nodes if n != node]])

    def heal(self) -> None:
        if self.network is not None:
            self.network.heal()

    # -- requests to one broker --------------------------------------------------------------

    def ask(self, node: int, request: Any, timeout: float = 10) -> Any | None:
        """`request` (a kio request, which knows its API key and version) sent to broker
        `node` alone, and its response; None when the broker does not answer within `timeout`
        seconds (down, paused, cut off) or closes the connection."""
        host, _, port = self.brokers[node].bootstrap.rpartition(":")
        try:
            return asyncio.run(_ask(host, int(port), request, timeout))
        except (OSError, TimeoutError, asyncio.IncompleteReadError):
            return None

    # -- metadata ----------------------------------------------------------------------------

    def metadata_from(self, node: int, timeout: float = 5) -> MetadataView | None:
        """What broker `node` answers to Metadata (every topic), or None when it does not
        answer in time: asked of that broker alone, so a zombie's stale view can be seen."""
        request = req(
            3,
            METADATA_VERSION,
            "MetadataRequest",
            topics=None,
            allow_auto_topic_creation=False,
            include_topic_authorized_operations=False,
        )
        response = self.ask(node, request, timeout)
        return None if response is None else _metadata_view(node, response)

    def metadata(self, nodes: Iterable[int] | None = None) -> MetadataView | None:
        """The first answer to Metadata from `nodes` (default: the alive ones), in order."""
        for n in self.alive() if nodes is None else nodes:
            view = self.metadata_from(n)
            if view is not None:
                return view
        return None

    def wait_for_brokers(self, nodes: Iterable[int] | None = None, timeout: float = 60) -> None:
        """Until Metadata lists exactly `nodes` (default: the alive ones) as brokers."""
        want = set(self.alive() if nodes is None else nodes)
        seen: list[MetadataView | None] = [None]

        def listed() -> bool:
            seen[0] = self.metadata()
            return seen[0] is not None and set(seen[0].brokers) == want

        wait_for(listed, timeout, f"Metadata to list brokers {sorted(want)}", lambda: seen[0])

    def wait_for_leaders(
        self,
        topic: str,
        min_isr: int = 1,
        excluding: Iterable[int] = (),
        timeout: float = 60,
        partitions: int | None = None,
    ) -> dict[int, PartitionState]:
        """Until every partition of `topic` (`partitions` of them, if given: the answering
        broker may not know of partitions just added) has a leader among the alive brokers
        not in `excluding` (an isolated broker still runs, and may still believe it leads)
        and at least `min_isr` replicas in sync; the partitions then."""
        excluded = set(excluding)
        seen: list[MetadataView | None] = [None]
        count = partitions

        def led() -> dict[int, PartitionState] | None:
            view = seen[0] = self.metadata([n for n in self.alive() if n not in excluded])
            partitions = view.topics.get(topic) if view else None
            if not partitions or (count is not None and len(partitions) != count):
                return None
            leaders = set(self.alive()) - excluded
            for p in partitions.values():
                if p.error or p.leader not in leaders or len(p.isr) < min_isr:
                    return None
            return partitions

        return wait_for(
            led,
            timeout,
            f"leaders among {sorted(set(self.alive()) - excluded)} and {min_isr} in-sync "
            f"replicas for {topic}",
            lambda: seen[0] and seen[0].topics.get(topic),
        )

    def leader(self, topic: str, partition: int) -> int:
        return self.wait_for_leaders(topic)[partition].leader

    def controller(self, excluding: Iterable[int] = (), timeout: float = 60) -> int:
        """The controller Metadata names, once it is an alive broker not in `excluding`."""
        excluded = set(excluding)

        def named() -> int | None:
            view = self.metadata([n for n in self.alive() if n not in excluded])
            alive = set(self.alive()) - excluded
            return view.controller if view and view.controller in alive else None

        return wait_for(named, timeout, "an alive controller")

    # -- topics, through confluent-kafka's admin client --------------------------------------

    def admin(self) -> AdminClient:
        if self._admin is None:
            # Requests to a paused broker time out in seconds rather than a minute.
            config = {"bootstrap.servers": self.bootstrap, "socket.timeout.ms": 10_000}
            self._admin = AdminClient(config)
        return self._admin

    def create_topic(
        self,
        name: str,
        partitions: int,
        replication_factor: int,
        config: dict[str, str] | None = None,
    ) -> None:
        topic = NewTopic(name, partitions, replication_factor, config=config or {})
        futures = self.admin().create_topics([topic], operation_timeout=30)
        futures[name].result(timeout=60)


@dataclass(frozen=True)
class StoreSession:
    """A broker's session in PostgreSQL, as pg_stat_activity shows it."""

    pid: int
    state: str  # idle, active, idle in transaction, ...
    writing: bool  # inside a transaction that has written (it holds row locks till its end)
    query: str  # the last statement


@dataclass(frozen=True)
class PartitionState:
    leader: int
    leader_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    offline: tuple[int, ...]
    error: int  # Kafka's error code, 0 for none


@dataclass(frozen=True)
class MetadataView:
    """One broker's answer to Metadata."""

    answered_by: int
    brokers: dict[int, str]  # node id -> host:port
    controller: int
    topics: dict[str, dict[int, PartitionState]]  # partitions by topic
    topic_errors: dict[str, int]


async def _ask(host: str, port: int, request: Any, timeout: float) -> Any:
    payload = codec.encode_request(request, 1, "fjord-cluster-harness")
    async with asyncio.timeout(timeout):
        client = await RawClient.open(host, port)
        try:
            await client.send(SIZE.pack(len(payload)) + payload)
            frame = await client.read_frame()
        finally:
            client.close()
    _, response = codec.decode_response(frame, request.__api_key__, request.__version__)
    return response


def _metadata_view(node: int, response: Any) -> MetadataView:
    return MetadataView(
        answered_by=node,
        brokers={b.node_id: f"{b.host}:{b.port}" for b in response.brokers},
        controller=response.controller_id,
        topics={
            t.name: {
                p.partition_index: PartitionState(
                    leader=p.leader_id,
                    leader_epoch=p.leader_epoch,
                    replicas=tuple(p.replica_nodes),
                    isr=tuple(p.isr_nodes),
                    offline=tuple(p.offline_replicas),
                    error=int(p.error_code),
                )
                for p in t.partitions
            }
            for t in response.topics
        },
        topic_errors={t.name: int(t.error_code) for t in response.topics},
    )
