package io.lakeline.spark;

import java.time.Instant;
import org.apache.spark.sql.Column;
import org.apache.spark.sql.api.java.UDF0;
import org.apache.spark.sql.functions;
import org.apache.spark.sql.types.DataTypes;

/**
 * A fixed instant as a function of no arguments. A timestamp literal is written into Spark's generated code as a
 * number, so a batch-time literal (Lakeline's {@code _ingested_at}) makes every micro-batch's code new: compiled
 * again, and its per-row loops run interpreted until the JIT compiles them again. This function's value travels
 * as an object the generated code refers to, so the code stays the same from batch to batch.
 */
public final class FixedInstant implements UDF0<Instant> {
    private static final long serialVersionUID = 1L;

    private final Instant value;

    /** @param iso an ISO-8601 instant, e.g. {@code 2026-11-24T05:00:00.123456Z} */
    public FixedInstant(String iso) {
        this.value = Instant.parse(iso);
    }

    /** A non-null timestamp column of {@code iso}'s value (see the class comment). */
    public static Column column(String iso) {
        return functions.udf(new FixedInstant(iso), DataTypes.TimestampType).asNonNullable().apply();
    }

    @Override
    public Instant call() {
        return value;
    }
}
