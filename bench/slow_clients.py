#!/usr/bin/env python3
"""Misbehaving HTTP/1.1 clients for the gateway's memory and timeout benchmarks (stdlib only).

Usage:
  slow_clients.py ADDR stall-upload N MIB        N clients declare MIB+1 MiB, send MIB MiB, stall
  slow_clients.py ADDR no-read N BYTES           N clients ask for a BYTES response, never read it
  slow_clients.py ADDR slow-read N SECONDS       N streams read at ~200 bytes/s, for SECONDS
  slow_clients.py ADDR slow-write N SECONDS      N requests whose bodies trickle at 10 bytes/s

Each mode holds its sockets until the gateway closes them (or SECONDS pass), then prints one JSON
line: how many connections the gateway closed, answered (with which statuses) or left open.
"""
import json
import socket
import sys
import threading
import time

BODY = b'{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}]}'


def connect(addr, rcvbuf=None):
    host, port = addr.rsplit(":", 1)
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    if rcvbuf:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    s.connect((host, int(port)))
    return s


def wait_close(s, limit):
    """Reads (and drops) until EOF or `limit` seconds; returns (closed, first bytes)."""
    s.settimeout(0.5)
    first = b""
    end = time.time() + limit
    while time.time() < end:
        try:
            b = s.recv(65536)
        except socket.timeout:
            continue
        except OSError:
            return True, first
        if not b:
            return True, first
        if len(first) < 64:
            first += b[: 64 - len(first)]
    return False, first


def status_of(first):
    try:
        return int(first[9:12])
    except ValueError:
        return None


def run(n, fn):
    out = []
    lock = threading.Lock()

    def one(i):
        r = fn(i)
        with lock:
            out.append(r)

    ts = [threading.Thread(target=one, args=(i,)) for i in range(n)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return out


def stall_upload(addr, n, mib, limit=120):
    def one(_):
        s = connect(addr)
        declared = (mib + 1) << 20
        s.sendall(
            b"POST /v1/chat/completions HTTP/1.1\r\nhost: gw\r\ncontent-type: application/json\r\n"
            + b"content-length: %d\r\n\r\n" % declared
        )
        try:
            s.sendall(b" " * (mib << 20))
        except OSError:
            pass
        return wait_close(s, limit)

    return run(n, one)


def no_read(addr, n, size, limit=120):
    def one(_):
        s = connect(addr, rcvbuf=4096)
        s.sendall(
            b"POST /v1/chat/completions HTTP/1.1\r\nhost: gw\r\ncontent-type: application/json\r\n"
            + b"x-mock: body_bytes=%d\r\ncontent-length: %d\r\n\r\n" % (size, len(BODY))
            + BODY
        )
        # Never read: only wait for the close.
        s.settimeout(None)
        end = time.time() + limit
        while time.time() < end:
            time.sleep(0.5)
            try:
                # MSG_PEEK of a closed socket shows EOF without taking data.
                s.setblocking(False)
                b = s.recv(1, socket.MSG_PEEK)
                if b == b"":
                    return True, b""
            except BlockingIOError:
                pass
            except OSError:
                return True, b""
        return False, b""

    return run(n, one)


def slow_read(addr, n, seconds):
    def one(_):
        s = connect(addr, rcvbuf=4096)
        body = b'{"model":"gpt-4o","stream":true}'
        s.sendall(
            b"POST /v1/chat/completions HTTP/1.1\r\nhost: gw\r\ncontent-type: application/json\r\n"
            + b"x-mock: tokens=100000, interval_ms=5\r\nconnection: close\r\n"
            + b"content-length: %d\r\n\r\n" % len(body)
            + body
        )
        end = time.time() + seconds
        first = b""
        s.settimeout(1)
        while time.time() < end:
            try:
                b = s.recv(200)
            except socket.timeout:
                continue
            except OSError:
                return True, first
            if not b:
                return True, first
            first = first or b[:64]
            time.sleep(1)
        return False, first

    return run(n, one)


def slow_write(addr, n, seconds):
    def one(_):
        s = connect(addr)
        pad = b'{"model":"gpt-4o","pad":"' + b"x" * 4096 + b'"}'
        s.sendall(
            b"POST /v1/chat/completions HTTP/1.1\r\nhost: gw\r\ncontent-type: application/json\r\n"
            + b"connection: close\r\ncontent-length: %d\r\n\r\n" % len(pad)
        )
        end = time.time() + seconds
        i = 0
        s.settimeout(0.01)
        while time.time() < end and i < len(pad):
            try:
                s.sendall(pad[i : i + 10])
            except OSError:
                break
            i += 10
            try:
                if s.recv(1, socket.MSG_PEEK) is not None:
                    break
            except (socket.timeout, BlockingIOError):
                pass
            except OSError:
                break
            time.sleep(1)
        return wait_close(s, 2)

    return run(n, one)


def main():
    addr, mode, n, arg = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    t0 = time.time()
    fn = {
        "stall-upload": stall_upload,
        "no-read": no_read,
        "slow-read": slow_read,
        "slow-write": slow_write,
    }[mode]
    res = fn(addr, n, arg)
    statuses = {}
    for _, first in res:
        st = status_of(first) if first else None
        statuses[str(st)] = statuses.get(str(st), 0) + 1
    print(
        json.dumps(
            {
                "mode": mode,
                "clients": n,
                "closed_by_gateway": sum(1 for c, _ in res if c),
                "still_open": sum(1 for c, _ in res if not c),
                "statuses": statuses,
                "seconds": round(time.time() - t0, 1),
            }
        ),
        flush=True,
    )


if __name__ == "__main__":
    main()
