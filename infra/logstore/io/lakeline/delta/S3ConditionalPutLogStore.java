package io.lakeline.delta;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.FileAlreadyExistsException;
import java.util.Iterator;

import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FSDataOutputStream;
import org.apache.hadoop.fs.FSDataOutputStreamBuilder;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.Path;

import io.delta.storage.HadoopFileSystemLogStore;

/**
 * A Delta LogStore for S3 (s3a://) that is safe with several Spark drivers writing one table.
 *
 * Delta needs "create N.json only if absent" to be atomic. The stock S3SingleDriverLogStore checks with a HEAD
 * and then PUTs: two drivers can both pass the check and the second PUT silently replaces the first commit.
 * This store writes each commit with an S3 conditional PUT (If-None-Match: *), which S3A 3.4.2 sends for
 * createFile(...).must("fs.option.create.conditional.overwrite", true). S3 answers 412 when the object already
 * exists; that is reported to Delta as java.nio.file.FileAlreadyExistsException, so Delta re-reads the log,
 * checks for logical conflicts and retries at the next version, exactly as with a single driver.
 *
 * Overwrites (overwrite=true, e.g. _last_checkpoint) are plain PUTs. A failed conditional PUT writes nothing,
 * so partial writes are never visible.
 */
public class S3ConditionalPutLogStore extends HadoopFileSystemLogStore {

    static final String CONDITIONAL_CREATE = "fs.option.create.conditional.overwrite";

    public S3ConditionalPutLogStore(Configuration hadoopConf) {
        super(hadoopConf);
    }

    @Override
    public void write(Path path, Iterator<String> actions, Boolean overwrite, Configuration hadoopConf)
            throws IOException {
        FileSystem fs = path.getFileSystem(hadoopConf);
        FSDataOutputStream stream;
        if (overwrite) {
            stream = fs.create(path, true);
        } else {
            FSDataOutputStreamBuilder<?, ?> builder = fs.createFile(path).overwrite(false);
            builder.must(CONDITIONAL_CREATE, true);
            stream = builder.build();
        }
        try {
            try {
                while (actions.hasNext()) {
                    stream.write((actions.next() + "\n").getBytes(StandardCharsets.UTF_8));
                }
            } finally {
                stream.close(); // the PUT happens here
            }
        } catch (org.apache.hadoop.fs.FileAlreadyExistsException e) {
            throw alreadyExists(path, e);
        } catch (IOException e) {
            if (!overwrite && isPreconditionFailure(e)) {
                throw alreadyExists(path, e);
            }
            throw e;
        }
    }

    private static FileAlreadyExistsException alreadyExists(Path path, Throwable cause) {
        FileAlreadyExistsException out = new FileAlreadyExistsException(path.toString());
        out.initCause(cause);
        return out;
    }

    /** S3A maps HTTP 412 to RemoteFileChangedException; the cause chain carries the status code. */
    public static boolean isPreconditionFailure(Throwable error) {
        for (Throwable t = error; t != null; t = t.getCause()) {
            if (t.getClass().getName().endsWith("RemoteFileChangedException")) {
                return true;
            }
            String message = t.getMessage();
            if (message != null && (message.contains("Status Code: 412") || message.contains("PreconditionFailed"))) {
                return true;
            }
            if (t.getCause() == t) {
                break;
            }
        }
        return false;
    }

    @Override
    public Boolean isPartialWriteVisible(Path path, Configuration hadoopConf) {
        return false; // an S3 PUT is all or nothing
    }
}
