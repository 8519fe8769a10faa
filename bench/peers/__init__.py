"""What a user would pick instead of Lakeline, run against the same broker, data and S3 for the benchmarks."""
