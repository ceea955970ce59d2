import { readdirSync, readFileSync, statSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { describe, expect, it } from 'vitest'
import { startFakeGithub } from '../helpers/fake-github.js'
import { agentRequests, onlyTask, runSetup } from './harness.js'
import { reachableRoot } from '../helpers/reachable.js'

// Secrets of every kind ctxagent holds, none with a prefix the patterns know.
const API_KEY = 'Zq9-custom/key+with=chars-8812'
const FORGE_TOKEN = 'forge-token-without-prefix-31337'
const GH_ENV = 'plain-gh-token-value-77aa'
const DEPLOY_PASSWORD = 'correct horse battery staple 9'
const AWS_KEY = 'AKIAIOSFODNN7EXAMPLE'
const SECRETS = [API_KEY, encodeURIComponent(API_KEY), Buffer.from(API_KEY).toString('base64'), FORGE_TOKEN, GH_ENV, DEPLOY_PASSWORD, AWS_KEY]

/** Every file of the task tree, as text (but the config file the harness keeps there). */
function treeText(base: string): string {
  let out = ''
  for (const name of readdirSync(base)) {
    if (name === 'config.yaml') continue
    const path = join(base, name)
    const st = statSync(path)
    if (st.isDirectory()) out += treeText(path)
    else if (st.isFile()) out += readFileSync(path).toString('latin1')
  }
  return out
}

function expectAbsent(where: string, text: string): void {
  for (const secret of SECRETS) expect(text.includes(secret), `${where} carries ${secret}`).toBe(false)
}

describe('secrets at every exit', () => {
  it('a workspace file, the final answer and the log carry the config key, the forge token, the environment’s tokens and an AWS key: none leaves the process, the LLM included', async () => {
    const gh = await startFakeGithub()
    gh.token = FORGE_TOKEN
    const s = await runSetup()
    writeFileSync(
      s.config,
      s.fake
        .configYaml(`github:\n  api_url: ${gh.url}\n  token: ${FORGE_TOKEN}\n  bot_name: ctxagent-bot\n`)
        .replace('api_key: test-key', `api_key: "${API_KEY}"`),
    )
    writeFileSync(join(s.ws, 'deploy.env'), SECRETS.map((v, i) => `SECRET_${i}=${v}`).join('\n'))
    s.fake.queue.push({ calls: [{ name: 'read_file', arguments: { path: 'deploy.env' } }] })
    s.fake.queue.push({ calls: [{ name: 'edit_file', arguments: { path: 'deploy.env', old_string: `${AWS_KEY} nowhere`, new_string: 'x' } }] })
    s.fake.queue.push({
      content: `Done. The key is ${API_KEY} (${encodeURIComponent(API_KEY)}), the tokens ${FORGE_TOKEN} and ${GH_ENV}, password ${DEPLOY_PASSWORD}, AWS ${AWS_KEY}.`,
    })
    const res = await s.run(['run', '--github', 'acme/shop#42', '--workspace', s.ws, '--json', '--log-format', 'json'], { GH_TOKEN: GH_ENV, DEPLOY_PASSWORD })
    expect(res.code, res.stderr).toBe(0)
    const task = onlyTask(s.tree)
    expect(task.state.final_answer).toContain('[SECRET:llm.openai.api_key]')
    expectAbsent('the task tree', treeText(s.tree.base))
    expectAbsent('stdout (--json)', res.stdout)
    expectAbsent('stderr (the JSON log)', res.stderr)
    const comments = gh.requests.filter((r) => r.method === 'POST' || r.method === 'PATCH').map((r) => JSON.stringify(r.body))
    expect(comments.length).toBeGreaterThan(1)
    expectAbsent('the forge comments', comments.join('\n'))
    // What the model is sent is what is stored: the read_file result reached it masked.
    const requests = agentRequests(s.fake)
    expect(JSON.stringify(requests.at(-1)?.body.messages)).toContain('SECRET_0=[SECRET:llm.openai.api_key]')
    expectAbsent('the LLM requests', requests.map((r) => JSON.stringify(r.body.messages)).join('\n'))
  })

  it('an LLM error echoing the key pauses the task with the key masked in state, stderr, stdout and the paused comment', async () => {
    const gh = await startFakeGithub()
    gh.token = FORGE_TOKEN
    const s = await runSetup()
    writeFileSync(
      s.config,
      s.fake
        .configYaml(`github:\n  api_url: ${gh.url}\n  token: ${FORGE_TOKEN}\n  bot_name: ctxagent-bot\n`)
        .replace('api_key: test-key', `api_key: "${API_KEY}"`),
    )
    s.fake.fallback = () => ({ status: 400, content: `Incorrect API key provided: ${API_KEY}; token ${GH_ENV}` })
    const res = await s.run(['run', '--github', 'acme/shop#42', '--workspace', s.ws], { GH_TOKEN: GH_ENV })
    expect(res.code).not.toBe(0)
    expect(res.stderr).toContain('[SECRET:llm.openai.api_key]')
    expectAbsent('stdout', res.stdout)
    expectAbsent('stderr', res.stderr)
    expectAbsent('the task tree', treeText(s.tree.base))
    expectAbsent('the forge comments', gh.requests.map((r) => JSON.stringify(r.body)).join('\n'))
  })

  it('an MCP server’s env value sent back in a tool call’s arguments reaches the server masked', async () => {
    const MCP_SECRET = 'mcp-env-secret-value-4242'
    const server = join(reachableRoot(), 'node_modules', '@modelcontextprotocol', 'server-filesystem', 'dist', 'index.js')
    const s = await runSetup()
    writeFileSync(
      s.config,
      s.fake.configYaml(
        `mcp:\n  servers:\n    files:\n      command: ${process.execPath}\n      args: [${JSON.stringify(server)}, ${JSON.stringify(s.ws)}]\n      env:\n        FILES_TOKEN: ${MCP_SECRET}\n      timeout_seconds: 20\n`,
      ),
    )
    s.fake.queue.push(
      { calls: [{ name: 'files__write_file', arguments: { path: join(s.ws, 'out.txt'), content: `token=${MCP_SECRET}` } }] },
      { content: 'done' },
    )
    const res = await s.run(['run', '--task', 't', '--workspace', s.ws, '--log-format', 'json'])
    expect(res.code, res.stderr).toBe(0)
    expect(readFileSync(join(s.ws, 'out.txt'), 'utf8')).toBe('token=[SECRET:mcp.servers.files.env.FILES_TOKEN]')
    expect(treeText(s.tree.base) + res.stdout + res.stderr).not.toContain(MCP_SECRET)
  })

  it('a URL with user:password@ is refused at config load, without printing the password', async () => {
    const s = await runSetup()
    writeFileSync(s.config, s.fake.configYaml().replace(/base_url: http:\/\//, 'base_url: http://admin:s3cr3t-pass-in-url@'))
    const res = await s.run(['config'])
    expect(res.code).toBe(2)
    expect(res.stderr).toMatch(/^ctxagent: llm\.openai\.base_url carries a user name or password/)
    expect(res.stderr + res.stdout).not.toContain('s3cr3t-pass-in-url')
    const run = await s.run(['run', '--task', 'x', '--workspace', s.ws])
    expect(run.code).toBe(2)
    expect(s.tree.layout.list('running')).toEqual([])
  })
})
