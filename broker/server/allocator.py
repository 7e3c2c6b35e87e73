"""How the broker process asks the C allocator for memory.

Every produce request of a common client is a buffer of about a megabyte, read in, decoded,
written to the log and dropped; a follower's fetch responses are up to
replica.fetch.response.max.bytes each. glibc serves allocations above its mmap threshold (128 KB
at start, raised only after such a buffer is freed) with fresh mappings and unmaps them on free,
so each page of every request is faulted in and zeroed by the kernel again, and on a virtual
machine whose host reclaims freed memory, faulted in by the host too. Measured on one broker
taking 1 KB records: half its CPU, 420 MB/s where heap-kept buffers give 700 MB/s. Buffers up to
MMAP_THRESHOLD come from the heap instead, and up to TRIM_THRESHOLD of free heap is kept for
the next request rather than handed back at once; larger frames (over framing.LAZY_FRAME) are
mapped by the framing code itself, page by page as they arrive.
"""

from __future__ import annotations

import ctypes
import logging

log = logging.getLogger(__name__)

# mallopt's parameter numbers, from glibc's malloc.h.
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3

MMAP_THRESHOLD = 16 * 1024 * 1024
TRIM_THRESHOLD = 64 * 1024 * 1024


def keep_large_buffers() -> bool:
    """Tune glibc's malloc as above; False where the C library is not glibc (musl, macOS),
    whose allocators have no such knobs and are left as they are."""
    # The symbols the process has loaded (its C library's among them), without looking the
    # library up on disk.
    mallopt = getattr(ctypes.CDLL(None), "mallopt", None)
    if mallopt is None:
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    # mallopt returns 1 on success; setting either turns glibc's own adjustment off.
    done = mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD) == 1
    done = mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD) == 1 and done
    if not done:
        log.warning("the C library refused the allocator settings; large buffers stay mapped")
    return done
