"""The cross-benchmark summary table: Lakeline against each peer as a ratio, and a loud note when a run was not
exact (except delta-rs after a kill, which is at-least-once by design)."""

from bench.summary import exactness, render


def _docs(lakeline_exact=True, deltars_exact=False):
    latency = [{"system": s, "rate": rate, "latency_p50": p50, "latency_p99": p50 * 2, "median_commit_gap_s": gap,
                "exact": True}
               for rate in (20, 20000)
               for s, p50, gap in (("lakeline", 1.0, 0.5), ("spark-delta", 2.0, 1.0), ("delta-rs", 0.25, 0.25))]
    recovery = [{"system": "lakeline", "recovery_s": 30.0, "exact": lakeline_exact},
                {"system": "spark-delta", "recovery_s": 60.0, "exact": True},
                {"system": "delta-rs", "recovery_s": 10.0, "exact": deltars_exact}]
    return {"latency": {"at": "t1", "command": "python -m bench.latency", "results": latency},
            "recovery": {"at": "t2", "command": "python -m bench.recovery", "results": recovery}}


def test_ratios_are_lakeline_over_each_peer_and_targets_sit_on_the_20k_row():
    table = render(_docs())
    row = next(line for line in table.splitlines() if "p50 s at 20,000" in line).split(" | ")
    assert row[1:9] == ["1.00", "2.00", "0.25", "-", "0.50x", "4.00x", "-", " |"]  # no Flink in a Delta run
    trickle = next(line for line in table.splitlines() if "p50 s at 20 msg/s" in line)
    assert trickle.endswith("| 0.50x | 4.00x | - | <= 1.5x delta-rs |")
    gap = next(line for line in table.splitlines() if "commit gap" in line)
    assert "at 20 msg/s" in gap and "0.50x" in gap and "2.00x" in gap
    assert "recovery s after kill -9 (lakeline) | 30.0 | 60.0 | 10.0 | - | 0.50x | 3.00x | - | <= 20 s" in table


def test_a_run_that_was_not_exact_is_named_but_delta_rs_after_a_kill_is_not():
    assert exactness(_docs()) == "every system exact in every run"  # rendered capitalised under the table
    assert exactness(_docs(lakeline_exact=False)) == "NOT exact: recovery: lakeline"


def test_a_run_without_a_trickle_rate_has_no_fixed_cost_row():
    docs = _docs()
    docs["latency"]["results"] = [r for r in docs["latency"]["results"] if r["rate"] == 20000]
    table = render(docs)
    assert "p50 s at 20,000" in table
    assert "commit gap" not in table  # a 20,000 msg/s commit gap is the batch size, not the fixed cost


def test_a_steady_state_latency_run_gets_rows_of_its_own_labelled_by_warm_up():
    docs = _docs()
    steady = {**docs["latency"], "benchmark": "latency", "warmup_s": 120,
              "results": [{**r, "latency_p50": r["latency_p50"] / 2} for r in docs["latency"]["results"]]}
    docs["latency (120 s warm-up)"] = steady
    lines = render(docs).splitlines()
    first = next(line for line in lines if "p50 s at 20,000 msg/s |" in line)
    second = next(line for line in lines if "p50 s at 20,000 msg/s, after 120 s warm-up |" in line)
    assert "| 1.00 | 2.00 |" in first and "| 0.50 | 1.00 | 0.12 |" in second
    assert second.endswith("| <= 3.0x delta-rs |")  # the steady-state target sits on the warmed-up row


def test_iceberg_drain_rows_compare_lakeline_with_plain_sparks_and_flinks_iceberg_sinks():
    drained = [{"system": system, "records_per_s": rate, "cpu_s_per_million": cpu, "exact": True}
               for system, rate, cpu in (("lakeline", 60000, 30.0), ("spark-delta", 50000, 25.0),
                                         ("delta-rs", 80000, 10.0), ("lakeline-iceberg", 90000, 20.0),
                                         ("spark-iceberg", 45000, 40.0), ("flink-iceberg", 60000, 10.0))]
    docs = {"drain-peers": {"at": "t", "command": "python -m bench.drain_peers", "results": drained}}
    lines = render(docs).splitlines()
    delta = next(line for line in lines if "records/s (1M clean, Delta)" in line)
    iceberg = next(line for line in lines if "records/s (1M clean, Iceberg)" in line).split(" | ")
    assert "| 60,000 | 50,000 | 80,000 | - | 1.20x | 0.75x | - | >= 1.2x plain Spark |" in delta
    assert iceberg[1:9] == ["90,000", "45,000", "-", "60,000", "2.00x", "-", "1.50x", "ahead of Flink |"]
    cpu = next(line for line in lines if "CPU s per 1M (Iceberg)" in line)
    assert "| 20.0 | 40.0 | - | 10.0 | 0.50x | - | 2.00x |" in cpu


def test_iceberg_latency_rows_compare_with_flink_and_a_kinesis_drain_gets_its_row():
    latency = [{"system": s, "rate": 20, "latency_p50": p50, "latency_p99": p50 * 2, "median_commit_gap_s": p50,
                "exact": True} for s, p50 in (("lakeline-iceberg", 0.5), ("spark-iceberg", 1.0),
                                              ("flink-iceberg", 0.8))]
    kinesis = [{"format": "delta", "records_per_s": 9000, "exact": True}]
    docs = {"latency-iceberg": {"benchmark": "latency-iceberg", "at": "t", "command": "c", "results": latency},
            "drain-kinesis": {"benchmark": "drain-kinesis", "at": "t", "command": "c", "shards": 4,
                              "results": kinesis}}
    lines = render(docs).splitlines()
    p50 = next(line for line in lines if "p50 s at 20 msg/s, Iceberg" in line)
    assert p50.endswith("| 0.50 | 1.00 | - | 0.80 | 0.50x | - | 0.62x | ahead of Flink |")
    row = next(line for line in lines if "Kinesis" in line)
    assert "(delta, 4 shards, Lakeline only) | 9,000 |" in row and row.endswith(">= 10,000 rec/s |")


def test_sources_name_their_machine_when_the_runs_were_made_on_more_than_one():
    docs = _docs()
    docs["latency"]["machine"] = {"cpu_model": "Intel(R) Xeon(R) Processor"}
    docs["recovery"]["machine"] = {"cpu_model": "AMD EPYC"}
    table = render(docs)
    assert "at t1 on Intel(R) Xeon(R) Processor" in table and "at t2 on AMD EPYC" in table
    docs["recovery"]["machine"] = docs["latency"]["machine"]
    assert " on Intel" not in render(docs)  # one machine: said once, above the table
