"""Local development stack for Lakeline: jar resolution, a KRaft Kafka broker, a moto S3/Kinesis server,
and the embedded Iceberg catalog. Nothing here is imported by ingest/ or maintenance/ at module level."""
