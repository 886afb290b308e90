"""The ctxlm model in lm-evaluation-harness (`lm-eval`, EleutherAI): the class `CtxlmLM`, registered in the
harness as `ctxlm` when this module is imported, and the evaluation behind `ctxlm harness` (docs/harness.md).

The harness hands a model strings. ctxlm's models are word-level: each line of a request's context and continuation
is tokenised by the run's text recipe (docs/prepare.md; split on whitespace with `pretokenized=True`), a line break
is `<eos>` (`ctxlm.run.pair_words`), and a word outside the vocabulary is scored as `<unk>`. `loglikelihood` reads the context and continuation as one stream after `<eos>` with nothing
appended, as `ctxlm lambada` reads a passage (`Run.continuation`); `loglikelihood_rolling` reads a document as
`ctxlm eval --file` reads a file (`Run.score(..., document=True)`; a run trained on sentences alone reads each alone). Generation tasks are refused.

Importing this module needs `lm-eval` (the `harness` extra); the CLI imports it only for `ctxlm harness`.
"""
from __future__ import annotations

import contextlib
import json
import logging
import os
import sys
from pathlib import Path

from lm_eval.api.model import LM
from lm_eval.api.registry import register_model

from .. import schemas
from ..errors import CtxlmError
from ..io import Progress, warn
from ..run import Run, load
from .tasks import reads_tokenised_lambada

GREEDY = ("token", "word")


@register_model("ctxlm")
class CtxlmLM(LM):
    """A ctxlm run in the harness: `--model ctxlm --model_args run=RUN[,greedy=word][,cache=True][,dynamic=True]
    [,pretokenized=True]` (`pretokenized`: requests are tokens already, split on whitespace, not by the run's recipe).

    `greedy`: when a continuation counts as the model's own choice (the harness's `acc` on LAMBADA):
    `token` (the harness's definition: each of its tokens is the likeliest token, punctuation, `<eos>` and
    `<unk>` included) or `word` (`ctxlm lambada`'s: the likeliest word, those passed over). A continuation
    with a word outside the vocabulary is never greedy (its `<unk>` stands for every unknown word at once).
    """

    def __init__(self, run: str | Path | Run, greedy: str = "token", cache: bool = False, dynamic: bool = False,
                 device: str | None = None, progress: bool = True, pretokenized: bool = False,
                 **_harness):                                   # the harness adds batch_size etc.
        super().__init__()
        if greedy not in GREEDY:
            raise CtxlmError(f"model_args greedy={greedy}: give greedy=token (the harness's own acc) or greedy=word "
                             "(ctxlm lambada's accuracy)")
        device = str(device or "cpu")
        if not isinstance(run, Run):
            from ..training.preflight import pick_device
            where = pick_device(device.split(":")[0], "model_args device")       # cuda:1 as the harness may give it
            run = load(run, device if device.startswith("cuda:") else where)
        if not run.model.left_to_right:
            raise CtxlmError(f"model {run.config.model.name!r} of {run.path} predicts each word from the words before and "
                             "after it: it has no next-word probabilities for the harness to read")
        cache, dynamic = _flag(cache, "cache"), _flag(dynamic, "dynamic")
        run = run.with_dynamic() if dynamic else run
        self.run = run.with_cache() if cache else run
        self.greedy, self.progress, self.pretokenized = greedy, progress, _flag(pretokenized, "pretokenized")
        # as `ctxlm eval --file` reads a file: a run trained on sentences alone reads each alone, unless a cache or
        # dynamic evaluation spans them
        self.document = run.config.data.batching != "sentence" or cache or dynamic
        self._device = device

    def loglikelihood(self, requests, disable_tqdm: bool = False) -> list[tuple[float, bool]]:
        results = []
        for request in self._requests(requests, "ctxlm loglikelihood", disable_tqdm):
            context, continuation = request.args
            scored = self.run.continuation(context, continuation, self.pretokenized)
            best = scored.best_word if self.greedy == "word" else scored.best_token
            result = (sum(scored.log_probs), not any(scored.unknown) and best == scored.tokens)
            self.cache_hook.add_partial("loglikelihood", (context, continuation), result)
            results.append(result)
        return results

    def loglikelihood_rolling(self, requests, disable_tqdm: bool = False) -> list[float]:
        results = []
        for request in self._requests(requests, "ctxlm loglikelihood_rolling", disable_tqdm):
            text = request.args[0]          # a str is cut as `ctxlm eval --file` cuts a file holding it (its recipe's rule)
            total = sum(scored.total for scored in self.run.iter_score(text, self.document, pretokenized=self.pretokenized))
            self.cache_hook.add_partial("loglikelihood_rolling", (text,), total)
            results.append(total)
        return results

    def _requests(self, requests, desc: str, quiet: bool):
        """The requests, their progress on stderr (io.Progress: a bar on a terminal, lines in a log) unless `quiet`."""
        if quiet or not self.progress:
            yield from requests
            return
        with Progress(len(requests), desc, unit="requests") as bar:
            for request in requests:
                yield request
                bar.update()

    def generate_until(self, requests, disable_tqdm: bool = False) -> list[str]:
        tasks = sorted({str(r.task_name) for r in requests})
        raise CtxlmError(f"task {', '.join(tasks)} asks for free generation (generate_until), which the ctxlm model does "
                         "not do: choose loglikelihood or multiple-choice tasks (LAMBADA, perplexity, multiple choice)")


def _flag(value, name: str) -> bool:
    if isinstance(value, str):                 # from a model_args string the harness did not turn into a bool
        if value.lower() not in ("true", "false"):
            raise CtxlmError(f"model_args {name}={value}: give {name}=True or {name}=False")
        return value.lower() == "true"
    return bool(value)


# a task file of --include-path: what ctxlm checks before the harness indexes it (which skips a bad file in silence)
TASK_FILE = schemas.record({
    "task": {"anyOf": [schemas.text(), {"type": "array"}], "description": "a task name or a list"},
    "group": schemas.text(), "dataset_path": schemas.text(), "num_fewshot": schemas.rule("harness.num_fewshot"),
    "output_type": {"enum": ["loglikelihood", "loglikelihood_rolling", "multiple_choice", "generate_until"],
                    "description": "loglikelihood, loglikelihood_rolling, multiple_choice or generate_until"},
}, description="a task file (a YAML mapping)")


def check_task_files(folder: str | Path) -> None:
    """Every *.yaml under `folder` parsed as the harness reads it and checked against TASK_FILE: a file the harness
    cannot read is one line naming it, not "no such task"."""
    from lm_eval.tasks._yaml_loader import load_yaml

    for path in sorted(Path(folder).rglob("*.yaml")):
        try:
            data = load_yaml(path, resolve_func=False, recursive=True)
        except Exception as exc:                # yaml's errors, a missing include, a list at the top
            reason = " ".join(str(exc).split())
            raise CtxlmError(f"{path}: not a task file the harness can read ({type(exc).__name__}: {reason}); fix the YAML") from None
        schemas.check(data, TASK_FILE, path, "fix the task file (docs/harness.md)")


@contextlib.contextmanager
def bars_off_in_logs():
    """Every tqdm bar (the harness's own: requests, bootstrap) off while it runs where stderr is not a terminal,
    whose `\\r` redraws would fill a log file; ctxlm's own progress there is plain lines (io.Progress)."""
    from tqdm import std

    if sys.stderr.isatty():
        yield
        return
    own = std.tqdm.__dict__["__init__"]
    base = std.tqdm.__init__

    def quiet(self, *args, **kwargs):
        base(self, *args, **{**kwargs, "disable": True})
    std.tqdm.__init__ = quiet
    try:
        yield
    finally:
        std.tqdm.__init__ = own


@contextlib.contextmanager
def bootstrap_in_process():
    """The harness's bootstrap of standard errors in this process (its DISABLE_MULTIPROC), unless the user set it:
    its pool is fork()ed from a process whose PyTorch (or caller's) threads may hold a lock at that moment, and
    then hangs in "bootstrapping for stddev" (seen in the tests); both ways draw the same samples (chunk i seeded
    with i), and the default 1,000 are one chunk, which the pool gives to one worker anyway."""
    given = "DISABLE_MULTIPROC" in os.environ
    os.environ.setdefault("DISABLE_MULTIPROC", "1")
    try:
        yield
    finally:
        if not given:
            del os.environ["DISABLE_MULTIPROC"]


def refuse_generation(names: list[str]) -> None:
    """One line refusing the tasks `names`, which ask for generation, if there are any."""
    if names:
        raise CtxlmError(f"--tasks: {', '.join(names)} ask(s) for free generation (generate_until), which the ctxlm "
                         "model does not do; choose loglikelihood or multiple-choice tasks")


def load_tasks(manager, tasks: list[str]) -> dict:
    """`manager.load(tasks)`; a task the harness cannot build (its YAML's `!function` not found, its data not
    read, a template failing on the first document) is one line naming its YAML file and the cause."""
    try:
        return manager.load(tasks)
    except Exception as exc:      # only lm-eval's, datasets' and the task's own code run here, never ctxlm's
        which = "it" if len(tasks) == 1 else "one of them"
        raise CtxlmError(f"--tasks {','.join(tasks)}{task_files(manager, tasks)}: the harness cannot load {which} "
                         f"({causes(exc)}); fix the task file or its data (docs/harness.md)") from None


def task_files(manager, tasks: list[str]) -> str:
    """" (FILE, ...)": the YAML files of the tasks (not of tags, which have none)."""
    files = [str(entry.yaml_path) for entry in map(manager.task_index.get, tasks) if getattr(entry, "yaml_path", None)]
    return f" ({', '.join(files)})" if files else ""


def through_ctxlm(frames) -> bool:
    """Whether a traceback passes through ctxlm's own code (the model the harness calls): an error there is ctxlm's,
    not the task's, and keeps its traceback."""
    package = Path(__file__).resolve().parents[1]
    while frames is not None:
        if package in Path(frames.tb_frame.f_code.co_filename).resolve().parents:
            return True
        frames = frames.tb_next
    return False


def causes(exc: BaseException) -> str:
    """An exception and those it was raised from, "Type: message; ...", on one line."""
    found = []
    while exc is not None:
        frames = exc.__traceback__
        while frames is not None and frames.tb_next is not None:
            frames = frames.tb_next
        where = f"(raised in {frames.tb_frame.f_code.co_name})" if frames is not None else "(no message)"
        found.append(f"{type(exc).__name__}: {' '.join(str(exc).split()) or where}")
        exc = exc.__cause__ or exc.__context__
    return "; ".join(found)


@contextlib.contextmanager
def logs_held(*names: str):
    """What these loggers (and those under them) log while the block runs, held back and logged when it ends without
    an error: a task refused or failing to load is then one line, not the harness's warnings and then the line."""
    held: list[logging.LogRecord] = []
    hold = logging.Handler()
    hold.emit = held.append
    saved = {name: (logging.getLogger(name).handlers, logging.getLogger(name).propagate) for name in names}
    for name in names:
        logging.getLogger(name).handlers, logging.getLogger(name).propagate = [hold], False
    try:
        yield
    finally:
        for name, (handlers, propagate) in saved.items():
            logging.getLogger(name).handlers, logging.getLogger(name).propagate = handlers, propagate
    for record in held:
        logging.getLogger(record.name).handle(record)


def evaluate(run: str | Path | Run, tasks: list[str], include_path: str | None = None, limit: int | None = None,
             num_fewshot: int | None = None, bootstrap_iters: int = 1000, harness_tasks: bool = True, **model_args) -> dict:
    """The harness's results (its `evaluate`) of the run on `tasks`, found among the harness's own (unless not
    `harness_tasks`: indexing its 14,000 takes a while) and those in `include_path`. Generation tasks are refused
    before anything is scored."""
    import datasets
    import jinja2
    from lm_eval.evaluator import evaluate as harness_evaluate
    from lm_eval.tasks import TaskManager

    logging.getLogger("lm_eval").setLevel(logging.WARNING)
    datasets.disable_progress_bars()                      # one bar per split read: noise around a one-line error
    if include_path is not None and not Path(include_path).is_dir():
        raise CtxlmError(f"--include-path {include_path}: no such folder; give the folder holding the task's YAML file")
    if include_path is not None:
        check_task_files(include_path)
    manager = TaskManager(include_path=include_path, include_defaults=harness_tasks)
    places = (["lm-eval's own"] if harness_tasks else []) + ([include_path] if include_path else [])
    for name in tasks:
        if name not in manager.all_tasks:
            raise CtxlmError(f"--tasks {name}: no such task, group or tag in {' or '.join(places)}; check the name "
                             "(`lm-eval ls tasks` lists the harness's) or give --include-path for a local task")
    model = CtxlmLM(run, **model_args)
    refuse_generation([name for name in tasks                                  # a task's own, before the harness builds it
                       if (getattr(manager.task_index.get(name), "cfg", None) or {}).get("output_type") == "generate_until"])
    with logs_held("lm_eval", "datasets"):                # its warnings only if the tasks are loaded and not refused
        loaded = load_tasks(manager, tasks)
        refuse_generation([name for name, task in loaded["tasks"].items() if task.get_config("output_type") == "generate_until"])
    tokenised = [name for name, task in loaded["tasks"].items() if reads_tokenised_lambada(task.get_config)]
    if tokenised and not model.pretokenized and model.run.recipe is not None and not model.run.recipe.whitespace:
        advice = ("add --pretokenized (pretokenized=True)" if len(tokenised) == len(loaded["tasks"]) else "run them on "
                  "their own with --pretokenized (pretokenized=True), which reads every task's text split on whitespace")
        warn(f"note: {', '.join(tokenised)}: LAMBADA's passages, tokenised already; the run's text recipe reads them "
             f"again, so the figures differ from `ctxlm lambada`'s: {advice} to read them as it does")
    for task in loaded["tasks"].values():     # as the harness's simple_evaluate sets them
        if num_fewshot is not None and task.get_config("num_fewshot") != 0:
            task.set_config(key="num_fewshot", value=num_fewshot)
        elif task.get_config("num_fewshot") is None:
            task.set_config(key="num_fewshot", value=0)
        task.set_fewshot_seed(seed=1234)
    with contextlib.redirect_stdout(sys.stderr), bars_off_in_logs(), bootstrap_in_process(), logs_held("lm_eval"):   # progress to stderr
        try:
            results = harness_evaluate(lm=model, task_dict=loaded, limit=limit, bootstrap_iters=bootstrap_iters,
                                       log_samples=False, verbosity="WARNING")
        except CtxlmError:
            raise
        except Exception as exc:
            if isinstance(exc, ValueError) and "larger than population" in str(exc):   # its sampler's random.sample
                raise CtxlmError(f"--num-fewshot {num_fewshot}: more few-shot examples than the task has documents to "
                                 "draw them from; give fewer") from None
            if isinstance(exc, jinja2.TemplateError) or not through_ctxlm(exc.__traceback__.tb_next):
                raise CtxlmError(f"--tasks {','.join(tasks)}{task_files(manager, tasks)}: the task fails on a document "
                                 f"({causes(exc)}); fix the task file (its doc_to_text, doc_to_target, doc_to_choice...)") from None
            raise
    return json.loads(json.dumps({key: results[key] for key in ("results", "groups", "n-samples", "versions", "higher_is_better")
                                  if key in results}, default=str))
