#!/usr/bin/env bash
# Fill .partools/ (ignored; carried to the lent machine, which has no network) with the wheels that
# scripts/parity-remote.sh installs there: for Python 3.12, manylinux x86_64, no dependencies resolved. Run here,
# where pip reaches a package index.
#
# Only what the machine lacks (its package list: .library/device/KINDS.md) and each tool imported in a traced run
# of the parity benchmark (a path finder logging every module's file, the tools run from target folders under a
# Python 3.12 with the machine's packages; GuideLLM's under 3.11, whose torch came from the index): the rest of their
# declared requirements (AIPerf's dash, plotly, kaleido, optuna, kubernetes; the optional brotli and zstandard that
# aiohttp and httpx take when present) is never imported on that path. common/ holds the versions two tools share, put
# after each tool's own folder. inference-perf imports av (35 MB), boto3 and botocore (18 MB) at start-up only for
# video prompts and S3 reports, which the benchmark does not use: a stub wheel of a few hundred bytes stands for them
# (any use raises ImportError naming it).
set -euo pipefail
cd "$(dirname "$0")/.."
D=.partools
rm -rf "$D"
mkdir -p "$D"/{common,aiperf,infperf,guidellm}
get() {   # folder, requirement...
    local dir=$1
    shift
    python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
        --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
        --platform manylinux2014_x86_64 --platform manylinux_2_5_x86_64 --platform manylinux1_x86_64 \
        -d "$D/$dir" "$@" 2>&1 | grep -v "^WARNING: Location" || true
}
get common pydantic==2.14.4 pydantic-core==2.50.5 annotated-types==0.8.0 typing-inspection==0.4.5 \
    pydantic-settings==2.16.3 python-dotenv==1.2.4 datasets==5.2.0 dill==0.4.1 multiprocess==0.70.19
get aiperf aiperf==0.13.0 crick==0.0.8 cyclopts==4.25.3 docstring-parser==0.18.0 ffmpeg-python==0.2.0 future==1.0.0 \
    linkify-it-py==2.2.0 msgspec==0.23.0 orjson==3.11.9 pyzmq==26.4.0 ruamel.yaml==0.18.17 \
    ruamel.yaml.clib==0.2.15 setproctitle==1.3.8 rich-rst==2.2.0
get infperf inference-perf==0.7.0 google-api-core==2.44.0 google-auth==2.63.1 google-cloud-core==2.8.0 \
    google-cloud-storage==3.17.2 google-resumable-media==2.11.0 googleapis-common-protos==1.76.0 \
    cryptography==51.0.1 cffi==2.1.1 opentelemetry-api==1.45.3 jmespath==1.1.0
get guidellm guidellm==0.8.1 aiologic==0.17.1 culsans==0.10.0 faker==40.63.0 ftfy==6.3.1 h2==4.4.1 hpack==4.2.0 \
    httpcore2==2.17.0 httpx2==2.17.0 hyperframe==6.1.0 loguru==0.7.3 more-itertools==11.2.1 sniffio==1.3.1 \
    truststore==0.10.5 wcwidth==0.9.5 websockets==17.4 click==8.4.2
# the stub wheel for inference-perf: av, boto3, botocore.config, importable and unusable
python3 - "$D/infperf" <<'EOF'
import base64, hashlib, sys, zipfile
from pathlib import Path
stub = ('"""A stand-in for {0} (scripts/parity-wheels.sh): inference-perf imports it at start-up; the parity '
        'benchmark never uses it."""\n\n\ndef __getattr__(name):\n    if name.startswith("__"):\n'
        '        raise AttributeError(name)\n    raise ImportError("{0} is not installed here '
        '(a stub from scripts/parity-wheels.sh)")\n')
files = {"av/__init__.py": stub.format("av"), "boto3/__init__.py": stub.format("boto3"),
         "botocore/__init__.py": stub.format("botocore"),
         "botocore/config.py": stub.format("botocore") + "\n\nclass Config:\n    def __init__(self, *a, **k):\n"
                               "        raise ImportError('botocore is not installed here')\n"}
name = "partools_offline_stubs-0.0.0"
files[f"{name}.dist-info/METADATA"] = "Metadata-Version: 2.1\nName: partools-offline-stubs\nVersion: 0.0.0\n"
files[f"{name}.dist-info/WHEEL"] = "Wheel-Version: 1.0\nGenerator: parity-wheels\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
rec = []
for p, t in files.items():
    h = base64.urlsafe_b64encode(hashlib.sha256(t.encode()).digest()).rstrip(b"=").decode()
    rec.append(f"{p},sha256={h},{len(t.encode())}")
rec.append(f"{name}.dist-info/RECORD,,")
files[f"{name}.dist-info/RECORD"] = "\n".join(rec) + "\n"
with zipfile.ZipFile(Path(sys.argv[1]) / f"{name}-py3-none-any.whl", "w", zipfile.ZIP_DEFLATED) as z:
    for p, t in files.items():
        z.writestr(p, t)
EOF
du -sh "$D"/* "$D"
