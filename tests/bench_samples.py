"""A synthetic `graphmend bench` run shared by the bench report tests."""


def _quick(graphs, breaks, categories, fullgraph, **extra):
    return {
        "graphs": graphs,
        "breaks": breaks,
        "categories": categories,
        "fullgraph": fullgraph,
        **extra,
    }


def _timing(cold, steady):
    return {"cold_start_seconds": cold, "steady_state_seconds": steady}


def synthetic_run():
    return {
        "meta": {
            "date": "2026-11-29 10:00 UTC",
            "graphmend_version": "0.1.0",
            "git_commit": "abc1234",
            "options": {"quick": False, "device": "cpu", "mode": "default", "repeats": 3},
            "environment": {
                "torch": "2.13.0+cpu",
                "transformers": "4.52.4",
                "python": "3.11.7",
                "processor": "Test CPU",
                "cpu_count": 2,
                "torch_threads": 1,
                "thread_environment": {"OMP_NUM_THREADS": "1"},
            },
        },
        "models": [
            {
                "name": "t5",
                "paper_name": "t5-small",
                "quick": {
                    "original": _quick(4, 3, {"LC": 2}, False),
                    "graphmend": _quick(1, 0, {}, True, rewrite={"seconds": 0.5}),
                },
                "equality": {"bit_identical": True, "problems": []},
                "timing": {
                    "original": [_timing(30.0, 0.010), _timing(32.0, 0.012), _timing(31.0, 0.011)],
                    "graphmend": [_timing(10.0, 0.010), _timing(11.0, 0.010), _timing(9.0, 0.009)],
                },
            },
            {
                "name": "grounding-dino",
                "paper_name": "grounding-dino-tiny",
                "quick": {
                    "original": _quick(22, 21, {"DS": 3, "DO": 2, "VG": 10, "TI": 1}, False),
                    "graphmend": _quick(12, 11, {"DS": 3, "DO": 2, "TI": 1}, False),
                },
                "equality": {
                    "bit_identical": False,
                    "problems": ["graphmend_compiled differs from the original eager output"],
                },
            },
            {
                "name": "clap",
                "paper_name": "clap-htsat-fused",
                "quick": {
                    "original": _quick(3, 2, {"DS": 3}, False),
                    "graphmend": {"error": "Traceback...\nRuntimeError: boom"},
                },
                "equality": {"bit_identical": None, "problems": []},
            },
            {
                "name": "chronos-bolt",
                "paper_name": "chronos-bolt-small",
                "skipped": "missing chronos",
            },
        ],
    }
