"""`ctxlm explore`: the page and its JSON API on the standard library's threading HTTP server."""
from __future__ import annotations

import errno
import json
import socket
import sys
import traceback
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import resources

import torch

from ..checks import shown
from ..errors import CtxlmError
from ..jsonio import json_text
from .scoring import MAX_TOKENS, MAX_TOP_K, RequestError, load_runs, score, text_recipe

MAX_BODY = 4 * 1024 * 1024          # bytes of JSON; MAX_TOKENS is the limit that matters
LOOPBACK = ("127.0.0.1", "localhost", "::1")
STATIC = {"index.html": "text/html", "explore.js": "text/javascript", "attention.js": "text/javascript", "explore.css": "text/css"}


class ExploreServer(ThreadingHTTPServer):
    """Serves `runs` (name -> scoring.Served); each request runs in its own thread."""

    daemon_threads = True

    def __init__(self, runs: dict, host: str = "127.0.0.1", port: int = 0, verbose: bool = False, pretokenized: bool = False):
        self.address_family = socket.AF_INET6 if ":" in host else socket.AF_INET
        super().__init__((host, port), Handler)
        self.runs, self.verbose, self.pretokenized = runs, verbose, pretokenized
        self.loopback = host in LOOPBACK

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://[{host}]:{port}/" if ":" in host else f"http://{host}:{port}/"

    def runs_info(self) -> dict:
        return {"limits": {"max_tokens": MAX_TOKENS, "max_top_k": MAX_TOP_K},
                "runs": [{"name": name, "model": s.run.config.model.name, "vocab_size": len(s.run.vocab),
                          "parameters": s.run.model.parameter_counts()["total"],
                          "attention": s.run.model.exposes_attention, "text_recipe": text_recipe(s.run),
                          "mixture_weight": s.run.model.mixes_distributions}
                         for name, s in self.runs.items()]}


class Handler(BaseHTTPRequestHandler):
    server: ExploreServer
    timeout = 30                     # a client that stops sending frees its thread

    def do_GET(self):
        self._handle(self._get)

    def do_POST(self):
        self._handle(self._post)

    def _handle(self, action):
        try:
            if self.server.loopback and self.headers.get("Host", "").rsplit(":", 1)[0].strip("[]") not in LOOPBACK + ("",):
                raise RequestError("unexpected Host header: this server answers only requests made to a loopback "
                                   "address", 403)   # a page elsewhere must not reach it via DNS rebinding
            action(self.path.split("?", 1)[0])
        except RequestError as exc:
            self._error(str(exc), exc.status)
        except TimeoutError:         # the client stopped sending
            self._error(f"the request did not arrive within {self.timeout} s", 408)
        except ConnectionError:      # the client went away: nobody to answer
            pass
        except Exception as exc:     # never take the server down; say what happened
            traceback.print_exc(file=sys.stderr)
            self._error(f"internal error: {type(exc).__name__}: {exc}", 500)

    def send_error(self, code, message=None, explain=None):
        """http.server's own refusals (a malformed request, a method without a `do_` here: its 501) as JSON too."""
        if code == HTTPStatus.NOT_IMPLEMENTED:
            code, message = 405, f"method {shown(self.command)} is not allowed: GET / and /api/runs, POST to /api/score"
        self._error(message or HTTPStatus(code).phrase, int(code))

    def _error(self, message: str, status: int):
        allow = {"Allow": "POST" if self.path.split("?", 1)[0] == "/api/score" else "GET"} if status == 405 else {}
        try:
            self._json({"error": message, "status": status}, status, allow)
        except ConnectionError:
            pass

    def _get(self, path):
        if path == "/api/score":
            raise RequestError("use POST for /api/score, with a JSON body such as {\"text\": \"the cat sat\"}", 405)
        if path == "/api/runs":
            return self._json(self.server.runs_info())
        name = "index.html" if path == "/" else path.removeprefix("/static/")
        if name not in STATIC:
            raise RequestError(f"no page {path}; open / or use /api/runs and /api/score", 404)
        body = resources.files(__package__).joinpath("static", name).read_bytes()
        self._send(body, f"{STATIC[name]}; charset=utf-8")

    def _post(self, path):
        if path != "/api/score":
            raise RequestError(f"no API {path}; POST to /api/score", 404)
        length = self.headers.get("Content-Length")
        if length is None:
            raise RequestError("a Content-Length header is required", 411)
        if not (length.isascii() and length.isdigit()):
            raise RequestError(f"the Content-Length header {shown(length)} is not a number of bytes")
        digits = length.lstrip("0") or "0"
        if len(digits) > 15:                 # petabytes; int() refuses more than 4,300 digits
            raise RequestError(f"the request's Content-Length has {len(digits):,} digits; the limit is {MAX_BODY:,} bytes", 413)
        length = int(digits)
        if length > MAX_BODY:
            remaining = length if length <= 16 * MAX_BODY else 0   # read it away, so that the client sees the answer
            while remaining > 0 and (chunk := self.rfile.read(min(remaining, 1 << 20))):
                remaining -= len(chunk)
            raise RequestError(f"the request is {length:,} bytes; the limit is {MAX_BODY:,} (and {MAX_TOKENS:,} tokens)", 413)
        body = self.rfile.read(length)
        if len(body) < length:
            raise RequestError(f"the request body ended after {len(body):,} of {length:,} bytes")
        if not body.strip():
            raise RequestError("the request body is empty; send JSON such as {\"text\": \"the cat sat\"}")
        too_deep = False
        try:
            request = json.loads(body.decode("utf-8"))
        except UnicodeDecodeError as exc:
            raise RequestError(f"the request body is not valid UTF-8 (byte {exc.start}); send UTF-8 text") from None
        except json.JSONDecodeError as exc:
            raise RequestError(f"the request body is not valid JSON: {exc}") from None
        except ValueError:                   # json.loads's other refusal: an integer past int()'s digit limit
            raise RequestError(f"the request's JSON has a number of more than {sys.get_int_max_str_digits():,} digits; "
                               "send numbers such as \"top_k\": 5") from None
        except RecursionError:               # too deep for the parser itself
            too_deep = True
        if too_deep or _depth(request) > MAX_DEPTH:
            raise RequestError(f"the request's JSON is nested more than {MAX_DEPTH} levels deep; send a flat "
                               "object such as {\"text\": \"the cat sat\"}")
        self._json(score(self.server.runs, request, self.server.pretokenized))

    def _json(self, data, status: int = 200, headers: dict | None = None):
        """`data` as UTF-8 JSON; a lone surrogate (a request's field name echoed) goes as its escape, \\udXXX."""
        text = json_text(data, ensure_ascii=False, separators=(",", ":"))
        self._send(text.encode("utf-8", "backslashreplace"), "application/json; charset=utf-8", status, headers)

    def _send(self, body: bytes, content_type: str, status: int = 200, headers: dict | None = None):
        self.send_response(status)
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.send_header("X-Content-Type-Options", "nosniff")
        self.send_header("Content-Security-Policy", "default-src 'self'; img-src 'self' data: blob:")
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def log_message(self, format, *args):
        if self.server.verbose:
            super().log_message(format, *args)


MAX_DEPTH = 32      # the API's requests are two levels deep


def _depth(value, level: int = 1) -> int:
    """How deeply `value` nests lists and objects, counted up to just past MAX_DEPTH."""
    if level > MAX_DEPTH or not isinstance(value, (list, dict)):
        return level - (not isinstance(value, (list, dict)))
    items = value.values() if isinstance(value, dict) else value
    return max((_depth(v, level + 1) for v in items), default=level)


def serve(paths, host: str = "127.0.0.1", port: int = 8765, cache: bool = False, dynamic: bool = False,
          data_dir=None, pretokenized: bool = False) -> None:
    """Load the runs once and serve until Ctrl-C; `pretokenized`: requests' text is tokens already unless they say."""
    torch.set_num_threads(1)   # requests and runs go in parallel; more threads per request slow a busy CPU
    runs = load_runs(paths, cache, dynamic, data_dir)
    try:
        server = ExploreServer(runs, host, port, verbose=True, pretokenized=pretokenized)
    except OSError as exc:
        fix = "give a --host this machine has (127.0.0.1, or 0.0.0.0 for every address)" if isinstance(
            exc, socket.gaierror) or exc.errno == errno.EADDRNOTAVAIL else "pick another --port"
        raise CtxlmError(f"cannot serve on {host}:{port}: {exc.strerror}; {fix}") from None
    if not server.loopback:
        print(f"warning: serving on {host}: anyone who can reach this address can use the models", file=sys.stderr)
    print(f"ctxlm explore: {len(server.runs)} run(s) ({', '.join(server.runs)}); open {server.url}  (Ctrl-C to stop)",
          flush=True)
    try:
        server.serve_forever()
    finally:
        server.server_close()
