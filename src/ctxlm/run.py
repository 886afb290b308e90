"""A trained run from Python: `ctxlm.load(run_dir)` -> Run, which scores, predicts and generates (docs/python.md).

Texts are lines of raw text (a str is cut as `ctxlm eval --file` cuts a file: evaluation/texts.py `read_texts`),
tokenised by the run's text recipe (its corpus's: data/text.py, docs/prepare.md) unless `pretokenized=True` (then
split on whitespace); each ends in `<eos>`, and a word outside the vocabulary is scored as `<unk>` (flagged in
`unknown`, counted in `unknown_count`). Log-probabilities are natural logs.
"""
from __future__ import annotations

import copy
import dataclasses
import functools
import itertools
import numbers
import os
from collections import deque
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from .arguments import check_batch_size, check_device, check_flag, check_ids, check_instance, run_folder, seeded
from .checks import safe_exp, shown
from .config import Config
from .data.batching import cap_sentences, split_sentences
from .data.load import MAX_SENTENCE, sentence_end_ids
from .data.text import APPROXIMATE, WHITESPACE, TextRecipe, file_tokens, note_once
from .data.vocab import EOS, Vocabulary
from .errors import CtxlmError
from .evaluation.dynamic import DynamicSetting, DynamicWeights, stored_mean_squares
from .evaluation.lambada import not_answers
from .evaluation.scoring import score_item, score_sentences, score_stream
from .evaluation.start import start_for
from .evaluation.texts import check_text, read_texts
from .generate import sample
from .models.base import LanguageModel, build_model
from .models.cache import CacheSettings, NeuralCache
from .training.rundir import RunDir, identity

GROUP = 1024        # sentences scored together in sentence mode (bounded memory on endless input)


@dataclass
class Scored:
    """One text's scores: its tokens (`<eos>` last), their log-probabilities, and which were unknown."""
    text: str
    tokens: list[str]
    log_probs: list[float]
    unknown: list[bool]

    @property
    def total(self) -> float:
        return sum(self.log_probs)

    @property
    def perplexity(self) -> float:
        return safe_exp(-self.total / len(self.tokens))

    @property
    def unknown_count(self) -> int:
        """Tokens scored as `<unk>`."""
        return sum(self.unknown)


@dataclass
class Continued:
    """A continuation after a context: its tokens, their log-probabilities, which were unknown, and at each of
    its positions the likeliest token and the likeliest word (not `<unk>`, `<eos>` or punctuation: what
    `ctxlm lambada` predicts)."""
    tokens: list[str]
    log_probs: list[float]
    unknown: list[bool]
    best_token: list[str]
    best_word: list[str]


def pair_words(*texts: str, split=str.split) -> list[list[str]]:
    """The words of texts read one after another, each text's own: each line `split` (whitespace), a line break
    `<eos>` (one for several, none at the start: the stream starts after one)."""
    pieces, last = [], EOS
    for text in texts:
        words = []
        for number, line in enumerate(text.split("\n")):
            if number and last != EOS:
                words.append(EOS)
                last = EOS
            words += split(line)
            last = words[-1] if words else last
        pieces.append(words)
    return pieces


@dataclass(repr=False)
class Run:
    """A trained run (`ctxlm.load(run_dir)`): `score` / `iter_score` / `perplexity` texts, `sentence_log_probs`,
    `continuation`, `next_word_log_probs` / `top_next_words`, `generate`; `with_cache` / `with_dynamic` give variants;
    `words` shows a text's tokens. Its `config`, `vocab`, `model` and text `recipe` are attributes (docs/python.md)."""
    path: Path
    config: Config
    vocab: Vocabulary
    model: LanguageModel
    dynamic: DynamicWeights | None = None      # set by with_dynamic: every text is scored with steps
    weights_sha256: str = ""                   # the loaded weights' content digest (their file's metadata)
    recipe: TextRecipe | None = WHITESPACE     # how raw text becomes tokens (text.json); None: the run recorded none

    def __repr__(self) -> str:
        cached, count = isinstance(self.model, NeuralCache), self.model.parameter_counts()["total"]
        parts = [self.config.model.name, f"{count:,} {'stored n-grams' if self.model.count_based else 'parameters'}",
                 f"vocabulary {len(self.vocab):,}", f"recipe {self.recipe.describe() if self.recipe else 'none recorded'}"]
        parts += ["neural cache"] * cached + [f"dynamic {self.dynamic.setting.rule}" if self.dynamic else ""]
        return f"<Run {self.path}: {'; '.join(p for p in parts if p)}>"

    def words(self, line: str, pretokenized: bool = False) -> list[str]:
        """One line of raw text as the run's tokens, by its corpus's recipe; split on whitespace if `pretokenized`
        (or where the run recorded no recipe, with a note once). A leading byte-order mark is dropped, as `score`
        drops a first text's."""
        check_text(line, "words: line")
        line = line[1:] if line.startswith("\ufeff") else line
        recipe = None if check_flag(pretokenized, "pretokenized") else self.text_recipe()
        return line.split() if recipe is None else recipe.tokens(line)

    def file_tokens(self, path, pretokenized: bool = False) -> Iterator[str]:
        """A text file's tokens, each sentence followed by `<eos>`: by the run's recipe (its sentence rule too), or
        its lines split on whitespace if `pretokenized` (as `ctxlm eval --file` reads a file)."""
        return file_tokens(path, None if check_flag(pretokenized, "file_tokens: pretokenized") else self.text_recipe())

    def text_recipe(self) -> TextRecipe | None:
        """The recipe raw text goes through (None: split on whitespace), with a note once where it is approximate or
        the run recorded none."""
        if self.recipe is None:
            note_once(("unrecorded", self.path), f"{self.path} records no text recipe (trained before ctxlm kept one): raw "
                      "text is split on whitespace as before; give it tokenised as the corpus was")
        elif self.recipe.tokenize in APPROXIMATE:
            note_once(("approximate", self.recipe), f"{self.path}: {APPROXIMATE[self.recipe.tokenize]} (an approximation; "
                      "give text tokenised as the corpus was with --pretokenized / pretokenized=True for exact tokens)")
        return self.recipe

    # ------------------------------------------------------------ variants
    def with_cache(self, settings: CacheSettings | None = None) -> "Run":
        """The run with the neural cache (Grave et al. 2017): `settings`, else those `ctxlm tune-cache` recorded,
        else the defaults; a record whose tuning helped nothing holds no choice and is refused (give `settings`)."""
        check_instance(settings, CacheSettings, "with_cache: settings", "a ctxlm.CacheSettings")
        self._neural("the neural cache reads a neural model's hidden states")
        settings = settings or CacheSettings.recorded(self.path) or CacheSettings()
        try:
            return dataclasses.replace(self, model=NeuralCache(self.model, settings))
        except ValueError as exc:
            raise CtxlmError(f"with_cache: {exc}") from None

    def with_dynamic(self, setting: DynamicSetting | None = None, train_ids: torch.Tensor | None = None,
                     data_dir=None) -> "Run":
        """The run scoring with dynamic evaluation (Krause et al. 2018): `setting`, else the one `ctxlm tune-dynamic`
        recorded, else the defaults. The rms rule needs the training gradients' mean squares, measured on
        `train_ids` (default: the run's training split, read from `data_dir`). The steps adapt a copy of the
        weights, so this run scores as before; under a cache (`with_cache` first) they adapt the model inside it."""
        check_instance(setting, DynamicSetting, "with_dynamic: setting", "a ctxlm.DynamicSetting")
        self._neural("dynamic evaluation takes gradient steps on a neural model's weights")
        self._left_to_right("dynamic evaluation")
        if isinstance(self.model, NeuralCache):
            plain = dataclasses.replace(self, model=self.model.model)
            return plain.with_dynamic(setting, train_ids, data_dir).with_cache(self.model.settings)
        setting = setting or DynamicSetting.read(RunDir(self.path).dynamic) or DynamicSetting()
        # a dynamic variant, perhaps half-way through a document, gives a copy with its trained weights θ₀
        model = self.dynamic.trained_model() if self.dynamic is not None else copy.deepcopy(self.model)
        mean_square = None
        if setting.rule == "rms":
            if train_ids is None:
                from .data.load import prepare_data
                train_ids = prepare_data(self.config, data_dir, self.vocab).ids["train"]
            check_ids(train_ids, len(self.vocab), "with_dynamic: train_ids")
            mean_square = stored_mean_squares(self.path, model, train_ids, setting.segment, self.weights_sha256)
        return dataclasses.replace(self, model=model, dynamic=DynamicWeights(model, setting, mean_square))

    def _neural(self, because: str) -> None:
        if self.model.count_based:
            raise CtxlmError(f"{self.path} is a count-based model ({self.config.model.name}); {because}")

    def _left_to_right(self, what: str) -> None:
        if not self.model.left_to_right:
            raise CtxlmError(f"{what}: model {self.config.model.name!r} of {self.path} predicts each word from the words "
                             "before and after it, so it has no next-word distribution; score whole sentences (`ctxlm complete`, "
                             "Run.sentence_log_probs)")

    # ------------------------------------------------------------ scoring
    def score(self, texts: str | os.PathLike | Iterable[str], document: bool = False, batch_size: int = 32,
              pretokenized: bool = False) -> list[Scored]:
        """Per-token log-probabilities of each text: a list's items are lines; a str, or a file's Path, is cut as
        `ctxlm eval --file` cuts a file. `document`: the texts are one stream with the state carried (as `ctxlm eval`
        reads a file); else each is alone. `pretokenized`: tokens already, split on whitespace (else the run's recipe)."""
        return list(self._iter_score(texts, document, batch_size, pretokenized, "score"))

    def iter_score(self, texts: str | os.PathLike | Iterable[str], document: bool = False, batch_size: int = 32,
                   pretokenized: bool = False) -> Iterator[Scored]:
        """`score`, one text at a time as it is read (for long inputs)."""
        return self._iter_score(texts, document, batch_size, pretokenized, "score")

    def _iter_score(self, texts, document: bool, batch_size: int, pretokenized: bool, name: str) -> Iterator[Scored]:
        self._left_to_right(name)
        batch_size = check_batch_size(batch_size)
        tokenised = self._texts(texts, pretokenized, name)
        if check_flag(document, f"{name}: document"):
            read = deque()                      # texts read ahead of their scores (one or two)

            def blocks():
                for text, words in tokenised:
                    read.append((text, words + [EOS]))
                    yield self.vocab.encode(read[-1][1])
            for log_probs in self._stream(blocks()):
                yield self._scored(*read.popleft(), log_probs)
            return
        while group := list(itertools.islice(tokenised, GROUP)):
            tokens = [words + [EOS] for _, words in group]
            scores = self._sentences(self.vocab.encode_many(tokens), batch_size)
            for (text, _), words, log_probs in zip(group, tokens, scores):
                yield self._scored(text, words, log_probs)

    def perplexity(self, texts: str | os.PathLike | Iterable[str], document: bool = False, pretokenized: bool = False, *,
                   batch_size: int = 32) -> float:
        """exp(−total log-probability / tokens) of the texts, every `<eos>` counted: each text alone, as `score`
        reads them by default, or as one stream with `document` (`ctxlm eval --file`'s reading). At least one word."""
        total, count, words = 0.0, 0, False
        for scored in self._iter_score(texts, document, batch_size, pretokenized, "perplexity"):
            total += sum(scored.log_probs)
            count += len(scored.log_probs)
            words = words or len(scored.tokens) > 1
        if not words:
            raise CtxlmError(f"perplexity: no word to score ({'only empty lines' if count else 'no text'}); give at least one "
                             "word (an empty line among others is a lone <eos>, as in `ctxlm eval --file`)")
        return safe_exp(-total / count)

    def sentence_log_probs(self, texts: str | os.PathLike | Iterable[str], batch_size: int = 50, pretokenized: bool = False,
                           progress=None) -> list[float]:
        """log p of each whole sentence (its words then `<eos>`; texts as `score` takes them), for every family — the
        bidirectional RM included, which scores whole sentences only (`ctxlm complete` chooses candidates with
        this). `progress` (an io.Progress) counts the sentences scored."""
        from .evaluation.completion import sentence_scores
        batch_size = check_batch_size(batch_size)
        tokens = [words + [EOS] for _, words in self._texts(texts, pretokenized, "sentence_log_probs")]
        return sentence_scores(self.model, self.vocab, tokens, batch_size,
                               (lambda rows: progress.update(len(rows))) if progress else None, self.dynamic).tolist()

    def _texts(self, texts, pretokenized: bool, name: str) -> Iterator[tuple[str, list[str]]]:
        """Each text (`read_texts`) with its tokens; one cut from a str or a file without any is dropped (as
        `ctxlm eval --file` drops such a sentence), a line without any is a lone `<eos>`. Only the first text's
        byte-order mark is dropped (by `read_texts`), as `eval --file` reads a file."""
        recipe = None if check_flag(pretokenized, f"{name}: pretokenized") else self.text_recipe()
        split = str.split if recipe is None else recipe.tokens
        for text, cut in read_texts(texts, recipe.sentences if recipe else "lines", name):
            words = split(text)
            if words or not cut:
                yield text, words

    def continuation(self, context: str, continuation: str, pretokenized: bool = False) -> Continued:
        """The words of `continuation` after those of `context` (`pair_words`), read as one stream after `<eos>` with
        nothing appended, as `ctxlm lambada` reads a passage (lm-evaluation-harness's `loglikelihood`, ctxlm.harness)."""
        self._left_to_right("continuation")
        check_text(context, "continuation: context")
        check_text(continuation, "continuation: continuation")
        before, after = pair_words(context, continuation, split=functools.partial(self.words, pretokenized=pretokenized))
        if not after:
            raise CtxlmError(f"continuation {continuation!r} has no word to score")
        start, kept, seen = len(before), [], [0]       # output position p predicts token p

        def keep(out) -> None:
            length = out.hidden.shape[1]
            if seen[0] + length > start:
                kept.append(self.model.log_probs(out.from_position(max(0, start - seen[0])))[0].float().cpu())
            seen[0] += length

        ids = self.vocab.encode(before + after)
        log_probs = self._item(ids, on_output=keep)[start:]
        distributions = torch.cat(kept)
        words = distributions.masked_fill(self._not_answers, -torch.inf)
        return Continued(after, log_probs.tolist(), (ids[start:] == self.vocab.unk).tolist(),
                         [self.vocab.words[i] for i in distributions.argmax(1).tolist()],
                         [self.vocab.words[i] for i in words.argmax(1).tolist()])

    @functools.cached_property
    def _not_answers(self) -> torch.Tensor:
        return not_answers(self.vocab)

    # ------------------------------------------------------------ prediction
    def next_word_log_probs(self, context: str = "", pretokenized: bool = False) -> torch.Tensor:
        """[V] log-probabilities of the word after `context`, read after `<eos>` as `continuation` reads it (`pair_words`:
        a line break is `<eos>`, so after "the cat\n" the next word starts a line)."""
        self._left_to_right("next-word distribution")
        check_text(context, "next_word_log_probs: context")
        kept = []
        words = pair_words(context, split=functools.partial(self.words, pretokenized=pretokenized))[0]
        probe = self.vocab.encode(words + [EOS])        # any last id: its position reads the context's last word
        self._item(probe, on_output=lambda out: kept.append(self.model.log_probs(out.last_position())))
        return kept[-1].reshape(-1).float().cpu()

    def top_next_words(self, context: str = "", k: int = 10, special: bool = False, pretokenized: bool = False) -> list[tuple[str, float]]:
        """The `k` likeliest next words after `context`, with their probabilities (the model's own, not renormalised);
        `<eos>` and `<unk>` are left out unless `special`."""
        if isinstance(k, bool) or not isinstance(k, numbers.Integral) or k < 1:
            raise CtxlmError(f"top_next_words: k is the number of words to return, an integer at least 1; got {shown(k)}")
        log_probs = self.next_word_log_probs(context, pretokenized)
        left_out = [] if check_flag(special, "top_next_words: special") else [self.vocab.eos, self.vocab.unk]
        if left_out:
            log_probs = log_probs.index_fill(0, torch.tensor(left_out), -torch.inf)
        best = log_probs.topk(min(k, log_probs.numel() - len(left_out)))
        return [(self.vocab.words[i], safe_exp(lp)) for lp, i in zip(best.values.tolist(), best.indices.tolist())]

    def generate(self, prompt: str = "", max_tokens: int = 50, temperature: float = 1.0, top_k: int = 0,
                 top_p: float = 1.0, seed: int | torch.Generator | None = 0, special: bool = False,
                 stop_at_eos: bool = False, pretokenized: bool = False) -> list[str]:
        """Continue `prompt` by sampling (temperature 0: greedy); the sampled words. `<eos>` and `<unk>` are never drawn
        (the rest renormalised) unless `special`; `stop_at_eos`: `<eos>` may be drawn and ends the sample (not returned).
        `seed`: a number, a torch.Generator to draw several different samples from in turn, or None (a random draw)."""
        self._left_to_right("generate")
        check_text(prompt, "generate: prompt")
        if self.dynamic is not None:
            raise CtxlmError("generate samples from the trained weights; drop with_dynamic")
        generator = seed if isinstance(seed, torch.Generator) else seeded(seed)
        words = pair_words(prompt, split=functools.partial(self.words, pretokenized=pretokenized))[0]    # a line break is <eos>
        return sample(self.model, self.vocab, words, max_tokens, temperature, top_k, top_p, generator,
                      check_flag(special, "generate: special"), check_flag(stop_at_eos, "generate: stop_at_eos"))

    # ------------------------------------------------------------ the loops, in evaluation/scoring.py
    def _stream(self, blocks, on_output=None) -> Iterator[torch.Tensor]:
        return score_stream(self.model, blocks, self.vocab.eos, self.config.data.eval_chunk, self.dynamic, on_output=on_output)

    def _item(self, block: torch.Tensor, on_output=None) -> torch.Tensor:
        return score_item(self.model, block, self.vocab.eos, self.config.data.eval_chunk, self.dynamic, on_output)

    def _sentences(self, sentences: list[torch.Tensor], batch_size: int) -> list[torch.Tensor]:
        """Each text's log-probabilities, read alone; a run trained on sentences alone reads each of a text's
        sentences alone (cut after any `data.sentence_ends` token, as `ctxlm eval` and training cut them)."""
        if self.dynamic is not None:
            return [self._item(s) for s in sentences]             # each from the trained weights
        cut = [self.pieces_read_alone(s) for s in sentences]
        scores = iter(score_sentences(self.model, [piece for pieces in cut for piece in pieces], self.vocab.eos, batch_size,
                                      self.config.data.eval_chunk))
        return [torch.cat([next(scores) for _ in pieces]) for pieces in cut]

    @property
    def sentence_ends(self) -> tuple[int, ...]:
        """The ids of the `data.sentence_ends` tokens in the vocabulary, after which a run trained on sentences
        alone cuts a text (none for any other run)."""
        return sentence_end_ids(self.vocab, self.config) if self.config.data.batching == "sentence" else ()

    def pieces_read_alone(self, ids: torch.Tensor) -> Sequence[torch.Tensor]:
        """The pieces of a text (ids ending in `<eos>`) that are each read from the start state: its lines; for a run
        trained on sentences alone, cut after any `data.sentence_ends` token and into pieces of at most 2,048 tokens
        (`MAX_SENTENCE`), as `ctxlm eval` and training cut them."""
        pieces = split_sentences(ids, self.vocab.eos, self.sentence_ends)
        return cap_sentences(pieces, MAX_SENTENCE)[0] if self.config.data.batching == "sentence" else pieces

    def _scored(self, line: str, tokens: list[str], log_probs: torch.Tensor) -> Scored:
        unk = self.vocab.unk                                      # a word it lacks, or `<unk>` written in the text
        return Scored(line, tokens, log_probs.tolist(), (self.vocab.encode(tokens) == unk).tolist())


def load(run_dir: str | Path, device: str = "cpu", data_dir=None, start: bool = True) -> Run:
    """Build the model from the run's config.toml and vocab.txt and load its best weights, on `device`
    (count-based models, Kneser-Ney, always on the CPU: their tables are numpy arrays), with the state texts
    read alone start from (evaluation/start.py: the stored one, else estimated on the training text, found
    in `data_dir` or where the run's config says; `start=False`: the zero state)."""
    check_device(device)
    files = RunDir(run_folder(run_dir))
    config = files.read_config("train one with `ctxlm train`")
    vocab = files.read_vocab()
    model = build_model(config.model, len(vocab), config.output)
    metadata = files.load_weights(model, identity(config.model.name, vocab))
    model.to("cpu" if model.count_based else device).eval()
    if start:
        model.start = start_for(files.path, config, vocab, model, metadata.get("sha256", ""), data_dir)
    return Run(files.path, config, vocab, model, weights_sha256=metadata.get("sha256", ""), recipe=files.read_text_recipe())
