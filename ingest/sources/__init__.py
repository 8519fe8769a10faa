"""The streaming sources a pipeline reads: Spark's Kafka source and Lakeline's own Kinesis source (Python Data Source
API). Importing this package imports neither pyspark nor boto3; `kinesis` needs pyspark (its reader subclasses
pyspark's data source classes), and boto3 is imported only where a Kinesis client is made."""
