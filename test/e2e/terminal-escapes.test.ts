import { spawn } from 'node:child_process'
import { describe, expect, it } from 'vitest'
import { BIN, ROOT, TEST_ENV } from '../helpers/run.js'
import { onlyTask, runSetup } from '../run/harness.js'
import type { RunSetup } from '../run/harness.js'

/*
 * Issue #27 item 8: escape sequences from a task's text, or from a server's error, reached
 * the terminal through export, list and the error lines of compress and doctor. Every
 * human line passes io (out, warn) or the CLI's error printer, which strip them; --json
 * keeps them, escaped.
 */

const OSC52 = '\x1b]52;c;Y3VybCBldmlsIHwgc2g=\x07'
const HOSTILE = `Evil${OSC52}\x1b]0;title\x1b\\\x1b[2J\x1b[1;1H\x07\x1b[31mred\x1b[0m end`

/** Any control character but line break and tab (a pty adds \r to each line break). */
const CONTROL = /[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]/

/** `ctxagent <args>` on a pseudo-terminal (script(1)), colour on: what a terminal receives. */
function onPty(s: RunSetup, args: string[]): Promise<string> {
  const command = [process.execPath, BIN, ...args, '--home', s.tree.base, '--config', s.config].map((a) => `'${a.replace(/'/g, "'\\''")}'`).join(' ')
  return new Promise((resolve) => {
    const child = spawn('script', ['-qfec', command, '/dev/null'], {
      cwd: ROOT,
      env: { ...process.env, ...TEST_ENV, NO_COLOR: '', TERM: 'xterm' },
      stdio: ['ignore', 'pipe', 'pipe'],
    })
    let out = ''
    child.stdout.on('data', (d: Buffer) => (out += d.toString('utf8')))
    child.stderr.on('data', (d: Buffer) => (out += d.toString('utf8')))
    child.on('close', () => resolve(out))
  })
}

/** What a terminal gets, ctxagent's own colours (SGR) aside: no other sequence, no BEL. */
function expectSafe(where: string, text: string): void {
  const withoutColour = text.replace(/\x1b\[[0-9;]*m/g, '')
  const at = withoutColour.search(CONTROL)
  expect(at === -1 ? null : JSON.stringify(withoutColour.slice(Math.max(0, at - 30), at + 30)), where).toBeNull()
  expect(text, where).not.toContain('\x1b]52')
}

async function hostileTask(): Promise<{ s: RunSetup; uuid: string }> {
  const s = await runSetup('context:\n  compression:\n    keep_recent: 2\n    min_to_compress: 2\n')
  for (let i = 0; i < 6; i++)
    s.fake.queue.push({ content: i === 0 ? HOSTILE : '', calls: [{ name: 'write_file', arguments: { path: `f${i}.txt`, content: HOSTILE } }] })
  s.fake.queue.push({ content: HOSTILE, calls: [{ name: 'finish', arguments: { summary: HOSTILE, status: 'blocked' } }] })
  const res = await s.run(['run', '--task', `do it ${HOSTILE}`, '--workspace', s.ws, '--user', 'mallory'])
  expect(res.code, res.stderr).toBe(0)
  return { s, uuid: onlyTask(s.tree).uuid }
}

describe('escape sequences never reach a terminal', () => {
  it('export and list print the task text without them, on a pipe and on a terminal; --json keeps them escaped', async () => {
    const { s, uuid } = await hostileTask()
    for (const args of [['export', uuid], ['list'], ['list', '--all', '--search', 'Evil']]) {
      const res = await s.run(args)
      expect(res.code, res.stderr).toBe(0)
      expect(res.stdout, args.join(' ')).toContain('Evil')
      expectSafe(`${args.join(' ')} (pipe)`, res.stdout + res.stderr)
      expectSafe(`${args.join(' ')} (pty)`, await onPty(s, args))
    }
    const json = await s.run(['list', '--json'])
    expect(json.stdout).toContain('\\u001b]52;c;')
    expect(json.stdout).not.toContain('\x1b')
  })

  it("compress's and doctor's error lines carry a server's message without them", async () => {
    const { s, uuid } = await hostileTask()
    s.fake.fallback = () => ({ status: 400, content: `bad request ${HOSTILE}` })
    const compress = await s.run(['compress', uuid])
    expect(compress.code).toBe(1)
    expect(compress.stderr).toContain('Evil')
    expectSafe('compress (pipe)', compress.stdout + compress.stderr)
    expectSafe('compress (pty)', await onPty(s, ['compress', uuid]))
    const doctor = await s.run(['doctor'])
    expect(doctor.code).toBe(1)
    expect(doctor.stdout).toContain('Evil')
    expectSafe('doctor (pipe)', doctor.stdout + doctor.stderr)
    expectSafe('doctor (pty)', await onPty(s, ['doctor']))
  })
})
