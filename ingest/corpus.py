"""Sample event corpora for `lakeline produce`: `orders` (flat, the demo's) and `webhooks` (nested: several event
types in one topic, orders with line items and addresses, decimals as strings and numbers, ISO and epoch-millisecond
timestamps, keys that are not column names). conf/pipelines/webhooks_*.yaml declare the webhooks schema.

Each generator yields (key, payload, bad kind or None); a bad kind is the dead-letter reason the payload must get.
"""

from __future__ import annotations

import json
import random
import uuid
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
