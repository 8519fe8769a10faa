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
        """All files (not directories) below `path`, recursively; [] if it does not exist."""
        jpath, fs = self._path(path)
        if not fs.exists(jpath):
            return []
        found, iterator = [], fs.listFiles(jpath, True)
        while iterator.hasNext():
            found.append(str(iterator.next().getPath()))
        return found

    def read_text(self, path: str) -> str:
        jpath, fs = self._path(path)
        stream = fs.open(jpath)
        try:
            return str(self._jvm.org.apache.commons.io.IOUtils.toString(stream, "UTF-8"))
        finally:
            stream.close()

    def write_text(self, path: str, text: str) -> None:
        jpath, fs = self._path(path)
        stream = fs.create(jpath, True)
        try:
            stream.write(bytearray(text.encode("utf-8")))
        finally:
            stream.close()

    def rename(self, src: str, dst: str) -> None:
        jsrc, fs = self._path(src)
        jdst, _ = self._path(dst)
        if not fs.rename(jsrc, jdst):
            raise OSError(f"could not move {src} to {dst}")

    def delete(self, path: str) -> None:
        jpath, fs = self._path(path)
        fs.delete(jpath, True)
