"""The `lakeline` command: the composition root. It parses options, wires the library (ingest, maintenance, infra)
together and renders results; the logic lives in the library. Nothing in ingest or maintenance imports it."""
