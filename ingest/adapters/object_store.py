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


def is_s3_uri(uri: str) -> bool:
    return uri.partition("://")[0] in ("s3", "s3a", "s3n")


_MISSING = ("404", "NoSuchKey", "NotFound")


def precondition_failed(exc) -> bool:
    """Whether S3 refused a conditional write (412; 409 when a concurrent conditional write was in flight)."""
    return exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode") in (409, 412) or \
        exc.response.get("Error", {}).get("Code") in ("PreconditionFailed", "ConditionalRequestConflict")


class S3Files:
    """The small-file operations of ingest.adapters.hadoop_fs.HadoopFS (the checkpoint code's FileOps) on s3:// and
    s3a:// paths through boto3, for the maintenance that runs beside the stream every few minutes (checkpoint
    backup and verify) without starting a JVM. A "folder" is a key prefix; keys ending in "/" are S3A's folder
    markers, never files."""

    def __init__(self, settings: Settings, client=None):
        self.s3 = client if client is not None else s3_client(settings)

    @staticmethod
    def _split(path: str) -> tuple[str, str]:
        bucket, key = split_s3_uri(path if "/" in path.partition("://")[2] else path + "/")
        return bucket, key.rstrip("/")

    def _pages(self, path: str, delimiter: bool):
        bucket, key = self._split(path)
        prefix = f"{key}/" if key else ""
        args = {"Bucket": bucket, "Prefix": prefix, **({"Delimiter": "/"} if delimiter else {})}
        for page in self.s3.get_paginator("list_objects_v2").paginate(**args):
            yield prefix, page

    def _missing(self, exc) -> bool:
        return exc.response.get("Error", {}).get("Code") in _MISSING

    def exists(self, path: str) -> bool:
        bucket, key = self._split(path)
        return self._is_file(bucket, key) or \
            self.s3.list_objects_v2(Bucket=bucket, Prefix=f"{key}/", MaxKeys=1).get("KeyCount", 0) > 0

    def list_names(self, path: str) -> list[str]:
        names: set[str] = set()
        for prefix, page in self._pages(path, delimiter=True):
            names.update(p["Prefix"][len(prefix):].rstrip("/") for p in page.get("CommonPrefixes", []))
            names.update(o["Key"][len(prefix):] for o in page.get("Contents", []))
        return sorted(name for name in names if name)

    def list_files(self, path: str) -> list[str]:
        """Keys of all files below `path`, relative to it; [] if there are none."""
        return sorted(o["Key"][len(prefix):] for prefix, page in self._pages(path, delimiter=False)
                      for o in page.get("Contents", []) if not o["Key"].endswith("/"))

    def list_status(self, path: str) -> list[tuple[str, int, int]]:
        """(name, size, modification time ms) of the files directly in `path`; [] if there are none."""
        return [(o["Key"][len(prefix):], int(o["Size"]), int(o["LastModified"].timestamp() * 1000))
                for prefix, page in self._pages(path, delimiter=True) for o in page.get("Contents", [])
                if not o["Key"].endswith("/")]

    def read_bytes(self, path: str) -> bytes:
        from botocore.exceptions import ClientError

        bucket, key = self._split(path)
        try:
            return self.s3.get_object(Bucket=bucket, Key=key)["Body"].read()
        except ClientError as exc:
            if self._missing(exc):
                raise FileNotFoundError(path) from None
            raise

    def write_bytes(self, path: str, data: bytes) -> None:
        bucket, key = self._split(path)
        self.s3.put_object(Bucket=bucket, Key=key, Body=data)

    def put_if_absent(self, path: str, data: bytes) -> bool:
        """Write the file only where none is (If-None-Match: *); False when one was there."""
        from botocore.exceptions import ClientError

        bucket, key = self._split(path)
        try:
            self.s3.put_object(Bucket=bucket, Key=key, Body=data, IfNoneMatch="*")
            return True
        except ClientError as exc:
            if precondition_failed(exc):
                return False
            raise

    def read_text(self, path: str) -> str:
        return self.read_bytes(path).decode("utf-8")

    def write_text(self, path: str, text: str) -> None:
        self.write_bytes(path, text.encode("utf-8"))

    def rename(self, src: str, dst: str) -> None:
        """A file, or every file under a folder: copied, then the source deleted (S3 has no rename)."""
        bucket, key = self._split(src)
        dst_bucket, dst_key = self._split(dst)
        moves = [(key, dst_key)] if self._is_file(bucket, key) else [
            (f"{key}/{rel}", f"{dst_key}/{rel}") for rel in self.list_files(src)]
        if not moves:
            raise OSError(f"could not move {src} to {dst}: nothing there")
        for old, new in moves:
            self.s3.copy_object(Bucket=dst_bucket, Key=new, CopySource={"Bucket": bucket, "Key": old})
        self.delete(src)

    def _is_file(self, bucket: str, key: str) -> bool:
        from botocore.exceptions import ClientError

        try:
            self.s3.head_object(Bucket=bucket, Key=key)
            return True
        except ClientError as exc:
            if not self._missing(exc):
                raise
            return False

    def delete(self, path: str) -> None:
        """The file at `path` and everything under it as a folder (nothing there is not an error)."""
        bucket, key = self._split(path)
        keys = [key, *(o["Key"] for _, page in self._pages(path, delimiter=False) for o in page.get("Contents", []))]
        for start in range(0, len(keys), 1000):  # DeleteObjects takes at most 1,000 keys
            self.s3.delete_objects(Bucket=bucket, Delete={"Objects": [{"Key": k} for k in keys[start:start + 1000]],
                                                          "Quiet": True})
