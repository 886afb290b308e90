"""The training loop: SPEC §2 recipes (optimizer, schedule, clipping, early stopping with rollback).

A run directory holds config.toml, vocab.txt, model.safetensors (the best weights so far), trainer_state.pt
(everything needed to continue bit-identically: weights, optimizer, rates, RNG states, data position, carried
recurrent state, metric history), metrics.jsonl and results.json (gone while a resumed run trains on). State is
saved atomically after every epoch, every `checkpoint_every` batches and on Ctrl-C/SIGTERM.
"""
from __future__ import annotations

import math
import signal
import time
from pathlib import Path

import torch

from ..allocator import keep_freed_memory
from ..checks import safe_exp
from ..config import Config
from ..data.batching import IGNORE, ReadStreamBatches, SentenceBatches, StreamBatches, WindowBatches
from ..data.load import prepare_data, sentences_of
from ..data.rawbooks import PREPARE, untokenised_note
from ..errors import CtxlmError, Terminated, said
from ..evaluation.perplexity import evaluate_split
from ..evaluation.start import TOKENS as START_TOKENS
from ..evaluation.start import store_start
from ..io import Progress
from ..models.base import build_model, detach_state, map_state
from . import checkpoint, divergence
from .distributed import LossStep, World, main_process, merge_state, restore_rng, rng_states, split_state, wrap
from .names_list import corpus_names
from .optim import build_optimizer, load_optimizer_state, next_lr
from .precision import emulated_bf16
from .preflight import check_config, pick_device
from .rundir import RunDir, RunLock, check_same_data, content, data_fingerprint, git_commit, identity, resume_state, resumed_config
from .step import capped_threads, compiled, loss_denominator, train_step  # noqa: F401 (also imported from here)


class Trainer:
    """Train one run directory; `fit()` returns the final results (best model on valid and test)."""

    def __init__(self, config: Config, run_dir: str | Path, data_dir=None, resume: bool = False, log=print,
                 allow_changed_data: bool = False):
        self.run_dir, self.files, self.log = Path(run_dir), RunDir(run_dir), log
        if resume:
            config = resumed_config(self.files, config)
        check_config(config, resumed=resume)        # before any folder is made
        self.lock = RunLock(self.run_dir).acquire()       # one writer: held until fit() ends
        try:
            self._setup(config, data_dir, resume, allow_changed_data)
        except BaseException:
            self.lock.release(undo=True)
            raise

    def _setup(self, config: Config, data_dir, resume: bool, allow_changed_data: bool) -> None:
        existing = content(self.run_dir, resume) if main_process() else []    # rank 0 owns the folder (clears what kills left)
        if resume:      # no state at all (killed before its first checkpoint): start again, with its config
            self.resume_state = resume_state(self.files, self.log)
            trained = self.resume_state["epoch"] - 1 if self.resume_state else 0
            if config.train.epochs < trained:
                raise CtxlmError(f"train.epochs = {config.train.epochs}: {self.run_dir} has trained {trained} epochs already, "
                                 f"which cannot be undone; set train.epochs = {trained} or more, or train a new --run-dir")
        else:
            if existing:
                raise CtxlmError(f"run directory {self.run_dir} is not empty; continue it with --resume or pick another --run-dir")
            self.resume_state = None
        self.config = config
        self.device = pick_device(config.train.device)
        self.world = World.from_env(self.device.type)      # torchrun: one process per device
        if self.world.size > 1:
            if self.device.type == "cuda":
                self.device = torch.device("cuda", self.world.local_rank)
            if config.data.batching == "stream" and config.data.batch_size < self.world.size:
                raise CtxlmError(f"data.batch_size = {config.data.batch_size} is smaller than the {self.world.size} processes; "
                                 "each process needs at least one stream")
            if not self.world.main:
                self.log = lambda *args, **kwargs: None
        keep_freed_memory()                        # training's big tensors stay mapped between steps (allocator.py)
        if config.train.threads:
            torch.set_num_threads(capped_threads(config.train.threads))
        vocab = self.files.read_vocab() if resume and self.files.vocab.exists() else None
        recorded = (self.resume_state or {}).get("identity") or {}
        if vocab is not None and recorded.get("vocab") not in (None, vocab.fingerprint()):
            raise CtxlmError(f"{self.files.vocab}: changed since the trainer state was written, so the run's weights are "
                             "for another vocabulary; restore the run's own vocab.txt (--allow-changed-data is for a "
                             "changed corpus, never a changed vocabulary) or train a new --run-dir")
        self.data = prepare_data(config, data_dir, vocab)
        self.fingerprint = data_fingerprint(self.data)
        if self.resume_state is not None:
            check_same_data(self.resume_state.get("data"), self.fingerprint, self.run_dir, config, allow_changed_data)
        if not resume:
            corpus_names(config, self.run_dir, data_dir, self.log)      # model.names = "capitalised"
        note = untokenised_note([Path(config.data.train).expanduser()], "whitespace", 'data.dataset = "files"', PREPARE) \
            if not resume and config.data.dataset == "files" else ""        # raw prose read split on spaces
        if note:
            self.log(note)
        torch.manual_seed(config.train.seed)
        counts = self.data.counts("train")        # class bins, NCE noise
        self.model = build_model(config.model, len(self.data.vocab), config.output, counts).to(self.device)
        if not (resume and self.resume_state):   # e.g. the names mixture marks its names
            self.model.use_vocabulary(self.data.vocab)
        if not self.world.main:
            torch.manual_seed(config.train.seed + self.world.rank)   # its own dropout masks
        self.optimizer = build_optimizer(config.train.optimizer, self.model.parameters(), config.train.lr, config.train.weight_decay)
        self.stop_requested: str | None = None
        self.on_batch = None    # optional callback(trainer, epoch, batch_number), used by tests and tools
        self.identity = identity(config.model.name, self.data.vocab)

    # ---------------------------------------------------------------- state
    def _batches(self):
        d = self.config.data
        if d.batching == "stream" and self.data.streams:      # a prepared corpus: read from disk batch by batch
            train = self.data.streams["train"]
            return ReadStreamBatches(train.read, len(train), d.batch_size, d.bptt)
        train_ids = self.data.ids["train"]
        if d.batching == "sentence":
            return SentenceBatches(sentences_of(train_ids, self.data.vocab, self.config), d.batch_size,
                                   self.data.vocab.eos, d.max_sentence_len)
        if d.batching == "window":
            return WindowBatches(train_ids, self.model.context_size, d.batch_size, self.data.vocab.eos)
        return StreamBatches(train_ids, d.batch_size, d.bptt)

    def _snapshot(self, epoch, position, order, carry, progress) -> dict:
        """Everything to continue; with several processes the carried rows and RNG states of all of them."""
        carry = detach_state(carry) if self.config.data.batching == "stream" else None   # sentences start fresh
        if self.world.size > 1 and carry is not None:
            shards = self.world.gather(map_state(carry, torch.Tensor.cpu))
            carry = merge_state(shards, self.model.state_batch_dims(carry))
        state = {
            "format": 1, "identity": self.identity, "epoch": epoch, "position": position, "order": order,
            "model": checkpoint.unique_state_dict(self.model), "optimizer": self.optimizer.state_dict(),
            "carry": carry, "generator": self.generator.get_state(), "world_size": self.world.size,
            "data": self.fingerprint, **rng_states(self.world, self.device),
        }
        state.update(progress)
        return state

    def _save(self, *args) -> None:
        """Every process takes part in the snapshot; rank 0 writes it."""
        state = self._snapshot(*args)
        if self.world.main:
            checkpoint.save_state(self.files.state, state)

    def _restore(self, state: dict):
        if state.get("identity") != self.identity:
            raise CtxlmError(f"{self.files.state}: checkpoint belongs to another model or vocabulary")
        if {k: v.shape for k, v in state["model"].items()} != {k: v.shape for k, v in checkpoint.unique_state_dict(self.model).items()}:
            raise CtxlmError(f"{self.files.state}: checkpoint does not fit the model of {self.files.config}; "
                             "was that file changed?")
        with torch.no_grad():
            own = self.model.state_dict()
            for name, tensor in state["model"].items():
                own[name].copy_(tensor)
        load_optimizer_state(self.optimizer, state["optimizer"])
        restore_rng(state, self.world, self.device)
        self.generator.set_state(state["generator"])
        carry = state["carry"]
        if carry is not None:
            carry = map_state(split_state(carry, self.world, self.model.state_batch_dims(carry)), lambda t: t.to(self.device))
        return state["epoch"], state["position"], state["order"], carry

    # ---------------------------------------------------------------- loop
    def _handle_signal(self, signum, frame):
        self.stop_requested = signal.Signals(signum).name

    def request_stop(self, reason: str = "request") -> None:
        self.stop_requested = reason

    def _close_world(self) -> None:
        self.step = None              # DDP first: its reducer must not outlive the process group
        self.world.close()

    def _stop_if_asked(self, *saved) -> None:
        """Stop (after `_save(*saved)`) if a signal asked any process to; several processes stop together, at one batch."""
        if self.world.size > 1 and self.world.sum(float(self.stop_requested is not None))[0] and not self.stop_requested:
            self.stop_requested = "stop in another process"
        if self.stop_requested:
            if saved:
                self._save(*saved)
            raise Terminated if self.stop_requested == "SIGTERM" else KeyboardInterrupt

    def fit(self) -> dict:
        """Train to the end (or to a stop, raised as KeyboardInterrupt) and return the results; lets go of the folder."""
        try:
            return self._fit()
        finally:
            self.lock.release()

    def _fit(self) -> dict:
        cfg, run_dir = self.config, self.run_dir
        run_dir.mkdir(parents=True, exist_ok=True)
        self.generator = torch.Generator().manual_seed(cfg.train.seed)
        batches = self._batches()
        self.capped = cfg.train.max_batches if 0 < cfg.train.max_batches < len(batches) else 0    # 0: whole epochs
        progress = {"lr": cfg.train.lr, "best_valid": math.inf, "best_epoch": 0, "bad_epochs": 0,
                    "epoch_nll": 0.0, "epoch_tokens": 0, "trained_tokens": 0, "elapsed": 0.0, "history": [], "early_stopped": False,
                    "commits": []}
        self.progress = progress        # read by on_batch callbacks (tokens so far: progress["epoch_tokens"])
        if self.resume_state is not None:
            epoch, position, order, carry = self._restore(self.resume_state)
            progress.update({k: self.resume_state.get(k, progress[k]) for k in progress})
            if self.world.main:             # all checked: the [train] settings this resume changed are the run's now
                self.files.keep_train_settings(cfg)
            progress["early_stopped"] = self._stops_early(progress)     # by this resume's settings
            if progress["early_stopped"] or epoch > cfg.train.epochs:
                self.log(f"{run_dir} has finished ({epoch - 1} epoch{'s' * (epoch != 2)}" + (
                    ", stopped early): nothing to train; to go on, " + ("lower train.min_lr" if progress["lr"] < cfg.train.min_lr
                                                                         else "raise train.early_stop_patience (0 = never)")
                    if progress["early_stopped"] else f"): nothing to train; to go on, --set train.epochs={epoch} or more")
                    + "; its results:")
            else:
                self.log(f"resuming {run_dir} at epoch {epoch}, batch {position}")
                if self.world.main:         # its figures no longer hold (a finished run trained on)
                    self.files.results.unlink(missing_ok=True)
        else:
            epoch, position, order, carry = 1, 0, None, None
            if self.resume_state is None and self.files.config.exists():
                self.log(f"no checkpoint in {run_dir} yet: starting it from the beginning")
            if self.world.main:
                self.files.write_start(cfg, self.data.vocab)
            counts = self.model.parameter_counts()
            self.log(f"model {cfg.model.name}: {counts['total']:,} parameters ({counts['without_embeddings']:,} without word embeddings), "
                     f"vocabulary {len(self.data.vocab):,}, {self.data.length('train') - 1:,} training tokens"
                     + (f" (train.max_batches = {self.capped:,} of {len(batches):,} batches an epoch), " if self.capped else ", ")
                     + f"device {self.device}, precision {cfg.train.precision}"
                     + (" (this CPU has no bf16 instructions: emulated, many times slower than fp32 here)"
                        if emulated_bf16(self.device, cfg.train.precision) else "")
                     + (f", {self.world.size} processes" if self.world.size > 1 else ""))
        self.step = wrap(self.model, self.world, self.device)
        if cfg.train.compile:
            self.step = compiled(self.step or LossStep(self.model))
        if git_commit() not in progress["commits"]:      # the code this run trained with (several if resumed)
            progress["commits"].append(git_commit())
        self._write_metrics(progress["history"])
        handlers = {s: signal.signal(s, self._handle_signal) for s in (signal.SIGINT, signal.SIGTERM)}
        try:
            while epoch <= cfg.train.epochs and not progress["early_stopped"]:
                if order is None:
                    order = batches.order(self.generator) if hasattr(batches, "order") else None
                carry = self._run_epoch(batches, epoch, position, order, carry, progress)
                self._stop_if_asked(epoch, self._position, order, carry, progress)
                self._end_epoch(epoch, progress)
                epoch, position, order, carry = epoch + 1, 0, None, None   # each epoch starts from a zero state
                if progress["early_stopped"]:
                    self.log(f"early stop: the rate {progress['lr']:.3g} is below train.min_lr" if progress["lr"] < cfg.train.min_lr
                             else f"early stop: no validation gain for {cfg.train.early_stop_patience} epochs")
                self._save(epoch, position, order, carry, progress)
                self._stop_if_asked()       # asked for during the epoch's validation: the epoch is saved
        except KeyboardInterrupt as stop:
            self.log(f"interrupted ({self.stop_requested or 'SIGINT'}); state saved. Continue with: ctxlm train --resume {run_dir}")
            raise said(stop)
        finally:
            for s, h in handlers.items():
                signal.signal(s, h)
            if self.stop_requested:
                self._close_world()
        return self.finish(progress)

    def _run_epoch(self, batches, epoch, position, order, carry, progress):
        cfg, model = self.config, self.model
        model.train()
        for group in self.optimizer.param_groups:
            group["lr"] = progress["lr"]
        count = len(batches) if not cfg.train.max_batches else min(len(batches), cfg.train.max_batches)
        bar = Progress(count, f"epoch {epoch}", initial=position, unit="batches")
        started, tokens_run, elapsed_before = time.time(), 0, progress["elapsed"]
        nll_total = torch.tensor(progress["epoch_nll"], dtype=torch.float64)
        self._position = position
        for number in range(position, count):
            batch = batches.batch(order[number] if order is not None else number)
            inputs, targets, reset, start, denominator = self._local_batch(batch)
            if batch.fresh_state:
                carry = start
            nll, n, carry = train_step(model, self.optimizer, inputs, targets, reset, carry, cfg.train.clip,
                                       cfg.train.loss_normalization, cfg.train.precision, self.step, denominator)
            if self.on_batch:
                self.on_batch(self, epoch, number + 1)
            stop = self.stop_requested is not None
            if self.world.size > 1:      # metrics of the global batch; every process stops at the same batch
                nll, n, stop = self.world.sum(float(nll), n, float(stop))
                nll, n = torch.tensor(nll, dtype=torch.float64), int(n)
                if stop and not self.stop_requested:
                    self.stop_requested = "stop in another process"
            nll_total += nll.double().cpu()
            if divergence.diverged(float(nll) / max(n, 1)):
                bar.close()
                raise divergence.stop(cfg, self.files, f"epoch {epoch}, batch {number + 1}", "training loss per token",
                                      float(nll) / max(n, 1), progress["best_epoch"])
            progress["epoch_tokens"] += n
            progress["trained_tokens"] += n     # what the summary reports: train.max_batches may stop an epoch early
            tokens_run += n
            self._position = number + 1
            progress["epoch_nll"] = float(nll_total)
            progress["elapsed"] = elapsed_before + time.time() - started    # every checkpoint keeps it
            mean = progress["epoch_nll"] / max(progress["epoch_tokens"], 1)      # the epoch's so far, shown every line
            rate = tokens_run / max(time.time() - started, 1e-9)
            shown = {} if cfg.output.layer == "nce" else {"ppl": f"{safe_exp(mean):.1f}"}     # NCE: its own loss
            bar.update(loss=f"{mean:.3f}", **shown, tok_s=f"{rate:,.0f}")
            if stop:
                break
            if cfg.train.checkpoint_every and (number + 1) % cfg.train.checkpoint_every == 0 and number + 1 < count:
                self._save(epoch, number + 1, order, carry, progress)
        bar.close()
        self._epoch_rate = tokens_run / max(time.time() - started, 1e-9)
        return carry

    def _local_batch(self, batch):
        """This process's rows of the batch and of the state it starts from (window regime), on its device, and the
        loss normaliser of the global batch. A process left without rows (a last sentence or window batch smaller than
        the number of processes) gets one row whose targets are all padding, so that every process takes the same steps.
        """
        inputs, targets, reset, start, denominator = batch.inputs, batch.targets, batch.reset, batch.state, None
        if self.world.size > 1:
            count = int((targets != IGNORE).sum())
            denominator = loss_denominator(self.config.train.loss_normalization, inputs.size(0), count) / self.world.size
            if inputs.size(0) < self.world.size and self.world.rank >= inputs.size(0):
                inputs, targets = inputs[:1], torch.full_like(targets[:1], IGNORE)
                reset = None if reset is None else reset[:1]
                start = None if start is None else start[:1]
            else:
                inputs, targets, reset, start = (self.world.shard(t) for t in (inputs, targets, reset, start))
        to = lambda t: None if t is None else t.to(self.device)    # noqa: E731
        return to(inputs), to(targets), to(reset), to(start), denominator

    def _end_epoch(self, epoch: int, progress: dict) -> None:
        cfg, vocab, world = self.config, self.data.vocab, self.world
        valid = evaluate_split(self.model, cfg, self.data.ids["valid"], vocab, self.device, f"epoch {epoch}: valid") if world.main else {"ppl": 0.0}
        valid["ppl"] = world.broadcast(valid["ppl"])       # rank 0's score decides for every process
        train_loss = progress["epoch_nll"] / max(progress["epoch_tokens"], 1)
        if divergence.diverged(math.log(valid["ppl"]) if valid["ppl"] > 0 else valid["ppl"]):
            raise divergence.stop(cfg, self.files, f"the end of epoch {epoch}", "validation perplexity", valid["ppl"],
                                  progress["best_epoch"])
        improved = valid["ppl"] < progress["best_valid"]
        if improved:
            progress.update(best_valid=valid["ppl"], best_epoch=epoch, bad_epochs=0)
            if world.main:
                self.files.save_weights(self.model, self.identity, epoch=str(epoch), valid_ppl=f"{valid['ppl']:.4f}")
        else:
            progress["bad_epochs"] += 1
        rolled_back = not improved and cfg.train.rollback and progress["best_epoch"] > 0
        if rolled_back:
            if world.main:
                self.files.load_weights(self.model, self.identity)
            world.broadcast_module(self.model)
        nce = self.config.output.layer == "nce"         # its training loss is NCE's, not a perplexity's
        record = {"epoch": epoch, "lr": progress["lr"], "train_loss": round(train_loss, 6),
                  "train_ppl": None if nce else round(safe_exp(train_loss), 4), "valid_ppl": round(valid["ppl"], 4),
                  "best": improved, "tokens_per_s": round(self._epoch_rate, 1), "elapsed_s": round(progress["elapsed"], 1)}
        progress["history"].append(record)
        self._write_metrics(progress["history"])
        if world.main:
            self.files.write_tensorboard(record)
        ppl = "ppl" if self.model.left_to_right else "pseudo-ppl"      # the bidirectional RM sees both sides
        train = f"NCE loss {train_loss:.4f}" if nce else f"{ppl} {record['train_ppl']:.2f}"
        self.log(f"epoch {epoch}: train {train}, valid {ppl} {valid['ppl']:.2f}, lr {progress['lr']:.3g}, "
                 f"{self._epoch_rate:,.0f} tokens/s{' *' if improved else ''}"
                 + (f"; back to the weights of epoch {progress['best_epoch']}" if rolled_back else ""))
        progress["lr"] = next_lr(progress["lr"], cfg.train.schedule, cfg.train.lr_factor, cfg.train.decay_start, epoch, improved)
        progress["epoch_nll"], progress["epoch_tokens"] = 0.0, 0
        progress["early_stopped"] = self._stops_early(progress)

    def _stops_early(self, progress: dict) -> bool:
        """Whether training stops before train.epochs: no validation gain for the patience, or the rate below min_lr."""
        patience = self.config.train.early_stop_patience
        return bool(patience and progress["bad_epochs"] >= patience) or progress["lr"] < self.config.train.min_lr

    def _write_metrics(self, history: list[dict]) -> None:
        if self.world.main:
            self.files.write_metrics(history)

    def finish(self, progress: dict) -> dict:
        """Roll back to the best epoch's weights and report valid and test perplexity (rank 0)."""
        vocab = self.data.vocab
        self._close_world()
        if not self.world.main:
            return {"best_epoch": progress["best_epoch"], "train_wall_s": round(progress["elapsed"], 1)}
        metadata = self.files.load_weights(self.model, self.identity)      # then the state texts read alone start from
        store_start(self.files.start, self.config, self.model, self.data.prefix("train", START_TOKENS + 1), vocab.eos, metadata.get("sha256", ""))
        results = {"best_epoch": progress["best_epoch"], "train_wall_s": round(progress["elapsed"], 1),
                   "parameters": self.model.parameter_counts(), "commits": progress["commits"], "device": str(self.device),
                   "train_tokens": self.data.length("train") - 1, "trained_tokens": progress["trained_tokens"],
                   "max_batches": self.capped, "vocabulary": len(vocab)}
        try:
            for split in ("valid", "test"):
                if split in self.data.ids:
                    results[split] = evaluate_split(self.model, self.config, self.data.ids[split], vocab, self.device,
                                                    f"final evaluation: {split}")
        except KeyboardInterrupt as stop:
            self.log(f"interrupted during the final evaluation: training is complete and saved (best weights "
                     f"{self.files.weights}, epoch {progress['best_epoch']}); only results.json is "
                     f"missing: ctxlm train --resume {self.run_dir} evaluates again and writes it")
            raise said(stop)
        self.files.write_results(results)
        return results
