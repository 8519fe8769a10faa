package io.lakeline.iceberg;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.lakeline.fence.FencedCommitException;
import java.util.Map;
import org.apache.iceberg.Schema;
import org.apache.iceberg.Table;
import org.apache.iceberg.catalog.Namespace;
import org.apache.iceberg.catalog.TableIdentifier;
import org.apache.iceberg.inmemory.InMemoryCatalog;
import org.apache.iceberg.types.Types;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;

/** Commits through the fencing catalog refuse a driver whose pipeline another driver has taken over. */
class FencingCatalogTest {

    private static final TableIdentifier ORDERS = TableIdentifier.of("db", "orders");

    private FencingCatalog catalog;

    @BeforeEach
    void setUp() {
        catalog = new FencingCatalog();
        catalog.initialize("lakeline", Map.of(FencingCatalog.DELEGATE_IMPL, InMemoryCatalog.class.getName(),
                "warehouse", "memory://warehouse"));
        catalog.createNamespace(Namespace.of("db"), Map.of());
        catalog.buildTable(ORDERS, new Schema(Types.NestedField.required(1, "id", Types.LongType.get())))
                .withProperty("lakeline.fence.orders", "5")
                .create();
    }

    private static void commitAs(Table table, String pipeline, long token) {
        table.newAppend()
                .set(FencedTableOperations.COMMIT_KEY, "{\"pipeline\":\"" + pipeline + "\",\"fence\":" + token + "}")
                .commit();
    }

    @Test
    void refusesACommitRecordWithAStaleToken() {
        Table table = catalog.loadTable(ORDERS);
        FencedCommitException refused = assertThrows(FencedCommitException.class, () -> commitAs(table, "orders", 4));
        assertTrue(refused.getMessage().contains("is fenced at token 5 for pipeline orders, and this driver holds "
                + "token 4"), refused.getMessage());
        table.refresh();
        assertEquals(null, table.currentSnapshot(), "a refused commit adds no snapshot");
    }

    @Test
    void takesACommitRecordWithTheCurrentOrANewerToken() {
        Table table = catalog.loadTable(ORDERS);
        commitAs(table, "orders", 5);
        commitAs(table, "orders", 6);
        table.refresh();
        assertEquals("{\"pipeline\":\"orders\",\"fence\":6}",
                table.currentSnapshot().summary().get(FencedTableOperations.COMMIT_KEY));
    }

    @Test
    void passesCommitsWithoutALakelineTokenOrOfAnotherPipeline() {
        Table table = catalog.loadTable(ORDERS);
        table.newAppend().commit();  // compaction, retention, another writer
        table.newAppend().set(FencedTableOperations.COMMIT_KEY, "{\"pipeline\":\"orders\"}").commit();  // no lease
        commitAs(table, "payments", 1);
        table.refresh();
        assertNotNull(table.currentSnapshot());
    }

    @Test
    void refusesLoweringOrRemovingTheFenceButTakesRaisingIt() {
        Table table = catalog.loadTable(ORDERS);
        assertThrows(FencedCommitException.class,
                () -> table.updateProperties().set("lakeline.fence.orders", "4").commit());
        assertThrows(FencedCommitException.class,
                () -> table.updateProperties().remove("lakeline.fence.orders").commit());
        table.updateProperties().set("lakeline.fence.orders", "7").commit();  // a new driver takes the pipeline over
        assertThrows(FencedCommitException.class, () -> commitAs(catalog.loadTable(ORDERS), "orders", 6));
    }

    @Test
    void aFenceRaisedAfterATableWasLoadedStillRefusesItsCommit() {
        Table stale = catalog.loadTable(ORDERS);
        catalog.loadTable(ORDERS).updateProperties().set("lakeline.fence.orders", "8").commit();
        assertThrows(FencedCommitException.class, () -> commitAs(stale, "orders", 5));
    }

    @Test
    void refusesToStartWithoutADelegate() {
        IllegalArgumentException error = assertThrows(IllegalArgumentException.class,
                () -> new FencingCatalog().initialize("lakeline", Map.of()));
        assertTrue(error.getMessage().contains(FencingCatalog.DELEGATE_TYPE), error.getMessage());
    }

    @Test
    void readsATokenOnlyFromANumber() {
        assertEquals(12, FencedCommitException.token(" 12 "));
        assertEquals(-1, FencedCommitException.token("twelve"));
        assertEquals(-1, FencedCommitException.token(""));
        assertEquals(-1, FencedCommitException.token(null));
    }
}
