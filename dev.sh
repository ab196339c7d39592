#!/usr/bin/env bash
# One entry point for developers and CI: sets up .venv from pyproject.toml, then runs,
# tests or lints. Needs only python3 (3.11+) on the machine.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cd "$ROOT"

VENV="$ROOT/.venv"
STAMP="$VENV/.groupwire-installed"
PYTHON="${PYTHON:-python3}"
# The sans-I/O cores that must stay `mypy --strict` clean.
STRICT_CORES=(protocol broker/coordinator client/assignors)

usage() {
    cat <<'EOF'
Usage: ./dev.sh COMMAND [ARGS...]

Commands:
  run [ARGS]     the short demo (groupwire demo), then the broker with its storage
                 in ./data (.venv/bin/groupwire broker --data-dir ./data ARGS)
  demo [ARGS]    only the demo: a broker, a producer, three consumers, one killed
  test [ARGS]    run the test suite (python -m pytest -q ARGS),
                 e.g. ./dev.sh test tests/unit -x
  lint           ruff check, then mypy --strict on the sans-I/O cores
  setup          only create or update .venv
  -h, --help     show this help

Every command first creates .venv with python3 -m venv if it is missing and installs
the project with its dev and spark extras (-e '.[dev,spark]') whenever pyproject.toml is newer than the
last install. Set PYTHON to choose the interpreter that creates .venv (3.11+).
EOF
}

die() {
    echo "dev.sh: $*" >&2
    exit 1
}

ensure_venv() {
    if [[ -x "$VENV/bin/python" ]] && ! "$VENV/bin/python" -c '' 2>/dev/null; then
        echo "dev.sh: .venv does not run here (made on another machine?); recreating it" >&2
        "$PYTHON" -m venv --clear "$VENV"
        rm -f "$STAMP"
    fi
    if [[ ! -x "$VENV/bin/python" ]]; then
        command -v "$PYTHON" >/dev/null 2>&1 || die "$PYTHON not found; install Python 3.11+"
        "$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 11))' \
            || die "$PYTHON is $("$PYTHON" -V 2>&1); groupwire needs Python 3.11+"
        echo "dev.sh: creating .venv with $("$PYTHON" -V 2>&1)" >&2
        "$PYTHON" -m venv "$VENV"
        rm -f "$STAMP"
    fi
    if [[ ! -f "$STAMP" || pyproject.toml -nt "$STAMP" ]]; then
        echo "dev.sh: installing groupwire and its dev tools into .venv" >&2
        "$VENV/bin/python" -m pip install --quiet --upgrade pip
        "$VENV/bin/python" -m pip install --quiet -e '.[dev,spark]'
        touch "$STAMP"
    fi
}

lint() {
    local cores=() dir
    for dir in "${STRICT_CORES[@]}"; do
        if [[ -d "$dir" ]]; then
            cores+=("$dir")
        else
            echo "dev.sh: $dir does not exist yet; not type-checked" >&2
        fi
    done
    # Run both even when the first fails, so one pass shows every problem.
    local failed=0
    echo "== ruff check" >&2
    "$VENV/bin/ruff" check . || failed=1
    if ((${#cores[@]})); then
        echo "== mypy --strict ${cores[*]}" >&2
        "$VENV/bin/mypy" --strict --no-warn-unused-configs "${cores[@]}" || failed=1
    fi
    echo "== mypy broker client pipeline (the shells)" >&2
    "$VENV/bin/mypy" --no-warn-unused-configs broker client pipeline || failed=1
    return "$failed"
}

main() {
    local cmd="${1:-}"
    case "$cmd" in
        -h | --help | help)
            usage
            return 0
            ;;
        "")
            usage >&2
            return 2
            ;;
    esac
    shift
    case "$cmd" in
        run)
            ensure_venv
            "$VENV/bin/groupwire" demo
            echo "dev.sh: demo done; now serving the broker on 127.0.0.1:9092 (data in ./data)," \
                 "metrics on :9100; Ctrl-C stops it" >&2
            exec "$VENV/bin/groupwire" broker --data-dir ./data "$@"
            ;;
        demo)
            ensure_venv
            exec "$VENV/bin/groupwire" demo "$@"
            ;;
        test)
            ensure_venv
            exec "$VENV/bin/python" -m pytest -q "$@"
            ;;
        lint)
            ensure_venv
            lint
            ;;
        setup)
            ensure_venv
            ;;
        *)
            echo "dev.sh: unknown command '$cmd'" >&2
            usage >&2
            return 2
            ;;
    esac
}

main "$@"
