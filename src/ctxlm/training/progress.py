"""Progress display: a tqdm bar on a terminal, a plain line every 30 s in a log file."""
from __future__ import annotations

import sys
import time


class Progress:
    def __init__(self, total: int, desc: str, initial: int = 0):
        self.total, self.desc, self.count = total, desc, initial
        self.started = self.last_line = time.time()
        self.bar, self.stats = None, {}
        if sys.stderr.isatty():
            from tqdm import tqdm

            self.bar = tqdm(total=total, initial=initial, desc=desc, unit="batch", dynamic_ncols=True, leave=False)

    def update(self, **stats) -> None:
        self.count += 1
        self.stats = stats or self.stats
        if self.bar is not None:
            self.bar.update(1)
            if self.count % 10 == 0:
                self.bar.set_postfix(self.stats, refresh=False)
        elif time.time() - self.last_line > 30:
            self.last_line = time.time()
            shown = " ".join(f"{k}={v}" for k, v in self.stats.items())
            print(f"{self.desc} {self.count}/{self.total} {shown}", file=sys.stderr, flush=True)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
