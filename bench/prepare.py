"""`ctxlm prepare` throughput and memory: tokens/s, wall and CPU time and peak resident memory of one
preparation, run as a child process (its peak RSS from getrusage). Prints JSON.

    python bench/prepare.py holmes --out /tmp/prep                  # all of Holmes (522 novels)
    python bench/prepare.py holmes --out /tmp/prep --compare ~/.cache/ctxlm/data/holmes/manifest.json
    python bench/prepare.py text --out /tmp/prep/ptb -- ptb.train.txt --valid ptb.valid.txt --test ptb.test.txt

--compare names the manifest of an earlier preparation (e.g. one made by the code before `prepare text`,
format holmes-2) and says whether each array is the same, byte for byte (sha256).
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import time
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("kind", choices=["holmes", "text"])
    parser.add_argument("--out", required=True, help="holmes: the ROOT to write ROOT/holmes into; text: the folder")
    parser.add_argument("--compare", help="an earlier manifest.json: are the arrays the same?")
    parser.add_argument("rest", nargs="*", help="text: the inputs and options of `ctxlm prepare text`")
    args = parser.parse_args()
    command = [sys.executable, "-m", "ctxlm", "prepare", args.kind, "--out", args.out, "--force", *args.rest]
    started, cpu = time.time(), resource.getrusage(resource.RUSAGE_CHILDREN)
    done = subprocess.run(command, capture_output=True, text=True)
    wall = time.time() - started
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode:
        sys.exit(done.stderr)
    folder = Path(args.out) / "holmes" if args.kind == "holmes" else Path(args.out)
    manifest = json.loads((folder / "manifest.json").read_text())
    tokens = sum(manifest["tokens"].values())
    result = {
        "command": " ".join(command[1:]), "tokens": manifest["tokens"], "types": manifest["types"],
        "wall_s": round(wall, 1), "cpu_s": round(usage.ru_utime + usage.ru_stime - cpu.ru_utime - cpu.ru_stime, 1),
        "tokens_per_s_wall": round(tokens / wall), "peak_rss_mb": round(usage.ru_maxrss / 1024),
        "output_mb": round(sum(f["bytes"] for f in manifest["files"].values()) / 1e6, 1),
        "machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}",
    }
    if args.compare:
        earlier = json.loads(Path(args.compare).expanduser().read_text())["files"]
        result["same_as_compare"] = {name: entry["sha256"] == earlier.get(name, {}).get("sha256")
                                     for name, entry in manifest["files"].items()}
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
