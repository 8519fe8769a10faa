import org.apache.iceberg.exceptions.CommitFailedException;
import org.apache.iceberg.util.Tasks;
import org.slf4j.LoggerFactory;

/** A commit conflict Iceberg's task runner retries once, a compaction commit that lost (Lakeline retries it), then
 * warnings as S3A logs a lost conditional PUT, and one warning no layer silences. */
public class RetryOnce {
  public static void main(String[] args) {
    int[] tries = {0};
    Tasks.range(1).retry(2).exponentialBackoff(1, 1, 1000, 1.0).onlyRetryOn(CommitFailedException.class)
        .run(i -> { if (tries[0]++ == 0) throw new CommitFailedException("Cannot commit t: stale metadata"); });
    System.out.println("committed after " + tries[0] + " attempts");
    LoggerFactory.getLogger("org.apache.iceberg.actions.RewriteDataFilesCommitManager")
        .error("Cannot commit groups [RewriteFileGroup{numRewrittenFiles=272}], attempting to clean up written files",
            new CommitFailedException("Cannot commit t: metadata location has changed"));
    LoggerFactory.getLogger("org.apache.hadoop.fs.s3a.S3ABlockOutputStream")
        .warn("Transfer failure of block FileBlock{index=1, state=Upload}");
    LoggerFactory.getLogger("org.apache.hadoop.fs.s3a.S3AInstrumentation")
        .warn("Closing output stream statistics while data is still marked as pending upload in "
            + "OutputStreamStatistics{counters=((stream_write_bytes=23486))}");
    LoggerFactory.getLogger("org.apache.spark.sql.execution.streaming.ProcessingTimeExecutor")
        .warn("Current batch is falling behind.");
  }
}
