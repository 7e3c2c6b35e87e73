"""Clients a process keeps from one micro-batch to the next, with their connections.

A streaming query calls into Python again and again: its source's driver side runs in one
Python process for the whole query, and Spark reuses its Python workers (spark.python.worker.reuse,
on by default) for the tasks of later micro-batches and for the sink's commits. A client made
for each call paid its connection, its metadata and its coordinator look-ups every time; here a
process keeps one event loop, on which every call runs, and the clients made on it, each under
a key (what it is and the options it was made with), until one fails: a client whose call
raised is closed and forgotten, the next call makes a new one.

Only clients whose state carries nothing from one call to the next are kept: admin clients,
the non-transactional producer of the sink's decisions, consumers that each call assigns and
positions anew. A transactional producer is never kept: each task's transaction starts from a
producer of its own that registers its transactional id (fencing whatever held it)."""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import AsyncIterator, Callable, Coroutine, Hashable
from typing import Any, TypeVar

from broker.client.admin import AdminClient
from broker.client.options import COMMON_OPTIONS
from pipelines.spark.options import ClientOptions

T = TypeVar("T")
C = TypeVar("C")

_pid: int | None = None
_loop: asyncio.AbstractEventLoop | None = None
_kept: dict[Hashable, Any] = {}


def _process_loop() -> asyncio.AbstractEventLoop:
    """This process' loop (a forked child starts afresh: its parent's loop and sockets are not
    its own)."""
    global _pid, _loop, _kept
    if _pid != os.getpid() or _loop is None or _loop.is_closed():
        _pid, _loop, _kept = os.getpid(), asyncio.new_event_loop(), {}
    return _loop


def run(work: Coroutine[Any, Any, T]) -> T:
    """Run `work` to its end on the process' loop, from Spark's synchronous calls."""
    return _process_loop().run_until_complete(work)


def key(kind: str, client: ClientOptions, *extra: Hashable) -> Hashable:
    # repr leaves the password out (it may reach a log); the key holds it in memory only.
    return (kind, repr(client), client.password, *extra)


def admin(client: ClientOptions) -> Callable[[], AdminClient]:
    """What makes the admin client of `client` (kept under key("admin", client))."""

    def make() -> AdminClient:
        common = {k: v for k, v in client.options.items() if k in COMMON_OPTIONS}
        return AdminClient(
            client.bootstrap_servers, client.security(), client_id="fjord-spark", **common
        )

    return make


async def admin_call(
    client: ClientOptions, work: Callable[[AdminClient], Coroutine[Any, Any, T]]
) -> T:
    """`work` with the process' admin client of `client` (see call())."""
    return await call(key("admin", client), admin(client), work)


async def _get(name: Hashable, make: Callable[[], C]) -> tuple[C, bool]:
    """The client under `name` and whether it was kept from an earlier call. Off the process'
    loop (a caller's own asyncio.run) nothing is kept: the client is for this call only."""
    on_loop = asyncio.get_running_loop() is _loop and _pid == os.getpid()
    found = _kept.get(name) if on_loop else None
    if found is not None:
        return found, True
    made = make()
    try:
        await made.start()  # type: ignore[attr-defined]
    except BaseException:
        await made.close()  # type: ignore[attr-defined]
        raise
    if on_loop:
        _kept[name] = made
    return made, False


async def _done(name: Hashable, client: Any, failed: bool) -> None:
    """After a call: a client not kept is closed, and a kept one that failed forgotten."""
    if _kept.get(name) is not client:
        await client.close()
    elif failed:
        await forget(name)


async def forget(name: Hashable) -> None:
    """Close and drop the client kept under `name`, if any."""
    client = _kept.pop(name, None)
    if client is not None:
        with contextlib.suppress(Exception):
            await client.close()


@contextlib.asynccontextmanager
async def kept(name: Hashable, make: Callable[[], C]) -> AsyncIterator[C]:
    """The started client kept under `name` (made by `make` on first use); forgotten when
    the block raises, so that a broken connection is not handed out again."""
    client, _ = await _get(name, make)
    failed = True
    try:
        yield client
        failed = False
    finally:
        await _done(name, client, failed)


async def call(
    name: Hashable, make: Callable[[], C], work: Callable[[C], Coroutine[Any, Any, T]]
) -> T:
    """`work` with the client kept under `name`; when a client kept from an earlier call fails
    (its broker restarted, its connection closed), once more with a new one. For reads, and
    for writes that may be repeated."""
    client, reused = await _get(name, make)
    try:
        result = await work(client)
    except Exception:
        await _done(name, client, True)
        if not reused:
            raise
    else:
        await _done(name, client, False)
        return result
    async with kept(name, make) as fresh:
        return await work(fresh)


def take(name: Hashable, make: Callable[[], C]) -> C:
    """For a caller that keeps a client across steps of its own (a generator): the client
    under `name`, to hand back with give_back()."""
    return run(_get(name, make))[0]


def give_back(name: Hashable, client: Any, failed: bool) -> None:
    """A client from take() after use: kept unless `failed` (closed then)."""
    if _loop is not None and _loop.is_running():
        # Called from within a call (a generator collected meanwhile): forgotten, not awaited.
        if _kept.get(name) is client:
            del _kept[name]
        return
    run(_done(name, client, failed))
