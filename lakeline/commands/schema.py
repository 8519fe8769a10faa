"""`lakeline schema diff|infer`."""

from __future__ import annotations

from ingest.errors import ExitCode
from lakeline.commands import actions, load, pipeline_arg
from lakeline.output import output_arg, output_of


def register(sub) -> None:
    schema = sub.add_parser("schema", help="compare the YAML's schema with the table, or propose one from the source",
                            description="diff: what the next start would add or widen in the main table, what it "
                                        "would refuse (a narrowing or incompatible change), and the columns only "
                                        "the table has. infer: read --sample records from the start of the source "
                                        "and print a proposed `schema:` block (nested types, ISO dates and "
                                        "timestamps, json_name for keys that are not column names, required for "
                                        "fields present in every record). Review it before use.")
    schema.set_defaults(run=run)
    sub_actions = actions(schema)
    diff = sub_actions.add_parser("diff", help="what the next start would add, widen or refuse in the main table")
    infer = sub_actions.add_parser("infer", help="a proposed `schema:` block from a sample of the source")
    for action in (diff, infer):
        pipeline_arg(action)
        output_arg(action)
    infer.add_argument("--sample", type=int, default=1000, metavar="N", help="records to read (default 1000)")


def run(args) -> ExitCode:
    from ingest import schema_tools

    config, settings = load(args)
    out = output_of(args)
    if args.action == "infer":
        inferred = schema_tools.infer_schema(schema_tools.sample(config, settings, args.sample))
        out.note(f"# from {inferred.sampled} records of {config.pipeline}'s source ({inferred.not_json} not JSON "
                 "objects, left out)")
        out.result({"sampled": inferred.sampled, "not_json": inferred.not_json, "fields": inferred.fields},
                   inferred.yaml)
        return ExitCode.OK
    from ingest.spark import build_spark

    result = schema_tools.diff(build_spark(settings, "lakeline-schema-diff"), config, settings)
    lines = [f"{result.table}: " + ("exists" if result.exists else "not created yet (the first start creates it)")]
    lines += [f"  start will {change}" for change in result.changes]
    lines += [f"  start will refuse: {refusal}" for refusal in result.refusals]
    lines += [f"  only in the table: {column}" for column in result.table_only]
    if len(lines) == 1:
        lines.append("  the table holds what the YAML declares")
    out.result(result.to_json(), "\n".join(lines))
    return ExitCode.OK
