#!/usr/bin/env bash
# Bundle the companion extension's language client (vscode-languageclient, pinned with its
# checksums in vscode_config/extension-client/package-lock.json) into one file that the
# extension loads: vscode_config/extension/lib/languageclient.js. Runs at build time only;
# a session never downloads anything.
set -euo pipefail
cd "$(dirname "$0")/../vscode_config/extension-client"
if ! command -v npm >/dev/null; then
  echo "podcode: npm is needed to build the companion's language client (install Node.js)" >&2
  exit 1
fi
npm ci --ignore-scripts --no-audit --no-fund --loglevel=error
node_modules/.bin/esbuild entry.js --bundle --platform=node --format=cjs --target=node18 \
  --external:vscode --minify --legal-comments=eof --log-level=warning \
  --outfile=../extension/lib/languageclient.js
# The licenses of what the bundle holds, beside it (and in the packed extension).
for package in vscode-languageclient vscode-languageserver-protocol vscode-jsonrpc \
  vscode-languageserver-types semver minimatch brace-expansion balanced-match; do
  licence=$(find node_modules/"$package" -maxdepth 1 -iname 'licen[cs]e*' | head -1)
  printf '== %s %s ==\n' "$package" "$(node -p "require('./node_modules/$package/package.json').version")"
  if [ -n "$licence" ]; then cat "$licence"; else node -p "require('./node_modules/$package/package.json').license"; fi
  printf '\n'
done > ../extension/lib/languageclient.LICENSES.txt
