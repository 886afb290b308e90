"""Kneser-Ney 5-grams of corpora larger than memory, ours against KenLM's `lmplz`, on the same tokens and
the same budget (issue 42). Each command is a child process; its wall and CPU time and its peak resident
memory come from `os.wait4` (that child alone), and samples of /proc split its resident memory into its own
(RssAnon) and pages of the files it maps (RssFile: the tables and corpus, which the kernel can reclaim).

For each corpus (a folder written by `ctxlm prepare`): ours is the whole `ctxlm train` of
configs/ngram/holmes-kn5.toml on it with `--memory BUDGET` (counting, estimation, saving, scoring valid
and test); KenLM is `lmplz -o 5 -S BUDGET` on the same training tokens written out as text (one sentence
per line; `<unk>` renamed, since lmplz refuses it in its input), writing its ARPA file. With `--text`, a
text file is first prepared (`ctxlm prepare text`, timed too) into WORK/large.

    python bench/kn_large.py --lmplz $(bash bench/build_lmplz.sh) --work /big/kn \\
        --prepared ~/.cache/ctxlm/data/holmes --text big.txt          # big.txt: bench/sample_corpus.py
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from sample_corpus import as_text, default_vocabulary, spelling  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def resident(pid: int) -> dict[str, int]:
    """RssAnon and RssFile (kB) of a process now: its own memory, and pages of files it maps (reclaimable)."""
    try:
        lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    except OSError:
        return {}
    return {k: int(v.split()[0]) for k, v in (line.split(":", 1) for line in lines) if k in ("RssAnon", "RssFile")}


def timed(command: list[str], log: Path) -> dict:
    """Run one child process (output to `log`); its wall, user + system CPU seconds and peak RSS, and the
    largest RssAnon and RssFile seen in samples every 0.2 s (Linux)."""
    started, most = time.time(), {"RssAnon": 0, "RssFile": 0}
    with open(log, "w") as out:
        child = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)
        while True:
            pid, status, usage = os.wait4(child.pid, os.WNOHANG)
            if pid:
                break
            for key, value in resident(child.pid).items():
                most[key] = max(most[key], value)
            time.sleep(0.2)
    if os.waitstatus_to_exitcode(status):
        sys.exit(f"bench/kn_large.py: {command[:4]} failed; see {log}")
    return {"wall_s": round(time.time() - started, 1), "cpu_s": round(usage.ru_utime + usage.ru_stime, 1),
            "peak_rss_gb": round(usage.ru_maxrss / 2 ** 20, 3), "most_anon_gb": round(most["RssAnon"] / 2 ** 20, 3),
            "most_file_mapped_gb": round(most["RssFile"] / 2 ** 20, 3)}


def training_text(prepared: Path, out: Path) -> int:
    """The folder's training ids as text for lmplz, in its default vocabulary (`<unk>` as UNKNOWN_WORD)."""
    words, ids = default_vocabulary(prepared)
    spelled = spelling(words)
    spelled[1] = "UNKNOWN_WORD "
    with open(out, "w", encoding="utf-8") as text:
        for start in range(0, ids.size, 1 << 22):
            text.write(as_text(ids[start:start + (1 << 22)], spelled))
    return int(ids.size)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--prepared", type=Path, nargs="*", default=[], help="prepared folders to build a KN5 of")
    parser.add_argument("--text", type=Path, help="a text file to prepare first (one sentence per line)")
    parser.add_argument("--lmplz", help="KenLM's lmplz (bash bench/build_lmplz.sh); left out: ours only")
    parser.add_argument("--memory", default="2G")
    parser.add_argument("--work", type=Path, required=True, help="folder for the prepared corpus, runs, ARPA files")
    args = parser.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    report, corpora = {}, list(args.prepared)
    ctxlm = [sys.executable, "-m", "ctxlm"]
    if args.text:
        large = args.work / "large"
        report["prepare large"] = timed(ctxlm + ["prepare", "text", str(args.text), "--valid-sentences", "10000",
                                                 "--test-sentences", "10000", "--out", str(large), "--force"],
                                        args.work / "prepare.log")
        corpora.append(large)
    for prepared in corpora:
        name, run = prepared.name, args.work / f"kn5-{prepared.name}"
        manifest = json.loads((prepared / "manifest.json").read_text())
        ours = timed(ctxlm + ["train", "--config", str(ROOT / "configs/ngram/holmes-kn5.toml"), "--set", "data.dataset=prepared",
                              "--set", f"data.prepared={prepared}", "--memory", args.memory, "--run-dir", str(run)],
                     args.work / f"train-{name}.log")
        results = json.loads((run / "results.json").read_text())
        ours.update(train_tokens=manifest["tokens"]["train"], ngrams=results.get("ngrams"),
                    valid_ppl=results["valid"]["ppl"], test_ppl=results.get("test", {}).get("ppl"))
        report[f"ours {name}"] = ours
        print(json.dumps({f"ours {name}": ours}), flush=True)
        if args.lmplz:
            text = args.work / f"{name}.txt"
            tokens = training_text(prepared, text)
            kenlm = timed([args.lmplz, "-o", "5", "-S", args.memory, "-T", str(args.work), "--text", str(text),
                           "--arpa", str(args.work / f"{name}.arpa")], args.work / f"lmplz-{name}.log")
            kenlm["tokens_with_eos"] = tokens
            report[f"lmplz {name}"] = kenlm
            print(json.dumps({f"lmplz {name}": kenlm}), flush=True)
            text.unlink()
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
