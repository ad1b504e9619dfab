"""POSTs a body of N spaces to URL with Python's http.client, which writes
the whole body before it reads the answer: 64 KiB every 5 ms with its
Content-Length. Prints {"status", "body"} or {"error"}.
Usage: python post_big.py URL N"""
import http.client
import json
import sys
import time
import urllib.parse

url, n = sys.argv[1], int(sys.argv[2])
u = urllib.parse.urlsplit(url)


def body():
    sent = 0
    while sent < n:
        part = min(64 * 1024, n - sent)
        sent += part
        time.sleep(0.005)
        yield b" " * part


try:
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=30)
    conn.request(
        "POST",
        u.path,
        body=body(),
        headers={
            "Content-Type": "application/json",
            "Accept": "application/json, text/event-stream",
            "Content-Length": str(n),
        },
    )
    r = conn.getresponse()
    print(json.dumps({"status": r.status, "body": r.read().decode()}))
except Exception as e:  # noqa: BLE001 -- the test prints what failed
    print(json.dumps({"error": repr(e)}))
