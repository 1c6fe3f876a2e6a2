"""read_glued reads back what a chapter glued, from an executed notebook."""
import json

from helpers.core.glue import read_glued


def test_read_glued_reads_values_and_figures(tmp_path):
    pre = "application/papermill.record/"
    nb = {"cells": [{"cell_type": "code", "source": "", "metadata": {}, "outputs": [
        {"output_type": "display_data", "metadata": {"scrapbook": {"name": "a", "mime_prefix": pre}},
         "data": {pre + "text/plain": "11.0"}},
        {"output_type": "display_data", "metadata": {"scrapbook": {"name": "fig", "mime_prefix": ""}},
         "data": {"image/png": "xx", "text/plain": "<Figure>"}},
        {"output_type": "stream", "name": "stdout", "text": "not glued"}]}]}
    p = tmp_path / "x.ipynb"
    p.write_text(json.dumps(nb))
    assert read_glued(p) == {"a": "11.0", "fig": "<image>"}
