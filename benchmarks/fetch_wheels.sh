#!/usr/bin/env bash
# Download the wheels the GPU machine lacks into .whl/ (carry it with the device call; benchmarks/device.sh installs
# them). The machine has torch, triton, transformers, peft, accelerate, rich, typer, httpx and pyarrow already.
set -euo pipefail
cd "$(dirname "$0")/.."
grep -qx "/.whl/" .git/info/exclude 2>/dev/null || echo "/.whl/" >> .git/info/exclude
for spec in openai==3.52.0 httpx2 pydantic==2.13.4 pydantic_core==2.46.4 distro jiter==0.19.0 sniffio==1.3.1 \
            annotated-types==0.7.0 typing-inspection==0.4.2 trl==1.16.0 datasets==5.2.0 dill==0.4.1 \
            multiprocess==0.70.19 nvidia-cutlass==4.2.0.0 starlette==1.10.0 uvicorn==0.54.0; do
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 --platform manylinux1_x86_64 -d .whl "$spec"
done
# Ray (the `ray` extra, for benchmarks/eval_scaling.py) and what it needs beyond the packages above; its Java
# support (ray/jars, 31 MiB) is taken out of the wheel, so that .whl stays under the 64 MiB a device call carries.
for spec in ray==2.60.0 jsonschema==4.26.0 referencing==0.37.0 jsonschema-specifications==2025.9.1 \
            rpds-py==0.30.0 attrs==26.1.0 msgpack==1.2.4 protobuf==7.36.2; do
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 --platform manylinux1_x86_64 -d .whl "$spec"
done
python3 - .whl/ray-*.whl <<'PY'
import sys, zipfile
from pathlib import Path

path = Path(sys.argv[1])
with zipfile.ZipFile(path) as z:
    if any(n.startswith("ray/jars/") for n in z.namelist()):
        tmp = path.with_suffix(".tmp")
        with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as out:
            for item in z.infolist():
                if item.filename.startswith("ray/jars/"):
                    continue
                data = z.read(item)
                if item.filename.endswith(".dist-info/RECORD"):
                    data = b"".join(l for l in data.splitlines(keepends=True) if not l.startswith(b"ray/jars/"))
                out.writestr(item, data)
        tmp.replace(path)
PY
du -sh .whl
