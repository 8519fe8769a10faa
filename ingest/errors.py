"""Lakeline's error taxonomy, and the exit code each kind of failure gives a command. Callers branch on the type,
never on message text. Every error class of the library is here."""

from enum import IntEnum


class ExitCode(IntEnum):
    """What a `lakeline` command's exit status means (`lakeline --help` lists each `meaning`)."""

    meaning: str

    def __new__(cls, value: int, meaning: str):
        member = int.__new__(cls, value)
        member._value_, member.meaning = value, meaning
        return member

    OK = 0, "success"
    FAILED = 1, "the command could not do its work (a component, the pipeline or a table failed)"
    USAGE = 2, "bad arguments or configuration (the message names the key and the fix)"
    NOT_EXACT = 3, "reconcile found duplicates or missing records"
    STALE = 4, "freshness: the table breaches its pipeline's freshness SLA"
    DRILL_FAILED = 5, "a recovery drill scenario failed (its copy is kept for inspection)"
    CHECKPOINT_DAMAGED = 6, "checkpoint verify failed, or checkpoint repair found damage (dry run)"
    REFUSED = 7, ("refused as unsafe: the pipeline is running, locked or leased elsewhere, this driver lost it to "
                  "another (fenced), or retention is below its guards")
    SCHEMA_CHANGED = 8, ("the source carries a field the schema does not declare (schema.evolution: fail); nothing "
                         "of that batch was written")
    INTERRUPTED = 130, "interrupted (Ctrl-C)"


class LakelineError(Exception):
    """Base class; the message is written for the person running the command."""

    exit_code = ExitCode.FAILED


class ConfigError(LakelineError):
    """A configuration file or environment variable is wrong; the message names the file/key and the fix."""

    exit_code = ExitCode.USAGE


class CommitConflict(LakelineError):
    """Another writer committed first; safe to retry the same commit."""


class UnknownCommitOutcome(LakelineError):
    """A commit may or may not have landed (e.g. timeout during the write); reconcile from the table, never delete."""


class DriverLockHeld(LakelineError):
    """Another driver of the same pipeline holds the lock on this host."""

    exit_code = ExitCode.REFUSED


class LeaseHeld(DriverLockHeld):
    """Another driver of the same pipeline, on any host, holds the pipeline's lease on the object store."""


class DriverFenced(LakelineError):
    """This driver lost the pipeline to another one (its lease lapsed or was taken over): it stopped, and the
    tables refused any commit it still tried (the fence)."""

    exit_code = ExitCode.REFUSED


class PipelineRunning(LakelineError):
    """The pipeline holds a fresh heartbeat; a restore or repair now would race the running query."""

    exit_code = ExitCode.REFUSED


class RetentionRefused(LakelineError):
    """A retention run would delete files that are still needed; the message says why and what to change."""

    exit_code = ExitCode.REFUSED


class BackupError(LakelineError):
    """A backup is missing, incomplete or corrupt; the message names the file."""


class KinesisError(LakelineError):
    """A Kinesis problem retries cannot fix: missing stream, bad credentials, retries exhausted."""


class StreamNotFound(KinesisError):
    """The Kinesis stream does not exist (create it, or fix source.stream / region / endpoint)."""


class KinesisThrottled(KinesisError):
    """A transient Kinesis refusal (throttling, a dropped connection, a timeout): retried with jittered backoff;
    still failing after the retries, it becomes a KinesisError."""


class SchemaChanged(LakelineError):
    """Records carry a field the schema does not declare and schema.evolution is `fail`: the batch was not written;
    the message names the field, its first offset and the fix."""

    exit_code = ExitCode.SCHEMA_CHANGED


class TaskFailed(LakelineError):
    """A lakeline command run by a scheduler task failed; the message carries its exit code and the end of its
    log."""


class TableNotFound(LakelineError):
    """A command reads a table that does not exist yet (the pipeline has not run, or the name is wrong); the message
    names the table and what to do."""


class ReaderLockedOut(ConfigError):
    """A table feature would lock out (or already locks out) a reader Lakeline supports for analysts; the message
    names the feature, the readers and the choices (ingest.compatibility)."""


class BadQuery(ConfigError):
    """`lakeline query`'s SQL fails (syntax, an unknown table or column): DuckDB's message, and the table names the
    session has."""
