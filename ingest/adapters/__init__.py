"""IO adapters: Kafka admin, checkpoint files (Hadoop FileSystem: s3a:// or local), object storage."""
