// Bundles the compiled CLI (dist/cli.js) into bundle/, which bin/ctxagent runs.
// Node resolves and compiles ESM modules one by one: the ~60 of ctxagent and its
// libraries cost ~60 ms of a command's ~180 ms start-up, and one bundle cuts that
// (BENCHMARKS.md, row startup). Dynamic imports (the openai SDK, node-cron, uuid) stay
// separate chunks, loaded only by the commands that use them. better-sqlite3 is a
// native addon and stays in node_modules. dist/ stays as it is, for the tests.
import { build } from 'esbuild'
import { rmSync } from 'node:fs'
import { fileURLToPath } from 'node:url'

const root = fileURLToPath(new URL('..', import.meta.url))
// The config's defaults, computed here from the schema tsc just compiled: a command run
// without a config file takes them as they are instead of validating {} through zod at
// start-up (~0.9 ms; src/config/load.ts).
const { configSchema } = await import(`${root}dist/config/schema.js`)
const defaults = JSON.stringify(configSchema.parse({}))
rmSync(`${root}bundle`, { recursive: true, force: true })
await build({
  absWorkingDir: root,
  entryPoints: ['dist/cli.js'],
  outdir: 'bundle',
  bundle: true,
  splitting: true,
  format: 'esm',
  platform: 'node',
  target: 'node20',
  // pg-native: pg's optional native driver, which ctxagent does not use.
  external: ['better-sqlite3', 'pg-native'],
  define: { CTXAGENT_DEFAULT_CONFIG: JSON.stringify(defaults) },
  // Bundled CommonJS libraries call require() for Node's built-ins.
  banner: { js: "import { createRequire as __ctxagentRequire } from 'node:module'; const require = __ctxagentRequire(import.meta.url);" },
  // Through dist/*.js.map down to src/*.ts, for CTXAGENT_DEBUG=1 stack traces.
  sourcemap: true,
  logLevel: 'warning',
})
