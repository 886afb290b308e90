"""`ctxlm explore` against awkward input: lines as `ctxlm score` reads them, malformed requests, other methods, long texts."""
import dataclasses
import http.client
import json
import threading
from contextlib import contextmanager

import pytest

from conftest import ctxlm
from ctxlm.data.text import TextRecipe
from ctxlm.explore.scoring import Served, load_runs
from ctxlm.explore.server import ExploreServer
from test_explore import request, train_runs


@pytest.fixture(scope="module")
def run_dirs(tmp_path_factory):
    return train_runs(tmp_path_factory.mktemp("explore_hostile"), ["lstm", "kn"])


@contextmanager
def serving(runs):
    server = ExploreServer(runs, "127.0.0.1", 0)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture(scope="module")
def server(run_dirs):
    with serving(load_runs(run_dirs)) as server:
        yield server


def raw_request(server, method, path, body=b"", headers=None):
    """(status, headers, body bytes) of one request sent as given (any method, any Content-Length)."""
    connection = http.client.HTTPConnection(*server.server_address[:2], timeout=60)
    connection.putrequest(method, path)
    for name, value in (headers or {"Content-Length": str(len(body))}).items():
        connection.putheader(name, value)
    connection.endheaders(body)
    response = connection.getresponse()
    answer = response.status, response.headers, response.read()
    connection.close()
    return answer


LINES = ["the cat sat on the mat\n\nbig red zebra house",      # a blank line: a lone <eos>
         "\nthe cat sat\r\n\r\non a mat\r\n",                    # CRLF, a leading blank line, a final line break
         "\ufeffthe dog ran\n\ufeffon a mat\n\n\n"]                # byte-order marks (only the first is dropped), blank lines at the end


@pytest.mark.parametrize("stream", [True, False])
@pytest.mark.parametrize("text", LINES, ids=["blank line", "crlf", "bom and trailing blank lines"])
def test_lines_are_read_as_ctxlm_score_reads_them(server, run_dirs, text, stream):
    status, answer = request(server, "POST", "/api/score", {"text": text, "top_k": 0, "stream": stream})
    assert status == 200
    for run_dir, scored in zip(run_dirs, answer["runs"]):
        result = ctxlm("score", run_dir, *["--stream"] * stream, stdin=text.encode())
        rows = [json.loads(line) for line in result.stdout.splitlines()]
        assert answer["tokens"] == [t for row in rows for t in row["tokens"]], run_dir.name
        expected = [x for row in rows for x in row["log_probs"]]
        assert len(scored["log_probs"]) == len(expected)
        assert max(abs(a - b) for a, b in zip(scored["log_probs"], expected)) < 2e-5, run_dir.name


def test_a_lone_carriage_return_is_refused_not_read_as_a_line_break(server):
    status, answer = request(server, "POST", "/api/score", {"text": "the cat\rsat"})
    assert (status, answer["status"]) == (400, 400) and "U+000D at line 1, column 8" in answer["error"]


MALFORMED = [
    ({}, b"{\"text\": \"a\", \"\\ud800\": 1}", 400, "unknown field(s) \ud800"),
    ({}, b"{\"text\": \"a\", \"top_k\": " + b"1" * 5000 + b"}", 400, "more than 4,300 digits"),
    ({}, b"{\"text\": \"a\", \"runs\": [[" + b"9" * 4301 + b"]]}", 400, "more than 4,300 digits"),
    ({"Content-Length": "\u00b2"}, b"{}", 400, "is not a number of bytes"),
    ({"Content-Length": "-2"}, b"{}", 400, "is not a number of bytes"),
    ({"Content-Length": "9" * 5000}, b"{}", 413, "has 5,000 digits"),
    ({"Content-Length": "0" * 5000 + "2"}, b"{}", 400, "needs 'text'"),
]


@pytest.mark.parametrize("headers, body, status, message", MALFORMED, ids=[m for *_, m in MALFORMED])
def test_malformed_requests_get_one_json_error(server, headers, body, status, message):
    got, _, answer = raw_request(server, "POST", "/api/score", body, headers or None)
    answer = json.loads(answer)
    assert (got, answer["status"]) == (status, status) and message in answer["error"]


@pytest.mark.parametrize("method", ["HEAD", "PUT", "DELETE", "PATCH", "OPTIONS", "BREW"])
def test_other_methods_get_a_json_405_naming_the_allowed_ones(server, method):
    status, headers, body = raw_request(server, method, "/api/score", b"{}")
    assert (status, headers["Allow"], headers["Content-Type"]) == (405, "POST", "application/json; charset=utf-8")
    if method == "HEAD":
        assert body == b""                      # a HEAD answer has headers only
    else:
        answer = json.loads(body)
        assert answer["status"] == 405 and f"method '{method}' is not allowed" in answer["error"]
    assert raw_request(server, method, "/api/runs")[1]["Allow"] == "GET"
    status, headers, _ = raw_request(server, "GET", "/api/score")
    assert (status, headers["Allow"]) == (405, "POST")


def test_a_text_over_the_limit_is_refused_before_the_rest_is_tokenised(run_dirs, monkeypatch):
    lstm = load_runs(run_dirs[:1])["lstm"].run
    moses = dataclasses.replace(lstm, recipe=TextRecipe(tokenize="moses"))
    tokenised, tokens = [], TextRecipe.tokens
    monkeypatch.setattr(TextRecipe, "tokens", lambda self, line: tokenised.append(line) or tokens(self, line))
    with serving({"moses": Served(moses)}) as server:
        status, answer = request(server, "POST", "/api/score", {"text": "The cat sat.\n" * 30_000})
    assert (status, answer["status"]) == (413, 413)
    assert "the text has 20,005 tokens (words plus one <eos> per line) in its first 4,001 of 30,000 lines" in answer["error"]
    assert len(tokenised) == 4_001              # not the other 25,999 lines
