#!/usr/bin/env python3
"""Serve moto's S3 with one global lock around each request.

moto checks a write's condition and then writes without a lock, so two
concurrent conditional PUTs can both win. Holding one lock for the whole of
each request (the body included) makes every request atomic, so a
compare-and-swap race test measures the client, not moto.

It is served by waitress rather than werkzeug's development server, which
closes the connection after every answer: waitress keeps HTTP/1.1
connections alive, as real services do, so the client's kept-alive
connection is exercised by the tests and measured by the benchmark.

usage: moto_locked.py HOST PORT
"""
import sys
import threading

from moto.moto_server.werkzeug_app import DomainDispatcherApplication, create_backend_app
import waitress

LOCK = threading.Lock()
APP = DomainDispatcherApplication(create_backend_app)


def locked(environ, start_response):
    with LOCK:
        result = APP(environ, start_response)
        try:
            body = b"".join(result)
        finally:
            close = getattr(result, "close", None)
            if close is not None:
                close()
    return [body]


def main():
    host, port = sys.argv[1], int(sys.argv[2])
    waitress.serve(locked, host=host, port=port, threads=8, ident=None, _quiet=True)


if __name__ == "__main__":
    main()
