"""What the control-plane tests check of a broker's own event loop and garbage collector
figures (api.metrics.BROKER_FIELDS), in a summary or its row of a sample's "endpoints"."""

from __future__ import annotations

from polling import wait_for

from api import metrics

WAIT_S = 30


def event_loop_timed(metrics_url: str) -> None:
    """Return once the broker's event loop timer has ticked (0.1 s after it started): before,
    its mean lag is the mean of nothing."""
    wait_for(
        lambda: (
            metrics.summarize(metrics.scrape(metrics_url))["event_loop_lag_mean_ms"] is not None
        ),
        WAIT_S,
        "the broker's event loop timed once",
    )


def assert_event_loop_figures(figures: dict) -> None:
    """A broker whose event loop was timed: lags and pauses in ms, its collections counted (one
    of the oldest generation counts in both counts)."""
    assert figures["event_loop_lag_max_ms"] >= 0
    assert figures["event_loop_lag_mean_ms"] >= 0
    full = figures["gc_gen2_collections_total"]
    assert isinstance(full, int | float) and full >= 0 and full == int(full)
    assert figures["gc_collections_total"] >= full
    assert figures["gc_gen2_pause_time_ms_total"] >= 0
    # The mean of no collection is none.
    assert (figures["gc_gen2_pause_mean_ms"] is None) == (full == 0)
    if full:
        assert figures["gc_gen2_pause_mean_ms"] >= 0
    assert figures["gc_frozen_objects"] >= 0
