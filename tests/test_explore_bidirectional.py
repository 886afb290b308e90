"""`ctxlm explore` refuses a run with no next-word distribution (bidirectional-rm) when it starts, not per request."""
import pytest

from conftest import batched, ctxlm, one_line_error, tiny_config, write_corpus
from ctxlm.errors import CtxlmError
from ctxlm.explore.scoring import load_runs
from ctxlm.explore.server import ExploreServer
from ctxlm.training.trainer import Trainer


@pytest.fixture(scope="module")
def birm_and_lstm(tmp_path_factory):
    root = tmp_path_factory.mktemp("explore_birm")
    corpus = write_corpus(root)
    birm = tiny_config(corpus, name="bidirectional-rm", memory=2)
    batched(birm, "sentence").train.epochs = 1
    Trainer(birm, root / "birm", log=lambda *a: None).fit()
    lstm = tiny_config(corpus)
    lstm.train.epochs = 1
    Trainer(lstm, root / "lstm", log=lambda *a: None).fit()
    return root / "birm", root / "lstm"


def test_load_runs_refuses_a_bidirectional_rm_run(birm_and_lstm):
    birm, lstm = birm_and_lstm
    with pytest.raises(CtxlmError, match="explore: model 'bidirectional-rm'.*no next-word distribution"):
        load_runs([lstm, birm])
    assert list(load_runs([lstm])) == ["lstm"]          # a left-to-right run alone is still served


def test_cli_refuses_a_bidirectional_rm_run_in_one_line_before_serving(birm_and_lstm, monkeypatch):
    def served(self):
        raise AssertionError("ctxlm explore started serving a bidirectional-rm run")

    monkeypatch.setattr(ExploreServer, "serve_forever", served)
    birm, lstm = birm_and_lstm
    result = ctxlm("explore", birm, lstm, "--port", "0")
    one_line_error(result, "explore: model 'bidirectional-rm'", str(birm), "ctxlm complete")
    assert result.stdout == ""                          # no "open http://..." line: nothing was served
