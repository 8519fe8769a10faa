package io.lakeline.iceberg;

import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;

import org.apache.iceberg.BaseTable;
import org.apache.iceberg.CatalogProperties;
import org.apache.iceberg.CatalogUtil;
import org.apache.iceberg.Schema;
import org.apache.iceberg.Table;
import org.apache.iceberg.catalog.Catalog;
import org.apache.iceberg.catalog.Namespace;
import org.apache.iceberg.catalog.SupportsNamespaces;
import org.apache.iceberg.catalog.TableIdentifier;
import org.apache.iceberg.hadoop.Configurable;

/**
 * Any Iceberg catalog (the delegate: `lakeline.delegate-type`, e.g. jdbc or rest, or `lakeline.delegate-impl`)
 * whose tables commit through {@link FencedTableOperations}, so that a driver whose pipeline another driver has
 * taken over cannot commit to it. Everything else is the delegate's, unchanged.
 */
public class FencingCatalog implements Catalog, SupportsNamespaces, Configurable<Object> {

    public static final String DELEGATE_TYPE = "lakeline.delegate-type";
    public static final String DELEGATE_IMPL = "lakeline.delegate-impl";

    private Catalog delegate;
    private Object conf;
    private String name = "lakeline";

    @Override
    public void setConf(Object conf) {
        this.conf = conf;
    }

    @Override
    public void initialize(String catalogName, Map<String, String> properties) {
        this.name = catalogName;
        Map<String, String> options = new HashMap<>(properties);
        options.remove(CatalogProperties.CATALOG_IMPL);
        String impl = options.remove(DELEGATE_IMPL);
        String type = options.remove(DELEGATE_TYPE);
        if (impl != null) {
            options.put(CatalogProperties.CATALOG_IMPL, impl);
        } else if (type != null) {
            options.put(CatalogUtil.ICEBERG_CATALOG_TYPE, type);
        } else {
            throw new IllegalArgumentException("FencingCatalog " + catalogName + ": set " + DELEGATE_TYPE + " (e.g. jdbc, "
                    + "rest) or " + DELEGATE_IMPL + " to the catalog it wraps");
        }
        this.delegate = CatalogUtil.buildIcebergCatalog(catalogName, options, conf);
    }

    @Override
    public String name() {
        return name;
    }

    @Override
    public Table loadTable(TableIdentifier identifier) {
        Table table = delegate.loadTable(identifier);
        if (table.getClass() != BaseTable.class) {
            return table; // a metadata table (snapshots, history, ...): read-only
        }
        BaseTable base = (BaseTable) table;
        return new BaseTable(new FencedTableOperations(base.operations(), base.name()), base.name(), base.reporter());
    }

    @Override
    public List<TableIdentifier> listTables(Namespace namespace) {
        return delegate.listTables(namespace);
    }

    @Override
    public TableBuilder buildTable(TableIdentifier identifier, Schema schema) {
        return delegate.buildTable(identifier, schema);
    }

    @Override
    public boolean tableExists(TableIdentifier identifier) {
        return delegate.tableExists(identifier);
    }

    @Override
    public boolean dropTable(TableIdentifier identifier, boolean purge) {
        return delegate.dropTable(identifier, purge);
    }

    @Override
    public void renameTable(TableIdentifier from, TableIdentifier to) {
        delegate.renameTable(from, to);
    }

    @Override
    public void invalidateTable(TableIdentifier identifier) {
        delegate.invalidateTable(identifier);
    }

    @Override
    public Table registerTable(TableIdentifier identifier, String metadataFileLocation) {
        return delegate.registerTable(identifier, metadataFileLocation);
    }

    private SupportsNamespaces namespaces() {
        if (delegate instanceof SupportsNamespaces) {
            return (SupportsNamespaces) delegate;
        }
        throw new UnsupportedOperationException("catalog " + name + " does not support namespaces");
    }

    @Override
    public void createNamespace(Namespace namespace, Map<String, String> metadata) {
        namespaces().createNamespace(namespace, metadata);
    }

    @Override
    public List<Namespace> listNamespaces(Namespace namespace) {
        return namespaces().listNamespaces(namespace);
    }

    @Override
    public Map<String, String> loadNamespaceMetadata(Namespace namespace) {
        return namespaces().loadNamespaceMetadata(namespace);
    }

    @Override
    public boolean dropNamespace(Namespace namespace) {
        return namespaces().dropNamespace(namespace);
    }

    @Override
    public boolean setProperties(Namespace namespace, Map<String, String> properties) {
        return namespaces().setProperties(namespace, properties);
    }

    @Override
    public boolean removeProperties(Namespace namespace, Set<String> properties) {
        return namespaces().removeProperties(namespace, properties);
    }

    @Override
    public boolean namespaceExists(Namespace namespace) {
        return namespaces().namespaceExists(namespace);
    }
}
