#!/usr/bin/env python3
"""One cold start of a sandboxed `serve` target, for lab/ab: `serve-start.py BULKHEAD ROOT`.

Starts `BULKHEAD -c PLAN serve` on a socket whose target is busybox httpd in a sandbox on ROOT
(a busybox root with /www/index.html, made here when missing), waits until serve listens,
then times one GET from connect to the last byte (serve starts the sandbox for it), stops
serve with SIGTERM and prints {"first_get_ms": ...} on stdout. lab/ab times the whole run too.
"""
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time


def busybox_root(root):
    if os.path.exists(os.path.join(root, "www/index.html")):
        return
    for d in ["bin", "etc", "proc", "sys", "dev", "tmp", "www"]:
        os.makedirs(os.path.join(root, d), exist_ok=True)
    shutil.copy("/bin/busybox", os.path.join(root, "bin/busybox"))
    for applet in ["sh", "httpd", "true"]:
        link = os.path.join(root, "bin", applet)
        if not os.path.lexists(link):
            os.symlink("busybox", link)
    with open(os.path.join(root, "www/index.html"), "w") as f:
        f.write("hello\n")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    exe, root = sys.argv[1], sys.argv[2]
    busybox_root(root)
    port = free_port()
    name = f"abserve{os.getpid()}"
    with tempfile.TemporaryDirectory() as d:
        plan = os.path.join(d, "plan.toml")
        with open(plan, "w") as f:
            f.write(
                f'[socket.{name}]\nlisten = ["127.0.0.1:{port}"]\nbackend = "127.0.0.1:8000"\n'
                f'[socket.{name}.target]\nrootfs = "{root}"\n'
                'command = ["/bin/httpd", "-f", "-p", "127.0.0.1:8000", "-h", "/www"]\n'
            )
        log = open(os.path.join(d, "serve.log"), "w+")
        env = {k: v for k, v in os.environ.items() if k not in ("NOTIFY_SOCKET", "BULKHEAD_CONFIG")}
        serve = subprocess.Popen([exe, "-c", plan, "serve"], stderr=log, stdout=subprocess.DEVNULL, env=env)
        try:
            deadline = time.monotonic() + 30
            while True:
                log.seek(0)
                if "listening on" in log.read():
                    break
                if serve.poll() is not None or time.monotonic() > deadline:
                    log.seek(0)
                    sys.exit(f"serve did not start:\n{log.read()}")
                time.sleep(0.002)
            t0 = time.monotonic()
            with socket.create_connection(("127.0.0.1", port), timeout=30) as c:
                c.sendall(b"GET /index.html HTTP/1.0\r\n\r\n")
                got = b""
                while chunk := c.recv(65536):
                    got += chunk
            ms = (time.monotonic() - t0) * 1000
            if b"hello" not in got:
                log.seek(0)
                sys.exit(f"no page: {got!r}\n{log.read()}")
        finally:
            serve.send_signal(signal.SIGTERM)
            serve.wait(timeout=60)
    print(json.dumps({"first_get_ms": ms}))


main()
