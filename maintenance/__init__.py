"""Lakeline maintenance: checkpoint backup/verify/restore/repair, compaction, retention, table health, freshness,
recovery drills, and what the Airflow tasks run. Imports ingest; ingest never imports maintenance."""
