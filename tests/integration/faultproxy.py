#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""faultproxy.py - an HTTP proxy on loopback that injects S3 faults.

    faultproxy.py UPSTREAM_URL RULES_FILE PORT_FILE LOG_FILE

Listens on 127.0.0.1 (an ephemeral port, written to PORT_FILE once it
listens) and forwards every request to UPSTREAM_URL unchanged, Host header
included, so SigV4 signatures made for the proxy's address stay valid.

RULES_FILE holds a JSON list, read again whenever it changes; the first
rule that matches a request and has injections left applies:

    {"method": "GET", "path": "/packs/", "fault": "status:503", "count": 2}

  method  HTTP method to match ("" or absent: any)
  path    a regular expression searched in the request path
  query   a regular expression searched in the query string ("" or
          absent: any; "list-type=2" matches ListObjectsV2)
  count   injections left (-1: forever)
  fault   status:N       answer N with an S3 error document, not forwarded
          reset          forward, send the headers and half the body, then
                         reset the connection (RST)
          truncate       forward, send the full Content-Length but half the
                         body, then close
          stall:S        wait S seconds before answering
          stall_body:S   send the headers and half the body, wait S seconds,
                         then the rest
          ignore_range   forward without the Range header and answer 200
                         with the whole object
          flip           forward, flip one byte in the middle of the body
          lie            PUT: answer 200 without forwarding (nothing stored)
          applied:N      forward (the server acts on it), then answer N
                         with an S3 error document instead of its reply
          applied_reset  forward (the server acts on it), then reset the
                         connection without answering
          reset_upload   read half the request body, then reset
          list_loop      a listing that never ends: forward the first page,
                         then say IsTruncated=true with one continuation
                         token, always the same; a request carrying that
                         token is answered the same page again (not
                         forwarded)
          other          forward, then answer another object's bytes: the
                         body of the latest 2xx GET of another path or
                         range (not injected, nor logged, until there is one)
          shift:N        forward, then rotate the body by N bytes (the same
                         length, every byte moved)
          empty200       forward, then answer 200 with an empty body
          huge_length    forward, then announce a Content-Length of 2^50
                         bytes, send the body and close
          garbage_xml    forward, then answer 200 with an XML document that
                         is not the one asked for, and some bytes that are
                         not XML at all

Every injection is appended to LOG_FILE as "fault METHOD PATH", so a test
can tell that the fault it asked for really happened. Standard library
only; for tests, never for traffic outside loopback.
"""
import http.client
import http.server
import json
import os
import re
import socket
import socketserver
import struct
import sys
import threading
import time
import urllib.parse

ERR_CODES = {500: "InternalError", 503: "SlowDown", 429: "TooManyRequests",
             403: "AccessDenied", 404: "NoSuchKey"}


LOOP_TOKEN = "dcrfs-faultproxy-loop"
HUGE_LENGTH = 1 << 50
GARBAGE = (b'<?xml version="1.0" encoding="UTF-8"?>\n<NotWhatYouAskedFor>'
           b'<IsTruncated>false</IsTruncated><Key>versions/0000000001</Key>'
           b'</NotWhatYouAskedFor>\x00\xff\xfe<<&&>>')


class Rules:
    def __init__(self, path, log):
        self.path, self.log = path, log
        self.lock = threading.Lock()
        self.mtime = None
        self.rules = []
        self.recent = []  # [(path + range, body)] of 2xx GETs, newest last
        self.loop_page = {}  # path -> the looping page served for it

    def remember(self, key, body):
        with self.lock:
            self.recent = [e for e in self.recent if e[0] != key][-7:]
            self.recent.append((key, body))

    def other_than(self, key):
        with self.lock:
            for k, b in reversed(self.recent):
                if k != key:
                    return b
        return None

    def note(self, fault, method, path):
        with self.lock, open(self.log, "a") as f:
            f.write("%s %s %s\n" % (fault, method, path))

    def _load(self):
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            self.rules, self.mtime = [], None
            return
        key = (st.st_mtime_ns, st.st_size, st.st_ino)
        if key != self.mtime:
            with open(self.path) as f:
                text = f.read()
            self.rules = json.loads(text) if text.strip() else []
            self.mtime = key

    def take(self, method, path, query=""):
        """The fault to inject for this request, or None. Logged here,
        except "other", logged when it has another body to answer."""
        with self.lock:
            self._load()
            for r in self.rules:
                if r.get("method") and r["method"] != method:
                    continue
                if not re.search(r.get("path", ""), path):
                    continue
                if not re.search(r.get("query", ""), query):
                    continue
                if r.get("count", -1) == 0:
                    continue
                if r.get("count", -1) > 0:
                    r["count"] -= 1
                if r["fault"] != "other":
                    with open(self.log, "a") as f:
                        f.write("%s %s %s\n" % (r["fault"], method, path))
                return r["fault"]
        return None


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    rules = None
    upstream = None

    def log_message(self, fmt, *args):
        pass

    def _reset(self):
        # SO_LINGER 0: close() sends RST, as a dying server or middlebox
        self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                                   struct.pack("ii", 1, 0))
        self.close_connection = True
        try:
            self.connection.close()
        except OSError:
            pass

    def _error(self, status):
        code = ERR_CODES.get(status, "InternalError")
        body = ("<?xml version=\"1.0\" encoding=\"UTF-8\"?><Error><Code>%s"
                "</Code><Message>injected by faultproxy</Message></Error>"
                % code).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/xml")
        self.send_header("Content-Length", str(len(body)))
        if status in (503, 429):
            self.send_header("Retry-After", "0")
        self.end_headers()
        self.wfile.write(body)

    def _forward(self, method, body, drop_range=False):
        u = urllib.parse.urlsplit(self.upstream)
        conn = http.client.HTTPConnection(u.hostname, u.port, timeout=120)
        conn.putrequest(method, self.path, skip_host=True,
                        skip_accept_encoding=True)
        for k, v in self.headers.items():
            lk = k.lower()
            if lk in ("expect", "connection", "transfer-encoding"):
                continue
            if drop_range and lk == "range":
                continue
            conn.putheader(k, v)
        conn.endheaders(body if body else None)
        resp = conn.getresponse()
        data = resp.read()
        headers = [(k, v) for k, v in resp.getheaders()
                   if k.lower() not in ("connection", "transfer-encoding",
                                        "content-length", "keep-alive")]
        conn.close()
        return resp.status, headers, data

    def _send(self, status, headers, data, fault):
        self.send_response(status)
        for k, v in headers:
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if self.command == "HEAD":
            return
        half = len(data) // 2
        if fault == "reset" and data:
            self.wfile.write(data[:half])
            self.wfile.flush()
            self._reset()
            return
        if fault == "truncate" and data:
            self.wfile.write(data[:half])
            self.wfile.flush()
            self.close_connection = True
            self.connection.shutdown(socket.SHUT_WR)
            return
        if fault and fault.startswith("stall_body:"):
            self.wfile.write(data[:half])
            self.wfile.flush()
            time.sleep(float(fault.split(":", 1)[1]))
            self.wfile.write(data[half:])
            return
        self.wfile.write(data)

    def _send_raw(self, status, headers, data, length=None):
        self.send_response(status)
        for k, v in headers:
            self.send_header(k, v)
        self.send_header("Content-Length",
                         str(len(data) if length is None else length))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)
        if length is not None:
            self.close_connection = True
            try:
                self.wfile.flush()
                self.connection.shutdown(socket.SHUT_WR)
            except OSError:
                pass  # the client gave up first

    def _list_loop(self, method, body, path, query):
        """A listing page that says it is truncated, its token always the
        same; asked for with that token, the same page again."""
        page = self.rules.loop_page.get(path)
        if page is None or LOOP_TOKEN not in query:
            status, headers, data = self._forward(method, body)
            if status != 200:
                self._send(status, headers, data, None)
                return
            data = re.sub(rb"<IsTruncated>[a-z]*</IsTruncated>",
                          b"<IsTruncated>true</IsTruncated>", data)
            data = re.sub(rb"<NextContinuationToken>[^<]*"
                          rb"</NextContinuationToken>", b"", data)
            data = data.replace(
                b"</ListBucketResult>",
                b"<NextContinuationToken>" + LOOP_TOKEN.encode() +
                b"</NextContinuationToken></ListBucketResult>")
            page = (headers, data)
            self.rules.loop_page[path] = page
        self._send(200, page[0], page[1], None)

    def _handle(self):
        method = self.command
        url = urllib.parse.urlsplit(self.path)
        path, query = url.path, urllib.parse.unquote(url.query)
        fault = self.rules.take(method, path, query)
        n = int(self.headers.get("Content-Length") or 0)
        if fault == "reset_upload":
            self.rfile.read(n // 2)
            self._reset()
            return
        body = self.rfile.read(n) if n else b""
        if fault and fault.startswith("status:"):
            self._error(int(fault.split(":", 1)[1]))
            return
        if fault and fault.startswith("stall:"):
            time.sleep(float(fault.split(":", 1)[1]))
        if fault == "lie" and method == "PUT":
            import hashlib
            self.send_response(200)
            self.send_header("ETag", '"%s"' % hashlib.md5(body).hexdigest())
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        if fault == "list_loop":
            self._list_loop(method, body, path, query)
            return
        status, headers, data = self._forward(
            method, body, drop_range=(fault == "ignore_range"))
        key = path + " " + (self.headers.get("Range") or "")
        ok = 200 <= status < 300
        if method == "GET" and ok and fault is None:
            self.rules.remember(key, data)
        if fault == "other" and method == "GET" and ok:
            other = self.rules.other_than(key)
            if other is not None:
                self.rules.note(fault, method, path)
                headers = [(k, v) for k, v in headers
                           if k.lower() not in ("etag", "content-range")]
                self._send(status, headers, other, None)
                return
        if fault and fault.startswith("shift:") and ok and data:
            k = int(fault.split(":", 1)[1]) % len(data)
            data = data[k:] + data[:k]
        if fault == "empty200" and ok:
            self._send_raw(200, [(k, v) for k, v in headers
                                 if k.lower() not in ("etag", "content-range")],
                           b"")
            return
        if fault == "huge_length" and ok:
            self._send_raw(status, headers, data, HUGE_LENGTH)
            return
        if fault == "garbage_xml" and ok:
            self._send_raw(200, [("Content-Type", "application/xml")], GARBAGE)
            return
        if fault and fault.startswith("applied:"):
            self._error(int(fault.split(":", 1)[1]))
            return
        if fault == "applied_reset":
            self._reset()
            return
        if fault == "ignore_range":
            status = 200 if status in (200, 206) else status
            headers = [(k, v) for k, v in headers
                       if k.lower() != "content-range"]
        if fault == "flip" and len(data) > 0 and 200 <= status < 300:
            i = len(data) // 2
            data = data[:i] + bytes([data[i] ^ 0x20]) + data[i + 1:]
        self._send(status, headers, data, fault)

    do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _handle


class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    allow_reuse_address = True


def main():
    if len(sys.argv) != 5:
        sys.exit(__doc__)
    upstream, rules, port_file, log = sys.argv[1:5]
    Handler.rules = Rules(rules, log)
    Handler.upstream = upstream
    srv = Server(("127.0.0.1", 0), Handler)
    tmp = port_file + ".tmp"
    with open(tmp, "w") as f:
        f.write("%d\n" % srv.server_address[1])
    os.rename(tmp, port_file)
    srv.serve_forever()


if __name__ == "__main__":
    main()
