"""The outcome classes are one list: the classifier's, the recorded matrix's schema, and the chapter that plots them."""
import json

import yaml

from helpers import repo_root
from helpers.serving import classify

ROOT = repo_root()


def test_every_outcome_class_is_accepted_by_the_schema_and_the_chapter():
    schema = yaml.safe_load((ROOT / "data" / "schema.yaml").read_text())
    assert set(schema["recorded/backend_matrix.csv"]["choices"]["outcome"]) == set(classify.OUTCOMES)
    nb = json.loads((ROOT / "notebooks" / "02_nan_crash.ipynb").read_text())
    order = next(line for c in nb["cells"] for line in "".join(c["source"]).splitlines() if line.startswith("order = "))
    assert set(eval(order.split("=", 1)[1])) == set(classify.OUTCOMES)
