"""The allocator setting (src/ctxlm/allocator.py): freed training-sized blocks are reused without page faults."""
import os
import subprocess
import sys

import pytest

PROBE = """
import resource, sys, torch
from ctxlm.allocator import keep_freed_memory
done = keep_freed_memory() if sys.argv[1] == "keep" else False
for step in range(40):                               # a step's logits: 48 MiB, touched, freed
    if step == 20:                                   # the steady state: the last 20 steps
        before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    torch.empty(12 << 20).fill_(1.0)
print(done, resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def faults(mode: str, **env) -> tuple[str, int]:
    environ = {key: value for key, value in os.environ.items() if not key.startswith(("MALLOC_", "GLIBC_TUNABLES", "CTXLM_ALLOCATOR"))}
    out = subprocess.run([sys.executable, "-c", PROBE, mode], capture_output=True, text=True, check=True, env={**environ, **env}).stdout.split()
    return out[0], int(out[1])


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")
def test_kept_memory_is_reused_without_faults():
    done, kept = faults("keep")
    if done != "True":
        pytest.skip("C library without glibc's mallopt")
    _, default = faults("default")
    pages = (48 << 20) // os.sysconf("SC_PAGE_SIZE")
    assert default > 15 * pages                      # each step faults its 48 MiB in again
    assert kept < pages // 4                         # a step reuses the blocks the one before freed


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")
def test_opt_out_and_user_settings_leave_malloc_alone():
    assert faults("keep", CTXLM_ALLOCATOR="default")[0] == "False"
    assert faults("keep", MALLOC_TRIM_THRESHOLD_="131072")[0] == "False"
