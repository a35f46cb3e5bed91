"""What is not a break candidate: code torch.compile never traces (issue 17)."""

from helpers import mend


def test_tensorflow_jax_and_flax_code_has_no_break_candidates():
    """Issue 17: torch.compile never traces a module that imports another framework and
    not torch (transformers' modeling_tf_*.py and modeling_flax_*.py)."""
    body = '''
def step(x):
    print("step")
    if x.sum() > 0:
        x = x + 1
    return x
'''
    for framework in ("import tensorflow as tf", "import jax.numpy as jnp", "from flax import linen as nn"):
        result = mend(framework + "\n" + body)
        assert result.findings == [] and not result.changed
    both = mend("import tensorflow as tf\nimport torch\n" + body)
    assert {finding.category for finding in both.findings} == {"LC", "DC"}


def test_files_transformers_names_for_tensorflow_or_flax_have_no_break_candidates():
    """Issue 17: `check --all` over transformers reported its TF auto classes (which
    import no framework) and its torch<->TF/Flax weight converters (which import both)."""
    body = "import torch\n\ndef convert(x):\n    print('converting')\n    return x\n"
    for name in ("modeling_tf_auto.py", "modeling_flax_pytorch_utils.py", "modeling_tf_pytorch_utils.py"):
        result = mend(body, filename=f"/site-packages/transformers/{name}")
        assert result.findings == [] and not result.changed
    assert [f.category for f in mend(body, filename="/site-packages/transformers/modeling_utils.py").findings] == ["LC"]
