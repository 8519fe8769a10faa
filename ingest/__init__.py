"""Lakeline ingestion: config, Spark session, sources, pure transforms, idempotent sinks, pipeline, reconcile."""
