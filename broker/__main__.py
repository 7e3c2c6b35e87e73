"""python -m broker [server.properties] [--override key=value ...]"""

from __future__ import annotations

import argparse
import asyncio
import gc
import logging
import signal
import sys
from pathlib import Path

from broker.config import BrokerConfig, ConfigError, read_broker_config
from broker.redaction import RedactingFormatter
from broker.server.allocator import keep_large_buffers


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m broker", description="Fjord, a Kafka-compatible broker."
    )
    parser.add_argument(
        "properties",
        nargs="?",
        type=Path,
        help="a server.properties file with Kafka property names",
    )
    parser.add_argument(
        "--override",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a property (repeatable)",
    )
    args = parser.parse_args(argv)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(RedactingFormatter("[%(asctime)s] %(levelname)s %(name)s: %(message)s"))
    logging.basicConfig(level=logging.INFO, handlers=[handler])
    try:
        config = read_broker_config(args.properties, args.override)
    except (ConfigError, OSError) as e:
        print(f"fjord: invalid configuration: {e}", file=sys.stderr)
        return 2
    keep_large_buffers()
    try:
        import uvloop
    except ImportError:
        runner = asyncio.run
    else:
        runner = uvloop.run
    return runner(_serve(config))


async def _serve(config: BrokerConfig) -> int:
    from broker.metadata.store import MetadataStoreUnavailable
    from broker.server.broker import Broker

    broker = Broker(config)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    log = logging.getLogger("broker")
    try:
        await broker.start()
    except (OSError, MetadataStoreUnavailable) as e:
        log.error("cannot start: %s", e)
        return 1
    except Exception:
        # Logged rather than left to Python's hook: the log's formatter masks credentials.
        log.exception("cannot start")
        return 1
    # What start-up made (configs, the metadata image, kio's schema classes, the logs and
    # their indexes) lives as long as the broker: frozen, it is never walked again by a
    # collection of the oldest generation, a pause every connection would wait through.
    gc.freeze()
    await stop.wait()
    await broker.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
