"""A LAMBADA passage file as a local lm-evaluation-harness task (`ctxlm lambada-task`, docs/harness.md); no
lm-eval needed to write one."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Callable

from ..io import atomic_write_text

TASK = """\
# LAMBADA from a local file, for lm-evaluation-harness (written by `ctxlm lambada-task`). As the harness's
# lambada_standard / lambada_openai: the context is the passage without its last word, the target the last word.
task: {name}
dataset_path: json
dataset_kwargs:
  data_files:
    validation: {data}
output_type: loglikelihood
test_split: validation
doc_to_text: "{{{{text.split(' ')[:-1]|join(' ')}}}}"
doc_to_target: "{{{{' '+text.split(' ')[-1]}}}}"
metric_list:
  - metric: perplexity
    aggregation: perplexity
    higher_is_better: false
  - metric: acc
    aggregation: mean
    higher_is_better: true
metadata:
  version: 1.0
  written_by: {marker}
"""


MARKER = "ctxlm lambada-task"                       # metadata.written_by of the tasks it writes
TOKENISED = ("cimec/lambada", "lambada")            # the harness's datasets of LAMBADA's tokenised release (lambada_standard)


def reads_tokenised_lambada(setting: Callable[[str], object]) -> bool:
    """Whether a loaded task (`setting`: its `get_config`) reads LAMBADA's tokenised release: the harness's
    lambada_standard (and its cloze form), or a task `ctxlm lambada-task` wrote, whatever its name (lambada_openai's
    passages are detokenised)."""
    metadata = setting("metadata")
    return setting("dataset_path") in TOKENISED or isinstance(metadata, dict) and metadata.get("written_by") == MARKER


def write_lambada_task(passages: list[list[str]], folder: str | Path, name: str = "lambada_local") -> Path:
    """The passages (as `read_lambada` gives them) as a harness task: FOLDER/NAME.jsonl, one {"text": passage} a
    line, and FOLDER/NAME.yaml naming it by its absolute path. Returns the YAML's path."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    data = (folder / f"{name}.jsonl").resolve()
    atomic_write_text(data, "".join(json.dumps({"text": " ".join(words)}) + "\n" for words in passages))
    task = folder / f"{name}.yaml"
    atomic_write_text(task, TASK.format(name=name, data=json.dumps(str(data)), marker=MARKER))
    return task
