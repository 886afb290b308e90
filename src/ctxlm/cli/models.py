"""Models and their runs as objects: list the `models`, `info` on a run or preset, `export-arpa`, `import-arpa`,
`export-onnx`."""
from __future__ import annotations

import shlex
from pathlib import Path

from ..checks import at_least, option
from ..errors import CtxlmError
from .common import config_from_args, data_dir_option, match_params_option, run_argument, set_option


def add_info(sub) -> None:
    p = sub.add_parser("info", help="configuration, vocabulary size and parameter counts of a run or preset",
                       description="The whole configuration (every default filled in), the vocabulary size and the "
                                   "parameter counts of a run directory or a preset; a preset's combination of "
                                   "settings is checked as `ctxlm train` checks it, before any data is read.")
    p.add_argument("target", help="run directory or TOML preset")
    set_option(p, "for a preset only (refused for a run): override one setting, e.g. --set model.hidden_size=650")
    p.add_argument("--vocab-size", type=option(int, at_least(2)), help="for a preset only: use this vocabulary size "
                   "instead of reading the data")
    match_params_option(p, "for a preset only: ")
    data_dir_option(p)
    p.set_defaults(func=cmd_info)


def cmd_info(args) -> int:
    import torch

    from ..models import build_model

    target = Path(args.target)
    if target.is_dir():
        from ..run import load

        given = [name for name, value in (("--set", args.set), ("--vocab-size", args.vocab_size),
                                          ("--match-params", args.match_params)) if value]
        if given:
            raise CtxlmError(f"{', '.join(given)}: for a preset only; {target} is a trained run, whose configuration "
                             "and sizes are its own: give its preset to see the sizes another setting gives")

        run = load(target)
        config, vocab_size, model = run.config, len(run.vocab), run.model
    else:
        from ..training.preflight import check_config

        args.config = str(target)
        config = config_from_args(args)
        check_config(config)                # what `ctxlm train` refuses, info refuses
        if args.vocab_size:
            vocab_size = args.vocab_size
        else:
            from ..data.load import prepare_data

            vocab_size = len(prepare_data(config, args.data_dir).vocab)
        with torch.device("meta"):          # sizes only: nothing is allocated
            model = build_model(config.model, vocab_size, config.output)
    counts = model.parameter_counts()
    print(config.to_toml())
    print(f"vocabulary size          {vocab_size:,}")
    if model.count_based and not target.is_dir():
        print("parameters (θ_W+M)        known only after counting: the n-grams stored; `ctxlm train` counts them, "
              "then `ctxlm info RUN_DIR` gives the number")
        return 0
    print(f"parameters (θ_W+M)        {counts['total']:,}  ({counts['total'] / 1e6:.2f}M)")
    print(f"without word embeddings (θ_M) {counts['without_embeddings']:,}  ({counts['without_embeddings'] / 1e6:.2f}M)")
    return 0


def add_export_arpa(sub) -> None:
    p = sub.add_parser("export-arpa", help="write an n-gram run as an ARPA file (KenLM, SRILM can read it)",
                       description="Write an n-gram run as an ARPA file (KenLM, SRILM can read it).")
    run_argument(p, "run directory of a kneser-ney model")
    p.add_argument("output", help="ARPA file to write (a name ending in .gz: gzip-compressed)")
    p.set_defaults(func=cmd_export_arpa)


def cmd_export_arpa(args) -> int:
    from ..io import Progress
    from ..models.arpa import write_arpa
    from ..run import load

    run = load(args.run, start=False)
    if not run.model.count_based:
        raise CtxlmError(f"{args.run}: ARPA export needs an n-gram run (model.name = kneser-ney), not {run.config.model.name!r}")
    with Progress(sum(table.keys.size for table in run.model.tables), "export-arpa", unit="n-grams") as bar:
        write_arpa(run.model, run.vocab, args.output, bar.update)
    print(f"wrote {args.output}")
    return 0


def add_start_state(sub) -> None:
    from ..evaluation.start import TOKENS

    p = sub.add_parser("start-state", help="estimate the state texts read alone start from and store it in the run",
                       description="Read the first --tokens training tokens sentence by sentence and store the mean state "
                                   "carried into each <eos> (RUN/start_state.safetensors): every text read alone (score, "
                                   "rescore, lambada, complete, generate, attention, explore's separate lines, the "
                                   "harness, the Python API) starts from it. Training "
                                   "writes it; a run without one gets it on load, each time (docs/python.md).")
    run_argument(p)
    p.add_argument("--tokens", type=option(int, at_least(2)), default=TOKENS, help=f"training tokens to read (default {TOKENS:,})")
    data_dir_option(p)
    p.set_defaults(func=cmd_start_state)


def cmd_start_state(args) -> int:
    from ..evaluation.start import FILE, has_start, start_for
    from ..run import load

    run = load(args.run, data_dir=args.data_dir, start=False)
    if not has_start(run.config, run.model):
        print(f"{args.run}: {run.config.model.name} (data.batching = {run.config.data.batching}) reads each text alone from "
              "the state it was trained from (a count-based model or a sentence-regime run): nothing to store")
        return 0
    if not run.weights_sha256:
        raise CtxlmError(f"{args.run}: its weights carry no digest (saved before ctxlm recorded one), so a stored start "
                         "state could not be matched to them; it is estimated on each load instead (give --data-dir)")
    start_for(run.path, run.config, run.vocab, run.model, run.weights_sha256, args.data_dir, args.tokens, write=True)
    print(f"wrote {run.path / FILE}: the mean state at the sentence ends of the first {args.tokens:,} training tokens "
          "(all of them where there are fewer)")
    return 0


def add_export_onnx(sub) -> None:
    p = sub.add_parser("export-onnx", help="write a neural run as an ONNX graph whose state is an input and an output "
                       "(stream it with onnxruntime, docs/onnx.md)",
                       description="Write the run's model as an ONNX graph: token ids and the state in, log-probabilities "
                                   "and the next state out, so onnxruntime streams a text in chunks as `ctxlm eval` reads "
                                   "it; the export is checked against PyTorch before it is kept. Needs the [onnx] extra "
                                   "(pip install 'ctxlm[onnx]'). Every neural family exports but the attentive LMs "
                                   "(attentive-lm, attentive-context) and the bidirectional RM; Kneser-Ney is refused "
                                   "too (`ctxlm export-arpa` writes it for KenLM). Details: docs/onnx.md.")
    run_argument(p, "run directory of a neural model")
    p.add_argument("output", help="ONNX file to write")
    data_dir_option(p, "; read only for a run without a stored start state (its training text, docs/python.md)")
    p.set_defaults(func=cmd_export_onnx)


def cmd_export_onnx(args) -> int:
    from ..evaluation.start import has_start, start_for, where_training_text
    from ..export import export_onnx
    from ..export.graph import refusal
    from ..run import load

    run = load(args.run, start=False)        # OUTPUT was checked before (outputs.check_outputs)
    reason = refusal(type(run.model))
    if reason:
        raise CtxlmError(f"model {run.config.model.name!r} cannot be exported to ONNX: {reason}")
    run.model.start = start_for(run.path, run.config, run.vocab, run.model, run.weights_sha256, args.data_dir)
    written = export_onnx(run.model, run.vocab, run.config.model.name, args.output,
                          run.recipe.recipe() if run.recipe is not None else None)
    chunks = "chunks of any length" if written["chunk"] is None else f"{written['chunk']} token per call"
    start = ", with the run's start state" if written["start_state"] else ""
    if not written["start_state"] and has_start(run.config, run.model):
        start = (f", WITHOUT the run's start state (its training text was not found: {where_training_text(run.config)}), "
                 "so texts read alone start from zeros")
    print(f"wrote {args.output}: {written['family']}, {written['bytes'] / 1e6:.1f} MB, {len(written['state'])} state "
          f"tensors{start}, {chunks}; onnxruntime's log-probabilities within {written['max_difference']:.1e} of PyTorch's")
    if run.recipe is not None and not run.recipe.whitespace:
        print(f"its words are tokenised by the corpus's recipe ({run.recipe.tokenize}, metadata ctxlm.text): give the graph "
              "text read as `Run.words` reads it (docs/onnx.md)")
    return 0


def add_import_arpa(sub) -> None:
    p = sub.add_parser("import-arpa", help="make a run directory from an ARPA file, to eval and score it like any model",
                       description="Make a run directory from an ARPA file, to eval and score it like any model.")
    p.add_argument("arpa", help="ARPA file (gzip-compressed is fine)")
    p.add_argument("run_dir", help="new run directory")
    set_option(p, "the corpus `ctxlm eval RUN_DIR` scores, e.g. --set data.dataset=wikitext-2 (default ptb; "
               "any text: `ctxlm eval RUN_DIR --file TEXT`)")
    p.set_defaults(func=cmd_import_arpa)


def cmd_import_arpa(args) -> int:
    from ..training.count import import_arpa

    model, vocab, dataset = import_arpa(args.arpa, args.run_dir, args.set or [])
    print(f"imported a {model.order}-gram model with {len(vocab):,} words into {Path(args.run_dir)}; "
          f"`ctxlm eval {shlex.quote(str(args.run_dir))}` scores {dataset}'s valid and test text, `--file TEXT` any other")
    return 0


def add_models(sub) -> None:
    p = sub.add_parser("models", help="list the registered models, or one model's options with their defaults",
                       description="List the registered models, or one model's options with their defaults.")
    p.add_argument("name", nargs="?", help="a model name (e.g. attention): print its [model] keys, defaults and meaning")
    p.set_defaults(func=cmd_models)


def cmd_models(args) -> int:
    from ..config import ModelConfig, _toml_value, described, family_options, shared_fields
    from ..models import MODELS
    from ..models.base import softmax_ties

    if not args.name:
        for name in sorted(MODELS):
            print(f"{name:<20}{_summary(name)}")
        print("\n`ctxlm models NAME` lists a model's [model] keys with their defaults.")
        return 0
    options = family_options(args.name)
    print(f"{args.name}: {_summary(args.name)}\n")
    print("[model]  # keys every model shares")
    for key, default, comment in described(ModelConfig, shared_fields(ModelConfig)):
        if key in MODELS[args.name].unread_keys:
            comment = f"not read by {args.name}: leave it out"
        elif key == "tie_weights" and softmax_ties(args.name, tie_weights=False):
            default, comment = True, (f"{args.name} always ties its softmax to the input embeddings (set it true for "
                                      "output.layer = \"nce\"; class and adaptive are refused)")
        elif key == "tie_weights" and not softmax_ties(args.name):
            comment = f"{args.name}'s softmax is untied: true only with output.layer = \"nce\""
        print(f"{key} = {_toml_value(args.name if key == 'name' else default)}".ljust(28) + f"# {comment}")
    rows = described(options)
    print(f"# {args.name}'s own options" if rows else f"# {args.name} has no options of its own")
    for key, default, comment in rows:
        print(f"{key} = {_toml_value(default)}".ljust(28) + f"# {comment}")
    return 0


def _summary(name: str) -> str:
    """One line on a registered model: its own where names share a class, else the class's first docstring line."""
    from ..models import MODELS

    cls = MODELS[name]
    return cls.summaries.get(name) or (cls.__doc__ or "").strip().splitlines()[0]
