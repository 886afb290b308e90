"""What the commands share: the parser class, options declared once, and the checks of a loaded run."""
from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

from ..checks import RULES, rule_option
from ..errors import CtxlmError

SPLITS = ["train", "valid", "test"]


class Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, non-zero exit
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")

    def parse_known_args(self, args=None, namespace=None):
        parsed, extra = super().parse_known_args(args, namespace)
        if not hasattr(parsed, "command_prog"):     # the innermost (sub)command's parser sets it first
            parsed.command_prog = self.prog
            parsed.command_file_option = next((o for o in ("--input", "--file") if o in self._option_string_actions), None)
        return parsed, extra

    def parse_args(self, args=None, namespace=None):
        """As argparse's, with an unknown option named by the subcommand that was given it ("ctxlm prepare text"),
        and a file given where the command reads one with an option (`ctxlm score RUN text.txt`) named with it."""
        parsed, extra = self.parse_known_args(args, namespace)
        if extra:
            prog, option = parsed.command_prog, parsed.command_file_option
            hint = f"; a file to read is given as {option} {extra[0]}" if option and len(extra) == 1 and Path(extra[0]).is_file() else ""
            self.exit(2, f"{prog}: error: unrecognized arguments: {' '.join(extra)}{hint} (see {prog} --help)\n")
        return parsed

    def _get_values(self, action, arg_strings):
        # Python < 3.12 drops the value of `--top=--` and gives [] without checking it; check "--" like any value
        if action.nargs is None and arg_strings == ["--"]:
            return self._get_value(action, "--")
        return super()._get_values(action, arg_strings)


# ---------------------------------------------------------------- options
def data_dir_option(p, use: str = "") -> None:
    p.add_argument("--data-dir", help="folder with the corpora (default: $CTXLM_DATA_DIR), searched before the user "
                   f"cache ($XDG_CACHE_HOME/ctxlm/data, else ~/.cache/ctxlm/data){use}")


def set_option(p, help: str | None = None) -> None:
    p.add_argument("--set", action="append", metavar="SECTION.KEY=VALUE", help=help)


def match_params_option(p, scope: str = "") -> None:
    p.add_argument("--match-params", metavar="MODEL:WxK", help=f"{scope}pick emb/hidden sizes so the model has at most the "
                   "parameters of MODEL with embedding W and hidden K and a softmax output, e.g. lstm:300x300 "
                   "(Daniluk's budgets); the model is counted with its own [output] layer")


def run_argument(p, help: str = "run directory") -> None:
    p.add_argument("run", help=help)


class _ChosenSplit(argparse.Action):
    """Stores --split and notes that it was given, so that a default split the dataset lacks is said to be the default."""

    def __call__(self, parser, namespace, values, option_string=None):
        namespace.split, namespace.split_chosen = values, True


def split_option(p, default: str, help: str) -> None:
    p.add_argument("--split", default=default, choices=SPLITS, action=_ChosenSplit, help=f"{help} (default %(default)s)")
    p.set_defaults(split_chosen=False)


def out_folder_option(p, default: str, holding: str = "") -> None:
    """--out for a command that writes several files into a folder (made if need be)."""
    p.add_argument("--out", metavar="FOLDER", default=default, help=f"output folder{holding}, made if need be (default ./{default})")


def out_file_option(p, default: str, what: str) -> None:
    p.add_argument("--out", metavar="FILE", default=default, help=f"{what} (default ./{default})")


def json_option(p, help: str) -> None:
    p.add_argument("--json", action="store_true", help=help)


def pretokenized_option(p, what: str = "the text") -> None:
    p.add_argument("--pretokenized", action="store_true", help=f"{what} is tokenised already: split it on whitespace "
                   "instead of applying the run's text recipe (its corpus's tokeniser and normalisation, docs/prepare.md)")


def names_option(p, help: str) -> None:
    p.add_argument("--names", metavar="FILE|capitalised", help=help + "; or `capitalised`: the capitalised words of the "
                   "522 Holmes books, for a Holmes run (all of them, whatever part it trained on; about a minute; the rule of "
                   "`ctxlm names` and of model.names = \"capitalised\")")


def name_words(names: str, run, data_dir=None) -> list[str]:
    """The words `--names` gives: a file's, or the capitalised words of the run's Holmes books."""
    from ..data.vocab import read_name_words
    from ..io import warn
    from ..training.names_list import CAPITALISED, capitalised_names

    if names == CAPITALISED:
        return capitalised_names(run.config, data_dir, f"--names {CAPITALISED}", log=warn)
    return read_name_words(names)


def names_in_vocabulary(args, run, words: list[str] | None = None):
    """--names (or its `words`, read already) as a mask over the run's vocabulary (data/vocab.py); one line when
    none of its words is in it."""
    from ..data.vocab import names_mask

    words = name_words(args.names, run, args.data_dir) if words is None else words
    mask = names_mask(words, run.vocab)
    if not mask.any():
        raise CtxlmError(f"--names {args.names}: none of its {len(words):,} words is in the vocabulary of {run.path} (cased "
                         "names against lower-cased text?); give names the run knows, e.g. from `ctxlm names`")
    return mask


def cache_options(p) -> None:
    p.add_argument("--cache", action="store_true", help="add the neural cache (Grave et al. 2017) with the settings "
                   "`ctxlm tune-cache` recorded in the run; --cache-window/--cache-theta/--cache-lambda override them "
                   "(a record of a tuning that helped nothing is refused unless one of them is given)")
    p.add_argument("--cache-window", type=rule_option("cache.window"), help="cache size: (hidden state, next word) pairs "
                   "kept (default: the run's tuned value, else 2000)")
    p.add_argument("--cache-theta", type=rule_option("cache.theta"), help="flatness θ of the cache distribution (default: "
                   "the run's tuned value, else 0.3)")
    p.add_argument("--cache-lambda", type=rule_option("cache.lambda"), help="cache interpolation weight λ in [0, 1] "
                   "(default: the run's tuned value, else 0.1)")


# ---------------------------------------------------------------- what handlers share
def config_from_args(args):
    """The config of --config with --set on top, validated; sized by --match-params if given."""
    from ..config import Config, apply_overrides, load_toml, validate

    config = load_toml(args.config) if args.config else Config()
    apply_overrides(config, args.set or [])
    validate(config)
    if getattr(args, "match_params", None):
        from ..data.load import prepare_data
        from ..models.budget import match_params

        vocab_size = getattr(args, "vocab_size", None) or len(prepare_data(config, args.data_dir).vocab)
        match_params(config.model, vocab_size, args.match_params, config.output)
        print(f"--match-params {args.match_params}: emb_size = {config.model.emb_size}, hidden_size = {config.model.hidden_size}")
    return config


def output_dir(args) -> Path:
    """--out, created if need be."""
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    return out


def split_data(run, args, *splits):
    """The run's dataset (prepared with its vocabulary; a split's file is read when its ids are asked for), after
    checking that it has each of `splits` (valid and test where none are named); a file or folder the run's config
    names for them that is gone is one line naming the key to edit if it moved."""
    from ..data.load import prepare_data

    check_split_files(run, *(splits or ("valid", "test")))
    data = prepare_data(run.config, args.data_dir, run.vocab)
    for split in splits:
        check_split(run, args, list(data.ids), split)
    return data


def check_split_files(run, *splits) -> None:
    """The file the run's config names for each of `splits` (data.<split>; a prepared corpus' folder) is there,
    else one line naming the key to edit in the run's config.toml if it moved."""
    d = run.config.data
    named = {"files": {f"data.{s}": getattr(d, s) for s in splits}, "prepared": {"data.prepared": d.prepared}}
    for key, path in named.get(d.dataset, {}).items():
        if path and not Path(path).expanduser().exists():
            raise CtxlmError(f"{path}: not found ({key} in {run.path / 'config.toml'}): put it back, or edit {key} "
                             "there if it moved")


def split_ids(run, args):
    """The ids of --split."""
    return split_data(run, args, args.split).ids[args.split]


def check_split(run, args, splits: list[str], split: str) -> None:
    """`split` is one of the run's dataset's `splits`; a default --split it lacks is named as the default."""
    if split in splits:
        return
    has = f"{run.path}'s dataset {run.config.data.dataset!r} has splits {', '.join(splits)}"
    if split == getattr(args, "split", None) and getattr(args, "split_chosen", None) is False:
        command = " ".join(filter(None, (args.command, getattr(args, "analysis", None))))
        other = next(s for s in ("valid", "test", "train") if s in splits)
        raise CtxlmError(f"{command} reads the {split} split by default; {has}: give --split {other}")
    raise CtxlmError(f"--split {split}: {has}")


def left_to_right(run, what: str) -> None:
    """Perplexity needs a model of each word given the words before it; the bidirectional RM is not one."""
    if not run.model.left_to_right:
        raise CtxlmError(f"{what}: model {run.config.model.name!r} of {run.path} predicts each word from the words before "
                         "and after it, so it has no perplexity; score whole sentences with `ctxlm complete` "
                         "(results.json holds the validation pseudo-perplexity that chose its epoch)")


def neural_only(run, what: str, because: str = "the neural cache reads a neural model's hidden states") -> None:
    if run.model.count_based:
        raise CtxlmError(f"{what}: {because}; {run.path} is an n-gram run")


def ppl_text(ppl: float) -> str:
    """A perplexity as tables print it: two decimals, or three digits and an exponent from 10⁹ (columns stay apart)."""
    return f"{ppl:.2f}" if ppl < 1e9 or not math.isfinite(ppl) else f"{ppl:.3g}"


def print_perplexities(results: dict) -> None:
    """The table of `ctxlm eval`: each split's (or file's) tokens, mean NLL and perplexity."""
    print(f"{'split':<12}{'tokens':>10}{'nll/token':>11}{'perplexity':>12}")
    for name, r in results.items():
        print(f"{name:<12}{r['tokens']:>10,}{r['nll'] / r['tokens']:>11.4f}{ppl_text(r['ppl']):>12}")
        if not math.isfinite(r["ppl"]):
            print(f"  ({name}: some target has probability 0, e.g. a word outside a model without <unk>)")
        if "names" in r:
            n = r["names"]
            if not n["tokens"]:
                print(f"{'  names':<12}{0:>10}   (no target of {name} is in the names list)")
                continue
            print(f"{'  names':<12}{n['tokens']:>10,}{n['nll'] / n['tokens']:>11.4f}{n['ppl']:>12.2f}")


SWITCHED = {"cache": ("cache_window", "cache_theta", "cache_lambda"),
            "dynamic": ("dynamic_rule", "dynamic_lr", "dynamic_decay", "dynamic_segment")}


def check_switched(args) -> None:
    """--cache-window and the like only set what --cache (--dynamic) turns on: alone they are refused, not ignored."""
    for switch, options in SWITCHED.items():
        given = [name for name in options if getattr(args, name, None) is not None]
        if given and not getattr(args, switch, False):
            raise CtxlmError(f"--{given[0].replace('_', '-')} goes with --{switch}: add --{switch} (or drop the option)")


def note_if_tuned_on_other_weights(record: Path, run, tuner: str) -> None:
    """A note on stderr when `record` (cache.json, dynamic.json) names other weights than the run's: it was
    chosen before the run trained on, so its setting may no longer be the best."""
    try:
        tuned_on = json.loads(record.read_text(encoding="utf-8")).get("weights")
    except (OSError, ValueError, AttributeError):
        return                              # unreadable records are the readers' errors
    if tuned_on and tuned_on != run.weights_sha256:
        print(f"note: {record} was tuned on other weights than the run's current ones (it trained on since); "
              f"run `ctxlm {tuner} {run.path}` again to choose on these", file=sys.stderr)


def replace_tuning_record(record: Path, result: dict) -> str | None:
    """Write a `tune-cache` / `tune-dynamic` record atomically, keeping the records it replaces, oldest first, under
    "earlier" (nothing tuned is lost). Returns a note when the one it replaces chose a setting with a lower
    perplexity on the same weights and text (a grid that held it), else None."""
    from ..io import atomic_write_text
    from ..jsonio import json_text

    try:
        old = json.loads(record.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):
        old = None                      # none, or unreadable (its readers refuse it): nothing to keep
    earlier = []
    if isinstance(old, dict):
        kept = old.pop("earlier", None)
        earlier = [*(kept if isinstance(kept, list) else []), old]
    atomic_write_text(record, json_text({**result, "earlier": earlier} if earlier else result, indent=1) + "\n")
    if not isinstance(old, dict):
        return None
    old_best, best = old.get("best"), result["best"]
    same_text = (all(old.get(key) == result.get(key) for key in ("weights", "split", "tokens"))
                 and isinstance(old.get("model_ppl"), float) and math.isclose(old["model_ppl"], result["model_ppl"], rel_tol=1e-6))
    if not (same_text and isinstance(old_best, dict) and isinstance(old_best.get("ppl"), float)):
        return None
    if best is not None and best["ppl"] <= old_best["ppl"]:
        return None
    setting = ", ".join(f"{key} {value}" for key, value in old_best.items() if key != "ppl")
    return (f"note: the record this replaces chose {setting} on the same weights and {result['split']} text, with perplexity "
            f"{old_best['ppl']:.2f}, lower than this grid's best; it is kept under \"earlier\" in {record}: tune "
            f"with a grid that holds it, or give those numbers")


def note_read_as_stream(run, what: str, compare: str) -> None:
    """A note on stderr where `what` reads a sentence-trained run's text as one stream (the cache and dynamic
    evaluation span sentences), while plain `ctxlm eval` reads each sentence alone: `compare` says what to set
    its figures beside."""
    if run.config.data.batching == "sentence":
        print(f"note: {what} reads the text as one stream, the state carried across sentences; plain `ctxlm eval` reads "
              f"each sentence alone, so {compare}", file=sys.stderr)


def with_cache(run, args):
    """(the run's model, None), or with --cache (the model inside the neural cache, its settings): those
    `ctxlm tune-cache` recorded in the run, with any --cache-* option on top."""
    from ..models.cache import CacheSettings, NeuralCache

    if not args.cache:
        return run.model, None
    neural_only(run, "--cache")
    options = (args.cache_window, args.cache_theta, args.cache_lambda)
    given = None not in options
    # all three given: the record is not read; some given: a record without a choice leaves the rest to the defaults
    settings = None if given else CacheSettings.recorded(run.path, choice_needed=all(o is None for o in options))
    record = CacheSettings.record_path(run.path)
    if settings is not None:
        note_if_tuned_on_other_weights(record, run, "tune-cache")
    else:
        settings = CacheSettings()
        if not given:
            print(f"note: {record} {'holds no choice' if record.is_file() else 'not found'} (run `ctxlm tune-cache "
                  f"{run.path}` to choose on validation); defaults fill the settings not given", file=sys.stderr)
    for name, value in (("window", args.cache_window), ("theta", args.cache_theta), ("lam", args.cache_lambda)):
        if value is not None:
            setattr(settings, name, value)
    try:
        return NeuralCache(run.model, settings), settings
    except ValueError as exc:
        raise CtxlmError(f"--cache: {exc}") from None


def comma_values(option_name: str, text: str, kind) -> tuple:
    """A grid option's comma-separated values, e.g. --thetas 0.1,0.2, each once (0.1,0.10 is one setting, not two
    evaluated twice): `kind` (str, int or float), or the name of a rule of `checks.RULES` that each value must
    follow; a bad one is a one-line error."""
    rule = RULES.get(kind) if isinstance(kind, str) else None
    kind = rule.kind if rule else kind
    numbers, example = ("whole numbers", "100,500") if kind is int else ("finite numbers", "0.1,0.2")
    refusal = CtxlmError(f"{option_name} {text!r}: expected comma-separated {numbers}, e.g. {option_name} {example}")
    try:
        values = tuple(kind(v) for v in text.split(","))
    except ValueError:
        raise refusal from None
    if kind is float and not all(math.isfinite(v) for v in values):
        raise refusal
    for value in values if rule else ():
        if not rule.allowed.admits(value):
            raise CtxlmError(f"{option_name} {text!r}: each value must be {rule.describe()}, got {value!r}")
    return tuple(dict.fromkeys(values))


def run_labels(run_dirs: list[str]) -> list[str]:
    """A label per run: its folder's name, or the path given where two folders share a name; a run given twice
    is an error."""
    labels = [Path(run_dir).resolve().name for run_dir in run_dirs]
    if len(set(labels)) < len(labels):
        labels = [str(run_dir) for run_dir in run_dirs]
    seen: dict[Path, str] = {}
    for run_dir in run_dirs:
        if Path(run_dir).resolve() in seen:
            raise CtxlmError(f"{run_dir}: this run directory is given twice (also as {seen[Path(run_dir).resolve()]}); "
                             "give each run once")
        seen[Path(run_dir).resolve()] = str(run_dir)
    return labels
