# Shared by run_tf452.sh and run_latest.sh (sourced, not run):
# make_bench_venv VENV TRANSFORMERS_SPEC -- create VENV once with the pinned packages.
# torch is pinned to 2.13.0 (a local +cpu build is picked where pip offers one).

make_bench_venv() {
    local venv="$1" transformers_spec="$2" root
    root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
    if [ ! -x "$venv/bin/python" ]; then
        echo "creating $venv ($transformers_spec, torch==2.13.0)" >&2
        "${PYTHON:-python3}" -m venv "$venv"
        "$venv/bin/python" -m pip install --quiet --upgrade pip
        "$venv/bin/python" -m pip install --quiet "torch==2.13.0" "$transformers_spec" "matplotlib>=3.7"
        # chronos-bolt is optional: its model is skipped when this does not install.
        "$venv/bin/python" -m pip install --quiet "chronos-forecasting==2.3.2" "torch==2.13.0" \
            "$transformers_spec" \
            || echo "chronos-forecasting did not install; chronos-bolt will be skipped" >&2
    fi
    "$venv/bin/python" -m pip install --quiet --no-deps -e "$root"
}
