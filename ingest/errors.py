"""Lakeline's error taxonomy. Callers branch on the type, never on message text."""


class LakelineError(Exception):
    """Base class; the message is written for the person running the command."""


class ConfigError(LakelineError):
    """A configuration file or environment variable is wrong; the message names the file/key and the fix."""


class CommitConflict(LakelineError):
    """Another writer committed first; safe to retry the same commit."""


class UnknownCommitOutcome(LakelineError):
    """A commit may or may not have landed (e.g. timeout during the write); reconcile from the table, never delete."""
