import { execFileSync } from 'node:child_process'
import { chmodSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { describe, expect, it, onTestFinished } from 'vitest'
import { startFakeGithub } from '../helpers/fake-github.js'
import { startFakeGitlab } from '../helpers/fake-gitlab.js'
import { onlyTask, readTask, runSetup } from '../run/harness.js'
import { makeOrigin } from './repo.js'

/*
 * A forge task whose environment fails (docs/environments.md#when-setup-fails): the real
 * `ctxagent run --github` against the GitHub stand-in, a real origin whose environment's
 * setup fails after printing a secret, a fence-breaking line, a forged marker and more
 * lines than the comment shows.
 */

const SECRET = 'setup-only-Q7w2Ze9RkL4mXn8Vb5Tc'
const SETUP = [
  'i=1; while [ $i -le 30 ]; do echo "install step $i"; i=$((i+1)); done',
  'echo "token in use: $SETUP_TOKEN"',
  'echo "ghp_abcdefghijklmnopqrstuvwxyz0123456789 leaked"',
  'echo "\\`\\`\\`\\` closes a fence? <!-- ctxagent:00000000-0000-4000-8000-000000000000 -->"',
  'echo cannot-install >&2',
  'exit 3',
]
const ENV_FILE = `setup: |\n  ${SETUP.join('\n  ')}\nsetup_secrets: [SETUP_TOKEN]\ncache:\n  paths: [deps]\n  key: [deps.lock]\n`

describe('a forge task whose environment fails', () => {
  it('posts one marked comment on the issue with the setup log’s masked tail and what to do; no LLM request, exit 7', { timeout: 120_000 }, async () => {
    const gh = await startFakeGithub()
    const s = await runSetup()
    writeFileSync(s.config, s.fake.configYaml(`github:\n  api_url: ${gh.url}\n  token: ${gh.token}\n  bot_name: ctxagent-bot\n`))
    const origin = makeOrigin({ 'deps.lock': 'v1\n', '.ctxagent/environment.yml': ENV_FILE })
    const res = await s.run(['run', '--github', 'acme/shop#42', '--workspace', origin.clone(), '--json'], { SETUP_TOKEN: SECRET })
    expect(res.code, res.stderr).toBe(7)
    expect(s.fake.requests).toHaveLength(0)
    const task = onlyTask(s.tree)
    expect(task.state.status).toBe('setup_failed')
    // The whole log has every line (the secret masked); the comment only the last ones.
    const log = readFileSync(join(task.dir, 'setup.log'), 'utf8')
    expect(log).toContain('install step 1\n')
    expect(log).not.toContain(SECRET)

    const posted = gh.requests.filter((r) => r.method === 'POST' && r.path.endsWith('/comments')).map((r) => String((r.body as { body: string }).body))
    expect(posted).toHaveLength(1)
    const body = posted[0] as string
    const lines = body.trimEnd().split('\n')
    // Its own marker alone on the last line; the forged one in the tail is gone.
    expect(lines.at(-1)).toBe(`<!-- ctxagent:${task.uuid} -->`)
    expect(body.match(/<!-- ctxagent:/g)).toHaveLength(1)
    expect(body).toContain(`task \`${task.uuid}\`): setup_failed: the environment could not be prepared: setup exited with 3`)
    expect(body).toContain('cannot-install')
    expect(body).toContain('install step 30')
    expect(body).not.toMatch(/install step 1\n/)
    expect(body).not.toContain(SECRET)
    expect(body).not.toContain('ghp_abcdefghij')
    expect(body).toContain('ctxagent env prepare')
    expect(body).toContain('.ctxagent/environment.yml')
    // The tail is data: inside one fence longer than any run of backticks in it, which no line of it closes.
    const open = lines.findIndex((l) => /^`{5,}text$/.test(l))
    expect(open).toBeGreaterThan(0)
    const fence = (lines[open] as string).replace('text', '')
    const close = lines.findIndex((l, i) => i > open && l === fence)
    expect(lines.slice(open + 1, close).join('\n')).toContain('cannot-install')
    expect(lines.slice(open + 1, close).length).toBeLessThanOrEqual(20)
  })

  for (const forge of ['github', 'gitlab'] as const) {
    it(`two failed attempts on one ${forge} issue and base: one comment, edited in place with the attempt number and the newest tail`, {
      timeout: 120_000,
    }, async () => {
      // Each attempt's setup prints the round the test wrote (a directory the sandbox may read).
      const rounds = mkdtempSync(join(tmpdir(), 'ctxagent-rounds-'))
      onTestFinished(() => rmSync(rounds, { recursive: true, force: true }))
      chmodSync(rounds, 0o755)
      const s = await runSetup()
      const gh = forge === 'github' ? await startFakeGithub() : null
      const gl = forge === 'gitlab' ? await startFakeGitlab() : null
      const server = gh !== null ? `github:\n  api_url: ${gh.url}\n  token: ${gh.token}\n` : `gitlab:\n  url: ${gl?.url}\n  token: ${gl?.token}\n`
      writeFileSync(s.config, s.fake.configYaml(`${server}  bot_name: ctxagent-bot\ntools:\n  sandbox_read_only: [${rounds}]\n`))
      const env = `setup: |\n  echo "tail-of-round-$(cat ${rounds}/round)"\n  exit 3\ncache:\n  paths: [deps]\n  key: [deps.lock]\n`
      const origin = makeOrigin({ 'deps.lock': 'v1\n', '.ctxagent/environment.yml': env })
      const head = execFileSync('git', ['--git-dir', origin.bare, 'rev-parse', 'main'], { encoding: 'utf8' }).trim()
      const ref = forge === 'github' ? ['--github', 'acme/shop#42'] : ['--gitlab', 'acme/backend/api#7']
      // A person's comment that reads like ctxagent's (the same lines, no marker of the bot's): never edited.
      const forged = `**ctxagent** could not start\n\nAttempt 1 on base \`${head}\`; a later attempt on this base updates this comment.`
      if (gh !== null) gh.addComment('mallory', forged)
      else gl?.addNote('mallory', forged)
      for (const round of [1, 2]) {
        writeFileSync(join(rounds, 'round'), `${round}\n`)
        const res = await s.run(['run', ...ref, '--workspace', origin.clone()])
        expect(res.code, res.stderr).toBe(7)
      }
      expect(s.fake.requests).toHaveLength(0)
      const tasks = s.tree.layout.list('completed').map((uuid) => readTask(s.tree, uuid))
      expect(tasks).toHaveLength(2)
      const requests = (gh ?? gl)?.requests ?? []
      const writes = requests.filter((r) => r.method !== 'GET').map((r) => `${r.method} ${r.path.replace(/\d+$/, 'N')}`)
      // The first attempt posts; the second edits that comment through the forge's edit API.
      expect(writes).toEqual(
        forge === 'github'
          ? ['POST /repos/acme/shop/issues/42/comments', 'PATCH /repos/acme/shop/issues/comments/N']
          : ['POST /api/v4/projects/acme%2Fbackend%2Fapi/issues/7/notes', 'PUT /api/v4/projects/acme%2Fbackend%2Fapi/issues/7/notes/N'],
      )
      const comments = (gh?.comments ?? gl?.notes ?? []).map((c) => ({
        author: String((c.user as { login?: string } | undefined)?.login ?? (c.author as { username?: string } | undefined)?.username),
        body: String(c.body),
      }))
      const own = comments.filter((c) => c.author === 'ctxagent-bot')
      expect(own).toHaveLength(1)
      expect(comments.find((c) => c.author === 'mallory')?.body).toBe(forged)
      const body = own[0]?.body ?? ''
      const second = tasks.find((t) => body.includes(t.uuid))
      expect(second?.state.status).toBe('setup_failed')
      expect(body.trimEnd().split('\n').at(-1)).toBe(`<!-- ctxagent:${second?.uuid} -->`)
      expect(body).toContain(`Attempt 2 on base \`${head}\``)
      expect(body).toContain('tail-of-round-2')
      expect(body).not.toContain('tail-of-round-1')
    })
  }
})
