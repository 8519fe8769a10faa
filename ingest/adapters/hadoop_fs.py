"""Small file operations through Spark's Hadoop FileSystem (same credentials and endpoint as the tables)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


class HadoopFS:
    def __init__(self, spark: "SparkSession"):
        self._jvm = spark._jvm  # noqa: SLF001 - py4j gateway is the only way to reach Hadoop FS from Python
        self._conf = spark._jsc.hadoopConfiguration()  # noqa: SLF001

    def _path(self, path: str):
        jpath = self._jvm.org.apache.hadoop.fs.Path(path)
        return jpath, jpath.getFileSystem(self._conf)

    def exists(self, path: str) -> bool:
        jpath, fs = self._path(path)
        return bool(fs.exists(jpath))

    def list_names(self, path: str) -> list[str]:
        jpath, fs = self._path(path)
        if not fs.exists(jpath):
            return []
        return sorted(str(status.getPath().getName()) for status in fs.listStatus(jpath))

    def list_files(self, path: str) -> list[str]:
        """Paths of all files (not directories) below `path`, relative to it; [] if it does not exist."""
        jpath, fs = self._path(path)
        if not fs.exists(jpath):
            return []
        root = str(fs.makeQualified(jpath)).rstrip("/") + "/"
        found, iterator = [], fs.listFiles(jpath, True)
        while iterator.hasNext():
            full = str(iterator.next().getPath())
            found.append(full[len(root):] if full.startswith(root) else full)
        return sorted(found)

    def list_status(self, path: str) -> list[tuple[str, int, int]]:
        """(name, size, modification time ms) of the files directly in `path`; [] if it does not exist."""
        jpath, fs = self._path(path)
        if not fs.exists(jpath):
            return []
        return [(str(s.getPath().getName()), int(s.getLen()), int(s.getModificationTime()))
                for s in fs.listStatus(jpath) if s.isFile()]

    def read_text(self, path: str) -> str:
        return self.read_bytes(path).decode("utf-8")

    def write_text(self, path: str, text: str) -> None:
        self.write_bytes(path, text.encode("utf-8"))

    def read_bytes(self, path: str) -> bytes:
        from py4j.protocol import Py4JJavaError

        jpath, fs = self._path(path)
        try:
            stream = fs.open(jpath)
        except Py4JJavaError as exc:
            if "FileNotFoundException" in str(exc.java_exception.getClass().getName()):
                raise FileNotFoundError(path) from None
            raise
        try:
            return bytes(self._jvm.org.apache.commons.io.IOUtils.toByteArray(stream))
        finally:
            stream.close()

    def write_bytes(self, path: str, data: bytes) -> None:
        jpath, fs = self._path(path)
        stream = fs.create(jpath, True)
        try:
            stream.write(bytearray(data))
        finally:
            stream.close()

    def rename(self, src: str, dst: str) -> None:
        jsrc, fs = self._path(src)
        jdst, _ = self._path(dst)
        fs.mkdirs(jdst.getParent())  # S3A and HDFS refuse a rename into a missing parent
        if not fs.rename(jsrc, jdst):
            raise OSError(f"could not move {src} to {dst}")

    def delete(self, path: str) -> None:
        jpath, fs = self._path(path)
        fs.delete(jpath, True)
