import { existsSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { describe, expect, it } from 'vitest'
import { startFakeGithub } from '../helpers/fake-github.js'
import { startFakeGitlab } from '../helpers/fake-gitlab.js'
import { runSetup } from './harness.js'
import { reachableRoot } from '../helpers/reachable.js'

const SERVER = join(reachableRoot(), 'node_modules/@modelcontextprotocol/server-filesystem/dist/index.js')

interface Doctor {
  ok: boolean
  checks: { name: string; status: string; message: string; hint?: string }[]
}

describe('ctxagent doctor', () => {
  it('a working setup: every line ok, the LLM answering a tool call, the MCP server listing tools, the tokens named', async () => {
    const s = await runSetup()
    const gh = await startFakeGithub()
    const gl = await startFakeGitlab()
    writeFileSync(
      s.config,
      s.fake.configYaml(
        `github:\n  api_url: ${gh.url}\n  token: ${gh.token}\ngitlab:\n  url: ${gl.url}\n  token: ${gl.token}\nmcp:\n  servers:\n    files:\n      command: ${process.execPath}\n      args: [${JSON.stringify(SERVER)}, ${JSON.stringify(s.ws)}]\n      timeout_seconds: 20\n`,
      ),
    )
    s.fake.queue.push({ calls: [{ name: 'report_ready', arguments: { ready: true } }] })
    // Started as a run in that workspace would start it: in the sandbox around it.
    const res = await s.run(['doctor', '--json', '--workspace', s.ws])
    expect(res.code, res.stderr + res.stdout).toBe(0)
    const out = JSON.parse(res.stdout) as Doctor
    expect(out.ok).toBe(true)
    const by = Object.fromEntries(out.checks.map((c) => [c.name, c]))
    expect(by.config).toMatchObject({ status: 'ok', message: expect.stringContaining(s.config) })
    expect(by.tree).toMatchObject({ status: 'ok', message: expect.stringMatching(/free/) })
    expect(by.llm).toMatchObject({ status: 'ok', message: expect.stringContaining('answers with a tool call') })
    expect(by['mcp files']).toMatchObject({ status: 'ok', message: expect.stringMatching(/started in the sandbox, \d+ tool\(s\): /) })
    expect(by.github).toMatchObject({ status: 'ok', message: 'token of ctxagent-bot, scopes: repo, read:org' })
    expect(by.gitlab).toMatchObject({ status: 'ok', message: 'token of ctxagent-bot, scopes: api' })
    expect(by.sandbox).toMatchObject({ status: 'ok', message: expect.stringMatching(/^bubblewrap .*network off/) })
    // The request offered the tool and was answered by a call to it.
    expect(JSON.stringify(s.fake.requests[0]?.body.tools)).toContain('report_ready')
    const text = await s.run(['doctor'])
    expect(
      text.stdout
        .split('\n')
        .filter(Boolean)
        .every((l) => /^(ok {2}|warn|FAIL|-- {2}) \S+/.test(l)),
    ).toBe(true)
  })

  it('a broken setup: each problem one line with what to do, exit 1', async () => {
    const s = await runSetup()
    const gh = await startFakeGithub()
    // A server that writes beside the tree before it fails: started in the sandbox, its write lands nowhere on the host.
    const escaped = join(s.tree.base, '..', 'escaped-from-doctor')
    const escapeScript = `try { require('fs').writeFileSync(${JSON.stringify(escaped)}, 'x') } catch {} console.error('cannot open the database'); process.exit(3)`
    writeFileSync(
      s.config,
      s.fake.configYaml(
        `github:\n  api_url: ${gh.url}\n  token: ghp_wrongtoken00000000000000000000000000\nmcp:\n  servers:\n    broken:\n      command: ${process.execPath}\n      args: ["-e", ${JSON.stringify(escapeScript)}]\n      timeout_seconds: 5\n`,
      ),
    )
    // The model answers in text: reachable, but no use to an agent.
    const res = await s.run(['doctor', '--json'])
    expect(res.code).toBe(1)
    const by = Object.fromEntries((JSON.parse(res.stdout) as Doctor).checks.map((c) => [c.name, c]))
    expect(by.llm).toMatchObject({
      status: 'fail',
      message: expect.stringContaining('answers, but not with a tool call'),
      hint: expect.stringContaining('tool calls'),
    })
    expect(by['mcp broken']).toMatchObject({ status: 'fail', message: expect.stringContaining('cannot open the database') })
    expect(existsSync(escaped)).toBe(false)
    expect(by.github).toMatchObject({ status: 'fail', message: expect.stringContaining('refuses the token (401)') })
    expect(by.gitlab).toMatchObject({ status: 'skip' })
  })

  it('an LLM that is not there: one line naming it', async () => {
    const s = await runSetup()
    writeFileSync(s.config, 'llm:\n  provider: openai\n  openai:\n    base_url: http://127.0.0.1:9/v1\n    api_key: k\n')
    const res = await s.run(['doctor', '--timeout', '5s'])
    expect(res.code).toBe(1)
    expect(res.stdout).toMatch(/^FAIL llm: cannot reach .*127\.0\.0\.1:9/m)
  })

  it('says which sandbox run_command gets: bubblewrap missing is a failure where the shell is on, the explicit none a warning', async () => {
    const s = await runSetup()
    writeFileSync(s.config, s.fake.configYaml('tools:\n  shell: true\n'))
    const missing = await s.run(['doctor', '--json'], { CTXAGENT_BWRAP: join(s.ws, 'no-bwrap') })
    const by = (res: typeof missing) => Object.fromEntries((JSON.parse(res.stdout) as Doctor).checks.map((c) => [c.name, c]))
    expect(by(missing).sandbox).toMatchObject({
      status: 'fail',
      message: expect.stringContaining('not installed'),
      hint: expect.stringContaining('apt-get install bubblewrap'),
    })
    expect(missing.code).toBe(1)
    writeFileSync(s.config, s.fake.configYaml('tools:\n  sandbox: none\n'))
    expect(by(await s.run(['doctor', '--json'])).sandbox).toMatchObject({ status: 'warn', message: expect.stringContaining('tools.sandbox: none') })
  })
})
