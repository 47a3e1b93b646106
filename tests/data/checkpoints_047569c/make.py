"""Run from the repository root of a checkout of 047569c: ``PYTHONPATH=. python tests/data/checkpoints_047569c/make.py tests/data/checkpoints_047569c``.

Written with the code before the optim/ sub-packages (047569c): for every optimizer of
tests/builders.py, a checkpoint after 4 rounds and the parameters after 8 rounds of the same run."""
import sys
import torch
from tests.builders import NAMES, build, mlp

out = sys.argv[1]
final = {}
for name in NAMES:
    opt, _ = build(name, mlp(), seed=3)
    opt.run(4, progress=False)
    opt.save_checkpoint(f"{out}/ck_{name}.pt")
    opt.run(8, progress=False)
    final[name] = {k: v.detach().clone() for k, v in opt.params().items()}
torch.save(final, f"{out}/final_params.pt")
print(NAMES)
