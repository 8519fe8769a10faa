"""One module per command group; each has `register(subparsers)`."""


def pipeline_arg(parser) -> None:
    parser.add_argument("--pipeline", required=True, metavar="FILE",
                        help="pipeline YAML, e.g. conf/pipelines/orders_delta.yaml")


def load(args):
    """(pipeline config, settings) of a command with --pipeline."""
    from ingest.config import load_pipeline
    from ingest.settings import load_settings

    return load_pipeline(args.pipeline), load_settings()
