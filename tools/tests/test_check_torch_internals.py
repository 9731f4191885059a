import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from check_torch_internals import check_file

BAD = """
import torch
import torch._dynamo
from torch._inductor import config
from torch import _refs
import importlib
importlib.import_module("torch._decomp")
__import__("torch.fx.experimental.proxy_tensor")
import torch as t
t.compile(lambda x: x)
torch._subclasses.FakeTensorMode()
from torch import jit
from torch.func import functionalize
"""

GOOD = """
import torch
import torch.fx
from torch.utils._python_dispatch import TorchDispatchMode
x = torch.compiled_with_cxx11_abi
name = "torch._dynamo_like_but_not"
"""


def test_flags_every_way_in(tmp_path):
    f = tmp_path / "bad.py"
    f.write_text(BAD)
    found = check_file(f)
    lines = sorted(int(p.split(":")[1]) for p in found)
    assert lines == [3, 4, 5, 7, 8, 10, 11, 12, 13], found


def test_allows_the_extension_points(tmp_path):
    f = tmp_path / "good.py"
    f.write_text(GOOD)
    assert check_file(f) == []
