"""boto3 S3 client for the configured endpoint (moto locally, real S3 when LAKELINE_S3_ENDPOINT is unset)."""

from __future__ import annotations

from ingest.settings import Settings


def s3_client(settings: Settings, config=None):
    """`config`: a botocore Config (timeouts, retries); botocore's defaults without one."""
    import boto3

    credentials = {f"aws_{name}": value for name, value in settings.aws_credentials().items()}
    return boto3.client("s3", endpoint_url=settings.s3_endpoint, region_name=settings.aws_region, config=config,
                        **credentials)


def split_s3_uri(uri: str) -> tuple[str, str]:
    """'s3a://bucket/a/b' -> ('bucket', 'a/b')."""
    scheme, _, rest = uri.partition("://")
    if scheme not in ("s3", "s3a", "s3n") or "/" not in rest:
        raise ValueError(f"{uri!r} is not an s3:// or s3a:// object path")
    bucket, _, key = rest.partition("/")
    return bucket, key
