"""Which confinement step stops a fresh CUDA initialisation? (diagnostic for the GPU machine)"""
import subprocess
import sys

STEPS = {"none": "", "private_tmp": "c.private_tmp(s, [s])",
         "netns": "c.unshare_network()", "landlock": "c.landlock_restrict_writes([s], hide_processes=False)",
         "landlock_hide": "c.landlock_restrict_writes([s], hide_processes=True)", "seccomp": "c.seccomp_deny()",
         "caps": "c.drop_capabilities()", "limits": "c.set_limits(None, None, 4096, skip_address_space=True)"}
for name, step in STEPS.items():
    code = (f"import tempfile; from kernelrl.sandbox import confine as c; s=tempfile.mkdtemp(); r={step or None}; "
            "import torch; torch.empty(1, device='cuda'); print('ok', r)")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    print(f"{name:14s} rc={p.returncode} {(p.stdout + p.stderr).strip().splitlines()[-1][:150] if (p.stdout + p.stderr).strip() else ''}")
