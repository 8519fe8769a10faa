"""`lakeline ingest` with a topic that does not exist fails with today's error and exit code before it takes the
host lock or the lease or creates a table, checkpoint or lineage file (ingest.preflight). Against the real broker
and moto S3 of the session's stack, in this process: no Spark starts, under a second once the stack is up."""

from __future__ import annotations

import pytest

from ingest.adapters.object_store import s3_client, split_s3_uri
from ingest.config import load_pipeline
from ingest.errors import ConfigError, ExitCode
from ingest.lease import pipeline_lease
from ingest.ownership import drive
from ingest.pipeline import Pipeline
from tests.helpers import pipeline_dict, write_pipeline

pytestmark = pytest.mark.integration


def test_a_missing_topic_fails_before_anything_is_taken_or_written(conf_dir, settings, tmp_path, monkeypatch):
    monkeypatch.setenv("LAKELINE_LOCK_DIR", str(tmp_path / "locks"))
    config = load_pipeline(write_pipeline(conf_dir, pipeline_dict("delta", topic="no-such-topic-typo")))
    location = config.checkpoint_location(settings)
    lease = pipeline_lease(config.pipeline, location, settings)
    with pytest.raises(ConfigError, match=r"source.topics: topic\(s\) \['no-such-topic-typo'\] do not exist") as \
            failed, drive(Pipeline(config, settings, lease=lease)):
        pytest.fail("drive() took the pipeline")
    assert failed.value.exit_code == ExitCode.USAGE
    assert not (tmp_path / "locks").exists() or not any((tmp_path / "locks").iterdir())
    s3 = s3_client(settings)
    for uri in (config.delta_location(settings), config.delta_location(settings, config.sink.dead_letters),
                location):
        bucket, key = split_s3_uri(uri)
        assert s3.list_objects_v2(Bucket=bucket, Prefix=key).get("KeyCount", 0) == 0, f"{uri} was written"
    assert lease is not None
    assert s3.list_objects_v2(Bucket=split_s3_uri(location)[0],
                              Prefix=split_s3_uri(location)[1] + ".lease").get("KeyCount", 0) == 0
