"""bench.drain_peers' rounds: each round's Lakeline-to-peer ratios and their medians (no stack)."""

from __future__ import annotations

import pytest

from bench.drain_peers import main, round_ratios


def _drain(system: str, fmt: str, per_s: int, cpu: float) -> dict:
    return {"system": system, "format": fmt, "records_per_s": per_s, "cpu_s_per_million": cpu}


def test_each_round_compares_lakeline_with_the_peer_of_its_format_and_the_median_reads_across_rounds():
    rounds = [[_drain("lakeline", "delta", 50_000, 40.0), _drain("spark-delta", "delta", 40_000, 50.0),
               _drain("spark-iceberg", "iceberg", 30_000, 60.0)],  # no Lakeline into Iceberg: no ratio
              [_drain("spark-delta", "delta", 60_000, 35.0), _drain("lakeline", "delta", 54_000, 42.0),
               _drain("spark-iceberg", "iceberg", 30_000, 60.0)],
              [_drain("lakeline", "delta", 44_000, 44.0), _drain("spark-delta", "delta", 40_000, 44.0),
               _drain("spark-iceberg", "iceberg", 30_000, 60.0)]]
    assert round_ratios(rounds) == [{"peer": "spark-delta", "lakeline_speed_ratios": [1.25, 0.9, 1.1],
                                     "lakeline_cpu_ratios": [0.8, 1.2, 1.0], "median_speed_ratio": 1.1,
                                     "median_cpu_ratio": 1.0}]


def test_zero_rounds_is_refused_before_anything_starts(capsys):
    with pytest.raises(SystemExit):
        main(["--rounds", "0"])
    assert "--rounds must be at least 1" in capsys.readouterr().err
