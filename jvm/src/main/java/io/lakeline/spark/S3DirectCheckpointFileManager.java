package io.lakeline.spark;

import java.io.IOException;

import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FSDataOutputStream;
import org.apache.hadoop.fs.FSDataOutputStreamBuilder;
import org.apache.hadoop.fs.FileAlreadyExistsException;
import org.apache.hadoop.fs.Path;
import org.apache.spark.sql.execution.streaming.checkpointing.CheckpointFileManager;
import org.apache.spark.sql.execution.streaming.checkpointing.FileSystemBasedCheckpointFileManager;

/**
 * Spark's checkpoint file manager for s3a:// without write-to-temp-and-rename.
 *
 * Spark writes each offsets/N and commits/N entry (and Delta each N.crc) "atomically" by writing a temp file and
 * renaming it. On S3 a rename is a copy plus a delete, wrapped in existence probes: about 25 requests per file,
 * three files per micro-batch. An S3 PUT is already atomic (the object appears whole on close, or not at all), so
 * this manager writes the final object directly:
 *
 * - overwriteIfPossible=false (offsets/N, commits/N): a conditional PUT (If-None-Match: *). S3 refuses it with 412
 *   when the object exists, which is reported as FileAlreadyExistsException, the contract Spark's metadata log
 *   relies on to detect two queries on one checkpoint. The rename path could not make that check atomic on S3.
 * - overwriteIfPossible=true: a plain PUT.
 * - cancel(): the stream is aborted, so nothing is uploaded.
 *
 * Other file systems (file:, hdfs:) keep Spark's rename-based behaviour. Enabled by
 * spark.sql.streaming.checkpointFileManagerClass (ingest/spark.py); requires fs.s3a.create.conditional.enabled.
 */
public class S3DirectCheckpointFileManager extends FileSystemBasedCheckpointFileManager {

    static final String CONDITIONAL_CREATE = "fs.option.create.conditional.overwrite";
    // Skips S3A's per-create HEAD/LIST probes (is the path a directory? does the file exist?); the conditional
    // PUT does the existence check atomically, and checkpoint paths are never directories.
    static final String CREATE_PERFORMANCE = "fs.s3a.create.performance";

    public S3DirectCheckpointFileManager(Path path, Configuration hadoopConf) {
        super(path, hadoopConf);
    }

    @Override
    public CheckpointFileManager.CancellableFSDataOutputStream createAtomic(Path path, boolean overwriteIfPossible) {
        if (!"s3a".equals(fs().getScheme())) {
            return super.createAtomic(path, overwriteIfPossible);
        }
        try {
            FSDataOutputStreamBuilder<?, ?> builder = fs().createFile(path).overwrite(overwriteIfPossible);
            builder.opt(CREATE_PERFORMANCE, true);
            if (!overwriteIfPossible) {
                builder.must(CONDITIONAL_CREATE, true);
            }
            return new DirectStream(builder.build(), path, overwriteIfPossible);
        } catch (IOException e) {
            throw sneaky(e); // Spark's callers expect the IOException itself (Scala methods declare none)
        }
    }

    @SuppressWarnings("unchecked")
    private static <E extends Throwable> RuntimeException sneaky(Throwable e) throws E {
        throw (E) e;
    }

    /** Writes straight to the final object; close() is the PUT, cancel() aborts the upload. */
    static final class DirectStream extends CheckpointFileManager.CancellableFSDataOutputStream {
        private final FSDataOutputStream out;
        private final Path path;
        private final boolean overwrite;
        private boolean terminated;

        DirectStream(FSDataOutputStream out, Path path, boolean overwrite) {
            super(out);
            this.out = out;
            this.path = path;
            this.overwrite = overwrite;
        }

        @Override
        public synchronized void close() throws IOException {
            if (terminated) {
                return;
            }
            terminated = true;
            try {
                out.close();
            } catch (IOException e) {
                if (!overwrite && (e instanceof FileAlreadyExistsException
                        || io.lakeline.delta.S3ConditionalPutLogStore.isPreconditionFailure(e))) {
                    FileAlreadyExistsException exists = new FileAlreadyExistsException(path + " already exists");
                    exists.initCause(e);
                    throw exists;
                }
                throw e;
            }
        }

        @Override
        public synchronized void cancel() {
            if (terminated) {
                return;
            }
            terminated = true;
            try {
                out.abort();
                out.close();
            } catch (IOException | RuntimeException e) {
                // Nothing was uploaded (an aborted S3A stream never PUTs); a failure to release the buffer is
                // not worth failing the caller's own error handling for.
                org.slf4j.LoggerFactory.getLogger(S3DirectCheckpointFileManager.class)
                        .warn("cancelling the write of {} failed to release its buffer: {}", path, e.toString());
            }
        }
    }
}
