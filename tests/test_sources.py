"""Every public reference in data/sources.yaml says where a reader finds it and when (issue 24, item 7)."""
import copy

import pytest

from helpers.chapters import provenance
from helpers.core import recorded


def test_every_reference_has_a_link_and_a_date():
    assert provenance.reference_problems() == []
    refs = {k: v for k, v in recorded.sources().items() if v["kind"] == "reference"}
    assert refs, "data/sources.yaml has no reference entries"
    for k, v in refs.items():
        assert v["url"] or v["url_note"], k


@pytest.mark.parametrize("key", ["url", "date"])
def test_a_reference_without_its_link_or_date_is_named(key):
    srcs = copy.deepcopy(recorded.sources())
    del srcs["rtx6kpro-glm5"][key]
    problems = provenance.reference_problems(srcs)
    assert len(problems) == 1 and "'rtx6kpro-glm5'" in problems[0] and key in problems[0], problems


def test_a_null_link_needs_a_note_and_a_link_is_a_link(monkeypatch):
    srcs = copy.deepcopy(recorded.sources())
    srcs["sglang-pr-39605"]["url"] = None
    srcs["nccl-source"]["url"] = "NVIDIA/nccl"
    problems = provenance.reference_problems(srcs)
    assert any("'sglang-pr-39605'" in p and "url_note" in p for p in problems), problems
    assert any("'nccl-source'" in p and "not an http(s) link" in p for p in problems), problems
    monkeypatch.setattr(recorded, "sources", lambda: srcs)  # the check the provenance page runs
    with pytest.raises(recorded.DataError, match="sglang-pr-39605"):
        provenance.references_table()


def test_references_table_shows_date_version_and_link():
    t = provenance.references_table()
    assert list(t.columns) == ["source", "what it is", "date", "version", "link"]
    row = t.set_index("source").loc["sglang-pr-39605"]
    assert row["link"] == "https://github.com/sgl-project/sglang/pull/39605"
