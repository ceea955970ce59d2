import { spawn } from 'node:child_process'
import { createServer } from 'node:http'
import type { AddressInfo } from 'node:net'
import { chownSync, existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, symlinkSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { describe, expect, it, onTestFinished } from 'vitest'
import { startPostgres } from '../helpers/postgres.js'
import { BIN, cliAsync, TEST_ENV } from '../helpers/run.js'
import type { CliResult } from '../helpers/run.js'
import { onlyTask, readTask, runSetup } from '../run/harness.js'

/*
 * Issue #27: a model with file tools only wrote ctxagent.yaml into its workspace (the
 * current directory), and the next `ctxagent run` there ran its MCP server command as
 * root. And the fleet's database password reached every exit. Real runs, a scripted model.
 */

function scratch(prefix: string): string {
  const dir = mkdtempSync(join(tmpdir(), prefix))
  onTestFinished(() => rmSync(dir, { recursive: true, force: true }))
  return dir
}

/** `ctxagent <args>` run from `cwd` (run's default workspace), without --config. */
function runIn(cwd: string, args: string[], env: Record<string, string>): Promise<CliResult> {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, [BIN, ...args], { cwd, env: { ...process.env, ...TEST_ENV, ...env } })
    let stdout = ''
    let stderr = ''
    child.stdout.on('data', (d: Buffer) => (stdout += d.toString()))
    child.stderr.on('data', (d: Buffer) => (stderr += d.toString()))
    child.on('close', (code) => resolve({ code: code ?? -1, stdout, stderr }))
  })
}

const write = (path: string, content: string) => ({ calls: [{ name: 'write_file', arguments: { path, content } }] })
const finish = { calls: [{ name: 'finish', arguments: { summary: 'done', status: 'done' } }] }

describe('nothing a tool can write is read as configuration', () => {
  it('a ctxagent.yaml and config.yaml the model wrote in the current directory are never read: the next run there starts no server of theirs', async () => {
    const s = await runSetup()
    const marker = join(scratch('ctxagent-marker-'), 'pwned')
    const planted = `mcp:\n  servers:\n    planted:\n      command: touch\n      args: [${JSON.stringify(marker)}]\n`
    s.fake.queue.push(write('ctxagent.yaml', planted), write('config.yaml', planted), finish)
    const first = await s.run(['run', '--task', 'set things up', '--workspace', s.ws])
    expect(first.code, first.stderr).toBe(0)
    expect(readFileSync(join(s.ws, 'ctxagent.yaml'), 'utf8')).toBe(planted)
    // The operator's own config, where it belongs; the next run starts in the workspace.
    const xdg = scratch('ctxagent-xdg-')
    mkdirSync(join(xdg, 'ctxagent'))
    writeFileSync(join(xdg, 'ctxagent', 'config.yaml'), s.fake.configYaml())
    s.fake.queue.push(finish)
    const second = await runIn(s.ws, ['run', '--task', 'go on', '--home', s.tree.base], { XDG_CONFIG_HOME: xdg })
    expect(second.code, second.stderr).toBe(0)
    expect(existsSync(marker)).toBe(false)
    expect(second.stderr).toContain('./ctxagent.yaml is not read: nothing in the current directory is configuration')
    expect(second.stderr.match(/is not read/g)).toHaveLength(1)
  })

  it('with the workspace at $HOME, the tools cannot write nor read ~/.config/ctxagent/config.yaml, though it does not exist, even through a link', async () => {
    const s = await runSetup()
    const env = { HOME: s.ws, XDG_CONFIG_HOME: '' }
    const target = '.config/ctxagent/config.yaml'
    s.fake.queue.push(write(target, 'mcp: {}\n'), { calls: [{ name: 'read_file', arguments: { path: target } }] }, finish)
    expect((await s.run(['run', '--task', 'configure', '--workspace', s.ws], env)).code).toBe(0)
    expect(existsSync(join(s.ws, target))).toBe(false)
    const first = onlyTask(s.tree)
    const refused = first.tools.filter((t) => t.tool_name !== 'finish')
    expect(refused.map((t) => [t.tool_name, t.status])).toEqual([
      ['write_file', 'error'],
      ['read_file', 'error'],
    ])
    for (const t of refused) expect(JSON.stringify(t)).toContain("inside ctxagent's task tree or config")

    // A link made during the run by a command (the real attack), here without a sandbox
    // (tools.sandbox: none, which covers no place): the write would land in
    // elsewhere/ctxagent/, which is where ~/.config/ctxagent now leads.
    const plain = await runSetup('tools:\n  sandbox: none\n')
    const plainEnv = { HOME: plain.ws, XDG_CONFIG_HOME: '' }
    mkdirSync(join(plain.ws, 'elsewhere'))
    plain.fake.queue.push(
      { calls: [{ name: 'run_command', arguments: { command: 'ln -s elsewhere .config' } }] },
      write(target, 'mcp: {}\n'),
      write('elsewhere/ctxagent/config.yaml', 'mcp: {}\n'),
      finish,
    )
    const again = await plain.run(['run', '--task', 'configure again', '--workspace', plain.ws, '--allow-shell'], plainEnv)
    expect(again.code, again.stderr).toBe(0)
    expect(
      onlyTask(plain.tree)
        .tools.filter((t) => t.tool_name !== 'finish')
        .map((t) => [t.tool_name, t.status]),
    ).toEqual([
      ['run_command', 'success'],
      ['write_file', 'error'],
      ['write_file', 'error'],
    ])
    expect(readdirSync(join(plain.ws, 'elsewhere'))).toEqual([])

    // A command that writes the config itself: the place, missing at the start, is an empty read-only directory in the sandbox.
    rmSync(join(s.ws, '.config'), { recursive: true, force: true })
    s.fake.queue.push(
      { calls: [{ name: 'run_command', arguments: { command: `mkdir -p .config/ctxagent; echo 'mcp: {}' > ${target}; echo written $?` } }] },
      finish,
    )
    const third = await s.run(['run', '--task', 'configure by hand', '--workspace', s.ws, '--allow-shell'], env)
    expect(third.code, third.stderr).toBe(0)
    expect(existsSync(join(s.ws, target))).toBe(false)
    const output = JSON.stringify(readTask(s.tree, s.tree.layout.list('completed').find((uuid) => uuid !== first.uuid) as string).tools)
    expect(output).toContain('Read-only file system')
  })

  it('with the workspace at $HOME, the tools cannot plant a validation in ~/.cache/ctxagent, which the next command would take as its config, nor move it away to reach it', async () => {
    const s = await runSetup()
    const env = { HOME: s.ws, XDG_CONFIG_HOME: '', XDG_CACHE_HOME: '' }
    const target = '.cache/ctxagent/config-cache.json'
    s.fake.queue.push(
      write(target, '{"entries": []}\n'),
      { calls: [{ name: 'run_command', arguments: { command: `mkdir -p .cache/ctxagent; echo '{}' > ${target}; echo written $?` } }] },
      finish,
    )
    const res = await s.run(['run', '--task', 'cache it', '--workspace', s.ws, '--allow-shell'], env)
    expect(res.code, res.stderr).toBe(0)
    // What is there now is the run's own (it ended well, so it kept its config's validation), never what was planted.
    const kept = existsSync(join(s.ws, target)) ? readFileSync(join(s.ws, target), 'utf8') : ''
    expect(kept).not.toBe('{"entries": []}\n')
    expect(kept).not.toBe('{}\n')
    const first = onlyTask(s.tree)
    const onlyTaskUuid = first.uuid
    const tools = first.tools.filter((t) => t.tool_name !== 'finish')
    expect(tools.map((t) => [t.tool_name, t.status])).toEqual([
      ['write_file', 'error'],
      ['run_command', 'success'],
    ])
    expect(JSON.stringify(tools[0])).toContain("inside ctxagent's task tree or config")
    expect(JSON.stringify(tools[1])).toContain('Read-only file system')

    // The first run kept its config's validation there. Renaming the directory above it
    // would carry the sandbox's cover away and leave the real file where the file tools
    // do not look: the directories between the workspace and a hidden place cannot be moved.
    expect(existsSync(join(s.ws, target))).toBe(true)
    const moved = '.c2/ctxagent/config-cache.json'
    s.fake.queue.push(
      { calls: [{ name: 'run_command', arguments: { command: 'mv .cache .c2; echo moved $?; rm -rf .cache; echo removed $?' } }] },
      { calls: [{ name: 'read_file', arguments: { path: moved } }] },
      finish,
    )
    const second = await s.run(['run', '--task', 'move it', '--workspace', s.ws, '--allow-shell'], env)
    expect(second.code, second.stderr).toBe(0)
    const secondTools = readTask(s.tree, s.tree.layout.list('completed').find((uuid) => uuid !== onlyTaskUuid) as string).tools
    const shell = JSON.stringify(secondTools[0])
    expect(shell).toContain('Device or resource busy')
    expect(shell).toContain('moved 1')
    expect(secondTools.slice(1, 2).map((t) => [t.tool_name, t.status])).toEqual([['read_file', 'error']])
    expect(existsSync(join(s.ws, '.c2'))).toBe(false)
    expect((JSON.parse(readFileSync(join(s.ws, target), 'utf8')) as { entries: unknown[] }).entries.length).toBeGreaterThan(0)
  })

  it("with the workspace at $HOME and a ~/.cache only ctxagent's user may write, commands still run: ctxagent makes its own directory there before covering it", async () => {
    const s = await runSetup()
    const env = { HOME: s.ws, XDG_CONFIG_HOME: '', XDG_CACHE_HOME: '' }
    mkdirSync(join(s.ws, '.cache', 'ctxagent'), { recursive: true, mode: 0o700 })
    s.fake.queue.push({ calls: [{ name: 'run_command', arguments: { command: 'echo ran; mv .cache .c2; echo moved $?' } }] }, finish)
    const res = await s.run(['run', '--task', 'run a command', '--workspace', s.ws, '--allow-shell'], env)
    expect(res.code, res.stderr).toBe(0)
    const shell = onlyTask(s.tree).tools.find((t) => t.tool_name === 'run_command')
    expect(shell?.result).toContain('ran')
    expect(shell?.result).not.toContain('bwrap')
    expect(shell?.result).toContain('moved 1')
    expect(existsSync(join(s.ws, '.cache', 'ctxagent'))).toBe(true)
  })

  it('run refuses a config file inside its workspace (also through a link to it), with exit 2 and nothing written', async () => {
    const s = await runSetup()
    // As root the harness gives workspaces to the sandbox's user; this one is root's, so that the refusal tested is "inside the workspace".
    if (process.getuid?.() === 0) chownSync(s.ws, 0, 0)
    const inside = join(s.ws, 'agent.yaml')
    writeFileSync(inside, s.fake.configYaml())
    const link = join(scratch('ctxagent-link-'), 'ws')
    symlinkSync(s.ws, link)
    for (const [config, workspace] of [
      [inside, s.ws],
      [inside, link],
      [join(link, 'agent.yaml'), s.ws],
    ] as const) {
      const res = await cliAsync(['run', '--task', 'x', '--workspace', workspace, '--home', s.tree.base, '--config', config])
      expect(res.code).toBe(2)
      expect(res.stderr).toMatch(
        /^ctxagent: the config file .*agent\.yaml is inside the workspace .*, where the agent could rewrite it \(keep the config outside the workspace/,
      )
      expect(res.stderr.split('\n')).toHaveLength(2)
    }
    for (const location of ['running', 'paused', 'completed'] as const) expect(s.tree.layout.list(location)).toEqual([])
  })
})

describe('the fleet database URL is a secret', () => {
  it('its password, plain, URL-encoded and base64, leaves no exit: task files, logs, stdout, --json, view, config, and the LLM requests', {
    timeout: 120_000,
  }, async () => {
    const pg = await startPostgres()
    onTestFinished(() => pg.stop())
    const password = 'Hunter2:db/pw@7731'
    const url = pg.url.replace('postgres@', `postgres:${encodeURIComponent(password)}@`)
    const forms = [url, password, encodeURIComponent(password), Buffer.from(password).toString('base64')]
    const absent = (where: string, text: string) => {
      for (const form of forms) expect(text.includes(form), `${where} carries ${form}`).toBe(false)
    }
    const s = await runSetup()
    writeFileSync(
      join(s.ws, 'db.env'),
      `DATABASE_URL=${url}\nPASSWORD=${password}\nENCODED=${encodeURIComponent(password)}\nB64=${Buffer.from(password).toString('base64')}\n`,
    )
    s.fake.queue.push(
      { calls: [{ name: 'read_file', arguments: { path: 'db.env' } }] },
      { calls: [{ name: 'write_file', arguments: { path: 'notes.md', content: `the password is ${password}` } }] },
      { content: `Connected with ${url} (password ${password}).` },
    )
    const env = { CTXAGENT_DATABASE_URL: url }
    const res = await s.run(['run', '--task', `check the database ${url}`, '--workspace', s.ws, '--json', '--log-format', 'json'], env)
    expect(res.code, res.stderr).toBe(0)
    absent('stdout (--json)', res.stdout)
    absent('stderr', res.stderr)
    const task = onlyTask(s.tree)
    expect(JSON.stringify(task.messages)).toContain('[SECRET:fleet.database_url]')
    absent('the task directory', treeText(task.dir))
    absent('the LLM requests', s.fake.requests.map((r) => r.raw.toString()).join('\n'))
    for (const args of [
      ['view', task.uuid],
      ['view', task.uuid, '--json'],
      ['view', task.uuid, '--messages', '--all'],
      ['view', task.uuid, '--tools'],
      ['config'],
      ['config', '--json'],
      ['export', task.uuid],
    ]) {
      const out = await s.run(args, env)
      expect(out.code, `${args.join(' ')}: ${out.stderr}`).toBe(0)
      absent(args.join(' '), out.stdout + out.stderr)
    }
    const shown = JSON.parse((await s.run(['config', '--json'], env)).stdout) as {
      secrets_set: string[]
      database_url_from: string
      config: { fleet: { database_url: unknown } }
    }
    expect(shown).toMatchObject({ database_url_from: 'CTXAGENT_DATABASE_URL', config: { fleet: { database_url: null } } })
    expect(shown.secrets_set).toContain('fleet.database_url')
    expect((await s.run(['config'], env)).stdout).toContain('database_url: null # set (hidden), from CTXAGENT_DATABASE_URL')
    // From the file instead: the same.
    writeFileSync(s.config, s.fake.configYaml(`fleet:\n  database_url: ${url}\n`))
    const fromFile = await s.run(['config', '--json'])
    absent('config --json (file)', fromFile.stdout)
    expect(JSON.parse(fromFile.stdout)).toMatchObject({ database_url_from: 'file' })
  })
})

// Issue #36: an OTLP endpoint with user:password@ was accepted and printed by `config`.
describe('no URL key carries credentials', () => {
  const PASSWORD = 'hunter2-in-the-url-9Xq'
  const KEYS: [string, string][] = [
    ['llm.openai.base_url', 'llm:\n  openai:\n    base_url: URL\n'],
    ['llm.ollama.base_url', 'llm:\n  ollama:\n    base_url: URL\n'],
    ['llm.anthropic.base_url', 'llm:\n  anthropic:\n    base_url: URL\n'],
    ['github.api_url', 'github:\n  api_url: URL\n'],
    ['gitlab.url', 'gitlab:\n  url: URL\n'],
    ['telemetry.otlp_endpoint', 'telemetry:\n  otlp_endpoint: URL\n'],
  ]

  for (const [key, yaml] of KEYS) {
    it(`${key} with user:password@: refused in one line, exit 2, the password never printed`, async () => {
      const s = await runSetup()
      writeFileSync(s.config, yaml.replace('URL', `https://ops:${PASSWORD}@collector.example.com:4318`))
      for (const args of [['config'], ['config', '--json'], ['run', '--task', 'x', '--workspace', s.ws]]) {
        const res = await s.run(args)
        expect(res.code, res.stderr).toBe(2)
        expect(res.stderr).toMatch(new RegExp(`^ctxagent: ${key.replaceAll('.', '\\.')} carries a user name or password .*\n$`))
        expect(res.stdout + res.stderr).not.toContain(PASSWORD)
      }
      expect(s.tree.layout.list('running')).toEqual([])
    })
  }

  it('OTEL_EXPORTER_OTLP_ENDPOINT with user:password@ likewise; telemetry.headers (the way to authenticate) are secrets: hidden by config, masked everywhere, sent to the receiver', async () => {
    const s = await runSetup()
    const env = { OTEL_EXPORTER_OTLP_ENDPOINT: `http://ops:${PASSWORD}@127.0.0.1:9` }
    const refused = await s.run(['config', '--json'], env)
    expect(refused.code).toBe(2)
    expect(refused.stderr).toMatch(/^ctxagent: OTEL_EXPORTER_OTLP_ENDPOINT carries a user name or password/)
    expect(refused.stdout + refused.stderr).not.toContain(PASSWORD)

    const seen: string[] = []
    const receiver = createServer((req, res) => {
      seen.push(String(req.headers.authorization))
      req.resume().on('end', () => res.writeHead(200, { 'content-type': 'application/json' }).end('{}'))
    })
    await new Promise<void>((resolve) => receiver.listen(0, '127.0.0.1', resolve))
    onTestFinished(() => new Promise<void>((resolve) => receiver.close(() => resolve())))
    const endpoint = `http://127.0.0.1:${(receiver.address() as AddressInfo).port}`
    writeFileSync(s.config, s.fake.configYaml(`telemetry:\n  otlp_endpoint: ${endpoint}\n  headers:\n    Authorization: Bearer ${PASSWORD}\n`))
    const json = await s.run(['config', '--json'])
    expect(json.code, json.stderr).toBe(0)
    expect(json.stdout).not.toContain(PASSWORD)
    expect(JSON.parse(json.stdout)).toMatchObject({ config: { telemetry: { headers: { Authorization: null } } } })
    expect(JSON.parse(json.stdout).secrets_set).toContain('telemetry.headers.Authorization')
    const yaml = await s.run(['config'])
    expect(yaml.stdout).toContain('Authorization: null # set (hidden)')
    expect(yaml.stdout).not.toContain(PASSWORD)
    s.fake.queue.push({ content: `the collector's key is ${PASSWORD}` })
    const run = await s.run(['run', '--task', 'x', '--workspace', s.ws])
    expect(run.code, run.stderr).toBe(0)
    expect(seen).toContain(`Bearer ${PASSWORD}`)
    expect(treeText(onlyTask(s.tree).dir)).not.toContain(PASSWORD)
    expect(treeText(onlyTask(s.tree).dir)).toContain('[SECRET:telemetry.headers.Authorization]')
  })
})

/** Every file under `dir`, as text. */
function treeText(dir: string): string {
  let out = ''
  for (const name of readdirSync(dir)) {
    const path = join(dir, name)
    const st = statSync(path)
    if (st.isDirectory()) out += treeText(path)
    else if (st.isFile()) out += readFileSync(path).toString('latin1')
  }
  return out
}
