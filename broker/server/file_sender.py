"""Writing responses that carry log data as file slices, with sendfile(2): the bytes go from
the page cache to the socket without passing through the broker's memory, as Kafka's
FileRecords.writeTo does.

uvloop's transports have no sendfile. While a response with a slice is being written, this
object writes to the socket itself, through a duplicate of its descriptor that it watches for
writability, and every later response of the connection queues behind it, so the stream keeps
its order. It starts only once the transport's own buffer is empty, and the transport writes
again once this queue is.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections import deque
from collections.abc import Callable

from broker.storage.file_slice import FileSlice, close_slices

log = logging.getLogger("broker.server.file_sender")

# writev takes at most IOV_MAX (1024 on Linux) buffers.
_MAX_BUFFERS = 1024


class FileSender:
    def __init__(
        self,
        transport: asyncio.Transport,
        on_idle: Callable[[], None],
        on_error: Callable[[], None],
    ) -> None:
        self._transport = transport
        self._fd = -1
        self._parts: deque[bytes | memoryview | FileSlice] = deque()
        self._sent = 0  # of the first part
        self._watching = False
        self._on_idle = on_idle
        self._on_error = on_error
        # Whether responses are queued here, so later ones must queue behind them (an
        # attribute, not a property: the connection asks on every request).
        self.busy = False

    def write(self, parts: list[bytes | memoryview | FileSlice]) -> None:
        self._parts.extend(parts)
        self.busy = True
        if not self._watching:
            self._send()

    def close(self) -> None:
        """The connection is gone: drop what is queued."""
        self._unwatch()
        close_slices(self._parts)
        self._parts.clear()
        self.busy = False
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def _send(self) -> None:
        if self._transport.is_closing():
            self._unwatch()  # connection_lost drops the rest
            return
        parts = self._parts
        try:
            if self._fd < 0:
                self._fd = os.dup(self._transport.get_extra_info("socket").fileno())
            if self._transport.get_write_buffer_size():
                raise BlockingIOError  # the transport's own buffer goes out first
            while parts:
                head = parts[0]
                if type(head) is FileSlice:
                    sent = os.sendfile(
                        self._fd, head.fd, head.position + self._sent, head.size - self._sent
                    )
                    if sent == 0:
                        # The log was truncated under the slice (a leader turned follower):
                        # as with Kafka's FileRecords, the bytes are read when sent, not when
                        # the response was made.
                        raise OSError("segment file truncated while being sent")
                    self._sent += sent
                    if self._sent == head.size:
                        parts.popleft().close()
                        self._sent = 0
                else:
                    self._write_buffers()
        except BlockingIOError:
            self._watch()
            return
        except OSError as e:
            # The response's length is already on the wire: the stream cannot be repaired.
            log.info("closing connection: sending a response failed: %s", e)
            self.close()
            self._on_error()
            return
        self.busy = False
        self._unwatch()
        self._on_idle()

    def _write_buffers(self) -> None:
        """writev of the buffers at the head of the queue, up to the next slice."""
        parts = self._parts
        buffers: list[bytes | memoryview] = []
        for part in parts:
            if type(part) is FileSlice or len(buffers) == _MAX_BUFFERS:
                break
            buffers.append(part)
        if self._sent:
            buffers[0] = memoryview(buffers[0])[self._sent :]
        written = os.writev(self._fd, buffers) + self._sent
        while parts and type(parts[0]) is not FileSlice and written >= len(parts[0]):
            written -= len(parts.popleft())
        self._sent = written
        if written:
            raise BlockingIOError  # a short write: the socket's buffer is full

    def _watch(self) -> None:
        if not self._watching:
            asyncio.get_running_loop().add_writer(self._fd, self._send)
            self._watching = True

    def _unwatch(self) -> None:
        if self._watching:
            asyncio.get_running_loop().remove_writer(self._fd)
            self._watching = False
