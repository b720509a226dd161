#!/usr/bin/env python3
"""A far-away HTTPS service on 127.0.0.1, in front of a plain HTTP one.

    python3 scripts/wan_proxy.py --upstream 127.0.0.1:PORT --delay-ms 10 \\
        --idle-close 5 --cert CERT.pem --key KEY.pem --port-file FILE

Each connection it accepts pays what a wide-area path and an impatient
server make it pay:

- every chunk of bytes, either way, is held `--delay-ms` before it goes on
  (10 ms each way: a 20 ms round trip), the TLS handshake's included;
- TLS is ended here with CERT/KEY, and the plain bytes go to UPSTREAM on a
  connection of their own;
- a connection with no bytes either way for `--idle-close` seconds is
  closed by the server side (a FIN to the client), as nginx, load balancers
  and some S3-compatible servers do.

It writes its port to FILE once it listens, and runs until killed. Only
the standard library; for benchmarks and tests on loopback.
"""

import argparse
import select
import socket
import ssl
import threading
import time


def relay_delayed(src, dst, delay, conn):
    """Copy src to dst, each chunk `delay` seconds after it arrived."""
    try:
        while not conn.closed:
            ready, _, _ = select.select([src], [], [], 0.1)
            if not ready:
                continue
            data = src.recv(65536)
            arrived = time.monotonic()
            conn.touch()
            if not data:
                break
            wait = arrived + delay - time.monotonic()
            if wait > 0:
                time.sleep(wait)
            dst.sendall(data)
            conn.touch()
    except OSError:
        pass
    conn.close()


def relay_plain(src, dst, conn):
    try:
        while not conn.closed:
            data = src.recv(65536)
            if not data:
                break
            dst.sendall(data)
    except (OSError, ssl.SSLError):
        pass
    conn.close()


class Conn:
    def __init__(self, sockets):
        self.sockets = sockets
        self.closed = False
        self.last = time.monotonic()
        self.lock = threading.Lock()

    def touch(self):
        self.last = time.monotonic()

    def close(self):
        with self.lock:
            if self.closed:
                return
            self.closed = True
        for s in self.sockets:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            try:
                s.close()
            except OSError:
                pass


def serve(client, args, context):
    near, far = socket.socketpair()
    upstream_host, upstream_port = args.upstream.rsplit(":", 1)
    conn = Conn([client, near, far])
    threading.Thread(target=relay_delayed, args=(client, near, args.delay, conn), daemon=True).start()
    threading.Thread(target=relay_delayed, args=(near, client, args.delay, conn), daemon=True).start()

    def watch_idle():
        while not conn.closed:
            if time.monotonic() - conn.last >= args.idle_close:
                conn.close()
                return
            time.sleep(0.05)

    threading.Thread(target=watch_idle, daemon=True).start()
    try:
        tls = context.wrap_socket(far, server_side=True)
        up = socket.create_connection((upstream_host, int(upstream_port)))
        up.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    except (OSError, ssl.SSLError):
        conn.close()
        return
    conn.sockets += [tls, up]
    threading.Thread(target=relay_plain, args=(up, tls, conn), daemon=True).start()
    relay_plain(tls, up, conn)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--upstream", required=True)
    parser.add_argument("--delay-ms", type=float, default=10.0)
    parser.add_argument("--idle-close", type=float, default=5.0)
    parser.add_argument("--cert", required=True)
    parser.add_argument("--key", required=True)
    parser.add_argument("--port-file", required=True)
    args = parser.parse_args()
    args.delay = args.delay_ms / 1000.0
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(args.cert, args.key)
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)
    with open(args.port_file + ".tmp", "w") as f:
        f.write(str(listener.getsockname()[1]))
    import os

    os.replace(args.port_file + ".tmp", args.port_file)
    while True:
        client, _ = listener.accept()
        client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        threading.Thread(target=serve, args=(client, args, context), daemon=True).start()


if __name__ == "__main__":
    main()
