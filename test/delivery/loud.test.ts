import { chmodSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { describe, expect, it } from 'vitest'
import { markerOf } from '../../src/sources/marker.js'
import { onlyTask } from '../run/harness.js'
import { branches, deliverySetup, FIXED, write } from './setup.js'

const OTHER = '0b6f6c55-1d55-4f59-9d8e-6f1a2c3b4d5e'
const ANY_MARKER = /<!--\s*ctxagent\s*:[^>]*-->/g

describe('the pull request tells a reviewer what they need; markers are only ctxagent’s own', () => {
  it('the body: the answer first, Closes #N, files and lines, the last check and its exit, turns, time, cost, the task’s link; a pasted marker is gone, the last line the task’s own', {
    timeout: 180_000,
  }, async () => {
    const s = await deliverySetup('github', 'serve:\n  public_url: https://ctxagent.example.org/\npricing:\n  fake-model:\n    prompt: 1\n    completion: 2\n')
    const run = (command: string) => ({ calls: [{ name: 'run_command', arguments: { command } }] })
    s.fake.queue.push(
      write('calc.js', FIXED),
      write('notes/added.txt', 'one\ntwo\n', false),
      // A failing check, then a passing one (the last), then a command that checks nothing.
      run('test -f missing.js'),
      run('test -f calc.js && echo tests pass'),
      run('ls'),
      { content: `add() subtracted; it adds now.\n\n<!-- ctxagent:${OTHER} -->\n< !-- not one --> <!--ctxagent:${OTHER}-->` },
    )
    const res = await s.cli(['run', '--github', 'acme/shop#42', '--workspace', s.ws, '--deliver', 'pr', '--allow-shell', '--json'])
    expect(res.code, res.stderr).toBe(0)
    const task = onlyTask(s.tree)
    expect(JSON.parse(res.stdout)).toMatchObject({ delivery_result: 'delivered', delivery: { refused: null } })
    const gh = s.gh as NonNullable<typeof s.gh>
    const body = String((gh.pulls[0] as { body: string }).body)
    expect(body.startsWith('add() subtracted; it adds now.')).toBe(true)
    expect(body).toContain('Closes #42')
    expect(body).toContain('**Changed:** 2 files, +3 −1')
    expect(body).toContain('- `calc.js` +1 −1')
    expect(body).toContain('- `notes/added.txt` +2 −0')
    expect(body).toContain('**Checked:** `test -f calc.js && echo tests pass` → exit code 0')
    expect(body).toMatch(/\*\*Work:\*\* \d+ turns, \d+s, \$0\.\d\d · \[the task\]\(https:\/\/ctxagent\.example\.org\/tasks\/[0-9a-f-]{36}\)/)
    expect(body).toContain(`https://ctxagent.example.org/tasks/${task.uuid}`)
    // The answer's pasted markers are gone; the one marker is the task's, alone on the last line.
    expect(body).not.toContain(OTHER)
    expect(body.match(ANY_MARKER)).toEqual([`<!-- ctxagent:${task.uuid} -->`])
    expect(markerOf(body)).toBe(task.uuid)
    // The issue's comments (the status, the outcome with the answer) carry the task's marker only.
    for (const c of gh.comments) {
      expect(String(c.body)).not.toContain(OTHER)
      expect(markerOf(String(c.body))).toBe(task.uuid)
    }
  })
})

describe('a delivery that did not happen is loud', () => {
  it('refused (a secret): the task completes, run exits 6, --json says delivery_result refused and why, the JSON log’s last line exit_code 6, the issue’s comment says Not delivered', {
    timeout: 180_000,
  }, async () => {
    const s = await deliverySetup('github')
    const secret = 'Zq7vN2pL9xK4wR8tY6uB3mC5'
    s.fake.queue.push(write('deploy.cfg', `key=${secret}\n`, false), { content: 'Wrote the deploy config.' })
    const res = await s.cli(['run', '--github', 'acme/shop#42', '--workspace', s.ws, '--deliver', 'pr', '--json'], { DEPLOY_TOKEN: secret })
    expect(res.code, res.stderr).toBe(6)
    const outcome = JSON.parse(res.stdout) as { status: string; exit_code: number; delivery_result: string; delivery: { refused: string } }
    expect(outcome).toMatchObject({ status: 'completed', exit_code: 6, delivery_result: 'refused' })
    expect(outcome.delivery.refused).toContain('deploy.cfg holds DEPLOY_TOKEN')
    const last = JSON.parse(res.stderr.trim().split('\n').at(-1) as string) as { level: string; msg: string; exit_code: number }
    expect(last).toMatchObject({ level: 'error', exit_code: 6 })
    expect(last.msg).toContain('completed, but its change was not delivered: ')
    expect(onlyTask(s.tree).location).toBe('completed')
    const gh = s.gh as NonNullable<typeof s.gh>
    expect(gh.pulls).toHaveLength(0)
    expect(String(gh.comments.at(-1)?.body)).toContain('**Not delivered:** ')
    // Its labels say what happened: not done (docs/delivery.md#one-pull-request-per-issue), failed, as a fleet job's undelivered.
    const added = gh.requests.filter((r) => r.method === 'POST' && r.path === '/repos/acme/shop/issues/42/labels').map((r) => r.body)
    expect(added).toEqual([{ labels: ['ctxagent:processing'] }, { labels: ['ctxagent:failed'] }])
    expect((gh.issue.labels as { name: string }[]).map((l) => l.name)).not.toContain('ctxagent:done')
    expect(res.stdout + res.stderr).not.toContain(secret)
  })

  it('failed (the remote rejects the push): exit 6, delivery_result failed; on a terminal the summary line names the reason', {
    timeout: 180_000,
  }, async () => {
    const s = await deliverySetup('path')
    const hook = join(s.bare, 'hooks', 'pre-receive')
    writeFileSync(hook, '#!/bin/sh\necho "pushes are closed today" >&2\nexit 1\n')
    chmodSync(hook, 0o755)
    s.fake.queue.push(write('calc.js', FIXED), { content: 'Fixed add.' })
    const json = await s.cli(['run', '--task', 'fix add', '--workspace', s.ws, '--deliver', 'pr', '--json'])
    expect(json.code, json.stderr).toBe(6)
    expect(JSON.parse(json.stdout)).toMatchObject({
      status: 'completed',
      delivery_result: 'failed',
      delivery: { pushed: false, refused: expect.stringMatching(/^delivery failed: git push/) },
    })
    expect(branches(s.bare)).toEqual(['main'])
    // The human summary (stdout) and the error line (stderr) both say it.
    s.fake.queue.length = 0
    s.fake.queue.push(write('calc.js', `${FIXED}// again\n`), { content: 'Fixed add again.' })
    const text = await s.cli(['run', '--task', 'fix add', '--workspace', s.ws, '--deliver', 'pr', '--log-format', 'text'])
    expect(text.code, text.stderr).toBe(6)
    expect(text.stdout).toMatch(/^branch ctxagent\/\S+ \([0-9a-f]{12}\); not delivered: delivery failed: git push/m)
    expect(text.stderr).toMatch(/ctxagent: task \S+ completed, but its change was not delivered: delivery failed: git push/)
  })
})
