"""`python -m bench`: Fjord measured against Tansu in the same run, on the same machine,
with librdkafka's rdkafka_performance as the load generator (see DESIGN.md, Benchmarks)."""
