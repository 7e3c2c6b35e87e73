"""Runs rdkafka_performance and reads its final summary line.

With -q the example prints one summary line, at the end, with integer counts and its own
microsecond-based rates; that line is all we parse.
"""

import re
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

# librdkafka defaults made explicit, except where noted, so both brokers see identical requests.
PRODUCER_CONFIG = {
    "acks": "1",
    "compression.codec": "none",
    # Bounded by bytes (1 MB, under Kafka's default message.max.bytes), never by record count.
    "batch.size": "1000000",
    "batch.num.messages": "100000",
    # The example's own default is 1000 ms, which parks the last partial batch for a second.
    "linger.ms": "5",
    # Room for the whole in-flight window so the generator's backpressure sleeps stay out of it.
    "queue.buffering.max.messages": "1000000",
}
# One request per record: the latency test measures the broker, not the client's batching.
LATENCY_CONFIG = {**PRODUCER_CONFIG, "linger.ms": "0"}

PRODUCED = re.compile(
    r"^% (?P<produced>\d+) messages produced \((?P<bytes>\d+) bytes\), (?P<delivered>\d+) delivered "
    r"\(offset -?\d+, (?P<failed>\d+) failed\) in (?P<ms>\d+)ms: (?P<rps>\d+) msgs/s and "
    r"(?P<mbps>[\d.]+) MB/s",
    re.MULTILINE,
)
CONSUMED = re.compile(
    r"^% (?P<consumed>\d+) messages \((?P<bytes>\d+) bytes\) consumed in (?P<ms>\d+)ms: "
    r"(?P<rps>\d+) msgs/s \((?P<mbps>[\d.]+) MB/s\)",
    re.MULTILINE,
)


class LoadError(RuntimeError):
    pass


@dataclass(frozen=True)
class Throughput:
    records: int
    seconds: float
    records_per_s: float
    mb_per_s: float  # payload bytes, 10^6 per MB, as rdkafka_performance counts them


@dataclass
class LoadGenerator:
    binary: Path
    bootstrap: str
    timeout_s: float

    def produce(
        self, topic: str, size: int, count: int, acks: str = PRODUCER_CONFIG["acks"]
    ) -> Throughput:
        output = self._run(
            ["-P", "-t", topic, "-s", str(size), "-c", str(count)],
            {**PRODUCER_CONFIG, "acks": acks},
        )
        match = _last(PRODUCED, output)
        if int(match["delivered"]) != count or int(match["failed"]):
            raise LoadError(f"{match['delivered']} of {count} delivered, {match['failed']} failed")
        return _throughput(match, count)

    def consume(self, topic: str, partitions: int, count: int) -> Throughput:
        args = ["-C", "-t", topic, "-o", "beginning", "-c", str(count), "-e"]
        for partition in range(partitions):
            args += ["-p", str(partition)]
        match = _last(CONSUMED, self._run(args, {}))
        if int(match["consumed"]) != count:
            raise LoadError(f"consumed {match['consumed']} of {count} records")
        return _throughput(match, count)

    def produce_latencies_us(self, topic: str, size: int, rate: int, count: int) -> list[int]:
        """Per-record delivery latency: from produce() to the broker's acknowledgement."""
        with tempfile.NamedTemporaryFile(prefix="bench-latency-", suffix=".txt") as samples:
            args = ["-P", "-t", topic, "-s", str(size), "-c", str(count), "-r", str(rate), "-l"]
            output = self._run(args + ["-A", samples.name], LATENCY_CONFIG)
            match = _last(PRODUCED, output)
            if int(match["delivered"]) != count or int(match["failed"]):
                raise LoadError(
                    f"{match['delivered']} of {count} delivered, {match['failed']} failed"
                )
            latencies = [int(line) for line in Path(samples.name).read_text().split()]
        if len(latencies) != count:
            raise LoadError(f"{len(latencies)} latency samples for {count} records")
        return latencies

    def _run(self, args: list[str], config: dict[str, str]) -> str:
        argv = [str(self.binary), "-b", self.bootstrap, "-q", *args]
        for key, value in config.items():
            argv += ["-X", f"{key}={value}"]
        try:
            result = subprocess.run(argv, capture_output=True, text=True, timeout=self.timeout_s)
        except subprocess.TimeoutExpired as error:
            raise LoadError(
                f"rdkafka_performance timed out after {self.timeout_s:.0f} s"
            ) from error
        # Its exit code is not trusted: the producer subtracts rd_kafka_outq_len(), which also
        # counts pending events such as statistics, and so can fail a run that delivered every
        # record. Callers check the summary's counts instead.
        return result.stdout + result.stderr


def _last(pattern: re.Pattern, output: str) -> re.Match:
    matches = list(pattern.finditer(output))
    if not matches:
        raise LoadError(f"no summary line in rdkafka_performance output: {_tail(output)}")
    return matches[-1]


def _throughput(match: re.Match, count: int) -> Throughput:
    return Throughput(
        records=count,
        seconds=int(match["ms"]) / 1000,
        records_per_s=float(match["rps"]),
        mb_per_s=float(match["mbps"]),
    )


def _tail(text: str, lines: int = 15) -> str:
    return "\n" + "\n".join(text.strip().splitlines()[-lines:])
