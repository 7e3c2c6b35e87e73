"""The broker as a process: start-up line, fail-fast configuration, clean SIGTERM shutdown."""

from __future__ import annotations

from broker_process import run_broker


def test_invalid_configuration_exits_with_a_clear_message(tmp_path):
    result = run_broker(
        "--override", "log.segment.bytes=tiny", "--override", f"log.dirs={tmp_path}"
    )
    assert result.returncode == 2
    assert "Invalid value tiny for configuration log.segment.bytes" in result.stderr


def test_unknown_property_in_a_file_is_rejected(tmp_path):
    props = tmp_path / "server.properties"
    props.write_text("log.dirs=/tmp/x\nlog.segmnet.bytes=1000\n")
    result = run_broker(str(props))
    assert result.returncode == 2
    assert "Unknown configuration 'log.segmnet.bytes'" in result.stderr


def test_sigterm_shuts_down_cleanly_and_restart_skips_recovery(make_broker_process, tmp_path):
    broker = make_broker_process().start()
    assert broker.stop() == 0
    output = "".join(broker.output)
    assert "stopped cleanly" in output
    assert (broker.log_dir / ".kafka_cleanshutdown").exists()
    assert (broker.log_dir / "recovery-point-offset-checkpoint").exists()
    broker.start()
    assert broker.stop() == 0
