"""A broker in the test's own event loop, for tests that talk to it over real sockets without
a process of its own."""

from __future__ import annotations

import contextlib
from pathlib import Path


@contextlib.asynccontextmanager
async def running_broker(log_dir: Path, **overrides: str):
    """A broker in the current event loop on an ephemeral loopback port, with a connection;
    stopped cleanly on exit (so a second one on the same log dir tests restarts)."""
    from broker.client.connection import BrokerConnection
    from broker.config import BrokerConfig
    from broker.server.broker import Broker

    props = {
        "listeners": "PLAINTEXT://127.0.0.1:0",
        "log.dirs": str(log_dir),
        "metrics.listener": "http://127.0.0.1:0/metrics",
    }
    props.update({k.replace("_", "."): v for k, v in overrides.items()})
    b = Broker(BrokerConfig(props))
    await b.start()
    conn = await BrokerConnection.open(*b.bound["PLAINTEXT"], client_id="fjord-test")
    try:
        yield b, conn
    finally:
        await conn.close()
        await b.stop()
