package io.lakeline.iceberg;

import java.io.IOException;
import java.io.InputStream;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;

import org.apache.iceberg.exceptions.NotFoundException;
import org.apache.iceberg.io.FileIO;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * The commits' side of a Spark-free rewrite's commit turn: `ingest/formats/commit_turn.py` writes
 * `<table>/_lakeline/commit-turn.json` (its owner and an expiry, epoch seconds) around its commit's attempts, and a
 * commit through {@link FencedTableOperations} waits, just before its swap, while that turn is live.
 *
 * Why here and not before the stream's batch: the stream then writes its data files and manifests while the rewrite
 * commits, and waits only for what is left of the rewrite's attempt when its own swap comes. The turn only orders
 * commits: a turn that cannot be read is no reason to wait, one past its expiry is ignored, and one held longer
 * than TURN_MS (its rewriter renewing it for ever) is waited for once, then ignored.
 */
public final class CommitTurn {

    static final String PATH = "/_lakeline/commit-turn.json";
    static final long TURN_MS = 10_000; // the longest one turn holds a commit (TURN_S in commit_turn.py)
    static final long POLL_MS = 50;

    private static final Logger LOG = LoggerFactory.getLogger(CommitTurn.class);
    private static final ObjectMapper JSON = new ObjectMapper();
    // Per table location: the owner of a turn waited for once and not again, and the waits not yet reported.
    private static final Map<String, String> IGNORED = new ConcurrentHashMap<>();
    private static final Map<String, Long> WAITED_MILLIS = new ConcurrentHashMap<>();
    private static final Set<String> WAITING = ConcurrentHashMap.newKeySet();
    static volatile Clock clock = Clock.SYSTEM; // tests move time themselves

    /** Time as the turn sees it: wall-clock milliseconds (the turn's expiry is another process's wall clock). */
    interface Clock {
        long millis();

        void sleep(long millis) throws InterruptedException;

        Clock SYSTEM = new Clock() {
            @Override
            public long millis() {
                return System.currentTimeMillis();
            }

            @Override
            public void sleep(long millis) throws InterruptedException {
                Thread.sleep(millis);
            }
        };
    }

    private CommitTurn() {
    }

    static String path(String tableLocation) {
        return tableLocation.replaceAll("/+$", "") + PATH;
    }

    /**
     * Wait while a rewrite holds a live turn on the table at `tableLocation` (one read when none does); the
     * milliseconds waited.
     */
    static long await(FileIO io, String tableLocation) {
        Clock clock = CommitTurn.clock;
        String path = path(tableLocation);
        long started = clock.millis();
        boolean slept = false;
        try {
            JsonNode held;
            while ((held = read(io, path)) != null) {
                String owner = held.path("owner").asText("");
                long expiresAt = Math.round(held.path("expires_at").asDouble(0) * 1000);
                if (expiresAt <= clock.millis() || owner.equals(IGNORED.get(tableLocation))) {
                    IGNORED.put(tableLocation, owner);
                    break;
                }
                if (clock.millis() - started >= TURN_MS) {
                    IGNORED.put(tableLocation, owner);
                    LOG.warn("commit turn {} held by {} for over {} s; committing without it", path, owner,
                            TURN_MS / 1000);
                    break;
                }
                WAITING.add(tableLocation);
                slept = true;
                clock.sleep(POLL_MS);
            }
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt(); // the commit goes on; whoever interrupted decides
        } finally {
            WAITING.remove(tableLocation);
        }
        long waited = slept ? clock.millis() - started : 0; // a read that found no live turn is not a wait
        if (waited > 0) {
            WAITED_MILLIS.merge(tableLocation, waited, Long::sum);
        }
        return waited;
    }

    /** The turn as written, or null: none there, or a store that fails the read (never a reason to fail a commit). */
    private static JsonNode read(FileIO io, String path) {
        try (InputStream in = io.newInputFile(path).newStream()) {
            return JSON.readTree(in);
        } catch (NotFoundException e) {
            return null;
        } catch (IOException | RuntimeException e) {
            LOG.warn("commit turn {} unreadable ({}); committing without waiting", path, e.toString());
            return null;
        }
    }

    /** Whether a commit to the table at `tableLocation` is waiting for a turn now (what a stalled stream is doing). */
    public static boolean waiting(String tableLocation) {
        return WAITING.contains(tableLocation);
    }

    /**
     * Seconds the commits to the table at `tableLocation` waited for a turn since the last call: the stream's batch
     * reports them as its `turn` phase.
     */
    public static double takeWaitedSeconds(String tableLocation) {
        Long millis = WAITED_MILLIS.remove(tableLocation);
        return millis == null ? 0.0 : millis / 1000.0;
    }
}
