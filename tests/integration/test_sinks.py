"""Sink edge cases against moto S3 and Spark."""

from __future__ import annotations

import uuid

import pytest

from ingest.adapters.object_store import s3_client, split_s3_uri
from ingest.config import PipelineConfig
from ingest.sinks import sinks_for
from tests.helpers import pipeline_dict

pytestmark = pytest.mark.integration


def test_delta_create_killed_before_its_first_commit_is_recovered(spark, settings):
    """kill -9 during CREATE leaves only `_delta_log/_staged_commits/`; the next start must still create it."""
    config = PipelineConfig.model_validate(pipeline_dict("delta", name=f"t_create_{uuid.uuid4().hex[:6]}"))
    main, _ = sinks_for(spark, config, settings)
    bucket, prefix = split_s3_uri(main.location)
    s3 = s3_client(settings)
    s3.put_object(Bucket=bucket, Key=f"{prefix}/_delta_log/_staged_commits/", Body=b"")
    main.ensure()
    assert main.read().count() == 0
    assert main.last_commit() is None


def test_delta_log_with_files_but_no_table_is_left_alone(spark, settings):
    config = PipelineConfig.model_validate(pipeline_dict("delta", name=f"t_keep_{uuid.uuid4().hex[:6]}"))
    main, _ = sinks_for(spark, config, settings)
    bucket, prefix = split_s3_uri(main.location)
    s3 = s3_client(settings)
    s3.put_object(Bucket=bucket, Key=f"{prefix}/_delta_log/something-unexpected.json", Body=b"{}")
    with pytest.raises(Exception, match="DELTA"):
        main.ensure()
    keys = [o["Key"] for o in s3.list_objects_v2(Bucket=bucket, Prefix=prefix)["Contents"]]
    assert f"{prefix}/_delta_log/something-unexpected.json" in keys
