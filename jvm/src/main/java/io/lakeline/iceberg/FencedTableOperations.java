package io.lakeline.iceberg;

import java.util.Map;
import java.util.Objects;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;

import org.apache.iceberg.Snapshot;
import org.apache.iceberg.TableMetadata;
import org.apache.iceberg.TableOperations;
import org.apache.iceberg.encryption.EncryptionManager;
import org.apache.iceberg.exceptions.CommitFailedException;
import org.apache.iceberg.io.FileIO;
import org.apache.iceberg.io.LocationProvider;

import io.lakeline.fence.FencedCommitException;

/**
 * A table's operations with Lakeline's fence checked inside the commit. The catalog commits `metadata` only if
 * `base` is still the table's current metadata (the JDBC catalog's compare-and-swap of the metadata pointer, the
 * REST catalog's requirements), so a check of `base` here is atomic with the commit: a fence raised after the check
 * makes the swap fail, and Iceberg retries on the new base, where the check refuses.
 *
 * Before the swap, a commit waits while a Spark-free rewrite holds the table's commit turn ({@link CommitTurn}).
 *
 * Refused: a snapshot carrying a Lakeline commit record (snapshot summary `lakeline.commit`) of pipeline P whose
 * token (`fence`) is below the base's `lakeline.fence.P`; and lowering any `lakeline.fence.*` property. Everything
 * else passes untouched: compaction, retention, other writers, and a record without a token (a run that holds no
 * lease: a checkpoint off S3, a library caller), as on Delta, where only a driver with a lease registers a fence.
 */
final class FencedTableOperations implements TableOperations {

    static final String COMMIT_KEY = "lakeline.commit";
    private static final ObjectMapper JSON = new ObjectMapper();

    private final TableOperations ops;
    private final String table;

    FencedTableOperations(TableOperations ops, String table) {
        this.ops = ops;
        this.table = table;
    }

    @Override
    public void commit(TableMetadata base, TableMetadata metadata) {
        check(table, base, metadata);
        if (base != null && CommitTurn.await(ops.io(), base.location()) > 0) {
            // The rewrite most likely committed meanwhile: retry on its metadata now (Iceberg's own retry), before
            // the catalog writes this commit's metadata file only to refuse the swap.
            TableMetadata current = ops.refresh();
            if (current != null && !Objects.equals(current.metadataFileLocation(), base.metadataFileLocation())) {
                throw new CommitFailedException("%s changed while this commit waited for a rewrite's turn", table);
            }
        }
        ops.commit(base, metadata);
    }

    static void check(String table, TableMetadata base, TableMetadata metadata) {
        if (base == null) {
            return; // a create: nothing is fenced yet
        }
        Map<String, String> before = base.properties();
        for (Map.Entry<String, String> entry : before.entrySet()) {
            if (!entry.getKey().startsWith(FencedCommitException.PROPERTY_PREFIX)) {
                continue;
            }
            long fence = FencedCommitException.token(entry.getValue());
            long after = FencedCommitException.token(metadata.properties().get(entry.getKey()));
            if (after < fence) {
                String pipeline = entry.getKey().substring(FencedCommitException.PROPERTY_PREFIX.length());
                throw new FencedCommitException(table, pipeline, after, fence);
            }
        }
        Snapshot added = metadata.currentSnapshot();
        Snapshot previous = base.currentSnapshot();
        if (added == null || (previous != null && previous.snapshotId() == added.snapshotId())) {
            return;
        }
        String record = added.summary() == null ? null : added.summary().get(COMMIT_KEY);
        if (record == null) {
            return;
        }
        JsonNode parsed;
        try {
            parsed = JSON.readTree(record);
        } catch (java.io.IOException e) {
            return; // not a Lakeline record: nothing to check
        }
        if (parsed == null || !parsed.hasNonNull("pipeline") || !parsed.hasNonNull("fence")) {
            return;
        }
        String pipeline = parsed.get("pipeline").asText();
        long fence = FencedCommitException.token(before.get(FencedCommitException.PROPERTY_PREFIX + pipeline));
        long token = parsed.get("fence").asLong();
        if (fence > token) {
            throw new FencedCommitException(table, pipeline, token, fence);
        }
    }

    @Override
    public TableMetadata current() {
        return ops.current();
    }

    @Override
    public TableMetadata refresh() {
        return ops.refresh();
    }

    @Override
    public FileIO io() {
        return ops.io();
    }

    @Override
    public EncryptionManager encryption() {
        return ops.encryption();
    }

    @Override
    public String metadataFileLocation(String fileName) {
        return ops.metadataFileLocation(fileName);
    }

    @Override
    public LocationProvider locationProvider() {
        return ops.locationProvider();
    }

    @Override
    public TableOperations temp(TableMetadata uncommittedMetadata) {
        return ops.temp(uncommittedMetadata);
    }

    @Override
    public long newSnapshotId() {
        return ops.newSnapshotId();
    }

    @Override
    public boolean requireStrictCleanup() {
        return ops.requireStrictCleanup();
    }
}
