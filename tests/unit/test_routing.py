"""sink.route: the value -> table name rule, the max_tables guard, routed tables' own configuration, and the
configuration errors that name the key."""

import pytest

from ingest.config import PipelineConfig, load_pipeline
from ingest.errors import ConfigError
from ingest.routing import DEFAULT, MAX_NAME, OVERFLOW, assign, known_routes, normalise, table_config, table_name
from tests.helpers import pipeline_dict, write_pipeline


def routed(fmt="delta", **route) -> PipelineConfig:
    data = pipeline_dict(fmt, name="gh")
    data["source"]["include_headers"] = True
    data["sink"]["route"] = {"by": "header:X-GitHub-Event", "table": "gh_{value}", **route}
    return PipelineConfig.model_validate(data)


@pytest.mark.parametrize("value, expected", [
    ("push", "push"), ("Pull-Request", "pull_request"), ("a..b  c", "a_b_c"), ("__x__", "x"), ("  ", ""),
    (None, ""), ("Ünïcode ✓", "n_code"),
])
def test_normalise(value, expected):
    assert normalise(value) == expected


def test_table_names():
    assert table_name("gh_{value}", "Pull-Request") == "gh_pull_request"
    assert table_name("{value}_events", "2fa") == "t_2fa_events"  # a name starts with a letter
    assert table_name("gh_{value}", "") is None and table_name("gh_{value}", "---") is None
    long_a, long_b = "x" * 80 + "a", "x" * 80 + "b"
    cut_a, cut_b = table_name("gh_{value}", long_a), table_name("gh_{value}", long_b)
    assert len(cut_a) == len(cut_b) == MAX_NAME and cut_a != cut_b  # cut, told apart by the hash suffix
    assert table_name("gh_{value}", long_a) == cut_a  # stable
    assert table_name("gh_{value}", "Push") == table_name("gh_{value}", "push")  # normalise equal: one table


def test_assign_default_overflow_and_max_tables():
    config = routed(max_tables=2)
    out = assign(config, ["push", "issues", "star", None, "", "Zeta", "dead_letters"], known=[])
    # new tables in name order up to max_tables: gh_issues, gh_push; star past it: the default table
    assert out["issues"] == "gh_issues" and out["push"] == "gh_push"
    assert out["star"] == DEFAULT and out[None] == DEFAULT and out[""] == DEFAULT
    assert out["dead_letters"] == DEFAULT  # gh_dead_letters is the pipeline's dead-letter table
    assert out["Zeta"] == DEFAULT  # past max_tables too
    # a known table keeps taking its value even when full; the order values arrive in does not matter
    again = assign(config, ["star", "push"], known=["gh_push", "gh_issues"])
    assert again == {"star": DEFAULT, "push": "gh_push"}
    assert assign(config, list(reversed(["push", "issues", "star"])), known=[]) == {
        k: out[k] for k in ("push", "issues", "star")}


def test_assign_overflow_to_dead_letters():
    config = routed(max_tables=1, overflow="dead_letter")
    assert assign(config, ["b", "a"], known=[]) == {"a": "gh_a", "b": OVERFLOW}


def test_known_routes_from_the_main_record():
    config = routed()
    assert known_routes(config, {"routes": ["gh_push", 3]}) == ["gh_push"]
    assert known_routes(config, None) == [] and known_routes(config, {}) == []


def test_table_config_applies_overrides():
    config = routed(overrides={"gh_push": {
        "fields": [{"name": "ref", "type": "string"}, {"name": "items", "type": "long"}],
        "partition": [{"source": "ref", "transform": "identity"}]}})
    push = table_config(config, "gh_push")
    assert push.sink.table == "gh_push" and push.sink.route is None
    assert push.sink.dead_letters == "gh_dead_letters"  # the pipeline's one dead-letter table
    assert push.record_schema.field("ref").type == "string" and push.record_schema.field("items").type == "long"
    assert [p.column for p in push.partitioning] == ["ref"]
    other = table_config(config, "gh_issues")
    assert other.record_schema == config.record_schema and other.partitioning == config.partitioning


def _error(tmp_path, mutate) -> str:
    data = pipeline_dict("delta", name="gh")
    data["source"]["include_headers"] = True
    data["sink"]["route"] = {"by": "header:X-GitHub-Event", "table": "gh_{value}"}
    mutate(data)
    with pytest.raises(ConfigError) as info:
        load_pipeline(write_pipeline(tmp_path, data))
    return str(info.value)


@pytest.mark.parametrize("mutate, words", [
    (lambda d: d["sink"]["route"].update(by="headers"), ["sink.route.by", "header:<name>"]),
    (lambda d: d["source"].update(include_headers=False), ["sink.route.by", "include_headers"]),
    (lambda d: d["sink"]["route"].update(by="field:nope"), ["sink.route.by", "'nope'"]),
    (lambda d: d["sink"]["route"].update(table="gh-{value}"), ["sink.route.table", "{value}"]),
    (lambda d: d["sink"]["route"].update(table="gh"), ["sink.route.table"]),
    (lambda d: d["sink"]["route"].update(max_tables=0), ["sink.route.max_tables"]),
    (lambda d: d["sink"]["route"].update(overflow="drop"), ["sink.route.overflow", "dead_letter"]),
    (lambda d: d["sink"]["route"].update(overrides={"gh_push": {"partition": [{"source": "nope",
                                                                                "transform": "day"}]}}),
     ["sink.route.overrides.gh_push", "nope"]),
])
def test_route_errors_name_the_key(tmp_path, mutate, words):
    message = _error(tmp_path, mutate)
    for word in words:
        assert word in message, message


def test_route_by_key_and_field_load(tmp_path):
    data = pipeline_dict("iceberg", name="gh")
    data["sink"]["route"] = {"by": "field:status", "table": "orders_{value}", "max_tables": 5}
    assert load_pipeline(write_pipeline(tmp_path, data)).sink.route.argument == "status"
    data["sink"]["route"] = {"by": "key", "table": "k_{value}"}
    assert load_pipeline(write_pipeline(tmp_path, data)).sink.route.kind == "key"


def test_routed_tables_get_analyst_names(tmp_path):
    from ingest.config import analyst_names

    def config(pipeline, fmt):
        data = pipeline_dict(fmt, name=pipeline)
        data["sink"]["table"] = "gh"
        data["source"]["include_headers"] = True
        data["sink"]["route"] = {"by": "header:X-GitHub-Event", "table": "gh_{value}"}
        return load_pipeline(write_pipeline(tmp_path, data))

    delta, iceberg = config("gh_delta", "delta"), config("gh_iceberg", "iceberg")
    names = analyst_names([delta, iceberg], {"gh_delta": ["gh_push", "gh_fork"], "gh_iceberg": ["gh_push"]})
    got = {name: (c.pipeline, table) for name, (c, table) in names.items()}
    assert got["gh_fork"] == ("gh_delta", "gh_fork")  # a routed table by its own name
    # made by both pipelines: by the pipeline's name, as main tables are
    assert got["gh_delta_gh_push"] == ("gh_delta", "gh_push") and got["gh_iceberg_gh_push"] == ("gh_iceberg", "gh_push")
    assert analyst_names([delta]) == analyst_names([delta], {})  # no routes known: main and dead letters only


def test_a_routed_table_policy_needs_a_route(tmp_path):
    from maintenance.policy import load_table

    (tmp_path / "pipelines").mkdir()
    (tmp_path / "tables").mkdir()
    plain = pipeline_dict("delta", name="plain")
    write_pipeline(tmp_path / "pipelines", plain)
    (tmp_path / "tables" / "plain_routed.yaml").write_text(
        "table: plain_routed\npipeline: ../pipelines/plain.yaml\nwhich: routed\n")
    with pytest.raises(ConfigError, match="which: routed"):
        load_table("plain_routed", tmp_path)
    data = pipeline_dict("delta", name="gh")
    data["source"]["include_headers"] = True
    data["sink"]["route"] = {"by": "header:X-GitHub-Event", "table": "gh_{value}",
                             "overrides": {"gh_push": {"partition": []}}}
    write_pipeline(tmp_path / "pipelines", data)
    (tmp_path / "tables" / "gh_routed.yaml").write_text("table: gh_routed\npipeline: ../pipelines/gh.yaml\n"
                                                         "which: routed\n")
    table = load_table("gh_routed", tmp_path)
    push, issues = table.routed("gh_push"), table.routed("gh_issues")
    assert push.name == "gh_push" and push.policy.which == "main" and push.partitioning == []
    assert issues.pipeline.sink.table == "gh_issues" and issues.partitioning == table.pipeline.partitioning
