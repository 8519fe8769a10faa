"""One module per command group; each has `register(subparsers)`."""

from pathlib import Path

from ingest.errors import ConfigError


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


def pipeline_files(given: list[str]) -> list[Path]:
    """The pipeline YAMLs named by --pipeline: files as given, folders as every *.yaml in them (sorted)."""
    files: list[Path] = []
    for entry in map(Path, given):
        if entry.is_dir():
            found = sorted(entry.glob("*.yaml"))
            if not found:
                raise ConfigError(f"--pipeline {entry}: the folder holds no *.yaml pipeline files")
            files += found
        else:
            files.append(entry)
    return files
