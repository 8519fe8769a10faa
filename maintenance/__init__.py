"""Lakeline maintenance: checkpoint backup/verify/restore (and, in later work, compaction, retention, drills).
Imports ingest; ingest never imports maintenance."""
