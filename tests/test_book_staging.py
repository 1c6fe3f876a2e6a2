"""helpers.book.staging: nothing of the machines that ran or built a chapter reaches its page."""
import json

import pandas as pd

from helpers.book import staging
from helpers.book.manifest import Manifest
from helpers.book.runbook import status_page

CTX = staging.RunContext(run_id="gpu-run", target="multi-gpu", roots=["/work/main", "/home/me/book"],
                         hostnames=["gpuhost-17"])


def _nb(cells):
    return {"nbformat": 4, "nbformat_minor": 5, "metadata": {}, "cells": cells}


def _code(src, outputs=(), tags=()):
    return {"cell_type": "code", "id": "c", "metadata": {"tags": list(tags)}, "source": src,
            "outputs": list(outputs), "execution_count": 1}


PARAMS = _code('mode = "auto"  # allowed: "recorded", "auto"\nrun_dir = ""  # the run folder\nsweep = "quick"  # allowed: "quick", "full"\n',
               tags=["parameters"])
INJECTED = _code('# Parameters\nmode = "auto"\nsweep = "full"\nrun_dir = "/work/main/runs/gpu-run"\n',
                 tags=["injected-parameters"])


def test_injected_parameters_become_a_box_without_absolute_paths():
    nb = staging.clean_notebook(_nb([PARAMS, json.loads(json.dumps(INJECTED))]), CTX)
    kinds = [c["cell_type"] for c in nb["cells"]]
    assert kinds == ["code", "markdown"]
    box = nb["cells"][1]["source"]
    assert "Parameters of this run" in box and "Run `gpu-run` (target `multi-gpu`)" in box
    assert "/work/main" not in box and "`runs/gpu-run`" in box
    assert '| `sweep` | `"full"` (set by the run) | `"quick"`; "quick", "full" |' in box
    assert '| `mode` | `"auto"` | `"auto"`; "recorded", "auto" |' in box


def test_a_chapter_run_on_its_defaults_still_gets_the_box():
    nb = staging.clean_notebook(_nb([PARAMS]), CTX)
    assert nb["cells"][1]["cell_type"] == "markdown" and "`runs/gpu-run`" not in nb["cells"][1]["source"]


def test_stderr_progress_bars_and_path_results_are_dropped_and_paths_made_relative():
    outs = [
        {"output_type": "stream", "name": "stderr",
         "text": "/opt/venv/lib/python3.12/site-packages/tqdm/auto.py:21: TqdmWarning: IProgress not found\n"},
        {"output_type": "stream", "name": "stdout",
         "text": "\rsizes:  50%|█████     | 1/2 [00:01<00:01,  1.2it/s]\rsizes: 100%|██████████| 2/2 [00:02<00:00,  1.1it/s]\n"
                 "wrote /work/main/runs/gpu-run/results/06/fits.csv\n"},
        {"output_type": "execute_result", "execution_count": 1, "metadata": {},
         "data": {"text/plain": "PosixPath('/work/main/runs/gpu-run/results/x.csv')"}},
    ]
    nb = staging.clean_notebook(_nb([_code("x", outs)]), CTX)
    kept = nb["cells"][0]["outputs"]
    assert len(kept) == 1 and kept[0]["text"] == "wrote runs/gpu-run/results/06/fits.csv\n"


def test_public_text_shortens_installed_packages_and_home_folders():
    t = staging.public_text('File "/usr/lib/python3/dist-packages/x.py", /home/ann/y /root/z', CTX)
    assert t == 'File ".../dist-packages/x.py", ~/y ~/z'
    tb = '  File "/tmp/site/transformers/cli/serve.py", line 152, in f'
    assert staging.public_text(tb, CTX) == '  File ".../cli/serve.py", line 152, in f'


def test_pandas_default_tables_lose_the_counter_index_and_missing_cells():
    df = pd.DataFrame({"a": [1.5, None], "b": ["x", None], "host": ["gpuhost-17", "y"]})
    df["b"] = df["b"].astype("string")
    out = {"output_type": "execute_result", "execution_count": 1, "metadata": {},
           "data": {"text/html": df.to_html(), "text/plain": repr(df)}}
    nb = staging.clean_notebook(_nb([_code("df", [out])]), CTX)
    html = nb["cells"][0]["outputs"][0]["data"]["text/html"]
    assert "<th>0</th>" not in html and "<th>1</th>" not in html and "<th></th>" not in html
    assert "NaN" not in html and "&lt;NA&gt;" not in html
    assert "gpuhost-17" not in html and "(withheld)" in html
    named = pd.DataFrame({"a": [1]}, index=pd.Index(["r"], name="case")).to_html()
    assert staging.clean_dataframe_html(named) == named  # an index that means something stays


def test_long_pandas_tables_fold():
    html = pd.DataFrame({"k": range(40), "v": range(40)}).to_html()
    out = staging.clean_dataframe_html(html)
    assert out.startswith('<details class="book-table-fold"><summary>A table of 40 rows (k, v)')


def test_glued_figures_get_their_alt_text():
    glued = {"output_type": "display_data",
             "metadata": {"image/png": {"alt": "Figure: chart of t against s"},
                          "scrapbook": {"name": "fig_t", "mime_prefix": "application/papermill.record/"}},
             "data": {"application/papermill.record/image/png": "iVBOR", "application/papermill.record/text/plain": "<img>"}}
    md = {"cell_type": "markdown", "id": "m", "metadata": {},
          "source": "```{glue:figure} fig_t\n:name: fig-t\nThe caption.\n```\n"}
    nb = staging.clean_notebook(_nb([_code("glue()", [glued]), md]), CTX)
    assert ":alt: Figure: chart of t against s\n:name: fig-t\n" in nb["cells"][1]["source"]


def test_context_from_a_manifest_knows_the_run_machine_folder():
    m = {"run_id": "r1", "target": "t", "hardware": {"hostname": "box.example"},
         "chapters": [{"parameters": {"run_dir": "/srv/book/runs/r1"}}]}
    ctx = staging.RunContext.from_manifest(Manifest(**m))
    assert "/srv/book" in ctx.roots and "box" in ctx.hostnames


def test_status_page_leaves_the_host_name_out():
    m = {"run_id": "r", "target": "t", "chapters": [], "hardware": {"hostname": "secret-host", "gpu_count": 2},
         "versions": {}}
    page = status_page(Manifest(**m), {})
    assert "secret-host" not in page and "hostname" not in page and "gpu_count" in page


def test_a_figure_without_alt_text_of_its_own_gets_its_captions_first_sentence():
    md = ("```{glue:figure} fig_old\n:name: fig-old\nTime per copy against message size: {glue:text}`where`, "
          "per path. Red: recorded.\n```\n")
    out = staging.add_figure_alts(md, {})
    assert ":alt: Time per copy against message size\n:name: fig-old\n" in out
    assert staging.add_figure_alts("```{glue:figure} k\n:alt: given\nCap.\n```", {"k": "auto"}).count(":alt:") == 1


def test_the_first_page_can_name_the_run_it_shows():
    m = {"run_id": "h200x2-x", "target": "multi-gpu", "started": "2026-11-29T21:10:51+00:00",
         "hardware": {"gpu_count": 2, "gpu_names": ["NVIDIA H200", "NVIDIA H200"],
                      "virtualization": "container in vm (Firecracker)"},
         "versions": {"book_commit": "6e11e7c+dirty"}, "chapters": []}
    subs = staging.run_substitutions(Manifest(**m))
    assert subs == {"site_run": "h200x2-x", "site_target": "multi-gpu",
                    "site_machine": "2 x NVIDIA H200, container in vm (Firecracker)",
                    "site_date": "2026-11-29", "site_commit": "commit 6e11e7c with local changes",
                    "site_presented": ""}
    assert set(subs) == set(staging.SUBSTITUTION_KEYS)
    assert staging.run_substitutions(Manifest(run_id="r", target="", chapters=[]))["site_commit"] == "an unrecorded commit"


def test_a_replayed_run_names_the_commit_that_presented_it_again():
    """Site read 3, L-21: a replay re-executes chapters at another commit; the first page names that commit."""
    m = Manifest(run_id="r", target="", chapters=[], replayed={"book_commit": "122b9c0", "started": "2026-12-06T13:37:13",
                                                               "chapters": ["07_diagnosis", "90_provenance"]})
    assert staging.run_substitutions(m)["site_presented"] == ("; presented again by commit 122b9c0 on 2026-12-06, which "
                                                              "re-executed 2 chapters (their derived figures were "
                                                              "computed there)")


def test_the_config_has_a_default_for_every_run_substitution():
    import yaml

    from helpers import repo_root

    cfg = yaml.safe_load((repo_root() / "_config.yml").read_text())
    assert set(staging.SUBSTITUTION_KEYS) <= set(cfg["parse"]["myst_substitutions"])


def test_glued_figures_are_exported_for_other_pages(tmp_path):
    import base64

    png = base64.b64encode(b"\x89PNG fake").decode()
    out = {"output_type": "display_data", "data": {"application/papermill.record/image/png": png},
           "metadata": {"scrapbook": {"name": "fig_budget", "mime_prefix": "application/papermill.record/"}}}
    keys = staging.export_glued_figures(_nb([_code("glue()", [out])]), tmp_path / "07_diagnosis")
    assert keys == ["fig_budget"] and (tmp_path / "07_diagnosis" / "fig_budget.png").read_bytes() == b"\x89PNG fake"


def test_a_run_outside_a_checkout_and_the_environment_leave_no_absolute_path():
    m = {"run_id": "r2", "target": "t", "chapters": [{"parameters": {"run_dir": "/scratch/tmp/r2"}}],
         "environment": {"prefix": "/opt/book/.venv", "python": "/opt/book/.venv/bin/python"}}
    ctx = staging.RunContext.from_manifest(Manifest(**m), local_root="/work/main")
    assert "/scratch/tmp" not in ctx.roots  # a folder holding runs is no checkout: nothing else is cut
    t = staging.public_text("wrote /scratch/tmp/r2/results/x.csv with /opt/book/.venv/bin/python; /scratch/tmp/other", ctx)
    assert t == "wrote runs/r2/results/x.csv with .venv/bin/python; /scratch/tmp/other"


def test_a_hosts_own_python_is_not_named_by_where_the_machine_keeps_it():
    """A GPU host's Python that `make` built .venv over (the status page's 'made from (PY)') keeps its
    environment folder and name only: the browser check refuses /opt/... on a page."""
    from helpers.book import browser

    t = staging.public_text("made from (PY) `/opt/torch/.venv/bin/python3` (3.12)", staging.RunContext())
    assert t == "made from (PY) `…/.venv/bin/python3` (3.12)" and not browser.ABS_PATH.search(t)


def test_the_parameters_box_closes_the_page_folded():
    md = {"cell_type": "markdown", "id": "m", "metadata": {}, "source": "# Title\n\nThe answer."}
    body = _code("x = 1", tags=())
    nb = staging.clean_notebook(_nb([md, PARAMS, json.loads(json.dumps(INJECTED)), body]), CTX)
    assert [c.get("id") for c in nb["cells"]][-1] == "parameters-of-this-run"
    assert [c["cell_type"] for c in nb["cells"]] == ["markdown", "code", "code", "markdown"]
    box = nb["cells"][-1]["source"]
    assert box.startswith(":::{dropdown} Parameters of this run\n:class-container: book-params\n")
    assert ":open:" not in box and box.rstrip().endswith(":::")
    assert '| `sweep` | `"full"` (set by the run) |' in box  # the run's values, though the cell moved
    defaults = staging.clean_notebook(_nb([md, PARAMS, body]), CTX)
    assert defaults["cells"][-1]["id"] == "parameters-of-this-run"


def test_the_parameters_cell_is_not_shown_twice(tmp_path):
    """The box at the end states every parameter with this run's value, default and allowed values, so the staged
    page drops the parameters cell's input (no second toggle near the top); other code folds behind a toggle."""
    src = tmp_path / "ch.ipynb"
    src.write_text(json.dumps(_nb([json.loads(json.dumps(PARAMS)), _code("x = 1")])))
    (tmp_path / "stage").mkdir()
    (tmp_path / "stage" / "_config.yml").write_text("title: t\n")
    dst = tmp_path / "stage" / "ch.ipynb"
    staging._stage_notebook(src, dst, CTX)
    cells = json.loads(dst.read_text())["cells"]
    tags = [c["metadata"].get("tags", []) for c in cells if c["cell_type"] == "code"]
    assert "remove-input" in tags[0] and "hide-input" not in tags[0] and "parameters" in tags[0]
    assert tags[1] == ["hide-input"]
    box = cells[-1]["source"]
    for name in ("mode", "run_dir", "sweep"):
        assert f"| `{name}` |" in box


def test_a_glued_sentences_code_spans_show_as_plain_text():
    """{glue:text} shows a glued value as it is, so a sentence holding Markdown code spans would put
    backticks in front of the reader (the published 07_decode_step did: "the chapter's `eager` parameter");
    the staged copy shows their text, and a glued Markdown value (glue:md) keeps its code."""
    md = "application/papermill.record/text/markdown"
    glued = {"output_type": "display_data", "metadata": {"scrapbook": {"name": "t", "mime_prefix": ""}},
             "data": {staging.GLUED_PLAIN: "'no eager step (the chapter\\'s `eager` parameter was off)'",
                      md: "the `--tp-size` flag"}}
    out = staging.clean_notebook(_nb([_code("x", [glued])]), CTX)["cells"][0]["outputs"][0]["data"]
    assert "`" not in out[staging.GLUED_PLAIN] and "eager parameter" in out[staging.GLUED_PLAIN]
    assert out[md] == "the `--tp-size` flag"
