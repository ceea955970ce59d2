// Bundles the compiled CLI (dist/cli.js) into bundle/, which bin/ctxagent runs, and once
// more into bundle/run/ with the run command alone (TREES, below); bundle/start.js picks one.
// Node resolves and compiles ESM modules one by one: the ~60 of ctxagent and its
// libraries cost ~60 ms of a command's ~180 ms start-up, and one bundle cuts that
// (BENCHMARKS.md, row startup). Dynamic imports (the openai SDK, node-cron, uuid) stay
// separate chunks, loaded only by the commands that use them. better-sqlite3 is a
// native addon and stays in node_modules. dist/ stays as it is, for the tests.
import { build } from 'esbuild'
import { createHash } from 'node:crypto'
import { readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { fileURLToPath } from 'node:url'

const root = fileURLToPath(new URL('..', import.meta.url))
// The config's defaults, computed here from the schema tsc just compiled: a command run
// without a config file takes them as they are instead of validating {} through zod at
// start-up (~0.9 ms; src/config/load.ts).
const { configSchemaOf } = await import(`${root}dist/config/schema.js`)
const defaults = JSON.stringify(configSchemaOf().parse({}))
// The build's identity: what a config file validated to is kept under it (src/config/config-cache.ts), so a
// build whose schema or validation differs in any way, or whose libraries do (package-lock.json), validates
// again. All of dist/ and the lock file: any change at all makes another identity, which costs one validation.
const buildHash = createHash('sha256')
for (const file of readdirSync(`${root}dist`, { recursive: true })
  .filter((f) => String(f).endsWith('.js'))
  .sort()) {
  buildHash.update(`${file}\0`).update(readFileSync(`${root}dist/${file}`))
}
buildHash.update(readFileSync(`${root}package-lock.json`))
const buildId = buildHash.digest('hex').slice(0, 16)
/**
 * pg asks at load whether it runs in a Cloudflare Worker; on Node 20 (no `navigator`) it does
 * so by making a `Response`, which loads undici, all of fetch: ~15 ms of every command that
 * loads pg (enqueue, the worker, each fleet task with the PostgreSQL index), ~60 ms on a busy
 * machine (bench fleet-enqueue-cli, issue 29). ctxagent runs on Node only: the answer is no.
 */
const pgOnNode = patchLibrary(
  'pg-on-node',
  /[\\/]pg[\\/]lib[\\/]stream\.js$/,
  'if (isCloudflareRuntime()) {',
  'if (false) {',
  'pg loads undici at start-up again',
)
/**
 * zod's namespace re-exports all of its 40-odd locales (366 KB of the bundle) from its core, so
 * every command that validates a config would load them; ctxagent uses none but English (which
 * zod's classic API imports itself). The namespace keeps `en` only: `z.locales.en()` still works.
 */
const zodEnglishOnly = {
  name: 'zod-english-only',
  setup(b) {
    b.onLoad({ filter: /[\\/]zod[\\/]v4[\\/]locales[\\/]index\.js$/ }, () => ({ contents: "export { default as en } from './en.js'", loader: 'js' }))
  },
}
/**
 * chalk's colour detection imports node:process as an ES module, and Node builds that module's
 * namespace by reading every property of `process`: its `report` getter loads the diagnostic
 * report into every command. The module is the global `process` itself.
 */
const processIsGlobal = {
  name: 'process-is-global',
  setup(b) {
    b.onResolve({ filter: /^(node:)?process$/ }, (args) => (args.kind === 'import-statement' ? { path: 'process', namespace: 'global-process' } : undefined))
    b.onLoad({ filter: /.*/, namespace: 'global-process' }, () => ({ contents: 'export default globalThis.process', loader: 'js' }))
  },
}
/**
 * commander requires node:child_process at load, for executable subcommands (`git-style` bin
 * files) that ctxagent has none of: ~5 ms of every command (loading it and dgram, net's
 * sockets). Its three calls of `childProcess.spawn` now require it when made.
 */
const commanderSpawnAtUse = patchLibrary(
  'commander-spawn-at-use',
  /[\\/]commander[\\/]lib[\\/]command\.js$/,
  "const childProcess = require('node:child_process');",
  "const childProcess = { spawn: (...a) => require('node:child_process').spawn(...a) };",
  'every command loads child_process again',
)
/**
 * ctxagent calls the OpenAI SDK's transport alone (`client.post('/chat/completions')`, its retries,
 * headers and errors: src/llm/openai-compatible.ts), never one of its API resources (`client.chat`,
 * `client.beta`, …). Its client module imports all 23 of them, and through them the SDK's stream
 * helpers: about 147 KB of what `run` compiles before its first request. Each resource the client
 * imports is here a class that keeps the client and has no method, so that a use of one fails at
 * once (`client.chat.completions` is undefined) instead of quietly doing something else. Each import
 * line becomes one line (the first also declares the stand-in), so the file's source map still holds.
 */
const OPENAI_RESOURCE_IMPORT = /^import (?:\* as (\w+)|\{ ?(\w+)(?: as (\w+))?,? ?\}) from "\.\/resources\/[\w/.-]+\.mjs";$/gm
const UNUSED_RESOURCES =
  'class __UnusedResource { constructor(client) { this._client = client } } const __unusedResources = new Proxy({}, { get: () => __UnusedResource });'
const openaiTransportOnly = {
  name: 'openai-transport-only',
  setup(b) {
    b.onLoad({ filter: /[\\/]openai[\\/]client\.mjs$/ }, (args) => {
      const text = readFileSync(args.path, 'utf8')
      let found = 0
      const contents = text.replace(OPENAI_RESOURCE_IMPORT, (_, namespace, name, alias) => {
        const declared = found++ === 0 ? `${UNUSED_RESOURCES} ` : ''
        return declared + (namespace ? `const ${namespace} = __unusedResources;` : `const ${alias ?? name} = __unusedResources.${name};`)
      })
      if (found === 0 || /from "\.\/resources[/.]/.test(contents))
        return {
          contents: text,
          loader: 'js',
          warnings: [
            {
              text: `openai-transport-only: ${args.path} no longer imports its resources as this plugin expects (${found} rewritten): run compiles all of them again`,
            },
          ],
        }
      return { contents, loader: 'js' }
    })
  },
}
/**
 * A plugin that replaces `find` with `replacement` in a library's file (`filter`); when a new
 * version of the library no longer has `find`, the file is bundled as it is and the build warns
 * with what is lost.
 */
function patchLibrary(name, filter, find, replacement, lost) {
  return {
    name,
    setup(b) {
      b.onLoad({ filter }, (args) => {
        const text = readFileSync(args.path, 'utf8')
        if (!text.includes(find)) return { contents: text, loader: 'js', warnings: [{ text: `${name}: '${find}' not found in ${args.path}: ${lost}` }] }
        return { contents: text.replace(find, replacement), loader: 'js' }
      })
    },
  }
}
/**
 * The commands with a build of their own, each the command's module in dist/ as cli.js imports it. esbuild cuts a
 * build's shared code into one chunk per set of entries (commands and lazy imports) that reach it; with every command
 * in one build, `run` loaded 85 chunks, ~40 ms of its start on Node 20 (resolving, reading and linking each). Built
 * with its command alone, the CLI is cut for that command: 47 (docs/development.md#start-up).
 */
const TREES = { run: './commands/run/run.js' }
/**
 * In a tree, cli.js's other commands are a module that says so: src/start.ts loads a tree only for its own command,
 * by the rule cli.ts loads commands by (commandWord), so a tree never asks for another.
 */
function oneCommand(name, own) {
  return {
    name: `only-${name}`,
    setup(b) {
      b.onResolve({ filter: /^\.\/commands\// }, (args) =>
        args.kind === 'dynamic-import' && args.importer === `${root}dist/cli.js` && args.path !== own
          ? { path: args.path, namespace: 'other-command' }
          : undefined,
      )
      b.onLoad({ filter: /.*/, namespace: 'other-command' }, (args) => ({
        contents: `throw new Error(${JSON.stringify(`bundle/${name}/ holds the ${name} command alone, not ${args.path} (src/start.ts chose it)`)})`,
        loader: 'js',
      }))
    },
  }
}
const options = {
  absWorkingDir: root,
  bundle: true,
  splitting: true,
  format: 'esm',
  platform: 'node',
  target: 'node20',
  // pg-native: pg's optional native driver, which ctxagent does not use. cli-table3: required from node_modules
  // when a table is drawn for a terminal (src/render.ts), never by piped output.
  external: ['better-sqlite3', 'pg-native', 'cli-table3'],
  define: {
    CTXAGENT_DEFAULT_CONFIG: JSON.stringify(defaults),
    CTXAGENT_BUILD_ID: JSON.stringify(buildId),
  },
  // Bundled CommonJS libraries call require() for Node's built-ins. One require for all chunks (they are all in
  // one build's folder, so each resolves alike): createRequire in each of the 40–80 chunks a command loads was ~0.3 ms apiece.
  banner: {
    js: "import { createRequire as __ctxagentRequire } from 'node:module'; const require = (globalThis[Symbol.for('ctxagent.require')] ??= __ctxagentRequire(import.meta.url));",
  },
  // Node parses and compiles every byte of a chunk it loads (~40 ms a MB of CPU on this machine's Node 20, where no
  // compile cache can keep the result): whitespace and syntax minified, a third fewer bytes. Names are kept (no
  // identifier minifying), so errors, stack traces and class names read as before; the source maps cover the rest.
  minifyWhitespace: true,
  minifySyntax: true,
  // Through dist/*.js.map down to src/*.ts, for CTXAGENT_DEBUG=1 stack traces.
  sourcemap: true,
  logLevel: 'warning',
  metafile: true,
}
const plugins = [pgOnNode, zodEnglishOnly, processIsGlobal, commanderSpawnAtUse, openaiTransportOnly]
rmSync(`${root}bundle`, { recursive: true, force: true })
const all = await build({ ...options, entryPoints: ['dist/cli.js'], outdir: 'bundle', plugins })
writeFileSync(`${root}bundle/meta.json`, JSON.stringify(all.metafile))
for (const [name, own] of Object.entries(TREES)) {
  const tree = await build({ ...options, entryPoints: ['dist/cli.js'], outdir: `bundle/${name}`, plugins: [...plugins, oneCommand(name, own)] })
  const module = `dist/commands/${own.slice('./commands/'.length)}`
  if (!Object.values(tree.metafile.outputs).some((o) => o.entryPoint === module))
    throw new Error(`bundle/${name}/ has no ${module}: is ${own} still how dist/cli.js imports the ${name} command?`)
  // And none of the others: were the stub's match to stop matching, the tree would silently be a second build of all.
  const others = all.metafile.inputs['dist/cli.js'].imports.flatMap((i) => (i.kind === 'dynamic-import' && i.path !== module ? [i.path] : []))
  const leaked = others.filter((command) => command in tree.metafile.inputs)
  if (others.length === 0 || leaked.length > 0)
    throw new Error(`bundle/${name}/ holds other commands (${leaked.join(', ') || 'none found to check'}): see oneCommand()`)
  writeFileSync(`${root}bundle/${name}/meta.json`, JSON.stringify(tree.metafile))
}
// What bin/ctxagent loads: one small module that picks the build (src/start.ts), which it imports by a path made at run time.
await build({
  ...options,
  entryPoints: ['dist/start.js'],
  outdir: 'bundle',
  splitting: false,
  banner: {},
  metafile: false,
  define: { CTXAGENT_TREES: JSON.stringify(Object.keys(TREES)) },
})
