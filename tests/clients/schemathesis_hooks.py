"""Schemathesis hooks for tests/openapi.rs (loaded through SCHEMATHESIS_HOOKS).

A live follow (`follow=true`) and a paced replay (`pace=original`) of the events route do not
end by themselves: the first waits for new events until the client leaves, the second spaces
events by the gaps of their generated `ts` (years, at most 100 times faster). Both are in
the document, and both are tested by tests/follow.rs and tests/sse_client.rs; here such
cases are left out, as a client that cannot read an endless body must leave them out.
Everything else about the route (every other parameter, including `follow=false`, and
bounded Server-Sent Events) is generated as usual.
"""

import schemathesis

EVENTS = "/v1/streams/{stream}/events"


def _live(query):
    follow = str(query.get("follow", "")).lower()
    return follow in ("true", "1") or "pace" in query


@schemathesis.hook
def filter_case(context, case):
    if case.operation.path != EVENTS:
        return True
    return not _live(case.query or {})
