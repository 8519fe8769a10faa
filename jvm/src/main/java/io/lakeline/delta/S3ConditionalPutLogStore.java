package io.lakeline.delta;

import java.io.BufferedReader;
import java.io.FileNotFoundException;
import java.io.IOException;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.nio.file.FileAlreadyExistsException;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Comparator;
import java.util.HashSet;
import java.util.Iterator;
import java.util.List;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.regex.Pattern;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;

import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FSDataOutputStream;
import org.apache.hadoop.fs.FSDataOutputStreamBuilder;
import org.apache.hadoop.fs.FileStatus;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.Path;

import io.delta.storage.HadoopFileSystemLogStore;
import io.delta.storage.internal.S3LogStoreUtil;
import io.lakeline.fence.FencedCommitException;

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
 *
 * Fencing: a pipeline driver registers each of its tables ({@link #fence}) with its lease token and a version it
 * has read. Before each commit file N is written, every version after the newest one checked and below N is read:
 * a `metaData` action raising `lakeline.fence.PIPELINE` above the driver's token means another driver took the
 * pipeline over, and the commit is refused ({@link FencedCommitException}). Every version below N exists when N
 * is written and N is put-if-absent, so no commit can slip in between the check and the write: one that lands
 * first takes N, and Delta retries at N+1, whose check reads it.
 *
 * Listing: Delta lists the log from a version (the last checkpoint's) on every snapshot update, at each commit and
 * each start. The stock store lists the whole `_delta_log/` folder and filters, so the cost grows with every commit
 * the log keeps (30 days by default); on S3A this store asks S3 for the keys after that version only
 * (ListObjectsV2 StartAfter, Delta's own S3LogStoreUtil), whatever the log's length. The Hadoop option
 * `delta.enableFastS3AListFrom` (Delta's name for the same listing in its S3SingleDriverLogStore; true here by
 * default) set to false goes back to the folder listing.
 *
 * Checksums: a listing that shows the newest commit without its checksum, where an earlier commit has one, derives
 * it when its writer leaves none (delta-rs) and waits for it up to `lakeline.delta.checksumWaitMs` (2000 by
 * default) when delta-spark wrote it, instead of letting Delta rebuild the table state in the next commit
 * ({@link #completeChecksums}).
 */
public class S3ConditionalPutLogStore extends HadoopFileSystemLogStore {

    static final String CONDITIONAL_CREATE = "fs.option.create.conditional.overwrite";
    static final String FAST_LIST_FROM = "delta.enableFastS3AListFrom";
    private static final Pattern COMMIT_FILE = Pattern.compile("\\d{20}\\.json");
    private static final ObjectMapper JSON = new ObjectMapper();
    private static final ConcurrentHashMap<String, Fence> FENCES = new ConcurrentHashMap<>();
    /** Hadoop option: how long a log listing waits for the newest commit's checksum (ms; 0 never waits). */
    static final String CHECKSUM_WAIT_MS = "lakeline.delta.checksumWaitMs";
    static final long DEFAULT_CHECKSUM_WAIT_MS = 2000;
    private static final long CHECKSUM_POLL_MS = 20;
    /** How many versions back a listing looks for a checksum to derive the newest ones from. */
    static final int MAX_DERIVED_VERSIONS = 20;
    /** Newest versions whose checksum a listing already derived or waited for: never twice for one version. */
    private static final Set<String> WAITED_FOR = ConcurrentHashMap.newKeySet();

    /** One fenced table: whose pipeline, the driver's token, and the newest version known not to fence it. */
    private static final class Fence {
        final String pipeline;
        final long token;
        long checked;

        Fence(String pipeline, long token, long checked) {
            this.pipeline = pipeline;
            this.token = token;
            this.checked = checked;
        }
    }

    /**
     * Fence the Delta table whose log folder is `logDir` for `pipeline` at `token`: from now on this JVM commits
     * to it only while no version after `checkedVersion` raises the table's fence for that pipeline above `token`.
     */
    public static void fence(String logDir, String pipeline, long token, long checkedVersion) {
        FENCES.put(new Path(logDir).toString(), new Fence(pipeline, token, checkedVersion));
    }

    /** Stop fencing the table whose log folder is `logDir` (the driver's run ended). */
    public static void unfence(String logDir) {
        FENCES.remove(new Path(logDir).toString());
    }

    public S3ConditionalPutLogStore(Configuration hadoopConf) {
        super(hadoopConf);
    }

    @Override
    public void write(Path path, Iterator<String> actions, Boolean overwrite, Configuration hadoopConf)
            throws IOException {
        FileSystem fs = path.getFileSystem(hadoopConf);
        Fence fence = overwrite || !COMMIT_FILE.matcher(path.getName()).matches() ? null
                : FENCES.get(path.getParent().toString());
        long version = fence == null ? -1 : Long.parseLong(path.getName().substring(0, 20));
        if (fence != null) {
            checkFence(fence, fs, path.getParent(), version);
        }
        FSDataOutputStream stream;
        if (overwrite) {
            stream = fs.create(path, true);
        } else {
            stream = createIfAbsent(fs, path);
        }
        boolean raises = false; // whether this commit itself raises the fence above the registered token
        try {
            try {
                while (actions.hasNext()) {
                    String action = actions.next();
                    raises = raises || (fence != null && raisedFence(action, fence) > fence.token);
                    stream.write((action + "\n").getBytes(StandardCharsets.UTF_8));
                }
            } finally {
                stream.close(); // the PUT happens here
            }
            if (fence != null && !raises) {
                synchronized (fence) {
                    fence.checked = Math.max(fence.checked, version); // a commit of this driver's
                }
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

    /** Read every version after the newest checked and below `version`; refuse if one raised the fence. */
    private static void checkFence(Fence fence, FileSystem fs, Path logDir, long version) throws IOException {
        synchronized (fence) {
            for (long v = fence.checked + 1; v < version; v++) {
                Path file = new Path(logDir, String.format("%020d.json", v));
                try (BufferedReader reader = new BufferedReader(
                        new InputStreamReader(fs.open(file), StandardCharsets.UTF_8))) {
                    for (String line = reader.readLine(); line != null; line = reader.readLine()) {
                        long raised = raisedFence(line, fence);
                        if (raised > fence.token) {
                            throw new FencedCommitException(logDir.getParent().toString(), fence.pipeline,
                                    fence.token, raised);
                        }
                    }
                }
                fence.checked = v;
            }
        }
    }

    /** The fence token a log action sets for the fence's pipeline (a metaData action's configuration), or -1. */
    private static long raisedFence(String action, Fence fence) throws IOException {
        if (!action.contains("\"metaData\"")) {
            return -1;
        }
        JsonNode configuration = JSON.readTree(action).path("metaData").path("configuration");
        return FencedCommitException.token(
                configuration.path(FencedCommitException.PROPERTY_PREFIX + fence.pipeline).asText(null));
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
    public Iterator<FileStatus> listFrom(Path path, Configuration hadoopConf) throws IOException {
        if (!isLogListing(path)) {
            return super.listFrom(path, hadoopConf);
        }
        FileSystem fs = path.getFileSystem(hadoopConf);
        List<FileStatus> listing = new ArrayList<>();
        if (isS3A(fs) && hadoopConf.getBoolean(FAST_LIST_FROM, true)) {
            Path resolved = fs.makeQualified(path);
            Path parent = resolved.getParent();
            if (!fs.exists(parent)) {
                throw new FileNotFoundException("No such file or directory: " + parent);
            }
            String from = resolved.getName();
            Arrays.stream(S3LogStoreUtil.s3ListFromArray(fs, resolved, parent))
                    .filter(status -> status.getPath().getName().compareTo(from) >= 0)
                    .forEach(listing::add);
        } else {
            super.listFrom(path, hadoopConf).forEachRemaining(listing::add);
        }
        try {
            completeChecksums(listing, fs, fs.makeQualified(path).getParent(),
                    hadoopConf.getLong(CHECKSUM_WAIT_MS, DEFAULT_CHECKSUM_WAIT_MS));
        } catch (IOException e) {
            // Completing the checksums only spares Delta a state rebuild: a store error or an unreadable checksum
            // here must not fail the listing (the snapshot update, or the commit that lost its version).
            org.slf4j.LoggerFactory.getLogger(S3ConditionalPutLogStore.class).warn(
                    "{}: the newest commit's checksum was not completed ({}); Delta derives it", path.getParent(),
                    e.toString());
        }
        listing.sort(Comparator.comparing(status -> status.getPath().getName()));
        return listing.iterator();
    }

    /**
     * Complete a log listing whose newest commit has no checksum yet, where an earlier commit has one (so this
     * log's writers leave checksums): in the listing, or, for a listing from the newest versions only (Delta's
     * conflict check after a lost commit), the version just before it.
     *
     * Why: a delta-spark commit after a version without a checksum rebuilds the whole table state (a Spark job over
     * the checkpoint and every commit since) inside that commit, to derive its own: 2-8 s of a stream's batch on
     * the steady benchmark, each time a compaction committed just before the stream listed or took its version.
     * - Versions written by an engine that leaves no checksum (delta-rs, the Spark-free rewrite of a hot partition)
     *   get theirs derived here from the one before ({@link DerivedChecksum}) and put if absent: a few requests, in
     *   the listing's own thread, whatever the rewriting process's priority.
     * - A delta-spark writer puts N.json first and N.crc a moment later: its checksum is waited for, up to
     *   `waitMs`, once per version (a writer that died between the two puts is waited for once).
     * No request is made unless the listing shows the gap.
     */
    static void completeChecksums(List<FileStatus> listing, FileSystem fs, Path logDir, long waitMs)
            throws IOException {
        long newest = -1;
        long oldest = Long.MAX_VALUE;
        Set<String> names = new HashSet<>();
        for (FileStatus status : listing) {
            String name = status.getPath().getName();
            names.add(name);
            if (COMMIT_FILE.matcher(name).matches()) {
                long version = Long.parseLong(name.substring(0, 20));
                newest = Math.max(newest, version);
                oldest = Math.min(oldest, version);
            }
        }
        if (newest < 1 || names.contains(checksumName(newest))) {
            return;
        }
        Path newestPath = new Path(logDir, checksumName(newest));
        if (WAITED_FOR.size() > 10_000) {
            WAITED_FOR.clear();
        }
        if (!WAITED_FOR.add(newestPath.toString())) {
            return; // once per version: derived, waited for, or found underivable already
        }
        long newestChecksum = -1;
        for (long v = newest - 1; v >= 0 && v >= newest - MAX_DERIVED_VERSIONS; v--) {
            if (names.contains(checksumName(v))) {
                newestChecksum = v;
                break;
            }
            if (v < oldest) {
                // Delta's conflict check lists from the version it tried to take: the checksum before is not in
                // the listing but in the log (or nowhere). One probe, only where the listing shows the gap.
                newestChecksum = fs.exists(new Path(logDir, checksumName(v))) ? v : -1;
                break;
            }
        }
        if (newestChecksum < 0) {
            return;
        }
        String checksum = readText(fs, new Path(logDir, checksumName(newestChecksum)));
        for (long v = newestChecksum + 1; v <= newest && checksum != null; v++) {
            Path path = new Path(logDir, checksumName(v));
            List<String> commit = readLines(fs, new Path(logDir, String.format("%020d.json", v)));
            if (commit == null || DerivedChecksum.writtenBySpark(commit)) {
                if (v == newest && waitMs > 0) {
                    awaitChecksum(listing, fs, path, waitMs);
                }
                return;
            } else {
                checksum = DerivedChecksum.derive(checksum, commit);
                if (checksum != null && putIfAbsent(fs, path, checksum) && v >= oldest) {
                    listing.add(fs.getFileStatus(path)); // only the listed versions' files: what Delta asked for
                }
            }
        }
    }

    /** Add `checksum` to the listing once it lands, waiting up to `waitMs`. */
    private static void awaitChecksum(List<FileStatus> listing, FileSystem fs, Path checksum, long waitMs)
            throws IOException {
        long deadline = System.nanoTime() + waitMs * 1_000_000;
        while (true) {
            try {
                listing.add(fs.getFileStatus(checksum));
                return;
            } catch (FileNotFoundException absent) {
                if (System.nanoTime() >= deadline) {
                    return;
                }
            }
            try {
                Thread.sleep(CHECKSUM_POLL_MS);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                return;
            }
        }
    }

    /** A stream whose close PUTs `path` only if no object is there (If-None-Match: *). */
    private static FSDataOutputStream createIfAbsent(FileSystem fs, Path path) throws IOException {
        FSDataOutputStreamBuilder<?, ?> builder = fs.createFile(path).overwrite(false);
        builder.must(CONDITIONAL_CREATE, true);
        return builder.build();
    }

    /** Whether `text` was put at `path`; false when a file is there already (its writer's checksum stands). */
    private static boolean putIfAbsent(FileSystem fs, Path path, String text) throws IOException {
        try (FSDataOutputStream stream = createIfAbsent(fs, path)) {
            stream.write(text.getBytes(StandardCharsets.UTF_8));
        } catch (org.apache.hadoop.fs.FileAlreadyExistsException e) {
            return false;
        } catch (IOException e) {
            if (isPreconditionFailure(e)) {
                return false;
            }
            throw e;
        }
        return true;
    }

    private static List<String> readLines(FileSystem fs, Path path) throws IOException {
        String text = readText(fs, path);
        return text == null ? null : Arrays.asList(text.split("\n"));
    }

    private static String readText(FileSystem fs, Path path) throws IOException {
        try (java.io.InputStream in = fs.open(path)) {
            return new String(in.readAllBytes(), StandardCharsets.UTF_8);
        } catch (FileNotFoundException absent) {
            return null;
        }
    }

    private static String checksumName(long version) {
        return String.format("%020d.crc", version);
    }

    /**
     * Only the log itself: Delta also lists data folders through the store (VACUUM's recursive walk, from the
     * name "\u0000"), and that walk needs the folder's sub-folders as entries, which a flat S3 key listing does
     * not give.
     */
    static boolean isLogListing(Path path) {
        Path parent = path.getParent();
        return parent != null && parent.getName().equals("_delta_log");
    }

    /** By class name, as S3A's is not on every classpath (S3LogStoreUtil needs it loaded). */
    static boolean isS3A(FileSystem fs) {
        FileSystem raw = fs;
        while (raw instanceof org.apache.hadoop.fs.FilterFileSystem filter) {
            raw = filter.getRawFileSystem();
        }
        return raw.getClass().getName().equals("org.apache.hadoop.fs.s3a.S3AFileSystem");
    }

    @Override
    public Boolean isPartialWriteVisible(Path path, Configuration hadoopConf) {
        return false; // an S3 PUT is all or nothing
    }
}
