import { mkdirSync } from 'node:fs'
import { join } from 'node:path'
import { describe, expect, it } from 'vitest'
import { parseConfig } from '../../src/config/load.js'
import { notTheTaskRepository } from '../../src/delivery/push.js'
import type { TaskKey } from '../../src/storage/task/metadata.js'
import { onlyTask } from '../run/harness.js'
import { branches, deliverySetup, FIXED, git, write } from './setup.js'

describe('the origin a forge task pushes to', () => {
  it('is the repository the task came from: an origin naming another repository on the forge gets no push (nor the token)', { timeout: 120_000 }, async () => {
    const s = await deliverySetup('github')
    // What an earlier round's agent could leave in its clone: origin set to another repository the token can write.
    const other = join(s.bare, '..', 'infra.git')
    mkdirSync(other)
    git(['init', '--quiet', '--bare'], other)
    git(['remote', 'set-url', 'origin', `${s.gh?.url}/acme/infra.git`], s.ws)
    s.fake.queue.push(write('calc.js', FIXED), { content: 'Fixed add.' })
    const res = await s.cli(['run', '--github', 'acme/shop#42', '--workspace', s.ws, '--deliver', 'pr', '--json'])
    // Refused: completed, not delivered (exit 6, docs/contract.md §9).
    expect(res.code, res.stderr).toBe(6)
    const delivery = onlyTask(s.tree).state.delivery as { pushed: boolean; pr: unknown; refused: string }
    expect(delivery).toMatchObject({ pushed: false, pr: null })
    expect(delivery.refused).toMatch(/is not acme\/shop on .*, the repository the task came from/)
    expect(branches(other)).toEqual([])
    expect(s.auth.filter((a) => a !== null)).toEqual([])
  })

  it('the same repository on the forge’s host only, by any of git’s URL forms; a path on this host or a local task is not judged', () => {
    const config = parseConfig('gitlab:\n  url: https://git.example.org/gitlab\n')
    const gh: TaskKey = { task_source: 'github', owner: 'acme', repo: 'shop', task_type: 'issue', task_id: '42' }
    for (const ok of [
      'https://github.com/acme/shop.git',
      'https://github.com/Acme/Shop',
      'git@github.com:acme/shop.git',
      'ssh://git@github.com/acme/shop.git',
      '/srv/mirror/shop.git',
    ])
      expect(notTheTaskRepository(config, gh, ok), ok).toBeNull()
    for (const bad of [
      'https://github.com/acme/infra.git',
      'https://attacker.example/acme/shop.git',
      'git@attacker.example:acme/shop.git',
      'https://github.com/evil/acme/shop.git',
    ])
      expect(notTheTaskRepository(config, gh, bad), bad).toMatch(/is not acme\/shop on github.com/)
    const gl: TaskKey = { task_source: 'gitlab', owner: 'acme/backend', repo: 'api', task_type: 'issue', task_id: '7' }
    expect(notTheTaskRepository(config, gl, 'https://git.example.org/gitlab/acme/backend/api.git')).toBeNull()
    expect(notTheTaskRepository(config, gl, 'https://git.example.org/gitlab/evil/acme/backend/api.git')).not.toBeNull()
    expect(notTheTaskRepository(config, { ...gh, task_source: 'local', owner: null }, 'https://attacker.example/x.git')).toBeNull()
  })
})
