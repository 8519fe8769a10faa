package io.lakeline.delta;

import java.io.IOException;
import java.util.Iterator;
import java.util.List;
import java.util.UUID;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;

/**
 * The checksum (N.crc) of a Delta version written by an engine that leaves none (delta-rs, Lakeline's Spark-free
 * rewrite of a hot partition), derived exactly from version N-1's checksum and version N's own actions, as
 * delta-spark derives its own commits' ({@code Checksum.computeNewChecksum}).
 *
 * Why: a delta-spark commit after a version without a checksum rebuilds the whole table state (a Spark job over
 * the checkpoint and every commit since) to write its own: seconds of a stream's batch, each time a rewrite
 * commits beside it. Only versions that add and remove files are derived (an OPTIMIZE, an append); anything
 * that changes what the actions do not show in full (metadata, protocol, transactions, domain metadata, deletion
 * vectors, a remove without its size) gives none, and Delta rebuilds as before.
 */
final class DerivedChecksum {

    private static final ObjectMapper JSON = new ObjectMapper();
    /** Actions a derived version may hold: files moved, and its commit information. */
    private static final List<String> DERIVABLE = List.of("add", "remove", "commitInfo");
    /**
     * Optional figures dropped rather than carried stale: the file list, and the deletion-vector histogram
     * (delta-spark accepts a checksum without them; the counts of deletion vectors stay exact, as no action here
     * carries one).
     */
    private static final List<String> DROPPED = List.of("allFiles", "deletedRecordCountsHistogramOpt");
    /** Delta spec's name of the file-size histogram, and delta-spark's older one (it reads both). */
    private static final List<String> HISTOGRAMS = List.of("fileSizeHistogram", "histogramOpt");

    private DerivedChecksum() {
    }

    /** Whether version N's commit was written by delta-spark, which puts its own checksum after it. */
    static boolean writtenBySpark(List<String> commitLines) throws IOException {
        for (String line : commitLines) {
            JsonNode info = JSON.readTree(line).path("commitInfo");
            if (!info.isMissingNode()) {
                return info.path("engineInfo").asText("").contains("Delta-Lake/");
            }
        }
        return false;
    }

    /** Version N's checksum (JSON) from N-1's and N's commit lines, or null where it could not be exact. */
    static String derive(String previousChecksum, List<String> commitLines) throws IOException {
        JsonNode parsed = JSON.readTree(previousChecksum);
        if (!(parsed instanceof ObjectNode previous) || !previous.path("numFiles").canConvertToExactIntegral()
                || !previous.path("tableSizeBytes").canConvertToExactIntegral()
                || !previous.path("metadata").isObject() || !previous.path("protocol").isObject()) {
            return null;
        }
        ObjectNode checksum = previous.deepCopy();
        checksum.remove(DROPPED);
        ObjectNode histogram = null;
        for (String name : HISTOGRAMS) {
            if (checksum.path(name).isObject()) {
                histogram = (ObjectNode) checksum.get(name);
            }
        }
        long files = previous.get("numFiles").asLong();
        long bytes = previous.get("tableSizeBytes").asLong();
        JsonNode inCommitTimestamp = null;
        for (String line : commitLines) {
            if (line.isBlank()) {
                continue;
            }
            JsonNode action = JSON.readTree(line);
            Iterator<String> keys = action.fieldNames();
            String kind = keys.hasNext() ? keys.next() : "";
            if (!DERIVABLE.contains(kind) || keys.hasNext()) {
                return null;
            }
            JsonNode body = action.get(kind);
            if (kind.equals("commitInfo")) {
                inCommitTimestamp = body.get("inCommitTimestamp");
                continue;
            }
            JsonNode size = body.get("size");
            if (size == null || !size.canConvertToExactIntegral() || isPresent(body.get("deletionVector"))) {
                return null;
            }
            int sign = kind.equals("add") ? 1 : -1;
            files += sign;
            bytes += sign * size.asLong();
            if (histogram != null && !moveInHistogram(histogram, size.asLong(), sign)) {
                return null;
            }
        }
        if (isPresent(previous.get("inCommitTimestampOpt"))) {
            if (!isPresent(inCommitTimestamp)) {
                return null;
            }
            checksum.set("inCommitTimestampOpt", inCommitTimestamp);
        }
        checksum.put("txnId", UUID.randomUUID().toString());
        checksum.put("numFiles", files);
        checksum.put("tableSizeBytes", bytes);
        return JSON.writeValueAsString(checksum);
    }

    /** Add (sign 1) or remove (-1) a file of `size` bytes in its bin, as delta-spark's FileSizeHistogram does. */
    private static boolean moveInHistogram(ObjectNode histogram, long size, int sign) {
        JsonNode bounds = histogram.path("sortedBinBoundaries");
        if (!(histogram.get("fileCounts") instanceof ArrayNode counts)
                || !(histogram.get("totalBytes") instanceof ArrayNode totals)
                || !bounds.isArray() || counts.size() != bounds.size() || totals.size() != bounds.size()) {
            return false;
        }
        int bin = -1; // the last bin whose lower bound is at most `size`; none below the first bound
        for (int i = 0; i < bounds.size() && bounds.get(i).asLong() <= size; i++) {
            bin = i;
        }
        if (bin >= 0) {
            counts.set(bin, counts.get(bin).asLong() + sign);
            totals.set(bin, totals.get(bin).asLong() + sign * size);
        }
        return true;
    }

    private static boolean isPresent(JsonNode node) {
        return node != null && !node.isNull() && !node.isMissingNode();
    }
}
