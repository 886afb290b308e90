"""Every preset loads, builds, and has the parameter counts of the table row it reproduces."""
from pathlib import Path

import pytest
import torch

from ctxlm.config import load_toml
from ctxlm.models import build_model
from ctxlm.models.budget import match_params
from ctxlm.training.preflight import check_config

CONFIGS = Path(__file__).resolve().parent.parent / "configs"

# SPEC Tables 4.8 / 4.10: θ_{W+M}, θ_M in millions (PTB, V = 10,000)
TABLE_4_8 = {
    "ptb-lstm": (6.7, 3.7), "ptb-lstm-2layers": (7.5, 4.5), "ptb-lstm-3layers": (8.2, 5.2),
    "ptb-attention": (6.7, 3.8), "ptb-key-value": (6.7, 4.2), "ptb-key-value-predict": (6.7, 4.5),
    "ptb-rnn-1": (6.7, 4.2), "ptb-rnn-2": (6.7, 4.5), "ptb-rnn-3": (6.7, 4.8), "ptb-rnn-4": (6.7, 5.1),
    "ptb-rnn-5": (6.7, 5.2), "ptb-rm": (13.3, 4.3),
}


def counts(config, vocab_size):
    with torch.device("meta"):
        return build_model(config.model, vocab_size).parameter_counts()


@pytest.mark.parametrize("name", sorted(TABLE_4_8))
def test_daniluk_presets_match_table_parameter_counts(name):
    total, without = TABLE_4_8[name]
    ours = counts(load_toml(CONFIGS / "daniluk" / f"{name}.toml"), 10_000)
    assert ours["total"] / 1e6 == pytest.approx(total, rel=0.02)
    assert ours["without_embeddings"] / 1e6 == pytest.approx(without, rel=0.02)


def test_salton_ptb_has_the_papers_14_5M_parameters():
    assert counts(load_toml(CONFIGS / "salton" / "ptb-single.toml"), 10_000)["total"] / 1e6 == pytest.approx(14.5, rel=0.01)


@pytest.mark.parametrize("path", sorted(CONFIGS.rglob("*.toml")), ids=lambda p: p.stem)
def test_every_preset_loads_and_passes_trains_checks(path):
    config = load_toml(path)
    assert config.model.name and config.data.dataset
    check_config(config)            # no setting nothing reads, as `ctxlm train` and `ctxlm info` check it


@pytest.mark.parametrize("name, sizes", [("key-value", (249, 498)), ("key-value-predict", (215, 645)),
                                         ("rnn-1", (252, 504)), ("rnn-2", (216, 648)), ("rnn-5", (147, 882))])
def test_match_params_finds_the_tables_sizes(name, sizes):
    config = load_toml(CONFIGS / "daniluk" / f"ptb-{name}.toml")
    config.model.emb_size = config.model.hidden_size = 12
    match_params(config.model, 10_000, "lstm:300x300")
    assert (config.model.emb_size, config.model.hidden_size) == sizes


def test_match_params_counts_the_output_layer_and_goes_past_4096():
    from ctxlm.config import OutputConfig
    from ctxlm.models.budget import count_parameters, parse_budget

    config = load_toml(CONFIGS / "daniluk" / "ptb-lstm.toml")
    adaptive = OutputConfig(layer="adaptive", cutoffs="2000")
    budget = count_parameters(parse_budget("lstm:300x300", config.model), 10_000)
    match_params(config.model, 10_000, "lstm:300x300", adaptive)
    assert config.model.emb_size > 300                          # the adaptive softmax is smaller: more room
    assert count_parameters(config.model, 10_000, adaptive) <= budget
    config.model.emb_size += 1
    config.model.hidden_size += 1
    assert count_parameters(config.model, 10_000, adaptive) > budget
    match_params(config.model, 10_000, "lstm:5000x5000")        # a budget past the old search's 4096 ceiling
    assert (config.model.emb_size, config.model.hidden_size) == (5000, 5000)


def test_match_params_refuses_a_model_its_sizes_do_not_size():
    from ctxlm.errors import CtxlmError

    config = load_toml(CONFIGS / "ngram" / "ptb-kn5.toml")
    with pytest.raises(CtxlmError, match="kneser-ney's size does not follow model.emb_size"):
        match_params(config.model, 10_000, "lstm:300x300")


@pytest.mark.parametrize("path", sorted(CONFIGS.rglob("*.toml")), ids=lambda p: p.stem)
def test_match_params_sizes_every_preset_or_says_why_not(path):
    """Every preset is sized within the budget, or refused in one line: only a count-based one (no sizes) or a
    convolutional one whose kernels are tied to emb_size."""
    from ctxlm.errors import CtxlmError
    from ctxlm.models.budget import count_parameters, parse_budget

    config = load_toml(path)
    budget = count_parameters(parse_budget("lstm:300x300", config.model), 10_000)
    try:
        match_params(config.model, 10_000, "lstm:300x300", config.output)
    except CtxlmError as exc:
        assert "\n" not in str(exc) and "--match-params lstm:300x300" in str(exc)
        assert config.model.name in {"kneser-ney", "cnn", "mlpconv", "com"}, str(exc)
        return
    assert count_parameters(config.model, 10_000, config.output) <= budget


def test_docs_attention_md_gives_every_daniluk_and_salton_presets_parameter_count():
    """docs/attention.md's counts are those the presets build (V = 10,000 PTB, 33,278 WikiText-2)."""
    import re

    page = (CONFIGS.parent / "docs" / "attention.md").read_text(encoding="utf-8")
    rows = 0
    for line in page.splitlines():
        cells = [cell.strip() for cell in line.split("|")[1:-1]]
        if len(cells) != 5 or not cells[0].startswith("`ptb-"):
            continue
        names = re.findall(r"`(ptb-[a-z0-9-]+)`", cells[0])
        presets = [names[0], names[0] + "-over"] if "/ `-over`" in cells[0] else names
        stated = [int(n.replace(",", "")) for n in re.findall(r"[\d,]{5,}", cells[4])]
        assert len(stated) == len(presets), line
        for preset, count in zip(presets, stated):
            assert counts(load_toml(CONFIGS / "daniluk" / f"{preset}.toml"), 10_000)["total"] == count, preset
            rows += 1
    assert rows == 14
    salton = re.search(r"single ([\d,]+) / ([\d,]+),\s+combined ([\d,]+) / ([\d,]+)", page).groups()
    for (preset, vocab), count in zip((("ptb-single", 10_000), ("wikitext2-single", 33_278), ("ptb-combined", 10_000),
                                       ("wikitext2-combined", 33_278)), salton):
        assert counts(load_toml(CONFIGS / "salton" / f"{preset}.toml"), vocab)["total"] == int(count.replace(",", "")), preset
