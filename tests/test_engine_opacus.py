"""An Opacus training script runs on dpcalib's engine with only its import changed, and spends no
more than the target; dpcalib's calibration needs less noise than Opacus's for the same run."""

import warnings

import pytest

pytest.importorskip("opacus")

SCRIPT = '''
import torch
from torch import nn
{import_line}

torch.manual_seed(0)
x, y = torch.randn(240, 3, 8, 8), torch.randint(0, 4, (240,))
data_loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=24, shuffle=True)
model = nn.Sequential(nn.Conv2d(3, 8, 3), nn.GroupNorm(2, 8), nn.ReLU(), nn.Flatten(), nn.Linear(8 * 6 * 6, 4))
optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
criterion = nn.CrossEntropyLoss()

privacy_engine = PrivacyEngine()
model, optimizer, data_loader = privacy_engine.make_private_with_epsilon(
    module=model,
    optimizer=optimizer,
    data_loader=data_loader,
    target_epsilon=3.0,
    target_delta=1e-5,
    epochs=3,
    max_grad_norm=1.0,
)
losses = []
for epoch in range(3):
    model.train()
    for images, target in data_loader:
        optimizer.zero_grad()
        output = model(images)
        loss = criterion(output, target)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    epsilon = privacy_engine.get_epsilon(1e-5)
    also = privacy_engine.accountant.get_epsilon(delta=1e-5)
model.eval()
with torch.no_grad():
    accuracy = (model(x).argmax(1) == y).float().mean().item()
RESULT = dict(epsilon=epsilon, also=also, noise_multiplier=optimizer.noise_multiplier, losses=losses, accuracy=accuracy)
'''


def _run(import_line):
    scope = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        exec(compile(SCRIPT.format(import_line=import_line), "<opacus script>", "exec"), scope)
    return scope["RESULT"]


def test_an_opacus_script_runs_with_only_the_import_changed():
    ours = _run("from dpcalib.optim import PrivacyEngine")
    theirs = _run("from opacus import PrivacyEngine")
    assert len(ours["losses"]) == len(theirs["losses"]) == 30          # 3 epochs of len(loader) = 10 steps
    assert all(map(lambda v: v == v, ours["losses"]))                   # no NaN, also on empty batches
    assert ours["epsilon"] <= 3.0 and ours["also"] == ours["epsilon"]
    # the tight certified calibration: less noise than Opacus's binary search on its PRV estimate
    assert ours["noise_multiplier"] < theirs["noise_multiplier"]
    assert 0.0 <= ours["accuracy"] <= 1.0
