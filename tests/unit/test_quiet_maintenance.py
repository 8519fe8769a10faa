"""Maintenance yields to the stream (priority and cores of a maintenance command) and library noise stays out of
the output: the pieces that decide it, without a JVM."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import psutil

from ingest.settings import Settings
from ingest.spark import is_jvm_noise, spark_conf
from maintenance.yielding import spark_defaults


def test_maintenance_spark_gets_fewer_cores_on_a_local_master_and_a_cap_on_a_cluster_only_when_asked():
    listing = "spark.sql.sources.parallelPartitionDiscovery.parallelism"  # VACUUM's folder listing tasks
    assert spark_defaults(Settings()) == {"spark.master": "local[1]", listing: "8"}
    assert spark_defaults(Settings(spark_master="local[4]", maintenance_cores=2)) == {"spark.master": "local[2]",
                                                                                      listing: "16"}
    assert spark_defaults(Settings(spark_master="spark://h:7077")) == {listing: "64"}
    assert spark_defaults(Settings(spark_master="spark://h:7077", maintenance_cores=3)) == {"spark.cores.max": "3",
                                                                                            listing: "24"}


def test_defaults_reach_the_session_and_the_operators_spark_conf_still_wins(jars):
    settings = Settings(spark_jars_dir=str(jars))
    assert spark_conf(settings, "t", defaults=spark_defaults(settings))["spark.master"] == "local[1]"
    chosen = Settings(spark_jars_dir=str(jars), spark_conf={"spark.master": "local[2]"})
    assert spark_conf(chosen, "t", defaults=spark_defaults(chosen))["spark.master"] == "local[2]"


def _niceness_after(start: int, asked: int) -> int:
    code = (f"import os; os.nice({start}); from maintenance.yielding import lower_priority; "
            f"print(lower_priority({asked}), os.getpriority(os.PRIO_PROCESS, 0))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                          env={**os.environ, "PYTHONPATH": os.getcwd()})
    returned, actual = map(int, done.stdout.split())
    assert returned == actual
    return actual


def test_priority_is_lowered_before_spark_starts_and_never_raised():
    base = os.getpriority(os.PRIO_PROCESS, 0)
    assert _niceness_after(0, base + 5) == base + 5
    assert _niceness_after(7, base + 3) == base + 7  # already lower: left alone


def test_library_logging_layers(jars):
    quiet = spark_conf(Settings(spark_jars_dir=str(jars)), "t")["spark.driver.extraJavaOptions"]
    assert "spark-log4j2.properties,file:" in quiet and "spark-log4j2-quiet.properties" in quiet
    everything = spark_conf(Settings(spark_jars_dir=str(jars), library_logs="all"),
                            "t")["spark.driver.extraJavaOptions"]
    assert "spark-log4j2-quiet.properties" not in everything
    as_json = spark_conf(Settings(spark_jars_dir=str(jars), log_format="json"), "t")["spark.driver.extraJavaOptions"]
    files = as_json.split()[0].split("=", 1)[1].split(",")
    assert [f.rsplit("/", 1)[1] for f in files] == [
        "spark-log4j2.properties", "spark-log4j2-quiet.properties", "spark-log4j2-json.properties"]


def test_jvm_start_up_notices_are_dropped_and_everything_else_passes():
    assert is_jvm_noise(b"WARNING: Using incubator modules: jdk.incubator.vector\n")
    assert is_jvm_noise(b'SLF4J: Failed to load class "org.slf4j.impl.StaticLoggerBinder".\n')
    assert is_jvm_noise(b"SLF4J(W): Class path contains SLF4J bindings targeting slf4j-api versions 1.7.x\n")
    assert not is_jvm_noise(b"17:46:09 WARN ProcessingTimeExecutor: Current batch is falling behind.\n")
    assert not is_jvm_noise(b"Exception in thread \"main\" java.lang.OutOfMemoryError: Java heap space\n")
    assert not is_jvm_noise(b"WARNING: An illegal reflective access operation has occurred\n")


def test_airflow_tasks_start_their_command_niced_in_a_session_of_its_own():
    from maintenance.yielding import AUTOGROUP, yielding_child

    asked = min(os.getpriority(os.PRIO_PROCESS, 0) + 4, 19)  # this run may be niced already
    probe = ("import os, pathlib; p = pathlib.Path('/proc/self/autogroup'); "
             "print(os.getsid(0) == os.getpid(), os.getpriority(os.PRIO_PROCESS, 0), "
             "p.read_text().split()[-1] if p.exists() else 'none')")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True,
                          preexec_fn=yielding_child(asked))
    own_session, niceness, group_nice = done.stdout.split()
    assert own_session == "True" and int(niceness) == asked
    # with autogroup scheduling, the session's own weight is lowered too: what ranks it against a stream's session
    assert group_nice == (str(asked) if os.path.exists(AUTOGROUP) else "none")


def test_a_tasks_command_ends_when_the_task_process_dies(tmp_path):
    """The command is out of the task's process group, so Airflow's kill of the task's group misses it: it goes
    when the task process goes, kill -9 included."""
    pid_file = tmp_path / "command.pid"
    task = ("import subprocess, sys, time; from maintenance.yielding import yielding_child; "
            "p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(300)'], "
            "preexec_fn=yielding_child(5)); "
            f"open({str(pid_file)!r}, 'w').write(str(p.pid)); time.sleep(300)")
    parent = subprocess.Popen([sys.executable, "-c", task], env={**os.environ, "PYTHONPATH": os.getcwd()})
    deadline = time.monotonic() + 60
    while not (pid_file.exists() and pid_file.read_text()):
        assert time.monotonic() < deadline and parent.poll() is None, "the task never started its command"
        time.sleep(0.1)
    command = psutil.Process(int(pid_file.read_text()))
    parent.kill()
    parent.wait(30)
    command.wait(30)  # psutil.TimeoutExpired while it still runs
    assert not command.is_running()


def test_the_decide_task_prints_the_measured_health_in_one_line():
    from maintenance.tasks import health_line

    health = {"files": 412, "partitions": [{}, {}, {}], "small_files": 400, "bytes": 3 * 1024 ** 2, "versions": 950,
              "metadata_bytes": 2 * 1024 ** 2, "seconds_since_last_compaction": 600.0}
    line = health_line(health)
    assert line.startswith("health: 412 files in 3 partition(s), 400 small, ") and "950 versions" in line, line
    assert line.endswith("last compaction 10 min ago"), line
    assert health_line({**health, "seconds_since_last_compaction": None}).endswith("last compaction never")
    assert health_line({}) == "health: not measured"


def _until(check, what: str, deadline_s: float = 10.0):
    end = time.monotonic() + deadline_s
    while not check():
        assert time.monotonic() < end, what
        time.sleep(0.01)


def test_a_compaction_commits_at_the_streams_weight_once_its_jobs_are_done(tmp_path, monkeypatch):
    from maintenance.yielding import commits_at_stream_weight

    group = tmp_path / "autogroup"
    group.write_text("/autogroup-7 nice 10\n")

    def nice_now() -> str:
        return group.read_text().split()[-1]

    monkeypatch.setattr(os, "getsid", lambda _pid: os.getpid())  # a session of its own, as a task's command
    running = {"jobs": False}
    with commits_at_stream_weight(lambda: running["jobs"], poll_s=0.01, path=str(group)):
        time.sleep(0.1)  # planning, no job yet: still the maintenance weight
        assert nice_now() == "10"
        running["jobs"] = True  # the rewrite's Spark jobs
        time.sleep(0.1)
        assert nice_now() == "10"
        running["jobs"] = False  # jobs done, the block still running: the commit
        _until(lambda: nice_now() == "0", "the commit runs at nice 0")
        running["jobs"] = True  # e.g. a Delta checkpoint after the commit: back to the maintenance weight
        _until(lambda: nice_now() == "10", "a job runs at the maintenance weight again")
        running["jobs"] = False
        _until(lambda: nice_now() == "0", "committing again")
    assert nice_now() == "10"  # the block is over: the maintenance weight


def test_a_commit_without_spark_runs_at_the_streams_weight_and_the_weight_comes_back_after(tmp_path, monkeypatch):
    from maintenance.yielding import at_stream_weight

    group = tmp_path / "autogroup"
    group.write_text("/autogroup-7 nice 10\n")
    monkeypatch.setattr(os, "getsid", lambda _pid: os.getpid())
    with at_stream_weight(path=str(group)):
        assert group.read_text().split()[-1] == "0"  # a Spark-free commit racing the stream's
    assert group.read_text().split()[-1] == "10"
    monkeypatch.setattr(os, "getsid", lambda _pid: os.getpid() + 1)  # by hand, in its shell's session
    group.write_text("/autogroup-7 nice 0\n")
    with at_stream_weight(path=str(group)):
        pass
    assert group.read_text() == "/autogroup-7 nice 0\n"


def test_a_command_in_its_shells_session_leaves_the_autogroup_alone(tmp_path, monkeypatch):
    from maintenance.yielding import commits_at_stream_weight

    group = tmp_path / "autogroup"
    group.write_text("/autogroup-7 nice 0\n")
    monkeypatch.setattr(os, "getsid", lambda _pid: os.getpid() + 1)
    with commits_at_stream_weight(lambda: False, poll_s=0.01, path=str(group)):
        time.sleep(0.05)
    assert group.read_text() == "/autogroup-7 nice 0\n"


def test_a_tasks_command_raises_its_real_autogroup_for_the_commit_and_lowers_it_after():
    from maintenance.yielding import AUTOGROUP, yielding_child

    probe = """
import time
from maintenance.yielding import autogroup_nice, commits_at_stream_weight
state = {"jobs": True}
def until(check):
    end = time.monotonic() + 10
    while not check() and time.monotonic() < end:
        time.sleep(0.01)
seen = [autogroup_nice()]
with commits_at_stream_weight(lambda: state["jobs"], poll_s=0.02):
    time.sleep(0.1)
    seen.append(autogroup_nice())
    state["jobs"] = False
    until(lambda: autogroup_nice() in (0, None))
    seen.append(autogroup_nice())
seen.append(autogroup_nice())
print(*seen)
"""
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True,
                          preexec_fn=yielding_child(12), cwd=os.path.dirname(os.path.dirname(os.path.dirname(
                              os.path.abspath(__file__)))))
    # without autogroup scheduling there is no group weight to change, and the helper changes nothing
    expected = ["12", "12", "0", "12"] if os.path.exists(AUTOGROUP) else ["None"] * 4
    assert done.stdout.split() == expected, done.stdout + done.stderr


def test_the_files_bound_yields_less_than_a_spark_compaction_and_never_less_than_asked(monkeypatch):
    from maintenance import tasks
    from maintenance.yielding import bound_nice

    assert (Settings().maintenance_nice, bound_nice(Settings())) == (10, 5)
    assert bound_nice(Settings(maintenance_nice=3)) == 3  # an operator's lower maintenance niceness is kept
    assert bound_nice(Settings(maintenance_nice=0)) == 0  # "leave it alone" holds for the bound too
    started = []
    monkeypatch.setattr(tasks, "run_lakeline", lambda args, **kw: started.append((args, kw)) or
                        tasks.CommandResult(args, 0, {"ok": True}, ""))
    monkeypatch.setenv("LAKELINE_BOUND_NICE", "7")
    assert tasks.bound("t.yaml", "conf", "2026-11-29T08:00:00+00:00") == {"ok": True}
    [(args, kw)] = started
    assert "--bound-only" in args and kw["nice"] == 7
    tasks.compact("t.yaml", "conf", "2026-11-29T08:00:00+00:00", dry_run=False)
    assert started[1][1].get("nice") is None  # a Spark compaction: maintenance_nice
