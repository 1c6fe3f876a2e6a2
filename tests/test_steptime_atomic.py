"""The decode-step sweep's files are written whole or not at all (helpers.model.steptime._write through
helpers.core.results): a sweep killed while it writes timings.csv leaves the last whole version, and --resume
(a rerun into the same folder) measures only what is missing, losing nothing (issue 37)."""
import subprocess
import sys
import textwrap

import pandas as pd
import pytest

KILLED = textwrap.dedent('''
    import os, signal, sys
    import pandas as pd
    from helpers.model import steptime

    writes = {"n": 0}
    real_replace, real_to_csv = os.replace, pd.DataFrame.to_csv

    def third_write(path):
        if str(path).endswith("timings.csv"):
            writes["n"] += 1
            return writes["n"] == 3
        return False

    def replace(src, dst, *a, **k):          # the atomic writer: killed with its temporary file written
        if third_write(dst):
            os.kill(os.getpid(), signal.SIGKILL)
        return real_replace(src, dst, *a, **k)

    def to_csv(self, path=None, *a, **k):     # a plain writer: killed half way through the file
        if path is not None and third_write(path):
            text = real_to_csv(self, None, *a, **k)
            with open(path, "w") as f:
                f.write(text[: len(text) // 2])
            os.kill(os.getpid(), signal.SIGKILL)
        return real_to_csv(self, path, *a, **k)

    os.replace, pd.DataFrame.to_csv = replace, to_csv
    steptime.sweep(steptime.SweepConfig(**eval(sys.argv[2])), sys.argv[1], progress=lambda s: None)
''')
CFG = dict(model="glm5-mini", tp=2, batches=(1, 2, 3), contexts=(16,), modes=("eager",), device="cpu", repeats=2,
           eager_repeats=2, time_limit_s=60, op_level=(), components=False)


@pytest.mark.integration
def test_a_sweep_killed_while_writing_loses_nothing_on_resume(tmp_path):
    from helpers.model import steptime

    out = tmp_path / "sweep"
    p = subprocess.run([sys.executable, "-c", KILLED, str(out), repr(CFG)], capture_output=True, text=True, timeout=300)
    assert p.returncode == -9, p.stderr[-800:]
    kept = pd.read_csv(out / "timings.csv")                     # whole: the two points written before
    assert sorted(kept.loc[kept.what == "step", "batch"]) == [1, 2], kept
    res = steptime.sweep(steptime.SweepConfig(**CFG), out, progress=lambda s: None)
    steps = res.timings[res.timings.what == "step"]
    assert sorted(steps["batch"]) == [1, 2, 3] and not steps.duplicated(["batch", "context", "mode"]).any()
    assert kept.loc[kept.batch == 1, "median_us"].iloc[0] == steps.loc[steps.batch == 1, "median_us"].iloc[0]
