"""The broker keeps large request buffers in the heap: a megabyte-sized buffer is not a fresh
mapping that the kernel faults in and zeroes page by page for every request."""

import subprocess
import sys

import pytest

# Run in a child: the allocator's settings are the whole process's. The child reports how
# many chunks glibc holds as mappings of their own (mallinfo2's hblks) while three 2 MB buffers
# (a produce request of a common client is about 1 MB) are alive, beyond those mapped before.
PROBE = """
import ctypes, sys
from broker.server.allocator import keep_large_buffers

class MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd",
        "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost")]

libc = ctypes.CDLL(None)
libc.mallinfo2.restype = MallInfo2
tuned = keep_large_buffers() if sys.argv[1] == "tuned" else None
before = libc.mallinfo2().hblks
buffers = [bytearray(2 * 1024 * 1024) for _ in range(3)]
print(tuned, libc.mallinfo2().hblks - before)
"""


def _mapped_chunks(mode: str) -> tuple[str, int]:
    out = subprocess.run(
        [sys.executable, "-c", PROBE, mode], capture_output=True, text=True, check=True
    ).stdout.split()
    return out[0], int(out[1])


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's allocator")
def test_large_buffers_come_from_the_heap():
    assert _mapped_chunks("default") == ("None", 3)  # glibc's default: a mapping each
    assert _mapped_chunks("tuned") == ("True", 0)
