package io.lakeline.spark;

import java.util.Optional;
import sun.misc.Signal;

/**
 * SIGTERM to the Spark JVM of a Python driver, passed on to the driver instead of ending the JVM.
 *
 * <p>Ctrl-C in a terminal, {@code kill -TERM -<pgid>}, systemd and Airflow signal the driver's whole process group,
 * so the JVM PySpark started gets the signal too. PySpark already makes the JVM ignore SIGINT; on SIGTERM the JVM
 * would run its shutdown hooks and exit while the Python side is still stopping the query cleanly, which then fails
 * with a broken py4j connection. With this handler the Python driver alone decides when to stop, and the JVM still
 * ends with it: PySpark's gateway exits when the driver's end of its stdin closes, kill -9 included.
 */
public final class StopSignal {
    private StopSignal() {
    }

    /**
     * Install the handler when this JVM's parent is {@code driverPid} (PySpark started the JVM; under spark-submit
     * the JVM is the parent and nothing is installed): a SIGTERM to this JVM is then sent on to the driver, which
     * stops after the current batch; if the driver is gone, the JVM exits as it would have. Returns
     * {@code driverPid} when installed, -1 when not.
     */
    public static synchronized long passTo(long driverPid) {
        Optional<ProcessHandle> parent = ProcessHandle.current().parent();
        if (parent.isEmpty() || parent.get().pid() != driverPid) {
            return -1;
        }
        ProcessHandle driver = parent.get();
        // isAlive() compares the process start time too, so a recycled pid is never signalled.
        Signal.handle(new Signal("TERM"), signal -> {
            if (!driver.isAlive() || !driver.destroy()) {
                Runtime.getRuntime().exit(128 + signal.getNumber());
            }
        });
        return driver.pid();
    }
}
