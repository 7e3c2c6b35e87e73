"""The two measures Kafka enforces quotas with, and the throttle time they imply.

`Rate` is Kafka's sampled Rate: `samples` windows of `window_ms`, each starting at its first
record; the rate is the sum over the live windows divided by the time they span, and that span
is never taken as shorter than samples - 1 whole windows, so a new client is not judged on its
first burst alone. `TokenBucket` is KIP-599's measure for controller mutations: credits refill
at the quota rate up to a burst of samples x window, and a mutation may take them below zero.
"""

from __future__ import annotations


class Rate:
    __slots__ = ("samples", "window_ms", "_starts", "_values", "_current")

    def __init__(self, samples: int, window_ms: int) -> None:
        self.samples = samples
        self.window_ms = window_ms
        self._starts: list[int] = []
        self._values: list[float] = []
        self._current = 0

    def record(self, value: float, now_ms: int) -> None:
        if not self._starts:
            self._starts.append(now_ms)
            self._values.append(0.0)
        elif now_ms - self._starts[self._current] >= self.window_ms:
            self._current = (self._current + 1) % self.samples
            if self._current >= len(self._starts):
                self._starts.append(now_ms)
                self._values.append(0.0)
            else:
                self._starts[self._current] = now_ms
                self._values[self._current] = 0.0
        self._values[self._current] += value

    def measure(self, now_ms: int) -> float:
        """Per second."""
        self._purge(now_ms)
        return sum(self._values) * 1000 / self.window_size_ms(now_ms)

    def window_size_ms(self, now_ms: int) -> int:
        elapsed = now_ms - min(self._starts, default=now_ms)
        full = elapsed // self.window_ms
        if full < self.samples - 1:
            elapsed += (self.samples - 1 - full) * self.window_ms
        return max(elapsed, 1)

    def _purge(self, now_ms: int) -> None:
        expire = self.samples * self.window_ms
        for i, start in enumerate(self._starts):
            if now_ms - start >= expire:
                self._starts[i] = now_ms
                self._values[i] = 0.0

    def throttle_ms(self, bound: float, now_ms: int) -> int:
        """How long the client must wait for its rate to fall back to `bound` (Kafka's
        QuotaUtils.throttleTime); 0 while within it."""
        rate = self.measure(now_ms)
        if rate <= bound:
            return 0
        return round((rate - bound) / bound * self.window_size_ms(now_ms))


class TokenBucket:
    __slots__ = ("burst", "rate", "_tokens", "_updated_ms")

    def __init__(self, rate: float, samples: int, window_ms: int) -> None:
        self.rate = rate
        self.burst = samples * window_ms / 1000 * rate
        self._tokens = self.burst
        self._updated_ms: int | None = None

    def tokens(self, now_ms: int) -> float:
        if self._updated_ms is not None:
            elapsed = max(now_ms - self._updated_ms, 0)
            self._tokens = min(self.burst, self._tokens + self.rate * elapsed / 1000)
        # Never back: a caller with an older clock reading must not earn the interval twice.
        self._updated_ms = max(now_ms, self._updated_ms or now_ms)
        return self._tokens

    def reconfigure(self, rate: float, now_ms: int) -> None:
        """A new quota: what was earned so far counts at the old rate, then the new one."""
        tokens = self.tokens(now_ms)
        self.burst = self.burst / self.rate * rate
        self.rate = rate
        self._tokens = min(tokens, self.burst)

    def record(self, value: float, now_ms: int) -> None:
        self._tokens = min(self.burst, self.tokens(now_ms) - value)

    def throttle_ms(self, now_ms: int) -> int:
        """The time until the credits are back to zero (KIP-599); 0 while there are some."""
        tokens = self.tokens(now_ms)
        return 0 if tokens >= 0 else round(-tokens / self.rate * 1000)
