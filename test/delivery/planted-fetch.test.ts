import { chmodSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { describe, expect, it, onTestFinished } from 'vitest'
import { giveToSandbox } from '../helpers/sandbox-owner.js'
import { onlyTask } from '../run/harness.js'
import { deliverySetup, FIXED, git, write } from './setup.js'

describe('the fetch that brings the branch into the workspace', () => {
  it('runs no core.alternateRefsCommand and follows no url.*.insteadOf planted in the workspace’s config', async () => {
    const s = await deliverySetup('path')
    const ran = mkdtempSync(join(tmpdir(), 'ctxagent-ran-'))
    chmodSync(ran, 0o777)
    onTestFinished(() => rmSync(ran, { recursive: true, force: true }))
    // An alternate (any repository) makes git ask core.alternateRefsCommand for its refs while fetching.
    const other = join(ran, 'other.git')
    git(['init', '--quiet', '--bare', other], ran)
    writeFileSync(join(s.ws, '.git', 'objects', 'info', 'alternates'), `${join(other, 'objects')}\n`)
    const script = join(s.ws, '.git', 'evil-refs')
    writeFileSync(script, `#!/bin/sh\ntouch ${ran}/alternate-refs\n`)
    chmodSync(script, 0o755)
    git(['config', 'core.alternateRefsCommand', script], s.ws)
    // A rewrite of delivery's staging directory (a path under the temporary directory) to somewhere else.
    git(['config', `url.${join(ran, 'elsewhere')}.insteadOf`, join(tmpdir(), 'ctxagent-deliver-')], s.ws)
    giveToSandbox(s.ws)
    s.fake.queue.push(write('calc.js', FIXED), { content: 'Fixed add.' })
    const res = await s.cli(['run', '--task', 'fix add', '--workspace', s.ws, '--deliver', 'branch', '--json'])
    expect(res.code, res.stderr).toBe(0)
    const delivery = onlyTask(s.tree).state.delivery as { branch: string; commit: string; refused: string | null }
    expect(delivery.refused).toBeNull()
    expect(git(['rev-parse', `refs/heads/${delivery.branch}`], s.ws)).toBe(delivery.commit)
    expect(readdirSync(ran).sort()).toEqual(['other.git'])
    // The plant is live: the workspace's own fetch runs it (so the test above could fail).
    git(['push', '--quiet', other, 'refs/heads/main:refs/heads/main'], s.ws)
    git(['fetch', '--quiet', other, 'refs/heads/main:refs/heads/again'], s.ws)
    expect(readdirSync(ran)).toContain('alternate-refs')
  })
})
