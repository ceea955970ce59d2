import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { describe, expect, it, onTestFinished } from 'vitest'
import { parseConfig } from '../../src/config/load.js'
import { deliver } from '../../src/delivery/deliver.js'
import type { DeliveryInput } from '../../src/delivery/deliver.js'
import { recordRepository } from '../../src/delivery/repository.js'
import { giveToSandbox } from '../helpers/sandbox-owner.js'
import { branches, git } from './setup.js'

/** A clone checked out on a PR's head branch `fix-csv` (one commit over main), its origin a bare repository over a path. */
function prClone() {
  const root = mkdtempSync(join(tmpdir(), 'ctxagent-prhead-'))
  onTestFinished(() => rmSync(root, { recursive: true, force: true }))
  const seed = join(root, 'seed')
  mkdirSync(seed)
  git(['init', '--quiet', '-b', 'main'], seed)
  writeFileSync(join(seed, 'export.js'), 'rows.slice(0, -1)\n')
  git(['add', '.'], seed)
  git(['commit', '--quiet', '-m', 'v1'], seed)
  git(['switch', '--quiet', '-c', 'fix-csv'], seed)
  writeFileSync(join(seed, 'export.js'), 'rows.slice(0)\n')
  git(['commit', '--quiet', '-am', 'first fix'], seed)
  const bare = join(root, 'origin.git')
  git(['clone', '--quiet', '--bare', seed, bare], root)
  const ws = join(root, 'ws')
  git(['clone', '--quiet', '--branch', 'fix-csv', bare, ws], root)
  giveToSandbox(ws, root)
  return { root, bare, ws, head: git(['rev-parse', 'HEAD'], ws) }
}

/** What a task records at start (its repository), and the state's record of the commit made, across calls. */
async function started(ws: string, bare: string, head: string): Promise<() => DeliveryInput> {
  const repository = await recordRepository(ws)
  let made: string | null = null
  return () => ({
    ...input(bare, head),
    repository,
    made,
    remember: async (commit: string) => {
      made = commit
    },
  })
}

function input(bare: string, head: string): Omit<DeliveryInput, 'repository' | 'made' | 'remember'> {
  return {
    config: parseConfig(''),
    mode: 'pr',
    base: { commit: head, branch: 'fix-csv', remote: bare },
    target: { kind: 'pr-head', branch: 'fix-csv', pr: { number: 57, url: 'https://github.example/acme/shop/pull/57' } },
    uuid: '0b6f6c55-1d55-4f59-9d8e-6f1a2c3b4d5e',
    key: { task_source: 'github', owner: 'acme', repo: 'shop', task_type: 'pull_request', task_id: '57' },
    answer: 'Renamed the helper as the review asked.',
  }
}

describe("a task on the agent's own PR (target pr-head)", () => {
  it('pushes one more commit to the head branch: the earlier commits kept, no new branch or PR, the checkout on the new commit', async () => {
    const { bare, ws, head } = prClone()
    const task = await started(ws, bare, head)
    writeFileSync(join(ws, 'export.js'), 'rows.slice(0) // reviewed\n')
    const outcome = await deliver(task())
    expect(outcome).toEqual({
      mode: 'pr',
      branch: 'fix-csv',
      commit: expect.stringMatching(/^[0-9a-f]{40}$/),
      pushed: true,
      pr: { number: 57, url: 'https://github.example/acme/shop/pull/57' },
      refused: null,
    })
    const commit = outcome.commit as string
    expect(git(['--git-dir', bare, 'rev-parse', 'refs/heads/fix-csv'], '/')).toBe(commit)
    expect(git(['--git-dir', bare, 'rev-parse', `${commit}^`], '/')).toBe(head)
    expect(git(['--git-dir', bare, 'rev-list', '--count', 'main..fix-csv'], '/')).toBe('2')
    expect(branches(bare).sort()).toEqual(['fix-csv', 'main'])
    // The checkout follows its branch: HEAD on the new commit, nothing left to commit.
    expect(git(['rev-parse', 'HEAD'], ws)).toBe(commit)
    expect(git(['status', '--porcelain'], ws)).toBe('')
    // Again (a resume after a crash): the same commit, nothing more pushed.
    expect(await deliver(task())).toEqual(outcome)
    expect(git(['--git-dir', bare, 'rev-list', '--count', 'main..fix-csv'], '/')).toBe('2')
  })

  it('a head branch that moved on the remote is not forced: refused, the remote unchanged', async () => {
    const { root, bare, ws, head } = prClone()
    const task = await started(ws, bare, head)
    const other = join(root, 'other')
    git(['clone', '--quiet', '--branch', 'fix-csv', bare, other], root)
    writeFileSync(join(other, 'NOTES'), 'a person pushed meanwhile\n')
    git(['add', '.'], other)
    git(['commit', '--quiet', '-m', 'meanwhile'], other)
    git(['push', '--quiet', 'origin', 'fix-csv'], other)
    const theirs = git(['rev-parse', 'HEAD'], other)
    writeFileSync(join(ws, 'export.js'), 'rows.slice(0) // reviewed\n')
    const outcome = await deliver(task())
    expect(outcome.pushed).toBe(false)
    expect(outcome.refused).toMatch(/delivery failed: git push: .*fix-csv/)
    expect(git(['--git-dir', bare, 'rev-parse', 'refs/heads/fix-csv'], '/')).toBe(theirs)
  })
})
