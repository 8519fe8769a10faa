"""Sample event corpora for `lakeline produce`: `orders` (flat, the demo's), `webhooks` (nested: several event
types in one topic, orders with line items and addresses, decimals as strings and numbers, ISO and epoch-millisecond
timestamps, keys that are not column names; conf/pipelines/webhooks_*.yaml declare its schema) and `events` (a
heterogeneous topic of sixty event types for `add` mode and routing: `heterogeneous`), plus `wide_events` for the
evolution benchmark.

Each generator yields (key, payload, bad kind or None); a bad kind is the dead-letter reason the payload must get.
"""

from __future__ import annotations

import json
import random
import uuid
import zlib
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

WEBHOOK_TYPES = ("order.created", "payment.captured", "customer.updated")
WEBHOOK_BAD_KINDS = ("malformed_json", "type_mismatch", "missing_required_field", "trailing_content",
                     "nested_type_mismatch")
# The dead-letter reason each bad kind must get.
WEBHOOK_BAD_REASONS = {"malformed_json": "malformed_json", "type_mismatch": "type_mismatch",
                       "missing_required_field": "missing_required_field", "trailing_content": "malformed_json",
                       "nested_type_mismatch": "type_mismatch"}
SKUS = tuple(f"SKU-{n:04d}" for n in range(1, 60))
CITIES = (("Berlin", "DE", "10115"), ("Paris", "FR", "75001"), ("Austin", "US", "73301"), ("Osaka", "JP", "530-0001"))


def _iso(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


def webhook_event(rng: random.Random, base: datetime) -> dict:
    """One good webhook event of a random type."""
    occurred = base - timedelta(seconds=rng.randint(0, 2 * 86400), milliseconds=rng.randint(0, 999))
    kind = rng.choice(WEBHOOK_TYPES)
    event: dict = {"event-id": str(uuid.UUID(int=rng.getrandbits(128))), "type": kind, "@timestamp": _iso(occurred),
                   "received_ms": int(occurred.timestamp() * 1000) + rng.randint(5, 900),
                   "context": {"ip": f"10.0.{rng.randint(0, 255)}.{rng.randint(1, 254)}",
                               "ua": rng.choice(["web", "ios", "android"]), "retry": rng.randint(0, 2)}}
    customer_id = f"c-{rng.randint(1, 50_000):06d}"
    if kind == "order.created":
        items = [{"sku": rng.choice(SKUS), "qty": rng.randint(1, 5),
                  "unit_price": f"{rng.randint(100, 20_000) / 100:.2f}"} for _ in range(rng.randint(1, 4))]
        total = sum(int(i["qty"]) * round(float(i["unit_price"]) * 100) for i in items) / 100
        city, country, zip_code = rng.choice(CITIES)
        event["order"] = {"id": f"o-{rng.getrandbits(40):012x}", "total": round(total, 2),
                          "currency": rng.choice(["EUR", "USD", "JPY"]), "items": items,
                          "shipping": {"city": city, "country": country, "zip": zip_code}}
        event["customer"] = {"id": customer_id}
    elif kind == "payment.captured":
        event["payment"] = {"id": f"p-{rng.getrandbits(40):012x}", "amount": f"{rng.randint(100, 90_000) / 100:.2f}",
                            "method": rng.choice(["card", "sepa", "paypal"]),
                            "captured_at": _iso(occurred + timedelta(seconds=rng.randint(1, 60)))}
        event["customer"] = {"id": customer_id}
    else:
        event["customer"] = {"id": customer_id, "tier": rng.choice(["bronze", "silver", "gold"]),
                             "tags": rng.sample(["vip", "newsletter", "b2b", "churn-risk"], rng.randint(0, 3)),
                             "attributes": {"locale": rng.choice(["de-DE", "en-US", "ja-JP"]),
                                            "segment": rng.choice(["a", "b"])}}
    if rng.random() < 0.03:
        event["experiment"] = {"name": "checkout-v2", "arm": rng.choice(["a", "b"])}  # undeclared: rescued
    return event


def bad_webhook(kind: str, event: dict) -> bytes:
    """A payload that must become a dead letter with WEBHOOK_BAD_REASONS[kind]."""
    text = json.dumps(event, separators=(",", ":"))
    if kind == "malformed_json":
        return text.encode()[:-9]
    if kind == "type_mismatch":  # a required field: its value cannot be rescued with the field left null
        return json.dumps({**event, "@timestamp": "yesterday"}).encode()
    if kind == "missing_required_field":
        return json.dumps({k: v for k, v in event.items() if k != "event-id"}).encode()
    if kind == "trailing_content":
        return (text + text).encode()
    if kind == "nested_type_mismatch":
        customer = dict(event["customer"])
        customer["id"] = [customer["id"]]  # an array where a NOT NULL string is declared
        return json.dumps({**event, "customer": customer}).encode()
    raise ValueError(kind)


def webhooks(count: int, bad_ratio: float, seed: int | None) -> Iterator[tuple[str, bytes, str | None]]:
    rng = random.Random(seed)
    base = datetime.now(UTC).replace(microsecond=0)
    bad = 0
    for _ in range(count):
        event = webhook_event(rng, base)
        key = event["customer"]["id"]
        if bad_ratio and rng.random() < bad_ratio:
            kind = WEBHOOK_BAD_KINDS[bad % len(WEBHOOK_BAD_KINDS)]
            bad += 1
            yield key, bad_webhook(kind, event), WEBHOOK_BAD_REASONS[kind]
        else:
            yield key, json.dumps(event, separators=(",", ":")).encode(), None


# ---- events: a heterogeneous topic (`lakeline produce --corpus events`) ----------------------------------------
# Sixty event types in one topic, modelled on GitHub's webhook deliveries: the type in a header (EVENT_HEADER) and in
# the payload (`event_type`), a shared envelope, and per type its own nested object (structs several levels deep,
# arrays of objects). `installation.created_at` is an epoch number in half the types and an ISO string in the other
# half (a type conflict); `@version`, `a-b` and `größe` are keys that are not column names; `deprecated` and
# `repository.license` are only ever null. Deterministic by seed. Only `event_type` and `delivery` are meant to be
# declared; the rest is what `add` mode evolves.
EVENT_HEADER = "X-Event-Type"
EVENT_TYPES = (
    "branch_protection_rule", "check_run", "check_suite", "code_scanning_alert", "commit_comment", "create",
    "custom_property", "delete", "dependabot_alert", "deploy_key", "deployment", "deployment_review",
    "deployment_status", "discussion", "discussion_comment", "fork", "github_app_authorization", "gollum",
    "installation", "installation_repositories", "issue_comment", "issues", "label", "marketplace_purchase", "member",
    "membership", "merge_group", "meta", "milestone", "org_block", "organization", "package", "page_build", "ping",
    "project", "project_card", "project_column", "public", "pull_request", "pull_request_review",
    "pull_request_review_comment", "pull_request_review_thread", "push", "registry_package", "release", "repository",
    "repository_dispatch", "repository_import", "repository_vulnerability_alert", "secret_scanning_alert",
    "security_advisory", "sponsorship", "star", "status", "team", "team_add", "watch", "workflow_dispatch",
    "workflow_job", "workflow_run")
_ACTIONS = ("created", "deleted", "edited", "opened", "closed", "completed", "requested", "synchronize")
# The per-type object's fields, picked per type from this pool (name -> value maker).
_POOL = (
    ("id", lambda r, t: r.getrandbits(31)),
    ("node_id", lambda r, t: f"N_{r.getrandbits(48):012x}"),
    ("title", lambda r, t: r.choice(["Fix the build", "Add docs", "Bump deps", "Refactor the cache"])),
    ("state", lambda r, t: r.choice(["open", "closed", "merged"])),
    ("number", lambda r, t: r.randint(1, 5000)),
    ("draft", lambda r, t: r.random() < 0.3),
    ("score", lambda r, t: round(r.random() * 10, 3)),
    ("created_at", lambda r, t: _iso(t)),
    ("updated_at", lambda r, t: _iso(t + timedelta(minutes=r.randint(1, 600)))),
    ("due_on", lambda r, t: (t + timedelta(days=r.randint(1, 90))).date().isoformat()),
    ("labels", lambda r, t: [{"id": r.getrandbits(20), "name": r.choice(["bug", "docs", "ci"]), "color": "ededed"}
                             for _ in range(r.randint(1, 3))]),
    ("user", lambda r, t: {"login": f"user{r.randint(1, 999)}", "id": r.getrandbits(24), "type": "User"}),
    ("head", lambda r, t: {"ref": "main", "sha": f"{r.getrandbits(160):040x}",
                           "repo": {"id": r.getrandbits(24), "name": "app",
                                    "owner": {"login": "acme", "id": r.getrandbits(20), "site_admin": False}}}),
    ("stats", lambda r, t: {"additions": r.randint(0, 900), "deletions": r.randint(0, 300),
                            "files": {"changed": r.randint(1, 40), "renamed": r.randint(0, 3)}}),
    ("commits", lambda r, t: [{"id": f"{r.getrandbits(160):040x}", "message": "wip",
                               "author": {"name": "Ada", "email": "ada@example.com"},
                               "added": [f"src/f{r.randint(1, 99)}.py"]} for _ in range(r.randint(1, 3))]),
    ("a-b", lambda r, t: r.randint(0, 9)),
    ("größe", lambda r, t: r.randint(1, 100)),
    ("note", lambda r, t: None),
)


def _type_fields(kind: str) -> list[int]:
    """The pool fields (indexes) of one event type: the same for every seed."""
    pick = random.Random(zlib.crc32(kind.encode()))
    return sorted({0, *pick.sample(range(1, len(_POOL)), 6)})


def heterogeneous_event(index: int, rng: random.Random, base: datetime) -> tuple[str, dict]:
    """(event type, payload) of the `index`-th event: the types in turn, so every window of 60 has each once."""
    kind = EVENT_TYPES[index % len(EVENT_TYPES)]
    moment = base - timedelta(seconds=rng.randint(0, 86400))
    conflict = EVENT_TYPES.index(kind) % 2
    installed = _iso(moment - timedelta(days=30)) if conflict else int(moment.timestamp()) - 30 * 86400
    event: dict = {
        "event_type": kind, "delivery": str(uuid.UUID(int=rng.getrandbits(128))), "action": rng.choice(_ACTIONS),
        "@version": "1", "deprecated": None,
        "sender": {"login": f"user{rng.randint(1, 999)}", "id": rng.getrandbits(24), "site_admin": rng.random() < 0.05},
        "repository": {"id": rng.getrandbits(24), "full_name": f"acme/app{rng.randint(1, 20)}", "private": False,
                       "license": None, "topics": rng.sample(["etl", "lake", "ci", "web"], rng.randint(0, 2)),
                       "owner": {"login": "acme", "id": 1, "plan": {"name": "team", "seats": rng.randint(1, 50)}}},
        "installation": {"id": rng.getrandbits(20), "created_at": installed},
    }
    subject = event.setdefault(kind, {})  # `repository` and `installation` events widen the envelope's object
    for i in _type_fields(kind):
        subject.setdefault(_POOL[i][0], _POOL[i][1](rng, moment))
    return kind, event


def heterogeneous(count: int, seed: int | None = None) -> Iterator[tuple[str, list[tuple[str, bytes]], bytes]]:
    """(key, headers, payload) of `count` events of the `events` corpus: the key is the repository's id, the headers
    carry the event type (EVENT_HEADER) and the delivery id."""
    rng = random.Random(seed)
    base = datetime(2026, 11, 1, tzinfo=UTC)
    for index in range(count):
        kind, event = heterogeneous_event(index, rng, base)
        headers = [(EVENT_HEADER, kind.encode()), ("X-Delivery", event["delivery"].encode())]
        payload = json.dumps(event, separators=(",", ":"), ensure_ascii=False).encode()
        yield str(event["repository"]["id"]), headers, payload


def wide_events(n_fields: int, count: int, seed: int | None = None) -> Iterator[tuple[str, bytes]]:
    """(key, payload) of `count` records that each carry `event_type`, `delivery`, `ctx.id` and the same `n_fields`
    new nested fields `ctx.f<i>` of mixed types: declared `ctx: struct<id: string>`, the first batch adds
    `n_fields` fields to a struct the table has, each its own schema change."""
    rng = random.Random(seed)
    makers = (lambda: rng.randint(0, 10**9), lambda: f"s{rng.randint(0, 999)}", lambda: round(rng.random(), 4),
              lambda: rng.random() < 0.5)
    for index in range(count):
        ctx: dict = {"id": f"c{index}"}
        for leaf in range(n_fields):
            ctx[f"f{leaf}"] = makers[leaf % len(makers)]()
        event = {"event_type": "wide", "delivery": f"d{index}", "ctx": ctx}
        yield f"k{index % 16}", json.dumps(event, separators=(",", ":")).encode()
