package io.lakeline.fence;

/**
 * A commit refused because another driver of the same pipeline has since taken the pipeline over: the table's
 * fence property (lakeline.fence.PIPELINE) holds a higher token than the commit's. Never retried: the driver that
 * gets it has lost its lease and must stop (ARCHITECTURE.md, "One driver per pipeline, across hosts").
 */
public class FencedCommitException extends RuntimeException {

    public static final String PROPERTY_PREFIX = "lakeline.fence.";

    public FencedCommitException(String table, String pipeline, long token, long fence) {
        super("lakeline fence: " + table + " is fenced at token " + fence + " for pipeline " + pipeline
                + ", and this driver holds token " + token + ": another driver has taken the pipeline over, so "
                + "this commit was refused and the driver stops");
    }

    /** The fence token `value` names (a table property's value), or -1 when there is none. */
    public static long token(String value) {
        if (value == null || value.isEmpty()) {
            return -1;
        }
        try {
            return Long.parseLong(value.trim());
        } catch (NumberFormatException e) {
            return -1;
        }
    }
}
