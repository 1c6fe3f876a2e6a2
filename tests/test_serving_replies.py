"""One reader of whole replies for both paths (issue 23, item 7): an HTTP 200 JSON error body (sglang's NaN
message) answering a *stream* request is reported by the sweep as that error, as the smoke test reports it,
not as "the stream carried no usage". Against a real local server (tests/fixtures/fault_server.py nan-json)."""
import sys
from pathlib import Path

import pytest

from helpers.serving import classify, client as cl
from helpers.serving.fetch import Deadlines
from helpers.serving.server import Server, ServerSpec, free_port

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]
FAULT = str(Path(__file__).parent / "fixtures" / "fault_server.py")
NAN = "probability tensor contains either"


@pytest.fixture()
def nan_json(tmp_path):
    port = free_port()
    with Server(ServerSpec(argv=[sys.executable, FAULT, str(port), "nan-json"], port=port, name="nan-json"),
                tmp_path / "s.log", startup_timeout_s=30, stop_grace_s=1) as srv:
        yield srv.spec.base_url


@pytest.mark.parametrize("chat", [False, True])
def test_a_json_error_body_answering_a_stream_request_keeps_its_message(nan_json, chat):
    row = cl.run_point(nan_json, "fake", cl.Workload(4, 2), 2, 2, timeout_s=10, chat=chat)
    assert row["completed"] == 0 and row["failed"] == 2
    assert f"error in an HTTP 200 reply: {NAN}" in row["errors"] and "no usage" not in row["errors"]
    assert classify.classify_errors([row["errors"]], "") == "nan"


def test_the_smoke_test_and_the_stream_read_the_same_reply_the_same_way(nan_json):
    smoke = classify.smoke_test(nan_json, "fake", classify.SmokeTest(), Deadlines.from_timeout(10))
    row = cl.run_point(nan_json, "fake", cl.Workload(4, 2), 1, 1, timeout_s=10, chat=True)
    assert smoke.kind == "error-body" and smoke.error in row["errors"]
