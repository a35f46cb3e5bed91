"""transformers' remote-code modules (``transformers_modules.*``) are mended when
transformers is targeted: a local model folder carrying its own modeling file."""

import json
import os
import subprocess
import sys
import textwrap

import pytest

CONFIGURATION = textwrap.dedent(
    """
    from transformers import PretrainedConfig

    class TinyConfig(PretrainedConfig):
        model_type = "graphmend_tiny"

        def __init__(self, hidden=8, **kwargs):
            self.hidden = hidden
            super().__init__(**kwargs)
    """
)
MODELING = textwrap.dedent(
    """
    import torch
    from transformers import PreTrainedModel
    from transformers.utils import logging
    from .configuration_tiny import TinyConfig

    logger = logging.get_logger(__name__)

    class TinyModel(PreTrainedModel):
        config_class = TinyConfig

        def __init__(self, config):
            super().__init__(config)
            self.linear = torch.nn.Linear(config.hidden, config.hidden)

        def forward(self, x):
            logger.warning_once("tiny model: remote code in use")
            y = self.linear(x)
            if y.sum() > 0:
                y = y * 2
            else:
                y = y - 1
            return y
    """
)
SCRIPT = textwrap.dedent(
    """
    import sys
    import torch
    from transformers import AutoConfig, AutoModel
    from graphmend.counting import count_breaks

    torch.manual_seed(0)
    config = AutoConfig.from_pretrained(sys.argv[1], trust_remote_code=True)
    model = AutoModel.from_config(config, trust_remote_code=True).eval()
    x = torch.randn(2, 8)
    with torch.no_grad():
        eager = model(x)
        output, count = count_breaks(model, x)
    print("module", type(model).__module__.split(".")[0])
    print("breaks", count.breaks, "identical", torch.equal(output, eager))
    """
)


@pytest.mark.slow  # builds a transformers remote-code model
def test_remote_code_module_is_mended(tmp_path):
    pytest.importorskip("transformers")

    folder = tmp_path / "tiny-model"
    folder.mkdir()
    (folder / "configuration_tiny.py").write_text(CONFIGURATION)
    (folder / "modeling_tiny.py").write_text(MODELING)
    config = {
        "model_type": "graphmend_tiny",
        "hidden": 8,
        "auto_map": {
            "AutoConfig": "configuration_tiny.TinyConfig",
            "AutoModel": "modeling_tiny.TinyModel",
        },
    }
    (folder / "config.json").write_text(json.dumps(config))
    # No weights: the child builds the model from its config with seeded random weights.
    script = tmp_path / "load_tiny.py"
    script.write_text(SCRIPT)
    environment = {"HF_HUB_OFFLINE": "1", "HF_MODULES_CACHE": str(tmp_path / "modules"), "PATH": "/usr/bin:/bin"}
    environment.update({k: v for k, v in os.environ.items() if k in ("PYTHONPATH", "HOME")})
    plain = subprocess.run([sys.executable, str(script), str(folder)], capture_output=True, text=True, env=environment, timeout=300)
    mended = subprocess.run(
        [sys.executable, "-m", "graphmend", "run", "--package", "transformers", str(script), str(folder)],
        capture_output=True, text=True, env=environment, timeout=300,
    )
    assert plain.returncode == 0, plain.stderr[-3000:]
    assert mended.returncode == 0, mended.stderr[-3000:]
    assert "module transformers_modules" in mended.stdout
    assert "breaks 2" in plain.stdout or "breaks 1" in plain.stdout, plain.stdout
    assert "breaks 0 identical True" in mended.stdout, mended.stdout + mended.stderr[-2000:]
    assert plain.stderr.count("remote code in use") == mended.stderr.count("remote code in use") == 1
