"""Fjord/Tansu ratios, the issue's targets, and the results written to bench/results/."""

import json
from collections.abc import Callable
from pathlib import Path

from bench.workload import METRICS, Metric

RESULTS_DIR = Path(__file__).resolve().parent / "results"
TARGETS = "throughput Fjord/Tansu >= 1.0, p99 latency <= 2x Tansu"


def compare(brokers: dict[str, dict]) -> dict[str, dict]:
    """Per metric: the Fjord/Tansu ratio and whether it meets the issue's target."""
    comparison = {}
    for metric in METRICS:
        fjord, tansu = (_value(brokers[name], metric.key) for name in ("fjord", "tansu"))
        ratio = fjord / tansu if fjord is not None and tansu else None
        met = None
        if ratio is not None and metric.target_ratio is not None:
            met = (
                ratio >= metric.target_ratio
                if metric.higher_is_better
                else ratio <= metric.target_ratio
            )
        comparison[metric.key] = {
            "ratio": ratio,
            "target_ratio": metric.target_ratio,
            "target_met": met,
        }
    return comparison


def markdown(result: dict) -> str:
    brokers, comparison = result["brokers"], result["comparison"]
    # Fjord at other revisions (--against), each with this revision's ratio to it.
    others = [name for name in brokers if name not in ("fjord", "tansu")]
    lines = [
        f"# Fjord vs Tansu: {result['label']}",
        "",
        f"{result['timestamp']} on {result['machine']['cpus']} CPUs ({result['machine']['cpu_model']}), "
        f"load generator rdkafka_performance on librdkafka {result['versions']['librdkafka']}, "
        f"Tansu {result['versions']['tansu']}, Fjord at {result['versions']['fjord_commit']}.",
        f"Fjord stores to {brokers['fjord']['storage']}, Tansu to {brokers['tansu']['storage']}; "
        f"{result['workload']['partitions']} partitions, acks=1, no compression, batches up to 1 MB, "
        "each test on a freshly started broker after a warm-up, throughput and latency the "
        f"median of {result['workload']['repetitions']} run(s), the brokers taking turns run "
        "by run.",
        "",
        "| metric | Fjord | Tansu | Fjord/Tansu |"
        + "".join(f" {name} | Fjord/{name} |" for name in others),
        "|---|---:|---:|---:|" + "---:|---:|" * len(others),
    ]
    for metric in METRICS:
        cells = [_cell(brokers[name], metric) for name in ("fjord", "tansu")]
        ratio = comparison[metric.key]["ratio"]
        ratio_cell = "n/a" if ratio is None else f"{ratio:.2f}"
        row = f"| {metric.label} ({metric.unit}) | {cells[0]} | {cells[1]} | {ratio_cell} |"
        for name in others:
            fjord, other = _value(brokers["fjord"], metric.key), _value(brokers[name], metric.key)
            ratio_cell = "n/a" if fjord is None or not other else f"{fjord / other:.2f}"
            row += f" {_cell(brokers[name], metric)} | {ratio_cell} |"
        lines.append(row)
    lines += ["", targets_line(comparison)]
    for name in brokers:
        if brokers[name]["status"] != "ok":
            lines.append(f"{name}: {brokers[name]['status']}")
    return "\n".join(lines) + "\n"


def targets_line(comparison: dict[str, dict]) -> str:
    verdicts: dict[bool | None, list[str]] = {True: [], False: [], None: []}
    for metric in METRICS:
        names = verdicts[comparison[metric.key]["target_met"]]
        # MB/s and records/s of one test share a ratio; name the test once.
        if metric.target_ratio is not None and metric.label not in names:
            names.append(metric.label)
    parts = [
        f"{heading}: {', '.join(names)}"
        for heading, names in (
            ("within", verdicts[True]),
            ("missed", verdicts[False]),
            ("not measured", verdicts[None]),
        )
        if names
    ]
    return f"Targets ({TARGETS}): " + "; ".join(parts) + "."


def write(result: dict, stem: str, render: Callable[[dict], str] = markdown) -> tuple[Path, Path]:
    """The result as <timestamp><stem>.json and, rendered, as latest<stem>.md."""
    RESULTS_DIR.mkdir(exist_ok=True)
    json_path = RESULTS_DIR / f"{result['timestamp'].replace(':', '')}{stem}.json"
    json_path.write_text(json.dumps(result, indent=2) + "\n")
    markdown_path = RESULTS_DIR / f"latest{stem}.md"
    markdown_path.write_text(render(result))
    return json_path, markdown_path


def _value(broker: dict, key: str) -> float | None:
    return broker.get("metrics", {}).get(key, {}).get("value")


def _cell(broker: dict, metric: Metric) -> str:
    entry = broker.get("metrics", {}).get(metric.key)
    if entry is None:
        return "n/a"
    if "error" in entry:
        return "failed"
    value = entry["value"]
    if metric.unit == "records/s":
        return f"{value:,.0f}"
    if metric.unit == "ms":
        return f"{value:.2f}"
    return f"{value:,.1f}"
