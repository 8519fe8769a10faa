"""The lease's decision (pure) and where a pipeline's lease lives."""

from ingest.lease import LeaseState, is_free, lease_uri


def _state(**overrides) -> LeaseState:
    values = {"token": 3, "owner": "o", "host": "host-a", "pid": 42, "released": False, "age": 1.0, "etag": '"e"'}
    return LeaseState(**{**values, **overrides})


def test_a_live_lease_on_another_host_is_held_until_it_goes_a_ttl_without_renewal():
    alive = lambda pid: True  # noqa: E731
    assert not is_free(_state(age=14.0), 15, "host-b", alive)
    assert is_free(_state(age=16.0), 15, "host-b", alive)


def test_released_or_missing_leases_are_free():
    assert is_free(None, 15, "host-b")
    assert is_free(_state(released=True, age=0.0), 15, "host-b", lambda pid: True)


def test_a_holder_on_this_host_whose_process_is_gone_frees_the_lease_at_once():
    assert is_free(_state(age=0.0), 15, "host-a", lambda pid: False)
    assert not is_free(_state(age=0.0), 15, "host-a", lambda pid: True)  # paused or busy: wait the ttl out
    assert not is_free(_state(age=0.0), 15, "host-b", lambda pid: False)  # another host's pid says nothing here


def test_lease_lives_beside_an_s3_checkpoint_only():
    assert lease_uri("s3a://b/wh/_checkpoints/p") == "s3a://b/wh/_checkpoints/p.lease.json"
    assert lease_uri("/tmp/checkpoints/p") is None
