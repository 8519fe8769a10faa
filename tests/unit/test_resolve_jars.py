"""Set-up's build of the JVM module names the JUnit tests that failed."""

from infra.resolve_jars import failed_tests

SUREFIRE_SUMMARY = """\
\x1b[0m\x1b[0m[ERROR] Tests run: 88, Failures: 2, Errors: 1, Skipped: 0
[ERROR] Failures:
[ERROR]   FencingCatalogTest.readsATokenOnlyFromANumber:100 expected: <13> but was: <12>
[ERROR]   RecordDecoderTest.refusesTimesThatDoNotParseExactly:293->assertDeadLetter:75 a dead letter has no record
[ERROR] Errors:
[ERROR]   S3DirectCheckpointFileManagerTest.setUp:30 NoClassDefFound org/apache/spark/internal/LogKey
[ERROR]   S3DirectCheckpointFileManagerTest.setUp:30 NoClassDefFound org/apache/spark/internal/LogKey
[ERROR] Failed to execute goal org.apache.maven.plugins:maven-surefire-plugin:3.5.2:test (default-test)
"""


def test_failed_tests_are_named_once_each_from_surefires_summary():
    assert failed_tests(SUREFIRE_SUMMARY) == [
        "FencingCatalogTest.readsATokenOnlyFromANumber:100",
        "RecordDecoderTest.refusesTimesThatDoNotParseExactly:293->assertDeadLetter:75",
        "S3DirectCheckpointFileManagerTest.setUp:30",
    ]


def test_a_compile_error_names_no_test():
    assert failed_tests("[ERROR] COMPILATION ERROR : \n[ERROR] /x/RecordDecoder.java:[27,25] cannot access y\n") == []
