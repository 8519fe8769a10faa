"""The test session's own driver JVM starts from the class archive infra/setup.sh made (cost: nothing beyond the
session's SparkSession). A JVM that cannot use an archive starts without it and says nothing (Lakeline keeps those
lines quiet), so this checks the one thing that proves it is used: the archive is mapped into the JVM's memory."""

from __future__ import annotations

import os

import pytest


def test_the_driver_jvm_maps_the_class_archive(spark):
    from ingest.settings import load_settings
    from ingest.spark import archive_is_complete, archive_is_mapped, class_archive, spark_jars

    archive = class_archive(spark_jars(load_settings()))
    if os.environ.get("LAKELINE_CLASS_ARCHIVE", "").lower() == "off":
        assert not archive_is_mapped(spark, archive)
        return
    if not archive_is_complete(archive):
        pytest.fail(f"no complete class archive at {archive}: infra/setup.sh makes it (`lakeline dev "
                    "class-archive`)", pytrace=False)
    assert archive_is_mapped(spark, archive), f"the driver JVM did not map {archive}"

