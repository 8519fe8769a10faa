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

    /** A delta-spark commit's information: its writer puts the version's checksum after it. */
    private static final String SPARK_COMMIT = "{\"commitInfo\":{\"engineInfo\":\"Apache-Spark/4.1.3 Delta-Lake/4.4.0\"}}";

    private void logFiles(String log, String... names) throws IOException {
        for (String name : names) {
            write(new Path(log + "/" + name), false, name.endsWith(".json") ? SPARK_COMMIT : "{}");
        }
    }

    private void logFile(String log, String name, String... lines) throws IOException {
        write(new Path(log + "/" + name), false, lines);
    }

    private static final String CHECKSUM_0 = "{\"txnId\":\"t0\",\"tableSizeBytes\":300,\"numFiles\":3,"
            + "\"numMetadata\":1,\"numProtocol\":1,\"setTransactions\":[{\"appId\":\"orders\",\"version\":7}],"
            + "\"domainMetadata\":[],\"metadata\":{\"id\":\"m\"},\"protocol\":{\"minReaderVersion\":1},"
            + "\"fileSizeHistogram\":{\"sortedBinBoundaries\":[0,100,1000],\"fileCounts\":[0,3,0],"
            + "\"totalBytes\":[0,300,0]},\"allFiles\":[{\"path\":\"a\"}]}";

    private static final String DELTA_RS_INFO = "{\"commitInfo\":{\"operation\":\"OPTIMIZE\",\"clientVersion\":\"delta-rs.1.6.6\"}}";

    private static String remove(String path, long size) {
        return "{\"remove\":{\"path\":\"" + path + "\",\"dataChange\":false,\"size\":" + size + "}}";
    }

    private static String add(String path, long size) {
        return "{\"add\":{\"path\":\"" + path + "\",\"dataChange\":false,\"size\":" + size + "}}";
    }

    private com.fasterxml.jackson.databind.JsonNode checksumAt(String log, long version) throws IOException {
        return new com.fasterxml.jackson.databind.ObjectMapper().readTree(
                read(new Path(String.format("%s/%020d.crc", log, version))));
    }

    @Test
    void aListingDerivesTheChecksumOfAVersionWhoseWriterLeavesNone() throws IOException {
        String log = "s3a://bucket/derived/_delta_log";
        logFile(log, "00000000000000000000.json", SPARK_COMMIT);
        logFile(log, "00000000000000000000.crc", CHECKSUM_0);
        // Two delta-rs commits in a row: three 100-byte files into one of 290, then a 2,000-byte append.
        logFile(log, "00000000000000000001.json", DELTA_RS_INFO, remove("a", 100), remove("b", 100),
                remove("c", 100), add("d", 290));
        logFile(log, "00000000000000000002.json", DELTA_RS_INFO, add("e", 2_000));
        long start = System.nanoTime();
        List<String> names = listNames(log, 30_000);
        assertTrue(System.nanoTime() - start < 15_000_000_000L, "waited instead of deriving");
        assertTrue(names.containsAll(List.of("00000000000000000001.crc", "00000000000000000002.crc")), names.toString());
        var one = checksumAt(log, 1);
        assertEquals(1, one.get("numFiles").asLong());
        assertEquals(290, one.get("tableSizeBytes").asLong());
        assertEquals("[0,1,0]", one.get("fileSizeHistogram").get("fileCounts").toString());
        assertEquals("[0,290,0]", one.get("fileSizeHistogram").get("totalBytes").toString());
        var two = checksumAt(log, 2);
        assertEquals(2, two.get("numFiles").asLong());
        assertEquals(2_290, two.get("tableSizeBytes").asLong());
        assertEquals("[0,1,1]", two.get("fileSizeHistogram").get("fileCounts").toString());
        // What the actions leave unchanged is carried; the file list, which they would change, is dropped.
        assertEquals("[{\"appId\":\"orders\",\"version\":7}]", two.get("setTransactions").toString());
        assertEquals("m", two.get("metadata").get("id").asText());
        assertEquals("{\"minReaderVersion\":1}", two.get("protocol").toString());
        assertEquals("[]", two.get("domainMetadata").toString());
        assertEquals(1, two.get("numMetadata").asLong());
        assertEquals(1, two.get("numProtocol").asLong());
        assertFalse(two.has("allFiles"));
        assertFalse(two.get("txnId").asText().equals("t0"));
    }

    @Test
    void aCommitThatLostItsVersionFindsTheWinnersChecksumDerived() throws IOException {
        // The stream tried version 1 and lost it to a delta-rs rewrite: Delta's conflict check lists from version 1
        // only, so the checksum to derive from (version 0's) is not in that listing.
        String log = "s3a://bucket/lost-race/_delta_log";
        logFile(log, "00000000000000000000.json", SPARK_COMMIT);
        logFile(log, "00000000000000000000.crc", CHECKSUM_0);
        logFile(log, "00000000000000000001.json", DELTA_RS_INFO, remove("a", 100), add("d", 150));
        conf.setLong(S3ConditionalPutLogStore.CHECKSUM_WAIT_MS, 30_000);
        List<String> names = new java.util.ArrayList<>();
        store.listFrom(new Path(log + "/00000000000000000001."), conf) // Delta's listing prefix
                .forEachRemaining(status -> names.add(status.getPath().getName()));
        assertEquals(List.of("00000000000000000001.crc", "00000000000000000001.json"), names);
        var one = checksumAt(log, 1);
        assertEquals(3, one.get("numFiles").asLong());
        assertEquals(350, one.get("tableSizeBytes").asLong());
        assertEquals("[0,3,0]", one.get("fileSizeHistogram").get("fileCounts").toString());
        assertEquals("[0,350,0]", one.get("fileSizeHistogram").get("totalBytes").toString());
    }

    @Test
    void anUnreadableChecksumLeavesTheListingWhole() throws IOException {
        String log = "s3a://bucket/unreadable/_delta_log";
        logFile(log, "00000000000000000000.json", SPARK_COMMIT);
        logFile(log, "00000000000000000000.crc", "{not json");
        logFile(log, "00000000000000000001.json", DELTA_RS_INFO, add("d", 1));
        assertEquals(List.of("00000000000000000000.crc", "00000000000000000000.json", "00000000000000000001.json"),
                listNames(log, 30_000));
    }

    @Test
    void noChecksumIsDerivedWhereItCouldNotBeExact() throws IOException {
        String log = "s3a://bucket/not-derived/_delta_log";
        logFile(log, "00000000000000000000.json", SPARK_COMMIT);
        logFile(log, "00000000000000000000.crc", CHECKSUM_0);
        logFile(log, "00000000000000000001.json", DELTA_RS_INFO, "{\"metaData\":{\"id\":\"m2\"}}", add("d", 1));
        assertFalse(listNames(log, 30_000).contains("00000000000000000001.crc"));
        String[] underivable = {
            "{\"remove\":{\"path\":\"a\",\"dataChange\":false}}", // no size
            "{\"txn\":{\"appId\":\"orders\",\"version\":8}}",
            "{\"add\":{\"path\":\"x\",\"size\":5,\"deletionVector\":{\"storageType\":\"u\"}}}",
        };
        for (String action : underivable) {
            assertEquals(null, DerivedChecksum.derive(CHECKSUM_0, List.of(DELTA_RS_INFO, action)), action);
        }
        String withoutCount = CHECKSUM_0.replace("\"numFiles\":3,", "");
        assertEquals(null, DerivedChecksum.derive(withoutCount, List.of(DELTA_RS_INFO, add("x", 5))));
        String withTimestamps = CHECKSUM_0.replace("\"numFiles\"", "\"inCommitTimestampOpt\":5,\"numFiles\"");
        assertEquals(null, DerivedChecksum.derive(withTimestamps, List.of(DELTA_RS_INFO, add("x", 5))));
        String timed = DerivedChecksum.derive(withTimestamps,
                List.of("{\"commitInfo\":{\"inCommitTimestamp\":9}}", add("x", 5)));
        assertTrue(timed.contains("\"inCommitTimestampOpt\":9"), timed);
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
