"""`ctxlm explore`: the JSON API against `ctxlm score`, its answers to bad input, and concurrent use."""
import dataclasses
import http.client
import io
import json
import math
import shutil
import socket
import subprocess
import sys
import threading
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import pytest
import torch

from conftest import WORDS, batched, tiny_config, write_corpus
from ctxlm import cli
from ctxlm.analysis.attention import explain
from ctxlm.explore.scoring import MAX_SLOTS, MAX_TOKENS, load_runs, score_run, tokenize
from ctxlm.explore.server import MAX_BODY, ExploreServer, Handler
from ctxlm.models import LanguageModel
from ctxlm.training.count import estimate_run
from ctxlm.training.trainer import Trainer

MODELS = {"lstm": {}, "attention": {"name": "attention", "window": 3},
          "salton": {"name": "attentive-lm", "layers": 1, "dropout": 0.0}, "kn": {"name": "kneser-ney", "order": 3}}
# three lines, 63 tokens: more than one chunk (the tiny runs score in chunks of 50), one word outside the
# vocabulary and one literal <unk>
TEXT = "\n".join([" ".join(WORDS[i % len(WORDS)] for i in range(0, 40, 2)), "the zebra sat on <unk> a mat",
                  " ".join(WORDS[i % len(WORDS)] for i in range(7, 40, 1))])


def train_runs(folder, names):
    corpus = write_corpus(folder)
    for name in names:
        config = tiny_config(corpus, **MODELS[name])
        if name == "kn":
            estimate_run(config, folder / name, log=lambda *a: None)
        else:
            Trainer(config, folder / name, log=lambda *a: None).fit()
    return [folder / name for name in names]


@pytest.fixture(scope="module")
def run_dirs(tmp_path_factory):
    return train_runs(tmp_path_factory.mktemp("explore"), list(MODELS))


@pytest.fixture(scope="module")
def server(run_dirs):
    server = ExploreServer(load_runs(run_dirs), "127.0.0.1", 0)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def request(server, method, path, body=None, headers=None):
    """(status, decoded JSON) of one request to the test server."""
    connection = http.client.HTTPConnection(*server.server_address[:2], timeout=60)
    if isinstance(body, (dict, list)):
        body = json.dumps(body)
    connection.request(method, path, body=body, headers=headers or {})
    response = connection.getresponse()
    answer = json.loads(response.read())
    connection.close()
    return response.status, answer


def ctxlm_score(run_dir, text, stream, monkeypatch, capsys):
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BufferedReader(io.BytesIO((text + "\n").encode()))))
    assert cli.main(["score", str(run_dir)] + (["--stream"] if stream else [])) == 0
    return [json.loads(line) for line in capsys.readouterr().out.splitlines()]


@pytest.mark.parametrize("stream", [True, False])
def test_log_probs_equal_ctxlm_score(server, run_dirs, stream, monkeypatch, capsys):
    status, answer = request(server, "POST", "/api/score", {"text": TEXT, "stream": stream})
    assert status == 200
    lines = tokenize(TEXT)
    assert answer["tokens"] == [w for words in lines for w in words + ["<eos>"]]
    for run_dir, scored in zip(run_dirs, answer["runs"]):
        rows = ctxlm_score(run_dir, TEXT, stream, monkeypatch, capsys)
        expected = [x for row in rows for x in row["log_probs"]]
        assert scored["run"] == run_dir.name and len(scored["log_probs"]) == len(expected) == 63
        assert max(abs(a - b) for a, b in zip(scored["log_probs"], expected)) < 2e-6, run_dir.name
        assert scored["unknown"] == [u for row in rows for u in row["unknown"]]
        assert scored["unknown_count"] == 2
        total = sum(row["total"] for row in rows)
        assert scored["total_log_prob"] == pytest.approx(total, abs=2e-4)         # its own 4 decimals
        assert scored["ppl"] == pytest.approx(math.exp(-total / 63), abs=6e-5)             # 4 decimals


def test_top_k_sorted_sums_to_at_most_one_and_ranks_the_actual_word(server):
    _, answer = request(server, "POST", "/api/score", {"text": TEXT, "top_k": 5})
    _, whole = request(server, "POST", "/api/score", {"text": TEXT, "top_k": 50})   # > vocabulary: everything
    for scored, full in zip(answer["runs"], whole["runs"]):
        for i, (top, everything) in enumerate(zip(scored["top"], full["top"])):
            probs = [p for _, p in top]
            assert len(top) == 5 and probs == sorted(probs, reverse=True) and sum(probs) <= 1.0
            assert len(everything) == scored["vocab_size"] == 20
            assert sum(p for _, p in everything) == pytest.approx(1.0, abs=1e-4)
            actual = "<unk>" if scored["unknown"][i] else answer["tokens"][i]
            p_actual = dict(everything)[actual]           # rank: 1 + the words more likely; ties share a place
            above, tied = sum(p > p_actual for _, p in everything), sum(p == p_actual for _, p in everything)
            assert above < scored["rank"][i] <= above + tied, scored["run"]
            assert p_actual == pytest.approx(math.exp(scored["log_probs"][i]), abs=2e-6)
    _, none = request(server, "POST", "/api/score", {"text": TEXT, "top_k": 0})
    assert all(r["top"] is None and r["rank"] is None for r in none["runs"])


def test_a_sentence_run_reads_each_sentence_alone_as_ctxlm_score(tmp_path, monkeypatch, capsys):
    """Lines read separately: a run trained on sentences alone, cut after `data.sentence_ends`, reads each sentence
    of a line from its start state in the page as `ctxlm score` does (Salton on WikiText-2)."""
    config = batched(tiny_config(write_corpus(tmp_path), name="attentive-lm", layers=1, dropout=0.0), "sentence")
    config.data.sentence_ends = "on mat"
    Trainer(config, tmp_path / "run", log=lambda *a: None).fit()
    scored = score_run(load_runs([tmp_path / "run"])["run"].run, tokenize(TEXT), top_k=0, stream=False)
    rows = ctxlm_score(tmp_path / "run", TEXT, False, monkeypatch, capsys)
    expected = [x for row in rows for x in row["log_probs"]]
    assert max(abs(a - b) for a, b in zip(scored["log_probs"], expected, strict=True)) < 2e-6
    on = tokenize(TEXT)[1].index("on")                  # "the zebra sat on": the word after "on" starts afresh
    after_on = len(tokenize(TEXT)[0]) + 1 + on + 1
    assert scored["attention"][after_on] == [[None, 1.0]]            # only the zero slot: nothing before it
    # the next word attends to the `<eos>` the piece was read after, not to "on": a slot of its start state
    assert {source for source, _ in scored["attention"][after_on + 1]} <= {None, "start", after_on}


def test_attention_as_the_analysis_reads_it(server, run_dirs):
    words = "the cat sat on a mat while dog ran".split()
    # the line read alone, from the run's start state, as `ctxlm attention` reads a text
    _, answer = request(server, "POST", "/api/score", {"text": " ".join(words), "runs": ["attention", "salton", "lstm"],
                                                        "stream": False})
    attention, salton, lstm = answer["runs"]
    assert lstm["attention"] is None
    runs = load_runs(run_dirs[1:3])
    for scored, served in zip((attention, salton), runs.values()):
        explained = explain(served.run, words)
        matrix = explained["attention"]                    # rows: positions; column 1 + j: input j = token j − 1
        for t, row in enumerate(scored["attention"]):
            shown = {source: w for source, w in row}
            assert sum(shown.values()) == pytest.approx(1.0, abs=1e-3) or (not row and t == 0)
            assert all(source in (None, "start") or source <= t - 2 for source in shown)   # outputs before the current one
            for j, w in enumerate(matrix[t][1:]):
                assert shown.get(j - 1, 0.0) == pytest.approx(w, abs=1e-4)
            assert shown.get(None, 0.0) == pytest.approx(matrix[t][0], abs=1e-4)
            assert shown.get("start", 0.0) == pytest.approx(explained["start_attention"][t], abs=1e-4)
    assert all(len(row) <= 3 for row in attention["attention"])          # window a = 3
    assert salton["attention"][0] == [[None, 1.0]]                        # only the zero slot at the start
    assert (salton["extra_slot"], attention["extra_slot"], lstm["extra_slot"]) == ("h0", "h0", None)   # what null is
    _, long_line = request(server, "POST", "/api/score", {"text": " ".join(WORDS * 5), "runs": ["salton"]})
    rows = long_line["runs"][0]["attention"]
    assert max(map(len, rows)) == MAX_SLOTS and all(a[1] >= b[1] for row in rows for a, b in zip(row, row[1:]))


def test_mixture_weight_comes_from_the_model_interface(run_dirs):
    class Gated(LanguageModel):
        """Stands in for a cache or pointer model: any model that mixes distributions, by mixture_weight(out) -> [B, T]."""

        mixes_distributions = True

        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        def forward(self, inputs, state=None, reset=None):
            return self.inner(inputs, state, reset)

        def log_probs(self, out):
            return self.inner.log_probs(out)

        def target_log_probs(self, out, targets):
            return self.inner.target_log_probs(out, targets)

        def mixture_weight(self, out):
            return torch.sigmoid(out.hidden[..., 0])

    run = next(iter(load_runs(run_dirs[:1]).values())).run
    gated = score_run(dataclasses.replace(run, model=Gated(run.model)), tokenize(TEXT))
    plain = score_run(run, tokenize(TEXT))
    assert plain["mixture_weight"] is None and gated["log_probs"] == plain["log_probs"]
    tokens = [w for words in tokenize(TEXT) for w in words + ["<eos>"]]
    hidden = run.model(run.vocab.encode(["<eos>"] + tokens[:-1]).unsqueeze(0)).hidden[0, :, 0]
    assert gated["mixture_weight"] == pytest.approx(torch.sigmoid(hidden).tolist(), abs=1e-4)


BAD = [
    (b"", 400, "body is empty"),
    (b"{\"text\": ", 400, "not valid JSON"),
    ("{\"text\": \"caf\xe9\"}".encode("latin-1"), 400, "not valid UTF-8"),
    (b"[\"the cat\"]", 400, "must be a JSON object"),
    (b"{\"words\": \"the\"}", 400, "unknown field(s) words"),
    (b"{}", 400, "needs 'text'"),
    (b"{\"text\": \"\"}", 400, "text is empty"),
    (b"{\"text\": \" \\n\\t \\n\"}", 400, "text is empty"),
    (b"{\"text\": \"the \\u0007cat\"}", 400, "U+0007 at line 1, column 5"),
    (b"{\"text\": \"the\\ncat\\u0000\"}", 400, "U+0000 at line 2, column 4"),
    (b"{\"text\": \"the \\ud800 cat\"}", 400, "U+D800"),
    (json.dumps({"text": "the " * MAX_TOKENS}).encode(), 413, "the limit is 20,000"),
    (b"{\"text\": \"the\", \"runs\": [\"nope\"]}", 404, "unknown run(s) 'nope'"),
    (b"{\"text\": \"the\", \"runs\": []}", 400, "'runs' must be"),
    (b"{\"text\": \"the\", \"top_k\": 51}", 400, "'top_k' must be"),
    (b"{\"text\": \"the\", \"top_k\": \"5\"}", 400, "'top_k' must be"),
    (b"{\"text\": \"the\", \"stream\": 1}", 400, "'stream' must be"),
]


@pytest.mark.parametrize("body, status, message", BAD, ids=[m for _, _, m in BAD])
def test_bad_input_gets_4xx_with_a_message(server, body, status, message):
    got, answer = request(server, "POST", "/api/score", body, {"Content-Type": "application/json"})
    assert (got, answer["status"]) == (status, status) and message in answer["error"]


def test_bad_requests_and_the_server_stays_up(server):
    assert request(server, "GET", "/api/score")[0] == 405
    assert request(server, "GET", "/nothing")[0] == 404
    assert request(server, "GET", "/static/../scoring.py")[0] == 404
    assert request(server, "POST", "/api/runs", b"{}")[0] == 404
    assert request(server, "GET", "/api/runs", headers={"Host": "example.com"})[0] == 403   # DNS rebinding
    big = b" " * (MAX_BODY + 1)
    assert request(server, "POST", "/api/score", big)[0] == 413
    with socket.create_connection(server.server_address[:2]) as raw:      # no Content-Length
        raw.sendall(b"POST /api/score HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")
        assert b" 411 " in raw.recv(1000).split(b"\r\n")[0] + b" "
    status, runs = request(server, "GET", "/api/runs")
    assert status == 200 and [r["name"] for r in runs["runs"]] == list(MODELS)
    assert [r["attention"] for r in runs["runs"]] == [False, True, True, False]


def test_concurrent_requests_all_succeed_with_one_answer(server, monkeypatch):
    """40 requests from 4 clients, while one client stalls mid-body and another hangs up mid-body."""
    body = {"text": TEXT, "top_k": 5}
    _, expected = request(server, "POST", "/api/score", body)
    monkeypatch.setattr(Handler, "timeout", 2)
    stalled, cut = (socket.create_connection(server.server_address[:2]) for _ in range(2))
    for client in (stalled, cut):
        client.sendall(b"POST /api/score HTTP/1.0\r\nContent-Length: 100\r\n\r\n{\"te")
    cut.shutdown(socket.SHUT_WR)
    with ThreadPoolExecutor(4) as pool:
        answers = list(pool.map(lambda _: request(server, "POST", "/api/score", body), range(40)))
    assert all(status == 200 for status, _ in answers)
    for _, answer in answers:
        for got, want in zip(answer["runs"], expected["runs"]):
            assert got["log_probs"] == want["log_probs"] and got["top"] == want["top"]
    for client, status, message in ((stalled, b"408", b"did not arrive within 2 s"), (cut, b"400", b"ended after 4 of 100")):
        with client, client.makefile("rb") as reply:
            answer = reply.read()
        assert answer.split(b" ")[1] == status and message in answer


def test_cli_prints_the_address_and_serves(run_dirs, capsys):
    process = subprocess.Popen([sys.executable, "-m", "ctxlm", "explore", str(run_dirs[0]), "--port", "0"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = process.stdout.readline()
        assert "open http://127.0.0.1:" in line, process.stderr.read()
        url = line.split("open ")[1].split()[0]
        with urllib.request.urlopen(url, timeout=30) as page:
            assert b"ctxlm explore" in page.read()
    finally:
        process.terminate()
        process.wait(timeout=30)
    with socket.create_server(("127.0.0.1", 0)) as taken:
        assert cli.main(["explore", str(run_dirs[0]), "--port", str(taken.getsockname()[1])]) == 2
    assert "pick another --port" in capsys.readouterr().err
    assert cli.main(["explore", str(run_dirs[0]), "--host", "256.1.1.1"]) == 2       # no such address: the host is wrong
    assert "give a --host this machine has" in capsys.readouterr().err


@pytest.fixture
def browser(tmp_path):
    """Headless Chromium driven by Selenium with the system chromedriver (never a downloaded one)."""
    webdriver = pytest.importorskip("selenium.webdriver", reason="needs selenium (the test extra)")
    from selenium.webdriver.chrome.service import Service

    binary = next(filter(None, map(shutil.which, ("chromium", "chromium-browser", "google-chrome"))), None)
    driver_path = shutil.which("chromedriver")
    if not (binary and driver_path):
        pytest.skip("needs chromium and chromedriver (Debian: apt-get install chromium chromium-driver)")
    options = webdriver.ChromeOptions()
    for argument in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1280,1000",
                     "--hide-scrollbars", "--force-device-scale-factor=1"):
        options.add_argument(argument)
    options.binary_location = binary
    options.add_experimental_option("prefs", {"download.default_directory": str(tmp_path / "downloads")})
    driver = webdriver.Chrome(options=options, service=Service(driver_path))
    yield driver
    driver.quit()


def test_page_in_a_real_browser(run_dirs, browser, tmp_path):
    """Two runs side by side: coloured tokens, top-k, a heatmap, comparison, errors, exports, a checked screenshot."""
    from PIL import Image
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    server = ExploreServer(load_runs(run_dirs[:2]), "127.0.0.1", 0)     # the LSTM and the attention run
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        wait = WebDriverWait(browser, 20)
        find = browser.find_element
        browser.get(server.url)
        wait.until(lambda b: "2 runs" in find(By.ID, "runs-info").text)
        text = "the cat sat on a mat\nthe zebra ran to big red house and small bird flew over"
        find(By.ID, "text").send_keys(text)
        find(By.ID, "score").click()
        tokens = [w for words in tokenize(text) for w in words + ["<eos>"]]
        wait.until(lambda b: len(b.find_elements(By.CSS_SELECTOR, ".run .tok")) == 2 * len(tokens))
        _, answer = request(server, "POST", "/api/score", {"text": text})
        runs = browser.find_elements(By.CSS_SELECTOR, ".run")
        assert [r.find_element(By.CSS_SELECTOR, ".ppl").text for r in runs] == [f"{r['ppl']:.2f}" for r in answer["runs"]]
        for run in runs:
            spans = run.find_elements(By.CSS_SELECTOR, ".tok")
            assert [s.text for s in spans] == [t.replace("<eos>", "↵") for t in tokens]
            backgrounds = {s.value_of_css_property("background-color") for s in spans}
            assert len(backgrounds) > 3 and "rgba(0, 0, 0, 0)" not in backgrounds
            assert "unk" in spans[tokens.index("zebra")].get_attribute("class")
        runs[1].find_elements(By.CSS_SELECTOR, ".tok")[tokens.index("red")].click()
        for run, scored in zip(runs, answer["runs"]):
            rows = run.find_elements(By.CSS_SELECTOR, ".topk tr")
            assert len(rows) >= 10 and all(row.is_displayed() for row in rows)
            assert rows[0].find_elements(By.TAG_NAME, "td")[1].text == scored["top"][tokens.index("red")][0][0]
        assert not runs[0].find_elements(By.CSS_SELECTOR, ".heatmap")
        cells = [c for c in runs[1].find_elements(By.CSS_SELECTOR, ".heatmap td") if c.text]
        assert cells and all(c.is_displayed() for c in cells)
        assert find(By.ID, "compare").is_displayed()
        assert len(browser.find_elements(By.CSS_SELECTOR, "#compare-tokens .tok")) == len(tokens)

        shot = tmp_path / "explore.png"
        browser.save_screenshot(str(shot))
        image = Image.open(shot).convert("RGB")
        assert image.size == (1280, browser.execute_script("return window.innerHeight"))
        assert len(image.getcolors(1 << 20)) > 200                           # not blank
        for element in (runs[0].find_elements(By.CSS_SELECTOR, ".tok")[2], cells[0]):   # visible in the picture
            rect = element.rect
            expected = [int(v) for v in element.value_of_css_property("background-color")[5:-1].split(",")[:3]]
            pixel = image.getpixel((int(rect["x"]) + 2, int(rect["y"] + rect["height"] / 2)))
            assert max(abs(a - b) for a, b in zip(pixel, expected)) <= 3, (pixel, expected)

        for button, name in (("export-json", "ctxlm-explore.json"), ("export-svg", "ctxlm-explore.svg"),
                             ("export-png", "ctxlm-explore.png")):
            find(By.ID, button).click()
            wait.until(lambda b: (tmp_path / "downloads" / name).exists())
        downloads = tmp_path / "downloads"
        assert json.loads((downloads / "ctxlm-explore.json").read_text())["runs"][1]["ppl"] == answer["runs"][1]["ppl"]
        svg = (downloads / "ctxlm-explore.svg").read_text()
        assert svg.count("<rect") > 3 * len(tokens) and ">zebra</text>" in svg
        assert Image.open(downloads / "ctxlm-explore.png").size[0] > 1000
        assert not [e for e in browser.get_log("browser") if e["level"] == "SEVERE"]   # no script or CSP errors

        for bad, message in (("  \n ", "empty"), ("the \u0007 cat", "U+0007"), ("a " * MAX_TOKENS, "limit is 20,000")):
            browser.execute_script("document.getElementById('text').value = arguments[0]", bad)
            find(By.ID, "score").click()
            wait.until(lambda b: find(By.ID, "error").is_displayed() and message in find(By.ID, "error").text)
    finally:
        server.shutdown()
        server.server_close()


def test_the_page_shows_a_word_of_probability_0(run_dirs, browser, tmp_path):
    """An imported ARPA file without <unk>: the API sends null for the word's log-probability and the perplexity;
    the page shows ∞, colours the word as the most surprising, and compares and exports without a script error."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    from ctxlm.training.count import import_arpa

    (tmp_path / "u.arpa").write_text("\\data\\\nngram 1=3\n\n\\1-grams:\n-0.5 </s>\n-0.3 the\n-99 <s>\n\n\\end\\\n")
    import_arpa(tmp_path / "u.arpa", tmp_path / "unigram", [], warn=lambda *a: None)
    server = ExploreServer(load_runs([run_dirs[0], tmp_path / "unigram"]), "127.0.0.1", 0)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        _, answer = request(server, "POST", "/api/score", {"text": "the zebra"})
        assert answer["runs"][1]["log_probs"][1] is None and answer["runs"][1]["ppl"] is None
        wait, find = WebDriverWait(browser, 20), browser.find_element
        browser.get(server.url)
        wait.until(lambda b: "2 runs" in find(By.ID, "runs-info").text)
        find(By.ID, "text").send_keys("the zebra")
        find(By.ID, "top-k").clear()
        find(By.ID, "top-k").send_keys("1")                     # the actual word then shows below the list
        find(By.ID, "score").click()
        wait.until(lambda b: len(b.find_elements(By.CSS_SELECTOR, ".run .tok")) == 6)
        runs = browser.find_elements(By.CSS_SELECTOR, ".run")
        assert runs[1].find_element(By.CSS_SELECTOR, ".ppl").text == "∞"
        zebra = runs[1].find_elements(By.CSS_SELECTOR, ".tok")[1]
        assert "∞" in zebra.get_attribute("title")
        darkest = max((s.value_of_css_property("background-color") for s in runs[0].find_elements(By.CSS_SELECTOR, ".tok")),
                      key=lambda colour: -sum(int(v) for v in colour[5:-1].split(",")[:3]))
        assert sum(map(int, zebra.value_of_css_property("background-color")[5:-1].split(",")[:3])) <= \
            sum(map(int, darkest[5:-1].split(",")[:3]))
        zebra.click()
        assert "p = 0," in runs[1].find_element(By.CSS_SELECTOR, ".detail").text
        below = runs[1].find_elements(By.CSS_SELECTOR, ".topk tr.actual")[-1].find_elements(By.TAG_NAME, "td")
        assert [below[1].text, below[2].text] == ["<unk>", "0"]
        assert "∞" in find(By.ID, "compare-summary").text
        find(By.ID, "export-svg").click()
        wait.until(lambda b: (tmp_path / "downloads" / "ctxlm-explore.svg").exists())
        assert not [e for e in browser.get_log("browser") if e["level"] == "SEVERE"]
    finally:
        server.shutdown()
        server.server_close()


def test_cache_runs_show_their_weights_and_attention(run_dirs):
    """`explore --cache`: each neural run also as RUN + cache; its log-probs are the cache wrapper's."""
    runs = load_runs(run_dirs[:1], cache=True)
    assert list(runs) == ["lstm", "lstm + cache"]
    lines = tokenize("the cat sat on a mat\nthe cat sat on a mat")
    cached = score_run(runs["lstm + cache"].run, lines, top_k=5)
    plain = score_run(runs["lstm"].run, lines, top_k=5)
    assert plain["mixture_weight"] is None and cached["mixture_weight"][0] == 0.0     # empty cache at the start
    assert set(cached["mixture_weight"][1:]) == {0.1}
    words = [w for line in lines for w in line + ["<eos>"]]
    expected = runs["lstm + cache"].run.score([" ".join(words[:-1])], document=True)[0].log_probs
    assert cached["log_probs"] == pytest.approx(expected, abs=1e-4)
    sources = [s for s, _ in cached["attention"][8]]
    assert sources and all(s is not None and -1 <= s < 8 for s in sources)        # only earlier tokens


def test_dynamic_runs_adapt_on_a_copy_and_start_each_request_from_the_trained_weights(run_dirs):
    runs = load_runs(run_dirs[:1], dynamic=True)
    assert list(runs) == ["lstm", "lstm + dynamic"]
    plain, adapted = runs["lstm"].run, runs["lstm + dynamic"].run
    assert adapted.dynamic is not None and adapted.model is not plain.model
    trained = [p.detach().clone() for p in plain.model.parameters()]
    lines = tokenize("the cat sat on a mat\n" * 6)
    first, again = score_run(adapted, lines, top_k=3), score_run(adapted, lines, top_k=3)
    assert first["log_probs"] == again["log_probs"]                     # each request from θ₀
    segment = adapted.dynamic.setting.segment
    reference = score_run(plain, lines, top_k=3)
    assert first["log_probs"][:segment] == pytest.approx(reference["log_probs"][:segment], abs=1e-5)
    assert first["log_probs"][segment:] != pytest.approx(reference["log_probs"][segment:], abs=1e-5)
    assert all(torch.equal(p, q) for p, q in zip(plain.model.parameters(), trained))
