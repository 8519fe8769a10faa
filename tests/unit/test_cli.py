"""The `lakeline` command group: its help is true (exit codes, --events), errors map to their exit codes, and the
human per-batch line is rendered from the batch event."""

from __future__ import annotations

import pytest

from ingest.errors import ExitCode
from ingest.events import BatchCommitted, BatchReplayed, human_line
from lakeline.cli import build_parser, main


def test_help_lists_every_exit_code_and_its_meaning():
    text = build_parser().format_help()
    for code in ExitCode:
        assert f"{int(code):>3}  {code.meaning}" in text


def test_ingest_help_offers_the_event_stream(capsys):
    with pytest.raises(SystemExit) as done:
        main(["ingest", "--help"])
    assert done.value.code == 0
    assert "--events FILE|-" in capsys.readouterr().out


def test_a_config_error_exits_with_the_usage_code_and_names_the_file(tmp_path, capsys):
    missing = tmp_path / "missing.yaml"
    assert main(["check-config", "--pipeline", str(missing)]) == ExitCode.USAGE
    assert str(missing) in capsys.readouterr().err


def test_the_batch_line_is_rendered_from_the_event():
    event = BatchCommitted(pipeline="p", batch_id=4, rows=990, dead_letters=10, input_rows=1000, seconds=2.5,
                           phases={"scan": 1.0, "dlq": 0.5, "table": 1.0}, lag=0,
                           spark_phases={"trigger": 3.0, "offsets": 0.1, "wal": 0.2, "batch": 2.6, "commit": 0.1})
    assert human_line(event) == ("[p] batch 4: rows=990 dead_letters=10 input=1000 took=2.50s (scan 1.00, dlq 0.50, "
                                 "table 1.00) lag=0 spark(trigger 3.00: offsets 0.10, wal 0.20, batch 2.60, "
                                 "commit 0.10)")
    replayed = BatchReplayed(pipeline="p", batch_id=2, input_rows=7, seconds=0.01, lag=None)
    assert human_line(replayed) == "[p] batch 2: replayed, already in table input=7 took=0.01s lag=?"


def _rendered(renderable) -> str:
    from rich.console import Console

    console = Console(width=200, record=True, file=open("/dev/null", "w"))
    console.print(renderable)
    return console.export_text()


def test_reconcile_and_drill_results_render_as_tables_that_name_what_went_wrong():
    from ingest.reconcile import ReconcileReport
    from lakeline import render
    from maintenance.drill import DrillReport, ScenarioReport

    report = ReconcileReport("orders", produced=1000, rows=989, dead_letters=10, duplicates=0, missing=1,
                             out_of_range=0, dead_letters_by_reason={"malformed_json": 10},
                             missing_sample=[{"partition": 0, "offset": 17}])
    text = _rendered(render.reconcile(report))
    assert text.startswith("reconcile orders: NOT EXACT")
    assert "produced" in text and "1,000" in text and "'offset': 17" in text
    drill = DrillReport("orders", "r1", "2026-11-24T00:00:00+00:00", [
        ScenarioReport("kill", "delta", produced=3000, rows=2970, dead_letters=30, passed=True, start_plan="resume: x"),
        ScenarioReport("stale-restore", "delta", produced=3000, missing=2, problems=["2 events missing"])])
    lines = _rendered(render.drill(drill)).splitlines()
    kill = next(line for line in lines if line.startswith("kill"))
    assert kill.split()[-2:] == ["resume", "PASSED"] and "2970" in kill.split()
    assert "  ! stale-restore: 2 events missing" in lines and lines[-1] == "drill FAILED"


def test_a_command_logs_to_stderr_and_keeps_stdout_for_its_result(tmp_path, capsys):
    import logging

    from lakeline import logs

    handler = logs.configure()
    try:
        logging.getLogger("maintenance.compaction").info("  1/2 date=2026-11-20: compacted")
        logging.getLogger("py4j.clientserver").info("noise below WARNING")
        logging.getLogger("ingest.produce").warning("slow broker")
    finally:
        logging.getLogger().removeHandler(handler)  # it writes to this test's captured stderr
    captured = capsys.readouterr()
    assert captured.out == ""
    assert "  1/2 date=2026-11-20: compacted" in captured.err and "noise" not in captured.err
    assert "warning: slow broker" in captured.err


@pytest.mark.parametrize(("argv", "expected"), [
    (["checkpoint", "repair", "--pipeline", "p.yaml", "--apply", "--force"],
     {"action": "repair", "pipeline": "p.yaml", "apply": True, "force": True}),
    (["checkpoint", "verify", "--pipeline", "p.yaml", "--backup", "000000000007-x"],
     {"action": "verify", "backup": "000000000007-x"}),
    (["dead-letters", "show", "--pipeline", "p.yaml", "--reason", "type_mismatch"],
     {"action": "show", "reason": "type_mismatch", "limit": 20}),
    (["schema", "infer", "--pipeline", "p.yaml", "--sample", "5"], {"action": "infer", "sample": 5}),
    (["dev", "up", "--spark-workers", "2"], {"action": "up", "spark_workers": 2, "iceberg_catalog": "sql"}),
    (["dev", "class-archive", "--force"], {"action": "class-archive", "force": True})])
def test_actions_keep_their_spelling_and_take_their_own_flags(argv, expected):
    args = vars(build_parser().parse_args(argv))
    assert {key: args[key] for key in expected} == expected


@pytest.mark.parametrize(("argv", "flag"), [
    (["checkpoint", "backup", "--pipeline", "p.yaml", "--apply"], "--apply"),
    (["checkpoint", "list", "--pipeline", "p.yaml", "--backup", "x"], "--backup"),
    (["dead-letters", "show", "--pipeline", "p.yaml", "--apply"], "--apply"),
    (["schema", "diff", "--pipeline", "p.yaml", "--sample", "5"], "--sample"),
    (["dev", "down", "--spark-workers", "2"], "--spark-workers")])
def test_a_flag_given_to_another_action_fails_with_usage_naming_it(argv, flag, capsys):
    with pytest.raises(SystemExit) as done:
        main(argv)
    assert done.value.code == ExitCode.USAGE
    assert f"unrecognized arguments: {flag}" in capsys.readouterr().err


def test_flags_before_the_action_fail_saying_the_action_comes_first(capsys):
    with pytest.raises(SystemExit) as done:
        main(["checkpoint", "--pipeline", "p.yaml", "backup"])
    assert done.value.code == ExitCode.USAGE
    assert "the action comes first, then its flags: lakeline checkpoint ACTION [flags]" in capsys.readouterr().err


def test_action_help_lists_only_its_own_flags(capsys):
    with pytest.raises(SystemExit) as done:
        main(["checkpoint", "repair", "--help"])
    assert done.value.code == 0
    text = capsys.readouterr().out
    assert "--apply" in text and "--force" in text and "--backup" not in text
    with pytest.raises(SystemExit):
        main(["checkpoint", "--help"])
    listing = capsys.readouterr().out
    assert all(f"\n    {action} " in listing for action in ("backup", "verify", "restore", "repair", "list")), listing
