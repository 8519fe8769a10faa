"""Lakeline's own Spark sources (Python Data Source API). Nothing here imports pyspark or boto3 at import time."""
