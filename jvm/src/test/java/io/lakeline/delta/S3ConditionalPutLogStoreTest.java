package io.lakeline.delta;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.lakeline.fence.FencedCommitException;
import io.lakeline.testing.ConditionalPutFileSystem;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.FileAlreadyExistsException;
import java.nio.file.Files;
import java.util.List;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.Path;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/** Delta's put-if-absent contract on S3, and the fence that refuses a driver whose pipeline was taken over. */
class S3ConditionalPutLogStoreTest {

    private static final String LOG = "s3a://bucket/orders/_delta_log";

    @TempDir
    java.nio.file.Path root;

    private Configuration conf;
    private S3ConditionalPutLogStore store;

    @BeforeEach
    void setUp() {
        conf = ConditionalPutFileSystem.configuration(root);
        store = new S3ConditionalPutLogStore(conf);
    }

    @AfterEach
    void unfence() {
        S3ConditionalPutLogStore.unfence(LOG);
    }

    private static Path commit(long version) {
        return new Path(String.format("%s/%020d.json", LOG, version));
    }

    private void write(Path path, boolean overwrite, String... actions) throws IOException {
        store.write(path, List.of(actions).iterator(), overwrite, conf);
    }

    private String read(Path path) throws IOException {
        return Files.readString(root.resolve("bucket" + path.toUri().getPath()), StandardCharsets.UTF_8);
    }

    private boolean exists(Path path) throws IOException {
        return FileSystem.get(path.toUri(), conf).exists(path);
    }

    private static String raisingFence(String pipeline, long token) {
        return "{\"metaData\":{\"id\":\"t\",\"configuration\":{\"lakeline.fence." + pipeline + "\":\"" + token + "\"}}}";
    }

    @Test
    void writesACommitAsOneObjectOfItsActions() throws IOException {
        write(commit(0), false, "{\"commitInfo\":{}}", "{\"add\":{\"path\":\"a\"}}");
        assertEquals("{\"commitInfo\":{}}\n{\"add\":{\"path\":\"a\"}}\n", read(commit(0)));
    }

    @Test
    void refusesACommitWhoseVersionExistsAndKeepsTheFirst() throws IOException {
        write(commit(0), false, "{\"add\":{\"path\":\"first\"}}");
        FileAlreadyExistsException refused = assertThrows(FileAlreadyExistsException.class,
                () -> write(commit(0), false, "{\"add\":{\"path\":\"second\"}}"));
        assertTrue(refused.getMessage().endsWith("00000000000000000000.json"), refused.getMessage());
        assertEquals("{\"add\":{\"path\":\"first\"}}\n", read(commit(0)));
    }

    @Test
    void overwritesWhenDeltaAsksTo() throws IOException {
        Path lastCheckpoint = new Path(LOG + "/_last_checkpoint");
        write(lastCheckpoint, true, "{\"version\":1}");
        write(lastCheckpoint, true, "{\"version\":2}");
        assertEquals("{\"version\":2}\n", read(lastCheckpoint));
    }

    @Test
    void aPartialWriteIsNeverVisible() {
        assertFalse(store.isPartialWriteVisible(commit(0), conf));
    }

    @Test
    void refusesACommitAfterAnotherDriverRaisedTheFence() throws IOException {
        write(commit(0), false, "{\"commitInfo\":{}}");
        S3ConditionalPutLogStore.fence(LOG, "orders", 3, 0);
        write(commit(1), false, "{\"commitInfo\":{}}", raisingFence("orders", 4));  // the new driver's takeover
        FencedCommitException refused = assertThrows(FencedCommitException.class,
                () -> write(commit(2), false, "{\"add\":{\"path\":\"late\"}}"));
        assertTrue(refused.getMessage().contains("s3a://bucket/orders is fenced at token 4 for pipeline orders, "
                + "and this driver holds token 3"), refused.getMessage());
        assertFalse(exists(commit(2)), "a refused commit writes nothing");
    }

    @Test
    void commitsWhileNoVersionRaisedTheFenceAboveItsToken() throws IOException {
        write(commit(0), false, raisingFence("orders", 3));
        S3ConditionalPutLogStore.fence(LOG, "orders", 3, -1);
        write(commit(1), false, raisingFence("other", 9));  // another pipeline's fence is not this driver's
        write(commit(2), false, "{\"add\":{\"path\":\"mine\"}}");
        assertTrue(exists(commit(2)));
    }

    @Test
    void checksEveryVersionSinceTheLastOneChecked() throws IOException {
        S3ConditionalPutLogStore.fence(LOG, "orders", 3, -1);
        write(commit(0), false, "{\"commitInfo\":{}}");
        write(commit(1), false, "{\"commitInfo\":{}}");
        write(commit(2), false, raisingFence("orders", 5));  // this driver's own commit: it raises, so it is read
        assertThrows(FencedCommitException.class, () -> write(commit(3), false, "{\"commitInfo\":{}}"));
    }

    @Test
    void anUnfencedTableCommitsWhateverItsLogSays() throws IOException {
        write(commit(0), false, raisingFence("orders", 9));
        S3ConditionalPutLogStore.fence(LOG, "orders", 3, -1);
        S3ConditionalPutLogStore.unfence(LOG);
        write(commit(1), false, "{\"commitInfo\":{}}");
        assertTrue(exists(commit(1)));
    }

    @Test
    void listsTheLogFromAVersionInOrderOnAnyFileSystem() throws IOException {
        for (long v = 0; v < 12; v++) {
            write(commit(v), false, "{\"commitInfo\":{}}");
        }
        for (boolean fast : new boolean[] {true, false}) {
            conf.setBoolean(S3ConditionalPutLogStore.FAST_LIST_FROM, fast);
            List<String> names = new java.util.ArrayList<>();
            store.listFrom(commit(9), conf).forEachRemaining(status -> names.add(status.getPath().getName()));
            assertEquals(List.of(commit(9).getName(), commit(10).getName(), commit(11).getName()), names);
        }
        assertThrows(java.io.FileNotFoundException.class,
                () -> store.listFrom(new Path("s3a://bucket/missing/_delta_log/" + commit(0).getName()), conf));
    }

    private List<String> listNames(String log, long waitMs) throws IOException {
        conf.setLong(S3ConditionalPutLogStore.CHECKSUM_WAIT_MS, waitMs);
        List<String> names = new java.util.ArrayList<>();
        store.listFrom(new Path(log + "/00000000000000000000."), conf) // Delta's listing prefix
                .forEachRemaining(status -> names.add(status.getPath().getName()));
        return names;
    }

    private void logFiles(String log, String... names) throws IOException {
        for (String name : names) {
            write(new Path(log + "/" + name), false, "{}");
        }
    }

    @Test
    void aListingWaitsForTheNewestCommitsChecksumItsWriterIsAboutToPut() throws Exception {
        String log = "s3a://bucket/waits/_delta_log";
        logFiles(log, "00000000000000000000.json", "00000000000000000000.crc", "00000000000000000001.json");
        Thread writer = new Thread(() -> {
            try {
                Thread.sleep(200); // the writer's moment between its commit and its checksum
                logFiles(log, "00000000000000000001.crc");
            } catch (Exception e) {
                throw new RuntimeException(e);
            }
        });
        writer.start();
        List<String> names = listNames(log, 30_000);
        writer.join();
        assertEquals(List.of("00000000000000000000.crc", "00000000000000000000.json", "00000000000000000001.crc",
                "00000000000000000001.json"), names);
    }

    @Test
    void aListingDoesNotWaitWhereTheLogsWritersLeaveNoChecksums() throws IOException {
        String log = "s3a://bucket/no-checksums/_delta_log";
        logFiles(log, "00000000000000000000.json", "00000000000000000001.json");
        long start = System.nanoTime();
        assertEquals(List.of("00000000000000000000.json", "00000000000000000001.json"), listNames(log, 30_000));
        assertTrue(System.nanoTime() - start < 15_000_000_000L, "waited for a checksum no writer of this log puts");
    }

    @Test
    void aChecksumThatNeverComesIsWaitedForOnceUpToTheBound() throws IOException {
        String log = "s3a://bucket/never/_delta_log";
        logFiles(log, "00000000000000000000.json", "00000000000000000000.crc", "00000000000000000001.json");
        List<String> without = List.of("00000000000000000000.crc", "00000000000000000000.json",
                "00000000000000000001.json");
        long start = System.nanoTime();
        assertEquals(without, listNames(log, 2_000));
        long first = System.nanoTime() - start;
        assertTrue(first >= 2_000_000_000L, "gave up before the bound: " + first + " ns");
        start = System.nanoTime();
        assertEquals(without, listNames(log, 2_000));
        assertTrue(System.nanoTime() - start < 2_000_000_000L, "waited twice for one version's checksum");
    }

    @Test
    void listsFromAVersionOnlyInTheLogItself() {
        assertTrue(S3ConditionalPutLogStore.isLogListing(new Path("s3a://bucket/t/_delta_log/" + commit(3).getName())));
        // VACUUM walks data folders through the store from "\u0000": those keep the folder listing.
        assertFalse(S3ConditionalPutLogStore.isLogListing(new Path("s3a://bucket/t/\u0000")));
        assertFalse(S3ConditionalPutLogStore.isLogListing(new Path("s3a://bucket/t/day=2026-11-27/\u0000")));
    }

    @Test
    void recognisesS3PreconditionFailuresThroughTheCauseChain() {
        IOException s3 = new IOException("PUT: Status Code: 412, Request ID: x");
        assertTrue(S3ConditionalPutLogStore.isPreconditionFailure(new IOException("wrapped", s3)));
        assertTrue(S3ConditionalPutLogStore.isPreconditionFailure(new RemoteFileChangedException()));
        assertFalse(S3ConditionalPutLogStore.isPreconditionFailure(new IOException("Status Code: 503")));
        assertFalse(S3ConditionalPutLogStore.isPreconditionFailure(null));
    }

    /** Named as S3A's: the store matches the class by name, as S3A's is not on every classpath. */
    private static final class RemoteFileChangedException extends IOException {
    }
}
