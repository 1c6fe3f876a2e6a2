"""The outcome classes are one list: the classifier's, the recorded matrix's schema, and the chapter's figure."""
import yaml

from helpers import repo_root
from helpers.core import plotting
from helpers.serving import classify

ROOT = repo_root()


def test_every_outcome_class_is_accepted_by_the_schema_and_the_figure():
    schema = yaml.safe_load((ROOT / "data" / "schema.yaml").read_text())
    assert set(schema["recorded/backend_matrix.csv"]["choices"]["outcome"]) == set(classify.OUTCOMES)
    assert {"hang", "error"} <= set(classify.OUTCOMES)
    plotting.outcome_matrix([(o, o, "measured") for o in classify.OUTCOMES], classify.OUTCOMES)
