#!/usr/bin/env bash
# Install the published npm MCP server the tests run (tests/test_mcp_fs.py):
# @modelcontextprotocol/server-filesystem, pinned, into the project-local
# prefix .npm-mcp/ with Debian's node and npm (installed through apt-get when
# missing). No global install, and nothing is downloaded at test time: the
# tests start `node .npm-mcp/node_modules/.../dist/index.js` directly.
#
#   tools/setup_node.sh      idempotent; returns at once when the pinned version is there
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"

PREFIX=.npm-mcp
PACKAGE=@modelcontextprotocol/server-filesystem
VERSION=2026.8.31
INSTALLED="$PREFIX/node_modules/$PACKAGE"
# The server needs a Node with ES2022 and fetch; Debian 12 ships 18.
MIN_NODE_MAJOR=18

installed_version() {
    [ -f "$INSTALLED/package.json" ] && [ -f "$INSTALLED/dist/index.js" ] || return 1
    sed -n 's/^[[:space:]]*"version":[[:space:]]*"\([^"]*\)".*/\1/p' "$INSTALLED/package.json" | head -n1
}

if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
    if ! command -v apt-get >/dev/null; then
        echo "setup_node: node and npm are missing and there is no apt-get here; install Node.js >= $MIN_NODE_MAJOR with npm" >&2
        exit 3
    fi
    SUDO=""
    [ "$(id -u)" = 0 ] || SUDO="sudo"
    echo "setup_node: installing node and npm through apt-get"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends \
        nodejs npm >/dev/null
fi

NODE_MAJOR=$(node -p 'process.versions.node.split(".")[0]')
if [ "$NODE_MAJOR" -lt "$MIN_NODE_MAJOR" ]; then
    echo "setup_node: node $(node --version) is too old for $PACKAGE (need >= $MIN_NODE_MAJOR)" >&2
    exit 3
fi

if [ "$(installed_version || true)" = "$VERSION" ]; then
    exit 0
fi

echo "setup_node: installing $PACKAGE@$VERSION into $PREFIX/"
mkdir -p "$PREFIX"
# --prefix keeps it in the project; no audit/fund round trips, and npm's
# update check stays quiet.
NPM_CONFIG_UPDATE_NOTIFIER=false npm install --prefix "$PREFIX" --no-audit --no-fund \
    --loglevel=error "$PACKAGE@$VERSION" >/dev/null

if [ "$(installed_version || true)" != "$VERSION" ]; then
    echo "setup_node: $PACKAGE@$VERSION did not install into $INSTALLED" >&2
    exit 1
fi
