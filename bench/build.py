"""Builds librdkafka's rdkafka_performance example into bench/.build/ on demand.

The source comes from Debian's librdkafka-dev; it is linked against the librdkafka that ships
inside the confluent-kafka wheel, so the load generator is the same client library the tests use.
"""

import gzip
import hashlib
import os
import re
import shutil
import subprocess
from pathlib import Path

import confluent_kafka

BENCH_DIR = Path(__file__).resolve().parent
BUILD_DIR = BENCH_DIR / ".build"
BINARY = BUILD_DIR / "rdkafka_performance"
# rd.h and rdtime.h, librdkafka-internal headers the example includes as "rd.h" and
# "../src/rd.h"; living in a folder named src/ makes both spellings resolve to them.
SHIM_DIR = BENCH_DIR / "src"
HEADER = Path("/usr/include/librdkafka/rdkafka.h")
EXAMPLES = Path("/usr/share/doc/librdkafka-dev/examples")
WHEEL_LIBS = Path(confluent_kafka.__file__).resolve().parent.parent / "confluent_kafka.libs"


class BuildError(RuntimeError):
    pass


def loadgen() -> Path:
    """The path of a rdkafka_performance binary built from the current inputs."""
    source = _example_source()
    library = _wheel_library()
    _check_abi(library)
    command = [
        "gcc",
        "-O2",
        "-Wall",
        "-iquote",
        str(SHIM_DIR),
        "-I",
        str(HEADER.parent),
        "-o",
        str(BINARY),
        str(BUILD_DIR / "rdkafka_performance.c"),
        str(library),
        f"-Wl,-rpath,{library.parent}",
    ]
    inputs = hashlib.sha256(source + " ".join(command).encode())
    for shim in sorted(SHIM_DIR.glob("*.h")):
        inputs.update(shim.read_bytes())
    stamp = BUILD_DIR / "rdkafka_performance.sha256"
    if BINARY.exists() and stamp.exists() and stamp.read_text() == inputs.hexdigest():
        return BINARY
    BUILD_DIR.mkdir(exist_ok=True)
    (BUILD_DIR / "rdkafka_performance.c").write_bytes(source)
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0:
        raise BuildError(f"gcc failed building rdkafka_performance:\n{result.stderr}")
    stamp.write_text(inputs.hexdigest())
    return BINARY


def _example_source() -> bytes:
    if not _find_example():
        _install_librdkafka_dev()
    found = _find_example()
    if not found:
        raise BuildError(f"librdkafka-dev is installed but {EXAMPLES} has no rdkafka_performance.c")
    if found.suffix == ".gz":
        return gzip.decompress(found.read_bytes())
    return found.read_bytes()


def _find_example() -> Path | None:
    for name in ("rdkafka_performance.c", "rdkafka_performance.c.gz"):
        if (EXAMPLES / name).exists() and HEADER.exists():
            return EXAMPLES / name
    return None


def _install_librdkafka_dev() -> None:
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        raise BuildError(
            "rdkafka_performance.c is missing: install the Debian package librdkafka-dev"
        )
    print(
        "installing librdkafka-dev (Debian package) for the rdkafka_performance source", flush=True
    )
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for command in (
        ["apt-get", "update", "-qq"],
        ["apt-get", "install", "-y", "-qq", "librdkafka-dev"],
    ):
        subprocess.run(command, check=True, env=env, stdout=subprocess.DEVNULL)


def _wheel_library() -> Path:
    candidates = sorted(WHEEL_LIBS.glob("librdkafka*.so*"))
    if not candidates:
        raise BuildError(f"no librdkafka shared library in {WHEEL_LIBS}")
    return candidates[0]


def _check_abi(library: Path) -> None:
    # librdkafka keeps its ABI backward compatible within a major version, so the example may
    # be compiled against older Debian headers and run on the wheel's newer library.
    match = re.search(r"#define RD_KAFKA_VERSION\s+(0x[0-9a-fA-F]+)", HEADER.read_text())
    if not match:
        raise BuildError(f"no RD_KAFKA_VERSION in {HEADER}")
    header_version = int(match.group(1), 16)
    library_name, library_version = confluent_kafka.libversion()
    if header_version >> 24 != library_version >> 24 or header_version > library_version:
        raise BuildError(
            f"{HEADER} is librdkafka {header_version:#x}, newer than or a different major "
            f"version from the wheel's {library_name} ({library})"
        )
