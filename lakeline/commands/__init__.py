"""One module per command group; each has `register(subparsers)`."""


def actions(parser):
    """`<command> ACTION [flags]`: each action a subparser of its own with only the flags it takes (a flag given to
    another action fails with exit 2, naming it); `args.action` names the action."""
    subparsers = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    plain_error = parser.error

    def error(message: str):
        # The spelling before subcommands allowed flags ahead of the action (`checkpoint --pipeline F backup`).
        if message.startswith("argument ACTION: invalid choice"):
            message += f"; the action comes first, then its flags: {parser.prog} ACTION [flags]"
        plain_error(message)

    parser.error = error
    return subparsers


def pipeline_arg(parser) -> None:
    parser.add_argument("--pipeline", required=True, metavar="FILE",
                        help="pipeline YAML, e.g. conf/pipelines/orders_delta.yaml")


def load(args):
    """(pipeline config, settings) of a command with --pipeline."""
    from ingest.config import load_pipeline
    from ingest.settings import load_settings

    return load_pipeline(args.pipeline), load_settings()
