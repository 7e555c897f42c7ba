"""Which confinement step stops CUDA, and does the order workers use avoid it? (diagnostic for the GPU machine)

For each step of `kernelrl.sandbox.confine`, two fresh processes: one applies the step and then initialises CUDA
(`after`), the other initialises CUDA, applies the step and then allocates and computes on the device (`before`,
what `sandbox.worker` does: the driver opens its files before confinement denies them). A step may stop `after`;
every step must leave `before` working.
"""
import subprocess
import sys

STEPS = {"none": "", "private_tmp": "c.private_tmp(s, [s])",
         "netns": "c.unshare_network()", "landlock": "c.landlock_restrict_writes([s], hide_processes=False)",
         "landlock_hide": "c.landlock_restrict_writes([s], hide_processes=True)", "seccomp": "c.seccomp_deny()",
         "caps": "c.drop_capabilities()", "limits": "c.set_limits(None, None, 4096, skip_address_space=True)"}
SETUP = "import tempfile, torch; from kernelrl.sandbox import confine as c; s=tempfile.mkdtemp(); "
ORDERS = {
    "after": SETUP + "r={step}; torch.empty(1, device='cuda'); print('ok', r)",
    "before": SETUP + "torch.cuda.init(); torch.empty(1, device='cuda'); r={step}; "
                      "x = torch.randn(1 << 20, device='cuda'); torch.cuda.synchronize(); "
                      "print('ok', float((x * 2).sum() / x.sum()), r)",
}


def last_line(p: subprocess.CompletedProcess) -> str:
    text = (p.stdout + p.stderr).strip()
    return text.splitlines()[-1][:150] if text else ""


for name, step in STEPS.items():
    for order, code in ORDERS.items():
        p = subprocess.run([sys.executable, "-c", code.format(step=step or None)], capture_output=True, text=True,
                           timeout=120)
        print(f"{name:14s} {order:7s} rc={p.returncode} {last_line(p)}")
