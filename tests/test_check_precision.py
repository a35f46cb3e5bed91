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
