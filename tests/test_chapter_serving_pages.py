"""What the serving chapters (02, 03, 04) show a reader, built from data: the NaN chapter's launch command as
one copyable block, the line of a failed attempt's log that matters, replies without unreadable bytes, and
the one short line a page says where nothing ran live."""
from __future__ import annotations

import pandas as pd

from helpers.chapters import _serving, nan_crash
from helpers.core import recorded
from helpers.serving import sglang as sg


def _cfg():
    return sg.from_launch_table(recorded.load("recorded/launch_config.csv"), "/m")


def test_the_launch_command_is_one_block_with_its_environment_and_interpreter():
    cfg, env, port = _cfg()
    block = nan_crash.launch_block(cfg, env, port, "early-2026")
    lines = block.splitlines()
    assert lines[0] == "```bash" and lines[-1] == "```"
    assert [ln for ln in lines if ln.startswith("export ")] == [f"export {k}={v}" for k, v in env.items()]
    assert "python -m sglang.launch_server \\" in lines
    assert "    --nsa-decode-backend trtllm \\" in lines and "--dsa-decode-backend" not in block
    assert "--dsa-decode-backend trtllm" in nan_crash.launch_block(cfg, env, port, "0.5.23")
    assert "\u2013" not in block   # no en dash in a flag
    assert nan_crash.renamed_flags(cfg) == 2


def test_the_line_that_matters_of_each_failed_attempt():
    tail = "INFO: started\ntorch.AcceleratorError: CUDA error: device-side assert triggered\n" \
           "Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions.\nINFO: Shutting down"
    assert nan_crash.key_line("nan", tail, "HTTP 500") == "torch.AcceleratorError: CUDA error: device-side assert triggered"
    crash = "Traceback (most recent call last):\n  File \"x.py\", line 1\nValueError: bad header\nINFO: bye"
    assert nan_crash.key_line("crash", crash, "exited") == "ValueError: bad header"
    assert nan_crash.key_line("startup-timeout", "GET /health 404", "no healthy answer within 6 s") == \
        "no healthy answer within 6 s"
    live = pd.DataFrame([{"name": "a", "outcome": "ok", "log_excerpt": "", "detail": "fine", "stands_for": "x"},
                         {"name": "b", "outcome": "nan", "log_excerpt": tail, "detail": "HTTP 500", "stands_for": "y"}])
    lines = nan_crash.failure_lines(live)
    assert list(lines["the line that shows it"]) == ["fine", "torch.AcceleratorError: CUDA error: device-side assert triggered"]
    assert "Traceback" not in lines.to_string() and len(lines.columns) == 4


def test_a_garbled_reply_loses_its_unreadable_bytes():
    assert nan_crash.plain_text("-> 'or\ufffd\ufffd\ufffdroute0 t'") == "-> 'or route0 t'"
    assert nan_crash.plain_text("'<|assistant|> 73 88co 91\\x1ad51'") == "'<|assistant|> 73 88co 91 d51'"


def test_the_attention_rows_leave_the_moe_runners_to_chapter_04():
    m = recorded.load("recorded/backend_matrix.csv")
    assert set(nan_crash.attention_rows(m).component) == {"nsa_decode", "nsa_prefill"}
    f = nan_crash.matrix_facts(m)
    assert (f.rec_n_decode, f.rec_n_decode_nan) == (3, 2)


def test_why_nothing_ran_live_is_one_short_clause():
    why = "sglang is not installed (it needs a CUDA build of torch; see the appendix on re-running)"
    assert _serving.short_why(why) == "sglang is not installed"
    assert nan_crash.matrix_status(None, "", why) == "no live matrix: sglang is not installed"
