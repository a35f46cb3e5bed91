"""TorchDynamo's exceptions, as graphmend's runtime raises and tells them apart.

Each class is read from torch when first asked for
(``from graphmend.torch_adapter.errors import Unsupported``): a torch without one fails
where it is used, as importing it from torch there would (``FakeTensorObservedException``
exists from torch 2.14 on).
"""

from __future__ import annotations

from graphmend.torch_adapter._lazy import lazy_names

__all__ = ["is_dynamo_signal", "restart_the_trace", "what_the_backend_raised"]

_EXCEPTIONS = (
    "FakeTensorObservedException",
    "InternalTorchDynamoError",
    "SpeculationRestartAnalysis",
    "UncapturedHigherOrderOpError",
    "UnspecializeRestartAnalysis",
    "Unsupported",
    "UserError",
)
__getattr__ = lazy_names(__name__, {
    **dict.fromkeys(_EXCEPTIONS, "torch._dynamo.exc"),
    # What a frame's conversion returns (not an error: where TorchDynamo says how the
    # frame runs when it converts none of it).
    "ConvertFrameReturn": "torch._dynamo.types",
})


def restart_the_trace(reason: str) -> BaseException:
    """The exception that makes TorchDynamo trace the frame again from its start
    (nothing of it has run), with ``reason`` in its logs."""
    from torch._dynamo.exc import UnspecializeRestartAnalysis

    return UnspecializeRestartAnalysis(restart_reason=reason)


def is_dynamo_signal(raised: BaseException) -> bool:
    """Whether ``raised`` is TorchDynamo's own signal (restart the analysis, skip the
    frame), not a failure."""
    from torch._dynamo import exc

    signals = tuple(
        getattr(exc, name) for name in ("RestartAnalysis", "SkipFrame")
        if isinstance(getattr(exc, name, None), type)
    )
    return isinstance(raised, signals)


def what_the_backend_raised(raised: BaseException) -> BaseException:
    """The backend's own exception where TorchDynamo wrapped it
    (``BackendCompilerFailed``); else ``raised``."""
    from torch._dynamo import exc

    return raised.inner_exception if isinstance(raised, exc.BackendCompilerFailed) else raised
