"""A client generated from docs/openapi.json by openapi-python-client (package `vx_api`, on
PYTHONPATH), used as its documentation says: ingest three events with one call, replay them
in two pages, and see a call without a token refused. Prints a JSON report for
tests/openapi.rs.

Usage: openapi_client.py BASE_URL TOKEN
"""

import json
import sys

from vx_api import AuthenticatedClient, Client
from vx_api.api.ingest import ingest_events
from vx_api.api.streams import get_stream, replay_events
from vx_api.models import Error, Event, Stored, Stream, StoredEvent


def main() -> None:
    base, token = sys.argv[1], sys.argv[2]
    # A replay answers NDJSON unless asked otherwise; the document's JSON form is an array.
    client = AuthenticatedClient(
        base_url=base, token=token, headers={"Accept": "application/json"}
    )
    events = [
        Event(stream="generated", type_=t, ts=1_700_000_000_000 + i, data={"n": i})
        for i, t in enumerate(["a", "b", "c"])
    ]
    stored = ingest_events.sync(client=client, body=events, x_vx_durability="fsync")
    if not isinstance(stored, Stored):
        raise SystemExit(f"ingest answered {stored!r}")

    first = replay_events.sync_detailed("generated", client=client, limit=2)
    if first.status_code != 200 or not isinstance(first.parsed, list):
        raise SystemExit(f"replay answered {first.status_code}: {first.content!r}")
    next_seq = int(first.headers["x-vx-next-seq"])
    second = replay_events.sync("generated", client=client, from_=next_seq)
    if not isinstance(second, list):
        raise SystemExit(f"the second page answered {second!r}")
    replayed: list[StoredEvent] = first.parsed + second

    stream = get_stream.sync("generated", client=client)
    if not isinstance(stream, Stream):
        raise SystemExit(f"the stream answered {stream!r}")

    anonymous = replay_events.sync_detailed(
        "generated", client=Client(base_url=base)  # type: ignore[arg-type]
    )
    if not isinstance(anonymous.parsed, Error):
        raise SystemExit(f"without a token: {anonymous.status_code} {anonymous.content!r}")

    print(
        json.dumps(
            {
                "accepted": stored.accepted,
                "last_seq": stored.last_seq.to_dict() if stored.last_seq else None,
                "seqs": [e.seq for e in replayed],
                "types": [e.type_ for e in replayed],
                "data": [e.data for e in replayed],
                "second_page": [e.seq for e in second],
                "stream_events": stream.events,
                "unauthorized": anonymous.status_code.value,
            }
        )
    )


if __name__ == "__main__":
    main()
