import { spawn } from 'node:child_process'
import { copyFileSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { dirname, join, relative } from 'node:path'
import { fileURLToPath } from 'node:url'
import { describe, expect, it, onTestFinished } from 'vitest'
import { makeTree } from '../fixtures/tree.js'
import { startFakeLlm } from '../helpers/fake-llm.js'
import { BIN, ROOT, TEST_ENV } from '../helpers/run.js'

/*
 * What a command loads at its start is what it costs (docs/development.md#start-up): each
 * command loads only the libraries it uses. These run the built binary with a loader hook
 * that records every bundle chunk it loads, and read what each chunk holds from the
 * bundle's metafile (bundle/meta.json, written by scripts/bundle.mjs). No timing: which
 * libraries, not how long.
 */

const RECORDER = fileURLToPath(new URL('../helpers/load-recorder.mjs', import.meta.url))

/** Libraries that only some runs use, each loaded where it is used (a forge, a provider, telemetry, the fleet's database, MCP, a tool's regex or glob engine). */
const LAZY = ['@octokit/', '@gitbeaker/', '@anthropic-ai/sdk/', '@opentelemetry/', 'pg/', 'pg-pool/', '@modelcontextprotocol/sdk/', 're2js/', 'picomatch/']

/** The PostgreSQL index's own code (its store, schema and migrations), loaded only when a database URL is set. */
const PG_INDEX = ['dist/storage/index/pg-store.js', 'dist/storage/index/pg-schema.js', 'dist/storage/index/pg-totals.js']

interface Meta {
  outputs: Record<string, { inputs: Record<string, unknown> }>
}

/**
 * The chunks a command loaded (paths under the checkout), the npm packages in them (by the path under
 * node_modules/) and ctxagent's own modules (dist/…). Each build (bundle/, and a command's own tree
 * such as bundle/run/) has its metafile beside its chunks.
 */
function modulesLoaded(loads: string): { chunks: string[]; packages: string[]; own: string[]; inputs: string[] } {
  const chunks = readFileSync(loads, 'utf8')
    .split('\n')
    .filter((url) => url.startsWith('file:'))
    .map((url) => relative(ROOT, fileURLToPath(url)))
    .filter((path) => path.startsWith('bundle/'))
  // bin/ctxagent's entry, then one build of the CLI (src/start.ts).
  expect(chunks).toContain('bundle/start.js')
  expect(chunks.filter((chunk) => chunk.endsWith('/cli.js'))).toHaveLength(1)
  const metas = new Map<string, Meta>()
  const metaOf = (chunk: string): Meta => {
    const dir = dirname(chunk)
    if (!metas.has(dir)) metas.set(dir, JSON.parse(readFileSync(join(ROOT, dir, 'meta.json'), 'utf8')) as Meta)
    return metas.get(dir) as Meta
  }
  const inputs = chunks.flatMap((chunk) => Object.keys(metaOf(chunk).outputs[chunk]?.inputs ?? {}))
  return {
    chunks,
    packages: [...new Set(inputs.flatMap((input) => /node_modules\/((?:@[^/]+\/)?[^/]+\/)/.exec(input)?.[1] ?? []))].sort(),
    own: inputs.filter((input) => input.startsWith('dist/')).sort(),
    inputs,
  }
}

/** Runs bin/ctxagent with the recorder; resolves with its exit code and the packages it loaded. */
function loadsOf(
  args: string[],
  dir: string,
  env: Record<string, string> = {},
): Promise<{ code: number; stderr: string; chunks: string[]; packages: string[]; own: string[]; inputs: string[] }> {
  const loads = join(dir, `loads-${args[0]}.txt`)
  writeFileSync(loads, '')
  return new Promise((resolve) => {
    const child = spawn(process.execPath, ['--import', RECORDER, BIN, ...args], {
      cwd: dir,
      env: { ...process.env, ...TEST_ENV, ...env, CTXAGENT_TEST_LOADS: loads },
      stdio: ['ignore', 'ignore', 'pipe'],
    })
    let stderr = ''
    child.stderr.on('data', (d: Buffer) => (stderr += d.toString()))
    child.on('close', (code) => resolve({ code: code ?? -1, stderr, ...modulesLoaded(loads) }))
  })
}

const lazyIn = (packages: string[]): string[] => packages.filter((p) => LAZY.some((lazy) => p === lazy))

describe('start-up loads', () => {
  it('--version loads no library but commander', async () => {
    const tree = makeTree()
    const got = await loadsOf(['--version'], tree.base)
    expect(got.code).toBe(0)
    expect(got.packages.filter((p) => p !== 'commander/')).toEqual([])
  })

  it('list loads neither the LLM SDKs nor the forge clients, telemetry, pg, MCP or re2js', async () => {
    const tree = makeTree()
    const config = join(tree.base, 'config.yaml')
    writeFileSync(config, 'llm:\n  provider: openai\n')
    const got = await loadsOf(['list', '--home', tree.base, '--config', config], tree.base)
    expect(got.stderr).toBe('')
    expect(got.code).toBe(0)
    expect(lazyIn(got.packages)).toEqual([])
    expect(got.packages).not.toContain('openai/')
    // Locks are taken by commands that write; list only reads.
    expect(got.packages).not.toContain('proper-lockfile/')
    // On tasks.db, the PostgreSQL index's own code (store, schema, migrations) is not loaded either.
    expect(got.own.filter((m) => PG_INDEX.includes(m))).toEqual([])
    // list reads the task directories: no index store and no task writer is compiled for it.
    expect(got.own.filter((m) => ['dist/storage/index/store.js', 'dist/storage/task/handle.js'].includes(m))).toEqual([])
  })

  it('stats loads no forge client and no zod: outcomes are read from the index, and only a refresh asks a forge', async () => {
    const tree = makeTree()
    const config = join(tree.base, 'config.yaml')
    writeFileSync(config, 'llm:\n  provider: openai\n')
    const env = { XDG_CACHE_HOME: join(tree.base, 'cache') }
    // reindex makes tasks.db and validates the config (yaml and zod, once: the validation cache).
    expect((await loadsOf(['reindex', '--home', tree.base, '--config', config], tree.base, env)).code).toBe(0)
    const got = await loadsOf(['stats', '--home', tree.base, '--config', config], tree.base, env)
    expect(got.stderr).toBe('')
    expect(got.code).toBe(0)
    expect(lazyIn(got.packages)).toEqual([])
    expect(got.packages.filter((p) => p === 'zod/' || p === 'yaml/')).toEqual([])
  })

  it('a config file validated before is not parsed again: no yaml, no zod, until its text changes (docs/configuration.md#the-validation-cache)', async () => {
    const tree = makeTree()
    const config = join(tree.base, 'config.yaml')
    writeFileSync(config, 'llm:\n  provider: openai\n  openai:\n    api_key: sk-cached-0123\n')
    const env = { XDG_CACHE_HOME: join(tree.base, 'cache') }
    const list = () => loadsOf(['list', '--home', tree.base, '--config', config], tree.base, env)
    const parsers = (got: { packages: string[] }) => got.packages.filter((p) => p === 'yaml/' || p === 'zod/')
    const first = await list()
    expect(first.code).toBe(0)
    expect(parsers(first)).toEqual(['yaml/', 'zod/'])
    const cached = readFileSync(join(tree.base, 'cache', 'ctxagent', 'config-cache.json'), 'utf8')
    expect(cached).not.toContain('sk-cached')
    const second = await list()
    expect(second.stderr).toBe('')
    expect(second.code).toBe(0)
    expect(parsers(second)).toEqual([])
    // Off, or one byte changed: validated again.
    expect(parsers(await loadsOf(['list', '--home', tree.base, '--config', config], tree.base, { ...env, CTXAGENT_CONFIG_CACHE: 'off' }))).toEqual([
      'yaml/',
      'zod/',
    ])
    writeFileSync(config, 'llm:\n  provider: openai\n  openai:\n    api_key: sk-cached-0124\n')
    expect(parsers(await list())).toEqual(['yaml/', 'zod/'])
    expect(parsers(await list())).toEqual([])
    // A file that no longer validates is refused as ever, though the one before it is cached.
    writeFileSync(config, 'llm:\n  provider: openai\n  openai:\n    api_kye: sk-cached-0124\n')
    const bad = await list()
    expect(bad.code).toBe(2)
    expect(bad.stderr).toContain('llm.openai.api_kye is not a known setting')
  })

  it('run with an OpenAI-compatible server loads the openai SDK and none of the libraries its task does not use, nor yaml once its config is validated', async () => {
    const tree = makeTree()
    const fake = await startFakeLlm()
    fake.queue.push({ calls: [{ name: 'finish', arguments: { summary: 'read it', status: 'done' } }] })
    const config = join(tree.base, 'config.yaml')
    writeFileSync(config, fake.configYaml())
    const ws = mkdtempSync(join(tmpdir(), 'ctxagent-ws-'))
    onTestFinished(() => rmSync(ws, { recursive: true, force: true }))
    writeFileSync(join(ws, 'README.md'), 'a workspace\n')
    // Its own cache: the second run takes the config's validation from the first's (docs/configuration.md#the-validation-cache).
    const env = { XDG_CACHE_HOME: join(tree.base, 'cache') }
    const run = () => loadsOf(['run', '--task', 'read the readme', '--workspace', ws, '--home', tree.base, '--config', config], tree.base, env)
    expect((await run()).packages).toContain('yaml/')
    // What it had loaded when its first request arrived: zod validates the tools' arguments, at the first call (src/tools/schema.ts).
    const before = join(tree.base, 'loads-before-request.txt')
    let first = true
    fake.fallback = () => {
      if (first) copyFileSync(join(tree.base, 'loads-run.txt'), before)
      first = false
      return { calls: [{ name: 'finish', arguments: { summary: 'read it', status: 'done' } }] }
    }
    const got = await run()
    expect(modulesLoaded(before).packages).not.toContain('zod/')
    expect(got.packages).toContain('zod/')
    expect(got.stderr).not.toContain('ctxagent:')
    expect(got.code).toBe(0)
    expect(fake.requests.length).toBeGreaterThan(1)
    expect(got.packages).toContain('openai/')
    // Of the SDK, its client's transport alone (scripts/bundle.mjs, openai-transport-only): the client, its core and
    // internals; no API resource, stream helper, vendored parser or other client (Azure, Bedrock).
    const sdk = got.inputs.filter((input) => input.startsWith('node_modules/openai/'))
    expect(sdk).toContain('node_modules/openai/client.mjs')
    expect(sdk.filter((input) => !/^node_modules\/openai\/(client\.mjs|version\.mjs|(core|internal|auth)\/)/.test(input))).toEqual([])
    expect(lazyIn(got.packages)).toEqual([])
    expect(got.own.filter((m) => PG_INDEX.includes(m))).toEqual([])
    // No YAML parser: neither for the config, nor for an environment file the repository does not have.
    expect(got.packages).not.toContain('yaml/')
    // From run's own build (scripts/bundle.mjs, src/start.ts): no chunk of the build of every command.
    expect(got.chunks.filter((chunk) => chunk !== 'bundle/start.js' && !chunk.startsWith('bundle/run/'))).toEqual([])
  })

  it('every other command loads from the build of all commands, also with run as the value of --home', async () => {
    const tree = makeTree()
    const list = await loadsOf(['list', '--home', tree.base], tree.base)
    expect(list.code).toBe(0)
    expect(list.chunks.filter((chunk) => chunk.startsWith('bundle/run/'))).toEqual([])
    expect(list.chunks).toContain('bundle/cli.js')
    // A global option's value is not the command (commandWord): `--home run list` is list, from bundle/.
    for (const state of ['running', 'paused', 'completed']) mkdirSync(join(tree.base, 'run', state), { recursive: true })
    const named = await loadsOf(['--home', 'run', 'list', '--json'], tree.base)
    expect(named.code).toBe(0)
    expect(named.chunks).toContain('bundle/cli.js')
  })
})
