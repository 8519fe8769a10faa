package io.lakeline.testing;

import java.io.ByteArrayOutputStream;
import java.io.File;
import java.io.IOException;
import java.net.URI;
import java.nio.file.Files;
import java.nio.file.StandardCopyOption;
import java.util.concurrent.atomic.AtomicInteger;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.Abortable;
import org.apache.hadoop.fs.CreateFlag;
import org.apache.hadoop.fs.FSDataOutputStream;
import org.apache.hadoop.fs.FSDataOutputStreamBuilder;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.fs.RawLocalFileSystem;

/**
 * S3 as S3A 3.4.2 shows it, over a local folder: {@code s3a://bucket/key} is {@code <root>/bucket/key}; an object
 * appears whole when its stream closes, and a conditional create ({@code fs.option.create.conditional.overwrite})
 * fails at close with S3's 412 when the object exists. Register with {@link #configuration}.
 */
public class ConditionalPutFileSystem extends RawLocalFileSystem {

    /** The PUTs that reached the store (aborted streams upload nothing). */
    public static final AtomicInteger PUTS = new AtomicInteger();

    private File root;
    private URI uri;

    public static Configuration configuration(java.nio.file.Path root) {
        Configuration conf = new Configuration(false);
        conf.set("fs.s3a.impl", ConditionalPutFileSystem.class.getName());
        conf.setBoolean("fs.s3a.impl.disable.cache", true);
        conf.set("lakeline.test.s3.root", root.toString());
        return conf;
    }

    @Override
    public void initialize(URI name, Configuration conf) throws IOException {
        super.initialize(name, conf);
        root = new File(conf.get("lakeline.test.s3.root"), name.getAuthority());
        uri = URI.create("s3a://" + name.getAuthority());
    }

    @Override
    public String getScheme() {
        return "s3a";
    }

    @Override
    public URI getUri() {
        return uri == null ? super.getUri() : uri;  // null while RawLocalFileSystem's constructor runs
    }

    @Override
    public Path getWorkingDirectory() {
        return uri == null ? super.getWorkingDirectory() : new Path(uri.toString() + "/");
    }

    @Override
    public File pathToFile(Path path) {
        return new File(root, path.toUri().getPath());
    }

    @Override
    public FSDataOutputStreamBuilder createFile(Path path) {
        return new PutBuilder(this, path);
    }

    /** The object at `path` once closed; `ifAbsent` makes the PUT conditional (If-None-Match: *). */
    private FSDataOutputStream put(Path path, boolean ifAbsent) throws IOException {
        return new FSDataOutputStream(new PendingPut(pathToFile(path), path, ifAbsent), statistics);
    }

    /** A PUT's body, uploaded on close unless aborted. */
    private static final class PendingPut extends ByteArrayOutputStream implements Abortable {
        private final File target;
        private final Path path;
        private final boolean ifAbsent;
        private boolean done;

        PendingPut(File target, Path path, boolean ifAbsent) {
            this.target = target;
            this.path = path;
            this.ifAbsent = ifAbsent;
        }

        @Override
        public AbortableResult abort() {
            boolean wasDone = done;
            done = true;
            return new AbortableResult() {
                @Override
                public boolean alreadyClosed() {
                    return wasDone;
                }

                @Override
                public IOException anyCleanupException() {
                    return null;
                }
            };
        }

        @Override
        public void close() throws IOException {
            if (done) {
                return;
            }
            done = true;
            if (ifAbsent && target.exists()) {
                throw new IOException("put " + path + ": PreconditionFailed (Service: S3, Status Code: 412)");
            }
            target.getParentFile().mkdirs();
            File partial = new File(target.getPath() + ".upload");
            Files.write(partial.toPath(), toByteArray());
            Files.move(partial.toPath(), target.toPath(), StandardCopyOption.REPLACE_EXISTING);
            PUTS.incrementAndGet();
        }
    }

    private static final class PutBuilder extends FSDataOutputStreamBuilder<FSDataOutputStream, PutBuilder> {
        PutBuilder(ConditionalPutFileSystem fs, Path path) {
            super(fs, path);
        }

        @Override
        public PutBuilder getThisBuilder() {
            return this;
        }

        @Override
        public FSDataOutputStream build() throws IOException {
            boolean conditional = getOptions().getBoolean("fs.option.create.conditional.overwrite", false);
            if (conditional && getFlags().contains(CreateFlag.OVERWRITE)) {
                throw new IllegalArgumentException("a conditional create cannot overwrite");
            }
            return ((ConditionalPutFileSystem) getFS()).put(getPath(), conditional);
        }
    }
}
