"""`model.names = "capitalised"`: the names mixture's word list made from the run's own raw books (SPEC §1.19).

The list is `ctxlm names`' rule (evaluation/lambada.py `capitalised_words`: lower-cased word types capitalised in at
least 90% of at least 5 appearances that do not open a sentence) over the cased books of a lower-cased corpus: the
Holmes novels (`data.dataset = "holmes"`; for other text, make the list with `ctxlm names`). It is written to
RUN/names.txt when the run starts, and model.names then names that file, so the run's config.toml records the list
it was trained with. `ctxlm eval --names capitalised` and `ctxlm lambada --names capitalised` score any Holmes run
(a baseline without a list of its own included) against the same list.
"""
from __future__ import annotations

from pathlib import Path

from ..config import NAMES_OF_THE_BOOKS as CAPITALISED
from ..errors import CtxlmError
from ..io import atomic_write_text

FILE = "names.txt"


def capitalised_names(config, data_dir=None, source: str = f'model.names = "{CAPITALISED}"', log=print) -> list[str]:
    """The capitalised words of all the Holmes books (the 522, whatever part of them a run with `config` trains on:
    one list for every Holmes run; `source`: the setting, for errors)."""
    from ..data.holmes import books
    from ..evaluation.lambada import capitalised_words

    if config.data.dataset != "holmes":
        raise CtxlmError(f'{source} reads the capitalised words of the Holmes novels (data.dataset = '
                         f'"holmes"), not of dataset {config.data.dataset!r}; give a file of names instead (`ctxlm names '
                         "BOOKS --out names.txt` makes one from cased books)")
    paths = [path for path, _ in books(data_dir)]
    log(f"{source.split()[0]}: the capitalised words of {len(paths):,} training file(s) ...")
    return capitalised_words(paths)


def corpus_names(config, run_dir: Path, data_dir=None, log=print) -> None:
    """Make the run's names list where model.names asks for the capitalised words of its books (else nothing)."""
    options = config.model.options
    if getattr(options, "names", None) != CAPITALISED:
        return
    words = capitalised_names(config, data_dir, log=log)
    path = Path(run_dir) / FILE
    atomic_write_text(path, "".join(w + "\n" for w in words))
    options.names = str(path.resolve())
    log(f"model.names: {len(words):,} names written to {path}")
