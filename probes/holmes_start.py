"""Time to the first training batch and peak memory when a run on Holmes starts (prepared corpus).
Backs: docs/holmes.md, "Starting a run on all of Holmes" (time to the first batch and peak memory).

Runs `ctxlm train` in this process up to the end of its first batch, then prints JSON and exits:
seconds from process start to the data being ready and to the first batch done, the CPU seconds used
until then (user + system) with the load average, the process's peak resident memory (ru_maxrss),
the training tokens and the vocabulary. Prepare Holmes first
(`ctxlm prepare holmes`), or the first call prepares it and the times include that.

    python probes/holmes_start.py [--set data.batching=sentence ...]   # default: LSTM d=256, min_count 7
"""
import time

STARTED = time.time()

import argparse  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import resource  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402

from ctxlm.config import Config, apply_overrides  # noqa: E402
from ctxlm.training.trainer import Trainer  # noqa: E402

parser = argparse.ArgumentParser()
parser.add_argument("--set", action="append", default=[])
parser.add_argument("--data-dir")
args = parser.parse_args()
config = Config()
config.data.dataset = "holmes"
config.model.emb_size = config.model.hidden_size = 256
config.train.device = "cpu"
apply_overrides(config, args.set)
marks = {}


def first_batch(trainer, epoch, number):
    marks["first_batch_s"] = round(time.time() - STARTED, 2)
    usage = resource.getrusage(resource.RUSAGE_SELF)
    marks["cpu_s"] = round(usage.ru_utime + usage.ru_stime, 2)      # what it costs on a machine shared with others
    marks["load_average"] = round(os.getloadavg()[0], 1)
    marks["peak_rss_mb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
    marks["train_tokens"] = trainer.data.ids["train"].numel() - 1
    marks["vocabulary"] = len(trainer.data.vocab)
    marks["batching"] = config.data.batching
    print(json.dumps(marks), flush=True)
    sys.stdout.flush()
    os._exit(0)


trainer = Trainer(config, tempfile.mkdtemp(prefix="holmes-start-"), args.data_dir, log=lambda *a: None)
marks["data_ready_s"] = round(time.time() - STARTED, 2)
trainer.on_batch = first_batch
trainer.fit()
