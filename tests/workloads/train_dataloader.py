"""A torch CPU training loop starved by its input pipeline: the Dataset decodes, resizes, blurs and
rotates JPEG images with Pillow in ``__getitem__`` and the DataLoader has ``--workers`` workers
(default 0: all of it on the training loop's thread), so the loop waits for data most of the time.
Prints READY after the first step; bounded by --seconds."""
import argparse
import io
import time

import numpy as np
import torch
from PIL import Image, ImageFilter

p = argparse.ArgumentParser()
p.add_argument("--workers", type=int, default=0)
p.add_argument("--seconds", type=float, default=60.0)
p.add_argument("--batch", type=int, default=8)
args = p.parse_args()
torch.set_num_threads(1)


def _jpeg(seed: int) -> bytes:
    rng = np.random.default_rng(seed)
    img = Image.fromarray(rng.integers(0, 255, (320, 320, 3), dtype=np.uint8))
    out = io.BytesIO()
    img.save(out, format="JPEG", quality=90)
    return out.getvalue()


class Images(torch.utils.data.Dataset):
    def __init__(self, n: int):
        self.jpegs = [_jpeg(i) for i in range(n)]

    def __len__(self) -> int:
        return 1_000_000

    def __getitem__(self, i: int):
        img = Image.open(io.BytesIO(self.jpegs[i % len(self.jpegs)])).convert("RGB")
        img = img.resize((224, 224)).filter(ImageFilter.GaussianBlur(2)).rotate(15)
        x = torch.from_numpy(np.asarray(img, dtype=np.float32) / 255.0).permute(2, 0, 1)
        return x, i % 10


model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 5, stride=4), torch.nn.ReLU(), torch.nn.AdaptiveAvgPool2d(4),
                            torch.nn.Flatten(), torch.nn.Linear(64, 10))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
loader = torch.utils.data.DataLoader(Images(32), batch_size=args.batch, num_workers=args.workers)
deadline = time.monotonic() + args.seconds
ready = False
for x, y in loader:
    loss = torch.nn.functional.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    if not ready:
        print("READY", flush=True)
        ready = True
    if time.monotonic() > deadline:
        break
