"""Connects to the Unix socket argv[1] argv[2] times, closing each at once
(a stdio child trying to flush the audit log with refused connections)."""
import socket
import sys

for _ in range(int(sys.argv[2])):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.connect(sys.argv[1])
    except OSError:
        pass
    s.close()
