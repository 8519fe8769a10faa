package io.lakeline.iceberg;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.UUID;
import org.apache.iceberg.Schema;
import org.apache.iceberg.Snapshot;
import org.apache.iceberg.Table;
import org.apache.iceberg.catalog.Namespace;
import org.apache.iceberg.catalog.TableIdentifier;
import org.apache.iceberg.exceptions.NotFoundException;
import org.apache.iceberg.inmemory.InMemoryCatalog;
import org.apache.iceberg.inmemory.InMemoryFileIO;
import org.apache.iceberg.io.FileIO;
import org.apache.iceberg.io.InputFile;
import org.apache.iceberg.io.OutputFile;
import org.apache.iceberg.types.Types;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;

/** A commit waits, just before its swap, while a Spark-free rewrite holds the table's commit turn; never for ever. */
class CommitTurnTest {

    private static final TableIdentifier ORDERS = TableIdentifier.of("db", "orders");

    /** Time that moves only when the code under test sleeps, and a hook run at each sleep. */
    private static final class StepClock implements CommitTurn.Clock {
        long now = 1_000_000;
        int slept;
        Runnable atSleep = () -> { };

        @Override
        public long millis() {
            return now;
        }

        @Override
        public void sleep(long millis) {
            now += millis;
            slept++;
            atSleep.run();
        }
    }

    private final StepClock clock = new StepClock();
    private FencingCatalog catalog;
    private Table table;

    @BeforeEach
    void setUp() {
        CommitTurn.clock = clock;
        catalog = new FencingCatalog();
        catalog.initialize("lakeline", Map.of(FencingCatalog.DELEGATE_IMPL, InMemoryCatalog.class.getName(),
                "warehouse", "memory://warehouse-" + UUID.randomUUID())); // turns ignored are per location
        catalog.createNamespace(Namespace.of("db"), Map.of());
        table = catalog.buildTable(ORDERS, new Schema(Types.NestedField.required(1, "id", Types.LongType.get())))
                .create();
        table = catalog.loadTable(ORDERS);
        CommitTurn.takeWaitedSeconds(table.location());
    }

    @AfterEach
    void tearDown() {
        CommitTurn.clock = CommitTurn.Clock.SYSTEM;
        release(table.io(), table.location());
    }

    /** What ingest/formats/commit_turn.py writes: its owner and an expiry in epoch seconds. */
    private static void hold(FileIO io, String location, String owner, long expiresAtMillis) {
        OutputFile turn = io.newOutputFile(CommitTurn.path(location));
        try (var out = turn.createOrOverwrite()) {
            out.write(("{\"owner\": \"" + owner + "\", \"expires_at\": " + expiresAtMillis / 1000.0 + "}")
                    .getBytes(StandardCharsets.UTF_8));
        } catch (java.io.IOException e) {
            throw new java.io.UncheckedIOException(e);
        }
    }

    private static void release(FileIO io, String location) {
        try {
            io.deleteFile(CommitTurn.path(location));
        } catch (NotFoundException e) {
            // released already
        }
    }

    @Test
    void withNoTurnACommitReadsOnceAndDoesNotWait() {
        List<String> read = new ArrayList<>();
        FileIO counting = new InMemoryFileIO() {
            @Override
            public InputFile newInputFile(String path) {
                read.add(path);
                return super.newInputFile(path);
            }
        };
        assertEquals(0, CommitTurn.await(counting, table.location()));
        assertEquals(List.of(table.location() + "/_lakeline/commit-turn.json"), read);
        assertEquals(0, clock.slept);
        table.newAppend().commit();
        assertEquals(0.0, CommitTurn.takeWaitedSeconds(table.location()));
    }

    @Test
    void aCommitWaitsUntilTheRewriteCommittedAndLandsOnTopOfIt() {
        hold(table.io(), table.location(), "rewrite", clock.now + 10_000);
        Table rewrite = catalog.loadTable(ORDERS);
        clock.atSleep = () -> {
            if (clock.slept == 4) { // the rewrite's commit lands and its turn ends (pyiceberg: no wait of its own)
                release(table.io(), table.location());
                rewrite.newAppend().set("lakeline.rewrite", "p").commit();
            }
        };
        table.newAppend().set(FencedTableOperations.COMMIT_KEY, "{\"pipeline\":\"orders\"}").commit();
        assertEquals(4, clock.slept);
        assertEquals(0.2, CommitTurn.takeWaitedSeconds(table.location()), 1e-9);
        assertEquals(0.0, CommitTurn.takeWaitedSeconds(table.location()), "reported once");
        table.refresh();
        Snapshot stream = table.currentSnapshot();
        assertTrue(stream.summary().containsKey(FencedTableOperations.COMMIT_KEY));
        assertEquals("p", table.snapshot(stream.parentId()).summary().get("lakeline.rewrite"),
                "the commit retried on the rewrite's snapshot, not over it");
    }

    @Test
    void aTurnWhoseRewriterDiedHoldsCommitsAtMostOnceUntilItExpires() {
        hold(table.io(), table.location(), "dead", clock.now + 60_000); // renewed past TURN_MS, never released
        assertEquals(CommitTurn.TURN_MS, CommitTurn.await(table.io(), table.location()), CommitTurn.POLL_MS);
        int slept = clock.slept;
        table.newAppend().commit(); // that owner is ignored from now on
        assertEquals(slept, clock.slept);
        hold(table.io(), table.location(), "expired", clock.now - 1);
        assertEquals(0, CommitTurn.await(table.io(), table.location()));
    }

    @Test
    void aTurnAfterAnIgnoredOneIsWaitedFor() {
        hold(table.io(), table.location(), "dead", clock.now - 1);
        assertEquals(0, CommitTurn.await(table.io(), table.location()));
        hold(table.io(), table.location(), "next", clock.now + 10_000);
        clock.atSleep = () -> release(table.io(), table.location());
        assertEquals(CommitTurn.POLL_MS, CommitTurn.await(table.io(), table.location()));
    }

    @Test
    void aStoreThatFailsTheReadNeverFailsOrHoldsACommit() throws Exception {
        FileIO failing = new InMemoryFileIO() {
            @Override
            public InputFile newInputFile(String path) {
                throw new IllegalStateException("503 SlowDown");
            }
        };
        assertEquals(0, CommitTurn.await(failing, table.location()));
        hold(table.io(), table.location(), "unreadable", clock.now + 10_000);
        table.io().newOutputFile(CommitTurn.path(table.location())).createOrOverwrite().close();
        assertEquals(0, CommitTurn.await(table.io(), table.location()), "an empty (half-written) turn");
    }

    @Test
    void whileACommitWaitsItSaysSo() {
        hold(table.io(), table.location(), "rewrite", clock.now + 10_000);
        List<Boolean> seen = new ArrayList<>();
        clock.atSleep = () -> {
            seen.add(CommitTurn.waiting(table.location()));
            release(table.io(), table.location());
        };
        assertFalse(CommitTurn.waiting(table.location()));
        CommitTurn.await(table.io(), table.location());
        assertEquals(List.of(true), seen);
        assertFalse(CommitTurn.waiting(table.location()));
    }
}
