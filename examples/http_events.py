"""An HTTP endpoint that produces events: the shape of most web services that write to Kafka.

    pip install 'topicwright[examples]'          # aiohttp
    python examples/http_events.py --bootstrap 127.0.0.1:9092 --port 8080
    python examples/http_events.py --port 8080    # with an embedded reference broker
    curl -X POST -H 'X-Key: user-1' --data 'clicked' http://127.0.0.1:8080/events/clicks

One ``sdk.Producer`` serves every request: it is started with the web application and closed
(its buffered records flushed) when the application stops, so a SIGTERM loses no acknowledged
event. A request is answered only after the broker acknowledged its record (``acks=all``,
idempotent), so a ``201`` means the event is stored; the response names its partition and offset.

Routes:
- ``POST /events/{topic}``: the body is the record's value, the optional ``X-Key`` header its key,
  other ``X-Header-<name>`` headers become record headers. ``201`` with
  ``{"topic", "partition", "offset"}``; ``400`` for a topic name Kafka refuses; ``503`` when the
  broker did not acknowledge in time.
- ``GET /healthz``: ``200`` while the producer runs.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import AsyncIterator

from aiohttp import web

from sdk import Producer
from sdk.errors import InvalidTopicError, KafkaError, KafkaTimeoutError

PRODUCER = web.AppKey("producer", Producer)
HEADER_PREFIX = "X-Header-"


async def produce_event(request: web.Request) -> web.Response:
    producer = request.app[PRODUCER]
    topic = request.match_info["topic"]
    key = request.headers.get("X-Key")
    headers = [
        (name[len(HEADER_PREFIX) :].lower(), value.encode())
        for name, value in request.headers.items()
        if name.startswith(HEADER_PREFIX)
    ]
    try:
        meta = await producer.send_and_wait(
            topic, await request.read(), key=key.encode() if key else None, headers=headers
        )
    except InvalidTopicError as exc:
        raise web.HTTPBadRequest(text=f"invalid topic {topic!r}: {exc}") from exc
    except KafkaTimeoutError as exc:
        raise web.HTTPServiceUnavailable(text=f"not acknowledged in time: {exc}") from exc
    except KafkaError as exc:
        if not exc.retriable:
            raise web.HTTPBadRequest(text=str(exc)) from exc
        raise web.HTTPServiceUnavailable(text=str(exc)) from exc
    return web.json_response(
        {"topic": meta.topic, "partition": meta.partition, "offset": meta.offset}, status=201
    )


async def healthz(request: web.Request) -> web.Response:
    return web.Response(text="ok")


def make_app(bootstrap: str) -> web.Application:
    app = web.Application()

    async def producer_lifetime(app: web.Application) -> AsyncIterator[None]:
        async with Producer(
            bootstrap_servers=bootstrap,
            acks="all",
            enable_idempotence=True,
            linger_ms=2,
            request_timeout_ms=10_000,
            delivery_timeout_ms=15_000,
        ) as producer:
            app[PRODUCER] = producer
            yield
        print("producer closed: every acknowledged event is stored", flush=True)

    app.cleanup_ctx.append(producer_lifetime)
    app.router.add_post("/events/{topic}", produce_event)
    app.router.add_get("/healthz", healthz)
    return app


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap", help="host:port; without it an embedded broker is started")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8080)
    args = parser.parse_args()

    def serve(bootstrap: str) -> None:
        print(f"listening on http://{args.host}:{args.port} (broker {bootstrap})", flush=True)
        web.run_app(make_app(bootstrap), host=args.host, port=args.port, print=None)

    if args.bootstrap:
        serve(args.bootstrap)
        return 0
    from reference_broker.testing import BrokerProcess

    with BrokerProcess() as broker:
        serve(broker.bootstrap)
    return 0


if __name__ == "__main__":
    sys.exit(main())
