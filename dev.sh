#!/usr/bin/env bash
# One entry point for developers and CI: sets up .venv from pyproject.toml, then runs,
# tests or lints. Needs only python3 (3.11+) on the machine.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cd "$ROOT"

VENV="$ROOT/.venv"
STAMP="$VENV/.groupwire-installed"
PYTHON="${PYTHON:-python3}"
# The sans-I/O cores that must stay `mypy --strict` clean, as modules of the one package.
STRICT_CORES=(groupwire.protocol groupwire.broker.coordinator groupwire.broker.cluster
              groupwire.broker.topics groupwire.broker.producers groupwire.broker.transactions
              groupwire.client.assignors)
# The layers' folders, each mapped into `groupwire` (pyproject's [tool.setuptools.package-dir]).
LAYERS=(protocol broker client pipeline cli)
# Where lint lays the package out as it is installed, for tools that read files rather
# than import (mypy, import-linter): folders, with links to the repository's files.
TYPECHECK_TREE="$ROOT/build/typecheck"

usage() {
    cat <<'EOF'
Usage: ./dev.sh COMMAND [ARGS...]

Commands:
  run [ARGS]     the short demo (groupwire demo), then the broker with its storage
                 in ./data (.venv/bin/groupwire broker --data-dir ./data ARGS)
  demo [ARGS]    only the demo: a broker, a producer, three consumers, one killed
  groupwire ARGS the groupwire command from .venv (.venv/bin/groupwire ARGS), e.g.
                 ./dev.sh groupwire topics list; or `source .venv/bin/activate`
  test [ARGS]    run the test suite (python -m pytest -q ARGS),
                 e.g. ./dev.sh test tests/unit -x
  bench [ARGS]   the benchmarks, from this checkout (python -m bench.run ARGS; bench/
                 is not part of the installed package), e.g. ./dev.sh bench heartbeat
  lint           ruff check, mypy (--strict on the sans-I/O cores), the layer
                 contract (lint-imports) and the docs site (mkdocs build --strict)
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

# mypy and import-linter find modules by path; the editable install maps them with an
# import hook they cannot see. Lay the package out as the wheel does, linking each file.
package_tree() {
    rm -rf "$TYPECHECK_TREE"
    mkdir -p "$TYPECHECK_TREE"
    cp -rs "$ROOT/groupwire" "$TYPECHECK_TREE/groupwire"
    local layer
    for layer in "${LAYERS[@]}"; do
        cp -rs "$ROOT/$layer" "$TYPECHECK_TREE/groupwire/$layer"
    done
    find "$TYPECHECK_TREE" -name __pycache__ -prune -exec rm -rf {} +
}

lint() {
    # Run every step even when one fails, so one pass shows every problem.
    local failed=0 strict=() module
    for module in "${STRICT_CORES[@]}"; do strict+=(-p "$module"); done
    echo "== ruff check" >&2
    "$VENV/bin/ruff" check . || failed=1
    package_tree
    echo "== mypy --strict ${STRICT_CORES[*]}" >&2
    (cd "$TYPECHECK_TREE" && MYPYPATH="$TYPECHECK_TREE" "$VENV/bin/mypy" \
        --config-file "$ROOT/pyproject.toml" --cache-dir "$ROOT/.mypy_cache" \
        --strict --no-warn-unused-configs "${strict[@]}") || failed=1
    echo "== mypy groupwire (the whole package)" >&2
    (cd "$TYPECHECK_TREE" && MYPYPATH="$TYPECHECK_TREE" "$VENV/bin/mypy" \
        --config-file "$ROOT/pyproject.toml" --cache-dir "$ROOT/.mypy_cache" \
        --no-warn-unused-configs -p groupwire) || failed=1
    echo "== lint-imports (the layer contract in pyproject.toml)" >&2
    (cd "$TYPECHECK_TREE" && PYTHONPATH="$TYPECHECK_TREE" "$VENV/bin/lint-imports" \
        --no-cache "$ROOT/pyproject.toml") || failed=1
    if [[ -f mkdocs.yml ]]; then
        echo "== mkdocs build --strict" >&2
        PYTHONPATH="$TYPECHECK_TREE" NO_MKDOCS_2_WARNING=1 "$VENV/bin/mkdocs" build --strict --quiet \
            --site-dir "$ROOT/build/site" || failed=1
    fi
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
        groupwire)
            ensure_venv
            exec "$VENV/bin/groupwire" "$@"
            ;;
        test)
            ensure_venv
            exec "$VENV/bin/python" -m pytest -q "$@"
            ;;
        bench)
            ensure_venv
            exec "$VENV/bin/python" -m bench.run "$@"
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
