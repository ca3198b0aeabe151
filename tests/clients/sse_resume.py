"""A follower written with httpx-sse (a client no one here wrote) for tests/sse_client.rs.

Follows STREAM on BASE from seq 1, drops the connection after the event with id DROP_AT,
writes MORE events while disconnected, reconnects with Last-Event-ID (as an EventSource does),
and reads until seq TOTAL. Prints one JSON line: the ids received, the reconnects made, and the
`type` of every event, so the test can check the order, the resume, and the data.
"""

import json
import sys

import httpx
from httpx_sse import connect_sse


def main() -> None:
    base, stream, drop_at, more, total = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
    url = f"{base}/v1/streams/{stream}/events"
    ids, types = [], []
    reconnects = 0
    last_id = None
    with httpx.Client(timeout=httpx.Timeout(20.0)) as client:
        while not ids or ids[-1] < total:
            headers = {"Last-Event-ID": last_id} if last_id is not None else {}
            with connect_sse(client, "GET", url, params={"follow": "true", "from": "1"}, headers=headers) as source:
                source.response.raise_for_status()
                assert source.response.headers["content-type"].startswith("text/event-stream")
                for sse in source.iter_sse():
                    if sse.event != "message":
                        raise SystemExit(f"unexpected event {sse.event!r}: {sse.data}")
                    event = json.loads(sse.data)
                    assert str(event["seq"]) == sse.id, (event, sse.id)
                    ids.append(int(sse.id))
                    types.append(event["type"])
                    last_id = sse.id
                    if ids[-1] == drop_at and reconnects == 0:
                        break  # drop the connection mid-stream
                    if ids[-1] >= total:
                        break
            if ids[-1] == drop_at and reconnects == 0:
                reconnects += 1
                body = "\n".join(
                    json.dumps({"stream": stream, "type": f"late{i}", "ts": 1_700_000_000_000 + i}) for i in range(more)
                )
                r = client.post(f"{base}/v1/events", content=body, headers={"content-type": "application/x-ndjson"})
                r.raise_for_status()
    print(json.dumps({"ids": ids, "reconnects": reconnects, "types": types}))


if __name__ == "__main__":
    main()
