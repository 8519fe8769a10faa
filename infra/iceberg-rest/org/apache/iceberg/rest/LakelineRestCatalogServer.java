package org.apache.iceberg.rest;

import java.util.HashMap;
import java.util.Map;

import org.apache.hadoop.conf.Configuration;
import org.apache.iceberg.CatalogProperties;
import org.apache.iceberg.CatalogUtil;
import org.apache.iceberg.catalog.Catalog;
import org.apache.iceberg.jdbc.JdbcCatalog;
import org.eclipse.jetty.ee10.servlet.ServletContextHandler;
import org.eclipse.jetty.ee10.servlet.ServletHolder;
import org.eclipse.jetty.server.Server;
import org.eclipse.jetty.server.ServerConnector;

/**
 * The Iceberg project's REST catalog server (iceberg-open-api test fixtures: RESTServerCatalogAdapter over
 * iceberg-core's RESTCatalogServlet), listening on one address only. The fixture's own RESTCatalogServer binds every
 * interface; the local stack must listen on 127.0.0.1 alone. It lives in the fixture's package because the adapter
 * and its catalog context are package-private there.
 *
 *   java -cp ... org.apache.iceberg.rest.LakelineRestCatalogServer HOST PORT
 *
 * The backing catalog comes from CATALOG_* environment variables, as for the fixture (CATALOG_URI,
 * CATALOG_WAREHOUSE, CATALOG_IO__IMPL, ...; `__` is `-` and `_` is `.`); Hadoop's S3A settings from core-site.xml on
 * the classpath.
 */
public final class LakelineRestCatalogServer {

    private LakelineRestCatalogServer() {
    }

    public static void main(String[] args) throws Exception {
        if (args.length != 2) {
            throw new IllegalArgumentException("usage: LakelineRestCatalogServer HOST PORT");
        }
        Map<String, String> config = new HashMap<>(RCKUtils.environmentCatalogConfig());
        config.putIfAbsent(CatalogProperties.CATALOG_IMPL, JdbcCatalog.class.getName());
        config.putIfAbsent("jdbc.schema-version", "V1");
        String name = config.getOrDefault("catalog.name", "lakeline");
        Catalog catalog = CatalogUtil.buildIcebergCatalog(name, config, new Configuration());
        RESTCatalogAdapter adapter = new RESTServerCatalogAdapter(new RESTCatalogServer.CatalogContext(catalog, config));

        ServletContextHandler context = new ServletContextHandler(ServletContextHandler.NO_SESSIONS);
        context.addServlet(new ServletHolder(new RESTCatalogServlet(adapter)), "/*");
        Server server = new Server();
        ServerConnector connector = new ServerConnector(server);
        connector.setHost(args[0]);
        connector.setPort(Integer.parseInt(args[1]));
        server.addConnector(connector);
        server.setHandler(context);
        server.start();
        server.join();
    }
}
